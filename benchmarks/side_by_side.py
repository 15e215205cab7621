#!/usr/bin/env python3
"""Benchmarks of this checkout side by side with another checkout of the kit, in one run.

Each round runs every chosen benchmark once in each checkout (alternating which goes first), each
with that checkout's own `.venv`; the figure per metric is the median over rounds, and the ratio
is this checkout's median over the other's (above 1.0 is slower). The other checkout is a
scratch copy at the commit to compare with (`git worktree add /tmp/kit-base <commit>`, then
`make setup` there); a benchmark script it lacks is copied into it first.

Examples:
  .venv/bin/python benchmarks/side_by_side.py --base /tmp/kit-base
  .venv/bin/python benchmarks/side_by_side.py --base /tmp/kit-base --bench reexecute --rounds 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# benchmark -> (script arguments, {metric: path into its --json document})
BENCHES: dict[str, tuple[list[str], dict[str, tuple[Any, ...]]]] = {
    "reexecute": (["--warm", "200", "--cold", "5", "--json"], {
        "warm through MCP, median ms": ("warm_endpoint_http", "median_ms"),
        "warm runner only, median ms": ("warm_runtime_direct", "median_ms"),
        "cold stdio endpoint, median ms": ("cold_endpoint_stdio", "median_ms"),
        "cold node runner, median ms": ("cold_node_runner", "median_ms"),
    }),
    "retrieval": (["--only-main", "--json"], {
        "score_retrieval wall s": (0, "score", "wall_seconds"),
        "score_retrieval CPU s": (0, "score", "cpu_seconds"),
        "score_retrieval peak RSS MiB": (0, "score", "peak_rss_mib"),
    }),
    "parallel": (["--rounds", "1", "--json"], {
        "score_run --parallel 1 s": ("median_parallel_1_s",),
        "score_run --parallel 4 s": ("median_parallel_4_s",),
    }),
}


def _dig(doc: Any, path: tuple[Any, ...]) -> float:
    for part in path:
        doc = doc[part]
    return float(doc)


def run_bench(kit: Path, name: str) -> dict[str, float]:
    """One run of one benchmark in one checkout: its metrics."""
    script = kit / "benchmarks" / f"bench_{name}.py"
    if not script.is_file():
        shutil.copy2(ROOT / "benchmarks" / script.name, script)
    args, metrics = BENCHES[name]
    proc = subprocess.run([str(kit / ".venv" / "bin" / "python"), str(script), *args],
                          capture_output=True, text=True, cwd=kit, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{script} failed: {proc.stderr.strip()[-800:]}")
    doc = json.loads(proc.stdout)
    return {metric: _dig(doc, path) for metric, path in metrics.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[8:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, required=True, help="the other checkout (with its .venv)")
    p.add_argument("--bench", action="append", choices=sorted(BENCHES),
                   help="a benchmark to run (repeatable; default reexecute and retrieval)")
    p.add_argument("--rounds", type=int, default=3, help="runs per checkout (default 3)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args()
    base = args.base.resolve()
    if not (base / ".venv" / "bin" / "python").is_file():
        p.error(f"--base {base}: no .venv there (run `make setup` in it)")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    benches = args.bench or ["reexecute", "retrieval"]
    kits = {"this": ROOT, "base": base}
    runs: dict[str, dict[str, list[float]]] = {"this": {}, "base": {}}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = ("this", "base") if r % 2 == 0 else ("base", "this")
        for name in benches:
            for which in order:
                for metric, value in run_bench(kits[which], name).items():
                    runs[which].setdefault(metric, []).append(value)
                print(f"round {r + 1}: {name} in {which} done (load {os.getloadavg()[0]:.1f})",
                      file=sys.stderr)
        load.append(os.getloadavg()[0])
    rows = []
    for metric in runs["this"]:
        new, old = statistics.median(runs["this"][metric]), statistics.median(runs["base"][metric])
        rows.append({"metric": metric, "this": round(new, 2), "base": round(old, 2),
                     "ratio": round(new / old, 3) if old else None,
                     "this_runs": runs["this"][metric], "base_runs": runs["base"][metric]})
    result = {"base": str(base), "rounds": args.rounds, "load_average": [round(x, 2) for x in load],
              "metrics": rows}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"| metric | this | base | ratio |  (median of {args.rounds}; load "
              f"{min(load):.1f}-{max(load):.1f})")
        print("|---|---:|---:|---:|")
        for row in rows:
            print(f"| {row['metric']} | {row['this']} | {row['base']} | {row['ratio']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
