"""The Node Malloy runner, driven from Python over JSON lines (reference/endpoint.md).

`MalloyRuntime(package_dir, allow=[...])` owns a small pool of long-lived `node runner.mjs`
processes for one package (two by default, one per core of a small machine). The first starts
lazily on the first request; another starts only when every running one is busy. Each process
answers one request at a time; a request waits for a free one.

Budgets (reference/query-budgets.md): every query has a time budget (`query_timeout`). The runner
interrupts DuckDB at the budget and answers with an error; a runner stuck in the compiler past
the budget (plus a short grace) is killed and replaced, while the other runners keep answering.
Either way the caller gets `QueryBudgetError`, a `MalloyQueryError`: the query's failure, never
the environment's. Query text is capped in length, rows in count (a submitted query's own
`limit:` cannot raise the cap) and in bytes, and DuckDB in memory. A runner that dies is replaced
and the request tried once more; other requests (describe, search, ...) that time out raise
`RunnerError`.

Submitted queries compile in restricted mode (no raw SQL, no `table()`, no imports), as the
Publisher compiles them; `trusted=True` compiles unrestricted, for the kit's own canonical queries.

A package is compiled once (reference/endpoint.md, "Compiled once"): the first runner writes the
compiled models to the model cache folder (`model_cache`, by default `default_model_cache()`),
keyed by everything the compile read, and every later runner of the same package, in this pool or
another process, reads them from there; each runner also keeps the queries it compiled.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import json
import os
import queue
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from malloy_evals.core import paths
from malloy_evals.core.errors import KitError, UnmeasuredError

RUNNER_SCRIPT = paths.RUNTIME_DIR / "runner.mjs"
DEFAULT_TIMEOUT_S = 60.0       # a request that is not a query (describe, search, reload, ...)
# The first request compiles every model and opens DuckDB; give it more room than a query.
LOAD_TIMEOUT_S = 180.0
QUERY_TIMEOUT_S = 30.0         # one query's time budget, compile and run together
KILL_GRACE_S = 3.0             # past the budget, before a runner that did not answer is killed
QUERY_CHAR_CAP = 100_000       # query text plus its givens as JSON; real queries are a few KB
RESULT_BYTE_CAP = 16 * 1024 * 1024  # JSON characters of rows one query may materialise
MEMORY_LIMIT = "1GB"           # DuckDB's working memory in each runner
POOL_SIZE = 2                  # runners per package at most
_EOF = object()
_DEFAULT_CACHE = object()


def default_model_cache() -> Path:
    """Where compiled packages are kept for the next runner: the user's cache folder
    (`$XDG_CACHE_HOME`, else `~/.cache`), `malloy-evals/models`. The runner uses it only when it
    is the user's own and closed to others; it keeps the newest 32 packages."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "malloy-evals" / "models"


class RunnerError(UnmeasuredError):
    """The runner could not answer: it died, timed out, or could not load the package."""


class RunnerDied(RunnerError):
    """The runner process was gone when a request was sent or while it ran."""


class _TimedOut(RunnerError):
    """A request got no answer in time; the runner that held it was killed."""


class MalloyQueryError(KitError):
    """Malloy refused or failed a query; `problems` are the compiler's structured messages."""

    def __init__(self, message: str, problems: list[dict] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = list(problems or [])


class QueryBudgetError(MalloyQueryError):
    """A query over its time or size budget: the query's failure, reported as a query error."""

    def __init__(self, message: str, code: str):
        super().__init__(message, [{"message": message, "severity": "error", "code": code}])
        self.code = code


def timeout_message(seconds: float) -> str:
    """What a query over its time budget reads as, to the answerer and to the judge."""
    return f"the query did not finish within {seconds:g} s (the kit's time limit for one query)"


def server_query_timeout(client_timeout: float) -> float:
    """The per-query budget of a local endpoint whose client waits `client_timeout` per call:
    short enough that the endpoint's own "did not finish" answer reaches the client first, even
    for a query queued behind two hung ones (the pool holds two runners)."""
    return min(QUERY_TIMEOUT_S, max(client_timeout / 4, (client_timeout - 3 * KILL_GRACE_S) / 3))


@functools.lru_cache(maxsize=4)
def _node_major(node: str) -> int | None:
    """The major version of the node binary at `node`, or None when it cannot be read."""
    try:
        # A ceiling for a loaded machine; the answer comes as soon as node has started.
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=120,
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


class _Worker:
    """One Node runner process: started, asked one request at a time, killed."""

    def __init__(self, package_dir: Path, load: dict[str, Any]):
        self.package_dir = package_dir
        self._load = load
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._ids = itertools.count(1)
        self.generation = 0  # which reload of the runtime this process has compiled

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.alive and self._proc is not None else None

    def start(self) -> dict:
        """Start the process and load the package; returns the load summary."""
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
        return self.send(self._load, LOAD_TIMEOUT_S)

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

    def stop(self) -> None:
        """Close stdin and let the process exit; kill it if it does not."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                try:
                    # Started with stdin, stdout and stderr pipes: none of them is None.
                    proc.stdin.close()  # type: ignore[union-attr]
                    proc.wait(timeout=3)
                except (OSError, subprocess.TimeoutExpired):
                    proc.kill()
                    proc.wait(timeout=5)
        finally:
            for stream in (proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    stream.close()  # type: ignore[union-attr]  # a pipe, as above

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def _died_message(self, what: str) -> str:
        tail = " | ".join(list(self._stderr_tail)[-5:])
        return f"Malloy runner {what}" + (f": {tail}" if tail else "")

    def send(self, req: dict, timeout: float) -> Any:
        """Write one request and wait for the answer with the same id; never waits past timeout."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise RunnerDied("Malloy runner is not running")
        req = {**req, "id": next(self._ids)}
        try:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            self.kill()
            raise RunnerDied(self._died_message(f"was not accepting requests ({exc})")) from exc
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                # A hung runner is killed; the pool starts a fresh one for the next request.
                self.kill()
                raise _TimedOut(f"Malloy runner timed out after {timeout:g} s on op "
                                f"{req['op']!r}; it was stopped and restarts on the next "
                                "request") from None
            if line is _EOF:
                status = proc.poll()
                self.kill()
                raise RunnerDied(self._died_message(f"exited (code {status}) during op {req['op']!r}"))
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
                self.kill()
                raise RunnerError(f"{self.package_dir}: could not load package: {msg.get('error')}")
            problems = msg.get("problems") or []
            codes = [p.get("code") for p in problems if isinstance(p, dict)]
            message = str(msg.get("error") or "query failed")
            for code in ("query-timeout", "query-too-large"):
                if code in codes:
                    raise QueryBudgetError(message, code)
            raise MalloyQueryError(message, problems)


class MalloyRuntime:
    """One package, compiled and queried by a small pool of Node runner processes."""

    def __init__(self, package_dir: str | Path, allow: Sequence[str | Path] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, *, query_timeout: float = QUERY_TIMEOUT_S,
                 pool_size: int = POOL_SIZE, csv_types: bool = True,
                 model_cache: str | Path | None | object = _DEFAULT_CACHE):
        self.package_dir = Path(package_dir).resolve()
        self.allow = [Path(a).resolve() for a in (allow or [])]
        self.timeout = timeout              # requests that are not queries
        self.query_timeout = query_timeout  # one query's budget
        self.pool_size = max(1, pool_size)
        self.csv_types = csv_types          # False: DuckDB sniffs every CSV on every query
        # The compiled-model cache folder; None: every runner compiles the package itself.
        self.model_cache = (default_model_cache() if model_cache is _DEFAULT_CACHE
                            else Path(model_cache) if isinstance(model_cache, (str, Path)) else None)
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._slots = 0                     # workers running or starting
        self._generation = 0
        self.load_summary: dict | None = None  # {models, errors, entities} of the last load
        self.restarts = 0  # how many times a dead or hung runner was replaced

    # ---------- public operations ----------

    def execute(self, query: str | None = None, *, model_path: str | None = None,
                source_name: str | None = None, query_name: str | None = None,
                givens: dict | None = None, trusted: bool = False,
                row_limit: int | None = None) -> dict:
        """Run ad-hoc Malloy, a named view (source_name + query_name) or a named query.

        Returns the runner's result: rows, schema, _query_row_limit, _limit_source, _limit_hit,
        warning (only when the default cap was hit), sql and the result annotations. Raises
        MalloyQueryError when Malloy refuses or fails the query (QueryBudgetError when it is over
        its time or size budget), RunnerError when the runner could not answer at all.
        """
        size = len(query or "") + (len(json.dumps(givens, default=str)) if givens else 0)
        if size > QUERY_CHAR_CAP:
            raise QueryBudgetError(f"the query is {size} characters long; the kit's limit for one "
                                   f"query is {QUERY_CHAR_CAP}", "query-too-long")
        req: dict[str, Any] = {"op": "execute", "model_path": model_path, "trusted": bool(trusted),
                               "timeout_ms": int(self.query_timeout * 1000),
                               "byte_cap": RESULT_BYTE_CAP}
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
        try:
            return self._request(req, self.query_timeout + KILL_GRACE_S)
        except _TimedOut:
            raise QueryBudgetError(timeout_message(self.query_timeout), "query-timeout") from None

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

    def csv_tables(self) -> list[dict]:
        """Each CSV table of the package in one runner: {path, uses, declared} (declared null
        until a second query reads it; reference/query-budgets.md)."""
        return self._request({"op": "csv_tables"})

    def models(self) -> list[str]:
        """Package-relative paths of every .malloy file, compiled or not."""
        if self.load_summary is None:
            self._checkin(self._checkout())
        return list((self.load_summary or {}).get("models", []))

    def reload(self) -> dict:
        """Recompile every model in place; returns the load summary (models, errors). Runners
        idle now recompile before their next request."""
        with self._cond:
            self._generation += 1
        worker = self._checkout()  # a runner of an older generation reloads on checkout
        self._checkin(worker)
        return dict(self.load_summary or {})

    def warm(self) -> list[int]:
        """Start every runner of the pool now (before parallel queries arrive); their pids."""
        held: list[_Worker] = []
        try:
            while len(held) < self.pool_size:
                held.append(self._checkout())
        finally:
            for worker in held:
                self._checkin(worker)
        return self.pids

    @property
    def pid(self) -> int | None:
        """A running runner's process id (tests kill it to check recovery)."""
        with self._cond:
            pids = [w.pid for w in self._idle if w.pid] or [w.pid for w in self._all if w.pid]
        return pids[0] if pids else None

    @property
    def pids(self) -> list[int]:
        """Every running runner's process id."""
        with self._cond:
            return sorted(w.pid for w in self._all if w.pid)

    def close(self) -> None:
        """Stop every runner; a later request would start new ones."""
        with self._cond:
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._slots = 0
            self._cond.notify_all()
        for w in workers:
            w.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: never leave a node process behind
        with contextlib.suppress(OSError, subprocess.SubprocessError, AttributeError, ValueError):
            for w in list(self._all):
                w.stop()

    # ---------- the pool ----------

    def _start_worker(self) -> _Worker:
        reason = runtime_missing_reason()
        if reason:
            raise UnmeasuredError(reason)
        if not self.package_dir.is_dir():
            raise UnmeasuredError(f"{self.package_dir}: package folder not found")
        options = {"csv_types": self.csv_types, "memory_limit": MEMORY_LIMIT,
                   "model_cache": str(self.model_cache) if self.model_cache else None}
        worker = _Worker(self.package_dir, {"op": "load", "package_dir": str(self.package_dir),
                                            "allow": [str(a) for a in self.allow],
                                            "options": options})
        with self._cond:
            worker.generation = self._generation
            self._all.add(worker)
        try:
            self.load_summary = worker.start()
        except BaseException:
            self._forget(worker)
            raise
        return worker

    def _forget(self, worker: _Worker) -> None:
        worker.kill()
        with self._cond:
            self._all.discard(worker)

    def _checkout(self) -> _Worker:
        """A runner for one request: an idle one, a new one while the pool has room, else the
        first to come free."""
        with self._cond:
            while not self._idle and self._slots >= self.pool_size:
                self._cond.wait()
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self._slots += 1
        try:
            if worker is not None and not worker.alive:
                self.restarts += 1
                self._forget(worker)
                worker = None
            if worker is None:
                return self._start_worker()
            if worker.generation != self._generation:
                generation = self._generation
                self.load_summary = worker.send({"op": "reload"}, LOAD_TIMEOUT_S)
                worker.generation = generation
            return worker
        except BaseException:
            if worker is not None:
                self._forget(worker)
            self._release_slot()
            raise

    def _checkin(self, worker: _Worker) -> None:
        with self._cond:
            if worker.alive and worker in self._all:
                self._idle.append(worker)
                self._cond.notify()
                return
        self._forget(worker)
        self._release_slot()

    def _release_slot(self) -> None:
        with self._cond:
            self._slots = max(0, self._slots - 1)
            self._cond.notify()

    def _request(self, req: dict, timeout: float | None = None) -> Any:
        limit = self.timeout if timeout is None else timeout
        worker = self._checkout()
        try:
            try:
                return worker.send(req, limit)
            except RunnerDied:
                # The runner was found dead (killed between requests, or crashed on this one):
                # start a fresh one and try once more. A second death is reported, not retried.
                self.restarts += 1
                self._forget(worker)
                worker = self._start_worker()
                try:
                    return worker.send(req, limit)
                except RunnerDied as exc:
                    raise RunnerError(str(exc)) from exc
            except _TimedOut:
                self.restarts += 1
                raise
        finally:
            self._checkin(worker)


def default_allow(package_dir: str | Path) -> list[Path]:
    """Folders DuckDB may read besides the package: its sibling `data/` when present."""
    data = Path(package_dir).resolve().parent / "data"
    return [data] if data.is_dir() else []
