#!/usr/bin/env python3
"""Benchmark score_retrieval.py over a generated ledger (SPEC 5.3, 10): wall time and peak memory.

Generates a set and a run whose ledger holds N get_context/execute_query tool_call events across
M attempts (plus one attempt and one score event each), then runs the real script by path, as a
user would, and reads its peak RSS from the kernel (wait4). Further shapes with twice the events
per attempt, and twice the attempts, show what memory grows with. Skips with a message when the
disk is short. Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_retrieval.py
  .venv/bin/python benchmarks/bench_retrieval.py --attempts 10000 --calls 200000 --append --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT / "scripts"))

from malloy_evals.ledger.run import Run

SCRIPT = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "score_retrieval.py"
SAMPLES_PER_CASE = 10
KINDS = ("dimension", "measure", "view", "source")
BYTES_PER_EVENT_GUESS = 700


def make_set(root: Path, cases: int) -> Path:
    """A set of `cases` cases, each expecting two entities and one either-or group."""
    d = root / "set"
    d.mkdir(parents=True)
    (d / "set.json").write_text(json.dumps({"name": "bench", "datasetVersion": 1, "targetPackage": "p",
                                            "targetModelPath": "m.malloy"}))
    rng = random.Random(0)
    with (d / "cases.jsonl").open("w") as fh:
        for i in range(cases):
            src = f"s{i % 40}"
            fh.write(json.dumps({
                "qid": f"c{i:05d}", "question": f"Question {i}?",
                "coverage": rng.choice(["covered", "covered", "derivable", "absent"]),
                "expectedEntities": {
                    "required": [f"measure:{src}:m_{i % 97}", f"dimension:{src}:d_{i % 89}"],
                    "requiredAnyOf": [[f"view:{src}:v_{i % 31}", f"query:{src}:q_{i % 29}"]]},
            }) + "\n")
    return d


def write_ledger(run_dir: Path, attempts: int, calls: int, phase: str) -> int:
    """Append raw, schema-shaped lines (generation skips per-event validation; the reader is timed)."""
    rng = random.Random(1)
    per_attempt = max(1, calls // attempts)
    verdicts = ["match", "no_match", "no_match", "near_match", "needs_human"]
    written = 0
    with (run_dir / "events.jsonl").open("w") as fh:
        for a in range(attempts):
            case, sample = a // SAMPLES_PER_CASE, a % SAMPLES_PER_CASE
            key = {"qid": f"c{case:05d}", "sample": sample, "phase": phase}
            src = f"s{case % 40}"
            lines = [{"kind": "attempt", "event_id": uuid.uuid4().hex, "at": "2026-11-30T12:00:00.000Z", **key,
                      "submitted": True, "final_query": f"run: {src} -> {{ aggregate: m_{case % 97} }}",
                      "answer_text": "The answer is 42.", "n_get_context": per_attempt - 4}]
            for c in range(per_attempt):
                base = {"kind": "tool_call", "event_id": uuid.uuid4().hex, "at": "2026-11-30T12:00:01.000Z",
                        **key, "call_index": c}
                if c % 5 == 4:
                    lines.append({**base, "tool": "execute_query", "query": f"run: {src} -> {{ aggregate: x }}",
                                  "model_path": "m.malloy", "source_name": None, "query_name": None,
                                  "givens": None, "error": None})
                    continue
                # Each call returns 8 of the 12 entities of one kind its source has: repeated calls
                # overlap, as they do against one model.
                kind = KINDS[c % 4]
                ids = [f"{kind}:{src}:{kind[0]}_{n}" for n in rng.sample(range(12), 8)]
                lines.append({**base, "tool": "get_context", "targets": [f"{kind}: thing {c}"],
                              "target_shapes": [{"type": kind, "has_text": True}],
                              "scopes": [{"environment": "samples", "package": "p"}],
                              "ranked_summary": {"entity_ids": ids,
                                                 "hits": [{"entity_id": e, "relevance": 0.5, "position": i}
                                                          for i, e in enumerate(ids)],
                                                 "result_count": len(ids), "doc_tokens": ["net_revenue"]},
                              "retrieval_mode": "lexical", "error": None})
            lines.append({"kind": "score", "event_id": uuid.uuid4().hex, "at": "2026-11-30T12:00:02.000Z", **key,
                          "verdict": verdicts[a % len(verdicts)]})
            fh.write("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
            written += per_attempt
    return written


def measure(args: list[str]) -> dict[str, float]:
    """Run the script once: wall seconds, and this child's own CPU seconds and peak RSS (MiB) from
    wait4 (CPU time is the steadier figure on a shared machine)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=KIT_ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"score_retrieval failed: {stderr.strip()}")
    return {"wall_seconds": round(wall, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def bench(root: Path, attempts: int, calls: int, append: bool) -> dict[str, object]:
    """One shape: generate, then time score_retrieval (and --append when asked)."""
    shape = root / f"a{attempts}-c{calls}"
    set_dir = make_set(shape, (attempts + SAMPLES_PER_CASE - 1) // SAMPLES_PER_CASE)
    run_dir = shape / "run"
    Run.create(run_dir, set_dir, answerer_model="bench", run_id="bench")
    tool_calls = write_ledger(run_dir, attempts, calls, "baseline")
    size = (run_dir / "events.jsonl").stat().st_size
    out: dict[str, object] = {"attempts": attempts, "tool_call_events": tool_calls,
                              "ledger_mib": round(size / 2**20, 1)}
    out["score"] = measure(["--run", str(run_dir), "--set", str(set_dir), "--json"])
    if append:
        out["score_append"] = measure(["--run", str(run_dir), "--set", str(set_dir), "--append", "--json"])
    shutil.rmtree(shape, ignore_errors=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attempts", type=int, default=10_000)
    p.add_argument("--calls", type=int, default=200_000, help="tool_call events in the main shape")
    p.add_argument("--append", action="store_true", help="also time --append (writes one event per attempt)")
    p.add_argument("--only-main", action="store_true", help="skip the two comparison shapes")
    p.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    shapes = [(args.attempts, args.calls)]
    if not args.only_main:
        shapes += [(args.attempts, args.calls * 2), (args.attempts * 2, args.calls)]
    need = max(c for _, c in shapes) * BYTES_PER_EVENT_GUESS * 2
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    scratch.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(scratch).free
    if free < need:
        print(f"skipped: {free / 2**20:.0f} MiB free in {scratch}, about {need / 2**20:.0f} MiB needed",
              file=sys.stderr)
        return 0
    results = []
    try:
        for attempts, calls in shapes:
            print(f"generating {attempts} attempts / {calls} tool_call events ...", file=sys.stderr)
            results.append(bench(scratch, attempts, calls, args.append))
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("| attempts | tool_call events | ledger | wall | CPU | peak RSS |"
              + (" --append wall | --append CPU | --append RSS |" if args.append else ""))
        print("|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if args.append else ""))
        for r in results:
            s = r["score"]
            line = (f"| {r['attempts']:,} | {r['tool_call_events']:,} | {r['ledger_mib']} MiB | "
                    f"{s['wall_seconds']} s | {s['cpu_seconds']} s | {s['peak_rss_mib']} MiB |")
            if args.append:
                a = r["score_append"]
                line += f" {a['wall_seconds']} s | {a['cpu_seconds']} s | {a['peak_rss_mib']} MiB |"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
