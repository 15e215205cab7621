#!/usr/bin/env python3
"""Measure the noise band: the flips between two or more runs of the SAME arm (A/A).

Give runs made with the same answerer, model and judge in different sessions. Every pair is
compared case by case (with the flip table compare_runs.py uses), and the band (the most flips
any pair showed, and the mean), the runs, their dates, the flips per pair, the judge pins and
the number of cases are written to the file --out names, and nowhere else. Hand that file to
`compare_runs.py --band FILE`. Exit 0 written, 2 bad flags (fewer than two runs), 3 when the
runs are not one arm (set, cases, judge, answerer or model differ; nothing is written) or a run
cannot be read.

Examples (after `make demo` with `scripts/demo.py --scratch /tmp/demo`, which scores both
baseline sessions):
  .venv/bin/python skills/eval-answer/scripts/measure_noise.py --runs /tmp/demo/runs/baseline /tmp/demo/runs/baseline-2 --set evals/bookshop --out /tmp/demo/noise-band.json
  .venv/bin/python skills/eval-answer/scripts/measure_noise.py --runs /tmp/demo/runs/baseline /tmp/demo/runs/baseline-2 --set evals/bookshop --out /tmp/band.json --json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.core import cli
from malloy_evals.report.noise import measure_noise, render_text


def main(argv=None) -> int:
    p = cli.parser(__doc__)
    p.add_argument("--runs", nargs="+", required=True, type=cli.existing_dir, metavar="RUN",
                   help="two or more run folders of one arm (same answerer, model and judge)")
    p.add_argument("--set", required=True, type=cli.existing_dir, help="the set folder")
    p.add_argument("--out", required=True, type=Path, metavar="FILE",
                   help="the band file to write (a path you choose; never inside the set unless "
                        "you point it there)")
    p.add_argument("--only-common-cases", action="store_true",
                   help="count flips over the cases every run attempted alike")
    cli.add_json_flag(p)
    args = p.parse_args(argv)
    result = measure_noise(args.runs, args.set, args.out,
                           only_common_cases=args.only_common_cases)
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
