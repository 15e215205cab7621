"""Ledger events: ids, attempt keys, the tolerant reader, the live view and the effective verdict.

A reader survives a torn last line (a crash mid-write): it reports `events.jsonl:N: torn line` and
returns the whole events before it. The live view applies every `void`. Lines written by the
public eval loop are read as kit events (`public_loop`). `effective_verdict` is the one rule for
what an attempt's verdict is once a person may have settled it.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from malloy_evals.core import vocab
from malloy_evals.core.errors import InputError
from malloy_evals.core.findings import LineProblem
from malloy_evals.core.words import shown
from malloy_evals.ledger import public_loop

RUN_FILE = "run.json"
EVENTS_FILE = "events.jsonl"
ARTIFACTS_DIR = "artifacts"
SCHEMA_VERSION = 1
NULL_SAMPLE_SEGMENT = "_"
# At most one live per attempt key (reference/ledger-schema.md); a person's verdict is held to it too.
UNIQUE_KINDS = ("score", "retrieval_score", "human_verdict")
# run.json keys that are the run's identity: update_info may not change them.
IDENTITY_KEYS = ("runId", "phase", "schemaVersion", "started")

AttemptKey = tuple[str, "int | None", str]


class LedgerError(InputError):
    """An append the ledger's rules refuse: another phase, a second live score, a bad void."""


# --------------------------------------------------------------------------------------------
# small pure helpers

def now() -> str:
    """The current UTC time as RFC 3339 with milliseconds and `Z`."""
    t = datetime.now(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def new_event_id() -> str:
    """A fresh unique event id (uuid4, hex)."""
    return uuid.uuid4().hex


def check_qid(qid: object) -> str:
    """Return `qid` when it is a safe case id, else raise InputError; call before building any path."""
    if not vocab.is_qid(qid):
        raise InputError(None, None, f"qid {qid!r} is not a safe id (it names a folder; "
                                     f"allowed: {vocab.QID_PATTERN})")
    return qid  # type: ignore[return-value]


def check_sample(sample: object) -> int | None:
    """Return `sample` when it is a non-negative int or None, else raise InputError."""
    if sample is None or (isinstance(sample, int) and not isinstance(sample, bool) and sample >= 0):
        return sample  # type: ignore[return-value]
    raise InputError(None, None, f"sample {shown(sample)} must be a non-negative integer or null")


def sample_segment(sample: int | None) -> str:
    """The folder name of a sample: its number, or `_` for a null sample."""
    sample = check_sample(sample)
    return NULL_SAMPLE_SEGMENT if sample is None else str(sample)


def attempt_key(event: dict[str, Any]) -> AttemptKey:
    """An event's attempt key (qid, sample, phase)."""
    return (event.get("qid"), event.get("sample"), event.get("phase"))  # type: ignore[return-value]


def _well_formed_key(event: dict[str, Any]) -> AttemptKey | None:
    """The attempt key when its parts have the right types (a hand-edited line may not), else None."""
    qid, sample, phase = attempt_key(event)
    ok_sample = sample is None or (isinstance(sample, int) and not isinstance(sample, bool))
    if isinstance(qid, str) and ok_sample and isinstance(phase, str):
        return (qid, sample, phase)
    return None


def _check_name(name: str) -> list[str]:
    """The segments of an artifact name, each a safe file name (so no name climbs out of the run)."""
    segments = name.split("/") if isinstance(name, str) else []
    if not segments or not all(vocab.QID_RE.fullmatch(s) for s in segments):
        raise InputError(None, None, f"artifact name {name!r} is not a safe relative file name")
    return segments


def _numbered(name: str, n: int) -> str:
    """`prediction.csv` -> `prediction.2.csv`; `judge` -> `judge.2` (n >= 2)."""
    base, dot, ext = name.partition(".")
    return f"{base}.{n}{dot}{ext}" if dot else f"{name}.{n}"


@dataclass(frozen=True)
class LedgerRead:
    """What a tolerant read of events.jsonl found: the whole events, and the lines it could not use."""

    events: list[dict[str, Any]]
    problems: list[LineProblem]
    line_numbers: list[int] = field(default_factory=list)  # 1-based line of each event
    public_lines: list[int] = field(default_factory=list)  # lines written by the public loop

    @property
    def torn(self) -> bool:
        """Whether the last line was cut mid-write."""
        return any(p.message.startswith("torn line") for p in self.problems)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects that hold no cycles.

    Decoding 200,000 events creates millions of dicts and lists, and the collector keeps walking
    everything built so far: on a 220,000-event ledger it was most of parse_ledger's time (6.2 s of
    CPU with it, 2.3 s without). JSON values cannot form cycles, so there is nothing to collect.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def parse_ledger(data: bytes, file: str = EVENTS_FILE) -> LedgerRead:
    """Parse ledger bytes: every line that is a whole JSON object becomes an event; others are problems."""
    with _gc_paused():
        read = _parse_ledger(data, file)
    if any("event_id" not in e for e in read.events):  # public_loop.is_public_line, inlined: hot
        done = public_loop.normalise_events(read.events, read.line_numbers, file)
        problems = sorted(read.problems + done.problems, key=lambda p: p.line or 0)
        read = LedgerRead(done.events, problems, done.line_numbers, done.public_lines)
    return read


def _parse_ledger(data: bytes, file: str) -> LedgerRead:
    events: list[dict[str, Any]] = []
    numbers: list[int] = []
    problems: list[LineProblem] = []
    # Split on b"\n" only: str.splitlines would also split on U+2028 inside a JSON string.
    lines = data.split(b"\n")
    last_is_partial = lines[-1] != b""
    if not last_is_partial:
        lines.pop()
    for index, raw in enumerate(lines):
        number = index + 1
        torn = last_is_partial and index == len(lines) - 1
        try:
            text = raw.decode("utf-8")
            obj = json.loads(text) if text.strip() else None
        except (UnicodeDecodeError, ValueError, RecursionError):
            obj = ValueError
        if torn:
            # A last line without its newline was cut mid-write; its content is whole only if it parses.
            problems.append(LineProblem(file, number, "torn line (the last line has no newline; "
                                                      "a write was cut off)"))
            if isinstance(obj, dict):
                events.append(obj)
                numbers.append(number)
            continue
        if obj is ValueError:
            problems.append(LineProblem(file, number, "not valid JSON"))
        elif obj is None and not raw.strip():
            problems.append(LineProblem(file, number, "empty line"))
        elif not isinstance(obj, dict):
            problems.append(LineProblem(file, number, "not a JSON object"))
        else:
            events.append(obj)
            numbers.append(number)
    return LedgerRead(events, problems, numbers)


def read_ledger(path: str | Path) -> LedgerRead:
    """Read an events.jsonl tolerantly, under a shared lock so no append is seen half-written."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            try:
                data = fh.read()
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    except FileNotFoundError:
        return LedgerRead([], [LineProblem(path.name, None, "missing")], [])
    except OSError as exc:
        # Present but unreadable (a folder, no permission): could not measure, never a traceback.
        raise InputError(path, None, f"cannot be read: {exc.strerror or exc}") from None
    read = parse_ledger(data, path.name)
    for problem in read.problems:
        # A public-loop line the kit cannot place on an attempt: stop rather than guess.
        if problem.message.startswith(public_loop.PROBLEM_PREFIX):
            raise InputError(path, problem.line, problem.message)
    return read


def live_view(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events still standing: every non-void event no void retracts, in ledger order."""
    events = list(events)
    voided = {e.get("target_event_id") for e in events if e.get("kind") == "void"}
    return [e for e in events if e.get("kind") != "void" and e.get("event_id") not in voided]


def latest_by_key(events: Iterable[dict[str, Any]], kind: str) -> dict[AttemptKey, dict[str, Any]]:
    """The last event of `kind` per attempt key, from events already live-filtered."""
    out: dict[AttemptKey, dict[str, Any]] = {}
    for e in events:
        if e.get("kind") == kind:
            out[attempt_key(e)] = e
    return out


def latest_issue_status(events: Iterable[dict[str, Any]]) -> dict[str, str]:
    """issue_id -> its latest status, from live events (SPEC 3: the latest per issue wins)."""
    return {e["issue_id"]: e["status"] for e in events
            if e.get("kind") == "issue_status" and "issue_id" in e and "status" in e}


# --------------------------------------------------------------------------------------------
# The effective verdict: the judge's, unless a person settled it

# Null reasons a person's verdict never replaces: the attempt is void or was never judged for a
# reason no reading of the answer changes (contamination, truncation, nothing submitted, a golden
# the set does not defend, an environment failure). A person settles judgements, not these.
MECHANICAL_NULL_REASONS = ("contaminated", "answerer_truncated", "not_submitted",
                           "environment_failure", "golden_missing", "golden_provisional",
                           "golden_invalid", "golden_ambiguous", "golden_verified_wrong")


@dataclass(frozen=True)
class EffectiveVerdict:
    """An attempt's verdict as every summary counts it."""

    verdict: str | None          # match / near_match / no_match / needs_human, or None
    reason: str | None           # the score's reason (a null reason when the verdict is None)
    gold_status: str | None      # the person's view of the golden when settled, else the judge's
    settled_by: str | None = None  # who settled it, when a live human_verdict decided it
    judge_verdict: str | None = None  # the score's own verdict, whoever decided


def _reason_head(reason: Any) -> str:
    return str(reason or "").split(":", 1)[0].strip()


def human_verdict_applies(score: Mapping[str, Any] | None, human: Mapping[str, Any] | None,
                          attempt: Mapping[str, Any] | None = None) -> bool:
    """Whether a live human_verdict stands in place of this score.

    It needs a live score that was not nulled for a mechanical reason, and it covers only the
    attempt the person judged: a re-recorded attempt (another live attempt event) is new work.
    """
    if human is None or score is None:
        return False
    if score.get("verdict") is None and _reason_head(score.get("reason")) in MECHANICAL_NULL_REASONS:
        return False
    judged = human.get("attempt_event_id")
    if judged and attempt is not None and attempt.get("event_id") != judged:
        return False
    return human.get("verdict") is not None


def effective_verdict(score: Mapping[str, Any] | None, human: Mapping[str, Any] | None = None,
                      attempt: Mapping[str, Any] | None = None) -> EffectiveVerdict:
    """THE rule for an attempt's verdict: its live score's, overridden by a live human_verdict.

    `score`, `human` and `attempt` are the attempt's live events (None when it has none). Every
    summary, comparison and report decides an attempt's verdict through this function.
    """
    if score is None:
        return EffectiveVerdict(None, None, None)
    judge = score.get("verdict")
    if human_verdict_applies(score, human, attempt):
        assert human is not None
        gold = human.get("gold_status") or score.get("gold_status")
        return EffectiveVerdict(human["verdict"], None, gold, str(human.get("settled_by") or "?"),
                                judge)
    return EffectiveVerdict(judge, score.get("reason"), score.get("gold_status"), None, judge)
