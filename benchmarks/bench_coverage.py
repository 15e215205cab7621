#!/usr/bin/env python3
"""Benchmark check_coverage.py on large models (issue 17): does every case get a reader request
within the size limit, and what does it cost?

For each size it generates a synthetic set outside the repository (scripts/generate_large_model.py:
a model file of about that many bytes, 31 cases, a hand-written reply per case), then runs the
real script by path, as a user would: once with --dry-run (counts the requests and their size,
sends nothing) and once with `--reader hand:FILE` (decides every case from the written replies).
It reports the inventory size, reader calls, the largest and median model part of a request,
cases decided, whether each case's own source reached its reader, wall time and the child's peak
RSS (os.wait4). With --baseline DIR it runs the same commands from another kit checkout (the code
before the change) beside each, for a same-run comparison. Not a test: figures go to
benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_coverage.py
  .venv/bin/python benchmarks/bench_coverage.py --sizes 1000000,5000000,10000000 --json
  .venv/bin/python benchmarks/bench_coverage.py --baseline /tmp/kit-before   # a checkout of the earlier code
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path("skills") / "eval-answer" / "scripts" / "check_coverage.py"
GENERATE = runpy.run_path(str(KIT_ROOT / "scripts" / "generate_large_model.py"))["generate"]


def run(kit: Path, args: list[str]) -> dict:
    """Run check_coverage.py from `kit`: its exit code, JSON report, wall seconds, and the peak
    RSS of it and the children it waited for (its Node runner) from wait4."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, str(kit / SCRIPT), *args, "--json"], cwd=kit,
                                stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
    try:
        report = json.loads(text)
    except ValueError:
        report = None
    return {"exit": os.waitstatus_to_exitcode(status), "wall_s": round(wall, 2), "report": report,
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "stderr_tail": errors.strip().splitlines()[-1:]}


def figures(result: dict, replies: Path) -> dict:
    """What the report says about the requests and the decisions."""
    report = result["report"] or {}
    rows = report.get("cases_detail") or []
    chars = [r.get("inventory_chars") for r in rows if r.get("inventory_chars") is not None]
    own = 0
    expected = {json.loads(line)["key"][4:]: json.loads(line)["replies"][0]["entities"][0]
                for line in replies.read_text().splitlines() if line.strip()}
    for r in rows:
        unit = expected.get(r.get("qid"), "::").split(":")[1]
        sources = (r.get("narrowing") or {}).get("sources") or []
        own += unit in sources
    return {"exit": result["exit"], "wall_s": result["wall_s"], "peak_rss_mib": result["peak_rss_mib"],
            "inventory_chars": (report.get("inventory") or {}).get("chars"),
            "narrowed": (report.get("inventory") or {}).get("narrowed"),
            "reader_calls": report.get("reader_calls"), "cases": report.get("cases"),
            "decided": report.get("decided"),
            "request_model_chars_max": max(chars) if chars else None,
            "request_model_chars_median": int(statistics.median(chars)) if chars else None,
            "own_source_reached_reader": own, "rejected_replies": report.get("rejected_replies"),
            "stderr_tail": result["stderr_tail"] if result["exit"] else []}


def bench(size: int, root: Path, baseline: Path | None, cases: int) -> dict:
    info = GENERATE(root / f"large-{size}", size, cases=cases)
    set_dir, replies = Path(info["set"]), Path(info["replies"])
    common = ["--set", str(set_dir), "--model", str(set_dir / "model"), "--reader", f"hand:{replies}"]
    row = {"size": size, "model_bytes": info["model_bytes"], "sources": info["sources"],
           "entities": info["entities"]}
    for label, kit in (("now", KIT_ROOT), ("before", baseline)):
        if kit is None:
            continue
        row[label] = {"dry_run": figures(run(kit, [*common, "--dry-run"]), replies),
                      "hand": figures(run(kit, common), replies)}
        print(f"size {size}: {label} done", file=sys.stderr, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                epilog=doc[doc.index("Examples:"):],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000000,5000000", help="model sizes in bytes, comma-separated")
    p.add_argument("--cases", type=int, default=31)
    p.add_argument("--baseline", type=Path, help="another kit checkout to run side by side")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="malloy-evals-bench-coverage-") as tmp:
        rows = [bench(int(s), Path(tmp), args.baseline, args.cases) for s in args.sizes.split(",")]
    load = os.getloadavg()
    doc_out = {"load_average": [round(x, 2) for x in load], "rows": rows}
    if args.json:
        print(json.dumps(doc_out, indent=2))
    else:
        for row in rows:
            for label in ("now", "before"):
                if label in row:
                    for mode in ("dry_run", "hand"):
                        f = row[label][mode]
                        print(f"{row['size']:>9} {label:<6} {mode:<7} exit {f['exit']} "
                              f"decided {f['decided']}/{f['cases']} calls {f['reader_calls']} "
                              f"max {f['request_model_chars_max']} wall {f['wall_s']}s "
                              f"peak {f['peak_rss_mib']} MiB")
        print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
