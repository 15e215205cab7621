#!/usr/bin/env python3
"""Prove the judge cannot be gamed: eight canned answers per judge-calibration.jsonl entry.

`empty` must end null not_submitted without a judge call; `echo`, `vague`, `known_wrong`,
`subtle_wrong`, `injection` and `stuffed` must end no_match; `known_right` must end match. Each
non-empty answer is judged --samples times and counts only when every sample agrees. The offline
integrity rules (four hand-written answers non-empty and pairwise different, `commits` found in the
rubric or mustNotUse) are checked first. Exit 0 all pass, 1 on any mismatch or integrity failure,
3 when it could not judge (a missing or stale recording: the message names the re-record command).

Examples:
  .venv/bin/python skills/eval-judge/scripts/calibrate_judge.py --set evals/bookshop --judge replay --json
  .venv/bin/python skills/eval-judge/scripts/calibrate_judge.py --set evals/bookshop --judge anthropic:claude-haiku-4-5 --dry-run   # counts calls and tokens, calls nothing
  .venv/bin/python skills/eval-judge/scripts/calibrate_judge.py --set evals/bookshop --judge anthropic:claude-haiku-4-5 --samples 3 --record runs/calibration   # needs ANTHROPIC_API_KEY
"""

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.judge.doctrine import add_judge_retries
from malloy_evals.llm.select import add_provider_arguments


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_set_argument(p)
    cli.add_count_argument(p, "--samples", default=3,
                           help="judgements per non-empty answer; all must agree (default 3)")
    cli.add_only_argument(p, what="calibration entries (by qid)")
    add_judge_retries(p)
    add_provider_arguments(p, "--judge", host=False)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.judge.calibration import calibrate, render_calibration
    from malloy_evals.llm.select import provider_from_args
    from malloy_evals.sets.eval_set import load_set
    provider = provider_from_args(args, "judge", role="judge", set_dir=args.set_dir)
    eval_set = load_set(args.set_dir)
    report = calibrate(eval_set, provider, samples=args.samples, only=args.only,
                       judge_retries=args.judge_retries)
    cli.emit(report, as_json=args.json, render=render_calibration)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
