"""Claude Code transcripts and host tool-use logs, turned into one `attempt` and its `tool_call`s.

A transcript (stream-json, or a saved session `.jsonl`) carries everything: every host tool use
with its result, the final answer, and the closing `result` line with usage and cost. A host log
(`{"toolUses": [...], "reportedCalls": N, "cwd": DIR}`, read by `toollog`) carries tool uses only,
so its answer comes from a separate answer file and its calls have no results.

Decisions made here: which host tool uses are the Publisher's two tools (bare or prefixed names),
what each call asked and got back, and which query is the attempt's final one. The rules are in
skills/eval-answer/reference/transcript-format.md; the events' fields in reference/ledger-schema.md.
Secrets are blanked by `core.redact`: every secret seen anywhere in the transcript (or host log
and answer) is blanked in the copy and in every field of the events derived from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from malloy_evals.checks.contamination.rules import check_contamination
from malloy_evals.checks.toollog import ToolLog, read_tool_uses
from malloy_evals.checks.toollog import ToolUse as LoggedUse
from malloy_evals.core import commands
from malloy_evals.core.cli import to_jsonable
from malloy_evals.core.errors import EXIT_OK, InputError, UsageError
from malloy_evals.core.redact import Redactor
from malloy_evals.core.words import shown
from malloy_evals.endpoint import context_payload as cp
from malloy_evals.ledger.events import check_qid, check_sample
from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import EvalSet, load_set

Tool = Literal["get_context", "execute_query"]

# `result.subtype` values that mean the session was cut off before it finished: Claude Code's
# turn cap, and run_answers.py's per-attempt timeout (skills/eval-answer/reference/harness.md).
# Either makes the attempt truncated, so the run reads INCOMPLETE rather than scoring a half answer.
CUT_OFF_SUBTYPES = ("error_max_turns", "error_timeout")

# Publisher tool names as the wire and hosts spell them, compared without case or underscores
# after any `mcp__<server>__` prefix (reference/endpoint.md).
_GET_CONTEXT_NAMES = frozenset({"getcontext", "malloygetcontext"})
_EXECUTE_NAMES = frozenset({"executequery", "malloyexecutequery"})
_OTHER_PUBLISHER_NAMES = frozenset({"malloygetstatus", "malloyreloadpackage", "getstatus", "reloadpackage"})


def bare_tool_name(name: str) -> str:
    """`mcp__publisher__malloy_executeQuery` -> `malloy_executeQuery`; other names unchanged."""
    if name.startswith("mcp__"):
        return name.split("__", 2)[-1]
    return name


def publisher_tool(name: str) -> Tool | None:
    """Which of the two recorded Publisher tools a host tool name is, or None."""
    key = bare_tool_name(name).replace("_", "").replace("-", "").lower()
    if key in _GET_CONTEXT_NAMES:
        return "get_context"
    if key in _EXECUTE_NAMES:
        return "execute_query"
    return None


def is_mcp_tool(name: str) -> bool:
    """An MCP tool as hosts name them: any `mcp__<server>__<tool>`, or a bare Publisher tool name."""
    if name.startswith("mcp__"):
        return True
    key = name.replace("_", "").replace("-", "").lower()
    return key in _GET_CONTEXT_NAMES | _EXECUTE_NAMES | _OTHER_PUBLISHER_NAMES


# ---------------------------------------------------------------- what a transcript holds

@dataclass
class ToolUse:
    """One host tool use, with its paired result when the input carried one."""
    name: str
    input: dict[str, Any]
    id: str | None = None
    result: Any = None            # the tool_result content, as the host stored it
    is_error: bool | None = None  # None: no result seen (host logs, a cut-off transcript)

    @property
    def has_result(self) -> bool:
        return self.is_error is not None


@dataclass
class Transcript:
    """What the kit reads from one answerer session, whatever its format."""
    format: Literal["stream-json", "session", "host-log"]
    tool_uses: list[ToolUse] = field(default_factory=list)
    answer_text: str | None = None
    cwd: str | None = None
    reported_calls: int | None = None  # host logs only; a transcript never says it
    truncated: bool = False           # result.subtype in CUT_OFF_SUBTYPES, or stream-json with no result line
    run_error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None
    num_turns: int | None = None
    wall_seconds: float | None = None
    warnings: list[str] = field(default_factory=list)
    logged_uses: list[LoggedUse] = field(default_factory=list)  # as toollog read them, for contamination


# run_error of a stream-json session that has its init line but no closing result line.
CUT_OFF = "no result line: the session was cut off"


def parse_transcript(path: str | Path) -> Transcript:
    """Read a Claude Code transcript (stream-json, saved session, or `--output-format json
    --verbose` array); a host log given here is read as a host log, without an answer.

    The file is read once, by `toollog.read_tool_uses`, the reader contamination uses, so both
    always count the same uses from the same lines; this adds what only ingestion needs from the
    records it kept: results, answer, usage.
    """
    path = Path(path)
    log = read_tool_uses(path)
    if log.kind == "host_log":
        return _from_host_log(log)
    values = log.records  # the file is read once, by toollog, with its one torn-line rule
    out = Transcript(format="session", cwd=log.cwd, warnings=list(log.warnings),
                     logged_uses=list(log.tool_uses))
    out.tool_uses = [ToolUse(name=u.name, input=u.input if isinstance(u.input, dict) else {}, id=u.id)
                     for u in log.tool_uses]
    by_id = {u.id: u for u in out.tool_uses if u.id}
    texts: dict[str, list[str]] = {}   # main-chain assistant text blocks by message id, in order
    usage: dict[str, dict[str, Any]] = {}
    stamps: list[datetime] = []
    result: dict[str, Any] | None = None
    for number, line in enumerate(v for v in values if isinstance(v, dict)):
        kind = line.get("type")
        stamp = _timestamp(line.get("timestamp"))
        if stamp is not None:
            stamps.append(stamp)
        if kind == "system" and line.get("subtype") == "init":
            out.format = "stream-json"
        elif kind == "result":
            out.format = "stream-json"
            result = line
        elif kind in ("assistant", "user"):
            message = got if isinstance(got := line.get("message"), dict) else {}
            content = message.get("content")
            blocks = content if isinstance(content, list) else []
            # A subagent's messages (sidechain) hold the answerer's tool uses too, never its answer.
            sidechain = bool(line.get("isSidechain") or line.get("parent_tool_use_id"))
            if kind == "assistant":
                if sidechain:
                    continue
                # Hosts split one message over several lines, each repeating its usage: key by id.
                mid = str(message.get("id") or line.get("uuid") or f"line-{number}")
                if isinstance(message.get("usage"), dict):
                    usage[mid] = message["usage"]
                for block in blocks:
                    if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                        texts.setdefault(mid, []).append(block["text"])
                if isinstance(content, str) and content.strip():
                    texts.setdefault(mid, []).append(content)
            else:
                for block in blocks:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        use = by_id.get(str(block.get("tool_use_id")))
                        if use is not None:
                            use.result = block.get("content")
                            use.is_error = bool(block.get("is_error"))
    last_text = next((t for t in reversed(list(texts.values())) if "".join(t).strip()), None)
    out.answer_text = "\n".join(last_text).strip() if last_text else None
    if result is not None:
        _apply_result(out, result)
    else:
        if out.format == "stream-json":
            # stream-json always ends with a `result` line; without one the session was cut off
            # mid-way, and its last narration is not an answer.
            out.truncated = True
            out.run_error = CUT_OFF
        _apply_usage(out, list(usage.values()))
        if len(stamps) >= 2:
            out.wall_seconds = max(0.0, (max(stamps) - min(stamps)).total_seconds())
    return out


def _apply_result(out: Transcript, result: dict[str, Any]) -> None:
    """The closing `result` line: truncation, the answer, usage, cost, turns and wall time."""
    subtype = result.get("subtype")
    out.truncated = subtype in CUT_OFF_SUBTYPES
    if result.get("is_error") or (isinstance(subtype, str) and subtype != "success"):
        out.run_error = str(subtype or "error")
    if isinstance(result.get("result"), str) and result["result"].strip():
        out.answer_text = result["result"].strip()
    _apply_usage(out, [result["usage"]] if isinstance(result.get("usage"), dict) else [])
    out.cost_usd = _number(result.get("total_cost_usd", result.get("cost_usd")))
    out.num_turns = _count(result.get("num_turns"))
    duration = _number(result.get("duration_ms"))
    out.wall_seconds = duration / 1000.0 if duration is not None else None


def _apply_usage(out: Transcript, usages: list[dict[str, Any]]) -> None:
    if not usages:
        return
    def total(key: str) -> int | None:
        values = [_count(u.get(key)) for u in usages]
        known = [v for v in values if v is not None]
        return sum(known) if known else None
    out.input_tokens = total("input_tokens")
    out.output_tokens = total("output_tokens")
    out.cache_read_tokens = total("cache_read_input_tokens")
    out.cache_write_tokens = total("cache_creation_input_tokens")


def read_host_log(path: str | Path) -> Transcript:
    """A host tool-use log: tool uses without results, the reported call count and cwd."""
    log = read_tool_uses(Path(path))
    if log.kind != "host_log":
        # The wrong kind of file for the flag is a mistake on the command line (exit 2).
        raise UsageError(f"{path}: a Claude Code transcript, not a host tool-use log: pass it as "
                         "--transcript")
    return _from_host_log(log)


def _from_host_log(log: ToolLog) -> Transcript:
    uses = [ToolUse(name=u.name, input=u.input if isinstance(u.input, dict) else {}, id=u.id)
            for u in log.tool_uses]
    return Transcript(format="host-log", tool_uses=uses, reported_calls=log.reported_calls,
                      cwd=log.cwd, warnings=list(log.warnings), logged_uses=list(log.tool_uses))


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value >= 0 else None


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value >= 0 else None


# ---------------------------------------------------------------- calls and the final query

@dataclass(frozen=True)
class ExecuteCall:
    """One execute_query call as the answerer made it."""
    query: str | None
    source_name: str | None
    query_name: str | None
    model_path: str | None
    givens: dict[str, Any] | None
    error: str | None
    ok: bool | None  # None: no result seen

    @property
    def malloy(self) -> str | None:
        """The Malloy the call stands for; a named view is `run: <source> -> <view>`."""
        if self.query is not None:
            return self.query
        if self.query_name:
            return f"run: {self.source_name} -> {self.query_name}" if self.source_name else f"run: {self.query_name}"
        return None


@dataclass(frozen=True)
class FinalQuery:
    """The attempt's final query and how it was chosen."""
    final_query: str | None
    source: Literal["declared", "named_view", "last_ok", "last"] | None
    source_name: str | None = None
    query_name: str | None = None
    model_path: str | None = None
    givens: dict[str, Any] | None = None


_MALLOY_BLOCK = re.compile(r"```[ \t]*malloy[^\n]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def _squash(text: str) -> str:
    return " ".join(text.split())


def malloy_blocks(answer_text: str | None) -> list[str]:
    """The ```malloy fenced blocks of an answer, in order."""
    return [m.group(1) for m in _MALLOY_BLOCK.finditer(answer_text or "")]


def choose_final_query(calls: list[ExecuteCall], answer_text: str | None) -> FinalQuery:
    """The rule: the last ```malloy block of the answer that matches (whitespace-normalised)
    a query that was run is `declared`; otherwise the last call that succeeded, else the last call,
    labelled `named_view` when that call used `queryName`, else `last_ok` / `last`."""
    runnable = [c for c in calls if c.malloy is not None]
    for block in reversed(malloy_blocks(answer_text)):
        wanted = _squash(block)
        for call in reversed(runnable):
            if _squash(call.malloy or "") == wanted:
                return _final(call, "declared")
    ok = [c for c in runnable if c.ok]
    if ok:
        return _final(ok[-1], "named_view" if ok[-1].query is None else "last_ok")
    if runnable:
        return _final(runnable[-1], "named_view" if runnable[-1].query is None else "last")
    return FinalQuery(final_query=None, source=None)


def _final(call: ExecuteCall, source: Literal["declared", "named_view", "last_ok", "last"]) -> FinalQuery:
    named = call.query is None
    return FinalQuery(final_query=call.malloy, source=source,
                      source_name=call.source_name if named else None,
                      query_name=call.query_name if named else None,
                      model_path=call.model_path, givens=call.givens)


def _arg(arguments: dict[str, Any], *names: str) -> Any:
    for name in names:
        if arguments.get(name) is not None:
            return arguments[name]
    return None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def execute_call(use: ToolUse) -> ExecuteCall:
    """An execute_query tool use as a call: ad-hoc text, or a named view, plus its error."""
    args = use.input
    givens = _arg(args, "givens")
    error = call_error(use)
    return ExecuteCall(query=_str_or_none(_arg(args, "query")),
                       source_name=_str_or_none(_arg(args, "sourceName", "source_name")),
                       query_name=_str_or_none(_arg(args, "queryName", "query_name")),
                       model_path=_str_or_none(_arg(args, "modelPath", "model_path")),
                       givens=givens if isinstance(givens, dict) else None,
                       error=error, ok=None if not use.has_result else error is None)


def call_error(use: ToolUse) -> str | None:
    """The server's error for a call: `isError`, or a JSON block that is only an error."""
    if not use.has_result:
        return None
    if use.is_error:
        return cp.result_error(use.result)[:2000]
    payload = cp.result_payload(use.result)
    if isinstance(payload, dict) and payload.get("error") and not ({"rows", "results", "sources"} & payload.keys()):
        return cp.result_error(use.result)[:2000]
    return None


def tool_call_fields(use: ToolUse, tool: Tool, redactor: Redactor | None = None) -> dict[str, Any]:
    """The ledger fields of one tool_call (no key, index or id): never rows, never credentials
    (the free-text fields go through `redactor`, which has read the whole transcript)."""
    secrets = redactor or transcript_redactor([use])
    if tool == "get_context":
        targets, shapes = cp.search_targets(use.input)
        error = call_error(use)
        payload = cp.result_payload(use.result) if use.has_result and error is None else None
        return {"tool": tool,
                "targets": [secrets.text(t) for t in targets],
                "target_shapes": shapes,
                "scopes": cp.call_scopes(use.input),
                "ranked_summary": cp.ranked_summary(payload) if isinstance(payload, dict) else None,
                "retrieval_mode": cp.retrieval_mode(payload),
                "error": secrets.text(error) if error else None}
    call = execute_call(use)
    return {"tool": tool,
            "query": secrets.text(call.query) if call.query else None,
            "model_path": call.model_path, "source_name": call.source_name,
            "query_name": call.query_name,
            "givens": secrets.json(call.givens) if call.givens else call.givens,
            "error": secrets.text(call.error) if call.error else None}


def transcript_redactor(uses: list[ToolUse], texts: tuple[str | None, ...] = ()) -> Redactor:
    """A Redactor that has read every tool argument and result of `uses` and `texts` (the raw
    transcript, the answer): what it learns anywhere is blanked everywhere."""
    secrets = Redactor().learn_all(texts)
    for use in uses:
        secrets.learn_json(use.input)
        secrets.learn_json(use.result)
    return secrets


@dataclass(frozen=True)
class AttemptRecord:
    """Everything an attempt event and its tool_call events say, before key and ids are added."""
    attempt: dict[str, Any]
    tool_calls: list[dict[str, Any]]
    served_revision: str | None


def build_attempt(transcript: Transcript, *, reported_calls: int | None = None,
                  redactor: Redactor | None = None) -> AttemptRecord:
    """The attempt fields and tool_call fields one transcript implies, with every
    secret the transcript shows blanked in all of them."""
    secrets = redactor or transcript_redactor(transcript.tool_uses, (transcript.answer_text,))
    tool_calls: list[dict[str, Any]] = []
    executes: list[ExecuteCall] = []
    revision: str | None = None
    for use in transcript.tool_uses:
        tool = publisher_tool(use.name)
        if tool is None:
            continue
        fields = tool_call_fields(use, tool, secrets)
        fields["call_index"] = len(tool_calls)
        tool_calls.append(fields)
        if tool == "execute_query":
            executes.append(execute_call(use))
        elif revision is None and use.has_result:
            revision = cp.served_revision(cp.result_payload(use.result))
    # The final query is chosen on the raw texts, so redaction cannot break a declared match.
    final = choose_final_query(executes, transcript.answer_text)
    answer = secrets.text(transcript.answer_text) if transcript.answer_text else None
    reported = reported_calls if reported_calls is not None else transcript.reported_calls
    attempt = {
        "submitted": bool(final.final_query) or bool(answer and answer.strip()),
        "final_query": secrets.text(final.final_query) if final.final_query else None,
        "answer_text": answer,
        "final_query_source": final.source,
        "source_name": final.source_name,
        "query_name": final.query_name,
        "model_path": final.model_path,
        "givens": secrets.json(final.givens) if final.givens else final.givens,
        "host_tool_uses": len(transcript.tool_uses),
        "mcp_tool_uses": sum(1 for u in transcript.tool_uses if is_mcp_tool(u.name)),
        "reported_calls": reported,
        "n_get_context": sum(1 for c in tool_calls if c["tool"] == "get_context"),
        "n_execute": len(executes),
        "n_execute_errors": sum(1 for c in executes if c.error is not None),
        "truncated": transcript.truncated,
        "run_error": secrets.text(transcript.run_error) if transcript.run_error else None,
        "input_tokens": transcript.input_tokens,
        "output_tokens": transcript.output_tokens,
        "cache_read_tokens": transcript.cache_read_tokens,
        "cache_write_tokens": transcript.cache_write_tokens,
        "cost_usd": transcript.cost_usd,
        "num_turns": transcript.num_turns,
        "wall_seconds": transcript.wall_seconds,
    }
    return AttemptRecord(attempt=attempt, tool_calls=tool_calls, served_revision=revision)


# ---------------------------------------------------------------- record_attempt

@dataclass(frozen=True)
class RecordedAttempt:
    """What record_attempt appended: the attempt's key and id, its calls, and what it decided."""
    qid: str
    sample: int | None
    phase: str
    attempt_event_id: str
    tool_calls: int
    voided: int                      # earlier live events of this attempt key, retracted
    submitted: bool
    final_query: str | None
    final_query_source: str | None
    contaminated: bool | str | None
    transcript_path: str
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_OK


HOST_LOG_NEEDS_ANSWER = "pass it as --host-log with --answer-file (a host log carries no answer)"

# Case-scoped kinds that describe one recording of an attempt: a re-recording retracts them all,
# since a score of the old transcript says nothing about the new one.
_SUPERSEDED_KINDS = ("attempt", "tool_call", "score", "retrieval_score")


def record_attempt(run_dir: str | Path, set_dir: str | Path, qid: str, sample: int | None = None, *,
                   transcript: str | Path | None = None, host_log: str | Path | None = None,
                   answer_file: str | Path | None = None,
                   reported_calls: int | None = None) -> RecordedAttempt:
    """Append one `attempt` and one `tool_call` per get_context / execute_query call,
    copying the transcript (or host log and answer) into the artifacts with secrets redacted.

    A second recording of the same attempt key voids the first one's events in the same batch.
    """

    check_qid(qid)
    check_sample(sample)
    if (transcript is None) == (host_log is None):
        raise UsageError("give either --transcript, or --host-log with --answer-file")
    if host_log is not None and answer_file is None:
        raise UsageError(HOST_LOG_NEEDS_ANSWER)
    # Exactly one of the two is given (checked above).
    source = Path(transcript if transcript is not None else host_log)  # type: ignore[arg-type]
    parsed = parse_transcript(source) if transcript is not None else read_host_log(source)
    if parsed.format == "host-log" and answer_file is None:
        # One rule whichever flag names the file: a host log holds no answer text, and an
        # attempt recorded without one would be judged as if the answerer had said nothing.
        raise UsageError(f"{source}: a host tool-use log, not a transcript; {HOST_LOG_NEEDS_ANSWER}")
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").is_file():
        raise InputError(run_dir / "run.json", None, f"missing: not a run folder (create one with {commands.NEW_RUN})")
    run = Run.open(run_dir)
    eval_set = load_set(Path(set_dir))
    case = eval_set.case(qid)

    if answer_file is not None:
        parsed.answer_text = _read_answer(Path(answer_file))
    copies = [(("transcript.jsonl" if parsed.format != "host-log" else "host-log.json"), source)]
    if answer_file is not None:
        copies.append(("answer.md", Path(answer_file)))
    raw = {name: _read_text(path) for name, path in copies}
    # One reading of everything the answerer's session left: a secret seen anywhere in it is
    # blanked in the copies and in every event field derived from them.
    secrets = transcript_redactor(parsed.tool_uses, (*raw.values(), parsed.answer_text))
    record = build_attempt(parsed, reported_calls=reported_calls, redactor=secrets)
    written = [run.write_artifact(qid, sample, name, secrets.copy_text(text))
               for name, text in raw.items()]
    transcript_path = run.relpath(written[0])

    contamination = secrets.json(_contamination(parsed, eval_set, run_dir,
                                                record.attempt["reported_calls"]))
    earlier = run.view().of_key(run.key(qid, sample), _SUPERSEDED_KINDS)
    attempt = {"kind": "attempt", "qid": qid, "sample": sample, "phase": run.phase,
               **record.attempt,
               "question_sha": case.question_sha,
               "served_revision": record.served_revision or _str_or_none(run.info.get("servedRevision")),
               "transcript_path": transcript_path,
               **contamination}
    calls = [{"kind": "tool_call", "qid": qid, "sample": sample, "phase": run.phase, **c}
             for c in record.tool_calls]
    done = run.supersede(earlier, [attempt, *calls], f"attempt re-recorded from {source.name}")
    attempt_event = done.events[0]
    return RecordedAttempt(
        qid=qid, sample=sample, phase=run.phase, attempt_event_id=attempt_event["event_id"],
        tool_calls=len(calls), voided=len(done.voids), submitted=attempt["submitted"],
        final_query=attempt["final_query"], final_query_source=attempt["final_query_source"],
        contaminated=attempt.get("contaminated"), transcript_path=transcript_path,
        warnings=list(parsed.warnings))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None


def _read_answer(path: Path) -> str | None:
    text = _read_text(path).strip()
    return text or None


def _contamination(parsed: Transcript, eval_set: EvalSet, run_dir: Path, reported: int | None) -> dict[str, Any]:
    """`contaminated` and `contamination_reasons` for the attempt, from the contamination check
    (reference/contamination.md) over the very tool uses toollog read, so the attempt and
    check_contamination.py can never disagree."""

    result = check_contamination(parsed.logged_uses, set_dir=eval_set.dir, run_dir=run_dir,
                                 model_paths=[eval_set.model_file], truth_package=eval_set.truth_package,
                                 reported_calls=reported, cwd=parsed.cwd)
    return {"contaminated": result.contaminated,
            "contamination_reasons": to_jsonable(list(result.reasons))}


def render_text(result: RecordedAttempt) -> str:
    """The human rendering of one recorded attempt."""
    sample = "" if result.sample is None else f" sample {result.sample}"
    voided = f", voided {result.voided} earlier events" if result.voided else ""
    query = _squash(result.final_query) if result.final_query else "-"
    lines = [(f"recorded {result.qid}{sample} ({result.phase}): attempt {result.attempt_event_id}, "
             f"{result.tool_calls} tool calls{voided}"),
             f"  submitted {shown(result.submitted)}; final query ({result.final_query_source or 'none'}): {query}",
             f"  contaminated: {shown(result.contaminated)}",
             f"  transcript copy: {result.transcript_path}"]
    lines.extend(f"  warning: {w}" for w in result.warnings)
    return "\n".join(lines)
