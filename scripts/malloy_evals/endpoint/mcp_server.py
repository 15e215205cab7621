"""The local MCP endpoint that speaks the Malloy Publisher's tool contract (reference/endpoint.md).

The Publisher itself cannot be installed here, so the kit serves its own packages through the
same four tools, argument names, required sets, envelopes and error shapes, backed by the Node
runner (`runtime.MalloyRuntime`). Pointing the kit at a real Publisher is then one flag
(`--mcp-url`). Over HTTP it also answers the three REST routes the kit reads for pins and for
the compiled surface of served packages.

Contract notes (from the Publisher's server at 0.0.209):
- success: `content[0]` is a resource block `{uri, mimeType: application/json, text: JSON}`;
- tool errors: `isError`, the same resource block holding `{error, suggestions, ...}`, then a
  text block with the message and the suggestions;
- `malloy_executeQuery` with both or neither of `query` / `queryName` is a JSON-RPC -32602;
- arguments that break a tool's input schema (a required one missing, `limit` above 50) are a
  tool error of the same shape, naming the arguments, never the SDK's bare text block.

The kit's own additions: a query over its time or size budget is an ordinary query error (the
query's failure; reference/query-budgets.md), and an error that is the endpoint's fault (the
package could not load, the runner could not answer) carries `environmentFault: true`, so
re-execution records it as an environment failure rather than as the answerer's.

Fair shares over HTTP (reference/query-budgets.md): every request is made for a client, named by
the URL path `/mcp/client/NAME` (run_answers gives each attempt its own) or the
`X-Malloy-Evals-Client` header, else told apart by its connection. Waiting queries are served one
client at a time in turn; a query's budget starts when its request arrives; a client that hangs
up has its query withdrawn from the queue, or interrupted inside DuckDB, at once.

An answerer's client (a name starting `attempt-`, as run_answers names each try's) may call the
answerer's tools only (`ANSWERER_TOOLS`): malloy_getStatus, malloy_reloadPackage and the REST
routes are refused to it with an error saying so. The endpoint's own status and reload are the
harness's and the scorer's, never an answerer's.
"""

from __future__ import annotations

import atexit
import functools
import json
import re
import threading
import typing
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote, urlsplit

from malloy_evals.core import cli
from malloy_evals.core.errors import UnmeasuredError, UsageError
from malloy_evals.endpoint.package import package_sha
from malloy_evals.endpoint.runner import (
    BUSY,
    INTERRUPTED,
    QUERY_TIMEOUT_S,
    Call,
    MalloyQueryError,
    MalloyRuntime,
    calling,
    current_call,
    default_allow,
)

if TYPE_CHECKING:
    # The MCP SDK (and pydantic under it) takes about 0.4 s to import: it is imported where it is
    # used, so `serve_local.py --help` and everything else that imports this module stay fast.
    import mcp_types
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.transport_security import TransportSecuritySettings
    from pydantic import ValidationError

SERVER_NAME = "malloy-publisher-mcp-server"  # the Publisher's server name, so hosts treat us alike
DEFAULT_RESULT_LIMIT = 10
PAYLOAD_CHAR_CAP = 90_000  # the Publisher drops rows past this many characters of JSON
INSTRUCTIONS = (
    "Malloy semantic-model server. Start with malloy_getContext: with no arguments it lists "
    "environments, with environmentName it lists packages, with packageName it lists sources, "
    "and with a query it ranks sources, views, dimensions, measures and named queries. Then run "
    "Malloy with malloy_executeQuery (query, or sourceName + queryName for a named view). After "
    "the model changes, call malloy_reloadPackage."
)
DOC_SUGGESTIONS = [
    "Check the Malloy query syntax: https://docs.malloydata.dev/documentation/language/query",
    "List the model's sources, views and fields with malloy_getContext",
    "Field and view names are case-sensitive; qualify joined fields as join_name.field",
    "See the Malloy language reference: https://docs.malloydata.dev/documentation/",
]
# The endpoint listens on 127.0.0.1 only. A page on another site can still reach it through DNS
# rebinding (its own name resolving to 127.0.0.1), so every route, /mcp and the REST routes alike,
# answers only requests addressed to a loopback name: a foreign Host is 421, a foreign Origin 403.
LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
MCP_PATH = "/mcp"
CLIENT_PATH = MCP_PATH + "/client/"       # /mcp/client/NAME: the MCP route, for client NAME
CLIENT_HEADER = "x-malloy-evals-client"   # or this header names the client
CLIENT_NAME = re.compile(r"[A-Za-z0-9._~-]{1,128}")
ANSWERER_CLIENT = "attempt-"              # a client named attempt-N is an answerer's
ANSWERER_TOOLS = ("malloy_getContext", "malloy_executeQuery")  # all an answerer's client may call
CALL_KEY = "malloy_evals.call"            # the request's Call, in its ASGI scope
THREADS = 256  # tool calls waiting at once (the SDK runs each in a thread; anyio's default is 40)


def loopback_security() -> TransportSecuritySettings:
    """The MCP SDK's DNS-rebinding settings allowing only the loopback names above."""
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=LOOPBACK_HOSTS, allowed_origins=LOOPBACK_ORIGINS)


@dataclass
class ServedPackage:
    """One package the endpoint serves, with its runner (started on first use)."""

    environment: str
    name: str
    directory: Path
    allow: list[Path]
    timeout: float = QUERY_TIMEOUT_S  # one query's budget
    _runtime: MalloyRuntime | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _warmed: bool = field(default=False, repr=False)

    @property
    def runtime(self) -> MalloyRuntime:
        with self._lock:
            if self._runtime is None:
                self._runtime = MalloyRuntime(self.directory, allow=self.allow,
                                              query_timeout=self.timeout)
            return self._runtime

    @property
    def started(self) -> bool:
        return self._runtime is not None and self._runtime.load_summary is not None

    def warm(self) -> None:
        """Start the package's whole runner pool now (once), so queries sent side by side never
        wait for a runner to start inside their own time limit: a package-level getContext is
        the client's readiness call (reexecute's QueryEndpoint.warm)."""
        with self._lock:
            warmed, self._warmed = self._warmed, True
        if not warmed:
            self.runtime.warm()

    @property
    def description(self) -> str:
        """The package's description from its publisher.json, when it has one."""
        manifest = self.directory / "publisher.json"
        try:
            return str(json.loads(manifest.read_text(encoding="utf-8")).get("description") or "")
        except (OSError, ValueError, AttributeError):
            return ""

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()


def parse_package_arg(value: str, extra_allow: list[Path] | None = None,
                      timeout: float = QUERY_TIMEOUT_S) -> ServedPackage:
    """`ENV/PKG=DIR` into a ServedPackage; DuckDB may read DIR, DIR/../data and `extra_allow`."""
    m = re.fullmatch(r"([^/=\s]+)/([^/=\s]+)=(.+)", value.strip())
    if not m:
        raise UsageError(f"--package {value!r}: expected ENV/PKG=DIR, e.g. samples/bookshop=evals/bookshop/model")
    directory = Path(m.group(3)).expanduser().resolve()
    if not directory.is_dir():
        raise UsageError(f"--package {value!r}: {directory} is not a folder")
    allow = default_allow(directory) + [Path(a).resolve() for a in (extra_allow or [])]
    return ServedPackage(m.group(1), m.group(2), directory, allow, timeout)


def check_unique_packages(packages: list[ServedPackage]) -> None:
    """Each ENV/PKG served once (a usage error otherwise)."""
    seen: set[tuple[str, str]] = set()
    for p in packages:
        if (p.environment, p.name) in seen:
            raise UsageError(f"--package {p.environment}/{p.name} given twice")
        seen.add((p.environment, p.name))


def _resource_block(uri: str, payload: Any) -> mcp_types.EmbeddedResource:
    import mcp_types

    return mcp_types.EmbeddedResource(
        type="resource",
        resource=mcp_types.TextResourceContents(uri=uri, mime_type="application/json",
                                                text=json.dumps(payload, indent=2, ensure_ascii=False)),
    )


def tool_success(uri: str, payload: Any, note: str | None = None) -> mcp_types.CallToolResult:
    """The Publisher's success shape: the JSON resource at content[0], an optional text block."""
    import mcp_types

    content: list[Any] = [_resource_block(uri, payload)]
    if note:
        content.append(mcp_types.TextContent(type="text", text=note))
    return mcp_types.CallToolResult(content=content, is_error=False)


def tool_error(uri: str, message: str, suggestions: list[str] | None = None,
               **extra: Any) -> mcp_types.CallToolResult:
    """The Publisher's `jsonToolError`: {error, suggestions, ...} as a resource, then as text."""
    import mcp_types

    suggestions = list(suggestions or [])
    text = message + ("\n\nSuggestions:\n" + "\n".join(f"- {s}" for s in suggestions) if suggestions else "")
    return mcp_types.CallToolResult(
        content=[_resource_block(uri, {"error": message, "suggestions": suggestions, **extra}),
                 mcp_types.TextContent(type="text", text=text)],
        is_error=True,
    )


def _uri(env: str | None, pkg: str | None = None, model: str | None = None, fragment: str = "result") -> str:
    base = f"malloy://environment/{quote(env or 'home', safe='')}"
    if pkg:
        base += f"/package/{quote(pkg, safe='')}"
    if model:
        base += f"/models/{quote(model, safe='')}"
    return f"{base}#{fragment}"


# What to do about a query over one of its budgets (endpoint/runner.py), by the budget's code.
BUDGET_SUGGESTIONS = {
    "query-timeout": "Make the query cheaper: aggregate instead of selecting rows, filter early, "
                     "and avoid joins that multiply rows",
    "query-too-large": "Return less: aggregate further, select fewer columns, or add a limit:",
    "query-too-long": "Write a shorter query: use the model's measures and views",
    BUSY: "Run the query again: other queries held every runner while it waited",
}


def query_error_suggestions(message: str, problems: list[dict]) -> list[str]:
    """Suggestions for a failed query, refined as the Publisher refines them."""
    codes = {str(p.get("code") or "") for p in problems}
    refined: list[str] = [text for code, text in BUDGET_SUGGESTIONS.items() if code in codes]
    if "restricted-construct-forbidden" in codes:
        refined.append("Submitted queries compile in restricted mode: use the model's sources, views "
                       "and fields; raw SQL, table(), sql_* functions and import are not allowed")
    if "is not defined" in message or "Reference to undefined object" in message:
        refined.append("Use malloy_getContext to find the right source, view or field name")
        refined.append("If the model changed since it was loaded, call malloy_reloadPackage")
    return refined + DOC_SUGGESTIONS


def build_envelope(result: dict) -> dict:
    """The Publisher's executeQuery payload from a runner result (rows first, then _meta)."""
    meta = {"schema": result.get("schema"), "annotations": result.get("annotations") or [],
            "connection_name": result.get("connection_name")}
    for key in ("model_annotations", "query_timezone", "source_annotations"):
        if result.get(key) is not None:
            meta[key] = result[key]
    envelope: dict[str, Any] = {
        "rows": result.get("rows", []),
        "_meta": meta,
        "_query_row_limit": result.get("_query_row_limit"),
        "_limit_source": result.get("_limit_source"),
        "_limit_hit": bool(result.get("_limit_hit")),
    }
    warning = result.get("warning")
    rows = envelope["rows"]
    if len(json.dumps(envelope)) > PAYLOAD_CHAR_CAP:
        # Keep the most rows that fit, found by bisection, as the Publisher does.
        lo, hi = 0, len(rows)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(json.dumps({**envelope, "rows": rows[:mid]})) <= PAYLOAD_CHAR_CAP:
                lo = mid
            else:
                hi = mid - 1
        envelope.update(rows=rows[:lo], _rows_truncated=True, _total_rows=len(rows), _returned_rows=lo)
        warning = ((warning + " ") if warning else "") + (
            f"Rows truncated to {lo} of {len(rows)} to fit the response size limit.")
    if warning:
        envelope["warning"] = warning
    return envelope


# ---------- the server ----------

class Endpoint:
    """The served packages and the tool logic; `server` is the MCPServer that exposes them."""

    def __init__(self, packages: list[ServedPackage]):
        check_unique_packages(packages)
        self.packages = {(p.environment, p.name): p for p in packages}
        self.server = self._build()

    # -- lookups --

    def environments(self) -> dict[str, list[str]]:
        envs: dict[str, list[str]] = {}
        for env, pkg in self.packages:
            envs.setdefault(env, []).append(pkg)
        return envs

    def package(self, env: str, pkg: str) -> ServedPackage | None:
        return self.packages.get((env, pkg))

    def close(self) -> None:
        for p in self.packages.values():
            p.close()

    # -- tools --

    def execute_query(self, environmentName: str, packageName: str, modelPath: str,
                      query: str | None = None, sourceName: str | None = None,
                      queryName: str | None = None, filterParams: dict[str, Any] | None = None,
                      givens: dict[str, Any] | None = None) -> mcp_types.CallToolResult:
        """malloy_executeQuery: ad-hoc Malloy or a named view / query, in restricted mode."""
        import mcp_types
        from mcp import MCPError

        if query and queryName:
            raise MCPError(mcp_types.INVALID_PARAMS, "Cannot provide both 'query' and 'queryName'")
        if not query and not queryName:
            raise MCPError(mcp_types.INVALID_PARAMS,
                           "Either 'query' or both 'sourceName' and 'queryName' must be provided")
        resource = f"{environmentName}/{packageName}/{modelPath}"
        served = self.package(environmentName, packageName)
        if served is None:
            return tool_error("error://executeQuery/modelAccess",
                              f"Package '{environmentName}/{packageName}' not found",
                              ["Call malloy_getContext with no arguments to list environments and packages"])
        model_path = modelPath.removeprefix("./")
        try:
            known = served.runtime.models()
        except UnmeasuredError as exc:
            return tool_error("error://executeQuery/modelAccess",
                              f"Error loading package '{environmentName}/{packageName}': {exc}",
                              ["Retry the call; the Malloy runner restarts on the next request"],
                              environmentFault=True)
        if model_path not in known:
            return tool_error("error://executeQuery/modelAccess",
                              f"Model '{modelPath}' not found in package '{environmentName}/{packageName}'",
                              [f"Models in this package: {', '.join(known) or '(none)'}",
                               "Call malloy_getContext with environmentName and packageName to see sources"])
        try:
            result = served.runtime.execute(query if query else None, model_path=model_path,
                                            source_name=None if query else sourceName,
                                            query_name=None if query else queryName,
                                            givens=givens or None)
        except MalloyQueryError as exc:
            if {p.get("code") for p in exc.problems} & {BUSY, INTERRUPTED}:
                call = current_call()
                cli.progress(f"endpoint: client {call.client if call else '(none)'!r}: {exc.message}")
            message = f"Error during query execution for resource '{resource}': {exc.message}"
            return tool_error("error://executeQuery/queryExecution", message,
                              query_error_suggestions(exc.message, exc.problems), problems=exc.problems)
        except UnmeasuredError as exc:
            return tool_error("error://executeQuery/queryExecution",
                              f"Internal error during query execution for resource '{resource}': {exc}",
                              ["Retry the call; the Malloy runner restarts on the next request"],
                              environmentFault=True)
        envelope = build_envelope(result)
        return tool_success(_uri(environmentName, packageName, model_path), envelope,
                            note=envelope.get("warning"))

    def get_context(self, environmentName: str | None = None, packageName: str | None = None,
                    query: str | None = None, sourceName: str | None = None,
                    limit: int | None = None, search_targets: list[dict[str, Any]] | None = None,
                    scopes: list[dict[str, Any]] | None = None) -> mcp_types.CallToolResult:
        """malloy_getContext: the four tiers, or the typed search_targets form."""
        if search_targets or scopes:
            return self._typed_context(environmentName, packageName, search_targets or [],
                                       scopes or [], limit)
        if not environmentName:
            results = [{"kind": "environment", "name": env, "packages": pkgs}
                       for env, pkgs in self.environments().items()]
            return tool_success(_uri(None, fragment="getContext"), {"results": results})
        envs = self.environments()
        if environmentName not in envs:
            return tool_error(_uri(environmentName, fragment="getContext"),
                              f"Environment '{environmentName}' not found",
                              [f"Known environments: {', '.join(envs) or '(none)'}"], results=[])
        if not packageName:
            results = []
            for pkg in envs[environmentName]:
                listed = self.packages[(environmentName, pkg)]
                entry: dict[str, Any] = {"kind": "package", "name": pkg,
                                         "description": listed.description,
                                         "environmentName": environmentName}
                errors = (listed.runtime.load_summary or {}).get("errors") if listed.started else None
                if errors:
                    entry["error"] = "; ".join(e["message"] for e in errors)
                results.append(entry)
            return tool_success(_uri(environmentName, fragment="getContext"), {"results": results})
        served = self.package(environmentName, packageName)
        uri = _uri(environmentName, packageName, fragment="getContext")
        if served is None:
            return tool_error(uri, f"Package '{environmentName}/{packageName}' not found",
                              [f"Packages in '{environmentName}': {', '.join(envs[environmentName])}"],
                              results=[])
        try:
            if query:
                hits = served.runtime.search(query, limit or DEFAULT_RESULT_LIMIT,
                                             sources=[sourceName] if sourceName else None)
            else:
                served.warm()
                hits = [e for e in served.runtime.entities() if e["kind"] == "source"
                        and (not sourceName or e["name"] == sourceName)]
                if limit:
                    hits = hits[:limit]
        except UnmeasuredError as exc:
            return tool_error(uri, f"Error loading package '{environmentName}/{packageName}': {exc}",
                              ["Retry the call; the Malloy runner restarts on the next request"], results=[])
        results = [{"kind": e["kind"], "name": e["name"], "source": e["source"],
                    "environmentName": environmentName, "packageName": packageName,
                    "modelPath": e["modelPath"], "doc": e["doc"]} for e in hits]
        payload: dict[str, Any] = {"results": results}
        if not query and not results:
            payload["note"] = "This package exposes no sources."
        return tool_success(uri, payload)

    def _typed_context(self, env: str | None, pkg: str | None, targets: list[dict[str, Any]],
                       scopes: list[dict[str, Any]], limit: int | None) -> mcp_types.CallToolResult:
        """The newer form: hits grouped per source, target_type a hard filter."""
        uri = _uri(env, pkg, fragment="getContext")
        # A client's scopes are read as sent (any JSON value); a scope naming no package fails below.
        scope_list: list[tuple[Any, Any, Any]] = []
        for s in scopes:
            s_env = s.get("environment") or s.get("environmentName") or env
            s_pkg = s.get("package") or s.get("packageName") or pkg
            if s_pkg and "@" in str(s_pkg):
                s_pkg = str(s_pkg).split("@", 1)[0]  # platform scopes may pin a version
            scope_list.append((s_env, s_pkg, s.get("source") or s.get("sourceName")))
        if not scope_list:
            if env and pkg:
                scope_list.append((env, pkg, None))
            elif len(self.packages) == 1:
                only = next(iter(self.packages))
                scope_list.append((only[0], only[1], None))
            else:
                return tool_error(uri, "scopes (or environmentName and packageName) are required",
                                  ["Pass scopes: [{environment, package, source?}]"], sources=[])
        per_target = limit or DEFAULT_RESULT_LIMIT
        groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        for s_env, s_pkg, s_source in scope_list:
            served = self.package(s_env, s_pkg) if s_env and s_pkg else None
            if served is None:
                return tool_error(uri, f"Package '{s_env}/{s_pkg}' not found",
                                  ["Call malloy_getContext with no arguments to list packages"], sources=[])
            try:
                entities = served.runtime.entities()
                source_docs = {e["name"]: e for e in entities if e["kind"] == "source"}
                for target in targets or [{"target_type": "source"}]:
                    ttype = str(target.get("target_type") or "").lower()
                    text = target.get("search_text", target.get("text"))
                    if text:
                        hits = served.runtime.search(str(text), per_target, kinds=[ttype],
                                                     sources=[s_source] if s_source else None)
                    else:
                        hits = [dict(e, score=0.0) for e in entities if e["kind"] == ttype
                                and (not s_source or e["source"] == s_source)][:per_target]
                    for e in hits:
                        key = (s_env, s_pkg, e["source"])
                        if key not in groups:
                            src = source_docs.get(e["source"], {})
                            groups[key] = {"source_info": {
                                "resource_id": {"environment": s_env, "package": s_pkg,
                                                "model_path": src.get("modelPath", e["modelPath"]),
                                                "source": e["source"]},
                                "name": e["source"], "doc": src.get("doc", "")}, "entities": {}}
                        eid = f"{e['kind']}:{e['source']}:{e['name']}"
                        relevance = round(float(e.get("score") or 0.0), 4)
                        ent = groups[key]["entities"].setdefault(eid, {
                            "entity_id": eid, "name": e["name"], "entity_type": e["kind"],
                            "doc": e["doc"], "relevance": relevance, "matched_targets": []})
                        ent["relevance"] = max(ent["relevance"], relevance)
                        if text:
                            ent["matched_targets"].append({"search_text": str(text), "relevance": relevance})
            except UnmeasuredError as exc:
                return tool_error(uri, f"Error loading package '{s_env}/{s_pkg}': {exc}",
                                  ["Retry the call; the Malloy runner restarts on the next request"],
                                  sources=[])
        sources = []
        for group in groups.values():
            ents = sorted(group["entities"].values(), key=lambda x: -x["relevance"])
            sources.append({"source_info": group["source_info"], "entities": ents})
        sources.sort(key=lambda g: -max((x["relevance"] for x in g["entities"]), default=0.0))
        return tool_success(uri, {"sources": sources, "retrieval": "lexical"})

    def get_status(self) -> mcp_types.CallToolResult:
        """malloy_getStatus: serving, the environments, and any package that failed to load."""
        load_errors = []
        for (env, pkg), served in self.packages.items():
            if served.started:
                for err in (served.runtime.load_summary or {}).get("errors", []):
                    load_errors.append({"environment": env, "package": pkg,
                                        "message": f"{err['path']}: {err['message']}"})
        payload: dict[str, Any] = {
            "operationalState": "serving", "initialized": True,
            "environments": [{"name": env, "packages": pkgs} for env, pkgs in self.environments().items()],
        }
        if load_errors:
            payload["loadErrors"] = load_errors
        # The kit's addition: each started package's queue (reference/query-budgets.md).
        queues = [{"environment": env, "package": pkg, **served.runtime.queue_state()}
                  for (env, pkg), served in self.packages.items() if served.started]
        if queues:
            payload["queries"] = queues
        return tool_success(_uri(None, fragment="getStatus"), payload)

    def reload_package(self, environmentName: str, packageName: str) -> mcp_types.CallToolResult:
        """malloy_reloadPackage: recompile in place; a failure keeps nothing stale hidden."""
        uri = _uri(environmentName, packageName, fragment="reloadPackage")
        served = self.package(environmentName, packageName)
        if served is None:
            return tool_error(uri, f"Package '{environmentName}/{packageName}' not found",
                              ["Call malloy_getContext with no arguments to list packages"])
        try:
            summary = served.runtime.reload()
        except UnmeasuredError as exc:
            return tool_error(uri, f"Reload of '{environmentName}/{packageName}' failed: {exc}",
                              ["Fix the model and call malloy_reloadPackage again"])
        payload: dict[str, Any] = {"status": "reloaded", "mode": "in-place", "name": packageName}
        if served.description:
            payload["description"] = served.description
        if summary.get("errors"):
            payload["warnings"] = [f"{e['path']}: {e['message']}" for e in summary["errors"]]
        return tool_success(uri, payload)

    # -- REST (the Publisher's /api/v0 routes the kit reads) --

    def rest_package(self, env: str, pkg: str) -> tuple[int, Any]:
        served = self.package(env, pkg)
        if served is None:
            return 404, {"error": f"Package '{env}/{pkg}' not found"}
        sha = package_sha(served.directory)
        return 200, {"name": pkg, "environmentName": env, "description": served.description,
                     "sourceContentSha": sha, "servedRevision": f"local-{sha[:12]}"}

    def rest_models(self, env: str, pkg: str) -> tuple[int, Any]:
        served = self.package(env, pkg)
        if served is None:
            return 404, {"error": f"Package '{env}/{pkg}' not found"}
        return 200, [{"path": p, "packageName": pkg, "environmentName": env}
                     for p in served.runtime.models()]

    def rest_model(self, env: str, pkg: str, model_path: str) -> tuple[int, Any]:
        served = self.package(env, pkg)
        if served is None:
            return 404, {"error": f"Package '{env}/{pkg}' not found"}
        if model_path not in served.runtime.models():
            return 404, {"error": f"Model '{model_path}' not found in '{env}/{pkg}'"}
        body: dict[str, Any] = {
            "path": model_path, "packageName": pkg, "environmentName": env,
            "sourceText": (served.directory / model_path).read_text(encoding="utf-8"),
        }
        try:
            info = served.runtime.model_info(model_path)
            body.update(sourceInfos=info["sourceInfos"], queries=info["queries"])
        except MalloyQueryError as exc:
            body.update(sourceInfos=[], queries=[], compilationError=exc.message)
        return 200, body

    # -- wiring --

    def _build(self) -> MCPServer:
        import mcp_types
        from pydantic import Field

        server = _server_class()(SERVER_NAME, version="0.0.1", instructions=INSTRUCTIONS,
                                 log_level="WARNING")
        ep = self
        # The tools' annotations name SDK types this module imports only here: resolved now, so
        # the SDK reads real types, not names it would look up in this module's globals.
        from mcp.server.mcpserver import Context

        tool = _typed_tool(server, {"mcp_types": mcp_types, "Field": Field, "Context": Context})

        @tool(name="malloy_executeQuery",
              description="Run a Malloy query against a model in a package: ad-hoc `query` "
                          "text, or `sourceName` + `queryName` for a named view, or "
                          "`queryName` alone for a named query. Returns rows as JSON.")
        def malloy_executeQuery(environmentName: str, packageName: str, modelPath: str,
                                query: str | None = None, sourceName: str | None = None,
                                queryName: str | None = None,
                                filterParams: dict[str, str | list[str]] | None = None,
                                givens: dict[str, Any] | None = None,
                                ctx: Context | None = None) -> mcp_types.CallToolResult:
            with calling(call_of(ctx)):
                return ep.execute_query(environmentName, packageName, modelPath, query,
                                        sourceName, queryName, filterParams, givens)

        @tool(name="malloy_getContext",
              description="Find what to query. No arguments: environments. environmentName: "
                          "its packages. packageName: its sources. query: ranked sources, "
                          "views, dimensions, measures and named queries (lexical).")
        def malloy_getContext(environmentName: str | None = None, packageName: str | None = None,
                              query: Annotated[str | None, Field(max_length=500)] = None,
                              sourceName: str | None = None,
                              limit: Annotated[int | None, Field(ge=1, le=50)] = None,
                              search_targets: list[dict[str, Any]] | None = None,
                              scopes: list[dict[str, Any]] | None = None,
                              ctx: Context | None = None) -> mcp_types.CallToolResult:
            with calling(call_of(ctx)):
                return ep.get_context(environmentName, packageName, query, sourceName, limit,
                                      search_targets, scopes)

        @tool(name="malloy_getStatus", description="Server state and the served packages.")
        def malloy_getStatus() -> mcp_types.CallToolResult:
            return ep.get_status()

        @tool(name="malloy_reloadPackage",
              description="Recompile a package's models after they changed on disk.")
        def malloy_reloadPackage(environmentName: str, packageName: str,
                                 ctx: Context | None = None) -> mcp_types.CallToolResult:
            with calling(call_of(ctx)):
                return ep.reload_package(environmentName, packageName)

        self._add_rest_routes(server)
        return server

    def _add_rest_routes(self, server: MCPServer) -> None:
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response

        base = "/api/v0/environments/{env}/packages/{pkg}"
        from mcp.server.transport_security import TransportSecurityMiddleware

        guard = TransportSecurityMiddleware(loopback_security())

        async def answer(request: Request, fn: Any, *args: str) -> Response:
            refused = await guard.validate_request(request)
            if refused is not None:
                return refused
            client = request.headers.get(CLIENT_HEADER, "").strip()
            if is_answerer_client(client):
                return JSONResponse({"error": f"the REST routes are refused to {client}: an "
                                              "answerer's client may use only the MCP route's "
                                              f"{' and '.join(ANSWERER_TOOLS)}"},
                                    status_code=403)
            try:
                status, body = await run_in_threadpool(fn, *args)
            except UnmeasuredError as exc:
                status, body = 503, {"error": str(exc)}
            return JSONResponse(body, status_code=status)

        @server.custom_route(base, methods=["GET"])
        async def package_route(request: Request) -> Response:
            p = request.path_params
            return await answer(request, self.rest_package, p["env"], p["pkg"])

        @server.custom_route(base + "/models", methods=["GET"])
        async def models_route(request: Request) -> Response:
            p = request.path_params
            return await answer(request, self.rest_models, p["env"], p["pkg"])

        @server.custom_route(base + "/models/{path:path}", methods=["GET"])
        async def model_route(request: Request) -> Response:
            p = request.path_params
            return await answer(request, self.rest_model, p["env"], p["pkg"], p["path"])


def call_of(ctx: Context | None) -> Call:
    """The Call a tool request is made for: the one `ClientTurns` put in its HTTP request's scope
    (its client, its arrival), else a new one (stdio: one client)."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:  # no request: the tool was called directly
        request = None
    scope = getattr(request, "scope", None)
    found = scope.get(CALL_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, Call) else Call("stdio" if request is None else "http")


def client_url(mcp_url: str, name: str) -> str:
    """The kit endpoint's MCP URL for one named client (run_answers: one per attempt)."""
    if not CLIENT_NAME.fullmatch(name):
        raise ValueError(f"a client name is 1 to 128 of A-Z a-z 0-9 . _ ~ -: {name!r}")
    return mcp_url.rstrip("/") + CLIENT_PATH.removeprefix(MCP_PATH) + name


def answerer_client_url(mcp_url: str, number: int) -> str:
    """The MCP URL of an answerer's client: `.../mcp/client/attempt-N`, refused everything but
    the answerer's tools."""
    return client_url(mcp_url, f"{ANSWERER_CLIENT}{number}")


def answerer_client_prefix(mcp_url: str) -> str:
    """The path every answerer's client URL of this endpoint starts with."""
    return urlsplit(client_url(mcp_url, ANSWERER_CLIENT)).path


def is_answerer_client(client: str) -> bool:
    """Whether a client name is an answerer's (`attempt-N`)."""
    return client.startswith(ANSWERER_CLIENT)


def refused_to_answerer(tool: str, client: str) -> mcp_types.CallToolResult:
    """The tool error an answerer's client gets for a tool that is not an answerer's."""
    return tool_error(_uri(None, fragment=tool),
                      f"{tool} is refused to {client}: an answerer's client may call only "
                      f"{' and '.join(ANSWERER_TOOLS)}",
                      [f"Use {' or '.join(ANSWERER_TOOLS)}"])


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class ClientTurns:
    """ASGI middleware before the MCP route: names each request's client (`/mcp/client/NAME`,
    the client header, else its connection), gives it a Call that arrives now, and gives the call
    up the moment its client hangs up before the answer is sent."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]):
        self.app = app
        self._threads_raised = False

    @staticmethod
    def client_of(scope: Scope) -> str | None:
        """The client a request to the MCP route comes from; None: not the MCP route."""
        path = str(scope.get("path") or "")
        if path.startswith(CLIENT_PATH):
            name = path[len(CLIENT_PATH):]
            return name if CLIENT_NAME.fullmatch(name) else None
        if path.rstrip("/") != MCP_PATH:
            return None
        for key, value in scope.get("headers") or []:
            if key.decode("latin-1").lower() == CLIENT_HEADER:
                named = value.decode("latin-1").strip()
                if CLIENT_NAME.fullmatch(named):
                    return named
        host, port = scope.get("client") or ("?", 0)
        return f"connection {host}:{port}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = self.client_of(scope) if scope.get("type") == "http" else None
        if client is None:
            await self.app(scope, receive, send)
            return
        import anyio
        import anyio.to_thread

        if not self._threads_raised:
            limiter = anyio.to_thread.current_default_thread_limiter()
            limiter.total_tokens = max(limiter.total_tokens, THREADS)
            self._threads_raised = True
        call = Call(client)
        scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode(), CALL_KEY: call}
        from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
        from starlette.responses import Response

        body: list[Message] = []
        size = 0
        while True:  # the whole body first: after it, only a hang-up can arrive
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.append(message)
            size += len(message.get("body", b""))
            if size > DEFAULT_MAX_REQUEST_BODY_SIZE:  # the SDK's own cap, checked as it arrives
                await Response("Request body too large", status_code=413)(scope, receive, send)
                return
            if not message.get("more_body"):
                break
        gone = anyio.Event()
        answered = False

        async def replay() -> Message:
            if body:
                return body.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async def answer(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered = True
            await send(message)

        async def watch() -> None:
            await receive()  # the server's next message: the client hung up, or the answer went
            if not answered:
                call.cancel("its client disconnected")
            gone.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch)
            try:
                await self.app(scope, replay, answer)
            finally:
                tasks.cancel_scope.cancel()


def argument_error(tool: str, arguments: dict[str, Any], exc: ValidationError) -> mcp_types.CallToolResult:
    """The tool error for arguments that break a tool's input schema: which argument, and why."""
    problems = []
    for err in exc.errors():
        name = ".".join(str(part) for part in err.get("loc", ())) or "arguments"
        problems.append(f"{name}: {err.get('msg', 'invalid')}")
    message = f"Invalid arguments for tool {tool}: " + "; ".join(problems)
    suggestions = ["environmentName, packageName and modelPath are required; give `query`, or "
                   "`sourceName` + `queryName`" if tool == "malloy_executeQuery" else
                   "Call malloy_getContext with no arguments to list environments and packages"]
    if tool == "malloy_getContext":
        suggestions.append("`limit` is between 1 and 50")
    env = got if isinstance(got := arguments.get("environmentName"), str) else None
    return tool_error(_uri(env, fragment=tool), message, suggestions)


def _typed_tool(server: MCPServer, names: dict[str, Any]
                ) -> Callable[..., Callable[[Callable[..., Any]], Any]]:
    """`server.tool(...)` for functions whose string annotations name `names`: each function's
    annotations are resolved first (this module postpones annotations)."""

    def tool(**options: Any) -> Callable[[Callable[..., Any]], Any]:
        def register(fn: Callable[..., Any]) -> Any:
            fn.__annotations__ = typing.get_type_hints(fn, localns=names, include_extras=True)
            return server.tool(**options)(fn)
        return register
    return tool


@functools.cache
def _server_class() -> type[MCPServer]:
    """MCPServer whose argument-validation failures keep the Publisher's error shape (every
    error is `isError` with `{error, suggestions}` at content[0] plus a text block); the SDK alone
    answers them with a bare text block a Publisher client cannot read. Made on first use, with
    the SDK."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    class PublisherShapedServer(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            client = call_of(context).client
            if is_answerer_client(client) and name not in ANSWERER_TOOLS:
                return refused_to_answerer(name, client)
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc.__cause__, ValidationError):
                    return argument_error(name, arguments, exc.__cause__)
                raise

    return PublisherShapedServer


def build_server(packages: list[ServedPackage]) -> Endpoint:
    """An Endpoint over the given packages; `.server` is the MCPServer (in-process or served)."""
    return Endpoint(packages)


def check_port_free(port: int) -> None:
    """Refuse a busy or impossible port before anything says "serving" (exit 3, one line)."""
    import socket

    if not 0 < port < 65536:
        raise UsageError(f"--http {port}: a port is 1 to 65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise UnmeasuredError(f"127.0.0.1:{port} cannot be served: {exc.strerror or exc} "
                                  "(another server holds it? pick a free port)") from None


def serve(packages: list[ServedPackage], http_port: int | None = None) -> None:
    """Serve until stopped: stdio by default, else stateless streamable HTTP at 127.0.0.1:PORT/mcp."""
    endpoint = build_server(packages)
    atexit.register(endpoint.close)
    try:
        if http_port is None:
            endpoint.server.run()
        else:
            import uvicorn

            app = endpoint.server.streamable_http_app(
                streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                transport_security=loopback_security(), host="127.0.0.1")
            uvicorn.run(ClientTurns(app), host="127.0.0.1", port=http_port, log_level="warning")
    finally:
        endpoint.close()
