"""A hosted endpoint on loopback: the kit's own serve_local.py --http behind a small proxy that,
like a hosted Publisher, answers 401 to any request without the right bearer header. Real MCP
over HTTP on both sides; the proxy only checks the header and passes bytes through."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate", "host", "content-length"}


@contextmanager
def bearer_proxy(upstream_port: int, token: str) -> Iterator[tuple[int, list[str]]]:
    """A proxy on an ephemeral loopback port in front of 127.0.0.1:`upstream_port`; yields
    (port, the Authorization values it was sent, in order)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _relay(self) -> None:
            auth = self.headers.get("Authorization") or ""
            seen.append(auth)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if auth != f"Bearer {token}":
                payload = b'{"error": "unauthorized"}'
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=120)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                headers["Host"] = f"127.0.0.1:{upstream_port}"
                upstream.request(self.command, self.path, body=body, headers=headers)
                reply = upstream.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            finally:
                upstream.close()

        do_GET = do_POST = do_DELETE = _relay

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # bound, so ready, before serving
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="bearer-proxy")
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
