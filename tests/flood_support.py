"""What the endpoint's fairness tests and bench_flood.py share: slow query shapes over the
bookshop, the innocent one-row query, the Node runners an endpoint process started, stopping it."""

from __future__ import annotations

import subprocess
from pathlib import Path

# Slow queries of several shapes: cross joins DuckDB would run for hours (a bare count() over a
# cross join is not one: DuckDB answers it from the sizes).
FLOOD = [
    ("run: order_items extend { join_cross: a is order_items on true join_cross: b is order_items "
     "on true } -> { aggregate: n is count(), s is a.quantity.sum() + b.quantity.sum() }"),
    ("run: orders extend { join_cross: a is order_items on true join_cross: b is order_items on "
     "true } -> { group_by: status aggregate: s is a.quantity.sum() + b.unit_price.sum() }"),
    ("run: order_items extend { join_cross: a is orders on true join_cross: b is order_items on "
     "true } -> { aggregate: n is count(a.status), m is b.unit_price.avg() }"),
]
INNOCENT = "run: orders -> { aggregate: order_count }"


def runner_pids(server_pid: int) -> set[int]:
    """Node runner processes started by the endpoint (children whose command is runner.mjs)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server_pid and b"runner.mjs" in cmdline:
            pids.add(int(entry.name))
    return pids


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not exited within a minute (a ceiling, not a pause)."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(60)
