#!/usr/bin/env python3
"""Benchmark score_run.py against the number of attempts: is scoring linear in the run's size?

Builds runs of N attempts by repeating the sample set's baseline run (18 attempts over the
bookshop cases, with their tool calls) under sample numbers 0, 1, 2, ..., writes one hand-authored
judge reply per attempt (the baseline's authored reply for that case), then runs the real
`score_run.py --local --judge hand:FILE` by path: the local endpoint re-executes every final query
through real Malloy and DuckDB, and the judge answers offline. Reports wall time, CPU time and
peak RSS (from `/usr/bin/time -v`) per size, and the ratio of each size's time to the smaller one's.

`--kit DIR` runs another checkout's score_run.py (its own .venv) on the same generated runs, so
the code before a change and after it are measured side by side in one session.
Not a test: the figures go to benchmarks/README.md.

Beside each size, in the same session, the floor (`--floor`, a row of its own): a plain JSON-lines
loop over the run's ledger, then DuckDB (one thread, from the model folder) running the SQL of
every attempt's final query once per attempt, what re-executing every attempt costs at the least.

Examples:
  .venv/bin/python benchmarks/bench_scoring.py
  .venv/bin/python benchmarks/bench_scoring.py --sizes 50 200 800 --kit /tmp/base --json
  .venv/bin/python benchmarks/bench_scoring.py --sizes 3200 --floor
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from measure import KIT_ROOT, kit_python, kits, load, measure, parser, table

SET_DIR = KIT_ROOT / "evals" / "bookshop"
BASELINE = SET_DIR / "runs" / "baseline"
AUTHORED = SET_DIR / "recordings" / "judge" / "_authored.baseline.jsonl"
RUN_ID = "bench"


def make_run(root: Path, attempts: int) -> tuple[Path, Path]:
    """A run folder of `attempts` attempts copied from the baseline run, and its hand replies."""
    source = [json.loads(line) for line in (BASELINE / "events.jsonl").read_text().splitlines()]
    by_qid: dict[str, list[dict]] = {}
    for e in source:
        if e.get("kind") in ("attempt", "tool_call"):
            by_qid.setdefault(e["qid"], []).append(e)
    qids = list(by_qid)
    replies = {json.loads(line)["key"].split(".")[1]: json.loads(line)["replies"]
               for line in AUTHORED.read_text().splitlines() if line.strip()}
    run = root / f"run-{attempts}"
    run.mkdir(parents=True)
    info = json.loads((BASELINE / "run.json").read_text())
    info["runId"] = RUN_ID
    (run / "run.json").write_text(json.dumps(info, indent=2) + "\n")
    hand = root / f"judge-{attempts}.jsonl"
    with (run / "events.jsonl").open("w") as ledger, hand.open("w") as judge:
        for n in range(attempts):
            qid, sample = qids[n % len(qids)], n // len(qids)
            for e in by_qid[qid]:
                ledger.write(json.dumps({**e, "event_id": uuid.uuid4().hex, "sample": sample},
                                        ensure_ascii=False, separators=(",", ":")) + "\n")
            if qid in replies:
                judge.write(json.dumps({"key": f"{RUN_ID}.{qid}.{sample}",
                                        "replies": replies[qid]}) + "\n")
    return run, hand


def floor(run: Path) -> dict[str, object]:
    """The floor of scoring `run`: its ledger read by a plain JSON-lines loop, then each attempt's
    final query, as the SQL Malloy compiles it to, run straight in DuckDB once per attempt."""
    import duckdb

    sys.path.insert(0, str(KIT_ROOT / "scripts"))
    from malloy_evals.answer.reexecute import final_call
    from malloy_evals.endpoint.runner import MalloyQueryError, MalloyRuntime, default_allow

    model = SET_DIR / "model"
    started, cpu = time.perf_counter(), time.process_time()
    with (run / "events.jsonl").open(encoding="utf-8") as fh:
        attempts = [e for e in map(json.loads, fh) if e.get("kind") == "attempt"]
    ledger = (time.perf_counter() - started, time.process_time() - cpu)
    calls = [c for c in (final_call(a, "bookshop.malloy") for a in attempts) if c is not None]
    sql: dict[str, str | None] = {}
    with MalloyRuntime(model, allow=default_allow(model), pool_size=1) as rt:
        for c in calls:
            key = json.dumps(c, sort_keys=True)
            if key not in sql:
                try:
                    sql[key] = rt.execute(c["query"], source_name=c["source_name"],
                                          query_name=c["query_name"], givens=c["givens"])["sql"]
                except MalloyQueryError:  # a query Malloy refuses has no SQL for DuckDB to run
                    sql[key] = None
    runs = [q for q in (sql[json.dumps(c, sort_keys=True)] for c in calls) if q]
    here = Path.cwd()
    os.chdir(model)
    try:
        con = duckdb.connect(config={"threads": 1})
        started, cpu = time.perf_counter(), time.process_time()
        for q in runs:
            con.execute(q).fetchall()
        duck = (time.perf_counter() - started, time.process_time() - cpu)
        con.close()
    finally:
        os.chdir(here)
    return {"wall_seconds": round(ledger[0] + duck[0], 2), "cpu_seconds": round(ledger[1] + duck[1], 2),
            "peak_rss_mib": "-", "counts": {"attempts": len(attempts), "queries run": len(runs),
                                            "distinct": len({q for q in runs})},
            "ledger_loop_seconds": round(ledger[0], 3), "duckdb_seconds": round(duck[0], 2)}


def score(kit: Path, run: Path, hand: Path, parallel: int, scratch: Path) -> dict[str, object]:
    """One score_run.py under /usr/bin/time -v, and what it reported."""
    script = kit / "skills" / "eval-answer" / "scripts" / "score_run.py"
    out = scratch / "stdout.json"
    result = measure([kit_python(kit), str(script), "--run", str(run), "--set", str(SET_DIR),
                      "--judge", f"hand:{hand}", "--local", "--parallel", str(parallel), "--json"],
                     kit, stdout=out)
    doc = json.loads(out.read_text())
    return {**result, "counts": {k: v for k, v in doc["counts"].items() if v},
            "headline": doc["headline"]}


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 800])
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--floor", action="store_true",
                   help="also measure each size's floor (JSON-lines loop + DuckDB on every SQL)")
    args = p.parse_args()
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="bench-scoring-"))
    scratch.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    try:
        for size in args.sizes:
            for kit in kits(args):
                run, hand = make_run(scratch / kit.name, size)
                print(f"score_run {size} attempts, {kit} (load {load()}) ...", file=sys.stderr)
                r = score(kit, run, hand, args.parallel, scratch)
                results.append({"kit": str(kit), "attempts": size, "load": load(), **r})
                if args.floor and kit == KIT_ROOT:
                    f = floor(run)
                    results.append({"kit": "floor", "attempts": size, "load": load(), **f})
                shutil.rmtree(run)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    previous: dict[str, float] = {}
    for r in results:  # each size's time over the previous size's, for the same kit
        wall = float(r["wall_seconds"])
        r["vs_previous_size"] = (round(wall / previous[r["kit"]], 2)
                                 if r["kit"] in previous else None)
        previous[r["kit"]] = wall
    table(results, {"kit": lambda r: r["kit"], "attempts": lambda r: r["attempts"],
                    "wall": lambda r: f"{r['wall_seconds']} s", "CPU": lambda r: f"{r['cpu_seconds']} s",
                    "peak RSS": lambda r: f"{r['peak_rss_mib']} MiB",
                    "per attempt": lambda r: f"{1000 * r['wall_seconds'] / r['attempts']:.0f} ms",
                    "vs previous size": lambda r: f"{r['vs_previous_size']}x" if r['vs_previous_size'] else "-",
                    "load": lambda r: r["load"]}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
