#!/usr/bin/env python3
"""Benchmark: score_run.py --parallel 1 vs --parallel 4 over one run of many attempts.

A run of N attempts is made from the sample set's baseline run: its live attempts and tool calls
copied under samples 1, 2, ... until there are N. Each is scored by `score_run.py --local` with a
hand-written judge (one `match` reply per attempt key, no network), so the time is the kit's own:
reading the ledger, re-executing every final query through the local endpoint, building and
recording the judge request, appending the score, the summary. Rounds alternate the two
settings on fresh copies of the run; the figure is the median wall time of each and their ratio.

Examples:
  .venv/bin/python benchmarks/bench_parallel.py
  .venv/bin/python benchmarks/bench_parallel.py --attempts 200 --rounds 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from malloy_evals.ledger.events import read_ledger
from malloy_evals.ledger.run import Run

SET = ROOT / "evals" / "bookshop"
BASELINE = SET / "runs" / "baseline"
SCORE_RUN = ROOT / "skills" / "eval-answer" / "scripts" / "score_run.py"
COPIED = ("attempt", "tool_call")
DROPPED = ("event_id", "at")


def make_run(root: Path, attempts: int) -> tuple[Path, Path]:
    """A run of `attempts` attempts copied from the baseline run, and the hand replies for it."""
    events = [e for e in read_ledger(BASELINE / "events.jsonl").events if e["kind"] in COPIED]
    qids = sorted({e["qid"] for e in events if e["kind"] == "attempt"})
    run = Run.create(root / "run", SET, answerer_model="bench", run_id="bench")
    keys, batch = [], []
    for n in range(attempts):
        qid, sample = qids[n % len(qids)], n // len(qids) + 1
        keys.append(f"bench.{qid}.{sample}")
        batch += [{**{k: v for k, v in e.items() if k not in DROPPED}, "sample": sample}
                  for e in events if e["qid"] == qid]
    run.append(batch)
    replies = root / "replies.jsonl"
    reply = {"verdict": "match", "confidence": 9, "why": "benchmark reply", "column_pairing": {}}
    replies.write_text("".join(json.dumps({"key": k, "replies": [reply]}) + "\n" for k in keys))
    return run.dir, replies


def score_once(pristine: Path, replies: Path, parallel: int, scratch: Path) -> float:
    """Seconds for one score_run over a fresh copy of the run."""
    run = scratch / f"p{parallel}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(pristine, run)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(SCORE_RUN), "--run", str(run), "--set", str(SET),
                           "--judge", f"hand:{replies}", "--local", "--parallel", str(parallel),
                           "--json"], capture_output=True, text=True, cwd=ROOT, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"score_run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    counts = json.loads(proc.stdout)["counts"]
    if counts.get("failed"):
        raise SystemExit(f"score_run left attempts unscored: {counts}")
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[8:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attempts", type=int, default=200, help="attempts in the run (default 200)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each setting (default 3)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-parallel-"))
    times: dict[int, list[float]] = {1: [], 4: []}
    load = [os.getloadavg()[0]]
    try:
        pristine, replies = make_run(scratch, args.attempts)
        for r in range(args.rounds):
            for parallel in ((1, 4) if r % 2 == 0 else (4, 1)):
                times[parallel].append(score_once(pristine, replies, parallel, scratch))
                print(f"round {r + 1}: --parallel {parallel}: {times[parallel][-1]:.1f} s",
                      file=sys.stderr)
        load.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    one, four = statistics.median(times[1]), statistics.median(times[4])
    result = {"attempts": args.attempts, "rounds": args.rounds, "cores": os.cpu_count(),
              "parallel_1_s": [round(t, 2) for t in times[1]],
              "parallel_4_s": [round(t, 2) for t in times[4]],
              "median_parallel_1_s": round(one, 2), "median_parallel_4_s": round(four, 2),
              "speedup": round(one / four, 2), "load_average": [round(x, 2) for x in load]}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.attempts} attempts: --parallel 1 {one:.1f} s, --parallel 4 {four:.1f} s "
              f"(median of {args.rounds}); speed-up {one / four:.2f}x; load {load[0]:.1f} -> "
              f"{load[-1]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
