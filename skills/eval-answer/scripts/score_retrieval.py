#!/usr/bin/env python3
"""Score what get_context delivered to each attempt of a run, and where a failure's fix goes.

One row per attempt: the route of every expected entity (exact > alias > in_docs > missing),
recall over the case's groups, precision, noise, effective coverage, and, for failed attempts
only (verdict no_match), the where_to_fix attribution; then a summary with the cascade. With
--append it writes one retrieval_score event per attempt, voiding each attempt's earlier one.
Exit 0 scored (a low recall is a result); 3 unreadable input or a folder without run.json.

Examples (on a copy of a recorded run; runs/coverage.json is what check_coverage.py --out wrote):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/
  .venv/bin/python skills/eval-answer/scripts/score_retrieval.py --run runs/baseline --set evals/bookshop --json
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader replay --out runs/coverage.json
  .venv/bin/python skills/eval-answer/scripts/score_retrieval.py --run runs/baseline --set evals/bookshop --coverage runs/coverage.json --append
  .venv/bin/python skills/eval-answer/scripts/check_findable.py --set evals/bookshop --local --out runs/findable.json
  .venv/bin/python skills/eval-answer/scripts/score_retrieval.py --run runs/baseline --set evals/bookshop --findable runs/findable.json
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_run_argument(p)
    cli.add_set_argument(p)
    cli.add_coverage_argument(p, use="its measured verdicts beat the authored coverage")
    p.add_argument("--findable", type=cli.existing_file, default=None, metavar="REPORT",
                   help="a check_findable.py --json report: a failure whose missing entity is "
                        "unfindable is the set's or the model's, never the answerer's")
    p.add_argument("--append", action="store_true",
                   help="write one retrieval_score event per attempt (voiding the earlier live one)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.retrieval import (
        dump_json,
        load_coverage_report,
        render_text,
        score_retrieval,
    )
    coverage = load_coverage_report(args.coverage) if args.coverage is not None else None
    result = score_retrieval(args.run, args.set_dir, coverage=coverage, append=args.append,
                             findable=args.findable)
    for warning in result.warnings:
        cli.progress(f"warning: {warning}")
    if result.summary["attributed"] != result.summary["failures"]:
        cli.progress("warning: attributed differs from failures; this is a bug in the scorer")
    # One compact JSON document with --json (see dump_json), else the table.
    cli.emit(result, as_json=False, render=dump_json if args.json else render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
