"""The sealed answerer's destinations (answer/harness/network.py): what --allow-host accepts, which
destination is read and which proxied, the relay's listeners, and what is refused (exit 2)."""

from __future__ import annotations

import pytest
from malloy_evals.answer.harness import network
from malloy_evals.core.errors import UsageError

TOOLS = ["malloy_getContext", "malloy_executeQuery"]


@pytest.mark.parametrize("value, host, port", [
    pytest.param("example.org:443", "example.org", 443, id="a_name"),
    pytest.param("DB.Internal:5432", "db.internal", 5432, id="names_are_lowercased"),
    pytest.param("127.0.0.1:6000", "127.0.0.1", 6000, id="a_loopback_address"),
    pytest.param("[::1]:8080", "::1", 8080, id="an_ipv6_address_in_brackets"),
])
def test_allow_host_takes_host_colon_port(value, host, port):
    dest = network.parse_allow_host(value)
    assert (dest.host, dest.port, dest.scheme, dest.route) == (host, port, "tcp", "allow-host")


@pytest.mark.parametrize("value", [
    pytest.param("example.org", id="no_port"),
    pytest.param("example.org:0", id="port_zero"),
    pytest.param("example.org:70000", id="port_too_big"),
    pytest.param("example.org:https", id="a_named_port"),
    pytest.param("::1:80", id="ipv6_without_brackets"),
    pytest.param("[example.org]:80", id="a_name_in_brackets"),
    pytest.param("a b:80", id="a_space"),
    pytest.param(":80", id="no_host"),
    pytest.param("http://example.org:80", id="a_url"),
])
def test_allow_host_refuses_anything_but_host_colon_port(value):
    with pytest.raises(UsageError, match="--allow-host"):
        network.parse_allow_host(value)


def test_the_local_endpoint_is_reached_at_each_tries_own_client_path_only():
    mcp = network.mcp_destination("http://127.0.0.1:41000/mcp", tools=TOOLS,
                                  per_try_prefix="/mcp/client/attempt-")
    allow = network.NetworkAllowList((mcp,))
    one = allow.for_try("http://127.0.0.1:41000/mcp/client/attempt-7").destinations[0]
    assert one.paths == ("/mcp/client/attempt-7",) and not one.per_try
    assert one.allows("POST", "/mcp/client/attempt-7")
    for method, path in [("POST", "/mcp/client/attempt-8"), ("POST", "/mcp"),
                         ("GET", "/api/v0/environments/samples/packages/bookshop"),
                         ("POST", "/mcp/client/attempt-7/../attempt-8"), ("PUT", "/mcp/client/attempt-7")]:
        assert not one.allows(method, path), (method, path)
    assert one.tools == tuple(TOOLS) and one.read and not one.proxied
    # The run's allow-list names the pattern, not one try's path.
    assert mcp.describe()["paths"] == ["/mcp/client/attempt-<N> (each try its own client)"]
    with pytest.raises(ValueError, match="per-try client"):
        allow.for_try("http://127.0.0.1:41000/mcp")


def test_a_given_mcp_url_is_reached_at_its_exact_path():
    mcp = network.mcp_destination("http://localhost:4000/publisher/mcp", tools=TOOLS)
    assert mcp.paths == ("/publisher/mcp",) and mcp.allows("POST", "/publisher/mcp?x=1")
    assert not mcp.allows("POST", "/publisher/mcp/") and mcp.loopback


def test_the_model_api_is_its_messages_routes_under_the_base_urls_path():
    standin = network.model_destination("http://127.0.0.1:8765/anthropic/")
    assert standin.paths == ("/anthropic/v1/messages", "/anthropic/v1/messages/count_tokens")
    assert standin.allows("POST", "/anthropic/v1/messages?beta=true")
    assert not standin.allows("GET", "/anthropic/v1/messages")
    assert not standin.allows("POST", "/anthropic/v1/complete")
    # Unset, Claude Code calls the real API: over HTTPS, off this machine, through the proxy.
    real = network.model_destination(None)
    assert (real.host, real.port, real.scheme) == ("api.anthropic.com", 443, "https")
    assert real.proxied and not real.read and real.describe()["via"] == "proxy CONNECT"


def test_the_relay_listens_where_each_loopback_destination_is_and_proxies_the_rest():
    mcp = network.mcp_destination("http://127.0.0.1:41000/mcp", tools=TOOLS)
    model = network.model_destination("http://localhost:8765")
    db = network.parse_allow_host("127.0.0.1:5432")
    hosted = network.parse_allow_host("example.org:443")
    on_3128 = network.parse_allow_host("127.0.0.1:3128")
    ways = network.NetworkAllowList((mcp, model, db, hosted, on_3128)).ways()
    assert [(w.kind, w.listen) for w in ways] == [
        ("http", (("127.0.0.1", 41000),)),
        ("http", (("127.0.0.1", 8765), ("::1", 8765))),     # localhost: either address
        ("tcp", (("127.0.0.1", 5432),)),
        ("tcp", (("127.0.0.1", 3128),)),
        ("proxy", (("127.0.0.1", 3129),)),                  # the next port nothing else holds
    ]
    assert ways[-1].destinations == (hosted,)


def test_the_proxy_variables_are_set_only_when_something_goes_through_the_proxy():
    mcp = network.mcp_destination("http://127.0.0.1:41000/mcp", tools=TOOLS)
    assert network.NetworkAllowList((mcp,)).proxy_environment() == {}
    env = network.NetworkAllowList((mcp, network.model_destination(None))).proxy_environment()
    assert {env[n] for n in network.PROXY_ENV} == {f"http://127.0.0.1:{network.PROXY_PORT}"}
    # The loopback destinations stay direct, reached by the relay at their own address.
    assert env["NO_PROXY"] == env["no_proxy"] == "127.0.0.1,localhost,::1"


@pytest.mark.parametrize("extra", [
    pytest.param("127.0.0.1:41000", id="the_endpoints_port"),
    pytest.param("localhost:41000", id="the_endpoints_port_by_another_loopback_name"),
    pytest.param("127.0.0.1:8765", id="the_model_apis_port"),
])
def test_an_allow_host_on_the_kits_own_ports_is_refused(extra):
    kit = [network.mcp_destination("http://127.0.0.1:41000/mcp", tools=TOOLS),
           network.model_destination("http://127.0.0.1:8765")]
    with pytest.raises(UsageError, match=f"--allow-host .*{extra.rsplit(':', 1)[1]}: refused"):
        network.check_destinations(kit, [network.parse_allow_host(extra)])
    network.check_destinations(kit, [network.parse_allow_host("127.0.0.1:41001")])


def test_a_loopback_port_below_1024_cannot_be_listened_on_inside_and_is_refused():
    with pytest.raises(UsageError, match="below 1024"):
        network.check_destinations([network.mcp_destination("http://127.0.0.1/mcp",
                                                            tools=TOOLS)], [])
    with pytest.raises(UsageError, match="below 1024"):
        network.check_destinations([], [network.parse_allow_host("127.0.0.1:80")])
    network.check_destinations([network.model_destination(None)], [])  # proxied: no listener
