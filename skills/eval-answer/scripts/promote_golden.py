#!/usr/bin/env python3
"""Promote a golden from provisional to verified, only on evidence.

A scalar or rows golden is promoted only when its canonicalQuery, run on the set's truth package,
re-derives the stored value (verify_goldens' comparison); a criteria or unanswerable golden has
no value to re-derive, so a person vouches for it with --attest --by NAME. Promotion bumps the
case's goldenRevision and records golden.verifiedBy and golden.verifiedAt; only the promoted
cases' lines of cases.jsonl are rewritten, every other byte stays. --all promotes every
provisional golden that re-derives and lists the ones that need a person. Exit 0 when every named
golden was promoted (or already verified), 1 when one does not re-derive or cannot be promoted
this way, 2 on a wrong command line, 3 when a check could not run (no truth package, Node
missing, a canonical query failing).

Examples (the sample set's provisional golden is bk_member_revenue_share; on a copy:
cp -r evals/bookshop /tmp/bookshop):
  .venv/bin/python skills/eval-answer/scripts/promote_golden.py --set /tmp/bookshop --qid bk_member_revenue_share
  .venv/bin/python skills/eval-answer/scripts/promote_golden.py --set /tmp/bookshop --all --json
  .venv/bin/python skills/eval-answer/scripts/promote_golden.py --set /tmp/bookshop --qid bk_profit_margin --attest --by "Dana Reyes"   # already verified: says so
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.core import cli
from malloy_evals.sets.promote import promote_golden, render_text


def main(argv=None) -> int:
    p = cli.parser(__doc__)
    p.add_argument("--set", required=True, type=cli.existing_dir, help="the set folder")
    p.add_argument("--qid", action="append", default=[], metavar="Q",
                   help="the case to promote (repeatable, or comma-separated)")
    p.add_argument("--all", action="store_true", dest="all_cases",
                   help="every provisional golden that re-derives from the truth package")
    p.add_argument("--attest", action="store_true",
                   help="a person vouches for a criteria or unanswerable golden (needs --by)")
    p.add_argument("--by", help="who promotes or attests (a person's name)")
    cli.add_json_flag(p)
    args = p.parse_args(argv)
    qids = [q for value in args.qid for q in cli.split_qids(value)]
    if bool(qids) == args.all_cases:
        p.error("name the cases with --qid, or give --all (not both)")
    if args.attest and not (args.by or "").strip():
        p.error("--attest needs --by NAME: an attestation is a person's word")
    if args.attest and args.all_cases:
        p.error("--attest vouches for one case at a time; name it with --qid")
    report = promote_golden(args.set, qids, all_cases=args.all_cases, attest=args.attest,
                            by=args.by)
    cli.emit(report, as_json=args.json, render=render_text)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
