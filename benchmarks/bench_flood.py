#!/usr/bin/env python3
"""A flood of slow queries beside one innocent one-row query, through the local endpoint, beside
the floor (the same one-row query straight in DuckDB, in this process).

Starts `serve_local.py --http` of the checkout given by `--kit` (default this one) over the
bookshop set with `--timeout`, warms both runners, then for each round and each scenario sends
`--floods` cross-join queries over raw connections and times the innocent query sent after them
through the kit's MCP client:

- `abandoned`: every flood client hangs up once its request is sent (an answerer that gave up);
- `one_client`: the floods stay connected, all from one client (named by the client header, which
  an endpoint that does not know it ignores), and the innocent query comes from another.

Between rounds it waits until the endpoint answers a one-row query again and every flood
connection is answered or closed. A --kit checkout runs with its own serve_local.py; its `.venv`
is not needed (this interpreter runs it).

Examples:
  .venv/bin/python benchmarks/bench_flood.py --rounds 3 --json
  .venv/bin/python benchmarks/bench_flood.py --kit /tmp/kit-base --rounds 3 --json
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))  # the flood the fairness tests send, too

from flood_support import FLOOD as FLOODS
from flood_support import INNOCENT, stop
from malloy_evals.endpoint.mcp_client import McpToolError, connect

PKG = {"environment": "samples", "package": "bookshop", "model_path": "bookshop.malloy"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _send(port: int, query: str, client: str | None) -> socket.socket:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "malloy_executeQuery", "arguments": {
            "environmentName": "samples", "packageName": "bookshop",
            "modelPath": "bookshop.malloy", "query": query}}}).encode()
    named = f"X-Malloy-Evals-Client: {client}\r\n" if client else ""
    sock = socket.create_connection(("127.0.0.1", port), timeout=600)
    sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"
                 f"\r\nAccept: application/json, text/event-stream\r\n{named}Content-Length: "
                 f"{len(body)}\r\nMCP-Protocol-Version: 2025-06-18\r\n\r\n".encode() + body)
    return sock


def _innocent(url: str) -> tuple[float, str]:
    """Seconds until the innocent query's answer, and what it was (rows or the error's head)."""
    client = connect(url=url, timeout=600)
    try:
        start = time.perf_counter()
        try:
            rows = client.execute_query(**PKG, query=INNOCENT)["rows"]
            outcome = f"rows {json.dumps(rows)}"
        except McpToolError as exc:
            outcome = "error: " + str(exc).split("\n")[0][:160]
        return time.perf_counter() - start, outcome
    finally:
        client.close()


def _drain(socks: list[socket.socket]) -> None:
    """Wait until every flood connection still open is answered (or refused), then close it."""
    for sock in socks:
        try:
            sock.settimeout(600)
            sock.recv(1)
        except OSError:
            pass
        finally:
            sock.close()


def floor(n: int) -> dict[str, float]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads=1")
    data = ROOT / "evals" / "bookshop" / "data" / "orders.csv"
    times = []
    for _ in range(n):
        start = time.perf_counter()
        con.execute(f"SELECT count(*) AS order_count FROM '{data}'").fetchall()
        times.append(time.perf_counter() - start)
    return {"n": n, "median_ms": round(statistics.median(times) * 1000, 2),
            "max_ms": round(max(times) * 1000, 2)}


def bench(kit: Path, floods: int, timeout: float, rounds: int) -> dict[str, Any]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    serve = kit / "skills" / "eval-answer" / "scripts" / "serve_local.py"
    proc = subprocess.Popen([sys.executable, str(serve), "--package",
                             f"samples/bookshop={ROOT / 'evals' / 'bookshop' / 'model'}",
                             "--timeout", str(timeout), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("serve_local.py did not start") from None
                time.sleep(0.1)
        warm = connect(url=url, timeout=600)
        warm.get_context(environmentName="samples", packageName="bookshop")  # both runners
        warm.close()
        quiet = [_innocent(url) for _ in range(5)]
        out: dict[str, Any] = {"quiet": {"median_ms": round(statistics.median(
            t for t, _ in quiet) * 1000, 1), "outcome": quiet[0][1]}}
        for scenario in ("abandoned", "one_client"):
            seen = []
            for _ in range(rounds):
                socks = [_send(port, FLOODS[i % len(FLOODS)],
                               "flood" if scenario == "one_client" else None)
                         for i in range(floods)]
                time.sleep(2.0)  # the floods run (or wait) before the innocent query arrives
                if scenario == "abandoned":
                    for sock in socks:
                        sock.close()
                    socks = []
                seen.append(_innocent(url))
                _drain(socks)
                while _innocent(url)[0] > 1.0:  # the endpoint has caught up
                    pass
            times = [t for t, _ in seen]
            out[scenario] = {"rounds": rounds, "median_s": round(statistics.median(times), 2),
                             "max_s": round(max(times), 2),
                             "outcomes": sorted({o for _, o in seen})}
        return out
    finally:
        stop(proc)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kit", type=Path, default=ROOT, help="the checkout whose endpoint to run")
    p.add_argument("--floods", type=int, default=16, help="slow queries per round (16)")
    p.add_argument("--timeout", type=float, default=2.0, help="serve_local.py --timeout (2)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    import os

    doc = {"kit": str(args.kit), "floods": args.floods, "timeout_s": args.timeout,
           "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
           "floor_duckdb": floor(50),
           **bench(args.kit.resolve(), args.floods, args.timeout, args.rounds)}
    print(json.dumps(doc, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
