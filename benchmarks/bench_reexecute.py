#!/usr/bin/env python3
"""Benchmark: milliseconds per re-execution, warm (one endpoint, many queries) vs cold.

Warm: serve_local.py --http runs once over a package; the kit's MCP client sends N executeQuery
calls (a rotation of ad-hoc queries and named views) and we take the median wall time per call.
Cold: for each of M queries, a fresh endpoint process is started over stdio, connected, asked
once and stopped (what `reexecute.py --local` pays per attempt); and, for reference, a fresh
`node runner.mjs` that loads the package, runs one query and exits.

Beside them, in the same run, interleaved call by call: the runner with its compiled queries kept,
the runner with every query text new (so each is compiled, as before), and the floor, each call's
SQL straight in DuckDB (Python's duckdb, one thread, from the package folder, rows fetched), as
Malloy wrote it and with each CSV read declared as the runner declares it; and a runner's start-up: the
first of a package (compiles it and keeps it in a fresh model cache), a second (reads it), one
with the cache off, and the floor of a start (node importing Malloy, DuckDB and lunr).

Examples:
  .venv/bin/python benchmarks/bench_reexecute.py
  .venv/bin/python benchmarks/bench_reexecute.py --warm 200 --cold 10 --json
  .venv/bin/python benchmarks/bench_reexecute.py --package mini --warm 200 --cold 10
  .venv/bin/python benchmarks/bench_reexecute.py --warm 200 --cold 3 --starts 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from malloy_evals.endpoint.mcp_client import connect
from malloy_evals.endpoint.runner import RUNNER_SCRIPT, MalloyRuntime, default_allow

SERVE = ROOT / "skills" / "eval-answer" / "scripts" / "serve_local.py"
BOOKSHOP = ROOT / "evals" / "bookshop" / "model"
MINI = ROOT / "tests" / "fixtures" / "mini_pkg" / "model"

BOOKSHOP_CALLS = [
    {"query": "run: orders -> { group_by: status; aggregate: n is count() }"},
    {"sourceName": "order_items", "queryName": "by_genre"},
    {"sourceName": "order_items", "queryName": "monthly_revenue"},
    {"queryName": "top_customers"},
    {"query": "run: customers -> { group_by: region; aggregate: customer_count }"},
    {"sourceName": "customers", "queryName": "by_region"},
    {"query": "run: books -> { group_by: genre; aggregate: n is count(); order_by: genre }"},
    {"sourceName": "order_items", "queryName": "by_channel"},
]
MINI_CALLS = [
    {"query": "run: orders -> { group_by: status; aggregate: order_count, total_revenue }"},
    {"sourceName": "orders", "queryName": "by_region"},
    {"queryName": "shipped_by_month"},
    {"sourceName": "orders", "queryName": "top_categories"},
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _args(pkg: str, model: str, call: dict) -> dict:
    return {"environmentName": "samples", "packageName": pkg, "modelPath": model, **call}


def bench_warm(pkg_dir: Path, pkg: str, model: str, calls: list[dict], n: int) -> list[float]:
    """ms per executeQuery through one long-lived HTTP endpoint (after one warm-up call)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SERVE), "--package", f"samples/{pkg}={pkg_dir}",
                             "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("endpoint did not start") from None
                time.sleep(0.1)
        with connect(url=f"http://127.0.0.1:{port}/mcp", timeout=120) as client:
            client.call_ok("execute_query", _args(pkg, model, calls[0]))  # compile + DuckDB start
            times = []
            for i in range(n):
                t = time.perf_counter()
                client.call_ok("execute_query", _args(pkg, model, calls[i % len(calls)]))
                times.append((time.perf_counter() - t) * 1000)
        return times
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def bench_warm_direct(pkg_dir: Path, model: str, calls: list[dict], n: int) -> list[float]:
    """ms per query through MalloyRuntime alone (no MCP): the runner's share of a warm call."""
    with MalloyRuntime(pkg_dir, allow=default_allow(pkg_dir)) as rt:
        rt.describe()
        times = []
        for i in range(n):
            call = calls[i % len(calls)]
            t = time.perf_counter()
            rt.execute(call.get("query"), model_path=model, source_name=call.get("sourceName"),
                       query_name=call.get("queryName"))
            times.append((time.perf_counter() - t) * 1000)
    return times


def _declared(sql: str, con: duckdb.DuckDBPyConnection) -> str:
    """`sql` with each bare CSV table read as the runner reads it once it has detected the file:
    `read_csv(<the options DuckDB's sniffer found>, auto_detect=true)`."""
    for path in sorted(set(re.findall(r"(?:FROM|JOIN)\s+'([^']+\.csv)'", sql, re.IGNORECASE))):
        prompt = con.execute(f"SELECT Prompt FROM sniff_csv('{path}')").fetchone()[0]
        read = prompt.strip().rstrip(";").removeprefix("FROM ").replace("auto_detect=false",
                                                                      "auto_detect=true")
        sql = re.sub(rf"((?:FROM|JOIN)\s+)'{re.escape(path)}'(?=\s+AS\s)",
                     lambda m, read=read: m.group(1) + read, sql, flags=re.IGNORECASE)
    return sql


def bench_warm_side_by_side(pkg_dir: Path, model: str, calls: list[dict], n: int
                            ) -> dict[str, list[float]]:
    """ms per query, the modes interleaved call by call so each sees the same machine: the runner
    (its compiled queries kept), the runner with every query text new (a comment numbers it, so
    each is compiled, as before), and the floor: the same SQL straight in DuckDB (Python's duckdb,
    one thread, from the package folder, every row fetched), as Malloy wrote it and with each CSV
    read declared as the runner declares it."""
    out: dict[str, list[float]] = {"warm_runtime_kept": [], "warm_runtime_every_query_new": [],
                                   "floor_duckdb_malloy_sql": [], "floor_duckdb_declared_reads": []}
    with MalloyRuntime(pkg_dir, allow=default_allow(pkg_dir), pool_size=1) as rt:
        def ask(call: dict, suffix: str = "") -> dict:
            query = call.get("query")
            return rt.execute(query + suffix if query else None, model_path=model,
                              source_name=call.get("sourceName"), query_name=call.get("queryName"))

        sqls = [ask(c)["sql"] for c in calls]
        # Each call as query text (a named view or query as the runner words it), so a comment
        # can make it new: the same eight queries, compiled every time.
        adhoc = [{"query": c.get("query") or (f"run: {c['sourceName']} -> {c['queryName']}"
                                              if c.get("sourceName") else f"run: {c['queryName']}")}
                 for c in calls]
        here = Path.cwd()
        os.chdir(pkg_dir)  # the SQL names its tables relative to the package, as the runner does
        try:
            con = duckdb.connect(config={"threads": 1})
            declared = [_declared(q, con) for q in sqls]
            for q in sqls + declared:
                con.execute(q).fetchall()
            modes = {
                "warm_runtime_kept": lambda i: ask(calls[i % len(calls)]),
                "warm_runtime_every_query_new": lambda i: ask(adhoc[i % len(adhoc)], f" // {i}"),
                "floor_duckdb_malloy_sql": lambda i: con.execute(sqls[i % len(sqls)]).fetchall(),
                "floor_duckdb_declared_reads":
                    lambda i: con.execute(declared[i % len(declared)]).fetchall(),
            }
            for i in range(n):
                for name, go in modes.items():
                    t = time.perf_counter()
                    go(i)
                    out[name].append((time.perf_counter() - t) * 1000)
            con.close()
        finally:
            os.chdir(here)
    return out


def bench_starts(pkg_dir: Path, model: str, first: dict, n: int) -> dict[str, list[float]]:
    """ms for a runner to start, answer its first describe and its first query (a view with a
    join, not the one the runner warms its compiler with): the first of a package (compiles
    and writes a fresh model cache), a second (reads it), one with the cache off; and the floor,
    node importing the runner's packages and exiting. Each also as the CPU ms the Node process
    used (`*_cpu`: steadier than wall time on a loaded machine)."""
    out: dict[str, list[float]] = {}
    for name in ("first_runner_compiles", "second_runner_reads", "runner_cache_off",
                 "floor_node_imports"):
        out[name], out[name + "_cpu"] = [], []

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (usage.ru_utime + usage.ru_stime) * 1000
    imports = ("await import('@malloydata/malloy'); await import('@malloydata/db-duckdb'); "
               "await import('lunr');")
    for _ in range(n):
        with tempfile.TemporaryDirectory() as cache:
            for name, folder in (("first_runner_compiles", cache), ("second_runner_reads", cache),
                                 ("runner_cache_off", None)):
                cpu, t = children_cpu(), time.perf_counter()
                with MalloyRuntime(pkg_dir, allow=default_allow(pkg_dir), pool_size=1,
                                   model_cache=folder) as rt:
                    rt.describe()
                    rt.execute(model_path=model, source_name=first["sourceName"],
                               query_name=first["queryName"])
                    out[name].append((time.perf_counter() - t) * 1000)
                    expected = {"first_runner_compiles": "compiled",
                                "second_runner_reads": "read", "runner_cache_off": "off"}[name]
                    if (rt.load_summary or {}).get("model_cache") != expected:
                        raise SystemExit(f"{name}: the runner says {rt.load_summary}")
                out[name + "_cpu"].append(children_cpu() - cpu)  # the runner was reaped at close
        cpu, t = children_cpu(), time.perf_counter()
        subprocess.run(["node", "--input-type=module", "-e", imports], cwd=RUNNER_SCRIPT.parent,
                       check=True, timeout=120)
        out["floor_node_imports"].append((time.perf_counter() - t) * 1000)
        out["floor_node_imports_cpu"].append(children_cpu() - cpu)
    return out


def bench_cold_endpoint(pkg_dir: Path, pkg: str, model: str, calls: list[dict], n: int) -> list[float]:
    """ms per query when each query starts its own stdio endpoint (spawn, connect, query, stop)."""
    times = []
    for i in range(n):
        t = time.perf_counter()
        with connect(command=[sys.executable, str(SERVE), "--package", f"samples/{pkg}={pkg_dir}"],
                     timeout=120) as client:
            client.call_ok("execute_query", _args(pkg, model, calls[i % len(calls)]))
        times.append((time.perf_counter() - t) * 1000)
    return times


def bench_cold_runner(pkg_dir: Path, model: str, calls: list[dict], n: int) -> list[float]:
    """ms per query for a bare `node runner.mjs` process: load the package, run one query, exit."""
    times = []
    for i in range(n):
        call = calls[i % len(calls)]
        req = {"id": 2, "op": "execute", "model_path": model, "query": call.get("query"),
               "source_name": call.get("sourceName"), "query_name": call.get("queryName")}
        lines = [json.dumps({"id": 1, "op": "load", "package_dir": str(pkg_dir),
                             "allow": [str(a) for a in default_allow(pkg_dir)]}), json.dumps(req)]
        t = time.perf_counter()
        out = subprocess.run(["node", str(RUNNER_SCRIPT)], input="\n".join(lines) + "\n",
                             capture_output=True, text=True, check=True, timeout=120)
        times.append((time.perf_counter() - t) * 1000)
        if '"ok":true' not in out.stdout.splitlines()[-1]:
            raise SystemExit(f"cold runner query failed: {out.stdout[-300:]}")
    return times


def _summary(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"n": len(times), "median_ms": round(statistics.median(times), 1),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
            "min_ms": round(ordered[0], 1), "max_ms": round(ordered[-1], 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[14:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warm", type=int, default=200, help="warm queries (default 200)")
    p.add_argument("--cold", type=int, default=10, help="cold queries per cold mode (default 10)")
    p.add_argument("--package", choices=["bookshop", "mini"], default="bookshop",
                   help="evals/bookshop/model (default) or the tests' tiny mini package")
    p.add_argument("--starts", type=int, default=3, help="runner start-ups per kind (default 3)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args()
    if args.package == "bookshop" and (BOOKSHOP / "bookshop.malloy").is_file():
        pkg_dir, pkg, model, calls = BOOKSHOP, "bookshop", "bookshop.malloy", BOOKSHOP_CALLS
    else:
        pkg_dir, pkg, model, calls = MINI, "mini", "shop.malloy", MINI_CALLS
    result = {
        "package": f"samples/{pkg}", "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "warm_endpoint_http": _summary(bench_warm(pkg_dir, pkg, model, calls, args.warm)),
        "warm_runtime_direct": _summary(bench_warm_direct(pkg_dir, model, calls, args.warm)),
        **{k: _summary(v) for k, v in bench_warm_side_by_side(pkg_dir, model, calls,
                                                              args.warm).items()},
        **{k: _summary(v) for k, v in bench_starts(pkg_dir, model, calls[1], args.starts).items()},
        "cold_endpoint_stdio": _summary(bench_cold_endpoint(pkg_dir, pkg, model, calls, args.cold)),
        "cold_node_runner": _summary(bench_cold_runner(pkg_dir, model, calls, args.cold)),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
