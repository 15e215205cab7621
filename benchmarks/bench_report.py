#!/usr/bin/env python3
"""Benchmark the run page (report.html): its build CPU, its weight, and how soon Chromium answers.

Generates a run of N scored attempts over the sample set's cases through the real ledger
(tests/report_support.py `generated_run`: answers of 80-250 words, 2-6 tool calls with ten
entities per get_context, a judge's why, a retrieval row, a prediction of 1-60 rows per attempt),
computes its summary, then writes its page with the call the run outputs' owner makes
(`write_run_page`), timing that call's CPU alone. It reports the page's bytes and, past the
split (report/run_page.py SPLIT_AT), the case pages' bytes beside it.

With `--browser`, headless Chromium (Debian's, driven by Playwright as the page tests drive it)
opens the page, and beside it the floor measured in the same run: the same page with its
Attempts section taken out (the figures and the cases table alone). Time to respond is from the
navigation's start to the end of the first task after the first frame that follows `load` (the
page has parsed, laid out, painted and can take input); the median of `--repeat` openings,
alternated with the floor's.

`--keep DIR` leaves the generated runs there. Not a test: the figures go to benchmarks/README.md.
Run it from another checkout of the kit (a copy of this file in its benchmarks/) to measure that
kit's page the same way.

Examples:
  .venv/bin/python benchmarks/bench_report.py
  .venv/bin/python benchmarks/bench_report.py --attempts 1000 5000 --browser --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(KIT_ROOT / "scripts"), str(KIT_ROOT / "tests")]  # the page tests' generator

from malloy_evals.report import run_page
from malloy_evals.workflow.outputs import RunOutputs
from report_support import SAMPLE_SET, generated_run

# The first task after the first frame that follows `load`: the page answers input by then.
RESPONDED = "() => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)))"
ATTEMPTS_SECTION = re.compile(r'<section id="attempts">.*?</section></main>', re.DOTALL)


def build(attempts: int, root: Path) -> dict:
    """Generate a run of `attempts` attempts under `root` and write its page, timing the page."""
    started = time.perf_counter()
    run = generated_run(root, attempts)
    generated = time.perf_counter()
    outputs = RunOutputs.load(run.dir, SAMPLE_SET)
    summary = outputs.summary()
    cpu, wall = time.process_time(), time.perf_counter()
    page = run_page.write_run_page(outputs.run, outputs.eval_set, outputs.view, summary,
                                   run_label=str(run.dir), set_label=str(SAMPLE_SET))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    html = Path(page.path).read_text(encoding="utf-8")
    shortened = re.search(r"(\d+) of \d+ are drawn shorter", html)
    case_pages = list(getattr(page, "case_pages", ()))
    return {"attempts": attempts, "bytes": page.bytes,
            "case_pages": len(case_pages), "case_bytes": getattr(page, "case_bytes", 0),
            "largest_case_page": max((len((run.dir / n).read_bytes()) for n in case_pages),
                                     default=0),
            "sections_on_page": html.count('class="attempt"'),
            "sections_shortened": int(shortened.group(1)) if shortened else 0,
            "page_cpu_seconds": round(cpu, 2), "page_wall_seconds": round(wall, 2),
            "generate_seconds": round(generated - started, 2), "page": page.path}


def floor_page(page: Path) -> Path:
    """The same page without its Attempts section: the figures and the table alone."""
    html = page.read_text(encoding="utf-8")
    target = page.with_name("table-alone.html")
    target.write_text(ATTEMPTS_SECTION.sub("</main>", html, count=1), encoding="utf-8")
    return target


def respond_seconds(browser, page: Path, repeat: int) -> list[float]:
    from browser_support import visit

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        v = visit(browser, page)
        v.page.evaluate(RESPONDED)
        times.append(time.perf_counter() - started)
        v.close()
    return times


def browse(rows: list[dict], repeat: int) -> None:
    """Each page's time to respond in Chromium beside its floor's, alternated, in one browser."""
    from browser_support import launched

    with launched() as browser:
        for r in rows:
            page = Path(r["page"])
            floor = floor_page(page)
            r["floor_bytes"] = floor.stat().st_size
            full, bare = [], []
            for _ in range(repeat):
                full += respond_seconds(browser, page, 1)
                bare += respond_seconds(browser, floor, 1)
            r["respond_seconds"] = round(statistics.median(full), 3)
            r["floor_respond_seconds"] = round(statistics.median(bare), 3)
            r["respond_over_floor"] = round(r["respond_seconds"] / r["floor_respond_seconds"], 2)


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.strip()
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                epilog=doc[doc.index("Examples:"):],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attempts", type=int, nargs="+", default=[500],
                   help="run sizes to measure (default 500)")
    p.add_argument("--browser", action="store_true",
                   help="time each page in headless Chromium beside its table alone")
    p.add_argument("--repeat", type=int, default=3, help="Chromium openings of each (default 3)")
    p.add_argument("--keep", type=Path, help="generate under this folder and leave it there")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args(argv)
    rows = []
    for n in args.attempts:
        root = (args.keep / str(n)) if args.keep else Path(tempfile.mkdtemp(prefix="bench-report-"))
        root.mkdir(parents=True, exist_ok=True)
        rows.append(build(n, root))
    if args.browser:
        browse(rows, args.repeat)
    result = {"page_budget_bytes": run_page.PAGE_BUDGET,
              "split_at": getattr(run_page, "SPLIT_AT", None),
              "load_average": list(os.getloadavg()), "runs": rows}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"load average {result['load_average'][0]:.2f}; page budget {run_page.PAGE_BUDGET} "
          f"bytes; split past {result['split_at']} attempts")
    for r in rows:
        print(f"{r['attempts']:>5} attempts: page {r['bytes']:>10} bytes, "
              f"{r['sections_on_page']} sections on it ({r['sections_shortened']} shorter); "
              f"{r['case_pages']} case pages, {r['case_bytes']} bytes; page CPU "
              f"{r['page_cpu_seconds']} s (wall {r['page_wall_seconds']} s)")
        if "respond_seconds" in r:
            print(f"       Chromium responds in {r['respond_seconds']} s; the table alone "
                  f"({r['floor_bytes']} bytes) in {r['floor_respond_seconds']} s "
                  f"({r['respond_over_floor']}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
