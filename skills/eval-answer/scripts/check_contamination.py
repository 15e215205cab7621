#!/usr/bin/env python3
"""Decide whether an answerer's host tool-use log shows contamination: exit 1 when contaminated or unknown.

The rules: reference/contamination.md.

Examples:
  .venv/bin/python skills/eval-answer/scripts/check_contamination.py --log evals/bookshop/transcripts/baseline/bk_total_revenue.jsonl --set evals/bookshop --json
  .venv/bin/python skills/eval-answer/scripts/check_contamination.py --log evals/bookshop/transcripts/leaky/bk_member_count.hostlog.json --set evals/bookshop --run evals/bookshop/runs/leaky --reported-calls 4   # 4 calls reported, 2 made: exit 1
  .venv/bin/python skills/eval-answer/scripts/check_contamination.py --set evals/bookshop --json   # no log: "unknown", exit 1

Exit codes: 0 clean, 1 contaminated (true or "unknown"), 2 usage (a needle under 3 characters),
3 the log cannot be read.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.checks.contamination.refs import make_needle
from malloy_evals.core import cli


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("--log", type=cli.existing_file,
                   help="host tool-use log (JSON) or Claude Code transcript (.jsonl); "
                   "omitted: the verdict is \"unknown\"")
    cli.add_set_argument(p, matched_only=True, help="the set folder: it and everything under it "
                         "are protected (only matched against: need not exist here)")
    cli.add_run_argument(p, matched_only=True, required=False,
                         help="the run folder (protected; only matched against: need not exist)")
    p.add_argument("--model-path", action="append", default=[],
                   help="the model file under test (repeatable)")
    p.add_argument("--truth-package", help="the truth package's name (default: set.json truthPackage)")
    p.add_argument("--gold-path", action="append", default=[], type=cli.checked_by(make_needle),
                   help="an extra gold needle (repeatable; extends the defaults)")
    p.add_argument("--eval-path", action="append", default=[], type=cli.checked_by(make_needle),
                   help="an extra eval-area needle (repeatable; extends the defaults)")
    p.add_argument("--reported-calls", type=cli.count,
                   help="the calls the answerer reported (overrides the log's reportedCalls)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.checks.contamination.rules import check_contamination, render_text
    from malloy_evals.checks.toollog import read_tool_uses
    log = read_tool_uses(args.log) if args.log else None
    for warning in log.warnings if log else []:
        cli.progress(f"warning: {warning}")
    result = check_contamination(
        log=log,  # None: no log, the verdict is "unknown"
        set_dir=args.set_dir,
        run_dir=args.run,
        model_paths=args.model_path,
        truth_package=args.truth_package,
        gold_paths=args.gold_path,
        eval_paths=args.eval_path,
        reported_calls=args.reported_calls,
    )
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
