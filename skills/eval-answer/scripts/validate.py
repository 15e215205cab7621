#!/usr/bin/env python3
"""Check run folders: run.json, every ledger line, one phase, voids, at most one live score per attempt.

Exit 0 clean, 1 on any error (a missing run.json or a torn line included), 3 when a folder cannot
be read. Unknown fields and reported_calls > host_tool_uses are warnings and never change the exit.

Examples:
  .venv/bin/python skills/eval-answer/scripts/validate.py evals/bookshop/runs/baseline
  .venv/bin/python skills/eval-answer/scripts/validate.py evals/bookshop/runs/baseline evals/bookshop/runs/leaky --json
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
    p.add_argument("run_dirs", nargs="+", type=cli.existing_dir, metavar="RUN_DIR",
                   help="run folders to check (a folder without run.json is a finding, exit 1)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.ledger.validate import ValidationReport, validate_runs
    report = validate_runs(args.run_dirs)
    cli.emit(report, as_json=args.json, render=ValidationReport.render)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
