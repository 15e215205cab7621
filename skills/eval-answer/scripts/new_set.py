#!/usr/bin/env python3
"""Scaffold a first eval set around a Malloy package: model, data, truth package, example cases.

Writes NAME's set folder outside the kit's checkout (default ~/malloy-evals-sets/NAME, or --out
DIR; a folder inside the checkout must be one git ignores, such as runs/...): model/ (a copy of
--model DIR), data/ (a copy of --data DIR, the tables the model reads as ../data/FILE),
truth/truth.malloy (one raw source per table, where canonical queries run), set.json, and
cases.jsonl with one case of each golden kind (scalar, rows, criteria, unanswerable), each with a
`notes` field saying what to change. The scalar and rows goldens are derived by running their
canonical queries on truth/ (provisional until promoted). Prints the next commands. Exit 0
written, 2 a wrong command line (an --out that would dirty the checkout included), 3 no Node
runtime or an unreadable package. README.md, "Write your first set", walks the whole loop.

Examples:
  .venv/bin/python skills/eval-answer/scripts/new_set.py myshop --model evals/bookshop/model --data evals/bookshop/data --out runs/myshop
  .venv/bin/python skills/eval-answer/scripts/new_set.py myshop2 --model evals/bookshop/model --data evals/bookshop/data --out runs/myshop2 --json
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.sets.scaffold import DEFAULT_PARENT


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("name", metavar="NAME", help="the set's name (letters, digits, _ . -)")
    p.add_argument("--model", required=True, type=cli.existing_dir, metavar="DIR",
                   help="the Malloy package under test (a folder with its .malloy files)")
    p.add_argument("--data", type=cli.existing_dir, metavar="DIR",
                   help="the tables the model reads (CSV, Parquet, JSON), copied into data/")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help=f"where to write the set (default {DEFAULT_PARENT}/NAME)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.sets.scaffold import render_text, scaffold
    made = scaffold(args.name, args.model, out=args.out, data=args.data)
    cli.emit(made, as_json=args.json, render=render_text)
    return made.exit_code


if __name__ == "__main__":
    cli.run(main)
