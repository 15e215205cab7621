"""The local Publisher-shaped MCP endpoint, over real loopback HTTP and over stdio."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from conftest import KIT_ROOT, node_runtime_missing_reason
from duck_support import duck_rows
from flood_support import runner_pids
from malloy_evals.core.errors import UsageError
from malloy_evals.endpoint.mcp_client import McpProtocolError, McpToolError, PublisherRest, connect
from malloy_evals.endpoint.mcp_server import (
    CLIENT_HEADER,
    answerer_client_url,
    build_envelope,
    client_url,
    parse_package_arg,
)
from malloy_evals.endpoint.package import package_sha

MINI = KIT_ROOT / "tests" / "fixtures" / "mini_pkg"
MINI_MODEL = MINI / "model"
SERVE = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "serve_local.py"
PKG = {"environment": "samples", "package": "mini", "model_path": "shop.malloy"}


def _guard() -> None:
    reason = node_runtime_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so runtime tests must run: {reason}")
        pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _duck(sql: str) -> list[dict]:
    return duck_rows(sql, MINI / "data")


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    """serve_local.py --http on a free port, as a real subprocess; yields (process, base URL)."""
    _guard()
    log = (tmp_path_factory.mktemp("serve") / "stderr.log").open("w")
    proc, port = _serve_http("--package", f"samples/mini={MINI_MODEL}", stderr=log)
    yield proc, f"http://127.0.0.1:{port}"
    _stop(proc)
    log.close()


def _serve_http(*args: str, stderr: Any = subprocess.DEVNULL) -> tuple[subprocess.Popen, int]:
    """serve_local.py ARGS --http on a free port, once it accepts connections (its readiness;
    the ceiling is for a machine under load, not a guess at its speed)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SERVE), *args, "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + 300
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                where = f" (see {stderr.name})" if hasattr(stderr, "name") else ""
                pytest.fail(f"serve_local.py did not start{where}")
            time.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT, as Ctrl-C would; killed if it has not stopped within 60 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def http_client(http_server):
    client = connect(url=http_server[1] + "/mcp", timeout=60)
    yield client
    client.close()


@pytest.fixture(scope="module")
def stdio_client():
    _guard()
    client = connect(command=[sys.executable, str(SERVE), "--package", f"samples/mini={MINI_MODEL}"],
                     timeout=60)
    yield client
    client.close()


@pytest.fixture(params=["http", "stdio"])
def client(request):
    """The kit's client over each transport in turn."""
    return request.getfixturevalue(f"{request.param}_client")


# ---------- executeQuery ----------

def test_adhoc_query_returns_duckdbs_rows(needs_node, client):
    envelope = client.execute_query(**PKG, query="run: orders -> { group_by: status; "
                                    "aggregate: order_count, total_revenue; order_by: status }")
    assert envelope["rows"] == _duck("select status, count(*) as order_count, sum(amount) as "
                                     "total_revenue from read_csv('orders.csv') group by 1 order by 1")
    assert (envelope["_query_row_limit"], envelope["_limit_source"], envelope["_limit_hit"]) == (
        1000, "server_default", False)
    assert [f["name"] for f in envelope["_meta"]["schema"]["fields"]] == [
        "status", "order_count", "total_revenue"]


def test_named_view_runs_by_source_and_query_name(needs_node, client):
    envelope = client.execute_query(**PKG, source_name="orders", query_name="by_region")
    assert [r["customer_region"] for r in envelope["rows"]] == ["APAC", "EU", "US"]
    assert [r["order_count"] for r in envelope["rows"]] == [1, 2, 5]


def test_named_query_runs_by_query_name_alone(needs_node, client):
    envelope = client.execute_query(**PKG, query_name="shipped_by_month")
    assert [r["order_count"] for r in envelope["rows"]] == [2, 1, 2]


def test_givens_reach_the_query(needs_node, client):
    envelope = client.execute_query(**PKG, query="run: orders -> { where: quantity >= $MIN_QTY; "
                                    "aggregate: order_count }", givens={"MIN_QTY": 4})
    assert envelope["rows"] == [{"order_count": 1}]


def test_success_is_a_json_resource_at_content_0(needs_node, client):
    result = client.call("malloy_executeQuery", {"environmentName": "samples", "packageName": "mini",
                                                 "modelPath": "shop.malloy",
                                                 "queryName": "shipped_by_month"})
    assert result.is_error is False
    assert result.uri == "malloy://environment/samples/package/mini/models/shop.malloy#result"
    assert set(result.payload) >= {"rows", "_meta", "_query_row_limit", "_limit_source", "_limit_hit"}


def test_bad_field_is_tool_error_with_suggestions(needs_node, client):
    result = client.call("execute_query", {"environmentName": "samples", "packageName": "mini",
                                           "modelPath": "shop.malloy",
                                           "query": "run: orders -> { group_by: nope }"})
    assert result.is_error is True
    assert "'nope' is not defined" in result.payload["error"]
    assert any("malloy_getContext" in s for s in result.payload["suggestions"])
    assert result.texts[1].startswith(result.payload["error"] + "\n\nSuggestions:\n- ")


def test_bad_field_raises_mcp_tool_error_from_execute_query(needs_node, client):
    with pytest.raises(McpToolError) as err:
        client.execute_query(**PKG, query="run: orders -> { aggregate: nope.sum() }")
    assert "nope" in err.value.message and err.value.suggestions


@pytest.mark.parametrize("args", [
    pytest.param({"query": "run: orders -> by_region", "queryName": "by_region"}, id="both"),
    pytest.param({}, id="neither"),
    pytest.param({"sourceName": "orders"}, id="source-only"),
])
def test_query_and_query_name_misuse_is_invalid_params(needs_node, client, args):
    with pytest.raises(McpProtocolError) as err:
        client.call("malloy_executeQuery", {"environmentName": "samples", "packageName": "mini",
                                            "modelPath": "shop.malloy", **args})
    assert err.value.code == -32602


@pytest.mark.parametrize(("tool", "args", "named"), [
    pytest.param("malloy_executeQuery", {"environmentName": "samples", "packageName": "mini",
                                         "query": "run: orders -> by_region"}, "modelPath",
                 id="required-modelPath-missing"),
    pytest.param("malloy_getContext", {"environmentName": "samples", "packageName": "mini",
                                       "query": "orders", "limit": 51}, "limit", id="limit-above-50"),
])
def test_schema_breaking_arguments_are_a_publisher_shaped_tool_error(needs_node, client, tool, args,
                                                                     named):
    # Regression: the SDK answered these with a bare text block, no {error, suggestions} resource.
    result = client.call(tool, args)
    assert result.is_error and result.uri is not None
    assert set(result.payload) >= {"error", "suggestions"} and named in result.payload["error"]
    assert result.payload["suggestions"] and len(result.texts) == 2
    assert result.texts[1].startswith(result.payload["error"] + "\n\nSuggestions:\n- ")


@pytest.mark.parametrize("query", [
    pytest.param("run: duckdb.sql('select 1 as x')", id="raw-sql"),
    pytest.param("run: duckdb.table('../data/orders.csv') -> { aggregate: c is count() }", id="table"),
])
def test_raw_sql_and_table_are_refused(needs_node, client, query):
    with pytest.raises(McpToolError) as err:
        client.execute_query(**PKG, query=query)
    assert "restricted query" in err.value.message
    assert any("restricted mode" in s for s in err.value.suggestions)


def test_unknown_model_is_model_access_error(needs_node, client):
    result = client.call("execute_query", {"environmentName": "samples", "packageName": "mini",
                                           "modelPath": "nope.malloy", "query": "run: orders -> by_region"})
    assert result.is_error and result.uri == "error://executeQuery/modelAccess"


# ---------- getContext ----------

def test_get_context_tier1_lists_environments(needs_node, client):
    assert client.get_context() == {"results": [{"kind": "environment", "name": "samples",
                                                 "packages": ["mini"]}]}


def test_get_context_tier2_lists_packages(needs_node, client):
    payload = client.get_context(environmentName="samples")
    assert payload["results"] == [{"kind": "package", "name": "mini", "environmentName": "samples",
                                   "description": "A tiny shop: customers, products and orders."}]


def test_get_context_tier3_lists_sources(needs_node, client):
    payload = client.get_context(environmentName="samples", packageName="mini")
    assert [r["name"] for r in payload["results"]] == ["customers", "products", "orders"]
    orders = payload["results"][2]
    assert orders == {"kind": "source", "name": "orders", "source": "orders", "environmentName": "samples",
                      "packageName": "mini", "modelPath": "shop.malloy",
                      "doc": "One row per order line; amount is the price paid in dollars."}


def test_get_context_tier4_ranks_the_name_match_first(needs_node, client):
    payload = client.get_context(environmentName="samples", packageName="mini", query="units_sold")
    first = payload["results"][0]
    assert (first["kind"], first["source"], first["name"]) == ("measure", "orders", "units_sold")
    assert "retrieval" not in payload  # the Publisher's lexical path names no mode


# Regression: "total revenue?" found nothing named revenue, because the question mark stayed on
# the word lunr searched (the Publisher's lexical path does the same; reference/endpoint.md).
@pytest.mark.parametrize("typed", ["total revenue?", "Total REVENUE.", "(total revenue)!",
                                   "'total revenue'"])
def test_get_context_search_ignores_punctuation_and_case(needs_node, client, typed):
    plain = client.get_context(environmentName="samples", packageName="mini", query="total revenue")
    payload = client.get_context(environmentName="samples", packageName="mini", query=typed)
    names = [(r["kind"], r["name"]) for r in payload["results"]]
    assert ("measure", "total_revenue") in names
    assert names == [(r["kind"], r["name"]) for r in plain["results"]]
    typed_form = client.get_context(
        search_targets=[{"target_type": "measure", "search_text": typed}],
        scopes=[{"environment": "samples", "package": "mini"}])
    ids = [e["entity_id"] for g in typed_form["sources"] for e in g["entities"]]
    assert "measure:orders:total_revenue" in ids


def test_get_context_tier4_limit_caps_results(needs_node, client):
    payload = client.get_context(environmentName="samples", packageName="mini",
                                 query="orders revenue region customer", limit=2)
    assert len(payload["results"]) == 2


def test_get_context_limit_above_50_is_refused(needs_node, client):
    with pytest.raises(McpToolError):
        client.get_context(environmentName="samples", packageName="mini", query="orders", limit=51)


def test_get_context_unknown_environment_is_tool_error(needs_node, client):
    with pytest.raises(McpToolError, match="not found"):
        client.get_context(environmentName="nowhere")


def test_typed_search_targets_filter_by_type_and_group_by_source(needs_node, client):
    payload = client.get_context(search_targets=[{"target_type": "measure", "search_text": "revenue dollars"}],
                                 scopes=[{"environment": "samples", "package": "mini"}])
    assert payload["retrieval"] == "lexical"
    (group,) = payload["sources"]
    assert group["source_info"]["resource_id"] == {"environment": "samples", "package": "mini",
                                                   "model_path": "shop.malloy", "source": "orders"}
    ent = group["entities"][0]
    assert ent["entity_id"] == "measure:orders:total_revenue"
    assert all(e["entity_type"] == "measure" for e in group["entities"])
    assert ent["matched_targets"][0]["search_text"] == "revenue dollars"


def test_typed_bare_target_lists_every_entity_of_its_type_in_scope(needs_node, client):
    payload = client.get_context(search_targets=[{"target_type": "view"}],
                                 scopes=[{"environment": "samples", "package": "mini", "source": "orders"}])
    ids = [e["entity_id"] for g in payload["sources"] for e in g["entities"]]
    assert ids == ["view:orders:by_region", "view:orders:top_categories"]


# ---------- status, reload ----------

def test_get_status_lists_served_packages(needs_node, client):
    payload = client.get_status()
    assert payload["operationalState"] == "serving"
    assert payload["environments"] == [{"name": "samples", "packages": ["mini"]}]


def test_reload_package_reports_in_place(needs_node, client):
    assert client.reload_package("samples", "mini") == {
        "status": "reloaded", "mode": "in-place", "name": "mini",
        "description": "A tiny shop: customers, products and orders."}


# ---------- HTTP only: REST routes, a plain JSON-RPC client, runner recovery ----------

def test_rest_package_route_gives_content_sha(needs_node, http_server):
    rest = PublisherRest(http_server[1])
    body = rest.package("samples", "mini")
    assert body["sourceContentSha"] == package_sha(MINI_MODEL)
    assert body["servedRevision"] == "local-" + body["sourceContentSha"][:12]


def test_rest_models_routes_give_paths_text_and_source_infos(needs_node, http_server):
    rest = PublisherRest(http_server[1] + "/mcp")
    assert [m["path"] for m in rest.models("samples", "mini")] == ["shop.malloy"]
    model = rest.model("samples", "mini", "shop.malloy")
    assert model["sourceText"] == (MINI_MODEL / "shop.malloy").read_text()
    assert [s["name"] for s in model["sourceInfos"]] == ["customers", "products", "orders"]
    assert model["queries"][0]["name"] == "shipped_by_month"


def test_rest_unknown_package_is_404(needs_node, http_server):
    with pytest.raises(Exception, match="HTTP 404"):
        PublisherRest(http_server[1]).package("samples", "nope")


# ---------- an answerer's client: the answerer's tools, nothing else ----------

def test_an_answerers_client_is_refused_status_and_reload_and_keeps_its_own_tools(
        needs_node, http_server):
    base = http_server[1] + "/mcp"
    with connect(url=answerer_client_url(base, 41), timeout=120) as answerer, \
            connect(url=client_url(base, "operator"), timeout=120) as operator:
        for call in (lambda: answerer.get_status(),
                     lambda: answerer.reload_package("samples", "mini")):
            with pytest.raises(McpToolError, match="refused to attempt-41: an answerer's client "
                                                   "may call only malloy_getContext and "
                                                   "malloy_executeQuery"):
                call()
        # Its own tools answer as ever; the operator's status and reload are untouched.
        assert answerer.execute_query(**PKG, query="run: orders -> { aggregate: order_count }"
                                      )["rows"] == _duck("select count(*) as order_count from "
                                                         "read_csv('orders.csv')")
        assert answerer.get_context(environmentName="samples", packageName="mini")
        assert operator.get_status()["operationalState"] == "serving"
        assert operator.reload_package("samples", "mini")["status"] == "reloaded"


def test_the_rest_routes_are_refused_to_a_request_naming_an_answerers_client(
        needs_node, http_server):
    url = http_server[1] + "/api/v0/environments/samples/packages/mini/models/shop.malloy"
    request = urllib.request.Request(url, headers={CLIENT_HEADER: "attempt-3"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 403
    assert "refused to attempt-3" in json.loads(refused.value.read())["error"]
    # Without the name (the scorer's own reads) the route answers.
    assert PublisherRest(http_server[1]).model("samples", "mini", "shop.malloy")["sourceText"]


def _get_status(base: str, path: str, headers: dict[str, str]) -> int:
    """The HTTP status of GET base+path sent with exactly these headers (Host included)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


REST_PATHS = ["/api/v0/environments/samples/packages/mini",
              "/api/v0/environments/samples/packages/mini/models",
              "/api/v0/environments/samples/packages/mini/models/shop.malloy"]


# Regression: the REST routes served the model source to any Host (DNS rebinding); /mcp did not.
@pytest.mark.parametrize("path", REST_PATHS + ["/mcp"])
def test_foreign_host_header_is_refused_421_on_every_route(needs_node, http_server, path):
    assert _get_status(http_server[1], path, {"Host": "evil.example.com"}) == 421


@pytest.mark.parametrize("path", REST_PATHS)
def test_foreign_origin_is_refused_403_on_rest_routes(needs_node, http_server, path):
    port = http_server[1].rsplit(":", 1)[1]
    assert _get_status(http_server[1], path, {"Host": f"127.0.0.1:{port}",
                                              "Origin": "http://evil.example.com"}) == 403


@pytest.mark.parametrize("path", REST_PATHS)
def test_loopback_host_header_is_answered_on_rest_routes(needs_node, http_server, path):
    port = http_server[1].rsplit(":", 1)[1]
    assert _get_status(http_server[1], path, {"Host": f"localhost:{port}"}) == 200


def _post(url: str, body: dict, session_headers: dict | None = None) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        **(session_headers or {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read().decode()
    return json.loads(text) if text.strip() else {}


def test_plain_json_rpc_client_with_2025_protocol_can_query(needs_node, http_server):
    url = http_server[1] + "/mcp"
    init = _post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "plain", "version": "0"}}})
    assert init["result"]["serverInfo"]["name"] == "malloy-publisher-mcp-server"
    headers = {"MCP-Protocol-Version": "2025-06-18"}
    _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    answer = _post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "malloy_executeQuery", "arguments": {
            "environmentName": "samples", "packageName": "mini", "modelPath": "shop.malloy",
            "sourceName": "orders", "queryName": "by_region"}}}, headers)
    block = answer["result"]["content"][0]
    assert block["type"] == "resource" and block["resource"]["mimeType"] == "application/json"
    assert len(json.loads(block["resource"]["text"])["rows"]) == 3


def test_runner_killed_mid_session_next_query_succeeds(needs_node, http_server, http_client):
    http_client.execute_query(**PKG, query_name="shipped_by_month")
    pids = runner_pids(http_server[0].pid)
    assert pids  # one runner, or the pool of two once a getContext has started it
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    envelope = http_client.execute_query(**PKG, source_name="orders", query_name="by_region")
    assert len(envelope["rows"]) == 3
    assert runner_pids(http_server[0].pid) != pids


# ---------- pure parts ----------

def test_package_arg_without_dir_is_usage_error():
    with pytest.raises(UsageError, match="ENV/PKG=DIR"):
        parse_package_arg("samples-mini")


def test_package_arg_allows_sibling_data_folder():
    served = parse_package_arg(f"samples/mini={MINI_MODEL}")
    assert (served.environment, served.name) == ("samples", "mini")
    assert served.allow == [(MINI / "data").resolve()]


def test_oversized_envelope_is_truncated_by_rows():
    rows = [{"text": "x" * 1000, "n": i} for i in range(200)]
    envelope = build_envelope({"rows": rows, "schema": {"fields": []}, "_query_row_limit": 1000,
                               "_limit_source": "server_default", "_limit_hit": False})
    assert envelope["_rows_truncated"] is True and envelope["_total_rows"] == 200
    assert 0 < envelope["_returned_rows"] == len(envelope["rows"]) < 200
    assert len(json.dumps(envelope)) <= 90_000 + 500  # the warning is added after the fit
    assert "truncated" in envelope["warning"]


def test_serve_local_json_without_http_is_usage_error():
    proc = subprocess.run([sys.executable, str(SERVE), "--package", f"samples/mini={MINI_MODEL}", "--json"],
                          check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "--json needs --http" in proc.stderr


def test_serve_local_missing_package_dir_is_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, str(SERVE), "--package", f"samples/x={tmp_path / 'nope'}"],
                          check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "is not a folder" in proc.stderr and "Traceback" not in proc.stderr


def test_serve_local_missing_package_dir_is_a_usage_error_without_node_too(tmp_path):
    # The bug: the Node check ran before the usage check, so without Node this was exit 3.
    no_node = {**os.environ, "PATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SERVE), "--package", f"samples/x={tmp_path / 'nope'}"],
                          env=no_node, check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "is not a folder" in proc.stderr and "node" not in proc.stderr


def test_serve_local_without_node_is_exit_3_naming_it_once_the_command_line_is_right(tmp_path):
    no_node = {**os.environ, "PATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SERVE), "--package", f"samples/mini={MINI_MODEL}"],
                          env=no_node, check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3 and "node is not on PATH" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_serving_on_a_port_already_held_exits_3_before_saying_serving(http_server):
    port = http_server[1].rsplit(":", 1)[1]
    proc = subprocess.run([sys.executable, str(SERVE), "--package", f"samples/mini={MINI_MODEL}",
                           "--http", port], capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 3
    assert "serving" not in proc.stderr and "Traceback" not in proc.stderr
    assert f"127.0.0.1:{port} cannot be served" in proc.stderr


# ---------- budgets and environment faults (hostile input) ----------

def _payload(result) -> dict:
    return json.loads(result.content[0].resource.text)


def test_query_over_its_time_budget_is_a_query_error_with_suggestions(needs_node, monkeypatch):
    from malloy_evals.endpoint import runner as runner_mod
    from malloy_evals.endpoint.mcp_server import Endpoint

    monkeypatch.setattr(runner_mod, "KILL_GRACE_S", 1.0)
    served = parse_package_arg(f"samples/mini={MINI_MODEL}", timeout=1.0)
    endpoint = Endpoint([served])
    try:
        bomb = ("run: orders -> " + "{ group_by: status nest: n is " * 40
                + "{ aggregate: order_count }" + " }" * 40)
        result = endpoint.execute_query("samples", "mini", "shop.malloy", query=bomb)
        body = _payload(result)
        assert result.is_error and "did not finish within 1 s" in body["error"]
        assert "environmentFault" not in body
        assert any("cheaper" in s for s in body["suggestions"])
        ok = endpoint.execute_query("samples", "mini", "shop.malloy", query="run: orders -> "
                                    "{ aggregate: order_count }")
        assert not ok.is_error
    finally:
        endpoint.close()


def test_package_that_cannot_load_is_marked_an_environment_fault(tmp_path):
    from malloy_evals.endpoint.mcp_server import Endpoint

    gone = tmp_path / "model"
    gone.mkdir()
    served = parse_package_arg(f"samples/mini={gone}")
    gone.rmdir()
    endpoint = Endpoint([served])
    result = endpoint.execute_query("samples", "mini", "shop.malloy", query="run: x -> { }")
    assert result.is_error and _payload(result)["environmentFault"] is True


@pytest.mark.parametrize("args, message", [
    pytest.param([], "give --package ENV/PKG=DIR or --set SET", id="nothing_to_serve"),
    pytest.param(["--package", f"samples/mini={MINI_MODEL}", "--model", str(MINI_MODEL)],
                 "give --set SET with it", id="model_without_set"),
])
def test_serve_local_flag_mistakes_exit_2(args, message):
    proc = subprocess.run([sys.executable, str(SERVE), *args], check=False, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 2 and message in proc.stderr


def test_serve_local_set_with_model_serves_the_candidate_package(tmp_path):
    import shutil

    _guard()
    copy = tmp_path / "mini"
    shutil.copytree(MINI, copy)
    cand = copy / "model-candidate"
    shutil.copytree(copy / "model", cand)
    (cand / "shop.malloy").write_text((cand / "shop.malloy").read_text() + "\n// candidate\n")
    proc, port = _serve_http("--set", str(copy), "--model", str(cand))
    try:
        body = PublisherRest(f"http://127.0.0.1:{port}").package("samples", "mini")
        assert body["sourceContentSha"] == package_sha(cand) != package_sha(copy / "model")
    finally:
        _stop(proc)


# Regression (a suite under load): the first queries sent side by side waited, inside their own
# time limit, for the pool's second runner to start. A package-level getContext, the client's
# readiness call, now starts the whole pool before it answers.
def test_a_package_level_get_context_starts_the_whole_runner_pool(needs_node):
    from malloy_evals.endpoint.mcp_server import Endpoint
    from malloy_evals.endpoint.runner import POOL_SIZE

    served = parse_package_arg(f"samples/mini={MINI_MODEL}")
    endpoint = Endpoint([served])
    try:
        assert not served.started
        result = endpoint.get_context("samples", "mini")
        assert not result.is_error and len(served.runtime.pids) == POOL_SIZE
        endpoint.get_context("samples", "mini")  # once: the same runners answer again
        assert len(served.runtime.pids) == POOL_SIZE
    finally:
        endpoint.close()
