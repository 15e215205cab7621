#!/usr/bin/env python3
"""Write one self-contained HTML page for a run (report.html) or a comparison (compare.html).

The page opens anywhere, offline: styles, the small sorting script and the charts are inline, and
it links only by relative path (to artifacts beside it, or between pages). Its figures are the run
summary's own (the computation behind summary.json); each attempt's evidence (question, golden,
answer, re-executed rows, the judge's why, tool calls) comes from the ledger. A run that is not
(fully) scored still gets a page. The page is written with RESULTS.md and summary.json, from one
summary (score_run.py, review.py and diagnose.py write all three themselves); a run is read only
against the set it was made on (another set is exit 3, naming both). --compare takes the arm
arguments of compare_runs.py and writes compare.html into --out. Exit 0 when the page was
written, 2 for a wrong command line, 3 when the run or its set cannot be read.

Examples (on copies of the sample set's recorded runs; a run not scored yet still gets its page,
and the comparison's two arms are scored by the lines before it):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline evals/bookshop/runs/candidate runs/
  .venv/bin/python skills/eval-answer/scripts/report.py --run runs/baseline --set evals/bookshop
  .venv/bin/python skills/eval-answer/scripts/report.py --run runs/baseline --set evals/bookshop --json
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/candidate --set evals/bookshop --judge replay --local --model evals/bookshop/model-candidate
  .venv/bin/python skills/eval-answer/scripts/report.py --compare --base runs/baseline --candidate runs/candidate --set evals/bookshop --out runs/compare
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli

COMPARE_ONLY = ("base", "candidate", "out", "targets", "band", "allow_different_judge",
                "only_common_cases")


def _only_with(args: argparse.Namespace) -> str | None:
    """The flags of the other mode: --run takes none of the arm arguments, --compare needs them."""
    if args.run is not None:
        given = [f"--{k.replace('_', '-')}" for k in COMPARE_ONLY if getattr(args, k)]
        return f"{', '.join(given)}: only with --compare, not with --run" if given else None
    missing = [f"--{k.replace('_dir', '')}" for k in ("base", "candidate", "out", "set_dir")
               if not getattr(args, k)]
    if missing:
        return f"--compare needs {', '.join(missing)}"
    if args.coverage is not None:
        return "--coverage: only with --run, not with --compare"
    return None


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(cli.RUN, type=cli.existing_dir, metavar="RUN",
                      help="the run folder: writes RUN/report.html")
    what.add_argument("--compare", action="store_true",
                      help="compare two arms as compare_runs.py does and write compare.html "
                           "(with COMPARE.md and compare.json) into --out")
    cli.add_set_argument(p, required=False,
                         help="the set folder (for questions, goldens and rubrics); with --run, "
                              "found by itself when the run sits in SET/runs/")
    cli.add_coverage_argument(p, use="shown as the coverage figure (--run)")
    arms = p.add_argument_group("comparison (--compare; the arm arguments of compare_runs.py)")
    arms.add_argument("--base", nargs="+", type=cli.existing_dir, metavar="RUN",
                      help="the base arm: one or more run folders over the same set")
    arms.add_argument("--candidate", nargs="+", type=cli.existing_dir, metavar="RUN",
                      help="the candidate arm: one or more run folders over the same set")
    arms.add_argument("--targets", type=cli.split_qids, help="the cases the change meant to fix")
    arms.add_argument("--band", type=cli.existing_file, metavar="FILE",
                      help="the A/A noise band measure_noise.py wrote")
    arms.add_argument("--out", type=Path, metavar="DIR",
                      help="the comparison's folder: compare.html is written there")
    arms.add_argument("--allow-different-judge", action="store_true",
                      help="compare arms scored by different judges (said in the headline)")
    arms.add_argument("--only-common-cases", action="store_true",
                      help="compare only the cases both arms have (said in the headline)")
    cli.add_check(p, _only_with)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.report import compare_page, run_page
    from malloy_evals.workflow.outputs import RunOutputs, outputs_writer
    if args.run is not None:
        outputs = RunOutputs.load(args.run, args.set_dir, coverage=args.coverage)
        result: Any = outputs.write().page
        render: Callable[[Any], str] = run_page.render_text
    else:
        render = compare_page.render_text
        result = compare_page.compare_report(args.base, args.candidate, set_dir=args.set_dir,
                                             out_dir=args.out,
                                             write_outputs=outputs_writer(args.set_dir),
                                             targets=args.targets,
                                             band=args.band,
                                             allow_different_judge=args.allow_different_judge,
                                             only_common_cases=args.only_common_cases)
    cli.emit(result, as_json=args.json, render=render)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
