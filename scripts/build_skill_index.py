#!/usr/bin/env python3
"""Regenerate SKILL_INDEX.md from every skills/*/SKILL.md front matter, checking the front matter.

Exit 0 when the index is current (or was rewritten), 1 when a front matter is invalid or, with
--check, when SKILL_INDEX.md is stale.

Examples:
  .venv/bin/python scripts/build_skill_index.py --check
  .venv/bin/python scripts/build_skill_index.py   # rewrites SKILL_INDEX.md in the checkout
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable by path

from malloy_evals.core import cli, commands
from malloy_evals.core.skill_index import IndexResult, build_index


def render(result: IndexResult) -> str:
    """A line saying what happened, then the problems."""
    if result.stale:
        head = f"SKILL_INDEX.md is stale: run {commands.build_skill_index()}"
    elif result.written:
        head = f"SKILL_INDEX.md written ({len(result.skills)} skills)"
    else:
        head = f"SKILL_INDEX.md is current ({len(result.skills)} skills)"
    if result.problems:
        head += f"; {len(result.problems)} front-matter problem(s)"
    return "\n".join([head, *(f"  error: {p}" for p in result.problems)])


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("--check", action="store_true", help="compare only; exit 1 when stale")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = build_index(check=args.check)
    cli.emit(result, as_json=args.json, render=render)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
