"""What every benchmark here shares: running one command under `/usr/bin/time -v`, and generated
run folders of a given size. Not a benchmark itself; the bench_*.py scripts import it.

Each measured command runs in its own process, so its wall time, CPU time and peak resident memory
(as `/usr/bin/time -v` reads them from the kernel) are its own. `--kit DIR` in the scripts points
the same measurement at another checkout (its own .venv), so code before and after a change is
measured side by side, on the same generated inputs, in one session.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

KIT_ROOT = Path(__file__).resolve().parents[1]
SAMPLES_PER_CASE = 10
KINDS = ("dimension", "measure", "view", "source")
TIME = "/usr/bin/time"


def kit_python(kit: Path) -> str:
    """The checkout's own interpreter (its .venv), so each kit runs with what it installed."""
    return str(kit / ".venv" / "bin" / "python")


def measure(argv: list[str], cwd: Path, *, ok: tuple[int, ...] = (0,),
            stdout: Path | None = None) -> dict[str, Any]:
    """Run `argv` under `/usr/bin/time -v`: wall and CPU seconds, peak RSS in MiB, exit code."""
    out = stdout.open("wb") if stdout is not None else subprocess.DEVNULL
    try:
        start = time.perf_counter()
        proc = subprocess.run([TIME, "-v", *argv], cwd=cwd, stdout=out, stderr=subprocess.PIPE,
                              check=False)
        wall = time.perf_counter() - start
    finally:
        if stdout is not None:
            out.close()  # type: ignore[union-attr]
    report = proc.stderr.decode("utf-8", "replace")
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{report[-3000:]}")

    def field(name: str) -> float:
        m = re.search(rf"{re.escape(name)}: ([0-9.]+)", report)
        return float(m.group(1)) if m else float("nan")

    return {"wall_seconds": round(wall, 2),
            "cpu_seconds": round(field("User time (seconds)") + field("System time (seconds)"), 2),
            "peak_rss_mib": round(field("Maximum resident set size (kbytes)") / 1024, 1),
            "exit_code": proc.returncode}


def duckdb_argv(sql: str, *params: str) -> list[str]:
    """A child that runs `sql` (with `?` parameters) in DuckDB on one thread, as the Python
    readers use one core, and prints the result on stderr: the floor a reader is measured beside."""
    code = ("import duckdb, sys; con = duckdb.connect(); con.execute('SET threads = 1'); "
            "print(con.execute(sys.argv[1], sys.argv[2:]).fetchall(), file=sys.stderr)")
    return [sys.executable, "-c", code, sql, *params]


def load() -> str:
    """The load average now, as `uptime` prints it."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_set(root: Path, cases: int) -> Path:
    """A set of `cases` cases, each expecting two entities and one either-or group."""
    d = root / "set"
    d.mkdir(parents=True)
    (d / "set.json").write_text(json.dumps({"name": "bench", "datasetVersion": 1,
                                            "targetPackage": "p", "targetModelPath": "m.malloy"}))
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


def write_run(root: Path, attempts: int, calls: int, phase: str = "baseline") -> tuple[Path, Path]:
    """A set and a run whose ledger holds `calls` tool_call events (four get_context calls to one
    execute_query, each get_context answer carrying 8 ranked entities with hits) across
    `attempts` attempts, plus one attempt and one score each; and one void per 1,000 attempts
    (a re-score). Written as raw schema-shaped lines: generation skips per-event validation, only
    the reader is timed."""
    set_dir = make_set(root, (attempts + SAMPLES_PER_CASE - 1) // SAMPLES_PER_CASE)
    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({
        "runId": "bench", "phase": phase, "started": "2026-11-30T12:00:00.000Z",
        "answererModel": "bench", "setName": "bench", "datasetVersion": 1, "schemaVersion": 1}))
    rng = random.Random(1)
    per_attempt = max(1, calls // attempts)
    verdicts = ["match", "no_match", "no_match", "near_match", "needs_human"]
    at = "2026-11-30T12:00:01.000Z"
    with (run_dir / "events.jsonl").open("w") as fh:
        for a in range(attempts):
            case, sample = a // SAMPLES_PER_CASE, a % SAMPLES_PER_CASE
            key = {"qid": f"c{case:05d}", "sample": sample, "phase": phase}
            src = f"s{case % 40}"
            lines: list[dict[str, Any]] = [{
                "kind": "attempt", "event_id": uuid.uuid4().hex, "at": at, **key,
                "submitted": True, "final_query": f"run: {src} -> {{ aggregate: m_{case % 97} }}",
                "answer_text": "The answer is 42.", "n_get_context": per_attempt - 4}]
            for c in range(per_attempt):
                base = {"kind": "tool_call", "event_id": uuid.uuid4().hex, "at": at, **key,
                        "call_index": c}
                if c % 5 == 4:
                    lines.append({**base, "tool": "execute_query",
                                  "query": f"run: {src} -> {{ aggregate: x }}",
                                  "model_path": "m.malloy", "source_name": None,
                                  "query_name": None, "givens": None, "error": None})
                    continue
                # Each call returns 8 of the 12 entities of one kind its source has: repeated
                # calls overlap, as they do against one model.
                kind = KINDS[c % 4]
                ids = [f"{kind}:{src}:{kind[0]}_{n}" for n in rng.sample(range(12), 8)]
                lines.append({**base, "tool": "get_context", "targets": [f"{kind}: thing {c}"],
                              "target_shapes": [{"type": kind, "has_text": True}],
                              "scopes": [{"environment": "samples", "package": "p"}],
                              "ranked_summary": {
                                  "entity_ids": ids,
                                  "hits": [{"entity_id": e, "relevance": 0.5, "position": i}
                                           for i, e in enumerate(ids)],
                                  "result_count": len(ids), "doc_tokens": ["net_revenue"]},
                              "retrieval_mode": "lexical", "error": None})
            first = {"kind": "score", "event_id": uuid.uuid4().hex, "at": at, **key,
                     "verdict": verdicts[a % len(verdicts)]}
            lines.append(first)
            if a % 1000 == 999:
                lines.append({"kind": "void", "event_id": uuid.uuid4().hex, "at": at,
                              "target_event_id": first["event_id"], "reason": "re-scored"})
                lines.append({**first, "event_id": uuid.uuid4().hex, "verdict": "match"})
            fh.write("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return set_dir, run_dir


def parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser (its docstring as help) with the flags every one takes: --kit
    (repeatable), --dir and --json."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                epilog="\n".join(doc.splitlines()[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kit", type=Path, action="append", default=[],
                   help="another checkout to measure on the same inputs (repeatable)")
    p.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--json", action="store_true")
    return p


def kits(args: argparse.Namespace) -> list[Path]:
    """This checkout, then every --kit."""
    return [KIT_ROOT, *[k.resolve() for k in args.kit]]


# The columns of a row `measure` filled, as `table` prints them after a benchmark's own columns.
MEASURED: dict[str, Callable[[dict[str, Any]], object]] = {
    "wall": lambda r: f"{r['wall_seconds']} s", "CPU": lambda r: f"{r['cpu_seconds']} s",
    "peak RSS": lambda r: f"{r['peak_rss_mib']} MiB", "load": lambda r: r["load"]}


def table(rows: list[dict[str, Any]], columns: dict[str, Callable[[dict[str, Any]], object]],
          as_json: bool) -> None:
    """Print the rows as one JSON document, or as a Markdown table of `columns` (title -> cell)."""
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|")
    for r in rows:
        print("| " + " | ".join(str(cell(r)) for cell in columns.values()) + " |")
