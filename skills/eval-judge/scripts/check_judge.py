#!/usr/bin/env python3
"""Re-judge the settled predictions of judge-regressions.jsonl through a run's code path.

Per fixture: `ok`, `FAIL` (a stable disagreement with the settled verdict), `FLAKY` (samples
disagree), `stale` (its goldenRevision is no longer the case's: the key moved, not judged),
`unpinned` (no goldenRevision; judged and agreeing), `unresolved` (its qid is not a case) or
`error` (could not be judged). Exit 1 on any FAIL, FLAKY or unresolved, 3 when a fixture could not
be judged or fixtures exist and none was judged, else 0 (no fixture file is 0).

Examples:
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --judge replay --json
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --judge replay --only bk_total_revenue
  .venv/bin/python skills/eval-judge/scripts/check_judge.py --set evals/bookshop --judge anthropic:claude-haiku-4-5 --repeat 3 --record runs/regressions   # needs ANTHROPIC_API_KEY
"""

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path[:0] = [str(d / "scripts") for d in Path(__file__).resolve().parents
                if (d / "scripts" / "malloy_evals").is_dir()][:1]  # the kit's library, found upward

from malloy_evals.core import cli
from malloy_evals.judge.calibration import check_regressions, render_regressions
from malloy_evals.judge.doctrine import add_judge_retries
from malloy_evals.llm.select import add_provider_arguments, provider_from_args
from malloy_evals.sets.eval_set import load_set


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_set_argument(p)
    cli.add_count_argument(p, "--repeat", default=1, help="judgements per fixture (default 1)")
    p.add_argument("--fixtures", type=cli.existing_file, default=None,
                   help="a fixtures file (default <set>/judge-regressions.jsonl)")
    cli.add_only_argument(p, what="fixtures (qids or fixture ids)")
    add_judge_retries(p)
    add_provider_arguments(p, "--judge", host=False)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    provider = provider_from_args(args, "judge", role="judge", set_dir=args.set_dir)
    eval_set = load_set(args.set_dir)
    report = check_regressions(eval_set, provider, repeat=args.repeat, only=args.only,
                               fixtures=args.fixtures,
                               judge_retries=args.judge_retries)
    cli.emit(report, as_json=args.json, render=render_regressions)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
