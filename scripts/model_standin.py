#!/usr/bin/env python3
"""Serve model scripts as a loopback Messages API, so a real client runs offline (reference/model-scripts.md).

Point the client at it with ANTHROPIC_BASE_URL=http://127.0.0.1:PORT and any key. Each request
is matched to the script whose `question` its first user message holds and gets the turn owed
next; a request no script answers is refused with HTTP 400 and says why. Every request is
logged as one JSON line (--request-log). The first line on stdout is
`listening http://127.0.0.1:PORT` once the server accepts connections; it serves until stopped.

Examples:
  .venv/bin/python scripts/model_standin.py --scripts evals/bookshop/model-scripts --port 8765 --request-log runs/standin.jsonl   # serves until stopped
  .venv/bin/python scripts/model_standin.py --scripts evals/bookshop/model-scripts --check
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the library, runnable by path

from malloy_evals.core import cli
from malloy_evals.llm import standin


def _existing(value: str) -> Path:
    """argparse type: a script file or a folder of them that must exist (exit 2 otherwise)."""
    if not Path(value).exists():
        raise argparse.ArgumentTypeError(f"{value}: no such file or folder")
    return Path(value)


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("--scripts", required=True, nargs="+", type=_existing,
                   help="model script files (JSON) or folders of them")
    p.add_argument("--port", type=cli.count, default=0,
                   help="loopback port to listen on (default 0: any free port, printed)")
    p.add_argument("--request-log", type=Path, help="append one JSON line per request to this file")
    p.add_argument("--check", action="store_true",
                   help="only read the scripts and say how many turns each has; serve nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    scripts = standin.load_scripts(args.scripts)
    if args.check:
        for s in scripts:
            print(f"{s.source}: {len(s.turns)} turn(s) for {s.question[:60]!r}")
        return 0
    with standin.serve(scripts, port=args.port, log_path=args.request_log) as server:
        print(f"listening {server.url}", flush=True)
        cli.progress(f"serving {len(scripts)} model script(s); stop with Ctrl-C")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    cli.run(main)
