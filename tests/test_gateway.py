"""The outer side of a sealed attempt's network (answer/harness/gateway.py), driven over its Unix
sockets the way the relay inside drives them, against real loopback servers: what passes, what is
answered by the gateway itself, and what never reaches the destination."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from malloy_evals.answer.harness import gateway, netrelay, network
from malloy_evals.llm import standin

TOOLS = ["malloy_getContext", "malloy_executeQuery"]


class _Recorder(BaseHTTPRequestHandler):
    """A destination that answers every request with what it received, and keeps it."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[dict]] = []

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        got = {"method": self.command, "path": self.path, "body": body,
               "connection": self.headers.get("Connection"), "expect": self.headers.get("Expect")}
        type(self).seen.append(got)
        data = json.dumps(got).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _answer


@pytest.fixture
def recorder():
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Rec", (_Recorder,), {"seen": []}))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@contextmanager
def gateway_for(allow: network.NetworkAllowList, tmp_path: Path,
                env: dict | None = None) -> Iterator[tuple[gateway.Gateway, list[str]]]:
    """The try's gateway over `allow`; yields it and its sockets, one per way, in order."""
    with gateway.open_gateway(allow, tmp_path, env or {}) as (gate, config):
        listen = netrelay.read_config(str(config))  # as the relay inside reads it
        yield gate, list(dict.fromkeys(path for _h, _p, path in listen))


def exchange(sock_path: str, data: bytes, *, end: bool = False) -> bytes:
    """Send `data` on a fresh connection to one of the gateway's sockets (then its end, with
    `end`: a tunnel lasts until both sides are done); everything it sends back until it closes."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(60)
        s.connect(sock_path)
        s.sendall(data)
        if end:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def http(method: str, path: str, body: bytes = b"", extra: str = "") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n").encode() + body


def status_and_body(reply: bytes) -> tuple[int, bytes, bytes]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def rpc(name: str, rpc_id: int = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call",
                       "params": {"name": name, "arguments": {}}}).encode()


def _mcp(recorder) -> network.NetworkAllowList:
    port = recorder.server_address[1]
    return network.NetworkAllowList((network.mcp_destination(f"http://127.0.0.1:{port}/mcp",
                                                             tools=TOOLS),))


# ---------------------------------------------------------------- plain HTTP, read

def test_an_allowed_request_passes_once_with_connection_close_both_ways(recorder, tmp_path):
    with gateway_for(_mcp(recorder), tmp_path) as (gate, [sock]):
        body = rpc("malloy_getContext")
        # A second request pipelined after the first is never sent on: one request a connection.
        reply = exchange(sock, http("POST", "/mcp", body, "Connection: keep-alive\r\n")
                         + http("POST", "/mcp", rpc("malloy_reloadPackage")))
        status, head, echoed = status_and_body(reply)
        assert status == 200 and b"Connection: close" in head
        assert json.loads(echoed)["body"] == body.decode()
        assert [(s["path"], s["connection"]) for s in type_seen(recorder)] == [("/mcp", "close")]
        assert gate.refusals == 0


def type_seen(recorder) -> list[dict]:
    return recorder.RequestHandlerClass.seen


@pytest.mark.parametrize("request_bytes, status, said", [
    pytest.param(http("GET", "/api/v0/environments/samples/packages/bookshop"), 403,
                 "may reach only POST GET DELETE /mcp", id="a_rest_route"),
    pytest.param(http("POST", "/mcp/../api/v0/x"), 403, "refuses POST /mcp/../api", id="dot_dot"),
    pytest.param(http("PUT", "/mcp"), 403, "refuses PUT /mcp", id="another_method"),
    pytest.param(http("POST", "/mcp", b"{}", "Transfer-Encoding: chunked\r\n"), 400,
                 "framed other than", id="length_and_chunks_together"),
    pytest.param(http("GET", "/mcp", extra="Upgrade: websocket\r\n"), 403, "upgrades",
                 id="an_upgrade"),
    pytest.param(b"GET /mcp HTTP/1.1\r\nHost: x\r\n folded: on\r\n\r\n", 400, "malformed header",
                 id="a_folded_header"),
    pytest.param(http("POST", "/mcp", b'{"method": "tools/call", "method": "ping"}'), 400,
                 "names one key twice", id="a_key_given_twice"),
    pytest.param(http("POST", "/mcp", b"\xff\xfe"), 400, "cannot read", id="not_utf8_json"),
])
def test_requests_the_allow_list_does_not_name_are_answered_by_the_gateway(
        recorder, tmp_path, request_bytes, status, said):
    with gateway_for(_mcp(recorder), tmp_path) as (gate, [sock]):
        got, _head, body = status_and_body(exchange(sock, request_bytes))
    assert got == status and said in json.loads(body)["error"]
    assert type_seen(recorder) == [] and gate.refusals == 1


@pytest.mark.parametrize("name", ["malloy_reloadPackage", "malloy_getStatus", "anything_else"])
def test_a_tools_call_of_a_tool_the_answerer_is_not_given_is_a_json_rpc_error(
        recorder, tmp_path, name):
    with gateway_for(_mcp(recorder), tmp_path) as (gate, [sock]):
        batch = json.dumps([json.loads(rpc("malloy_getContext", 1)),
                            json.loads(rpc(name, 2))]).encode()
        for body, rpc_id in ((rpc(name, 7), 7), (batch, 2)):
            status, _head, reply = status_and_body(exchange(sock, http("POST", "/mcp", body)))
            error = json.loads(reply)
            assert status == 200 and error["id"] == rpc_id
            assert f"refuses tools/call '{name}'" in error["error"]["message"]
    assert type_seen(recorder) == [] and gate.refusals == 2
    assert all(f"'{name}'" in r for r in gate.refused)


def test_a_chunked_mcp_body_is_checked_whole_and_sent_on_by_length(recorder, tmp_path):
    body = rpc("malloy_executeQuery")
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:10], body[10:])) + b"0\r\n\r\n"
    request = (b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
               b"Expect: 100-continue\r\n\r\n" + chunked)
    with gateway_for(_mcp(recorder), tmp_path) as (_gate, [sock]):
        status, _head, _body = status_and_body(exchange(sock, request))
    [seen] = type_seen(recorder)
    assert status == 200 and seen["body"] == body.decode() and seen["expect"] is None


def test_the_model_api_streams_through_and_only_its_messages_routes_pass(tmp_path):
    script = standin.parse_script({"question": "How much revenue?", "turns": ["$90."]},
                                  tmp_path / "s.json")
    with standin.serve([script]) as server:
        allow = network.NetworkAllowList((network.model_destination(server.url),))
        ask = json.dumps({"model": "m", "max_tokens": 10, "stream": True, "messages": [
            {"role": "user", "content": "How much revenue?"}]}).encode()
        with gateway_for(allow, tmp_path) as (gate, [sock]):
            streamed = exchange(sock, http("POST", "/v1/messages?beta=true", ask))
            models = exchange(sock, http("GET", "/v1/models"))
        requests = list(server.requests)
    status, head, body = status_and_body(streamed)
    assert status == 200 and b"text/event-stream" in head
    assert b"event: message_stop" in body and b"$90." in body
    assert status_and_body(models)[0] == 403 and gate.refusals == 1
    # The refused route never reached the stand-in, so its request log holds the call alone.
    assert [r["path"] for r in requests] == ["/v1/messages"]


# ---------------------------------------------------------------- tunnels, raw bytes

@pytest.fixture
def echo():
    """A loopback TCP server echoing what it gets, counting its connections."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def test_an_allowed_host_gets_bytes_both_ways_unread(echo, tmp_path):
    port, accepted = echo
    allow = network.NetworkAllowList((network.parse_allow_host(f"127.0.0.1:{port}"),))
    with gateway_for(allow, tmp_path) as (_gate, [sock]), socket.socket(socket.AF_UNIX) as s:
        s.connect(sock)
        s.sendall(b"\x00not http at all\r\n")
        s.shutdown(socket.SHUT_WR)
        assert s.recv(100) == b"\x00not http at all\r\n"
    assert accepted == [1]


def test_the_proxy_tunnels_a_connect_to_its_destination_and_refuses_any_other(echo, tmp_path):
    port, accepted = echo
    # The proxy's way, built by hand around a loopback destination so the tunnel has somewhere
    # on this machine to go (the allow-list proxies only destinations off it).
    dest = network.Destination("model", "https", "127.0.0.1", port)
    way = network.Way("proxy", (("127.0.0.1", network.PROXY_PORT),), (dest,))
    gate = gateway.Gateway([way], tmp_path)
    [(_h, _p, sock)] = gate.start()
    try:
        tunnel = exchange(sock, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nhello".encode(),
                          end=True)
        assert tunnel == b"HTTP/1.1 200 Connection Established\r\n\r\nhello"
        for target in (f"127.0.0.1:{port + 1}", "203.0.113.7:443", "api.anthropic.com:443"):
            status, _head, body = status_and_body(exchange(sock, f"CONNECT {target} HTTP/1.1"
                                                                 "\r\n\r\n".encode()))
            assert status == 403 and f"refuses CONNECT {target}" in json.loads(body)["error"]
        status, _head, _body = status_and_body(exchange(sock, http("GET", "http://203.0.113.7/")))
        assert status == 403
    finally:
        gate.close()
    assert accepted == [1] and gate.refusals == 4


def test_behind_the_harnesss_own_proxy_a_destination_off_this_machine_is_a_connect_through_it():
    seen: list[bytes] = []
    proxy = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = proxy.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            seen.append(head)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            conn.sendall(conn.recv(100).upper())

    threading.Thread(target=serve, daemon=True).start()
    env = {"HTTPS_PROXY": f"http://me:s%3Acret@127.0.0.1:{proxy.getsockname()[1]}",
           "NO_PROXY": "localhost,.internal.example"}
    upstream = gateway.upstream_proxy(env)
    assert upstream is not None and upstream.authorization == "Basic bWU6czpjcmV0"
    assert not upstream.serves("db.internal.example") and upstream.serves("api.anthropic.com")
    dest = network.model_destination(None)
    with gateway.connect_out(dest, upstream) as sock:
        sock.sendall(b"tls bytes")
        assert sock.recv(100) == b"TLS BYTES"
    proxy.close()
    assert seen[0].startswith(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\n")
    assert b"Proxy-Authorization: Basic bWU6czpjcmV0" in seen[0]
    assert gateway.upstream_proxy({}) is None


def test_a_closed_gateway_takes_no_more_connections(recorder, tmp_path):
    with gateway_for(_mcp(recorder), tmp_path) as (_gate, [sock]):
        pass
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(OSError):
        s.connect(sock)
