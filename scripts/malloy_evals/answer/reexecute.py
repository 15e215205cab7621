"""Re-running an attempt's final query through `execute_query` (reference/scoring.md).

The kit never trusts the rows an answerer reports: it takes the attempt's final query from the
ledger, runs it itself against the served model (a real Publisher by `--mcp-url`, or the kit's
own endpoint over the set's `model/` package with `--local`, or over another package folder
with `--local --model DIR`), and writes what came back to the
attempt's artifacts: `prediction.csv` (the rows) and `envelope.json` (the raw payload). A query
the server refuses is a result, recorded as `reexecute_error.json`, never an exception; only an
unreachable server raises (could not measure).

`open_endpoint(eval_set, mcp_url=..., local=...)` gives one connection for many attempts, so
score_attempt and score_run reuse it. Within one scoring pass (`Reexecutions`), a final query
another attempt already re-ran, the same call with the same givens against the same model, is
not run again: its result is written as this attempt's own artifacts, the provenance saying it
was reused and from which attempt.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core import cli, paths
from malloy_evals.core.cli import to_jsonable
from malloy_evals.core.errors import (
    EXIT_OK,
    EXIT_UNMEASURED,
    InputError,
    KitError,
    UnmeasuredError,
    UsageError,
)
from malloy_evals.core.redact import redact_url
from malloy_evals.core.words import sample_words
from malloy_evals.endpoint.mcp_client import (
    McpClient,
    McpConnectionError,
    McpProtocolError,
    McpToolError,
    PublisherRest,
    connect,
    rest_base_for,
)
from malloy_evals.endpoint.package import package_sha
from malloy_evals.endpoint.runner import (
    BUSY,
    INTERRUPTED,
    LOAD_TIMEOUT_S,
    cache_environment,
    server_query_timeout,
)
from malloy_evals.ledger.artifacts import latest_artifact
from malloy_evals.ledger.events import check_qid
from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import EvalSet, load_set

PREDICTION_FILE = "prediction.csv"
ENVELOPE_FILE = "envelope.json"
ERROR_FILE = "reexecute_error.json"
# What one re-execution ran, where, against which model, and what it wrote: lets a later step
# (score_attempt after reexecute.py) reuse it instead of running the same query again.
PROVENANCE_STEM, PROVENANCE_SUFFIX = "reexecution", ".json"
# `run: source -> view` (names optionally backtick-quoted): how a named view is recorded
# (reference/ledger-schema.md).
_NAMED_VIEW = re.compile(r"^\s*run\s*:\s*`?([A-Za-z_][\w]*)`?\s*->\s*`?([A-Za-z_][\w]*)`?\s*;?\s*$")
_ISO_MIDNIGHT = re.compile(r"^(\d{4}-\d{2}-\d{2})T00:00:00(?:\.0+)?Z$")


@dataclass
class QueryEndpoint:
    """Where re-execution sends queries: a connected client plus the set's coordinates."""

    client: McpClient
    environment: str
    package: str
    model_path: str
    label: str  # the MCP URL, or "local" for the kit's own endpoint
    model_sha: str | None = None        # sha256 over the served model files, when known
    served_revision: str | None = None  # the server's servedRevision, when known

    def execute(self, *, query: str | None = None, source_name: str | None = None,
                query_name: str | None = None, givens: dict | None = None,
                model_path: str | None = None) -> dict:
        """One execute_query call with this endpoint's environment and package."""
        return self.client.execute_query(environment=self.environment, package=self.package,
                                         model_path=model_path or self.model_path, query=query,
                                         source_name=source_name, query_name=query_name,
                                         givens=givens)

    def warm(self) -> None:
        """Have the kit's own endpoint load its package now (a runner started, the model
        compiled) rather than on the first query; a remote endpoint is left alone. Its answer is
        the readiness signal, waited for up to the runner's own load ceiling (a loaded machine
        starts Node slowly; a query's wait must not pay for that). A failure here is not
        reported: the first query meets it again and says what it is."""
        if self.label == "local":
            with contextlib.suppress(KitError):
                self.client.call("get_context", {"environmentName": self.environment,
                                                 "packageName": self.package},
                                 timeout=LOAD_TIMEOUT_S)


@contextmanager
def open_endpoint(eval_set: EvalSet | str | Path, mcp_url: str | None = None, local: bool = False,
                  timeout: float = 120.0) -> Iterator[QueryEndpoint]:
    """Connect to `mcp_url`, or start the kit's endpoint over the set's model/ package (stdio)
    and stop it on exit. Environment, package and model path come from set.json."""

    es = eval_set if isinstance(eval_set, EvalSet) else load_set(Path(eval_set))
    cli.require_one_endpoint(mcp_url, local)
    if mcp_url and es.served_model is not None:
        raise UsageError(cli.MODEL_WITH_MCP_URL)
    env, pkg, model = es.environment, es.target_package, es.target_model_path
    model_sha = revision = None
    if mcp_url:
        client = connect(url=mcp_url, timeout=timeout)
        label = redact_url(mcp_url)  # printed and recorded: never its credentials
        model_sha, revision = _served_identity(mcp_url, env, pkg)
    else:
        if not es.model_dir.is_dir():
            raise InputError(es.model_dir, None, "the set has no model/ package to serve locally")
        script = paths.skill_script("serve_local")
        assert script is not None, "skills/eval-answer/scripts/serve_local.py is part of the kit"
        # The endpoint's own limit per query is shorter than this client's wait, so a query
        # over budget comes back as the endpoint's query error (the answerer's failure), never
        # as this client giving up (an environment failure).
        command = [sys.executable, str(script), "--package", es.package_spec,
                   "--timeout", str(server_query_timeout(timeout))]
        client = connect(command=command, timeout=timeout, env=cache_environment())
        label = "local"
        model_sha = package_sha(es.model_dir)
        revision = f"local-{model_sha[:12]}"
    try:
        endpoint = QueryEndpoint(client, env, pkg, model, label, model_sha, revision)
        endpoint.warm()  # the kit's own endpoint is ready before its first query is timed
        yield endpoint
    finally:
        client.close()


def _served_identity(mcp_url: str, env: str, pkg: str) -> tuple[str | None, str | None]:
    """sourceContentSha and servedRevision from the REST route beside the MCP URL, when the
    server has one (the kit's endpoint does; a Publisher serves REST on another port)."""
    try:
        body = PublisherRest(rest_base_for(mcp_url), timeout=5).package(env, pkg)
    except McpConnectionError:
        return None, None
    if not isinstance(body, dict):
        return None, None
    sha, rev = body.get("sourceContentSha"), body.get("servedRevision")
    return (sha if isinstance(sha, str) else None), (str(rev) if rev is not None else None)


@dataclass(frozen=True)
class ReexecuteResult:
    """What re-running one attempt's final query produced (reference/scoring.md)."""

    qid: str
    sample: int | None
    status: str                       # "ok" | "query_error" | "no_query"
    call: dict[str, Any]              # the execute_query arguments sent (no rows, no secrets)
    row_count: int | None = None
    columns: list[str] = field(default_factory=list)
    prediction_path: str | None = None  # relative to the run folder
    envelope_path: str | None = None
    error_path: str | None = None
    error: str | None = None
    suggestions: list[str] = field(default_factory=list)
    limit_hit: bool = False
    endpoint: str = ""
    reused: bool = False              # an earlier re-execution of the same call, model and endpoint
    # The attempt whose re-execution this one reused in the same scoring pass: {qid, sample,
    # attempt_event_id}; None when the query was run for this attempt (or by reexecute.py).
    reused_from: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def exit_code(self) -> int:
        # A refused query is a recorded result; an attempt with no query gave nothing to measure.
        return EXIT_UNMEASURED if self.status == "no_query" else EXIT_OK


def final_call(attempt: dict[str, Any], model_path: str) -> dict[str, Any] | None:
    """The execute_query arguments that re-run an attempt's final query, or None without one.

    A named view (the attempt names `query_name`, or `final_query_source` is `named_view` and
    the text reads `run: <source> -> <view>`) is re-run by name, as the answerer ran it.
    """
    text = attempt.get("final_query")
    givens = attempt.get("givens") or attempt.get("final_givens") or None
    model = attempt.get("model_path") or model_path
    query_name = attempt.get("query_name")
    source_name = attempt.get("source_name")
    if query_name:
        return {"source_name": source_name or None, "query_name": query_name, "query": None,
                "givens": givens, "model_path": model}
    if not isinstance(text, str) or not text.strip():
        return None
    m = _NAMED_VIEW.match(text)
    if m and attempt.get("final_query_source") == "named_view":
        return {"source_name": m.group(1), "query_name": m.group(2), "query": None,
                "givens": givens, "model_path": model}
    return {"source_name": None, "query_name": None, "query": text, "givens": givens,
            "model_path": model}


def result_columns(envelope: dict[str, Any]) -> list[str]:
    """Column order: the result schema's fields, else the rows' keys in first-seen order."""
    fields = ((envelope.get("_meta") or {}).get("schema") or {}).get("fields") or []
    names = [f["name"] for f in fields if isinstance(f, dict) and isinstance(f.get("name"), str)]
    if names:
        return names
    seen: dict[str, None] = {}
    for row in envelope.get("rows") or []:
        if isinstance(row, dict):
            for key in row:
                seen.setdefault(str(key), None)
    return list(seen)


def _date_columns(envelope: dict[str, Any]) -> set[str]:
    fields = ((envelope.get("_meta") or {}).get("schema") or {}).get("fields") or []
    return {f["name"] for f in fields if isinstance(f, dict)
            and ((f.get("type") or {}).get("kind") == "date_type")}


def csv_cell(value: Any, is_date: bool = False) -> str:
    """One CSV cell: numbers at full precision (shortest round-trip), nested values as JSON text,
    dates as ISO-8601 (a date column's midnight timestamp becomes the plain date)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = str(value)
    if is_date:
        m = _ISO_MIDNIGHT.match(text)
        if m:
            return m.group(1)
    return text


def prediction_csv(envelope: dict[str, Any]) -> str:
    """The rows of an execute_query envelope as CSV text with a header row."""
    columns = result_columns(envelope)
    dates = _date_columns(envelope)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in envelope.get("rows") or []:
        row = row if isinstance(row, dict) else {}
        writer.writerow([csv_cell(row.get(c), c in dates) for c in columns])
    return out.getvalue()


@dataclass(frozen=True)
class _Outcome:
    """What the endpoint gave for one call: the envelope (with its CSV), or the query error's
    detail (`reexecute_error.json`); `origin` is the attempt it was run for."""

    origin: dict[str, Any]
    envelope: dict[str, Any] | None = None
    csv: str = ""
    error: dict[str, Any] | None = None

    @property
    def shareable(self) -> bool:
        """False for an error about the endpoint's other clients, not the query (it was busy, or
        the call was interrupted): another attempt's asking again may well succeed."""
        if self.error is None:
            return True
        problems = (self.error.get("payload") or {}).get("problems") or []
        return not {p.get("code") for p in problems if isinstance(p, dict)} & {BUSY, INTERRUPTED}


class Reexecutions:
    """One scoring pass's re-executions: the first attempt to ask for a (model, call) runs it,
    every later attempt asking for the same (the same final query or named view, the same
    givens, the same model path, against an endpoint serving the same model digest) gets that
    result. Attempts asking at the same moment wait for the first instead of running it too.
    A call that raised (the endpoint could not run anything), or came back busy or interrupted,
    is not kept: the next attempt runs it. An endpoint that cannot say which model it serves shares nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[str, tuple[threading.Lock, list[_Outcome]]] = {}
        self.executed = 0  # calls sent to the endpoint through this pass
        self.reused = 0    # attempts that took another attempt's result

    @staticmethod
    def key(endpoint: QueryEndpoint, sent: dict[str, Any]) -> str | None:
        """The identity of one re-execution, or None when it must not be shared."""
        identity = _identity(endpoint)
        if (identity["model_sha"], identity["served_revision"]) == (None, None):
            return None
        return json.dumps([identity, sent], sort_keys=True, default=str)

    def once(self, key: str, run_it: Callable[[], _Outcome]) -> tuple[_Outcome, bool]:
        """(the outcome for `key`, whether it was reused): `run_it` runs only for the first."""
        with self._lock:
            gate, kept = self._slots.setdefault(key, (threading.Lock(), []))
        with gate:
            if kept:
                with self._lock:
                    self.reused += 1
                return kept[0], True
            outcome = run_it()
            if outcome.shareable:
                kept.append(outcome)
            with self._lock:
                self.executed += 1
            return outcome, False


def _run_call(endpoint: QueryEndpoint, call: dict[str, Any], sent: dict[str, Any],
              origin: dict[str, Any]) -> _Outcome:
    """Send one call: the envelope and its CSV, or a refused query's detail; an endpoint that
    could not run anything raises (could not measure)."""
    try:
        envelope = endpoint.execute(**call)
    except McpToolError as exc:
        if exc.payload.get("environmentFault") is True:
            # The endpoint could not run anything (package not loaded, runner gone): not the
            # answerer's failure, and not a result: scoring records an environment failure.
            raise UnmeasuredError(f"{endpoint.label}: {exc.message}") from None
        return _Outcome(origin, error=_error_detail(sent, exc))
    except McpProtocolError as exc:
        return _Outcome(origin, error=_error_detail(sent, exc))
    return _Outcome(origin, envelope=envelope, csv=prediction_csv(envelope))


def reexecute_attempt(run: Run, eval_set: EvalSet, qid: str, sample: int | None,
                      endpoint: QueryEndpoint, attempt: dict[str, Any] | None = None,
                      reexecutions: Reexecutions | None = None) -> ReexecuteResult:
    """Re-run the attempt's final query and write its artifacts (write-once: a second run of the
    same attempt writes prediction.2.csv). Query errors come back as data. `attempt` is its live
    attempt event when the caller holds it already (scoring reads the ledger once per pass).
    `reexecutions`: the scoring pass's record, so a call another attempt already ran is reused
    (the artifacts are this attempt's own, the same as a fresh run would write)."""
    attempt = attempt if attempt is not None else run.attempt(qid, sample)
    if attempt is None:
        raise InputError(run.events_path, None,
                         f"no live attempt for qid {qid!r}, {sample_words(sample)}, in phase {run.phase!r}")
    call = final_call(attempt, endpoint.model_path)
    if call is None:
        return ReexecuteResult(qid, sample, "no_query", {}, error="the attempt has no final query",
                               endpoint=endpoint.label)
    sent = {k: v for k, v in call.items() if v is not None}
    origin = {"qid": qid, "sample": sample, "attempt_event_id": attempt.get("event_id")}
    key = reexecutions.key(endpoint, sent) if reexecutions is not None else None
    if reexecutions is None or key is None:
        outcome, reused = _run_call(endpoint, call, sent, origin), False
    else:
        outcome, reused = reexecutions.once(key, lambda: _run_call(endpoint, call, sent, origin))
    note: dict[str, Any] = {"reused": True, "reused_from": outcome.origin} if reused else {}
    if outcome.envelope is None:
        detail = outcome.error or {}
        path = run.write_artifact(qid, sample, ERROR_FILE, detail)
        result = ReexecuteResult(qid, sample, "query_error", sent, error=detail.get("error"),
                                 suggestions=list(detail.get("suggestions") or []),
                                 error_path=run.relpath(path), endpoint=endpoint.label, **note)
    else:
        envelope = outcome.envelope
        env_path = run.write_artifact(qid, sample, ENVELOPE_FILE, envelope)
        pred_path = run.write_artifact(qid, sample, PREDICTION_FILE, outcome.csv)
        rows = envelope.get("rows") or []
        result = ReexecuteResult(qid, sample, "ok", sent, row_count=len(rows),
                                 columns=result_columns(envelope),
                                 prediction_path=run.relpath(pred_path),
                                 envelope_path=run.relpath(env_path),
                                 limit_hit=bool(envelope.get("_limit_hit")), endpoint=endpoint.label,
                                 **note)
    run.write_artifact(qid, sample, PROVENANCE_STEM + PROVENANCE_SUFFIX,
                       {"attempt_event_id": attempt.get("event_id"), **_identity(endpoint),
                        "result": to_jsonable(result)})
    return result


def _identity(endpoint: QueryEndpoint) -> dict[str, Any]:
    """Which endpoint answered and which model it served, as far as the endpoint can tell."""
    return {"endpoint": getattr(endpoint, "label", None),
            "model_sha": getattr(endpoint, "model_sha", None),
            "served_revision": getattr(endpoint, "served_revision", None)}


def fresh_reexecution(run: Run, qid: str, sample: int | None, endpoint: QueryEndpoint,
                      attempt: dict[str, Any] | None = None) -> ReexecuteResult | None:
    """The attempt's latest re-execution when it ran this attempt's final query through this
    endpoint serving this same model, so scoring need not run the query again; else None.

    An endpoint that cannot say which model it serves (no model sha, no served revision) never
    matches: the same URL may serve another model by now. `attempt` is its live attempt event when
    the caller holds it already (scoring reads the ledger once per pass)."""
    attempt = attempt if attempt is not None else run.attempt(qid, sample)
    path = latest_artifact(run.artifact_dir(qid, sample), PROVENANCE_STEM, PROVENANCE_SUFFIX)
    if attempt is None or path is None:
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    identity = _identity(endpoint)
    call = final_call(attempt, endpoint.model_path)
    sent = {k: v for k, v in (call or {}).items() if v is not None}
    stored = doc.get("result") if isinstance(doc, dict) else None
    if (not isinstance(stored, dict) or doc.get("attempt_event_id") != attempt.get("event_id")
            or (identity["model_sha"], identity["served_revision"]) == (None, None)
            or any(doc.get(k) != v for k, v in identity.items()) or stored.get("call") != sent):
        return None
    written = [stored.get(k) for k in ("prediction_path", "envelope_path", "error_path")]
    if not any(written) or any(p and not run.resolve(p).is_file() for p in written):
        return None
    fields = {f: stored[f] for f in ReexecuteResult.__dataclass_fields__ if f in stored}
    return ReexecuteResult(**{**fields, "reused": True})


def _error_detail(sent: dict[str, Any], exc: McpToolError | McpProtocolError) -> dict[str, Any]:
    """A query the server refused or failed (over its budget included), as `reexecute_error.json`
    records it."""
    suggestions = list(getattr(exc, "suggestions", []) or [])
    return {"error": exc.message, "suggestions": suggestions, "call": sent,
            "code": getattr(exc, "code", None), "payload": getattr(exc, "payload", None)}


def reexecute(run_dir: str | Path, set_dir: str | Path, qid: str, sample: int | None,
              mcp_url: str | None = None, local: bool = False,
              model_dir: str | Path | None = None) -> ReexecuteResult:
    """The script's whole job: open the run and set, connect, re-run one attempt, disconnect.
    `model_dir` (--model) serves that package folder instead of the set's model/."""

    run = Run.open(run_dir)
    es = load_set(set_dir, model_dir)
    check_qid(qid)
    attempt = run.attempt(qid, sample)
    if attempt is None:
        raise InputError(run.events_path, None,
                         f"no live attempt for qid {qid!r}, {sample_words(sample)}, in phase {run.phase!r}")
    with open_endpoint(es, mcp_url=mcp_url, local=local) as endpoint:
        return reexecute_attempt(run, es, qid, sample, endpoint, attempt=attempt)


def render_text(result: ReexecuteResult) -> str:
    """A short human summary of one re-execution."""
    head = f"{result.qid} sample {result.sample if result.sample is not None else '_'}: "
    if result.status == "ok":
        limit = " (row cap hit)" if result.limit_hit else ""
        return (head + f"{result.row_count} rows{limit} -> {result.prediction_path}, "
                f"{result.envelope_path}")
    if result.status == "query_error":
        return head + f"query error recorded in {result.error_path}: {result.error}"
    return head + (result.error or "nothing to re-run")
