#!/usr/bin/env python3
"""Group a run's failed attempts by score_retrieval's where_to_fix and missing entity: the free first look.

Writes `<run>/clusters-mechanical.jsonl` (never the diagnosed issues). No model is called. Exit 0
with the groups, 3 when the run or set cannot be read.

Examples (on a scored copy of a recorded run, made by the first three lines):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-diagnose/scripts/cluster_failures.py --run runs/baseline --set evals/bookshop
  .venv/bin/python skills/eval-diagnose/scripts/cluster_failures.py --run runs/baseline --set evals/bookshop --json
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
    cli.add_run_argument(p, help="the scored run folder")
    cli.add_set_argument(p)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.diagnose.mechanical import cluster_failures, render_mechanical
    result = cluster_failures(args.run, args.set_dir)
    cli.emit(result, as_json=args.json, render=render_mechanical)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
