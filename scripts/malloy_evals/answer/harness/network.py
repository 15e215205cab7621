"""The sealed answerer's network: the destinations it may reach, and how each is reached.

Every sealed attempt runs in a network namespace of its own (`--unshare-net`): nothing listens
on its loopback and nothing routes out. Its only ways out are the destinations below, reached
through the relay inside (netrelay.py: a listener on the address the answerer was configured
with, relaying over a Unix socket) to the gateway outside (gateway.py), which alone connects
out and decides what passes:

- `mcp`: the endpoint the run uses, at its exact MCP path (with --local, the try's own client,
  `/mcp/client/attempt-N`), its tools/call requests naming only the answerer's tools;
- `model`: for claude-code (and a command given ANTHROPIC_BASE_URL or ANTHROPIC_API_KEY), the
  model API base URL, its Messages routes only;
- `allow-host`: each --allow-host HOST:PORT, as it is (bytes, unread).

A plain-HTTP destination on loopback is read request by request (method, path, tools). Any
other destination (HTTPS, or a host off this machine) is reached through a proxy inside the
sandbox (HTTPS_PROXY and HTTP_PROXY point at it) as a CONNECT to its host:port, the one thing
the gateway can see of it. The rules are in skills/eval-answer/reference/harness.md.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from malloy_evals.core.errors import UsageError

MODEL_API_DEFAULT = "https://api.anthropic.com"   # what Claude Code calls without a base URL
MODEL_ROUTES = ("/v1/messages", "/v1/messages/count_tokens")
MCP_METHODS = ("POST", "GET", "DELETE")        # streamable HTTP: calls, its stream, its end
MODEL_METHODS = ("POST",)
PROXY_PORT = 3128             # the proxy's port inside the sandbox (any free one there will do)
UNPRIVILEGED_PORT = 1024      # the relay, with no capability, listens at or above this only
# The environment a sealed answerer gets when a destination goes through the proxy: both
# spellings, since clients read one or the other; loopback destinations stay direct.
PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
NO_PROXY_ENV = ("NO_PROXY", "no_proxy")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?$")


def is_loopback(host: str) -> bool:
    """True for `localhost` and any loopback address (127.0.0.0/8, ::1)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen_addresses(host: str) -> list[str]:
    """Where the relay listens inside for a loopback host: `localhost` answers on both
    loopback addresses (a client may try either first)."""
    if host.lower().rstrip(".") == "localhost":
        return ["127.0.0.1", "::1"]
    return [host.strip("[]")]


@dataclass(frozen=True)
class Destination:
    """One place a sealed answerer may reach, and what of it."""

    route: str                         # "mcp" | "model" | "allow-host"
    scheme: str                        # "http" (read per request), "https" or "tcp" (unread)
    host: str                          # lowercase, as the answerer names it
    port: int
    paths: tuple[str, ...] = ()        # http: the request paths allowed, exactly (no query)
    methods: tuple[str, ...] = ()      # http: the methods allowed
    tools: tuple[str, ...] | None = None  # http mcp: the tools a tools/call may name
    per_try: bool = False              # mcp with --local: each try its own client path

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def read(self) -> bool:
        """The gateway reads its requests (plain HTTP); otherwise it passes bytes, unread."""
        return self.scheme == "http"

    @property
    def proxied(self) -> bool:
        """Reached through the proxy inside (CONNECT, or an absolute-form HTTP request)."""
        return not self.loopback

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def allows(self, method: str, path: str) -> bool:
        """Whether one plain-HTTP request (its method and path, query dropped) may pass."""
        return method in self.methods and path.split("?", 1)[0] in self.paths

    def describe(self) -> dict[str, Any]:
        """This destination as the allow-list records it (harness.jsonl, and the digest)."""
        doc: dict[str, Any] = {"route": self.route, "scheme": self.scheme,
                               "address": self.address,
                               "via": "proxy CONNECT" if self.proxied else "relay"}
        if self.read:
            doc["paths"] = [f"{p}<N> (each try its own client)" if self.per_try else p
                            for p in self.paths]
            doc["methods"] = list(self.methods)
        if self.tools is not None:
            doc["tools"] = list(self.tools)
        return doc


def _url_destination(route: str, url: str, *, paths: Sequence[str], methods: Sequence[str],
                     what: str) -> Destination:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{what} {url}: not an http or https URL; the sandbox cannot reach it")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UsageError(f"{what} {url}: its port is not a number from 1 to 65535") from None
    return Destination(route=route, scheme=parts.scheme, host=parts.hostname.lower(), port=port,
                       paths=tuple(paths) if parts.scheme == "http" else (),
                       methods=tuple(methods) if parts.scheme == "http" else ())


def mcp_destination(url: str, *, tools: Sequence[str], per_try_prefix: str | None = None
                    ) -> Destination:
    """The run's endpoint: `url`'s exact path, or with --local each try's own client path
    under `per_try_prefix` (`/mcp/client/attempt-`); tools/call may name only `tools`."""
    path = urlsplit(url).path or "/"
    dest = _url_destination("mcp", url, paths=[per_try_prefix or path], methods=MCP_METHODS,
                            what="the MCP endpoint")
    return replace(dest, tools=tuple(tools) if dest.read else None,
                   per_try=per_try_prefix is not None)


def model_destination(base_url: str | None) -> Destination:
    """The model API at ANTHROPIC_BASE_URL (Claude Code's default when unset): its Messages
    routes under the URL's own path."""
    url = base_url or MODEL_API_DEFAULT
    base = urlsplit(url).path.rstrip("/")
    return _url_destination("model", url, paths=[base + r for r in MODEL_ROUTES],
                            methods=MODEL_METHODS, what="ANTHROPIC_BASE_URL")


def parse_allow_host(value: str) -> Destination:
    """`--allow-host HOST:PORT` (`[::1]:PORT` for an IPv6 address) as a destination passed
    unread; anything else is a UsageError (exit 2)."""
    host, sep, port_text = value.strip().rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    bare = host[1:-1] if bracketed else host
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"--allow-host {value}: give HOST:PORT, the port a number from 1 to "
                         "65535")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        address = None
    if address is None and not _HOST.match(bare) or (":" in bare) != bracketed:
        raise UsageError(f"--allow-host {value}: {host!r} is not a host name or an address "
                         "(write an IPv6 address in brackets, [::1]:PORT)")
    return Destination(route="allow-host", scheme="tcp", host=bare.lower(), port=int(port_text))


def same_place(a: Destination, b: Destination) -> bool:
    """Whether two destinations are one listener: the same port on loopback (any loopback name
    reaches a server listening on all of them), else the same host and port."""
    if a.port != b.port:
        return False
    if a.loopback and b.loopback:
        return True
    return a.host.rstrip(".") == b.host.rstrip(".")


@dataclass(frozen=True)
class Way:
    """One listener the relay opens inside, and what the gateway does with what comes in."""

    kind: str                          # "http" (read per request), "tcp" (unread) or "proxy"
    listen: tuple[tuple[str, int], ...]  # the addresses inside the sandbox
    destinations: tuple[Destination, ...]


@dataclass(frozen=True)
class NetworkAllowList:
    """Every destination a run's sealed answerers may reach (the allow-list's `network`)."""

    destinations: tuple[Destination, ...] = field(default_factory=tuple)

    def describe(self) -> list[dict[str, Any]]:
        return [d.describe() for d in self.destinations]

    @property
    def proxied(self) -> bool:
        return any(d.proxied for d in self.destinations)

    def for_try(self, url: str) -> NetworkAllowList:
        """This run's allow-list for one try: its MCP destination's path is that try's own."""
        path = urlsplit(url).path
        out = []
        for d in self.destinations:
            if d.route == "mcp" and d.per_try:
                if not path.startswith(d.paths[0]):
                    raise ValueError(f"{url} is not one of this run's per-try client URLs")
                d = replace(d, paths=(path,), per_try=False)
            out.append(d)
        return NetworkAllowList(tuple(out))

    def ways(self) -> list[Way]:
        """The relay's listeners: one per loopback host:port (destinations on one port share
        it), and the proxy, when any destination is reached through it."""
        ways: list[Way] = []
        for d in self.destinations:
            if d.proxied:
                continue
            for i, way in enumerate(ways):
                if way.kind == ("http" if d.read else "tcp") and same_place(way.destinations[0], d):
                    ways[i] = replace(way, destinations=(*way.destinations, d))
                    break
            else:
                ways.append(Way("http" if d.read else "tcp",
                                tuple((a, d.port) for a in listen_addresses(d.host)), (d,)))
        proxied = tuple(d for d in self.destinations if d.proxied)
        if proxied:
            taken = {port for w in ways for _a, port in w.listen}
            port = next(p for p in range(PROXY_PORT, 65536) if p not in taken)
            ways.append(Way("proxy", (("127.0.0.1", port),), proxied))
        return ways

    def proxy_environment(self) -> dict[str, str]:
        """The variables that send the answerer's non-loopback traffic through the proxy inside
        (none when nothing goes through it)."""
        proxy = next((w for w in self.ways() if w.kind == "proxy"), None)
        if proxy is None:
            return {}
        host, port = proxy.listen[0]
        direct = ",".join(dict.fromkeys(["127.0.0.1", "localhost", "::1",
                                         *(d.host for d in self.destinations if d.loopback)]))
        return {**{n: f"http://{host}:{port}" for n in PROXY_ENV},
                **{n: direct for n in NO_PROXY_ENV}}


def check_destinations(kit: Sequence[Destination], allowed: Sequence[Destination]) -> None:
    """Refuse (UsageError, exit 2) an --allow-host that is one of the kit's own listeners (the
    endpoint, the model API: passed unread it would skip what the gateway checks on them), and
    a loopback port the relay cannot listen on."""
    for extra in allowed:
        for own in kit:
            if same_place(own, extra):
                raise UsageError(f"--allow-host {extra.address}: refused, it is the {own.route} "
                                 f"destination's port ({own.address}), which the sandbox "
                                 "already reaches with its requests checked; passed unread it "
                                 "would skip those checks")
    for d in [*kit, *allowed]:
        if d.loopback and d.port < UNPRIVILEGED_PORT:
            raise UsageError(f"{d.route} destination {d.address}: the sandbox's relay cannot "
                             f"listen on a port below {UNPRIVILEGED_PORT} (it runs with no "
                             "capability); serve it on a higher port, or run --no-sandbox")
