"""The Node Malloy runner, driven from Python over JSON lines (reference/endpoint.md).

`MalloyRuntime(package_dir, allow=[...])` owns a small pool of long-lived `node runner.mjs`
processes for one package (two by default, one per core of a small machine). The first starts
lazily on the first request; another starts only when every running one is busy. Each process
answers one request at a time; a request waits for a free one, and waiting requests are served
one client at a time in turn (round-robin over clients, first come first served within one).

Budgets (reference/query-budgets.md): every query has a time budget (`query_timeout`), counted
from the moment its request arrived, queue waiting included. A query that could not start within
it gets "the endpoint is busy"; one that started is interrupted inside DuckDB at the budget, and a
runner stuck in the compiler past the budget (plus a short grace) is killed and replaced, while
the other runners keep answering. A request whose client went away (`Call.cancel`) leaves the
queue at once, or has its running query interrupted the same way. Each of these reaches the
caller as `QueryBudgetError`, a `MalloyQueryError`: the query's failure, never the
environment's. Query text is capped in length, rows in count (a submitted query's own
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
import contextvars
import itertools
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

from malloy_evals.core import cli, paths
from malloy_evals.core.errors import KitError, UnmeasuredError
from malloy_evals.endpoint import runtime_install

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
BUSY = "endpoint-busy"         # the code of a query that could not start within its budget
INTERRUPTED = "query-interrupted"  # the code of a query whose client went away
_EOF = object()
_WITHDRAWN = object()          # put on a worker's lines when its request's client went away
_DEFAULT_CACHE = object()


def default_model_cache() -> Path | None:
    """Where compiled packages are kept for the next runner: MALLOY_EVALS_MODEL_CACHE when set
    (a folder, or `off` for none), else the user's cache folder (`$XDG_CACHE_HOME`, else
    `~/.cache`), `malloy-evals/models`. The runner uses it only when it is the user's own and
    closed to others; it keeps the newest 32 packages."""
    chosen = os.environ.get("MALLOY_EVALS_MODEL_CACHE", "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    return paths.user_cache_dir() / "models"


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


class QueryInterrupted(QueryBudgetError):
    """A query given up on because its client went away: interrupted inside DuckDB if it was
    running (`killed`: its runner was stuck in the compiler and was replaced instead)."""

    def __init__(self, message: str, *, running: bool, killed: bool = False):
        super().__init__(message, INTERRUPTED)
        self.running = running
        self.killed = killed


def timeout_message(seconds: float) -> str:
    """What a query over its time budget reads as, to the answerer and to the judge."""
    return f"the query did not finish within {seconds:g} s (the kit's time limit for one query)"


def busy_message(seconds: float) -> str:
    """What a query that could not start within its budget reads as (reference/query-budgets.md)."""
    return (f"the endpoint is busy: the query could not start within {seconds:g} s (the kit's "
            "time limit for one query, waiting included) because other queries held every "
            "runner; run it again")


class Call:
    """One request's claim on a package's runners: the client it comes from (waiting requests are
    served one client at a time, in turn), its time budget (None: the runtime's `query_timeout`)
    counted from when it arrived, and whether its client went away (`cancel`)."""

    def __init__(self, client: str = "", budget: float | None = None):
        self.client = client
        self.budget = budget
        self.arrived = time.monotonic()
        self.queued = threading.Event()   # waiting in its client's line (or served at once)
        self.running = threading.Event()  # its query was handed to a runner
        # Seconds spent starting or reloading the runner it was given: the endpoint's cost, not
        # the query's, so its deadline moves by as much.
        self.setup_s = 0.0
        self.turn: int | None = None  # its place in the order the runtime served its requests
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._hooks: list[Callable[[], None]] = []

    @property
    def withdrawn(self) -> str | None:
        """Why the call was given up on, or None while its client still waits for it."""
        return self._reason

    def cancel(self, reason: str = "its client disconnected") -> None:
        """Give the call up: it leaves the queue, or its running query is interrupted, at once."""
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            hooks = list(self._hooks)
        for hook in hooks:
            hook()

    @contextlib.contextmanager
    def on_cancel(self, hook: Callable[[], None]) -> Iterator[None]:
        """Run `hook` if the call is given up while this block runs (at once if it already was)."""
        with self._lock:
            given_up = self._reason is not None
            if not given_up:
                self._hooks.append(hook)
        if given_up:
            hook()
        try:
            yield
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._hooks.remove(hook)


_CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("malloy_evals_call", default=None)


def current_call() -> Call | None:
    """The call of the innermost `calling(...)` block, if any."""
    return _CALL.get()


@contextlib.contextmanager
def calling(call: Call) -> Iterator[Call]:
    """Every runtime request made in this block is made for `call` (its client, budget, cancel)."""
    token = _CALL.set(call)
    try:
        yield call
    finally:
        _CALL.reset(token)


# Where the kit's caches are (the Node runtime of an installed package, compiled packages): a
# child endpoint the kit starts is told the same, so it finds what this process installed.
CACHE_VARIABLES = ("XDG_CACHE_HOME", "MALLOY_EVALS_MODEL_CACHE")


def cache_environment() -> dict[str, str]:
    """The CACHE_VARIABLES set here, for a child whose environment is otherwise minimal (the MCP
    SDK gives a stdio server only HOME, PATH and a few others)."""
    return {name: os.environ[name] for name in CACHE_VARIABLES if name in os.environ}


def withdrawn_message(reason: str, *, running: bool) -> str:
    """What a query given up on reads as (its client is gone; the text goes to the logs)."""
    return (f"the query was interrupted while it ran: {reason}" if running
            else f"the query left the queue before it started: {reason}")


def server_query_timeout(client_timeout: float) -> float:
    """The per-query budget of a local endpoint whose client waits `client_timeout` per call:
    short enough that the endpoint's own "did not finish" or "busy" answer reaches the client
    first (a query's budget counts its wait, so the answer comes within the budget plus the kill
    grace of the request's arrival, however long the queue)."""
    return min(QUERY_TIMEOUT_S, max(client_timeout / 4, (client_timeout - 3 * KILL_GRACE_S) / 3))


def runtime_missing_reason() -> str | None:
    """Why the Node runtime cannot start on this machine, or None when it can. From an installed
    package, a runtime not yet in the user's cache is installed first (endpoint/runtime_install.py;
    a progress line on stderr says so)."""
    return runtime_install.missing_reason(cli.progress)


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

    def _write(self, proc: subprocess.Popen, req: dict) -> None:
        stdin = proc.stdin
        assert stdin is not None  # started with a stdin pipe
        try:
            stdin.write(json.dumps(req) + "\n")
            stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            self.kill()
            raise RunnerDied(self._died_message(f"was not accepting requests ({exc})")) from exc

    def send(self, req: dict, timeout: float, call: Call | None = None) -> Any:
        """Write one request and wait for the answer with the same id; never waits past timeout.
        When `call` is given up meanwhile, the runner is told to interrupt it (inside DuckDB) and
        answers at once; a runner that does not answer within KILL_GRACE_S is killed."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise RunnerDied("Malloy runner is not running")
        req = {**req, "id": next(self._ids)}
        self._write(proc, req)
        limit_at = time.monotonic() + timeout
        withdrawn = False
        hook = (lambda rid=req["id"]: self._lines.put((_WITHDRAWN, rid)))
        with call.on_cancel(hook) if call is not None else contextlib.nullcontext():
            while True:
                try:
                    line = self._lines.get(timeout=max(0.0, limit_at - time.monotonic()))
                except queue.Empty:
                    # A hung runner is killed; the pool starts a fresh one for the next request.
                    self.kill()
                    if withdrawn and call is not None:
                        raise QueryInterrupted(withdrawn_message(call.withdrawn or "", running=True),
                                               running=True, killed=True) from None
                    raise _TimedOut(f"Malloy runner timed out after {timeout:g} s on op "
                                    f"{req['op']!r}; it was stopped and restarts on the next "
                                    "request") from None
                if isinstance(line, tuple):
                    if line[1] == req["id"] and not withdrawn:
                        withdrawn = True  # the runner interrupts DuckDB on this line at once
                        self._write(proc, {"op": "interrupt", "target": req["id"]})
                        limit_at = min(limit_at, time.monotonic() + KILL_GRACE_S)
                    continue
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
                if INTERRUPTED in codes and call is not None:
                    raise QueryInterrupted(withdrawn_message(call.withdrawn or "", running=True),
                                           running=True)
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
        self._lines: dict[str, collections.deque[_Waiter]] = {}  # each client's waiting requests
        self._turns: collections.deque[str] = collections.deque()  # clients waiting, next first
        self._generation = 0
        self.load_summary: dict | None = None  # {models, errors, entities} of the last load
        self.restarts = 0  # how many times a dead or hung runner was replaced
        # What became of queries given up on (reference/query-budgets.md): interrupted while they
        # ran, withdrawn from the queue, refused as busy.
        self.outcomes: collections.Counter[str] = collections.Counter()
        self._served = itertools.count(1)

    # ---------- public operations ----------

    def execute(self, query: str | None = None, *, model_path: str | None = None,
                source_name: str | None = None, query_name: str | None = None,
                givens: dict | None = None, trusted: bool = False,
                row_limit: int | None = None, variant: str | None = None,
                vary: Sequence[str] = ()) -> dict:
        """Run ad-hoc Malloy, a named view (source_name + query_name) or a named query.

        Returns the runner's result: rows, schema, _query_row_limit, _limit_source, _limit_hit,
        warning (only when the default cap was hit), sql and the result annotations. With
        `variant` (shifted, subset, relabelled), the tables named in `vary` (SQL names from
        field_sites) are read as that variant of themselves (eval-improve's value check). Raises
        MalloyQueryError when Malloy refuses or fails the query (QueryBudgetError when it is over
        its time or size budget, could not start within it, or its client went away),
        RunnerError when the runner could not answer at all. The query is made for the call of
        `calling(...)` around it, else for an anonymous client arriving now.
        """
        size = len(query or "") + (len(json.dumps(givens, default=str)) if givens else 0)
        if size > QUERY_CHAR_CAP:
            raise QueryBudgetError(f"the query is {size} characters long; the kit's limit for one "
                                   f"query is {QUERY_CHAR_CAP}", "query-too-long")
        req: dict[str, Any] = {"op": "execute", "model_path": model_path, "trusted": bool(trusted),
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
        if variant is not None:
            req["variant"] = variant
            req["vary"] = list(vary)
        call = _CALL.get() or Call()
        budget = self.query_timeout if call.budget is None else call.budget
        deadline = call.arrived + budget
        try:
            return self._request(req, call=call, deadline=deadline)
        except _TimedOut:
            raise QueryBudgetError(timeout_message(budget), "query-timeout") from None
        except _Busy:
            self._count("busy")
            raise QueryBudgetError(busy_message(budget), BUSY) from None
        except QueryInterrupted as exc:
            self._count("interrupted" if exc.running else "withdrawn")
            raise
        except QueryBudgetError as exc:
            if exc.code != "query-timeout":
                raise
            # The runner was given what was left of the budget; the message names the budget.
            raise QueryBudgetError(timeout_message(budget), "query-timeout") from None

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

    def field_sites(self) -> dict:
        """Where each definition is written and what it computes, per model: `{models: [{path,
        sites: [{source, path, kind, type, column, url, line, end_line, code, digest}]}], errors,
        tables}` (lines 0-based; `tables` as the SQL names them, the names `vary` takes)."""
        return self._request({"op": "field_sites"})

    def csv_tables(self) -> list[dict]:
        """Each CSV table of the package in one runner: {path, uses, declared} (declared null
        until a second query reads it; reference/query-budgets.md)."""
        return self._request({"op": "csv_tables"})

    def models(self) -> list[str]:
        """Package-relative paths of every .malloy file, compiled or not."""
        if self.load_summary is None:
            self._checkin(self._checkout(_CALL.get() or Call()))
        return list((self.load_summary or {}).get("models", []))

    def reload(self) -> dict:
        """Recompile every model in place; returns the load summary (models, errors). Runners
        idle now recompile before their next request."""
        with self._cond:
            self._generation += 1
        worker = self._checkout(_CALL.get() or Call())  # an older generation reloads on checkout
        self._checkin(worker)
        return dict(self.load_summary or {})

    def warm(self) -> list[int]:
        """Start every runner of the pool now (before parallel queries arrive); their pids."""
        held: list[_Worker] = []
        try:
            while len(held) < self.pool_size:
                held.append(self._checkout(Call("warm")))
        finally:
            for worker in held:
                self._checkin(worker)
        return self.pids

    def _count(self, outcome: str) -> None:
        with self._cond:
            self.outcomes[outcome] += 1

    def queue_state(self) -> dict[str, int]:
        """Requests on a runner now and waiting now, and how many queries were interrupted while
        they ran, withdrawn from the queue, or refused as busy (reference/query-budgets.md)."""
        with self._cond:
            return {"running": self._slots - len(self._idle),
                    "waiting": sum(len(line) for line in self._lines.values()),
                    **{k: self.outcomes[k] for k in ("interrupted", "withdrawn", "busy")}}

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
            self._dispatch()  # requests still waiting get fresh runners
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

    def _checkout(self, call: Call, deadline: float | None = None, *,
                  cancellable: bool = False) -> _Worker:
        """A runner for one request, when its client's turn comes: an idle one, a new one while
        the pool has room. Raises _Busy past `deadline`, QueryInterrupted when a `cancellable`
        call is given up while it waits."""
        waiter = _Waiter(call)
        with self._cond:
            self._line_up(waiter)
            self._dispatch()
        call.queued.set()
        with call.on_cancel(waiter.ready.set) if cancellable else contextlib.nullcontext():
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                waiter.ready.wait(None if left is None else max(0.0, left))
                with self._cond:
                    if waiter.granted:
                        break
                    why = call.withdrawn if cancellable else None
                    if why is None and (deadline is None or time.monotonic() < deadline):
                        continue
                    self._step_out(waiter)
                if why is not None:
                    raise QueryInterrupted(withdrawn_message(why, running=False), running=False)
                raise _Busy()
        worker = waiter.worker
        granted_at = time.monotonic()
        if cancellable and call.withdrawn is not None:
            # Served at the moment its client went away: the turn goes to the next request.
            if worker is not None:
                self._checkin(worker)
            else:
                self._release_slot()
            raise QueryInterrupted(withdrawn_message(call.withdrawn, running=False), running=False)
        try:
            if worker is not None and not worker.alive:
                self.restarts += 1
                self._forget(worker)
                worker = None
            if worker is None:
                worker = self._start_worker()
            elif worker.generation != self._generation:
                generation = self._generation
                self.load_summary = worker.send({"op": "reload"}, LOAD_TIMEOUT_S)
                worker.generation = generation
            call.setup_s += time.monotonic() - granted_at
            return worker
        except BaseException:
            if worker is not None:
                self._forget(worker)
            self._release_slot()
            raise

    def _line_up(self, waiter: _Waiter) -> None:
        """Put a request at the end of its client's line; a client not waiting yet takes the
        last turn. (Under the lock.)"""
        line = self._lines.get(waiter.call.client)
        if line is None:
            line = self._lines[waiter.call.client] = collections.deque()
            self._turns.append(waiter.call.client)
        line.append(waiter)

    def _step_out(self, waiter: _Waiter) -> None:
        """Take a request that stops waiting out of its client's line. (Under the lock.)"""
        client = waiter.call.client
        line = self._lines.get(client)
        if line is None or waiter not in line:
            return
        line.remove(waiter)
        if not line:
            del self._lines[client]
            self._turns.remove(client)

    def _dispatch(self) -> None:
        """Hand free runners (or room to start one) to waiting requests, one client at a time in
        turn: the client served goes to the back of the turns. (Under the lock.)"""
        while self._turns and (self._idle or self._slots < self.pool_size):
            client = self._turns.popleft()
            line = self._lines[client]
            waiter = line.popleft()
            if line:
                self._turns.append(client)
            else:
                del self._lines[client]
            if self._idle:
                waiter.worker = self._idle.pop()
            else:
                self._slots += 1  # the request starts a new runner
            waiter.granted = True
            waiter.call.turn = next(self._served)
            waiter.ready.set()

    def _checkin(self, worker: _Worker) -> None:
        with self._cond:
            if worker.alive and worker in self._all:
                self._idle.append(worker)
                self._dispatch()
                return
        self._forget(worker)
        self._release_slot()

    def _release_slot(self) -> None:
        with self._cond:
            self._slots = max(0, self._slots - 1)
            self._dispatch()

    def _request(self, req: dict, timeout: float | None = None, *, call: Call | None = None,
                 deadline: float | None = None) -> Any:
        """One request on a runner. A query (`deadline` given) waits for its turn no later than
        the deadline, gets what is left of its budget, and is interrupted when `call` is given
        up; other requests wait their client's turn as long as it takes."""
        query = deadline is not None
        call = call or _CALL.get() or Call()
        worker = self._checkout(call, deadline, cancellable=query)
        call.running.set()

        def send(worker: _Worker) -> Any:
            limit = self.timeout if timeout is None else timeout
            sent = req
            if deadline is not None:  # what is left of the query's budget, after its wait
                left = max(0.001, deadline + call.setup_s - time.monotonic())
                sent = {**req, "timeout_ms": max(1, int(left * 1000))}
                limit = left + KILL_GRACE_S
            return worker.send(sent, limit, call if query else None)

        try:
            try:
                return send(worker)
            except RunnerDied:
                # The runner was found dead (killed between requests, or crashed on this one):
                # start a fresh one and try once more. A second death is reported, not retried.
                self.restarts += 1
                self._forget(worker)
                began = time.monotonic()
                worker = self._start_worker()
                call.setup_s += time.monotonic() - began
                try:
                    return send(worker)
                except RunnerDied as exc:
                    raise RunnerError(str(exc)) from exc
        except _TimedOut:
            self.restarts += 1
            raise
        except QueryInterrupted as exc:
            if exc.killed:
                self.restarts += 1
            raise
        finally:
            self._checkin(worker)


class _Waiter:
    """One request waiting for a runner: granted a worker (or room to start one) in turn."""

    __slots__ = ("call", "granted", "ready", "worker")

    def __init__(self, call: Call):
        self.call = call
        self.ready = threading.Event()
        self.granted = False
        self.worker: _Worker | None = None


class _Busy(Exception):
    """A query could not start within its budget."""


def default_allow(package_dir: str | Path) -> list[Path]:
    """Folders DuckDB may read besides the package: its sibling `data/` when present."""
    data = Path(package_dir).resolve().parent / "data"
    return [data] if data.is_dir() else []
