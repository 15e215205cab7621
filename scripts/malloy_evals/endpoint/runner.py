"""The Node Malloy runner, driven from Python over JSON lines (SPEC 6).

`MalloyRuntime(package_dir, allow=[...])` owns one long-lived `node runtime/runner.mjs` process for
one package. It starts lazily on the first request, answers one request at a time (a lock), puts
a timeout on every request, and survives the runner dying: the request that was in flight raises
`RunnerError`, and the next request starts a fresh runner and reloads the package.

Submitted queries compile in restricted mode (no raw SQL, no `table()`, no imports), as the
Publisher compiles them; `trusted=True` compiles unrestricted, for the kit's own canonical queries.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import json
import queue
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Self

from malloy_evals.core import paths
from malloy_evals.core.errors import KitError, UnmeasuredError

RUNNER_SCRIPT = paths.RUNTIME_DIR / "runner.mjs"
DEFAULT_TIMEOUT_S = 60.0
# The first request compiles every model and opens DuckDB; give it more room than a query.
LOAD_TIMEOUT_S = 180.0
_EOF = object()


class RunnerError(UnmeasuredError):
    """The runner could not answer: it died, timed out, or could not load the package."""


class RunnerDied(RunnerError):
    """The runner process was gone when a request was sent or while it ran."""


class MalloyQueryError(KitError):
    """Malloy refused or failed a query; `problems` are the compiler's structured messages."""

    def __init__(self, message: str, problems: list[dict] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = list(problems or [])


@functools.lru_cache(maxsize=4)
def _node_major(node: str) -> int | None:
    """The major version of the node binary at `node`, or None when it cannot be read."""
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.", out.strip())
    return int(m.group(1)) if m else None


def runtime_missing_reason() -> str | None:
    """Why the Node runtime cannot start on this machine, or None when it can."""
    node = shutil.which("node")
    if node is None:
        return ("node is not on PATH; Malloy re-execution needs Node 20 or newer "
                "(install it, then run `make test` or `make demo`)")
    major = _node_major(node)
    if major is not None and major < 20:
        return f"node {major} is too old; Malloy re-execution needs Node 20 or newer"
    if not (paths.RUNTIME_DIR / "node_modules" / "@malloydata" / "malloy").is_dir():
        return (f"the Node Malloy runtime is not installed in {paths.RUNTIME_DIR}; "
                "run `make test` or `make demo` (they run npm install there)")
    return None


class MalloyRuntime:
    """One package, compiled and queried by one Node runner process."""

    def __init__(self, package_dir: str | Path, allow: list[str | Path] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S):
        self.package_dir = Path(package_dir).resolve()
        self.allow = [Path(a).resolve() for a in (allow or [])]
        self.timeout = timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._ids = itertools.count(1)
        self.load_summary: dict | None = None  # {models, errors, entities} of the last load
        self.restarts = 0  # how many times a dead runner was replaced

    # ---------- public operations ----------

    def execute(self, query: str | None = None, *, model_path: str | None = None,
                source_name: str | None = None, query_name: str | None = None,
                givens: dict | None = None, trusted: bool = False,
                row_limit: int | None = None) -> dict:
        """Run ad-hoc Malloy, a named view (source_name + query_name) or a named query.

        Returns the runner's result: rows, schema, _query_row_limit, _limit_source, _limit_hit,
        warning (only when the default cap was hit), sql and the result annotations. Raises
        MalloyQueryError when Malloy refuses or fails the query, RunnerError when the runner
        could not answer at all.
        """
        req: dict[str, Any] = {"op": "execute", "model_path": model_path, "trusted": bool(trusted)}
        if query is not None:
            req["query"] = query
        if source_name is not None:
            req["source_name"] = source_name
        if query_name is not None:
            req["query_name"] = query_name
        if givens:
            req["givens"] = givens
        if row_limit is not None:
            req["row_limit"] = int(row_limit)
        return self._request(req)

    def describe(self) -> dict:
        """The compiled surface (reference/library.md): per model, sources and named queries."""
        return self._request({"op": "describe"})

    def definitions(self) -> dict:
        """What each named field references, per model (reference/library.md): `{models: [{path,
        sources: {source: {field path: [field paths it uses]}}, queries: {name: {source,
        refs}}}], errors}`; under a source, '' holds its own filters and a join's path its
        `where:`."""
        return self._request({"op": "definitions"})

    def search(self, text: str, limit: int | None = 10, *, kinds: list[str] | None = None,
               sources: list[str] | None = None) -> list[dict]:
        """Entities ranked by lunr as the Publisher ranks them; `limit` 0 or None means all hits."""
        return self._request({"op": "search", "text": text, "limit": limit or 0,
                              "kinds": kinds or [], "sources": sources or []})

    def entities(self) -> list[dict]:
        """Every entity of the package: {id, kind, name, source, modelPath, doc}, joins included."""
        return self._request({"op": "entities"})

    def model_info(self, model_path: str | None = None) -> dict:
        """One model's compiled `sourceInfos` and named queries (the Publisher's model route)."""
        return self._request({"op": "model_info", "model_path": model_path})

    def models(self) -> list[str]:
        """Package-relative paths of every .malloy file, compiled or not."""
        self._ensure_started_with_lock()
        return list((self.load_summary or {}).get("models", []))

    def reload(self) -> dict:
        """Recompile every model in place; returns the load summary (models, errors)."""
        summary = self._request({"op": "reload"})
        self.load_summary = summary
        return summary

    @property
    def pid(self) -> int | None:
        """The runner's process id while it runs (tests kill it to check recovery)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def close(self) -> None:
        """Stop the runner; a later request would start a new one."""
        with self._lock:
            self._stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: never leave a node process behind
        with contextlib.suppress(OSError, subprocess.SubprocessError, AttributeError, ValueError):
            self._stop()

    # ---------- process management ----------

    def _ensure_started_with_lock(self) -> None:
        with self._lock:
            self._ensure_started()

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        if self._proc is not None:
            self.restarts += 1
            self._stop()
        reason = runtime_missing_reason()
        if reason:
            raise UnmeasuredError(reason)
        if not self.package_dir.is_dir():
            raise UnmeasuredError(f"{self.package_dir}: package folder not found")
        self._lines = queue.Queue()
        self._stderr_tail.clear()
        try:
            self._proc = subprocess.Popen(
                ["node", str(RUNNER_SCRIPT)], cwd=str(self.package_dir),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, encoding="utf-8", errors="replace", bufsize=1,
            )
        except OSError as exc:
            raise UnmeasuredError(f"could not start node: {exc}") from exc
        proc = self._proc
        threading.Thread(target=self._pump_stdout, args=(proc, self._lines), daemon=True).start()
        threading.Thread(target=self._pump_stderr, args=(proc,), daemon=True).start()
        summary = self._send({"op": "load", "package_dir": str(self.package_dir),
                              "allow": [str(a) for a in self.allow]}, LOAD_TIMEOUT_S)
        self.load_summary = summary

    @staticmethod
    def _pump_stdout(proc: subprocess.Popen, lines: queue.Queue) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(_EOF)

    def _pump_stderr(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self._stderr_tail.append(line.rstrip())

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                try:
                    proc.stdin.close()  # type: ignore[union-attr]
                    proc.wait(timeout=3)
                except (OSError, subprocess.TimeoutExpired):
                    proc.kill()
                    proc.wait(timeout=5)
        finally:
            for stream in (proc.stdout, proc.stderr):
                try:
                    stream.close()  # type: ignore[union-attr]
                except OSError:
                    pass

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def _died_message(self, what: str) -> str:
        tail = " | ".join(list(self._stderr_tail)[-5:])
        return f"Malloy runner {what}" + (f": {tail}" if tail else "")

    # ---------- requests ----------

    def _request(self, req: dict) -> Any:
        with self._lock:
            self._ensure_started()
            try:
                return self._send(req, self.timeout)
            except RunnerDied:
                # The runner was found dead (killed between requests, or crashed on this one):
                # start a fresh one and try once more. A second death is reported, not retried.
                self.restarts += 1
                self._ensure_started()
                try:
                    return self._send(req, self.timeout)
                except RunnerDied as exc:
                    raise RunnerError(str(exc)) from exc

    def _send(self, req: dict, timeout: float) -> Any:
        """Write one request and wait for the answer with the same id; never waits past timeout."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        req = {**req, "id": next(self._ids)}
        try:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            self._kill()
            raise RunnerDied(self._died_message(f"was not accepting requests ({exc})")) from exc
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                # A hung runner is killed so that the next request starts clean.
                self._kill()
                raise RunnerError(f"Malloy runner timed out after {timeout:g} s on op "
                                  f"{req['op']!r}; it was stopped and restarts on the next request")
            if line is _EOF:
                code = proc.poll()
                self._kill()
                raise RunnerDied(self._died_message(f"exited (code {code}) during op {req['op']!r}"))
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                self._stderr_tail.append(line.rstrip())
                continue
            if msg.get("id") != req["id"]:
                continue  # an answer to a request given up on earlier
            if msg.get("ok"):
                return msg.get("result")
            if req["op"] == "load":
                self._kill()
                raise RunnerError(f"{self.package_dir}: could not load package: {msg.get('error')}")
            raise MalloyQueryError(str(msg.get("error") or "query failed"), msg.get("problems"))


def default_allow(package_dir: str | Path) -> list[Path]:
    """Folders DuckDB may read besides the package: its sibling `data/` when present (SPEC 6)."""
    data = Path(package_dir).resolve().parent / "data"
    return [data] if data.is_dir() else []
