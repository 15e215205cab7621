#!/usr/bin/env python3
"""Install the Node Malloy runtime the kit re-executes queries with, and say where it is.

From an installed package (pip, pipx, uv tool) the kit's pinned Node project is installed into
the user's cache folder ($XDG_CACHE_HOME or ~/.cache, malloy-evals/node-runtime/), never into
site-packages, with npm from the package's own package.json and lockfile; the first command
that re-executes a query does the same by itself. --with-claude-code adds the pinned Claude Code
CLI (about 380 MB), which only `run_answers.py --answerer claude-code` runs: scoring does not
need it. From a checkout, `make setup` installs the runtime and this only reports it.
Exit 0 when it is installed, 3 when it cannot be (no Node 20+ or npm, a failed npm install).

Examples:
  malloy-evals setup_runtime --with-claude-code
  .venv/bin/python skills/eval-answer/scripts/setup_runtime.py --json
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
    p.add_argument("--with-claude-code", action="store_true",
                   help="also install the pinned Claude Code CLI (for --answerer claude-code)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.endpoint.runtime_install import RuntimeStatus, install
    status = install(with_claude_code=args.with_claude_code, progress=cli.progress)
    cli.emit(status, as_json=args.json, render=RuntimeStatus.render)
    return 0


if __name__ == "__main__":
    cli.run(main)
