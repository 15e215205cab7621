#!/usr/bin/env python3
"""How often the judge agrees with the people who settled its verdicts, measured.

Every attempt with both a judge verdict (its live score) and a settled human verdict (a live
`human_verdict` from review.py) is a pair; `--set` adds the set's judge-regressions.jsonl fixtures
that record the judge's verdict. Prints the pair count, raw agreement, Cohen's kappa with a seeded
95% bootstrap interval, the confusion matrix over match / near_match / no_match / needs_human and
each disagreement (qid, judge verdict, human verdict, who, why). Exit 0; 1 when the figures cannot
be trusted (fewer than 10 pairs: "too few pairs to trust", or kappa undefined).

Examples:
  .venv/bin/python skills/eval-judge/scripts/judge_agreement.py --run evals/bookshop/runs/baseline --set evals/bookshop --json   # exit 1
  .venv/bin/python skills/eval-judge/scripts/judge_agreement.py --run evals/bookshop/runs/baseline --run evals/bookshop/runs/candidate   # exit 1
"""

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.report.stats import DEFAULT_RESAMPLES, DEFAULT_SEED


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("--run", action="append", required=True, type=cli.existing_dir, metavar="RUN",
                   dest="runs", help="a run folder (repeat for more runs)")
    cli.add_set_argument(p, required=False,
                         help="also read this set's judge-regressions.jsonl")
    p.add_argument("--seed", type=cli.count, default=DEFAULT_SEED,
                   help=f"bootstrap seed (default {DEFAULT_SEED}; printed with the interval)")
    cli.add_count_argument(p, "--resamples", default=DEFAULT_RESAMPLES,
                           help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})")
    cli.add_check(p, cli.distinct_folders("--runs", why="a run folder is named twice"))
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.report.agreement import judge_agreement, render_text
    report = judge_agreement(args.runs, args.set_dir, seed=args.seed, resamples=args.resamples)
    cli.emit(report, as_json=args.json, render=render_text)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
