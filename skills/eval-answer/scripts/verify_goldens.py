#!/usr/bin/env python3
"""Re-derive every value golden from the truth package and report drift.

Each scalar and rows golden's canonicalQuery runs on the set's truth package through the kit's
Malloy runtime (trusted: unrestricted compile) and is compared with the stored value: the golden's
`round`, else relative 1e-6; rows as a multiset; columns by name. Exit 0 when every value golden
re-derives, 1 on drift (naming the case), 3 when a check could not run (runtime missing, query
error, no truth package).

Examples:
  .venv/bin/python skills/eval-answer/scripts/verify_goldens.py --set evals/bookshop
  .venv/bin/python skills/eval-answer/scripts/verify_goldens.py --set evals/bookshop --qid bk_total_revenue,bk_revenue_by_genre --json
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
    cli.add_set_argument(p)
    p.add_argument("--qid", action="append", default=[], type=cli.split_qids, metavar="Q",
                   help="check only this case (repeatable, or comma-separated); a qid not in the "
                        "set is exit 3")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.sets.goldens import render_text, verify_goldens
    qids = [q for value in args.qid for q in value]
    report = verify_goldens(args.set_dir, qids or None)
    cli.emit(report, as_json=args.json, render=render_text)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
