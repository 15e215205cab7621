"""Ledgers written by the public Publisher eval loop, read as the kit's own events.

The public loop writes flat JSON lines too, but not quite the kit's: no `event_id`, a few
camelCase fields (`transcriptPath`, `rankedSummary`, `artifactPath`, `servedRevision`),
`contaminated` as the strings "true" / "false", no `call_index` on tool calls, a run-level
`retrieval_score` of its own (one row per search term, no qid) and kinds the kit does not keep
(`probe`, `candidate`, `acceptance_check`, `checkpoint`). A line without an `event_id` is read as
such a line and normalised here, at the reading boundary, so every reader works on kit events.

A line the kit cannot place (a case-scoped event with no qid or no phase) is a problem naming
its line; readers stop on it (exit 3) rather than guess. The kit never appends to such a ledger:
its lines have no ids a void could name.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from malloy_evals.core import vocab
from malloy_evals.core.findings import LineProblem

ID_PREFIX = "line-"  # a public line's event id: `line-<its line number>` (stable: append-only)
PROBLEM_PREFIX = "public-loop line"

# Public field -> kit field, where the kit spells it differently (any kind).
RENAMES = {
    "transcriptPath": "transcript_path",
    "servedRevision": "served_revision",
    "rankedSummary": "ranked_summary",
    "modelPath": "model_path",
    "artifactPath": "judge_artifact",
    "final_givens": "givens",
    "sourceName": "source_name",
    "queryName": "query_name",
}
RANKED_RENAMES = {"entityIds": "entity_ids", "resultCount": "result_count", "docTokens": "doc_tokens"}
KIND_RENAMES = {"gate": "acceptance_check"}  # the public loop's own legacy name
# Retired cause-code spellings the public loop still writes, read as today's codes.
RETIRED_CODES = {"COVERAGE": "MISSING", "NO-DISAMBIG": "AMBIGUOUS", "CONVENTION": "RULE_UNWRITTEN"}
# Public null reasons without a kit counterpart, read as the kit's patterned reasons.
NULL_REASONS = {
    "no_saved_verdict": "judge_error: no saved verdict (public loop)",
    "no_answer_captured": "environment_failure: no answer captured (public loop)",
}
CASE_SCOPED = ("attempt", "tool_call", "score", "retrieval_score", "human_verdict")
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def is_public_line(event: Mapping[str, Any]) -> bool:
    """Whether a parsed ledger line was written by the public loop (the kit always writes an id)."""
    return "event_id" not in event


def first_line_is_public(head: bytes) -> bool:
    """Whether the first line in `head` (the start of a ledger file) is a public-loop line."""
    line = head.split(b"\n", 1)[0].strip()
    if not line or b'"event_id"' in line:
        return False
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False  # a torn or hand-broken line is another problem, reported elsewhere
    return isinstance(obj, dict) and is_public_line(obj)


def read_head(fd: int) -> bytes:
    """The start of an open ledger, enough to hold its first line's `event_id` key.

    The kit writes `{"kind":...,"event_id":...` first, so 512 bytes nearly always decide; a longer
    first line without the key is read whole (up to 1 MiB) before it is judged public.
    """
    head = os.pread(fd, 512, 0)
    if b'"event_id"' in head.split(b"\n", 1)[0] or b"\n" in head:
        return head
    return os.pread(fd, 1 << 20, 0)


def ledger_is_public(path: Any) -> bool:
    """Whether the ledger file at `path` was written by the public loop (False when absent)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return first_line_is_public(read_head(fd))
    except OSError:
        return False  # not a readable file: the reader that opens it says so, naming it
    finally:
        os.close(fd)


def refusal(action: str) -> str:
    """The one sentence every writer and streaming reader gives when it meets a public ledger."""
    return (f"no event_id: this ledger was written by the public eval loop; {action} works on the "
            "kit's own ledgers only (the run summary, review.py listing and validate.py read this "
            "one). Record the attempts into a kit run (new_run.py, record_attempt.py) to score them")


def contaminated_value(value: Any) -> Any:
    """The kit's form of a `contaminated` value: true, false or "unknown".

    The public loop wrote "true" / "false" strings (read by `vocab.contamination_value`, the kit's
    one reading of the word); any other string it could not settle, which counts as contaminated
    there too, so it reads as "unknown" (contaminated in every aggregate).
    """
    if isinstance(value, str):
        kit = vocab.contamination_value(value)
        return vocab.CONTAMINATION_UNKNOWN if kit is None else kit
    return value


def _snake(key: str) -> str:
    return RENAMES.get(key) or _CAMEL.sub(r"_\1", key).lower()


def _ranked(summary: Any) -> Any:
    if not isinstance(summary, dict):
        return summary
    return {RANKED_RENAMES.get(k, _snake(k)): v for k, v in summary.items()}


def normalise_event(obj: Mapping[str, Any], line: int) -> dict[str, Any] | str:
    """One public-loop line as a kit event, or a sentence saying what it lacks."""
    kind = obj.get("kind")
    kind = KIND_RENAMES.get(kind, kind) if isinstance(kind, str) else kind
    if kind == "retrieval_score" and "qid" not in obj:
        kind = "retrieval_term"  # the public run-level row per search term, not an attempt's row
    out: dict[str, Any] = {"kind": kind, "event_id": f"{ID_PREFIX}{line}"}
    for key, value in obj.items():
        if key in ("kind", "event_id"):
            continue
        out.setdefault(_snake(key), value)
    if not isinstance(kind, str):
        return "no `kind`"
    if kind in CASE_SCOPED:
        missing = [k for k in ("qid", "phase") if not isinstance(out.get(k), str)]
        if missing:
            return (f"{kind} has no {' or '.join('`' + m + '`' for m in missing)}: a case-scoped "
                    "event needs qid, sample and phase to be placed on an attempt")
        out.setdefault("sample", None)  # the public contract requires the key; absent reads as null
        sample = out["sample"]
        if sample is not None and (not isinstance(sample, int) or isinstance(sample, bool)):
            return f"{kind}: `sample` is {type(sample).__name__}, not a whole number or null"
        wrong = [k for k in ("verdict", "reason") if out.get(k) is not None
                 and not isinstance(out[k], str)]
        if wrong:
            return f"{kind}: `{wrong[0]}` is {type(out[wrong[0]]).__name__}, not text or null"
    if "contaminated" in out:
        out["contaminated"] = contaminated_value(out["contaminated"])
    if "ranked_summary" in out:
        out["ranked_summary"] = _ranked(out["ranked_summary"])
    if (kind == "score" and out.get("verdict") is None and isinstance(out.get("reason"), str)
            and out["reason"] in NULL_REASONS):
        out["reason"] = NULL_REASONS[out["reason"]]
    if kind == "issue":
        if isinstance(out.get("primary_code"), str):
            out["primary_code"] = RETIRED_CODES.get(out["primary_code"], out["primary_code"])
        if isinstance(out.get("contributing_codes"), list):
            out["contributing_codes"] = [RETIRED_CODES.get(c, c) if isinstance(c, str) else c
                                         for c in out["contributing_codes"]]
    return out


class Normaliser:
    """Public-loop lines as kit events, one at a time in ledger order, for one pass over a ledger.

    A public tool_call without a `call_index` gets its place among its attempt's calls, in ledger
    order (what the kit's recorder writes), so the normaliser counts the calls it has seen."""

    def __init__(self, file: str) -> None:
        self.file = file
        self._calls: dict[tuple[str, ...], int] = {}
        self._attempts: dict[tuple[str, ...], str] = {}  # key -> id of its latest attempt line

    def take(self, event: Mapping[str, Any], line: int) -> tuple[dict[str, Any] | None,
                                                                  LineProblem | None]:
        """The kit event for the public line `event` at `line`, or the problem naming the line
        when it cannot be placed."""
        result = normalise_event(event, line)
        if isinstance(result, str):
            return None, LineProblem(self.file, line, f"{PROBLEM_PREFIX}: {result}")
        # repr: a foreign line's sample may be anything, a list included (not hashable)
        key = tuple(repr(result.get(k)) for k in ("qid", "sample", "phase"))
        if result["kind"] == "attempt":
            self._attempts[key] = result["event_id"]
        elif result["kind"] in ("score", "retrieval_score", "human_verdict") \
                and key in self._attempts:
            # The public loop writes a verdict after the attempt it judged: that is its attempt.
            result.setdefault("attempt_event_id", self._attempts[key])
        if result["kind"] == "tool_call":
            index = self._calls.get(key, 0)
            self._calls[key] = index + 1
            result.setdefault("call_index", index)
        return result, None
