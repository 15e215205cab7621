#!/usr/bin/env python3
"""Prove the judge cannot be gamed: eight canned answers per judge-calibration.jsonl entry (SPEC 7.4).

`empty` must end null not_submitted without a judge call; `echo`, `vague`, `known_wrong`,
`subtle_wrong`, `injection` and `stuffed` must end no_match; `known_right` must end match. Each
non-empty answer is judged --samples times and counts only when every sample agrees. The offline
integrity rules (four hand-written answers non-empty and pairwise different, `commits` found in the
rubric or mustNotUse) are checked first. Exit 0 all pass, 1 on any mismatch or integrity failure,
3 when it could not judge (a missing or stale recording: the message names the re-record command).

Examples:
  .venv/bin/python skills/eval-judge/scripts/calibrate_judge.py --set evals/bookshop --judge replay --json
  .venv/bin/python skills/eval-judge/scripts/calibrate_judge.py --set evals/bookshop --judge anthropic:claude-haiku-4-5 --samples 3 --record runs/calibration   # needs an API key
  .venv/bin/python skills/eval-judge/scripts/calibrate_judge.py --set evals/bookshop --judge anthropic:claude-haiku-4-5 --dry-run   # sends nothing; no API key needed
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.core import cli
from malloy_evals.judge.calibration import calibrate, render_calibration
from malloy_evals.judge.doctrine import add_judge_retries
from malloy_evals.judge.providers.select import add_provider_arguments, provider_from_args
from malloy_evals.sets.eval_set import load_set


def main(argv=None) -> int:
    p = cli.parser(__doc__)
    p.add_argument("--set", required=True, help="the set folder")
    p.add_argument("--samples", type=int, default=3,
                   help="judgements per non-empty answer; all must agree (default 3)")
    p.add_argument("--only", type=cli.split_qids, default=None, help="q1,q2: these entries only")
    add_judge_retries(p)
    add_provider_arguments(p, "--judge", host=False)
    cli.add_json_flag(p)
    args = p.parse_args(argv)
    eval_set = load_set(args.set)
    provider = provider_from_args(args, "judge", role="judge", set_dir=Path(args.set))
    report = calibrate(eval_set, provider, samples=args.samples, only=args.only,
                       judge_retries=args.judge_retries)
    cli.emit(report, as_json=args.json, render=render_calibration)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
