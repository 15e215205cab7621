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
missing, a canonical query failing) or a run named with --run was made on another set (checked
before anything is written). Each --run's outputs are rewritten after the promotion: a score
judged against the old golden revision is counted stale there, with the command that re-scores.

Examples (the sample set's provisional golden is bk_member_revenue_share; promotion rewrites
cases.jsonl, so these work on a copy made by the first two lines):
  mkdir -p runs
  cp -r evals/bookshop runs/bookshop
  .venv/bin/python skills/eval-answer/scripts/promote_golden.py --set runs/bookshop --qid bk_member_revenue_share --run runs/bookshop/runs/baseline
  .venv/bin/python skills/eval-answer/scripts/promote_golden.py --set runs/bookshop --all --json
  .venv/bin/python skills/eval-answer/scripts/promote_golden.py --set runs/bookshop --qid bk_profit_margin --attest --by "Dana Reyes"   # already verified: says so
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli


def _combination(args: argparse.Namespace) -> str | None:
    if bool(args.qid) == args.all_cases:
        return "name the cases with --qid, or give --all (not both)"
    if args.attest and not (args.by or "").strip():
        return "--attest needs --by NAME: an attestation is a person's word"
    if args.attest and args.all_cases:
        return "--attest vouches for one case at a time; name it with --qid"
    return None


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_set_argument(p)
    p.add_argument(cli.QID, action="extend", type=cli.split_qids, default=[], metavar="Q",
                   help="the case to promote (repeatable, or comma-separated)")
    p.add_argument("--all", action="store_true", dest="all_cases",
                   help="every provisional golden that re-derives from the truth package")
    p.add_argument("--attest", action="store_true",
                   help="a person vouches for a criteria or unanswerable golden (needs --by)")
    p.add_argument("--by", help="who promotes or attests (a person's name)")
    p.add_argument(cli.RUN, dest="runs", action="append", type=cli.existing_dir, default=[],
                   metavar="RUN", help="a run over this set whose RESULTS.md, summary.json and "
                                       "report.html are rewritten after the promotion "
                                       "(repeatable): its scores of a promoted case show as stale")
    cli.add_check(p, _combination)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.sets.promote import promote_golden, render_text
    from malloy_evals.workflow.outputs import render_rewritten, rewrite_runs_after
    report, rewritten = rewrite_runs_after(args.runs, args.set_dir, lambda: promote_golden(
        args.set_dir, args.qid, all_cases=args.all_cases, attest=args.attest, by=args.by))
    cli.emit(report, as_json=args.json, render=render_text)
    if rewritten:
        cli.progress(render_rewritten(rewritten))
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
