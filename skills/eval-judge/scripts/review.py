#!/usr/bin/env python3
"""List the verdicts a person should settle, and record a person's verdict for good.

The queue: every live needs_human and near_match attempt and every attempt whose golden the judge
doubted (gold_status suspect or verified_wrong) that no person has settled yet; with
--include-disagreements, also predictions a person already settled otherwise in
judge-regressions.jsonl. Each card shows the question, the golden and its rubric, the rows the kit
re-executed, the answer, the judge's why and confidence.

--settle QID[#SAMPLE] --verdict V --why TEXT --by NAME appends a human_verdict event (the summary
counts it in place of the judge's verdict), writes the prediction into judge-regressions.jsonl
(protects: --protects, else from the case: refusal_correct / refusal_wrong, near_match_boundary,
gold_status, required_disclosure) and rewrites the run's RESULTS.md, summary.json and
report.html together. Without
--settle, on a terminal, it walks the queue one card at a time (m match, n near_match, x no_match,
s skip, q quit); without a terminal (or with --json) it only lists. --unsettle QID[#SAMPLE]
--why TEXT voids a person's verdict (the judge's stands again) and takes out the fixture that
settlement wrote. Exit 0; 2 on a wrong command line; 3 when the run or set cannot be read, the
run was made on another set (both named), or the attempt cannot be settled (not scored, or null
for a mechanical reason such as contamination).

Examples (on a copy of the sample set, since settling writes its judge-regressions.jsonl; the
copy holds the recorded baseline run, scored by the third line):
  mkdir -p runs
  cp -r evals/bookshop runs/bookshop
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/bookshop/runs/baseline --set runs/bookshop --judge replay --local
  .venv/bin/python skills/eval-judge/scripts/review.py --run runs/bookshop/runs/baseline --set runs/bookshop
  .venv/bin/python skills/eval-judge/scripts/review.py --run runs/bookshop/runs/baseline --set runs/bookshop --settle bk_units_per_order --verdict no_match --why "shipped orders only; the question counts pending too" --by "Dana Reyes"
  .venv/bin/python skills/eval-judge/scripts/review.py --run runs/bookshop/runs/baseline --set runs/bookshop --include-disagreements --json
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.core.vocab import GOLD_STATUSES, SETTLE_VERDICTS


def _target(value: str) -> str:
    from malloy_evals.workflow import review  # the value is checked after --help has been answered

    try:
        review.parse_target(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _combination(args: argparse.Namespace) -> str | None:
    """What --settle, --unsettle and the listing each take, decided with the command line."""
    if args.unsettle is not None:
        if args.settle is not None or args.verdict or args.protects or args.gold_status:
            return "--unsettle takes only --why (and --json)"
        return None if (args.why or "").strip() else "--unsettle needs --why"
    settle_only = [f for f in ("verdict", "why", "protects", "gold_status") if getattr(args, f)]
    if args.settle is None:
        return f"--{settle_only[0].replace('_', '-')} needs --settle QID" if settle_only else None
    missing = [f"--{f}" for f in ("verdict", "why", "by") if not (getattr(args, f) or "").strip()]
    if missing:
        return f"--settle needs {', '.join(missing)}"
    if args.include_disagreements:
        return "--include-disagreements lists the queue; it does not go with --settle"
    return None


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_run_argument(p)
    cli.add_set_argument(p)
    p.add_argument("--arm", action="append", type=cli.existing_dir, metavar="RUN", dest="arms",
                   help="another run of the same cases (repeat for more): a near_match every arm "
                        "shares leaves the queue for diagnosis, as a coverage finding")
    p.add_argument("--include-disagreements", action="store_true",
                   help="also list predictions a person already settled otherwise in judge-regressions.jsonl")
    p.add_argument("--settle", type=_target, metavar="QID[#SAMPLE]",
                   help="record a person's verdict on this attempt")
    p.add_argument("--unsettle", type=_target, metavar="QID[#SAMPLE]",
                   help="void a person's verdict on this attempt (needs --why)")
    p.add_argument("--verdict", choices=SETTLE_VERDICTS, help="with --settle: the verdict")
    p.add_argument("--why", help="with --settle or --unsettle: why, in one sentence")
    p.add_argument("--by", help="who settles (a person's name); the walk asks when it is not given")
    p.add_argument("--protects", help="with --settle: the decision class the fixture protects "
                                      "(default: from the case, see above)")
    p.add_argument("--gold-status", choices=GOLD_STATUSES,
                   help="with --settle: your view of the golden (default verified: settling "
                        "against the golden as written vouches for it)")
    cli.add_check(p, _combination)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.workflow import review
    from malloy_evals.workflow.outputs import RunOutputs
    # The run, its set (the one it was made on) and its ledger, loaded and checked once.
    outputs = RunOutputs.load(args.run, args.set_dir, refuse_public=(
        "review.py --settle" if args.settle is not None else None))
    if args.unsettle is not None:
        undone = review.unsettle(outputs, args.unsettle, why=args.why)
        cli.emit(undone, as_json=args.json, render=review.render_unsettled)
        return undone.exit_code
    if args.settle is not None:
        result = review.settle(outputs, args.settle, verdict=args.verdict,
                               why=args.why, by=args.by, protects=args.protects,
                               gold_status=args.gold_status)
        cli.emit(result, as_json=args.json, render=review.render_settled)
        return result.exit_code
    queue = review.review_queue(outputs, include_disagreements=args.include_disagreements,
                                arms=args.arms or ())
    if args.json or not (sys.stdin.isatty() and sys.stdout.isatty()):
        cli.emit(queue, as_json=args.json, render=review.render_queue)
        return queue.exit_code
    read_key, read_line, write = review.terminal_io()

    def settle_one(target: str, **kw) -> review.SettleResult:
        return review.settle(outputs, target, **kw)

    walked = review.walk_queue(queue, read_key=read_key, read_line=read_line, write=write,
                               settle_one=settle_one, by=args.by)
    write(review.render_walk(walked) + "\n")
    return walked.exit_code


if __name__ == "__main__":
    cli.run(main)
