#!/usr/bin/env python3
"""Benchmark the ledger: appending and reading back a large events.jsonl.

Each step runs in its own child process, so its wall time, its CPU time and its peak RSS (from
wait4) are its own:

  append       N get_context tool_call events through Run.append, in batches of B (plain batches:
               the appender's index is not needed, so the file is never read)
  read         Run.read() of the whole ledger (the tolerant reader: every event as a dict)
  score-cold   one score appended by a fresh process: the index streams the whole ledger once
  score-each   one score per attempt for A attempts, one batch each, in one process (as
               score_run.py does): the first batch indexes the ledger, later ones read only the tail

With `--readers`, instead: a generated run (benchmarks/measure.py `write_run`: N tool calls across
A attempts, an attempt and a score each, a re-score every 1,000 attempts) read by each reader of a
whole ledger, each in its own child, beside its floors on the same file in the same run:

  view+summary   the live view (every live event in memory) folded into the summary: the reading
                 the run summary made before it streamed (`figures.summarize_view`)
  summary        the run summary as it reads now: one streaming pass (`figures.summarize`)
  validate       validate.py RUN --json, by path
  duckdb         DuckDB reading the same file with declared columns (kind, ids, qid, sample, tool,
                 verdict, the entity ids) and counting what the summary counts per attempt
  json-loop      a plain Python loop: every line through json.loads, nothing kept

Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_ledger.py
  .venv/bin/python benchmarks/bench_ledger.py --events 200000 --batch 1000 --json
  .venv/bin/python benchmarks/bench_ledger.py --readers --events 1000000 --attempts 10000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT / "scripts"))

from malloy_evals.ledger.run import Run
from measure import MEASURED, duckdb_argv, load, table, write_run
from measure import measure as measure_command

BYTES_PER_EVENT_GUESS = 1000
CALLS_PER_ATTEMPT = 20


def tool_call(n: int) -> dict[str, object]:
    """The n-th get_context call: attempt n // 20, eight ranked entities, like a recorded one."""
    ids = [f"measure:orders:m_{(n + i) % 50}" for i in range(8)]
    return {"kind": "tool_call", "qid": f"c{n // CALLS_PER_ATTEMPT // 10:05d}",
            "sample": n // CALLS_PER_ATTEMPT % 10, "call_index": n % CALLS_PER_ATTEMPT,
            "tool": "get_context", "targets": [f"measure: thing {n}"],
            "target_shapes": [{"type": "measure", "has_text": True}],
            "scopes": [{"environment": "samples", "package": "p"}],
            "ranked_summary": {"entity_ids": ids,
                               "hits": [{"entity_id": e, "relevance": 0.5, "position": i}
                                        for i, e in enumerate(ids)],
                               "result_count": len(ids), "doc_tokens": ["net_revenue"]},
            "retrieval_mode": "lexical", "error": None}


def score(attempt: int) -> dict[str, object]:
    return {"kind": "score", "qid": f"c{attempt // 10:05d}", "sample": attempt % 10,
            "verdict": "match"}


def child(mode: str, run_dir: Path, events: int, batch: int, attempts: int) -> None:
    """One measured step (runs in the child process)."""
    run = Run.open(run_dir)
    if mode == "append":
        for start in range(0, events, batch):
            run.append([tool_call(n) for n in range(start, min(start + batch, events))])
    elif mode == "read":
        read = run.read()
        if len(read.events) < events or read.problems:
            raise SystemExit(f"read back {len(read.events)} events, problems {read.problems[:3]}")
    elif mode == "score-cold":
        run.append([score(attempts)])  # an attempt score-each does not touch
    elif mode == "score-each":
        for a in range(attempts):
            run.append([score(a)])
    else:
        raise SystemExit(f"unknown mode {mode}")


READERS = ("view+summary", "summary", "validate", "duckdb", "json-loop")
VALIDATE = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "validate.py"
# The columns DuckDB is told to read (the rest of each line is skipped unparsed).
DUCK_COLUMNS = ("{kind: 'VARCHAR', event_id: 'VARCHAR', target_event_id: 'VARCHAR', "
                "qid: 'VARCHAR', sample: 'BIGINT', tool: 'VARCHAR', verdict: 'VARCHAR', "
                "ranked_summary: 'STRUCT(entity_ids VARCHAR[])'}")
DUCK_QUERY = """
WITH e AS (SELECT * FROM read_json(?, format='newline_delimited', columns={columns})),
voided AS (SELECT target_event_id AS id FROM e WHERE kind = 'void'),
live AS (SELECT * FROM e WHERE kind <> 'void' AND event_id NOT IN (SELECT id FROM voided)),
calls AS (SELECT qid, sample, count(*) FILTER (WHERE tool = 'get_context') AS ctx,
                 count(*) FILTER (WHERE tool = 'execute_query') AS exe,
                 count(DISTINCT u.id) AS entities
          FROM live LEFT JOIN LATERAL unnest(ranked_summary.entity_ids) AS u(id) ON true
          WHERE kind = 'tool_call' GROUP BY qid, sample),
scores AS (SELECT qid, sample, last(verdict ORDER BY rowid) AS verdict FROM
           (SELECT *, row_number() OVER () AS rowid FROM live) WHERE kind = 'score'
           GROUP BY qid, sample)
SELECT s.verdict, count(*), sum(c.ctx), sum(c.exe), sum(c.entities)
FROM scores s LEFT JOIN calls c USING (qid, sample) GROUP BY s.verdict ORDER BY 1
"""


def reader(mode: str, run_dir: Path, set_dir: Path) -> None:
    """One reader of a whole ledger (runs in the child process)."""
    path = run_dir / "events.jsonl"
    if mode == "json-loop":
        with path.open("rb") as fh:
            for line in fh:
                json.loads(line)
        return
    from malloy_evals.report.figures import summarize, summarize_view
    from malloy_evals.sets.eval_set import load_set

    run, eval_set = Run.open(run_dir), load_set(set_dir)
    if mode == "summary":
        s = summarize(run, eval_set)
    elif mode == "view+summary":
        s = summarize_view(run, eval_set, run.view())
    else:
        raise SystemExit(f"unknown reader {mode}")
    print(s.verdicts, s.cost["get_context_calls"], file=sys.stderr)


def readers(args: argparse.Namespace, scratch: Path) -> list[dict[str, object]]:
    """Generate the run once, then time every reader on it, each in its own child."""
    print(f"generating {args.attempts:,} attempts / {args.events:,} tool calls ...",
          file=sys.stderr)
    set_dir, run_dir = write_run(scratch / "readers", args.attempts, args.events)
    size = round((run_dir / "events.jsonl").stat().st_size / 2**20, 1)
    rows: list[dict[str, object]] = []
    for mode in args.only or READERS:
        print(f"{mode} (load {load()}) ...", file=sys.stderr)
        if mode == "validate":
            argv = [sys.executable, str(VALIDATE), str(run_dir), "--json"]
        elif mode == "duckdb":
            argv = duckdb_argv(DUCK_QUERY.format(columns=DUCK_COLUMNS),
                               str(run_dir / "events.jsonl"))
        else:
            argv = [sys.executable, __file__, "--reader", mode, "--run", str(run_dir),
                    "--set", str(set_dir)]
        rows.append({"reader": mode, "tool_call_events": args.events, "attempts": args.attempts,
                     "ledger_mib": size, "load": load(),
                     **measure_command(argv, KIT_ROOT, ok=(0, 1))})
    return rows


def measure(mode: str, run_dir: Path, args: argparse.Namespace) -> dict[str, float]:
    """Run one step in a child: wall seconds, and its own CPU seconds and peak RSS (MiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", mode, "--run", str(run_dir),
                             "--events", str(args.events), "--batch", str(args.batch),
                             "--attempts", str(args.attempts)], stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{mode} failed: {stderr.strip()}")
    return {"wall_seconds": round(wall, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=200_000, help="tool_call events to append")
    p.add_argument("--batch", type=int, default=1_000, help="events per append")
    p.add_argument("--attempts", type=int, default=1_000, help="scores appended one by one")
    p.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--readers", action="store_true",
                   help="time the whole-ledger readers beside DuckDB and a plain JSON loop instead")
    p.add_argument("--only", action="append", choices=READERS,
                   help="with --readers: only this reader (repeatable)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--reader", help=argparse.SUPPRESS)
    p.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--set", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.run, args.events, args.batch, args.attempts)
        return 0
    if args.reader:
        reader(args.reader, args.run, args.set)
        return 0
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    scratch.mkdir(parents=True, exist_ok=True)
    if args.readers:
        try:
            rows = readers(args, scratch)
        finally:
            if args.dir is None:
                shutil.rmtree(scratch, ignore_errors=True)
        table(rows, {"reader": lambda r: r["reader"],
                     "ledger": lambda r: f"{r['ledger_mib']} MiB", **MEASURED}, args.json)
        return 0
    need = args.events * BYTES_PER_EVENT_GUESS
    if shutil.disk_usage(scratch).free < need:
        print(f"skipped: less than {need / 2**20:.0f} MiB free in {scratch}", file=sys.stderr)
        return 0
    results: dict[str, object] = {"events": args.events, "batch": args.batch,
                                  "attempts": args.attempts}
    try:
        set_dir = scratch / "set"
        set_dir.mkdir(exist_ok=True)
        (set_dir / "set.json").write_text(json.dumps({"name": "bench", "datasetVersion": 1,
                                                      "targetPackage": "p",
                                                      "targetModelPath": "m.malloy"}))
        (set_dir / "cases.jsonl").write_text("")
        run_dir = scratch / "run"
        shutil.rmtree(run_dir, ignore_errors=True)
        Run.create(run_dir, set_dir, answerer_model="bench", run_id="bench")
        for mode in ("append", "read", "score-cold", "score-each"):
            print(f"{mode} ...", file=sys.stderr)
            results[mode] = measure(mode, run_dir, args)
        results["ledger_mib"] = round((run_dir / "events.jsonl").stat().st_size / 2**20, 1)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"ledger: {args.events:,} tool_call events, {results['ledger_mib']} MiB")
        print("| step | wall | CPU | peak RSS |")
        print("|---|---:|---:|---:|")
        for mode in ("append", "read", "score-cold", "score-each"):
            r = results[mode]
            print(f"| {mode} | {r['wall_seconds']} s | {r['cpu_seconds']} s | {r['peak_rss_mib']} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
