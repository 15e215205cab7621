#!/usr/bin/env python3
"""Benchmark start-up: every script's `--help`, the whole process timed from outside.

A person or a host agent runs `--help` first, so it must answer at once: a script imports what
its parser needs and nothing else (tests/test_cli.py checks which modules each --help imports).
The first row is the floor measured in the same run: `python -c pass` with the same interpreter. Each script runs N times
(after one unmeasured warm-up); the median wall time is reported, and with `--kit DIR` the same
script of another checkout runs in turn with it (A B A B ...), so the ratio is taken on the same
machine state. Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_startup.py
  .venv/bin/python benchmarks/bench_startup.py --runs 7 --kit /tmp/base
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from measure import kit_python, kits, load, parser, table


def scripts(kit: Path) -> list[Path]:
    """Every script a person runs: the three skills' and the kit's own, relative to the kit."""
    found = sorted(kit.glob("skills/*/scripts/*.py")) + sorted(kit.glob("scripts/*.py"))
    return [p.relative_to(kit) for p in found]


FLOOR = Path("python -c pass")  # the interpreter starting and stopping: no --help is faster


def once(kit: Path, script: Path) -> float:
    """Seconds for one `python script --help` (or the floor, `python -c pass`), start to exit."""
    argv = ([kit_python(kit), "-c", "pass"] if script == FLOOR
            else [kit_python(kit), str(kit / script), "--help"])
    start = time.perf_counter()
    subprocess.run(argv, cwd=kit, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    checkouts = kits(args)
    rows = []
    for script in [FLOOR, *scripts(checkouts[0])]:
        present = [k for k in checkouts if script == FLOOR or (k / script).is_file()]
        for kit in present:
            once(kit, script)  # warm-up: the page cache and .pyc files
        times: dict[Path, list[float]] = {k: [] for k in present}
        for _ in range(args.runs):
            for kit in present:
                times[kit].append(once(kit, script))
        row: dict[str, Any] = {"script": str(script), "load": load()}
        for n, kit in enumerate(present):
            row[f"kit{n}_median_seconds"] = round(statistics.median(times[kit]), 3)
        if len(present) > 1:  # pair by pair, so a drift of the machine's speed cancels out
            row["ratio"] = round(statistics.median(
                a / b for a, b in zip(times[present[0]], times[present[1]], strict=True)), 2)
        rows.append(row)
        print(f"{script}: {row}", file=sys.stderr)
    columns = {"script": lambda r: f"`{r['script']}`"}
    for n, kit in enumerate(checkouts):
        columns[f"median --help, {kit}"] = lambda r, n=n: f"{r.get(f'kit{n}_median_seconds', '-')} s"
    if len(checkouts) > 1:
        columns["ratio"] = lambda r: r.get("ratio", "-")
    table(rows, {**columns, "load": lambda r: r["load"]}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
