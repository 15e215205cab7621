#!/usr/bin/env python3
"""Benchmark start-up: every script's `--help`, the whole process timed from outside.

A person or a host agent runs `--help` first, so it must answer at once: the MCP and Anthropic
SDKs are imported only by the code that talks to a server or the API. Each script runs N times
(after one unmeasured warm-up); the median wall time is reported, and with `--kit DIR` the same
script of another checkout runs in turn with it (A B A B ...), so the ratio is taken on the same
machine state. Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_startup.py
  .venv/bin/python benchmarks/bench_startup.py --runs 7 --kit /tmp/base --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from measure import KIT_ROOT, kit_python, load


def scripts(kit: Path) -> list[Path]:
    """Every script a person runs: the three skills' and the kit's own, relative to the kit."""
    found = sorted(kit.glob("skills/*/scripts/*.py")) + sorted(kit.glob("scripts/*.py"))
    return [p.relative_to(kit) for p in found]


def once(kit: Path, script: Path) -> float:
    """Seconds for one `python script --help`, start to exit."""
    start = time.perf_counter()
    subprocess.run([kit_python(kit), str(kit / script), "--help"], cwd=kit, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--kit", type=Path, default=None, help="another checkout, timed in turn")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    kits = [KIT_ROOT] + ([args.kit.resolve()] if args.kit else [])
    rows = []
    for script in scripts(KIT_ROOT):
        present = [k for k in kits if (k / script).is_file()]
        for kit in present:
            once(kit, script)  # warm-up: the page cache and .pyc files
        times: dict[Path, list[float]] = {k: [] for k in present}
        for _ in range(args.runs):
            for kit in present:
                times[kit].append(once(kit, script))
        row = {"script": str(script), "median_seconds": round(statistics.median(times[KIT_ROOT]), 3)}
        if len(present) > 1:
            other = present[1]
            row["other_median_seconds"] = round(statistics.median(times[other]), 3)
            row["ratio"] = round(statistics.median(
                a / b for a, b in zip(times[KIT_ROOT], times[other], strict=True)), 2)
        rows.append(row)
        print(f"{script}: {row}", file=sys.stderr)
    doc = {"load": load(), "runs": args.runs, "kits": [str(k) for k in kits], "scripts": rows}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"load average at the end: {doc['load']}")
    other = " | other kit | ratio" if len(kits) > 1 else ""
    print(f"| script | median --help{other} |")
    print("|---|---:" + ("|---:|---:" if len(kits) > 1 else "") + "|")
    for r in rows:
        extra = (f" | {r.get('other_median_seconds', '-')} s | {r.get('ratio', '-')}"
                 if len(kits) > 1 else "")
        print(f"| `{r['script']}` | {r['median_seconds']} s{extra} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
