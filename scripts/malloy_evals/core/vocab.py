"""The kit's closed vocabularies, read once from `reference/schemas/defs.schema.json`.

The JSON Schema is the single definition: these constants are derived from it at import, so a
value added to the schema is known to every module and a value spelled differently in code cannot
drift from what the ledger validator accepts. Cause codes are not here: their membership is the
table in `skills/eval-diagnose/SKILL.md` (see `codes`); the schemas check only their pattern.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeGuard

from malloy_evals.core import paths

DEFS_FILE = paths.SCHEMAS_DIR / "defs.schema.json"


def _load_defs() -> dict[str, Any]:
    with DEFS_FILE.open(encoding="utf-8") as fh:
        return json.load(fh)["$defs"]


DEFS: dict[str, Any] = _load_defs()
"""The `$defs` of defs.schema.json, for code that needs a definition other than the ones below."""


def _enum(name: str) -> tuple[Any, ...]:
    """The enumeration of one definition, without null (nullable variants are separate defs)."""
    return tuple(v for v in DEFS[name]["enum"] if v is not None)


def _pattern(name: str) -> str:
    return DEFS[name]["pattern"]


VERDICTS: tuple[str, ...] = _enum("verdict")
"""Post-processed verdicts: match, near_match, no_match, needs_human (a score may also be null)."""
DECIDED_VERDICTS: tuple[str, ...] = ("match", "no_match")
"""The only verdicts that enter a pass rate (reference/run-summary.md)."""
JUDGE_VERDICTS: tuple[str, ...] = _enum("judge_verdict")
SETTLE_VERDICTS = JUDGE_VERDICTS  # a person settles with a verdict the judge itself could give
"""What the judge itself may answer: match, near_match, no_match."""
NULL_REASONS: tuple[str, ...] = _enum("null_reason_fixed")
"""The fixed null reasons; `judge_error: <text>` and `environment_failure: <text>` match NULL_REASON_PATTERN."""
NULL_REASON_PATTERN: str = _pattern("null_reason_pattern")
"""The pattern of null reasons that carry text."""
GOLDEN_KINDS: tuple[str, ...] = _enum("golden_kind")
"""scalar, rows, unanswerable, criteria."""
GOLDEN_STATUSES: tuple[str, ...] = _enum("golden_status")
"""verified, provisional, invalid, ambiguous, verified_wrong (a missing status reads as verified)."""
GOLD_STATUSES: tuple[str, ...] = _enum("gold_status")
"""The judge's view of a golden: verified, verified_benign, suspect, verified_wrong."""
COVERAGE_LEVELS: tuple[str, ...] = _enum("coverage_level")
"""Authored coverage: covered, derivable, absent."""
COVERAGE_VERDICTS: tuple[str, ...] = _enum("coverage_verdict")
"""Measured coverage: MODELLED and the four gap verdicts."""
RULE_KINDS: tuple[str, ...] = _enum("rule_kind")
COVERAGE_SOURCES: tuple[str, ...] = _enum("coverage_source")
ROUTES: tuple[str, ...] = _enum("route")
"""Delivery routes of an expected entity, best first: exact, alias, in_docs, missing."""
WHERE_TO_FIX: tuple[str, ...] = _enum("where_to_fix")
OWNERS: tuple[str, ...] = _enum("owner")
"""model, package-skill, retrieval, agent-skill, dataset (null means undecided)."""
COMPONENTS: tuple[str, ...] = _enum("component")
"""dataset, agent-call, get_context/model, get_context/retrieval, construction, model-definition."""
PHASES: tuple[str, ...] = _enum("phase")
"""baseline, loop, blind_gate, canary, final, probe."""
RUN_STATUSES: tuple[str, ...] = _enum("run_status")
SPLITS: tuple[str, ...] = _enum("split")
SEVERITIES: tuple[str, ...] = _enum("severity")
SUFFICIENCIES: tuple[str, ...] = _enum("sufficiency")
ISSUE_STATUSES: tuple[str, ...] = _enum("issue_status")
TOOLS: tuple[str, ...] = _enum("tool")
FINAL_QUERY_SOURCES: tuple[str, ...] = _enum("final_query_source")
ENTITY_KINDS: tuple[str, ...] = _enum("entity_kind")
PROTECTS_CLASSES: tuple[str, ...] = _enum("protects_class")
"""The decision classes check_judge reports coverage of."""
EVENT_KINDS: tuple[str, ...] = _enum("event_kind")
"""attempt, tool_call, score, retrieval_score, issue, issue_status, void."""
CASE_SCOPED_KINDS: tuple[str, ...] = _enum("case_scoped_kind")
"""Kinds that carry qid, sample and phase; their attempt key is (qid, sample, phase)."""

CAUSE_CODE_PATTERN: str = _pattern("cause_code")
QID_PATTERN: str = _pattern("qid")
ENTITY_ID_PATTERN: str = _pattern("entity_id")
EVENT_ID_PATTERN: str = _pattern("event_id")
TIMESTAMP_PATTERN: str = _pattern("timestamp")

# fullmatch, not search: a JSON Schema `$` also matches before a trailing newline in Python's re,
# and a qid names a folder, so "q1\n" must not pass here.
QID_RE = re.compile(QID_PATTERN.removeprefix("^").removesuffix("$"))
CAUSE_CODE_RE = re.compile(CAUSE_CODE_PATTERN.removeprefix("^").removesuffix("$"))
ENTITY_ID_RE = re.compile(ENTITY_ID_PATTERN.removeprefix("^").removesuffix("$"))
NULL_REASON_RE = re.compile(NULL_REASON_PATTERN.removeprefix("^").removesuffix("$"))


def is_qid(value: object) -> TypeGuard[str]:
    """Whether `value` is a safe case id (it may name a folder)."""
    return isinstance(value, str) and QID_RE.fullmatch(value) is not None


def is_null_reason(value: object) -> bool:
    """Whether `value` is a null reason (reference/judge.md): a fixed one, or
    `judge_error: ...` / `environment_failure: ...`."""
    return isinstance(value, str) and (value in NULL_REASONS or NULL_REASON_RE.fullmatch(value) is not None)


def is_cause_code_shaped(value: object) -> bool:
    """Whether `value` has a cause code's shape; membership is decided by the eval-diagnose table."""
    return isinstance(value, str) and CAUSE_CODE_RE.fullmatch(value) is not None


def split_entity_id(entity_id: str) -> tuple[str, str, str]:
    """(kind, source, name) of `kind:source:name`; a two-part id has an empty source."""
    parts = entity_id.split(":", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    if len(parts) == 2:
        return parts[0], "", parts[1]
    return "", "", entity_id


# The `contaminated` vocabulary: true, false, or "unknown". An answerer nobody could check may have
# read the answers, so "unknown" counts as contaminated in every decision and aggregate. Ledgers
# written by hand or by older tools may hold the booleans as strings ("true", "false").
CONTAMINATION_UNKNOWN = "unknown"


def contamination_value(value: object) -> bool | str | None:
    """A recorded `contaminated` value as the kit reads it: True, False, "unknown", or None when
    nothing usable was recorded (null, or a value outside the vocabulary)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "false"):
            return word == "true"
        if word == CONTAMINATION_UNKNOWN:
            return CONTAMINATION_UNKNOWN
    return None


def is_contaminated(value: object) -> bool:
    """Whether a recorded `contaminated` value voids the attempt: true, "true" and "unknown" do;
    false, "false", null (nothing recorded) and anything outside the vocabulary do not."""
    return contamination_value(value) in (True, CONTAMINATION_UNKNOWN)


def null_reason_head(reason: object) -> str:
    """The head of a null reason, the part counts and rules key on: `judge_error: timeout` is
    `judge_error`, `unscored: judge_unparseable` is `unscored`; surrounding space is not part of
    it; no reason (null, empty) is the empty string. A ledger someone else wrote may hold anything,
    so any value is read as its text."""
    return str(reason or "").split(":", 1)[0].strip()


def is_truncated(value: object) -> bool:
    """Whether a recorded `truncated` value says the answer was cut off: true and "true" (any
    case, spaced) do; false, null and anything else (1, "yes") do not, as the schema's boolean
    and the legacy string read the same way `contaminated` is read."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() == "true"


TRUNCATED_REASON = "answerer_truncated"


def is_cut_off(truncated: object, reason: object) -> bool:
    """Whether an attempt is left out of the pass rate as truncated: its attempt says so, or its
    null reason is `answerer_truncated` (the one rule the summary, the arms and scoring share)."""
    return is_truncated(truncated) or null_reason_head(reason) == TRUNCATED_REASON
