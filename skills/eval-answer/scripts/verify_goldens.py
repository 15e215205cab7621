#!/usr/bin/env python3
"""Re-derive every value golden from the truth package and report drift (SPEC 5.5).

Each scalar and rows golden's canonicalQuery runs on the set's truth package through the kit's
Malloy runtime (trusted: unrestricted compile) and is compared with the stored value: the golden's
`round`, else relative 1e-6; rows as a multiset; columns by name. Exit 0 when every value golden
re-derives, 1 on drift (naming the case), 3 when a check could not run (runtime missing, query
error, no truth package).

Examples:
  .venv/bin/python skills/eval-answer/scripts/verify_goldens.py --set evals/bookshop
  .venv/bin/python skills/eval-answer/scripts/verify_goldens.py --set evals/bookshop --qid bk_total_revenue --json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.core import cli
from malloy_evals.sets.goldens import render_text, verify_goldens


def main(argv=None) -> int:
    p = cli.parser(__doc__)
    p.add_argument("--set", required=True, type=cli.existing_dir, help="the set folder")
    p.add_argument("--qid", action="append", default=[], metavar="Q",
                   help="check only this case (repeatable, or comma-separated)")
    cli.add_json_flag(p)
    args = p.parse_args(argv)
    qids = [q for value in args.qid for q in cli.split_qids(value)]
    report = verify_goldens(args.set, qids or None)
    cli.emit(report, as_json=args.json, render=render_text)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
