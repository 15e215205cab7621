#!/usr/bin/env python3
"""Benchmark score_retrieval.py over a generated ledger: wall time and peak memory.

Generates a set and a run whose ledger holds N get_context/execute_query tool_call events across
M attempts (plus one attempt and one score each), then runs the real script by path, as a user
would, under `/usr/bin/time -v`. `--scaling` adds two shapes, twice the events per attempt and
twice the attempts, to show what memory grows with. `--kit DIR` measures another checkout on the
same ledgers, side by side (its own .venv). Skips with a message when the disk is short.
Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_retrieval.py
  .venv/bin/python benchmarks/bench_retrieval.py --attempts 10000 --calls 1000000 --append --kit /tmp/base --json
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from measure import kit_python, kits, load, measure, parser, table, write_run

SCRIPT = Path("skills") / "eval-answer" / "scripts" / "score_retrieval.py"
BYTES_PER_EVENT_GUESS = 950


def bench(root: Path, attempts: int, calls: int, append: bool, kits: list[Path]
          ) -> list[dict[str, Any]]:
    """One shape: generate it, then time score_retrieval (and --append) with every kit. Each
    --append run gets its own copy of the ledger, so every kit appends to the same file."""
    shape = root / f"a{attempts}-c{calls}"
    set_dir, run_dir = write_run(shape, attempts, calls)
    size = (run_dir / "events.jsonl").stat().st_size
    out = []
    for kit in kits:
        argv = [kit_python(kit), str(kit / SCRIPT), "--run", str(run_dir), "--set", str(set_dir),
                "--json"]
        print(f"score_retrieval {attempts} attempts / {calls} calls, {kit} (load {load()})",
              file=sys.stderr)
        row: dict[str, Any] = {"kit": str(kit), "attempts": attempts, "tool_call_events": calls,
                               "ledger_mib": round(size / 2**20, 1), "load": load(),
                               "score": measure(argv, kit)}
        if append:
            copy = shape / "run-append"
            shutil.copytree(run_dir, copy)
            row["score_append"] = measure([*argv[:3], str(copy), *argv[4:], "--append"], kit)
            shutil.rmtree(copy)
        out.append(row)
    shutil.rmtree(shape, ignore_errors=True)
    return out


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--attempts", type=int, default=10_000)
    p.add_argument("--calls", type=int, default=1_000_000, help="tool_call events in the main shape")
    p.add_argument("--append", action="store_true", help="also time --append (writes one event per attempt)")
    p.add_argument("--scaling", action="store_true",
                   help="add the shapes with twice the events per attempt and twice the attempts")
    args = p.parse_args()
    shapes = [(args.attempts, args.calls)]
    if args.scaling:
        shapes += [(args.attempts, args.calls * 2), (args.attempts * 2, args.calls)]
    need = max(c for _, c in shapes) * BYTES_PER_EVENT_GUESS * 2
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    scratch.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(scratch).free
    if free < need:
        print(f"skipped: {free / 2**20:.0f} MiB free in {scratch}, about {need / 2**20:.0f} MiB needed",
              file=sys.stderr)
        return 0
    results: list[dict[str, Any]] = []
    try:
        for attempts, calls in shapes:
            print(f"generating {attempts} attempts / {calls} tool_call events ...", file=sys.stderr)
            results += bench(scratch, attempts, calls, args.append, kits(args))
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    columns = {"kit": lambda r: r["kit"], "attempts": lambda r: f"{r['attempts']:,}",
               "tool_call events": lambda r: f"{r['tool_call_events']:,}",
               "ledger": lambda r: f"{r['ledger_mib']} MiB"}
    for step in ("score", "score_append") if args.append else ("score",):
        label = "" if step == "score" else "--append "
        columns |= {f"{label}wall": lambda r, s=step: f"{r[s]['wall_seconds']} s",
                    f"{label}CPU": lambda r, s=step: f"{r[s]['cpu_seconds']} s",
                    f"{label}peak RSS": lambda r, s=step: f"{r[s]['peak_rss_mib']} MiB"}
    table(results, {**columns, "load": lambda r: r["load"]}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
