#!/usr/bin/env python3
"""Check a set folder: set.json, every case and golden, qids, golden files, entity ids, judge fixtures.

When a golden has mustNotUseAllowedIn and the set's model/ compiles here (Node), each name it
gives must be a definition of that model; when the model cannot be read, a warning says why.
Exit 0 clean, 1 on any error, 3 when the folder cannot be read. Unknown fields are warnings (a
set written for another harness must load) and never change the exit code.

Examples:
  .venv/bin/python skills/eval-answer/scripts/validate_set.py evals/bookshop
  .venv/bin/python skills/eval-answer/scripts/validate_set.py evals/bookshop --json
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
    p.add_argument("set_dir", type=cli.existing_dir, metavar="SET_DIR",
                   help="the set folder to check")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.checks.model_definitions import check_set_with_model
    from malloy_evals.core.findings import FolderReport
    report = check_set_with_model(args.set_dir)
    cli.emit(report, as_json=args.json, render=FolderReport.render)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
