"""The kit's MCP client for Publisher-shaped servers, as plain blocking functions.

The contract it reads is in reference/endpoint.md.

`connect(url=...)` or `connect(command=[...])` returns an `McpClient` whose methods block: the
async `mcp.Client` lives on a private event-loop thread. Every call has a timeout. Tool names may
be bare (`execute_query`), the Publisher's (`malloy_executeQuery`) or host-prefixed
(`mcp__publisher__malloy_executeQuery`). Payloads are read from `content[0].resource.text`, else
from the first text block that holds JSON. Failures are typed: `McpToolError` (the tool said
isError; carries the server's message and suggestions), `McpProtocolError` (a JSON-RPC error,
with its code), `McpConnectionError` (unreachable, dropped, or timed out).

`ranked_entity_ids(payload)` turns either generation of get_context payload into ranked entity
ids (`kind:source:name`); `PublisherRest` reads the Publisher's REST routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Self

from malloy_evals.core.errors import KitError, UnmeasuredError
from malloy_evals.core.headers import headers_for
from malloy_evals.core.redact import redact, redact_url
from malloy_evals.endpoint.context_payload import parse_json_text, ranked_summary

DEFAULT_TIMEOUT_S = 60.0
# How long connecting may take: a stdio server is a Python process starting (slow on a loaded
# machine); the handshake's answer is its readiness signal, so this is a ceiling, not a guess.
CONNECT_TIMEOUT_S = 180.0


class McpConnectionError(UnmeasuredError):
    """The server could not be reached, dropped the connection, or did not answer in time.

    Its message names the server by its URL and quotes the transport's error, either of which may
    carry credentials (`user:password@`, `?api_key=`): it is redacted here, once."""

    def __init__(self, message: str):
        super().__init__(redact(message))


class McpProtocolError(KitError):
    """The server answered with a JSON-RPC error (e.g. -32602 for bad executeQuery arguments)."""

    def __init__(self, code: int, message: str):
        super().__init__(f"MCP error {code}: {message}")
        self.code = code
        self.message = message


class McpToolError(KitError):
    """The tool ran and reported failure (`isError`); message and suggestions are the server's."""

    def __init__(self, message: str, suggestions: list[str] | None = None,
                 payload: dict | None = None, tool: str | None = None):
        super().__init__(message)
        self.message = message
        self.suggestions = list(suggestions or [])
        self.payload = payload or {}
        self.tool = tool


# ---------- tool names ----------

def canonical_tool_name(name: str) -> str:
    """`mcp__x__malloy_executeQuery`, `malloy_executeQuery`, `executeQuery` -> `execute_query`."""
    bare = name.rsplit("__", 1)[-1] if name.startswith("mcp__") else name
    bare = bare.removeprefix("malloy_")
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", bare).lower()


def publisher_tool_name(name: str) -> str:
    """The Publisher's wire name for any spelling: `execute_query` -> `malloy_executeQuery`."""
    parts = canonical_tool_name(name).split("_")
    return "malloy_" + parts[0] + "".join(p.capitalize() for p in parts[1:])


# ---------- payloads ----------

@dataclass(frozen=True)
class ToolResult:
    """One tools/call answer: the JSON payload (None when no block held JSON) and the raw texts."""

    payload: Any
    texts: list[str]
    is_error: bool
    uri: str | None = None


def read_tool_result(result: Any) -> ToolResult:
    """Payload from `content[0].resource.text`, falling back to the first JSON text block."""
    content = list(getattr(result, "content", None) or [])
    texts: list[str] = []
    payload: Any = None
    uri = None
    for block in content:
        resource = getattr(block, "resource", None)
        text = getattr(resource, "text", None) if resource is not None else getattr(block, "text", None)
        if text is None:
            continue
        texts.append(text)
        if payload is None:
            payload = parse_json_text(text)
            if payload is not None and resource is not None:
                uri = str(getattr(resource, "uri", "") or "") or None
    if payload is None:
        structured = getattr(result, "structured_content", None)
        if isinstance(structured, dict):
            payload = structured
    return ToolResult(payload, texts, bool(getattr(result, "is_error", False)), uri)


def tool_error_from(result: ToolResult, tool: str | None = None) -> McpToolError:
    """The McpToolError a failed call stands for: the server's message and suggestions."""
    payload = result.payload if isinstance(result.payload, dict) else {}
    message = payload.get("error") or payload.get("message")
    if not message:
        message = next((t for t in result.texts if parse_json_text(t) is None), None) or (
            result.texts[0] if result.texts else "tool reported an error with no message")
    suggestions = payload.get("suggestions") or []
    return McpToolError(str(message), [str(s) for s in suggestions], payload, tool)


# ---------- get_context payloads (both generations) ----------

def ranked_entity_ids(payload: Any) -> list[str]:
    """The entity ids (`kind:source:name`) a get_context answer returned, in response order.

    Both payload generations are read by `context_payload.ranked_summary`, the one place ids
    are minted; this is the short form for callers that need only the ids.
    """
    return list(ranked_summary(payload)["entity_ids"])


# ---------- the client ----------

class McpClient:
    """A blocking MCP client; use `connect(...)` to make one, `close()` (or `with`) to end it."""

    def __init__(self, target: Any, timeout: float = DEFAULT_TIMEOUT_S, label: str = ""):
        self.timeout = timeout
        self.label = label
        self._target = target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="mcp-client-loop")
        self._thread.start()
        self._client: Any = None
        self._closing: asyncio.Event | None = None
        self._session_future: Any = None
        self._tool_names: list[str] | None = None
        self._open()

    def _open(self) -> None:
        from mcp import Client

        ready = threading.Event()
        failure: list[BaseException] = []

        async def session_main() -> None:
            self._closing = asyncio.Event()
            try:
                async with Client(self._target, read_timeout_seconds=self.timeout) as client:
                    self._client = client
                    ready.set()
                    await self._closing.wait()
            except BaseException as exc:  # noqa: BLE001 - reported to the caller below
                failure.append(exc)
                ready.set()

        self._session_future = asyncio.run_coroutine_threadsafe(session_main(), self._loop)
        if not ready.wait(CONNECT_TIMEOUT_S) or failure or self._client is None:
            self._stop_loop()
            why = _describe_exception(failure[0]) if failure else f"no answer in {CONNECT_TIMEOUT_S:g} s"
            raise McpConnectionError(f"could not connect to MCP server {self.label}: {why}")

    def _run(self, make: Any, timeout: float | None = None) -> Any:
        """Run `make(client)` (a coroutine) on the loop thread, waiting at most `timeout`."""
        client = self._client
        if client is None:
            raise McpConnectionError(f"MCP client {self.label} is closed")
        limit = timeout or self.timeout
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(make(client), limit), self._loop)
        try:
            return future.result(limit + 5)
        except (FutureTimeout, TimeoutError) as exc:
            future.cancel()
            raise McpConnectionError(f"MCP server {self.label} did not answer within {limit:g} s") from exc

    def server_version(self) -> str | None:
        """The version the server reported when the session opened (MCP `serverInfo.version`)."""
        client = self._client
        info = getattr(client, "server_info", None) if client is not None else None
        version = getattr(info, "version", None)
        return str(version) if version else None

    def list_tools(self) -> list[str]:
        """The tool names the server lists."""
        return [spec["name"] for spec in self.tool_specs()]

    def tool_specs(self) -> list[dict[str, Any]]:
        """Every tool the server lists as `{name, description, input_schema}`: what a model is
        handed as its tool list (the API answerer's loop)."""
        try:
            result = self._run(lambda c: c.list_tools())
        except KitError:
            raise
        except Exception as exc:
            raise _translate(exc, self.label) from exc
        self._tool_names = [t.name for t in result.tools]
        return [{"name": t.name, "description": t.description or "",
                 "input_schema": dict(t.input_schema)} for t in result.tools]

    def resolve_tool(self, name: str) -> str:
        """The server's own name for a tool given in any spelling (bare, Publisher, prefixed)."""
        if self._tool_names is None:
            try:
                self.list_tools()
            except McpConnectionError:
                raise
            except KitError:
                self._tool_names = []
        wanted = canonical_tool_name(name)
        for listed in self._tool_names or []:
            if listed == name or canonical_tool_name(listed) == wanted:
                return listed
        return publisher_tool_name(name)

    def call(self, name: str, arguments: dict[str, Any] | None = None,
             timeout: float | None = None) -> ToolResult:
        """Call a tool; returns the result even when the tool reported isError."""
        tool = self.resolve_tool(name)
        args = {k: v for k, v in (arguments or {}).items() if v is not None}
        try:
            # The session's own read limit is the client's default wait: a longer wait asked for
            # here (a start-up) is passed down, or the session would give up first.
            raw = self._run(lambda c: c.call_tool(tool, args, read_timeout_seconds=timeout),
                            timeout)
        except KitError:
            raise
        except Exception as exc:
            raise _translate(exc, self.label) from exc
        return read_tool_result(raw)

    def call_ok(self, name: str, arguments: dict[str, Any] | None = None,
                timeout: float | None = None) -> Any:
        """Call a tool and return its JSON payload; a tool error raises McpToolError."""
        result = self.call(name, arguments, timeout)
        if result.is_error:
            raise tool_error_from(result, canonical_tool_name(name))
        if result.payload is None:
            raise McpToolError("the tool answered without a JSON payload", [], {}, canonical_tool_name(name))
        return result.payload

    def execute_query(self, *, environment: str, package: str, model_path: str,
                      query: str | None = None, source_name: str | None = None,
                      query_name: str | None = None, givens: dict | None = None,
                      timeout: float | None = None) -> dict:
        """malloy_executeQuery; returns the envelope (`rows`, `_meta`, `_query_row_limit`, ...)."""
        return self.call_ok("execute_query", {
            "environmentName": environment, "packageName": package, "modelPath": model_path,
            "query": query, "sourceName": source_name, "queryName": query_name,
            "givens": givens or None}, timeout)

    def get_context(self, **arguments: Any) -> dict:
        """malloy_getContext with the Publisher's argument names (environmentName, query, ...)."""
        return self.call_ok("get_context", arguments)

    def get_status(self) -> dict:
        return self.call_ok("get_status", {})

    def reload_package(self, environment: str, package: str) -> dict:
        return self.call_ok("reload_package", {"environmentName": environment, "packageName": package})

    def close(self) -> None:
        """End the session and the loop thread."""
        if self._client is None and not self._thread.is_alive():
            return
        self._client = None
        if self._closing is not None:
            self._loop.call_soon_threadsafe(self._closing.set)
        if self._session_future is not None:
            try:
                self._session_future.result(10)
            except (FutureTimeout, asyncio.CancelledError, Exception):  # noqa: BLE001 - closing anyway
                self._session_future.cancel()
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe_exception(exc: BaseException) -> str:
    """One line for an exception, unwrapping exception groups from the transport."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _translate(exc: BaseException, label: str) -> KitError:
    from mcp import MCPError

    inner = exc
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    if isinstance(inner, MCPError):
        return McpProtocolError(inner.code, inner.message)
    return McpConnectionError(f"MCP server {label} failed: {_describe_exception(inner)}")


@contextlib.asynccontextmanager
async def _http_with_headers(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """Streamable HTTP to `url` with `headers` on every request (a hosted Publisher's token)."""
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    async with create_mcp_http_client(headers=headers) as http, \
            streamable_http_client(url, http_client=http) as streams:
        yield streams


def connect(url: str | None = None, command: str | Sequence[str] | None = None, *,
            timeout: float = DEFAULT_TIMEOUT_S, env: dict[str, str] | None = None,
            cwd: str | None = None, headers: dict[str, str] | None = None) -> McpClient:
    """A connected client: by streamable-HTTP `url` (sending `headers`, e.g. a bearer token, on
    every request), or by launching `command` over stdio."""
    if (url is None) == (command is None):
        raise ValueError("connect needs exactly one of url= or command=")
    if url is not None:
        headers = dict(headers) if headers is not None else headers_for(url)
        target: Any = _http_with_headers(url, headers) if headers else url
        return McpClient(target, timeout, label=redact_url(url))
    from mcp import StdioServerParameters

    argv = shlex.split(command) if isinstance(command, str) else list(command or [])
    if not argv:
        raise ValueError("connect(command=...) needs a command")
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)
    return McpClient(params, timeout, label=" ".join(argv[:3]))


# ---------- the Publisher's REST routes ----------

class PublisherRest:
    """Reads the three Publisher routes the kit uses: package identity, models, one model."""

    def __init__(self, base_url: str, timeout: float = 30.0):
        base = base_url.rstrip("/")
        base = base.removesuffix("/mcp")
        self.base = base if base.endswith("/api/v0") else base + "/api/v0"
        self.timeout = timeout

    def _get(self, path: str) -> Any:
        url = self.base + path
        request = urllib.request.Request(url, headers=headers_for(url))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise McpConnectionError(f"GET {url}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise McpConnectionError(f"GET {url}: {exc}") from exc

    def _pkg(self, env: str, pkg: str) -> str:
        q = urllib.parse.quote
        return f"/environments/{q(env, safe='')}/packages/{q(pkg, safe='')}"

    def package(self, env: str, pkg: str) -> dict:
        """{name, sourceContentSha, servedRevision, ...}."""
        return self._get(self._pkg(env, pkg))

    def models(self, env: str, pkg: str) -> list[dict]:
        """[{path}, ...]."""
        return self._get(self._pkg(env, pkg) + "/models")

    def model(self, env: str, pkg: str, model_path: str) -> dict:
        """{sourceText, sourceInfos, ...} of one model."""
        return self._get(self._pkg(env, pkg) + "/models/" + urllib.parse.quote(model_path))


def rest_base_for(mcp_url: str) -> str:
    """The REST base the kit's own endpoint serves next to `/mcp` (same host and port)."""
    return mcp_url.rstrip("/").removesuffix("/mcp")
