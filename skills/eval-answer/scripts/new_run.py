#!/usr/bin/env python3
"""Create a run folder: run.json (identity and pins) and an empty ledger, for one arm in one phase.

Examples:
  .venv/bin/python skills/eval-answer/scripts/new_run.py --set evals/bookshop --out runs/base1 --answerer-model claude-sonnet-4-5
  .venv/bin/python skills/eval-answer/scripts/new_run.py --set evals/bookshop --out runs/loop3 --answerer-model claude-sonnet-4-5 --phase loop --run-id bookshop-loop-03 --json
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli, vocab


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_set_argument(p)
    p.add_argument("--out", required=True, type=Path,
                   help="the run folder to create (must not exist, or be empty)")
    p.add_argument("--answerer-model", required=True, help="the model that answers the questions")
    p.add_argument("--phase", default="baseline", choices=vocab.PHASES,
                   help="the run's one phase (default: baseline)")
    p.add_argument("--run-id", help="the run id (default: <set>-<phase>-<UTC time>)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.core import commands
    from malloy_evals.core.errors import EXIT_OK
    from malloy_evals.ledger.run import Run
    run = Run.create(args.out, args.set_dir, args.answerer_model, phase=args.phase, run_id=args.run_id)
    result = {"run_dir": str(run.dir), "run_id": run.run_id, "phase": run.phase, "info": run.info,
              "next": [str(commands.answer_run(args.out, args.set_dir)),
                       str(commands.record_first(args.out, args.set_dir))]}
    cli.emit(result, as_json=args.json, render=lambda r: (
        f"created run {r['run_id']} ({r['phase']}) in {r['run_dir']}\n"
        f"answer it (an answerer: claude-code, anthropic:<model>, or --answerer-cmd):\n"
        f"  {r['next'][0]}\nor record an answer a session already made:\n  {r['next'][1]}"))
    return EXIT_OK


if __name__ == "__main__":
    cli.run(main)
