#!/usr/bin/env python3
"""Can get_context find what each case says its answer needs? A set and model check, per case.

For every case with expectedEntities, asks the endpoint's get_context with the question, then
with each expected entity's own name (typed by its kind), then lists the package's entities of
that kind. Each case is `findable` (the question's words bring back every group), `found by name
only` (an answerer that searches by the right name finds it), or `unfindable` (not even its own
name brings it back: the model does not have it, a set problem; or search cannot surface it, a
model problem). Unfindable is never the answerer's fault: give the --json report to
score_retrieval.py --findable and such failures are attributed to the set or the model.
Exit 0 when nothing is unfindable, 1 when something is, 2 on a wrong command line, 3 when the
endpoint cannot be reached.

Examples:
  .venv/bin/python skills/eval-answer/scripts/check_findable.py --set evals/bookshop --local
  .venv/bin/python skills/eval-answer/scripts/check_findable.py --set evals/bookshop --local --only bk_total_revenue --json
  mkdir -p runs
  .venv/bin/python skills/eval-answer/scripts/check_findable.py --set evals/bookshop --local --out runs/findable.json
  .venv/bin/python skills/eval-answer/scripts/check_findable.py --set evals/bookshop --mcp-url http://localhost:4040/mcp   # needs a Publisher at :4040
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
    cli.add_endpoint_arguments(p, purpose="ask get_context")
    cli.add_only_argument(p)
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="also write the JSON report here (score_retrieval.py --findable reads it)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.findable import check_findable, render_text
    report = check_findable(args.set_dir, mcp_url=args.mcp_url, local=args.local, qids=args.only,
                            out=args.out)
    cli.emit(report, as_json=args.json, render=render_text)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
