#!/usr/bin/env python3
"""Benchmark the run page (report.html): its size and the time to write it for a large run.

Generates a run of N scored attempts over the sample set's cases through the real ledger
(tests/report_support.py `generated_run`: answers of 80-250 words, 2-6 tool calls with ten
entities per get_context, a judge's why, a retrieval row, a prediction of 1-60 rows per attempt),
then writes its page with the same call score_run makes, and prints the page's bytes, how many
attempt sections were drawn shorter to stay within the budget, and the seconds each step took.
`--keep DIR` leaves the generated run there, for `report.py --run DIR/generated` by hand or
under farm-bench.

Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_report.py
  .venv/bin/python benchmarks/bench_report.py --attempts 100 200 500 1000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT / "scripts"))
sys.path.insert(0, str(KIT_ROOT / "tests"))  # the generator the page-size test also uses

from malloy_evals.report.run_page import PAGE_BUDGET, write_run_page
from report_support import SAMPLE_SET, generated_run


def measure(attempts: int, root: Path) -> dict:
    """Generate a run of `attempts` attempts under `root`, write its page, and measure both."""
    started = time.perf_counter()
    run = generated_run(root, attempts)
    generated = time.perf_counter()
    page = write_run_page(run.dir, SAMPLE_SET)
    written = time.perf_counter()
    html = Path(page.path).read_text(encoding="utf-8")
    shortened = re.search(r"(\d+) of \d+ are drawn shorter", html)
    return {"attempts": attempts, "bytes": page.bytes, "mb": round(page.bytes / 1e6, 3),
            "under_2mb": page.bytes < 2_000_000,
            "sections_shortened": int(shortened.group(1)) if shortened else 0,
            "generate_seconds": round(generated - started, 2),
            "page_seconds": round(written - generated, 2), "run_dir": str(run.dir)}


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.strip()
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                epilog=doc[doc.index("Examples:"):],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attempts", type=int, nargs="+", default=[500],
                   help="run sizes to measure (default 500)")
    p.add_argument("--keep", type=Path, help="generate under this folder and leave it there")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args(argv)
    rows = []
    for n in args.attempts:
        root = (args.keep / str(n)) if args.keep else Path(tempfile.mkdtemp(prefix="bench-report-"))
        root.mkdir(parents=True, exist_ok=True)
        rows.append(measure(n, root))
    result = {"page_budget_bytes": PAGE_BUDGET, "load_average": list(os.getloadavg()),
              "runs": rows}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"load average {result['load_average'][0]:.2f}; page budget {PAGE_BUDGET} bytes")
        for r in rows:
            print(f"{r['attempts']:>5} attempts: {r['bytes']:>9} bytes ({r['mb']} MB), "
                  f"{r['sections_shortened']} sections shorter; page written in "
                  f"{r['page_seconds']} s (run generated in {r['generate_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
