"""Ledger events: ids, attempt keys, the tolerant line reader every reader of the ledger shares,
and the effective verdict.

A reader survives a torn last line (a crash mid-write): it reports `events.jsonl:N: torn line` and
returns the whole events before it. Readers take the ledger's size under the writers' lock and read
up to it, so a batch being appended is never seen half-written (see `snapshot_end`). Lines written
by the public eval loop are read as kit events as they are decoded (`LineDecoder`, `public_loop`).
`effective_verdict` is the one rule for what an attempt's verdict is once a person may have settled
it.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from malloy_evals.core import vocab
from malloy_evals.core.errors import InputError
from malloy_evals.core.findings import LineProblem
from malloy_evals.core.words import shown
from malloy_evals.ledger import public_loop
from malloy_evals.ledger.ties import attempt_untied

RUN_FILE = "run.json"
EVENTS_FILE = "events.jsonl"
ARTIFACTS_DIR = "artifacts"
SCHEMA_VERSION = 1
NULL_SAMPLE_SEGMENT = "_"
# At most one live per attempt key (reference/ledger-schema.md); a person's verdict is held to it too.
UNIQUE_KINDS = ("score", "retrieval_score", "human_verdict")
# run.json keys that are the run's identity: update_info may not change them.
IDENTITY_KEYS = ("runId", "phase", "schemaVersion", "started")



class AttemptKey(NamedTuple):
    """Which attempt an event belongs to. A run holds one phase, but the key carries it, so an
    event of another phase (a hand-edited ledger) never passes for one of this run's."""

    qid: str
    sample: int | None
    phase: str


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
    return qid


def check_sample(sample: object) -> int | None:
    """Return `sample` when it is a non-negative int or None, else raise InputError."""
    if sample is None or (isinstance(sample, int) and not isinstance(sample, bool) and sample >= 0):
        return sample
    raise InputError(None, None, f"sample {shown(sample)} must be a non-negative integer or null")


def sample_segment(sample: int | None) -> str:
    """The folder name of a sample: its number, or `_` for a null sample."""
    sample = check_sample(sample)
    return NULL_SAMPLE_SEGMENT if sample is None else str(sample)


def attempt_key(event: Mapping[str, Any]) -> AttemptKey:
    """An event's attempt key (qid, sample, phase), as the event holds them."""
    # As held: a foreign event's values are whatever it wrote (check_qid guards paths, not keys).
    return AttemptKey(event.get("qid"), event.get("sample"), event.get("phase"))  # type: ignore[arg-type]


def well_formed_key(event: Mapping[str, Any]) -> AttemptKey | None:
    """The attempt key when its parts have the right types (a hand-edited line may not), else None."""
    qid, sample, phase = event.get("qid"), event.get("sample"), event.get("phase")
    # Exact types: JSON gives no subclasses, and a bool must not pass for a sample number.
    if type(qid) is str and type(phase) is str and (sample is None or type(sample) is int):
        return _new_key(AttemptKey, (qid, sample, phase))
    return None


_new_key = tuple.__new__  # builds an AttemptKey without NamedTuple's Python-level __new__


def check_name(name: str) -> list[str]:
    """The segments of an artifact name, each a safe file name (so no name climbs out of the run)."""
    segments = name.split("/") if isinstance(name, str) else []
    if not segments or not all(vocab.QID_RE.fullmatch(s) for s in segments):
        raise InputError(None, None, f"artifact name {name!r} is not a safe relative file name")
    return segments


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
def gc_paused() -> Iterator[None]:
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


TORN = "torn line (the last line has no newline; a write was cut off)"
_BLOCK = 1 << 20  # bytes read at a time by the streaming readers


def decode_line(raw: bytes, number: int, torn: bool, file: str = EVENTS_FILE
                ) -> tuple[dict[str, Any] | None, LineProblem | None]:
    """One ledger line (without its newline) as the ledger's readers take it: an event when it is a
    whole JSON object, else the problem naming its line. A torn last line is a problem, and its
    content still counts when it parses (the write may have stopped right before the newline)."""
    try:
        text = raw.decode("utf-8")
        obj: Any = json.loads(text) if text.strip() else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        obj = ValueError
    if torn:
        return (obj if isinstance(obj, dict) else None), LineProblem(file, number, TORN)
    if obj is ValueError:
        return None, LineProblem(file, number, "not valid JSON")
    if obj is None and not raw.strip():
        return None, LineProblem(file, number, "empty line")
    if not isinstance(obj, dict):
        return None, LineProblem(file, number, "not a JSON object")
    return obj, None


Decode = Callable[[bytes, int, bool], "tuple[dict[str, Any] | None, LineProblem | None]"]

# Verdict kinds that judged one attempt (ledger/ties.py): one that names none is placed.
PLACED_KINDS = frozenset(("score", "retrieval_score", "human_verdict"))


class Placer:
    """The attempt a verdict judged when it names none: a line a host wrote by the documented
    shapes, or a ledger older than verdict binding, has no `attempt_event_id`, and its verdict
    judged the attempt of its case on the line before it (an attempt recorded again later is new
    work). Fed every event of one pass in ledger order, it fills that id in and remembers the
    line it placed and the attempt's line, so every reader, validate.py included, reads a
    hand-written ledger as the kit's writers' and can say how many verdicts it placed."""

    def __init__(self) -> None:
        self._attempts: dict[AttemptKey, tuple[str, int | None]] = {}  # key -> latest attempt
        self.placed: dict[int, int | None] = {}  # a placed verdict's line -> its attempt's line

    def take(self, event: dict[str, Any], number: int | None) -> None:
        kind = event.get("kind")
        if type(kind) is not str:  # a hand-broken line's kind may be anything, a list included
            return
        if kind == "attempt":
            key, eid = well_formed_key(event), event.get("event_id")
            if key is not None and isinstance(eid, str):
                self._attempts[key] = (eid, number)
        elif kind in PLACED_KINDS and event.get("attempt_event_id") is None:
            key = well_formed_key(event)
            before = self._attempts.get(key) if key is not None else None
            if before is not None:
                event["attempt_event_id"] = before[0]
                if number is not None:
                    self.placed[number] = before[1]


class LineDecoder:
    """`decode_line` for one pass over one ledger, in line order, with the public eval loop's lines
    read as kit events (`public_loop`): the one decoding every reader of a ledger uses.

    A public tool call's place among its attempt's calls depends on the lines before it, so one
    decoder serves one pass. `decode` replaces the plain decode (a reader that needs only some
    fields cuts the rest first); with `refuse` (the ledger's path), a public-loop line that cannot
    be placed on an attempt raises InputError naming it (exit 3) instead of being a problem."""

    def __init__(self, file: str = EVENTS_FILE, decode: Decode | None = None,
                 refuse: str | Path | None = None) -> None:
        self.file = file
        self._decode = decode
        self._refuse = refuse
        self._public: public_loop.Normaliser | None = None
        self.public_lines: list[int] = []  # lines written by the public loop, read as kit events
        self.placer = Placer()  # kit lines: a verdict naming no attempt is placed on its own

    def __call__(self, raw: bytes, number: int, torn: bool
                 ) -> tuple[dict[str, Any] | None, LineProblem | None]:
        if self._decode is None:
            event, problem = decode_line(raw, number, torn, self.file)
        else:
            event, problem = self._decode(raw, number, torn)
        if event is None:
            return event, problem
        if "event_id" in event:  # public_loop.is_public_line, inlined: hot
            self.placer.take(event, number)
            return event, problem
        if self._public is None:
            self._public = public_loop.Normaliser(self.file)
        event, public_problem = self._public.take(event, number)
        if public_problem is not None:
            if self._refuse is not None:
                raise InputError(self._refuse, number, public_problem.message)
            return None, problem or public_problem
        self.public_lines.append(number)
        return event, problem


def snapshot_end(fd: int) -> int:
    """The ledger's size at a moment no append is under way, taken under the shared lock the
    writers respect. Appends only add past it and nothing rewrites a line, so every byte before it
    belongs to a whole batch: reading up to it needs no lock, and another process appending while
    it is read cannot make a false torn line."""
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        return os.fstat(fd).st_size
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def iter_chunks(fh: BinaryIO, start: int, end: int) -> Iterator[tuple[bytes, bool]]:
    """The bytes between `start` and `end` of an open ledger in chunks of whole lines (each chunk
    ends in a newline), and last, when `end` does not follow a newline, the torn tail alone with
    True. Streams, so memory follows the chunk and the longest line, never the file."""
    fh.seek(start)
    pos, carry = start, b""
    while pos < end:
        block = fh.read(min(_BLOCK, end - pos))
        if not block:
            break
        pos += len(block)
        cut = block.rfind(b"\n") + 1
        if not cut:
            carry += block
            continue
        yield (carry + block[:cut] if carry else block[:cut]), False
        carry = block[cut:]
    if carry:
        yield carry, True


def iter_blocks(fh: BinaryIO, start: int, end: int) -> Iterator[tuple[list[bytes], bool]]:
    """`iter_chunks` split into lines (without their newlines)."""
    for chunk, torn in iter_chunks(fh, start, end):
        lines = chunk.split(b"\n")
        if not torn:
            lines.pop()  # the empty string after the chunk's last newline
        yield lines, torn


def iter_lines(fh: BinaryIO, start: int, end: int) -> Iterator[tuple[bytes, bool]]:
    """Each line between byte `start` and `end` of an open ledger, without its newline, with
    whether it is torn (see `iter_blocks`)."""
    for lines, torn in iter_blocks(fh, start, end):
        for line in lines:
            yield line, torn


def parse_ledger(data: bytes, file: str = EVENTS_FILE) -> LedgerRead:
    """Parse ledger bytes: every line that is a whole JSON object becomes an event; others are problems."""
    with gc_paused():
        return _collect(_split(data), LineDecoder(file))


def _split(data: bytes) -> Iterator[tuple[bytes, bool]]:
    # Split on b"\n" only: str.splitlines would also split on U+2028 inside a JSON string.
    lines = data.split(b"\n")
    last = lines.pop()
    for line in lines:
        yield line, False
    if last:
        yield last, True


def _collect(lines: Iterable[tuple[bytes, bool]], decode: LineDecoder) -> LedgerRead:
    events: list[dict[str, Any]] = []
    numbers: list[int] = []
    problems: list[LineProblem] = []
    for number, (raw, torn) in enumerate(lines, start=1):
        event, problem = decode(raw, number, torn)
        if problem is not None:
            problems.append(problem)
        if event is not None:
            events.append(event)
            numbers.append(number)
    return LedgerRead(events, problems, numbers, decode.public_lines)


def read_ledger(path: str | Path) -> LedgerRead:
    """Read an events.jsonl tolerantly, up to a size taken under the writers' lock (`snapshot_end`)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            end = snapshot_end(fh.fileno())
            with gc_paused():
                # A public-loop line the kit cannot place on an attempt: stop rather than guess.
                return _collect(iter_lines(fh, 0, end), LineDecoder(path.name, refuse=path))
    except FileNotFoundError:
        return LedgerRead([], [LineProblem(path.name, None, "missing")], [])
    except OSError as exc:
        # Present but unreadable (a folder, no permission): could not measure, never a traceback.
        raise InputError(path, None, f"cannot be read: {exc.strerror or exc}") from None


def latest_issue_status(events: Iterable[dict[str, Any]]) -> dict[str, str]:
    """issue_id -> its latest status, from live events (the latest per issue wins)."""
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
    scored: bool = True              # False: no live score tied to the attempt (it is unscored)


def human_verdict_applies(score: Mapping[str, Any] | None, human: Mapping[str, Any] | None,
                          attempt: Mapping[str, Any] | None = None) -> bool:
    """Whether a live human_verdict stands in place of this score.

    It needs a live score that was not nulled for a mechanical reason, and it covers only the
    attempt the person judged: a re-recorded attempt (another live attempt event) is new work.
    """
    if human is None or score is None:
        return False
    if score.get("verdict") is None and vocab.null_reason_head(score.get("reason")) in MECHANICAL_NULL_REASONS:
        return False
    if attempt is not None and attempt_untied(human, attempt) is not None:
        return False  # not the attempt the person judged (or names none): new work
    return human.get("verdict") is not None


def effective_verdict(score: Mapping[str, Any] | None, human: Mapping[str, Any] | None = None,
                      attempt: Mapping[str, Any] | None = None) -> EffectiveVerdict:
    """THE rule for an attempt's verdict: its live score's, overridden by a live human_verdict.

    `score`, `human` and `attempt` are the attempt's live events (None when it has none); given
    the attempt, a score or human_verdict that does not name it is not counted. Every summary,
    comparison and report decides an attempt's verdict through this function.
    """
    if score is None or (attempt is not None and attempt_untied(score, attempt) is not None):
        # A score that judged another attempt (or names none) is no verdict on this one: the
        # reader holding the run's view applies the whole tie rule (`LiveView.tied_score`).
        return EffectiveVerdict(None, None, None, scored=False)
    judge = score.get("verdict")
    if human_verdict_applies(score, human, attempt):
        assert human is not None
        gold = human.get("gold_status") or score.get("gold_status")
        return EffectiveVerdict(human["verdict"], None, gold, str(human.get("settled_by") or "?"),
                                judge)
    return EffectiveVerdict(judge, score.get("reason"), score.get("gold_status"), None, judge)
