#!/usr/bin/env python3
"""Benchmark validate.py on a large run: wall time and peak memory against the number of events.

Generates runs whose ledgers hold N tool_call events (plus one attempt and one score per attempt,
and a re-score every 1,000 attempts) and runs the real `validate.py RUN --json` by path under
`/usr/bin/time -v`. The validator streams the ledger and keeps only event ids and the rules' state,
so its memory should follow the number of events by about a hundred bytes each, never their size.

`--kit DIR` measures another checkout on the same ledgers, side by side (its own .venv).
Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_validate.py
  .venv/bin/python benchmarks/bench_validate.py --events 200000 1000000 --kit /tmp/base --json
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from measure import (
    MEASURED,
    duckdb_argv,
    kit_python,
    kits,
    load,
    measure,
    parser,
    table,
    write_run,
)

SCRIPT = Path("skills") / "eval-answer" / "scripts" / "validate.py"
KIT_ROOT = Path(__file__).resolve().parents[1]
DUCK_CHECK = """
WITH e AS (SELECT * FROM read_json(?, format='newline_delimited',
             columns={kind: 'VARCHAR', event_id: 'VARCHAR', target_event_id: 'VARCHAR',
                      qid: 'VARCHAR', sample: 'BIGINT', "at": 'VARCHAR'}))
SELECT count(*), count(DISTINCT event_id),
       (SELECT count(*) FROM e v WHERE kind = 'void'
          AND target_event_id NOT IN (SELECT event_id FROM e)),
       count(*) FILTER (WHERE kind IS NULL OR "at" IS NULL)
FROM e
"""
BYTES_PER_EVENT_GUESS = 950


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--events", type=int, nargs="+", default=[200_000, 1_000_000],
                   help="tool_call events per generated ledger (default 200,000 and 1,000,000)")
    p.add_argument("--attempts", type=int, default=10_000)
    args = p.parse_args()
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="bench-validate-"))
    scratch.mkdir(parents=True, exist_ok=True)
    need = max(args.events) * BYTES_PER_EVENT_GUESS
    if shutil.disk_usage(scratch).free < need:
        print(f"skipped: about {need / 2**20:.0f} MiB needed in {scratch}", file=sys.stderr)
        return 0
    results = []
    try:
        for events in args.events:
            shape = scratch / f"e{events}"
            print(f"generating {events:,} tool_call events ...", file=sys.stderr)
            _, run_dir = write_run(shape, args.attempts, events)
            size = (run_dir / "events.jsonl").stat().st_size
            for kit in kits(args):
                print(f"validate.py, {kit} (load {load()}) ...", file=sys.stderr)
                # exit 1: the generated scores carry no judge artifacts, so each is reported untied
                r = measure([kit_python(kit), str(kit / SCRIPT), str(run_dir), "--json"], kit,
                            ok=(0, 1))
                results.append({"kit": str(kit), "tool_call_events": events,
                                "ledger_mib": round(size / 2**20, 1), "load": load(), **r})
            # The floor, on the same file in the same run: DuckDB reading the columns validation
            # needs to find a repeated id or a void naming nothing.
            r = measure(duckdb_argv(DUCK_CHECK, str(run_dir / "events.jsonl")), KIT_ROOT)
            results.append({"kit": "duckdb (declared columns)", "tool_call_events": events,
                            "ledger_mib": round(size / 2**20, 1), "load": load(), **r})
            shutil.rmtree(shape, ignore_errors=True)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    table(results, {"kit": lambda r: r["kit"], "tool_call events": lambda r: f"{r['tool_call_events']:,}",
                    "ledger": lambda r: f"{r['ledger_mib']} MiB", **MEASURED}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
