"""The run folder: run.json, the append-only ledger `events.jsonl`, and write-once artifacts (SPEC 3).

Writers go through `Run.append`, which validates every event against its kind's schema, keeps one
phase per run and one live score / retrieval_score per attempt key, and writes each batch of whole
lines with one `write` under an exclusive lock, then fsyncs, so concurrent writers never interleave
or tear lines. Nothing rewrites or deletes a line: a `void` event retracts one. The rules about
other events are checked against an index the appender keeps per Run: it streams only the bytes
appended since its last look (by any process) and holds ids, voids and the live score ids, never
the events, so appending to a 200,000-event ledger costs about a second and a few MiB.

Readers are tolerant (`read_ledger`): a torn last line (a crash mid-write) is reported as
`events.jsonl:N: torn line` and the whole events before it are returned. `validate_run` is the
strict check behind validate.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import re
import uuid
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import accumulate, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import schemas, vocab
from .errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, InputError, KitError

if TYPE_CHECKING:
    from .sets import EvalSet

RUN_FILE = "run.json"
EVENTS_FILE = "events.jsonl"
ARTIFACTS_DIR = "artifacts"
SCHEMA_VERSION = 1
NULL_SAMPLE_SEGMENT = "_"
UNIQUE_KINDS = ("score", "retrieval_score")  # at most one live per attempt key (SPEC 3 rule 5)
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
    raise InputError(None, None, f"sample {sample!r} must be a non-negative integer or null")


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


# --------------------------------------------------------------------------------------------
# reading

@dataclass(frozen=True)
class LineProblem:
    """A problem found in a file of a run or set folder, naming the file and, when known, the line."""

    file: str             # file name relative to the folder, e.g. "events.jsonl"
    line: int | None
    message: str
    level: str = "error"  # "error" or "warning"

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class LedgerRead:
    """What a tolerant read of events.jsonl found: the whole events, and the lines it could not use."""

    events: list[dict[str, Any]]
    problems: list[LineProblem]
    line_numbers: list[int] = field(default_factory=list)  # 1-based line of each event

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
        return _parse_ledger(data, file)


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
    return parse_ledger(data, path.name)


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
# the run

# The appender's index (rules 5 and void targets) streams the ledger and keeps what the rules need:
# every id as a hash and an offset (16 bytes an event), and, for voids and the two unique kinds, the
# ids themselves. It never holds the events, so its memory follows attempts and voids, not lines.
_INDEX_CHUNK = 1 << 20
# A line the kit wrote starts `{"kind":"<kind>","event_id":"<id>",` (json.dumps keeps _prepare's key
# order). For such a line of a kind the rules ignore, the id is all the index needs, so it is cut
# out of the bytes instead of decoding the whole line (4x cheaper on get_context lines). Anything
# else, hand-written lines included, is decoded with json.loads.
_KIT_LINE = re.compile(rb'\{"kind":"([a-z_]+)","event_id":"([!#-\[\]-~]+)",')
_RULED_KINDS = frozenset({b"void", *(k.encode() for k in UNIQUE_KINDS)})


def _id_hash(event_id: str) -> int:
    """The table hash of an event id: the hash of its UTF-8 bytes (what a kit line holds raw)."""
    return hash(event_id.encode("utf-8", "surrogatepass"))


def _decode_line(line: bytes) -> dict[str, Any] | None:
    """The event on one ledger line, or None when the line is not a whole JSON object (as parse_ledger)."""
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _line_at(fd: int, offset: int) -> bytes:
    """The line starting at byte `offset` of the open file, without its newline."""
    parts: list[bytes] = []
    while True:
        chunk = os.pread(fd, 1 << 16, offset)
        if not chunk:
            break
        nl = chunk.find(b"\n")
        if nl >= 0:
            parts.append(chunk[:nl])
            break
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


class _IdTable:
    """Every event id of the ledger as a hash, beside the byte offset of its line.

    Two flat arrays, 16 bytes an event, where a set of id strings costs about 120: the index's
    only per-event memory. Appending is C-speed `extend`; a lookup is one pass over the hashes for
    a whole batch, then the candidate lines are read back, so answers stay exact.
    """

    def __init__(self) -> None:
        self.hashes = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.hashes)

    def add(self, h: int, offset: int) -> None:
        """Record that the line at `offset` holds an event whose id hashes to `h`."""
        self.hashes.append(h)
        self.offsets.append(offset)

    def extend(self, hashes: list[int], offsets: list[int]) -> None:
        """`add` over parallel lists."""
        self.hashes.extend(hashes)
        self.offsets.extend(offsets)

    def candidates(self, wanted: set[int]) -> list[int]:
        """Offsets of the lines whose id hash is in `wanted` (one pass, however many are wanted)."""
        offsets = self.offsets
        return [offsets[i] for i, h in enumerate(self.hashes) if h in wanted]


class _Index:
    """What an appender must know of the ledger to enforce rule 5 and void targets, read incrementally.

    `refresh` (under the append lock) reads only the bytes past `offset`, the end of the last line
    it took in; it starts over when the file is another file (inode) or shorter than `offset`.
    """

    def __init__(self) -> None:
        self.file: tuple[int, int] | None = None  # (st_dev, st_ino) of the file indexed
        self.offset = 0
        self.ids = _IdTable()
        self.void_ids: set[str] = set()  # ids of void events (a void is never voided)
        self.voided: set[str] = set()
        self.live_unique: dict[tuple[str, AttemptKey], str] = {}
        self.unique_key_of: dict[str, tuple[str, AttemptKey]] = {}  # live unique events only

    def add(self, event: dict[str, Any], offset: int) -> None:
        """Take in one event whose line starts at byte `offset`."""
        eid = event.get("event_id")
        if isinstance(eid, str):
            self.ids.add(_id_hash(eid), offset)
            self._take_rules(event, eid)

    def _take_rules(self, event: dict[str, Any], eid: str) -> None:
        """What rule 5 and void targets need of an event already in the id table."""
        kind = event.get("kind")
        if kind == "void":
            self.void_ids.add(eid)
            target = event.get("target_event_id")
            if not isinstance(target, str):
                return
            self.voided.add(target)
            slot = self.unique_key_of.pop(target, None)
            if slot and self.live_unique.get(slot) == target:
                del self.live_unique[slot]
        elif kind in UNIQUE_KINDS and (key := _well_formed_key(event)) is not None:
            slot = (kind, key)
            old = self.live_unique.get(slot)
            if old is not None:  # a hand-made second live one: the later wins, as in validate
                self.unique_key_of.pop(old, None)
            self.live_unique[slot] = eid
            self.unique_key_of[eid] = slot

    def add_line(self, line: bytes, offset: int) -> None:
        """Take in one ledger line (without its newline) starting at byte `offset`."""
        self._take_block(line + b"\n", offset)

    def refresh(self, fd: int) -> bytes:
        """Take in the whole lines past `offset` of the locked file `fd`; return the bytes after the
        last newline (a torn line, usually empty), which the caller decides about."""
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.file or st.st_size < self.offset:
            self.__init__()  # type: ignore[misc]  # another file, or a rewritten one: start over
            self.file = (st.st_dev, st.st_ino)
        pos, end, carry = self.offset, st.st_size, b""
        while pos < end:
            chunk = os.pread(fd, min(_INDEX_CHUNK, end - pos), pos)
            if not chunk:
                break
            pos += len(chunk)
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n") + 1
            carry = buf[cut:]
            if cut:
                self.offset = self._take_block(buf if cut == len(buf) else buf[:cut],
                                               pos - len(buf))
        return carry

    def _take_block(self, block: bytes, start: int) -> int:
        """Take in a block of whole lines, each ending in a newline, from byte `start`; returns the
        offset past it.

        This runs over every line of the ledger, so the common case is decided for the block at
        once: when every line has the kit's prefix, ends in `}` and the block holds exactly one
        `"kind"` and one `"event_id"` per line, no line repeats either key (json.loads would take
        the repeat) and only lines of the ruled kinds (voids, scores) need decoding; the others give
        their id straight from the bytes. Other blocks go line by line, decoding every line not in
        the kit's shape."""
        lines = block.split(b"\n")
        lines.pop()  # the empty string after the last newline
        starts = list(accumulate([len(line) + 1 for line in lines], initial=start))
        matches = list(map(_KIT_LINE.match, lines))
        n = len(lines)
        if (None not in matches and all(map(bytes.endswith, lines, repeat(b"}")))
                and block.count(b'"kind"') == n and block.count(b'"event_id"') == n):
            self.ids.extend([hash(m[2]) for m in matches], starts[:-1])
            ruled = _RULED_KINDS
            for i in [i for i, m in enumerate(matches) if m[1] in ruled]:
                event = _decode_line(lines[i])
                if event is not None:  # else its id stays in the table; `existing` reads it back
                    self._take_rules(event, event["event_id"])
            return starts[-1]
        for line, m, offset in zip(lines, matches, starts, strict=False):
            if (m is not None and m[1] not in _RULED_KINDS and line.endswith(b"}")
                    and line.count(b'"kind"') == 1 and line.count(b'"event_id"') == 1):
                self.ids.add(hash(m[2]), offset)
            elif line:
                event = _decode_line(line)
                if event is not None:
                    self.add(event, offset)
        return starts[-1]

    def existing(self, fd: int, event_ids: set[str]) -> set[str]:
        """Which of `event_ids` the indexed ledger holds (exact: candidate lines are read back)."""
        found = {i for i in event_ids if i in self.void_ids or i in self.unique_key_of}
        rest = event_ids - found
        if rest:
            for offset in self.ids.candidates({_id_hash(i) for i in rest}):
                event = _decode_line(_line_at(fd, offset))
                eid = event.get("event_id") if event is not None else None
                if isinstance(eid, str) and eid in rest:
                    found.add(eid)
        return found


class Run:
    """One run folder: its run.json, its ledger and its artifacts."""

    def __init__(self, directory: Path, info: dict[str, Any]):
        self.dir = directory
        self._info = info
        self._index: _Index | None = None

    # ---- creating and opening

    @classmethod
    def create(cls, out_dir: str | Path, eval_set: EvalSet | str | Path, answerer_model: str,
               phase: str = "baseline", run_id: str | None = None, **pins: Any) -> Run:
        """Make a new run folder at `out_dir` (run.json + an empty ledger); refuses an existing run."""
        from . import __version__
        from .sets import EvalSet, load_set

        es = eval_set if isinstance(eval_set, EvalSet) else load_set(Path(eval_set))
        out = Path(out_dir).resolve()
        if phase not in vocab.PHASES:
            raise InputError(None, None, f"phase {phase!r} is not one of {list(vocab.PHASES)}")
        if (out / RUN_FILE).exists():
            raise InputError(out / RUN_FILE, None, "already exists: this folder is a run; "
                                                   "choose a new --out")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InputError(out, None, "exists and is not an empty folder; choose a new --out")
        started = now()
        if run_id is None:
            stamp = started[:19].replace("-", "").replace(":", "")
            run_id = f"{es.name}-{phase}-{stamp}Z"
        if not vocab.QID_RE.fullmatch(run_id):
            raise InputError(None, None, f"run id {run_id!r} is not a safe id "
                                         f"(allowed: {vocab.QID_PATTERN})")
        config = es.config
        info: dict[str, Any] = {
            "runId": run_id, "phase": phase, "started": started, "answererModel": answerer_model,
            "setName": es.name, "datasetVersion": config.get("datasetVersion"),
            "schemaVersion": SCHEMA_VERSION, "datasetSha": es.dataset_sha, "kitVersion": __version__,
            "environment": config.get("environment") or "samples",
            "package": config.get("targetPackage"), "modelPath": config.get("targetModelPath"),
        }
        for key in ("mcpUrl", "publisherUrl"):
            if isinstance(config.get(key), str):
                info[key] = config[key]
        info.update(pins)
        problems = schemas.validate("run", info)
        if problems:
            raise schemas.SchemaViolation("run.json", problems, out / RUN_FILE)
        out.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(out / RUN_FILE, info)
        (out / EVENTS_FILE).touch()
        return cls(out, info)

    @classmethod
    def open(cls, directory: str | Path) -> Run:
        """Open an existing run folder; raises InputError (exit 3) when it has no readable run.json."""
        d = Path(directory).resolve()
        if not d.is_dir():
            raise InputError(directory, None, "not a folder")
        info = _load_run_json(d / RUN_FILE)
        if info.get("phase") not in vocab.PHASES:
            raise InputError(d / RUN_FILE, None, f"phase: {info.get('phase')!r} is not one of "
                                                 f"{list(vocab.PHASES)}")
        return cls(d, info)

    # ---- identity

    @property
    def info(self) -> dict[str, Any]:
        """A copy of run.json as last read or written."""
        return dict(self._info)

    @property
    def phase(self) -> str:
        """The run's one phase; every case-scoped event carries it."""
        return self._info["phase"]

    @property
    def run_id(self) -> str:
        """run.json's runId (the folder name if a hand-made run.json lacks it)."""
        return self._info.get("runId", self.dir.name)

    @property
    def events_path(self) -> Path:
        """`<run>/events.jsonl`."""
        return self.dir / EVENTS_FILE

    @property
    def info_path(self) -> Path:
        """`<run>/run.json`."""
        return self.dir / RUN_FILE

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r}, phase={self.phase!r})"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """An exclusive lock on events.jsonl, held by the fd yielded (opened for appending)."""
        fd = os.open(self.events_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def update_info(self, **pins: Any) -> dict[str, Any]:
        """Set run.json pins (refusing unknown keys and identity keys); rewrites it atomically."""
        known = schemas.known_fields("run")
        for key in pins:
            if key not in known:
                raise InputError(self.info_path, None, f"{key}: unknown run.json key "
                                                       f"(known: {', '.join(sorted(known))})")
            if key in IDENTITY_KEYS:
                raise InputError(self.info_path, None, f"{key}: part of the run's identity; "
                                                       "start a new run instead")
        with self._locked():
            info = _load_run_json(self.info_path)
            info.update(pins)
            problems = schemas.validate("run", info)
            errors = [p for p in problems if p.field.split(".")[0].split("[")[0] in pins
                      or not p.unknown]
            if errors:
                raise schemas.SchemaViolation("run.json", errors, self.info_path)
            _write_json_atomic(self.info_path, info)
            self._info = info
        return dict(info)

    # ---- appending

    def _prepare(self, event: dict[str, Any]) -> dict[str, Any]:
        """A validated copy of `event` with event_id, at and (for case-scoped kinds) phase filled in."""
        if not isinstance(event, dict):
            raise LedgerError(self.events_path, None, f"an event must be a dict, not {type(event).__name__}")
        kind = event.get("kind")
        out: dict[str, Any] = {"kind": kind, "event_id": event.get("event_id") or new_event_id(),
                               "at": event.get("at") or now()}
        if kind in vocab.CASE_SCOPED_KINDS:
            check_qid(event.get("qid"))
            if "sample" not in event:
                raise schemas.SchemaViolation(kind, [schemas.Problem("sample", "required field missing "
                                              "(null for a case answered once)")], self.events_path)
            phase = event.get("phase", self.phase)
            if phase != self.phase:
                raise LedgerError(self.events_path, None,
                                  f"{kind}: phase {phase!r} differs from the run's phase "
                                  f"{self.phase!r}; a run has one phase")
            out.update(qid=event["qid"], sample=event["sample"], phase=phase)
        for key, value in event.items():
            out.setdefault(key, value)
        problems = schemas.validate_event(out)
        if problems:
            raise schemas.SchemaViolation(kind if kind in vocab.EVENT_KINDS else "event", problems,
                                          self.events_path)
        return out

    def _check_batch(self, batch: list[dict[str, Any]], index: _Index, fd: int,
                     supplied: set[str]) -> None:
        """Refuse duplicate ids, bad void targets and a second live score per key (rule 5).

        `supplied` holds the ids callers chose; a fresh uuid4 id cannot repeat, so it is not looked up.
        """
        batch_ids = {e["event_id"] for e in batch}
        targets = {e["target_event_id"] for e in batch if e["kind"] == "void"}
        known = index.existing(fd, supplied | (targets - batch_ids))
        # Overlays on the index, so a big ledger's index is not copied for every append.
        ids: set[str] = set()
        kinds: dict[str, str] = {}
        voided: set[str] = set()
        live: dict[tuple[str, AttemptKey], str | None] = {}  # None: freed by a void in this batch
        key_of: dict[str, tuple[str, AttemptKey]] = {}

        def live_id(slot: tuple[str, AttemptKey]) -> str | None:
            return live[slot] if slot in live else index.live_unique.get(slot)

        for e in batch:
            eid, kind = e["event_id"], e["kind"]
            if eid in ids or eid in known:
                raise LedgerError(self.events_path, None, f"event_id {eid!r} is already in the ledger")
            if kind == "void":
                target = e["target_event_id"]
                if target not in ids and target not in known:
                    raise LedgerError(self.events_path, None,
                                      f"void: target_event_id {target!r} is not an event of this ledger")
                if kinds.get(target) == "void" or target in index.void_ids:
                    raise LedgerError(self.events_path, None, f"void: {target!r} is itself a void; "
                                                              "append the retracted event again instead")
                if target in voided or target in index.voided:
                    raise LedgerError(self.events_path, None, f"void: {target!r} is already voided")
                voided.add(target)
                slot = key_of.get(target) or index.unique_key_of.get(target)
                if slot and live_id(slot) == target:
                    live[slot] = None
            elif kind in UNIQUE_KINDS:
                slot = (kind, attempt_key(e))
                existing = live_id(slot)
                if existing is not None:
                    qid, sample, phase = slot[1]
                    raise LedgerError(self.events_path, None,
                                      f"{kind}: attempt ({qid}, sample {sample}, {phase}) already has "
                                      f"a live {kind} ({existing}); void it in the same batch first")
                live[slot] = eid
                key_of[eid] = slot
            ids.add(eid)
            kinds[eid] = kind

    def append(self, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Validate and append a batch of events atomically; returns them as written (ids, times)."""
        events = list(events)
        batch = [self._prepare(e) for e in events]
        if not batch:
            return []
        try:
            lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":"),
                                allow_nan=False).encode("utf-8") + b"\n" for e in batch]
        except (ValueError, TypeError) as exc:  # NaN, infinity, or a value JSON has no type for
            raise LedgerError(self.events_path, None, f"event is not valid JSON: {exc}") from None
        data = b"".join(lines)
        lengths = [len(line) for line in lines]  # the index needs where each line starts
        del lines  # the joined copy is enough: a batch of 10,000 rows is ~15 MB of lines
        # The index is only needed for rules about other events; plain appends skip reading the file.
        # A caller-supplied event_id must be checked for uniqueness; uuid4 ids need no check.
        supplied = {e["event_id"] for e, src in zip(batch, events, strict=True) if src.get("event_id")}
        needs_index = bool(supplied) or any(e["kind"] in ("void", *UNIQUE_KINDS) for e in batch)
        with self._locked() as fd:
            index = None
            if needs_index:
                index = self._index if self._index is not None else _Index()
                self._index = index
                tail = index.refresh(fd)
                if tail:
                    # A last line without its newline: this batch starts with a newline, which
                    # makes that line whole, so it counts (readers take it when it parses). The
                    # index keeps it only if the batch is written: a refused batch drops the index.
                    self._index = None
                    index.add_line(tail, index.offset)
                self._check_batch(batch, index, fd, supplied)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # A torn last line: start on a fresh line so this batch is not glued onto it.
                data = b"\n" + data
            view = memoryview(data)
            while view:  # one write in practice; loop only if the kernel writes short (disk full)
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
            if index is not None:
                offset = size + len(data) - sum(lengths)  # past a leading newline, if one was added
                for e, length in zip(batch, lengths, strict=True):
                    index.add(e, offset)
                    offset += length
                index.offset = offset
                self._index = index
        return batch

    def append_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """Append one event; returns it as written."""
        return self.append([event])[0]

    def void(self, event_id: str, reason: str) -> dict[str, Any]:
        """Append a void retracting `event_id`."""
        return self.append_event({"kind": "void", "target_event_id": event_id, "reason": reason})

    # ---- reading

    def read(self) -> LedgerRead:
        """Every whole event of the ledger and the problems of the lines that are not (tolerant)."""
        return read_ledger(self.events_path)

    def live(self) -> list[dict[str, Any]]:
        """The live events (voids applied), in ledger order."""
        return live_view(self.read().events)

    def _live_for(self, kind: str, qid: str, sample: int | None,
                  events: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        events = self.live() if events is None else events
        key = (qid, sample, self.phase)
        return [e for e in events if e.get("kind") == kind and attempt_key(e) == key]

    def attempt(self, qid: str, sample: int | None, events: list[dict[str, Any]] | None = None
                ) -> dict[str, Any] | None:
        """The latest live attempt event of (qid, sample) in this run's phase, or None."""
        found = self._live_for("attempt", qid, sample, events)
        return found[-1] if found else None

    def attempts(self, events: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """One live attempt per key (the latest), in order of first appearance."""
        events = self.live() if events is None else events
        return list(latest_by_key(events, "attempt").values())

    def tool_calls(self, qid: str, sample: int | None, events: list[dict[str, Any]] | None = None
                   ) -> list[dict[str, Any]]:
        """The live tool_call events of (qid, sample), ordered by call_index."""
        calls = self._live_for("tool_call", qid, sample, events)
        return sorted(calls, key=lambda e: e.get("call_index") if isinstance(e.get("call_index"), int)
                      else 0)

    def score(self, qid: str, sample: int | None, events: list[dict[str, Any]] | None = None
              ) -> dict[str, Any] | None:
        """The live score of (qid, sample), or None."""
        found = self._live_for("score", qid, sample, events)
        return found[-1] if found else None

    def retrieval_score(self, qid: str, sample: int | None,
                        events: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The live retrieval_score of (qid, sample), or None."""
        found = self._live_for("retrieval_score", qid, sample, events)
        return found[-1] if found else None

    # ---- artifacts

    def artifact_dir(self, qid: str, sample: int | None) -> Path:
        """`<run>/artifacts/<qid>/<sample or _>/`, built only from a validated qid and sample."""
        d = self.dir / ARTIFACTS_DIR / check_qid(qid) / sample_segment(sample)
        if not d.resolve().is_relative_to(self.dir.resolve()):  # defence in depth against symlinks
            raise InputError(d, None, "resolves outside the run folder")
        return d

    def write_artifact(self, qid: str, sample: int | None, name: str, data: bytes | str | dict | list
                       ) -> Path:
        """Write a new artifact file, never overwriting: a second `x.csv` becomes `x.2.csv`, then `x.3.csv`."""
        segments = _check_name(name)
        parent = self.artifact_dir(qid, sample).joinpath(*segments[:-1])
        parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, (dict, list)):
            data = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        n = 1
        while True:
            target = parent / (segments[-1] if n == 1 else _numbered(segments[-1], n))
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                n += 1
                continue
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            return target

    def new_artifact_dir(self, qid: str, sample: int | None, name: str) -> Path:
        """Create a fresh artifact folder: `judge/`, or `judge.2/` when that exists, and so on."""
        segments = _check_name(name)
        parent = self.artifact_dir(qid, sample).joinpath(*segments[:-1])
        parent.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            target = parent / (segments[-1] if n == 1 else _numbered(segments[-1], n))
            try:
                target.mkdir()
            except FileExistsError:
                n += 1
                continue
            return target

    def relpath(self, path: str | Path) -> str:
        """`path` relative to the run folder, as recorded in events (posix separators)."""
        return Path(path).resolve().relative_to(self.dir.resolve()).as_posix()

    def resolve(self, relative: str) -> Path:
        """The absolute path of an artifact path recorded in an event; refuses one outside the run."""
        try:
            p = (self.dir / relative).resolve()
        except (OSError, ValueError, RuntimeError) as exc:  # NUL byte, symlink loop, name too long
            raise InputError(relative, None, f"cannot be resolved: {exc}") from None
        if not p.is_relative_to(self.dir.resolve()):
            raise InputError(relative, None, "points outside the run folder")
        return p


def _load_run_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, None, "missing: not a run folder (create one with new_run.py)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot be read: {exc}") from None
    try:
        info = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, f"not valid JSON: {exc.msg}") from None
    if not isinstance(info, dict):
        raise InputError(path, None, "must be a JSON object")
    return info


def _write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temp file beside `path`, fsync, then rename over it: readers never see half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=2)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------
# validation (validate.py)

@dataclass(frozen=True)
class RunCheck:
    """What validate found in one run folder."""

    dir: str
    readable: bool
    events: int
    errors: list[str]
    warnings: list[str]

    @property
    def status(self) -> str:
        if not self.readable:
            return "unreadable"
        return "invalid" if self.errors else "ok"

    @property
    def exit_code(self) -> int:
        if not self.readable:
            return EXIT_UNMEASURED
        return EXIT_FINDING if self.errors else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"dir": self.dir, "status": self.status, "events": self.events,
                "errors": self.errors, "warnings": self.warnings}


@dataclass(frozen=True)
class ValidationReport:
    """validate.py's result over several run folders."""

    runs: list[RunCheck]

    @property
    def exit_code(self) -> int:
        codes = [r.exit_code for r in self.runs]
        if EXIT_UNMEASURED in codes:
            return EXIT_UNMEASURED
        return EXIT_FINDING if EXIT_FINDING in codes else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.exit_code == EXIT_OK, "exit_code": self.exit_code,
                "runs": [r.to_json() for r in self.runs]}


def validate_run(directory: str | Path) -> RunCheck:
    """Check one run folder strictly: run.json, every line, phases, voids, one live score per key."""
    d = Path(directory)
    errors: list[LineProblem] = []
    warnings: list[LineProblem] = []
    if not d.is_dir():
        return RunCheck(str(directory), False, 0, [f"{directory}: not a folder"], [])
    try:
        os.listdir(d)
    except OSError as exc:
        return RunCheck(str(directory), False, 0, [f"{directory}: cannot be read: {exc.strerror}"], [])

    phase = None
    try:
        info = _load_run_json(d / RUN_FILE)
    except InputError as exc:
        errors.append(LineProblem(RUN_FILE, exc.line, exc.message))
    else:
        phase = info.get("phase")
        for p in schemas.validate("run", info):
            (warnings if p.unknown else errors).append(LineProblem(RUN_FILE, None, str(p)))

    try:
        with (d / EVENTS_FILE).open("rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        errors.append(LineProblem(EVENTS_FILE, None, "missing"))
        data = None
    except OSError as exc:
        return RunCheck(str(directory), False, 0,
                        [f"{EVENTS_FILE}: cannot be read: {exc.strerror}"], [])
    n_events = 0
    if data is not None:
        read = parse_ledger(data)
        n_events = len(read.events)
        errors.extend(read.problems)
        e_more, w_more = _check_events(read, phase)
        errors.extend(e_more)
        warnings.extend(w_more)
    errors.sort(key=lambda p: (p.file != RUN_FILE, p.line or 0))
    warnings.sort(key=lambda p: (p.file != RUN_FILE, p.line or 0))
    return RunCheck(str(directory), True, n_events, [str(p) for p in errors],
                    [str(p) for p in warnings])


def _check_events(read: LedgerRead, phase: str | None) -> tuple[list[LineProblem], list[LineProblem]]:
    """Per-event schema checks and the cross-event rules of SPEC 3 (phase, voids, rule 5)."""
    errors: list[LineProblem] = []
    warnings: list[LineProblem] = []
    first_line: dict[str, int] = {}
    kind_of: dict[str, Any] = {}
    for event, line in zip(read.events, read.line_numbers, strict=True):
        eid = event.get("event_id")
        if isinstance(eid, str):
            if eid in first_line:
                errors.append(LineProblem(EVENTS_FILE, line, f"event_id {eid!r} repeats line "
                                                             f"{first_line[eid]}"))
            else:
                first_line[eid] = line
                kind_of[eid] = event.get("kind")
    voided: dict[str, int] = {}
    live_unique: dict[tuple[str, AttemptKey], tuple[str, int]] = {}
    slots: dict[str, tuple[str, AttemptKey]] = {}
    for event, line in zip(read.events, read.line_numbers, strict=True):
        kind = event.get("kind")
        label = kind if isinstance(kind, str) else "event"
        for p in schemas.validate_event(event):
            (warnings if p.unknown else errors).append(LineProblem(EVENTS_FILE, line, f"{label}: {p}"))
        if kind in vocab.CASE_SCOPED_KINDS:
            if "qid" in event and not vocab.is_qid(event["qid"]):
                errors.append(LineProblem(EVENTS_FILE, line, f"{label}: qid: {event['qid']!r} is not "
                                                             "a safe id"))
            if phase is not None and "phase" in event and event["phase"] != phase:
                errors.append(LineProblem(EVENTS_FILE, line, f"{label}: phase {event['phase']!r} differs "
                                                             f"from run.json's {phase!r}"))
        if kind == "attempt":
            rc, htu = event.get("reported_calls"), event.get("host_tool_uses")
            if isinstance(rc, int) and isinstance(htu, int) and rc > htu:
                warnings.append(LineProblem(EVENTS_FILE, line, f"attempt {event.get('qid')}: "
                                            f"reported_calls {rc} > host_tool_uses {htu} (the host "
                                            "log misses calls; check_contamination treats this as "
                                            "contamination)"))
        if kind == "issue":
            errors.extend(_unknown_cause_codes(event, line))
        if kind == "void":
            target = event.get("target_event_id")
            if isinstance(target, str):
                tline = first_line.get(target)
                if tline is None:
                    errors.append(LineProblem(EVENTS_FILE, line, f"void: target_event_id {target!r} "
                                                                 "is not an event of this ledger"))
                elif tline > line:
                    errors.append(LineProblem(EVENTS_FILE, line, f"void: target {target!r} comes "
                                                                 f"later (line {tline})"))
                elif kind_of.get(target) == "void":
                    errors.append(LineProblem(EVENTS_FILE, line, f"void: target {target!r} (line "
                                                                 f"{tline}) is itself a void"))
                else:
                    voided[target] = line
                    slot = slots.get(target)
                    if slot and live_unique.get(slot, ("", 0))[0] == target:
                        del live_unique[slot]
        elif (kind in UNIQUE_KINDS and isinstance(event.get("event_id"), str)
              and (key := _well_formed_key(event)) is not None):
            slot = (kind, key)
            if slot in live_unique:
                qid, sample, ph = slot[1]
                errors.append(LineProblem(EVENTS_FILE, line, f"{kind}: a second live {kind} for "
                                          f"({qid}, sample {sample}, {ph}); line "
                                          f"{live_unique[slot][1]} is not voided"))
            live_unique[slot] = (event["event_id"], line)
            slots[event["event_id"]] = slot
    return errors, warnings


def _unknown_cause_codes(event: dict[str, Any], line: int) -> list[LineProblem]:
    """Codes an issue names that are not rows of the eval-diagnose table: the schema checks only
    their spelling, membership comes from the table (SPEC 3)."""
    from .codes import load_codes

    named = [event.get("primary_code"), *(event.get("contributing_codes") or [])]
    named = [c for c in named if isinstance(c, str)]
    if not named:
        return []
    try:
        table = load_codes()
    except KitError as exc:
        return [LineProblem(EVENTS_FILE, line, f"issue: cannot check its codes: {exc}")]
    return [LineProblem(EVENTS_FILE, line, f"issue {event.get('issue_id')!r}: cause code {c!r} is "
                                           "not a row of the eval-diagnose table")
            for c in named if c not in table]


def validate_runs(directories: Iterable[str | Path]) -> ValidationReport:
    """validate_run over several folders."""
    return ValidationReport([validate_run(d) for d in directories])
