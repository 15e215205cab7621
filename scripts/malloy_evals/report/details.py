"""What the run page shows of each attempt, read from the ledger's live events, the set and the
attempt's artifacts: the question, the golden and rubric, the answer and final query, the rows the
kit re-executed, what the judge said, retrieval, and the answerer's tool calls in order.

Nothing here is a figure: counts and rates come from `figures.summarize` alone. This module only
gathers the evidence behind each row of the summary, redacts secrets in it, and caps what a page
can hold (long texts and row lists are cut with the count stated, and the whole file is linked).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import InputError, KitError
from malloy_evals.core.redact import Redactor, redact
from malloy_evals.core.vocab import is_truncated
from malloy_evals.ledger.artifacts import read_csv_rows, read_prediction
from malloy_evals.ledger.events import AttemptKey, latest_issue_status
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.report.html import shown
from malloy_evals.sets.eval_set import Case, EvalSet, golden_value

# What one attempt's section may hold. Real answers and queries sit far below these; a page for a
# 500-attempt run must stay a file that opens at once (reference/report.md).
ROWS_SHOWN = 10            # re-executed and golden rows, each
ANSWER_CHARS = 6000        # the answer text
QUERY_CHARS = 3000         # each query, the final one included
TEXT_CHARS = 2000          # a judge's why, an error, a rubric
ENTITIES_SHOWN = 12        # entity ids listed per get_context call


def redacted(value: Any, secrets: Redactor | None = None) -> Any:
    """A JSON value (an event, a golden, rows) with secrets blanked by the kit's one redaction
    (core/redact.py, `[REDACTED]`). Escaping is not done here: the page's builder escapes every
    string. `secrets`: a Redactor shared by everything one page shows (made once, not per value:
    it learns what each value shows, and blanks a secret an attempt showed in every value after
    it too); a new one otherwise."""
    if isinstance(value, str):
        return redact(value) if secrets is None else secrets.learn(value).text(value)
    # One pass over the value's JSON text instead of one per string: a page holds tens of
    # thousands of strings. A clean text means clean strings; a redacted one is re-read, or, if
    # the redaction broke the JSON, redacted string by string with what the text taught.
    text = json.dumps(value, ensure_ascii=False)
    secrets = (secrets or Redactor()).learn(text)
    clean = secrets.text(text)
    if clean == text:
        return value
    try:
        return json.loads(clean)
    except ValueError:
        return secrets.json(value)


@dataclass(frozen=True)
class Text:
    """A text as shown: redacted, cut to its cap, with how many characters were cut."""

    text: str
    cut: int = 0


def text_of(value: Any, limit: int) -> Text | None:
    """`value` (already redacted) capped; None when there is no value (shown as `null`)."""
    if value is None:
        return None
    full = value if isinstance(value, str) else structured_words(value)
    if len(full) <= limit:
        return Text(full)
    return Text(full[:limit], len(full) - limit)


def structured_words(value: Any) -> str:
    """A structured value from the ledger as words: a contamination reason as `rule read-protected
    at tool use 3 (Bash): evals/`, anything else as `key: value; ...` (report/html.py's shown)."""
    if isinstance(value, Mapping) and "rule" in value:
        index = value.get("tool_use_index")
        at = f" at tool use {index + 1}" if isinstance(index, int) and not isinstance(index, bool) else ""
        tool = f" ({value['tool']})" if value.get("tool") else ""
        needle = f": {value['needle']}" if value.get("needle") else ""
        return f"rule {value['rule']}{at}{tool}{needle}"
    return shown(value)


@dataclass(frozen=True)
class Rows:
    """Rows as shown: the first few, the full count, and where the whole file is."""

    rows: list[dict[str, Any]]
    total: int
    path: str | None = None        # relative to the run folder (an artifact) or the set folder


@dataclass(frozen=True)
class ToolCall:
    """One get_context or execute_query call, in the order the answerer made it."""

    index: int
    tool: str
    targets: list[str]             # get_context: what was asked ("any: revenue 2024")
    returned: list[str]            # get_context: entity ids that came back, first few
    returned_total: int | None     # how many entities came back (the server's count when given)
    query: Text | None             # execute_query: the Malloy text
    error: Text | None
    named: str | None = None       # execute_query of a named query or view: `orders -> by_month`


@dataclass(frozen=True)
class Golden:
    """The case's golden as the judge saw it, and the rubric it judged by."""

    kind: str | None
    status: str | None
    revision: int | None
    value: Text | None             # a scalar golden (or anything not rows), as JSON text
    rows: Rows | None              # a rows golden
    canonical_query: Text | None
    rubric: Text | None
    must_state: list[str]
    must_not_use: list[str]
    error: str | None = None       # the golden file could not be read


@dataclass(frozen=True)
class Judged:
    """The live score's evidence: the judge's why and the mechanical checks around it."""

    verdict: str | None
    reason: str | None
    why: Text | None
    confidence: int | None
    judge_verdict: str | None      # the judge's own verdict when a veto or rule overrode it
    column_pairing: dict[str, Any] | None
    gold_status: str | None
    gold_note: Text | None
    must_not_use_hits: list[str]
    leaf_hits: list[str]
    judge_model: str | None
    judge_path: str | None         # the judge artifact folder, relative to the run


@dataclass(frozen=True)
class Retrieved:
    """The attempt's retrieval row: recall, what was missing, and where a failure was put."""

    recall: float | None
    precision: float | None
    missing: list[str]
    where_to_fix: str | None
    coverage: str | None
    why: Text | None


@dataclass(frozen=True)
class AttemptDetail:
    """Everything the detail section of one attempt shows."""

    qid: str
    sample: int | None
    question: Text | None
    tags: list[str]
    golden: Golden | None
    answer: Text | None
    final_query: Text | None
    final_query_source: str | None
    submitted: bool | None
    truncated: bool
    run_error: str | None
    contaminated: Any
    contamination_reasons: list[str]
    prediction: Rows | None
    prediction_error: Text | None
    judged: Judged | None
    retrieved: Retrieved | None
    calls: list[ToolCall]
    calls_total: int
    transcript_path: str | None
    num_turns: int | None
    wall_seconds: float | None
    issues: list[str] = field(default_factory=list)   # ids of the issues (clusters) naming it


@dataclass(frozen=True)
class Issue:
    """One diagnosis cluster: a shared cause, its owner, and the cases it covers."""

    issue_id: str
    qids: list[str]
    primary_code: str | None
    contributing_codes: list[str]
    component: str | None
    owner: str | None
    diagnosis: Text | None
    severity: str | None
    confidence: str | None
    status: str | None


# ---------------------------------------------------------------------------------------------


def _strings(values: Any, limit: int = TEXT_CHARS) -> list[str]:
    if not isinstance(values, list):
        return []
    out = []
    for v in values:
        t = text_of(v, limit)
        if t is not None:
            out.append(t.text + (f"… ({t.cut} more characters)" if t.cut else ""))
    return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _json_text(value: Any, limit: int) -> Text | None:
    if value is None:
        return None
    return text_of(json.dumps(value, ensure_ascii=False, default=str), limit)


def _artifact(run: Run, relative: Any) -> tuple[str | None, Path | None]:
    """(the path as recorded, its absolute path) when it names something inside the run folder
    that exists; (None, None) otherwise, so the page never links to nothing or outside the run."""
    if not isinstance(relative, str) or not relative:
        return None, None
    try:
        path = run.resolve(relative)
    except (InputError, ValueError):
        return None, None
    return (relative, path) if path.exists() else (None, None)


def _prediction(run: Run, qid: str, sample: Any, score: Mapping[str, Any] | None,
                secrets: Redactor) -> tuple[Rows | None, Text | None]:
    """The rows the judge saw (the score's own prediction artifact), else the latest one."""
    recorded, path = _artifact(run, (score or {}).get("prediction_path"))
    if path is not None and path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return None, Text(f"{recorded}: cannot be read ({exc})")
        text = redacted(text, secrets)
        if path.suffix == ".csv":
            rows = read_csv_rows(text)
            total = _envelope_count(path.parent) or len(rows)
            return Rows(rows[:ROWS_SHOWN], total, recorded), None
        try:
            data = json.loads(text)
        except ValueError:
            return None, Text(f"{recorded}: not JSON")
        error = data.get("error") if isinstance(data, dict) else None
        return None, text_of(error or f"see {recorded}", TEXT_CHARS)
    try:
        view = read_prediction(run, qid, sample)
    except (KitError, OSError, ValueError, UnicodeDecodeError):
        return None, None
    if view is None:
        return None, None
    rows = redacted(list(view.rows or [])[:ROWS_SHOWN], secrets)
    table = Rows(rows, view.row_count or len(rows), view.path) if rows else None
    return table, text_of(redacted(view.error, secrets), TEXT_CHARS)


def _envelope_count(folder: Path) -> int | None:
    envelope = folder / "envelope.json"
    try:
        data = json.loads(envelope.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return _int(data.get("row_count")) if isinstance(data, dict) else None


def golden_of(case: Case | None, set_dir: Path | None) -> Golden | None:
    """The case's golden as shown; a golden file that cannot be read is said, not raised."""
    g = getattr(case, "golden", None)
    if case is None or not isinstance(g, Mapping):
        return None
    g = redacted(dict(g))
    kind = g.get("kind")
    rows: Rows | None = None
    value: Text | None = None
    error = None
    try:
        raw = golden_value(case, set_dir) if set_dir is not None else g.get("value")
    except InputError as exc:
        raw, error = None, str(exc)
    if kind == "rows" and isinstance(raw, list):
        raw = redacted(raw[:ROWS_SHOWN]) + raw[ROWS_SHOWN:]
        rows = Rows([r for r in raw[:ROWS_SHOWN] if isinstance(r, dict)], len(raw),
                    g.get("path") if isinstance(g.get("path"), str) else None)
    elif raw is not None:
        value = _json_text(redacted(raw), TEXT_CHARS)
    return Golden(
        kind=_str(kind), status=case.golden_status, revision=case.golden_revision, value=value,
        rows=rows, canonical_query=text_of(g.get("canonicalQuery"), QUERY_CHARS),
        rubric=text_of(g.get("rubric"), TEXT_CHARS * 2), must_state=_strings(g.get("mustState")),
        must_not_use=_strings(g.get("mustNotUse")), error=error)


def _judged(score: Mapping[str, Any] | None, run: Run) -> Judged | None:
    if score is None:
        return None
    pairing = score.get("column_pairing")
    judge_path, _ = _artifact(run, score.get("judge_artifact"))
    return Judged(
        verdict=_str(score.get("verdict")), reason=_str(score.get("reason")),
        why=text_of(score.get("why"), TEXT_CHARS), confidence=_int(score.get("confidence")),
        judge_verdict=_str(score.get("judge_verdict")),
        column_pairing={str(k): (None if v is None else str(v))
                        for k, v in pairing.items()} if isinstance(pairing, dict) else None,
        gold_status=_str(score.get("gold_status")),
        gold_note=text_of(score.get("gold_note"), TEXT_CHARS),
        must_not_use_hits=_strings(score.get("must_not_use_hits")),
        leaf_hits=_strings(score.get("leaf_hits")), judge_model=_str(score.get("judge_model")),
        judge_path=judge_path)


def _retrieved(row: Mapping[str, Any] | None) -> Retrieved | None:
    if row is None:
        return None
    return Retrieved(recall=_float(row.get("recall")), precision=_float(row.get("precision")),
                     missing=_strings(row.get("missing")), where_to_fix=_str(row.get("where_to_fix")),
                     coverage=_str(row.get("coverage")), why=text_of(row.get("why"), TEXT_CHARS))


def _call(event: Mapping[str, Any], position: int) -> ToolCall:
    raw = event.get("ranked_summary")
    summary: dict[str, Any] = raw if isinstance(raw, dict) else {}
    found = summary.get("entity_ids")
    ids: list[Any] = found if isinstance(found, list) else []
    total = _int(summary.get("result_count"))
    is_context = event.get("tool") == "get_context"
    index = _int(event.get("call_index"))
    return ToolCall(
        index=index if index is not None else position,
        tool=str(event.get("tool")), targets=_strings(event.get("targets")),
        returned=_strings(ids[:ENTITIES_SHOWN]),
        returned_total=(total if total is not None else len(ids)) if is_context else None,
        query=text_of(event.get("query"), QUERY_CHARS), error=text_of(event.get("error"), TEXT_CHARS),
        named=_named(event))


def _named(event: Mapping[str, Any]) -> str | None:
    """`source -> view` or the query's name, for a call that ran a named query or view."""
    name = event.get("query_name")
    if not name:
        return None
    source = event.get("source_name")
    return f"{source} -> {name}" if source else str(name)


def _calls(events: Sequence[Mapping[str, Any]]) -> tuple[list[ToolCall], int]:
    """Every call in call order (the page chooses how many to list), and how many there are."""
    ordered = sorted(events, key=lambda e: _int(e.get("call_index")) or 0)
    return [_call(e, i) for i, e in enumerate(ordered)], len(events)


def issues_of(events: Iterable[Mapping[str, Any]]) -> list[Issue]:
    """The live issue events (diagnosis clusters) with their latest status, in ledger order."""
    live = [dict(e) for e in events]
    status = latest_issue_status(live)
    out = []
    for e in live:
        if e.get("kind") != "issue" or not isinstance(e.get("issue_id"), str):
            continue
        e = redacted(dict(e))
        out.append(Issue(
            issue_id=e["issue_id"], qids=_strings(e.get("qids")),
            primary_code=_str(e.get("primary_code")),
            contributing_codes=_strings(e.get("contributing_codes")),
            component=_str(e.get("component")), owner=_str(e.get("owner")),
            diagnosis=text_of(e.get("diagnosis"), TEXT_CHARS), severity=_str(e.get("severity")),
            confidence=_str(e.get("confidence")), status=_str(status.get(e["issue_id"]))))
    return out


def attempt_details(run: Run, eval_set: EvalSet | None, view: LiveView, keys: Sequence[AttemptKey],
                    issues: Sequence[Issue] = ()) -> list[AttemptDetail]:
    """One detail per attempt key, in the order given (the summary's case order), each read from
    the pass's live view of the ledger: its latest live attempt, score and retrieval row, and its
    live tool calls."""
    issue_ids: dict[str, list[str]] = {}
    for issue in issues:
        for q in issue.qids:
            issue_ids.setdefault(q, []).append(issue.issue_id)
    set_dir = getattr(eval_set, "dir", None)
    out = []
    goldens: dict[str, Golden | None] = {}  # a case's golden is read once, whatever its samples
    secrets = Redactor()  # one for the page: what one attempt shows is blanked in the next ones
    for key in keys:
        qid, sample = key.qid, key.sample
        # One redaction pass per attempt: its attempt, calls, score and retrieval row together.
        slot = redacted({"attempt": view.attempt(key), "score": view.tied_score(key),
                         "retrieval_score": view.retrieval_score(key),
                         "calls": view.of_key(key, ("tool_call",))}, secrets)
        att = slot.get("attempt") or {}
        score = slot.get("score")
        case = _case(eval_set, qid)
        if qid not in goldens:
            goldens[qid] = golden_of(case, set_dir) if case is not None else None
        prediction, prediction_error = _prediction(run, qid, sample, score, secrets)
        calls, total = _calls(slot["calls"])
        transcript, _ = _artifact(run, att.get("transcript_path"))
        out.append(AttemptDetail(
            qid=qid, sample=sample,
            question=text_of(redacted(case.question, secrets), TEXT_CHARS * 2)
            if case is not None else None,
            tags=_strings(redacted(case.tags, secrets)) if case is not None else [],
            golden=goldens[qid],
            answer=text_of(att.get("answer_text"), ANSWER_CHARS),
            final_query=text_of(att.get("final_query"), QUERY_CHARS),
            final_query_source=_str(att.get("final_query_source")),
            submitted=att.get("submitted") if isinstance(att.get("submitted"), bool) else None,
            truncated=is_truncated(att.get("truncated")), run_error=_str(att.get("run_error")),
            contaminated=att.get("contaminated"),
            contamination_reasons=_strings(att.get("contamination_reasons")),
            prediction=prediction, prediction_error=prediction_error,
            judged=_judged(score, run), retrieved=_retrieved(slot.get("retrieval_score")),
            calls=calls, calls_total=total, transcript_path=transcript,
            num_turns=_int(att.get("num_turns")), wall_seconds=_float(att.get("wall_seconds")),
            issues=issue_ids.get(qid, [])))
    return out


def _case(eval_set: EvalSet | None, qid: str) -> Case | None:
    if eval_set is None:
        return None
    try:
        return eval_set.case(qid)
    except (KitError, LookupError):  # a case no longer in the set: shown without its question
        return None
