#!/usr/bin/env python3
"""Re-run an attempt's final query through execute_query and keep the rows it returns (SPEC 5.5).

Writes prediction.csv and envelope.json to the attempt's artifacts (write-once: a repeat writes
prediction.2.csv); a query the server refuses is recorded in reexecute_error.json, exit 0.
Exit 3 when the server cannot be reached or the attempt has no final query.

Examples (on a scratch copy: cp -r evals/bookshop/runs/baseline /tmp/baseline):
  .venv/bin/python skills/eval-answer/scripts/reexecute.py --run /tmp/baseline --set evals/bookshop --qid bk_total_revenue --local --json
  .venv/bin/python skills/eval-answer/scripts/reexecute.py --run /tmp/baseline --set evals/bookshop --qid bk_gross_bookings --mcp-url http://127.0.0.1:4040/mcp   # needs serve_local.py --http 4040 (or a real Publisher) running
  .venv/bin/python skills/eval-answer/scripts/reexecute.py --run /tmp/candidate --set evals/bookshop --qid bk_refunded_amount --local --model evals/bookshop/model-candidate   # on cp -r evals/bookshop/runs/candidate /tmp/candidate
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.answer.reexecute import reexecute, render_text
from malloy_evals.core import cli


def main(argv=None) -> int:
    p = cli.parser(__doc__)
    cli.add_attempt_arguments(p)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--mcp-url", help="a Publisher (or compatible) MCP endpoint, e.g. http://127.0.0.1:4040/mcp")
    where.add_argument("--local", action="store_true",
                       help="start the kit's endpoint over the set's model/ package, stop it after")
    cli.add_model_argument(p)
    cli.add_json_flag(p)
    args = p.parse_args(argv)
    cli.check_model_argument(p, args)
    result = reexecute(args.run, args.set_dir, args.qid, args.sample,
                       mcp_url=args.mcp_url, local=args.local, model_dir=args.model)
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
