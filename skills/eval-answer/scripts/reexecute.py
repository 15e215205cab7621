#!/usr/bin/env python3
"""Re-run an attempt's final query through execute_query and keep the rows it returns.

Writes prediction.csv and envelope.json to the attempt's artifacts (write-once: a repeat writes
prediction.2.csv); a query the server refuses is recorded in reexecute_error.json, exit 0.
Exit 3 when the server cannot be reached or the attempt has no final query.

Examples (on copies of recorded runs, made by the cp lines):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/
  .venv/bin/python skills/eval-answer/scripts/reexecute.py --run runs/baseline --set evals/bookshop --qid bk_total_revenue --local --json
  .venv/bin/python skills/eval-answer/scripts/reexecute.py --run runs/baseline --set evals/bookshop --qid bk_gross_bookings --mcp-url http://127.0.0.1:4040/mcp   # needs serve_local.py --http 4040 (or a Publisher) running
  cp -r evals/bookshop/runs/candidate runs/
  .venv/bin/python skills/eval-answer/scripts/reexecute.py --run runs/candidate --set evals/bookshop --qid bk_refunded_amount --local --model evals/bookshop/model-candidate
"""
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_attempt_arguments(p)
    cli.add_endpoint_arguments(p)
    cli.add_model_argument(p)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.reexecute import reexecute, render_text
    result = reexecute(args.run, args.set_dir, args.qid, args.sample,
                       mcp_url=args.mcp_url, local=args.local, model_dir=args.model)
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
