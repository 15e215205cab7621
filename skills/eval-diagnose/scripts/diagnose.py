#!/usr/bin/env python3
"""Decide the cause code and owner of each failed case of a scored run, and cluster them into issues.

Appends one `issue` + `issue_status open` per cluster, voiding only the issues diagnose.py wrote
earlier for the run, then rewrites the run's RESULTS.md, summary.json and report.html with them.
Exit 0 when it wrote its result (nothing selected included), 3 when the run or set cannot be
read, the run was made on another set (both named), or cases were selected and none could be
diagnosed, 2 on usage errors.

Examples (on a copy of a recorded run, scored as the demo scores it by the first four lines;
the recorded diagnoser replays for that scoring):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader replay --out runs/coverage.json
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge replay --local --coverage runs/coverage.json
  .venv/bin/python skills/eval-diagnose/scripts/diagnose.py --run runs/baseline --set evals/bookshop --diagnoser replay --json
  .venv/bin/python skills/eval-diagnose/scripts/diagnose.py --run runs/baseline --set evals/bookshop --diagnoser host --emit
  .venv/bin/python skills/eval-diagnose/scripts/diagnose.py --run runs/baseline --set evals/bookshop --diagnoser anthropic:claude-sonnet-4-5 --verdicts no_match,near_match --limit 5   # needs ANTHROPIC_API_KEY
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.diagnose.selection import SPLITS, verdicts_problem
from malloy_evals.llm import select as providers


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_run_argument(p, help="the scored run folder")
    cli.add_set_argument(p)
    providers.add_provider_arguments(p, "--diagnoser")
    cli.add_only_argument(p)
    p.add_argument("--verdicts", type=cli.split_qids, default=["no_match"], metavar="V1,V2",
                   help="verdicts to diagnose: no_match (default), near_match, needs_human")
    cli.add_check(p, lambda a: verdicts_problem(a.verdicts))
    p.add_argument("--split", default="dev", choices=SPLITS,
                   help="which split to diagnose (default dev: holdout stays unseen)")
    cli.add_count_argument(p, "--limit", default=None, minimum=0,
                           help="diagnose at most N cases (0 selects nothing); the rest are "
                                "counted as excluded")
    cli.add_coverage_argument(p, use="shown to the diagnoser as the measured coverage")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.diagnose.run import diagnose_run, render_text
    from malloy_evals.workflow.outputs import RunOutputs

    def provider_factory(run_dir: Path):
        return providers.provider_from_args(args, "diagnoser", role="diagnose",
                                            set_dir=args.set_dir, host_dir=run_dir)

    # The run, the set it was made on and the coverage report, loaded and checked before any call.
    outputs = RunOutputs.load(args.run, args.set_dir, coverage=args.coverage)
    result = diagnose_run(outputs.run, outputs.eval_set, outputs.view, provider_factory,
                          only=args.only, verdicts=args.verdicts, split=args.split,
                          limit=args.limit, coverage=outputs.coverage, progress=cli.progress)
    if result.issues_appended or result.issues_voided or result.issues_fixed:
        written = outputs.write()  # RESULTS.md, summary.json and report.html name the issues
        cli.progress(f"page: {written.page.path}")
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
