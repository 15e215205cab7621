"""The kit's MCP client: tool names, payload reading, typed errors, timeouts."""

from __future__ import annotations

import os
import socket
from types import SimpleNamespace

import pytest
from conftest import KIT_ROOT, node_runtime_missing_reason
from malloy_evals.endpoint.mcp_client import (
    McpClient,
    McpConnectionError,
    McpToolError,
    PublisherRest,
    canonical_tool_name,
    connect,
    publisher_tool_name,
    ranked_entity_ids,
    read_tool_result,
    tool_error_from,
)
from malloy_evals.endpoint.mcp_server import build_server, parse_package_arg

MINI_MODEL = KIT_ROOT / "tests" / "fixtures" / "mini_pkg" / "model"


def _resource(text: str, uri: str = "malloy://x#result"):
    return SimpleNamespace(type="resource", resource=SimpleNamespace(uri=uri, text=text))


def _text(text: str):
    return SimpleNamespace(type="text", text=text)


def _result(*blocks, is_error=False):
    return SimpleNamespace(content=list(blocks), is_error=is_error, structured_content=None)


# ---------- names ----------

@pytest.mark.parametrize("name", [
    "execute_query", "malloy_executeQuery", "mcp__publisher__malloy_executeQuery", "executeQuery",
])
def test_every_spelling_of_execute_query_is_canonical(name):
    assert canonical_tool_name(name) == "execute_query"
    assert publisher_tool_name(name) == "malloy_executeQuery"


def test_get_context_bare_name_maps_to_publisher_name():
    assert publisher_tool_name("get_context") == "malloy_getContext"


# ---------- payloads ----------

def test_payload_is_read_from_resource_at_content_0():
    result = read_tool_result(_result(_resource('{"rows": [1]}'), _text("a warning")))
    assert result.payload == {"rows": [1]} and result.uri == "malloy://x#result"


def test_payload_falls_back_to_labelled_text_block():
    result = read_tool_result(_result(_text('[Resource from publisher at malloy://y]: {"rows": []}')))
    assert result.payload == {"rows": []}


def test_tool_error_carries_server_message_and_suggestions():
    result = read_tool_result(_result(_resource('{"error": "bad", "suggestions": ["s1", "s2"]}'),
                                      _text("bad\n\nSuggestions:\n- s1\n- s2"), is_error=True))
    err = tool_error_from(result, "execute_query")
    assert (err.message, err.suggestions, err.tool) == ("bad", ["s1", "s2"], "execute_query")


def test_tool_error_with_only_text_uses_the_text():
    err = tool_error_from(read_tool_result(_result(_text("Tool failed: boom"), is_error=True)))
    assert err.message == "Tool failed: boom" and err.suggestions == []


# ---------- get_context payload generations ----------

def test_legacy_results_become_ranked_ids_in_response_order():
    payload = {"results": [
        {"kind": "measure", "name": "units_sold", "source": "orders"},
        {"kind": "source", "name": "orders", "source": "orders"},
        {"kind": "package", "name": "mini"},
    ]}
    assert ranked_entity_ids(payload) == ["measure:orders:units_sold", "source:orders:orders"]


def test_typed_sources_payload_becomes_ranked_ids_with_source_cards():
    payload = {"sources": [{"source_info": {"resource_id": {"source": "orders"}},
                            "entities": [{"entity_id": "measure:orders:total_revenue",
                                          "name": "total_revenue", "entity_type": "measure"},
                                         {"name": "status", "entity_type": "DIMENSION"}]}],
               "retrieval": "lexical"}
    assert ranked_entity_ids(payload) == ["source:orders:orders", "measure:orders:total_revenue",
                                          "dimension:orders:status"]


# ---------- connection failures ----------

def test_unreachable_url_is_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(McpConnectionError, match="could not connect"):
        connect(url=f"http://127.0.0.1:{port}/mcp", timeout=5)


def test_connect_needs_exactly_one_target():
    with pytest.raises(ValueError):
        connect()


def test_rest_reader_on_unreachable_server_is_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(McpConnectionError):
        PublisherRest(f"http://127.0.0.1:{port}", timeout=2).models("samples", "mini")


def test_rest_reader_accepts_api_base_with_or_without_suffix():
    assert PublisherRest("http://h:4000").base == "http://h:4000/api/v0"
    assert PublisherRest("http://h:4000/api/v0/").base == "http://h:4000/api/v0"
    assert PublisherRest("http://h:4040/mcp").base == "http://h:4040/api/v0"


# ---------- against an in-process endpoint ----------

@pytest.fixture(scope="module")
def inproc():
    """The kit's endpoint in this process (no transport), through the kit's client."""
    reason = node_runtime_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so runtime tests must run: {reason}")
        pytest.skip(reason)
    endpoint = build_server([parse_package_arg(f"samples/mini={MINI_MODEL}")])
    client = McpClient(endpoint.server, timeout=60, label="in-process")
    yield client
    client.close()
    endpoint.close()


@pytest.mark.parametrize("name", ["execute_query", "malloy_executeQuery",
                                  "mcp__publisher__malloy_executeQuery"])
def test_prefixed_and_bare_names_call_the_same_tool(needs_node, inproc, name):
    payload = inproc.call_ok(name, {"environmentName": "samples", "packageName": "mini",
                                    "modelPath": "shop.malloy", "queryName": "shipped_by_month"})
    assert len(payload["rows"]) == 3


def test_list_tools_names_the_four_publisher_tools(needs_node, inproc):
    assert sorted(inproc.list_tools()) == ["malloy_executeQuery", "malloy_getContext",
                                           "malloy_getStatus", "malloy_reloadPackage"]


def test_call_past_its_timeout_is_connection_error(needs_node, inproc):
    with pytest.raises(McpConnectionError, match="did not answer"):
        inproc.call("get_context", {"environmentName": "samples", "packageName": "mini",
                                    "query": "revenue"}, timeout=1e-6)
    # the client stays usable after a timed-out call
    assert inproc.get_status()["operationalState"] == "serving"


def test_get_context_through_client_gives_ranked_ids(needs_node, inproc):
    payload = inproc.get_context(environmentName="samples", packageName="mini", query="units_sold")
    assert ranked_entity_ids(payload)[0] == "measure:orders:units_sold"


def test_tool_error_raised_by_call_ok(needs_node, inproc):
    with pytest.raises(McpToolError, match="not defined"):
        inproc.execute_query(environment="samples", package="mini", model_path="shop.malloy",
                             query="run: orders -> { group_by: nope }")


def test_closed_client_refuses_calls(needs_node):
    endpoint = build_server([parse_package_arg(f"samples/mini={MINI_MODEL}")])
    client = McpClient(endpoint.server, timeout=30, label="in-process")
    client.close()
    with pytest.raises(McpConnectionError, match="closed"):
        client.call("get_status")
    endpoint.close()
