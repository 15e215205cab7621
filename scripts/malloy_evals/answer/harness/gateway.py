"""The outer side of a sealed attempt's network: the only code that connects out for it.

One `Gateway` per try. For each of the allow-list's ways (network.py) it listens on a Unix
socket in the attempt's own folder, which the sandbox binds read-only; the relay inside
(netrelay.py) hands it every connection the answerer makes. What comes in is decided here:

- `http` (a plain-HTTP destination on loopback): exactly one request per connection is read
  (its head, then its body by Content-Length or chunks); it passes only with an allowed method
  and path, and, for the MCP destination, a JSON-RPC body whose tools/call names only the
  answerer's tools. It is sent on with `Connection: close`, and the reply comes back as it is
  sent (streamed), with `Connection: close`. Anything else is answered here (403, or a JSON-RPC
  error for a refused tool) and never reaches the destination.
- `tcp` (an --allow-host on loopback): bytes both ways, unread.
- `proxy`: one request head; `CONNECT host:port` to an allowed proxied destination becomes a
  tunnel (bytes, unread: HTTPS shows no more), an absolute-form request to an allowed plain-HTTP
  one is read as above; every other target is refused (403).

A destination off this machine is reached directly, or, when the harness itself runs behind a
proxy (`HTTPS_PROXY` in its environment, not matched by its `NO_PROXY`), through that proxy as a
CONNECT. Every refusal is kept (`refused`) for the try's harness.jsonl line.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from malloy_evals.answer.harness.netrelay import pump
from malloy_evals.answer.harness.network import Destination, NetworkAllowList, Way, same_place

HEAD_LIMIT = 64 * 1024          # a request or reply head larger than this is refused
MCP_BODY_LIMIT = 8 << 20        # an MCP request body is read whole (to check its tool): at most
CONNECT_TIMEOUT_S = 30.0
REFUSALS_KEPT = 50
UNIX_PATH_MAX = 100             # sun_path is 108 bytes; a longer folder moves to /tmp
_CHUNK = 1 << 16
# Hop-by-hop headers (and what would change the request's framing or nature) are not passed on.
_DROPPED = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
            "trailer", "upgrade", "expect"}


class Refused(Exception):
    """A request the gateway answers itself, never sending it on."""

    def __init__(self, status: int, message: str, *, rpc_id: Any = None, rpc: bool = False):
        super().__init__(message)
        self.status = status
        self.rpc_id = rpc_id
        self.rpc = rpc           # answer as a JSON-RPC error (a refused tool), not an HTTP error


class _Reader:
    """Buffered reads from a socket: a head up to its blank line, exact byte counts, lines."""

    def __init__(self, sock: socket.socket, buffered: bytes = b""):
        self.sock = sock
        self.buf = buffered

    def _fill(self) -> bool:
        data = self.sock.recv(_CHUNK)
        self.buf += data
        return bool(data)

    def head(self) -> bytes | None:
        """Bytes up to and including the blank line ending a head; None at a clean end."""
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > HEAD_LIMIT:
                raise Refused(431, "the request head is larger than the gateway reads")
            if not self._fill():
                if self.buf:
                    raise Refused(400, "the connection ended inside a request head")
                return None
        end = self.buf.index(b"\r\n\r\n") + 4
        head, self.buf = self.buf[:end], self.buf[end:]
        return head

    def exactly(self, n: int) -> Iterator[bytes]:
        while n > 0:
            if not self.buf and not self._fill():
                raise Refused(400, "the connection ended inside a request body")
            piece, self.buf = self.buf[:n], self.buf[n:]
            n -= len(piece)
            yield piece

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if len(self.buf) > HEAD_LIMIT:
                raise Refused(400, "a chunk line is too long")
            if not self._fill():
                raise Refused(400, "the connection ended inside a chunked body")
        end = self.buf.index(b"\r\n") + 2
        line, self.buf = self.buf[:end], self.buf[end:]
        return line


@dataclass(frozen=True)
class Request:
    """One request head as the gateway read it."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name]


def parse_head(head: bytes) -> Request:
    """A request head, strictly: one request line, `name: value` headers, no folding, and a
    framing (Content-Length or chunked, never both) the destination cannot read otherwise."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise Refused(400, "the request head is not ASCII") from None
    lines = text[:-4].split("\r\n")
    words = lines[0].split(" ")
    if len(words) != 3 or not words[0].isalpha() or not words[0].isupper() \
            or words[2] not in ("HTTP/1.0", "HTTP/1.1") or not words[1]:
        raise Refused(400, f"not an HTTP/1.x request line: {lines[0][:120]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or any(c in name for c in " \t"):
            raise Refused(400, f"a malformed header line: {line[:120]!r}")
        headers.append((name, value.strip()))
    request = Request(words[0], words[1], words[2], headers)
    lengths = set(request.header("content-length"))
    codings = request.header("transfer-encoding")
    if codings and (lengths or [c.lower() for c in codings] != ["chunked"]):
        raise Refused(400, "a request body framed other than by one Content-Length or chunked")
    if len(lengths) > 1 or any(not n.isdigit() for n in lengths):
        raise Refused(400, "a request with an unreadable Content-Length")
    if request.header("upgrade"):
        raise Refused(403, "the sandbox's network does not pass protocol upgrades")
    return request


def _body(reader: _Reader, request: Request) -> Iterator[bytes]:
    """The request's body as it arrives: Content-Length bytes, or the chunked encoding as is."""
    if request.header("transfer-encoding"):
        while True:
            line = reader.line()
            yield line
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise Refused(400, "a malformed chunk size") from None
            if size == 0:
                while True:  # trailers, up to the blank line
                    trailer = reader.line()
                    yield trailer
                    if trailer == b"\r\n":
                        return
            yield from reader.exactly(size + 2)
        return
    lengths = request.header("content-length")
    yield from reader.exactly(int(lengths[0]) if lengths else 0)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _v in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("a JSON object names one key twice")
    return dict(pairs)


def check_tools(body: bytes, dest: Destination) -> None:
    """Refuse an MCP request body that calls a tool the answerer is not given, or that cannot
    be read the way the endpoint would read it (not UTF-8 JSON, a key given twice)."""
    if dest.tools is None:
        return
    try:
        doc = json.loads(body.decode("utf-8"), object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"an MCP request body the gateway cannot read: {exc}") from None
    for message in doc if isinstance(doc, list) else [doc]:
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            continue
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if name not in dest.tools:
            raise Refused(403, f"the sandbox refuses tools/call {name!r}: an answerer may call "
                               f"only {', '.join(dest.tools)}", rpc_id=message.get("id"),
                          rpc=True)


def refusal_bytes(refused: Refused) -> bytes:
    """The reply the gateway sends for a refused request: a JSON-RPC error for a refused tool
    (so the MCP client reads it as that call's error), else an HTTP error with a JSON body."""
    if refused.rpc:
        status = "200 OK"
        body = {"jsonrpc": "2.0", "id": refused.rpc_id,
                "error": {"code": -32601, "message": str(refused)}}
    else:
        status = f"{refused.status} Refused by the sandbox"
        body = {"error": str(refused)}
    data = json.dumps(body).encode("utf-8")
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: "
            f"{len(data)}\r\nConnection: close\r\n\r\n").encode("ascii") + data


def _forward_head(request: Request, target: str, *, length: int | None) -> bytes:
    lines = [f"{request.method} {target} {request.version}"]
    for name, value in request.headers:
        low = name.lower()
        if low in _DROPPED or (length is not None and low in ("content-length",
                                                              "transfer-encoding")):
            continue
        lines.append(f"{name}: {value}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _reply_head(head: bytes) -> bytes:
    """A reply head with `Connection: close`: the answerer's client opens a new connection for
    its next request, which the gateway then reads on its own."""
    lines = head[:-4].split(b"\r\n")
    kept = [lines[0]] + [h for h in lines[1:]
                         if h.split(b":", 1)[0].strip().lower() not in (b"connection",
                                                                        b"keep-alive")]
    return b"\r\n".join([*kept, b"Connection: close"]) + b"\r\n\r\n"


def _splice(a: socket.socket, b: socket.socket, first: bytes = b"") -> None:
    """Bytes both ways until both ends are done (`first`: what `a` already sent)."""
    if first:
        b.sendall(first)
    back = threading.Thread(target=pump, args=(b, a), daemon=True)
    back.start()
    pump(a, b)
    back.join()


@dataclass(frozen=True)
class UpstreamProxy:
    """The proxy the harness itself goes out through (its own HTTPS_PROXY), if any."""

    host: str
    port: int
    authorization: str | None = None     # a Proxy-Authorization value, from the URL's user part
    bypass: tuple[str, ...] = ()          # its NO_PROXY entries

    def serves(self, host: str) -> bool:
        """Whether a destination off this machine goes through it (not named by NO_PROXY)."""
        host = host.lower().rstrip(".")
        for given in self.bypass:
            if given == "*":
                return False
            entry = given.lower().lstrip("*.").rstrip(".")
            if entry and (host == entry or host.endswith("." + entry)):
                return False
        return True


def upstream_proxy(env: Mapping[str, str]) -> UpstreamProxy | None:
    """The harness's own proxy, from `HTTPS_PROXY` (or `https_proxy`): `http://[user:pass@]host:port`;
    None when unset or not such a URL (then destinations are reached directly)."""
    url = env.get("HTTPS_PROXY") or env.get("https_proxy")
    if not url:
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port or 80
    except ValueError:
        return None
    if parts.scheme != "http" or not parts.hostname:
        return None
    auth = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        auth = "Basic " + base64.b64encode(pair).decode("ascii")
    bypass = env.get("NO_PROXY") or env.get("no_proxy") or ""
    return UpstreamProxy(parts.hostname, port, auth,
                         tuple(e.strip() for e in bypass.split(",") if e.strip()))


def connect_out(dest: Destination, upstream: UpstreamProxy | None) -> socket.socket:
    """A connection to a destination: directly, or for one off this machine through the
    harness's own proxy as a CONNECT (OSError when it cannot be had)."""
    if upstream is None or dest.loopback or not upstream.serves(dest.host):
        sock = socket.create_connection((dest.host, dest.port), timeout=CONNECT_TIMEOUT_S)
        sock.settimeout(None)
        return sock
    sock = socket.create_connection((upstream.host, upstream.port), timeout=CONNECT_TIMEOUT_S)
    try:
        head = f"CONNECT {dest.address} HTTP/1.1\r\nHost: {dest.address}\r\n"
        if upstream.authorization:
            head += f"Proxy-Authorization: {upstream.authorization}\r\n"
        sock.sendall((head + "\r\n").encode("ascii"))
        reader = _Reader(sock)
        try:
            reply = reader.head()
        except Refused:
            reply = None
        status = reply.split(b" ", 2)[1:2] if reply else []
        if status != [b"200"]:
            said = reply.split(b"\r\n", 1)[0].decode("ascii", "replace") if reply else "nothing"
            raise OSError(f"the harness's proxy {upstream.host}:{upstream.port} refused CONNECT "
                          f"{dest.address}: {said}")
        if reader.buf:
            raise OSError(f"the harness's proxy sent bytes before the tunnel to {dest.address}")
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return sock


@dataclass
class Gateway:
    """One try's gateway: its Unix sockets, the threads serving them, what it refused."""

    ways: list[Way]
    folder: Path
    upstream: UpstreamProxy | None = None
    refused: list[str] = field(default_factory=list)
    refusals: int = 0
    _listeners: list[socket.socket] = field(default_factory=list)
    _open: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> list[tuple[str, int, str]]:
        """Listen on a socket per way; returns the relay's listeners (host, port, socket)."""
        listen: list[tuple[str, int, str]] = []
        for i, way in enumerate(self.ways):
            path = self.folder / f"{i}.sock"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(path))
            sock.listen(64)
            self._listeners.append(sock)
            threading.Thread(target=self._accept, args=(sock, way), daemon=True,
                             name=f"gateway-{way.kind}").start()
            listen += [(host, port, str(path)) for host, port in way.listen]
        return listen

    def close(self) -> None:
        with self._lock:
            socks = [*self._listeners, *self._open]
            self._listeners.clear()
        for sock in socks:
            for step in (lambda s: s.shutdown(socket.SHUT_RDWR), lambda s: s.close()):
                try:
                    step(sock)
                except OSError:
                    pass

    def _refuse(self, what: str) -> None:
        with self._lock:
            self.refusals += 1
            if len(self.refused) < REFUSALS_KEPT:
                self.refused.append(what)

    def _track(self, sock: socket.socket, keep: bool) -> None:
        with self._lock:
            (self._open.add if keep else self._open.discard)(sock)

    def _accept(self, listener: socket.socket, way: Way) -> None:
        while True:
            try:
                conn, _addr = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, way), daemon=True).start()

    def _serve(self, conn: socket.socket, way: Way) -> None:
        self._track(conn, True)
        upstream: socket.socket | None = None
        try:
            if way.kind == "tcp":
                upstream = self._connect(way.destinations[0])
                _splice(conn, upstream)
                return
            reader = _Reader(conn)
            head = reader.head()
            if head is None:
                return
            request = parse_head(head)
            if way.kind == "proxy" and request.method == "CONNECT":
                upstream = self._tunnel(way, request, reader, conn)
                return
            dest, target = self._http_destination(way, request)
            upstream = self._forward(dest, request, target, reader, conn)
        except Refused as refused:
            self._refuse(f"{way.kind}: {refused}")
            if way.kind != "tcp":  # a raw connection gets no HTTP reply: it is only closed
                try:
                    conn.sendall(refusal_bytes(refused))
                except OSError:
                    pass
        except OSError:
            pass
        finally:
            for sock in (conn, upstream):
                if sock is not None:
                    self._track(sock, False)
                    sock.close()

    def _connect(self, dest: Destination) -> socket.socket:
        try:
            upstream = connect_out(dest, self.upstream)
        except OSError as exc:
            raise Refused(502, f"{dest.route} destination {dest.address} did not answer: "
                               f"{exc.strerror or exc}") from None
        self._track(upstream, True)
        return upstream

    def _tunnel(self, way: Way, request: Request, reader: _Reader,
                conn: socket.socket) -> socket.socket:
        host, _sep, port_text = request.target.rpartition(":")
        host = host.strip("[]").lower()
        wanted = Destination("proxy", "tcp", host, int(port_text) if port_text.isdigit() else 0)
        dest = next((d for d in way.destinations if same_place(d, wanted)), None)
        if dest is None:
            raise Refused(403, f"the sandbox refuses CONNECT {request.target}: not a destination "
                               "of this run's allow-list")
        upstream = self._connect(dest)
        conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        _splice(conn, upstream, first=reader.buf)  # what the client sent early goes first
        return upstream

    def _http_destination(self, way: Way, request: Request) -> tuple[Destination, str]:
        """The plain-HTTP destination a request is for, and its origin-form target; refused
        when no destination of the way allows its method and path."""
        target = request.target
        candidates: tuple[Destination, ...] = way.destinations
        where = f"{way.listen[0][0]}:{way.listen[0][1]}"
        if way.kind == "proxy":
            parts = urlsplit(target)
            if parts.scheme != "http" or not parts.hostname:
                raise Refused(403, f"the sandbox's proxy refuses {request.method} {target[:200]}")
            try:
                port = parts.port or 80
            except ValueError:
                raise Refused(400, f"a bad port in {target[:200]}") from None
            wanted = Destination("proxy", "http", parts.hostname.lower(), port)
            candidates = tuple(d for d in way.destinations if d.read and same_place(d, wanted))
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            where = wanted.address
        elif not target.startswith("/"):
            raise Refused(400, f"a request target that is not a path: {target[:200]}")
        for dest in candidates:
            if dest.read and dest.allows(request.method, target):
                return dest, target
        allowed = "; ".join(f"{' '.join(d.methods)} {' '.join(d.paths)}" for d in candidates
                            if d.read) or "nothing"
        raise Refused(403, f"the sandbox refuses {request.method} {target[:200]} on {where}: "
                           f"this attempt may reach only {allowed} there")

    def _forward(self, dest: Destination, request: Request, target: str, reader: _Reader,
                 conn: socket.socket) -> socket.socket | None:
        if dest.tools is not None and request.method == "POST":
            body = b""
            for piece in _body(reader, request):
                body += piece
                if len(body) > MCP_BODY_LIMIT:
                    raise Refused(413, "an MCP request body larger than the gateway reads")
            if request.header("transfer-encoding"):
                body = _dechunk(body)
            if request.header("content-encoding"):
                raise Refused(415, "a compressed MCP request body cannot be checked")
            check_tools(body, dest)
            upstream = self._connect(dest)
            upstream.sendall(_forward_head(request, target, length=len(body)) + body)
        else:
            upstream = self._connect(dest)
            upstream.sendall(_forward_head(request, target, length=None))
            for piece in _body(reader, request):
                upstream.sendall(piece)
        # The reply, streamed back as it comes; its head (after any 1xx) gets `Connection: close`.
        back = _Reader(upstream)
        while True:
            try:
                head = back.head()
            except Refused:  # no head the gateway can read: the rest passes as it is
                break
            if head is None:
                break
            conn.sendall(_reply_head(head))
            if not head.startswith((b"HTTP/1.1 1", b"HTTP/1.0 1")):
                break
        if back.buf:
            conn.sendall(back.buf)
        pump(upstream, conn)
        return upstream


def _dechunk(body: bytes) -> bytes:
    """A chunked body (already read through `_body`, so well formed) as its plain bytes."""
    out = b""
    rest = body
    while True:
        line, _sep, rest = rest.partition(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            return out
        out, rest = out + rest[:size], rest[size + 2:]


def relay_config(listen: list[tuple[str, int, str]]) -> str:
    """The relay's configuration file (netrelay.read_config): `host<TAB>port<TAB>socket` lines."""
    return "".join(f"{host}\t{port}\t{path}\n" for host, port, path in listen)


def socket_folder(root: Path) -> Path:
    """The folder for one try's sockets: `net/` in its attempt folder, or a short one under
    /tmp when that path is too long for a Unix socket's name."""
    folder = root / "net"
    if len(str(folder / "00.sock")) > UNIX_PATH_MAX:
        return Path(tempfile.mkdtemp(prefix="malloy-evals-net-", dir="/tmp"))
    folder.mkdir(mode=0o755)
    return folder


@contextmanager
def open_gateway(allow_list: NetworkAllowList, root: Path,
                 env: Mapping[str, str] | None = None) -> Iterator[tuple[Gateway, Path]]:
    """One try's gateway, listening until the block ends; yields it and the relay's
    configuration file (in the socket folder, which the sandbox binds read-only). `env` is the
    harness's environment, read for its own proxy."""
    folder = socket_folder(root)
    gateway = Gateway(allow_list.ways(), folder,
                      upstream_proxy(os.environ if env is None else env))
    try:
        config = folder / "relay.conf"
        config.write_text(relay_config(gateway.start()), encoding="utf-8")
        yield gateway, config
    finally:
        gateway.close()
        if not folder.is_relative_to(root):
            for item in folder.iterdir():
                item.unlink()
            os.rmdir(folder)
