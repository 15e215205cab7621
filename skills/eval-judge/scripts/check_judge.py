#!/usr/bin/env python3
"""Re-judge the settled predictions of judge-regressions.jsonl through a run's code path, or
(--reverify RUN) re-judge a random sample of a run's scored attempts.

Per fixture: `ok`, `FAIL` (a stable disagreement with the settled verdict), `FLAKY` (samples
disagree), `stale` (its goldenRevision is no longer the case's: the key moved, not judged),
`unpinned` (no goldenRevision; judged and agreeing), `unresolved` (its qid is not a case) or
`error` (could not be judged). When fixtures record the judge's verdict, the judge's agreement
with the people who settled them is printed beside (judge_agreement.py). Exit 1 on any FAIL, FLAKY
or unresolved, 3 when a fixture could not be judged or fixtures exist and none was judged, else 0
(no fixture file is 0).

--reverify RUN --sample N [--seed S]: N of the run's judged attempts, drawn with the seed, are
judged again with --judge (any provider), each on the prediction its scoring re-executed. Each re-judgement is appended as a `reverify` event (a score
is never replaced); the disagreement rate is printed with its 95% Wilson interval and each
disagreement. Exit 1 when the interval's lower bound is above --max-disagreement (default 0.1),
3 when nothing could be re-judged, else 0. --dry-run counts the calls; --max-cost-usd caps them.

Examples (the reverify lines on a scored copy of the baseline run, made by the lines before):
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --judge replay --json
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --judge replay --only bk_total_revenue
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --judge anthropic:claude-haiku-4-5 --repeat 3 --record runs/regressions   # needs ANTHROPIC_API_KEY
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --reverify runs/baseline --sample 5 --seed 7 --judge replay
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --reverify runs/baseline --sample 5 --judge anthropic:claude-haiku-4-5 --dry-run --json
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --reverify runs/baseline --sample 10 --judge anthropic:claude-haiku-4-5 --max-cost-usd 0.50   # needs ANTHROPIC_API_KEY
"""

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.judge.doctrine import (
    DEFAULT_MAX_DISAGREEMENT,
    add_judge_retries,
    add_judge_samples,
)
from malloy_evals.llm.select import add_provider_arguments
from malloy_evals.report.stats import DEFAULT_SEED


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError(text)
    return value


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_set_argument(p)
    cli.add_count_argument(p, "--repeat", default=1, help="judgements per fixture (default 1)")
    p.add_argument("--fixtures", type=cli.existing_file, default=None,
                   help="a fixtures file (default <set>/judge-regressions.jsonl)")
    cli.add_only_argument(p, what="fixtures (qids or fixture ids)")
    p.add_argument("--reverify", type=cli.existing_dir, default=None, metavar="RUN",
                   help="re-judge a random sample of this run's scored attempts instead")
    cli.add_count_argument(p, "--sample", default=None,
                           help="--reverify: how many judged attempts to re-judge")
    p.add_argument("--seed", type=cli.count, default=DEFAULT_SEED,
                   help=f"--reverify: the sample's seed (default {DEFAULT_SEED})")
    p.add_argument("--max-disagreement", type=_fraction, default=DEFAULT_MAX_DISAGREEMENT,
                   metavar="FRACTION",
                   help="--reverify: exit 1 when the disagreement's lower bound is above this "
                        f"(default {DEFAULT_MAX_DISAGREEMENT})")
    add_judge_retries(p)
    add_judge_samples(p)
    add_provider_arguments(p, "--judge")
    cli.add_check(p, _combination)
    cli.add_json_flag(p)
    return p


def _combination(args) -> str | None:
    if args.reverify is None:
        if args.sample is not None:
            return "--sample goes with --reverify RUN"
        if args.judge == "host":
            return "--judge host re-judges a run: use it with --reverify RUN"
    elif args.sample is None:
        return "--reverify needs --sample N"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.llm.select import provider_from_args
    from malloy_evals.sets.eval_set import load_set
    from malloy_evals.workflow import reverify as rv

    provider = provider_from_args(args, "judge", role="judge", set_dir=args.set_dir,
                                  host_dir=args.reverify)
    if args.reverify is not None:
        report = rv.reverify_at(args.reverify, args.set_dir, provider=provider, sample=args.sample,
                                seed=args.seed, max_disagreement=args.max_disagreement,
                                judge_retries=args.judge_retries, dry_run=args.dry_run,
                                judge_samples=args.judge_samples)
        cli.emit(report, as_json=args.json, render=rv.render_text)
        return report.exit_code
    check = rv.check_judge(load_set(args.set_dir), provider, repeat=args.repeat, only=args.only,
                           fixtures=args.fixtures, judge_retries=args.judge_retries)
    cli.emit(check, as_json=args.json, render=rv.render_check)
    return check.exit_code


if __name__ == "__main__":
    cli.run(main)
