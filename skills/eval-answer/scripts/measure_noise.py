#!/usr/bin/env python3
"""Measure the noise band: the flips between two or more runs of the SAME arm (A/A).

Give runs made with the same answerer, model and judge in different sessions. Every pair is
compared case by case (with the flip table compare_runs.py uses), and the band (the most flips
any pair showed, and the mean), the runs, their dates, the flips per pair, the judge pins and
the number of cases are written to the file --out names, and nowhere else. Hand that file to
`compare_runs.py --band FILE`. Exit 0 written, 2 bad flags (fewer than two runs), 3 when the
runs are not one arm (set, cases, judge, answerer or model differ; nothing is written) or a run
cannot be read.

Examples (on copies of the sample set's two baseline sessions, scored by the lines before them
as `make demo` scores them):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline evals/bookshop/runs/baseline-2 runs/
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline-2 --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-answer/scripts/measure_noise.py --runs runs/baseline runs/baseline-2 --set evals/bookshop --out runs/noise-band.json
  .venv/bin/python skills/eval-answer/scripts/measure_noise.py --runs runs/baseline runs/baseline-2 --set evals/bookshop --out runs/band.json --json
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
    p.add_argument("--runs", nargs="+", required=True, type=cli.existing_dir, metavar="RUN",
                   help="two or more run folders of one arm (same answerer, model and judge)")
    cli.add_set_argument(p)
    p.add_argument("--out", required=True, type=Path, metavar="FILE",
                   help="the band file to write (a path you choose; never inside the set unless "
                        "you point it there)")
    p.add_argument("--only-common-cases", action="store_true",
                   help="count flips over the cases every run attempted alike")
    cli.add_check(p, lambda a: "a noise band needs at least two runs of the same arm (--runs A B)"
                  if len(a.runs) < 2 else None)
    cli.add_check(p, cli.distinct_folders("--runs", why="--runs names the same run folder twice"))
    cli.add_check(p, lambda a: f"--out {a.out}: a folder; --out names the band file to write"
                  if a.out.is_dir() else None)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.report.noise import measure_noise, render_text
    result = measure_noise(args.runs, args.set_dir, args.out,
                           only_common_cases=args.only_common_cases)
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
