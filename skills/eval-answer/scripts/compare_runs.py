#!/usr/bin/env python3
"""Compare two arms of runs over one set: did the change help, or is it noise?

Each arm is one or more scored run folders (several runs, or several samples per case, are
repeated measurements of that arm). Reads each run's live ledger (never summary.json) and
prints the verdict line first (`candidate better`, `candidate worse` or `no detectable
difference`), the headline (differences allowed, attempts left out, the noise band), the
figures (pass rates over cases decided in both arms, the difference with a 95% paired bootstrap
interval, the exact McNemar p) and the flip table. Arms that differ in set, cases, a golden
revision, a question, the judge or the set's files (run.json datasetSha) are refused (exit 3)
and each difference is named, unless --only-common-cases / --allow-different-judge /
--allow-different-set says to go on (the headline then names what it let through). Exit 0 compared, 1 with
--fail-on-regression when non-target cases broke beyond the band (any, without a band), 2 bad
flags, 3 refused or unreadable.

Examples (on copies of the sample set's recorded runs, scored by the lines before them as
`make demo` scores them; each writes only under runs/):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline evals/bookshop/runs/baseline-2 evals/bookshop/runs/candidate runs/
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline-2 --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/candidate --set evals/bookshop --judge replay --local --model evals/bookshop/model-candidate
  .venv/bin/python skills/eval-answer/scripts/measure_noise.py --runs runs/baseline runs/baseline-2 --set evals/bookshop --out runs/noise-band.json
  .venv/bin/python skills/eval-answer/scripts/compare_runs.py --base runs/baseline --candidate runs/candidate --set evals/bookshop --targets bk_refunded_amount
  .venv/bin/python skills/eval-answer/scripts/compare_runs.py --base runs/baseline --candidate runs/candidate --set evals/bookshop --band runs/noise-band.json --out runs/compare --json
  .venv/bin/python skills/eval-answer/scripts/compare_runs.py --base runs/baseline runs/baseline-2 --candidate runs/candidate --set evals/bookshop --band runs/noise-band.json --fail-on-regression
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.report.stats import DEFAULT_RESAMPLES, DEFAULT_SEED


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("--base", nargs="+", required=True, type=cli.existing_dir, metavar="RUN",
                   help="the base arm: one or more run folders")
    p.add_argument("--candidate", nargs="+", required=True, type=cli.existing_dir, metavar="RUN",
                   help="the candidate arm: one or more run folders")
    cli.add_set_argument(p)
    p.add_argument("--targets", type=cli.split_qids, default=[], metavar="Q1,Q2",
                   help="the cases the change meant to fix (named before the runs)")
    p.add_argument("--band", type=cli.existing_file, metavar="FILE",
                   help="a noise band written by measure_noise.py (never guessed)")
    p.add_argument("--out", type=Path, metavar="DIR", help="write COMPARE.md and compare.json here")
    p.add_argument("--seed", type=cli.count, default=DEFAULT_SEED,
                   help=f"bootstrap seed (default {DEFAULT_SEED}; printed with the interval)")
    cli.add_count_argument(p, "--resamples", default=DEFAULT_RESAMPLES,
                           help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})")
    p.add_argument("--allow-different-judge", action="store_true",
                   help="compare although the judge pins differ (said in every output)")
    p.add_argument("--allow-different-set", action="store_true",
                   help="compare although the arms were made over other versions of the set's "
                        "files (run.json datasetSha; said in the headline)")
    p.add_argument("--allow-different-retrieval", action="store_true",
                   help="compare although the arms were answered against different get_context "
                        "retrieval modes or Publisher versions (said in every output)")
    p.add_argument("--only-common-cases", action="store_true",
                   help="compare only the cases both arms attempted with the same golden "
                        "revision and question (said in every output)")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when non-target cases broke beyond the band (any, without --band)")
    cli.add_check(p, cli.distinct_folders("--base", "--candidate", why=(
        "a run folder appears twice in --base / --candidate: each run belongs to one arm, once")))
    cli.add_check(p, lambda a: f"--out {a.out}: not a folder"
                  if a.out is not None and a.out.exists() and not a.out.is_dir() else None)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.report.compare import compare_runs, render_text
    from malloy_evals.report.compare_page import write_comparison_pages
    from malloy_evals.workflow.outputs import outputs_writer
    result = compare_runs(args.base, args.candidate, args.set_dir, targets=args.targets,
                          band_path=args.band, out_dir=args.out, seed=args.seed,
                          resamples=args.resamples,
                          allow_different_judge=args.allow_different_judge,
                          only_common_cases=args.only_common_cases,
                          fail_on_regression=args.fail_on_regression,
                          allow_different_set=args.allow_different_set,
                          allow_different_retrieval=args.allow_different_retrieval)
    cli.emit(result, as_json=args.json, render=render_text)
    if args.out is not None:
        page = write_comparison_pages(result, args.out, args.base, args.candidate,
                                      outputs_writer(args.set_dir))
        print(f"page: {page.path}", file=sys.stderr if args.json else sys.stdout)
    if not result.comparable:
        cli.progress(f"refused: {result.verdict}")
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
