"""The endpoint is fair to every answerer (reference/query-budgets.md): nothing runs for a client
that hung up, a query's budget counts its wait, and waiting queries are served one client at a
time in turn. Real endpoint, real Node runner, real DuckDB; the assertions are on order and
outcomes, and every wait has a generous ceiling that only guards against a hang."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import KIT_ROOT, skip_without_node
from duck_support import duck_rows
from flood_support import FLOOD, INNOCENT, runner_pids, stop
from harness_support import BOOKSHOP, answer, new_run, scripted_cmd
from malloy_evals.core.errors import KitError
from malloy_evals.endpoint import runner as runtime_mod
from malloy_evals.endpoint.mcp_client import connect
from malloy_evals.endpoint.mcp_server import ClientTurns, Endpoint, client_url, parse_package_arg
from malloy_evals.endpoint.runner import (
    Call,
    MalloyRuntime,
    QueryInterrupted,
    busy_message,
    calling,
    default_allow,
)

MODEL = KIT_ROOT / "evals" / "bookshop" / "model"
DATA = KIT_ROOT / "evals" / "bookshop" / "data"
SERVE = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "serve_local.py"
PKG = {"environment": "samples", "package": "bookshop", "model_path": "bookshop.malloy"}
CEILING = 300.0  # seconds: a hang guard for a loaded machine, never a measure of speed


def _floor() -> list[dict]:
    """The innocent query's rows straight from DuckDB."""
    return duck_rows("SELECT count(*) AS order_count FROM 'orders.csv'", DATA)


def _until(what: str, ready: Callable[[], Any]) -> Any:
    """ready()'s first truthy value; fails past the ceiling (a hang, not a slow machine)."""
    deadline = time.monotonic() + CEILING
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {CEILING:g} s")
        time.sleep(0.05)


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """fn() in a thread; its result or its exception lands in the list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except KitError as exc:  # the outcome under test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _join(thread: threading.Thread) -> None:
    thread.join(CEILING)
    assert not thread.is_alive(), "a request did not come back"


@pytest.fixture
def runtime(needs_node):
    """A one-runner bookshop pool with a budget far past any wait in these tests."""
    rt = MalloyRuntime(MODEL, allow=default_allow(MODEL), query_timeout=3600, pool_size=1)
    assert rt.execute(INNOCENT)["rows"] == _floor()
    yield rt
    rt.close()


# ---------- the runtime: a withdrawn query, the turn order ----------

def test_a_withdrawn_running_query_is_interrupted_inside_duckdb_and_its_runner_kept(runtime):
    pids = runtime.pids
    flood = Call("flood")
    thread, out = _in_thread(lambda: _call(runtime, flood, FLOOD[0]))
    _until("query on the runner", flood.running.is_set)
    flood.cancel()
    _join(thread)
    [err] = out
    assert isinstance(err, QueryInterrupted) and err.running and not err.killed
    assert err.code == "query-interrupted" and "its client disconnected" in err.message
    # Interrupted, not killed: the same runner answers the next query.
    assert runtime.pids == pids and runtime.restarts == 0
    assert runtime.queue_state() == {"running": 0, "waiting": 0, "interrupted": 1,
                                     "withdrawn": 0, "busy": 0}
    assert runtime.execute(INNOCENT)["rows"] == _floor()


def test_a_withdrawn_query_whose_runner_cannot_hear_the_interrupt_has_its_runner_replaced(
        runtime, monkeypatch):
    monkeypatch.setattr(runtime_mod, "KILL_GRACE_S", 0.5)  # a ceiling: the runner never answers
    [pid] = runtime.pids
    stuck = Call("stuck")
    thread, out = _in_thread(lambda: _call(runtime, stuck, FLOOD[0]))
    _until("query on the runner", stuck.running.is_set)
    os.kill(pid, signal.SIGSTOP)  # as deaf as a runner busy in the compiler: it reads nothing
    stuck.cancel()
    _join(thread)
    [err] = out
    assert isinstance(err, QueryInterrupted) and err.running and err.killed
    assert runtime.restarts == 1
    assert runtime.execute(INNOCENT)["rows"] == _floor()
    assert pid not in runtime.pids


def _call(rt: MalloyRuntime, call: Call, query: str) -> dict:
    with calling(call):
        return rt.execute(query)


def test_waiting_queries_are_served_one_client_at_a_time_in_turn(runtime):
    blocker = Call("blocker")
    held, held_out = _in_thread(lambda: _call(runtime, blocker, FLOOD[0]))
    _until("blocker on the runner", blocker.running.is_set)
    arrivals = [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1"), ("b", "b2")]
    calls: dict[str, Call] = {}
    threads = []
    for client, tag in arrivals:  # each queued before the next arrives: a known arrival order
        calls[tag] = Call(client)
        threads.append(_in_thread(lambda c=calls[tag]: _call(runtime, c, INNOCENT)))
        _until(f"{tag} in the queue", calls[tag].queued.is_set)
    assert runtime.queue_state()["waiting"] == len(arrivals)
    blocker.cancel()
    _join(held)
    for thread, out in threads:
        _join(thread)
        assert out[0]["rows"] == _floor()
    served = sorted(calls, key=lambda tag: calls[tag].turn or 0)
    # Round-robin over clients: a, b, c, then a and b again; first come first served within one.
    assert served == ["a1", "b1", "c1", "a2", "b2", "a3"]
    assert isinstance(held_out[0], QueryInterrupted)


# ---------- the endpoint: the busy error, the flood ----------

def _payload(result: Any) -> dict:
    return json.loads(result.content[0].resource.text)


def test_a_query_that_cannot_start_within_its_budget_gets_the_busy_error(needs_node):
    endpoint = Endpoint([parse_package_arg(f"samples/bookshop={MODEL}", timeout=3600)])
    try:
        holders = [Call(f"flood-{i}") for i in range(2)]  # the pool's two runners, held
        floods = [_in_thread(lambda c=c, q=q: _endpoint_call(endpoint, c, q))
                  for c, q in zip(holders, FLOOD, strict=False)]
        for held in holders:
            _until("flood on a runner", held.running.is_set)
        victim = _endpoint_call(endpoint, Call("victim", budget=0.5), INNOCENT)
        body = _payload(victim)
        assert victim.is_error and "environmentFault" not in body
        assert body["error"] == ("Error during query execution for resource "
                                 "'samples/bookshop/bookshop.malloy': the endpoint is busy: the "
                                 "query could not start within 0.5 s (the kit's time limit for "
                                 "one query, waiting included) because other queries held every "
                                 "runner; run it again")
        assert busy_message(0.5) in body["error"]
        assert body["suggestions"][0] == ("Run the query again: other queries held every runner "
                                          "while it waited")
        assert body["problems"][0]["code"] == "endpoint-busy"
        for held in holders:
            held.cancel()
        for thread, out in floods:
            _join(thread)
            assert _payload(out[0])["problems"][0]["code"] == "query-interrupted"
        again = _endpoint_call(endpoint, Call("victim"), INNOCENT)
        assert _payload(again)["rows"] == _floor()
    finally:
        endpoint.close()


def _endpoint_call(endpoint: Endpoint, call: Call, query: str) -> Any:
    with calling(call):
        return endpoint.execute_query("samples", "bookshop", "bookshop.malloy", query=query)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """serve_local.py --http over the bookshop with a one-hour budget: only a hang-up can free
    a runner held by a flood query. Yields (process, MCP URL, stderr log)."""
    skip_without_node()
    port = _free_port()
    log = tmp_path_factory.mktemp("served") / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, str(SERVE), "--package", f"samples/bookshop={MODEL}",
                                 "--timeout", "3600", "--http", str(port)],
                                stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}/mcp"

    def listening() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"serve_local.py exited: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    try:
        _until("endpoint listening", listening)
        yield proc, url, log
    finally:
        stop(proc)


def _hang_up_later(port: int, path: str, query: str) -> socket.socket:
    """Send one executeQuery over a raw connection and return the socket, never read."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "malloy_executeQuery", "arguments": {
            "environmentName": "samples", "packageName": "bookshop", "modelPath": "bookshop.malloy",
            "query": query}}}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=CEILING)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                 f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n"
                 "MCP-Protocol-Version: 2025-06-18\r\n\r\n".encode() + body)
    return sock


def _status_of(port: int, path: str, body: bytes) -> int:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CEILING)
    try:
        conn.request("POST", path, body=body, headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        return conn.getresponse().status
    except (BrokenPipeError, ConnectionResetError):
        return 413  # the endpoint answered and closed before the whole body was sent
    finally:
        conn.close()


@pytest.mark.parametrize("path, body, status", [
    pytest.param("/mcp/client/big", b"[" + b" " * (5 << 20) + b"]", 413, id="body_over_the_cap"),
    pytest.param("/mcp/client/..%2Fapi", b"{}", 404, id="name_outside_the_safe_characters"),
    pytest.param("/mcp/client/", b"{}", 404, id="empty_name"),
])
def test_the_client_route_refuses_what_the_mcp_route_refuses(served, path, body, status):
    port = int(served[1].rsplit(":", 1)[1].split("/")[0])
    assert _status_of(port, path, body) == status


def _queue(status: dict) -> dict:
    [queue] = status.get("queries") or [{}]
    return queue


def test_a_flood_of_abandoned_slow_queries_leaves_the_innocent_query_its_answer(served):
    proc, url, log = served
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    status = connect(url=client_url(url, "operator"), timeout=CEILING)
    innocent = connect(url=client_url(url, "innocent"), timeout=CEILING)
    try:
        innocent.get_context(environmentName="samples", packageName="bookshop")  # both runners up
        pids = runner_pids(proc.pid)
        assert len(pids) == 2
        # Six flood clients: three named by their URL path, three told apart by connection.
        paths = [f"/mcp/client/flood-{i}" for i in range(3)] + ["/mcp"] * 3
        floods = [_hang_up_later(port, path, FLOOD[i % len(FLOOD)]) for i, path in enumerate(paths)]
        _until("two floods running and four waiting",
               lambda: _queue(status.get_status()).get("waiting") == 4)
        assert _queue(status.get_status())["running"] == 2
        for sock in floods:
            sock.close()  # the clients hang up
        envelope = innocent.execute_query(**PKG, query=INNOCENT)
        assert envelope["rows"] == _floor()
        gone = _until("every flood given up", lambda: (
            q if (q := _queue(status.get_status()))["interrupted"] + q["withdrawn"] == 6 else None))
        # The two running were interrupted inside DuckDB (their runners kept), the rest left the
        # queue; nothing was refused as busy.
        assert gone == {"environment": "samples", "package": "bookshop", "running": 0,
                        "waiting": 0, "interrupted": 2, "withdrawn": 4, "busy": 0}
        assert runner_pids(proc.pid) == pids
        said = log.read_text()
        for i in range(3):
            assert f"endpoint: client 'flood-{i}': the query " in said
        assert said.count("endpoint: client 'connection 127.0.0.1:") == 3
        assert "innocent" not in said
    finally:
        status.close()
        innocent.close()


# ---------- the harness names each try ----------

def test_run_answers_local_gives_each_try_its_own_client(needs_node, tmp_path, capsys):
    run = new_run(tmp_path, BOOKSHOP, "clients")
    seen = tmp_path / "configs.jsonl"
    # The answerer writes the MCP configuration it was given, then answers as usual.
    cmd = f"cat {{mcp_config}} | tr -d '\\n' >> {seen}; echo >> {seen}; " + scripted_cmd()
    code, doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--local",
                             "--only", "bk_total_revenue,bk_revenue_2024", "--answerer-cmd", cmd,
                             "--no-sandbox"], capsys)  # unsealed: it writes outside its folder
    assert code == 0 and doc["recorded"] == 2, err
    urls = [json.loads(line)["mcpServers"]["malloy"]["url"] for line in seen.read_text().splitlines()]
    base = doc["mcp_url"]
    assert sorted(urls) == [client_url(base, "attempt-1"), client_url(base, "attempt-2")]


@pytest.mark.parametrize("path, headers, client", [
    pytest.param("/mcp/client/attempt-7", [], "attempt-7", id="named_by_path"),
    pytest.param("/mcp/client/attempt-7", [(b"x-malloy-evals-client", b"other")], "attempt-7",
                 id="the_path_wins_over_the_header"),
    pytest.param("/mcp", [(b"X-Malloy-Evals-Client", b"flood")], "flood", id="named_by_header"),
    pytest.param("/mcp", [(b"x-malloy-evals-client", b"a b/c")], "connection 127.0.0.1:5555",
                 id="a_bad_header_name_falls_back_to_the_connection"),
    pytest.param("/mcp", [], "connection 127.0.0.1:5555", id="told_apart_by_connection"),
    pytest.param("/mcp/client/a/b", [], None, id="a_name_with_a_slash_is_no_mcp_route"),
    pytest.param("/api/v0/environments/samples/packages/bookshop", [], None, id="rest_route"),
])
def test_each_mcp_request_is_made_for_the_client_its_path_header_or_connection_names(
        path, headers, client):
    scope = {"type": "http", "path": path, "headers": headers, "client": ("127.0.0.1", 5555)}
    assert ClientTurns.client_of(scope) == client


def test_a_client_name_outside_the_safe_characters_is_refused():
    with pytest.raises(ValueError, match="client name"):
        client_url("http://127.0.0.1:9/mcp", "../api")
