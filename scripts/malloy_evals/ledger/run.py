"""The run folder: run.json, the append-only ledger `events.jsonl`, and write-once artifacts.

Writers go through `Run.append`, which validates every event against its kind's schema, keeps one
phase per run and one live score / retrieval_score per attempt key, and writes each batch of whole
lines with one `write` under an exclusive lock, then fsyncs, so concurrent writers never interleave
or tear lines. Nothing rewrites or deletes a line: a `void` event retracts one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals import __version__
from malloy_evals.core import commands, files, jsonl, schemas, vocab
from malloy_evals.core.errors import InputError, UnmeasuredError
from malloy_evals.core.redact import redact_url
from malloy_evals.core.words import shown
from malloy_evals.ledger import public_loop
from malloy_evals.ledger.events import (
    ARTIFACTS_DIR,
    EVENTS_FILE,
    IDENTITY_KEYS,
    RUN_FILE,
    SCHEMA_VERSION,
    UNIQUE_KINDS,
    AttemptKey,
    LedgerError,
    LedgerRead,
    check_name,
    check_qid,
    new_event_id,
    now,
    read_ledger,
    sample_segment,
)
from malloy_evals.ledger.index import Index
from malloy_evals.ledger.live import LiveView
from malloy_evals.sets.eval_set import EvalSet, load_set


@dataclass(frozen=True)
class Superseded:
    """What `Run.supersede` wrote: the voids, then the events that replace what they retract."""

    voids: list[dict[str, Any]]
    events: list[dict[str, Any]]


class Run:
    """One run folder: its run.json, its ledger and its artifacts."""

    def __init__(self, directory: Path, info: dict[str, Any]):
        self.dir = directory
        self._info = info
        self._index: Index | None = None

    # ---- creating and opening

    @classmethod
    def create(cls, out_dir: str | Path, eval_set: EvalSet | str | Path, answerer_model: str,
               phase: str = "baseline", run_id: str | None = None, **pins: Any) -> Run:
        """Make a new run folder at `out_dir` (run.json + an empty ledger); refuses an existing run."""

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
                info[key] = redact_url(config[key])  # kept in run.json: never its credentials
        info.update(pins)
        problems = schemas.validate("run", info)
        if problems:
            raise schemas.SchemaViolation("run.json", problems, out / RUN_FILE)
        out.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(out / RUN_FILE, info, out)
        os.close(files.open_append(out / EVENTS_FILE, out))
        return cls(out, info)

    @classmethod
    def open(cls, directory: str | Path) -> Run:
        """Open an existing run folder; raises InputError (exit 3) when it has no readable run.json."""
        d = Path(directory).resolve()
        if not d.is_dir():
            raise InputError(directory, None, "not a folder")
        info = load_run_json(d / RUN_FILE)
        if info.get("phase") not in vocab.PHASES:
            raise InputError(d / RUN_FILE, None, f"phase: {shown(info.get('phase'))} is not one of "
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
        """An exclusive lock on events.jsonl, held by the fd yielded (opened for appending, never
        through a link planted in its place)."""
        fd = files.open_append(self.events_path, self.dir)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextlib.contextmanager
    def holding(self, name: str, who: str) -> Iterator[None]:
        """Hold the run's lock file `name` (one `who` per run at a time) for the block: taken at
        once or never, so a second holder raises UnmeasuredError (exit 3) naming the first (its
        process id, host and start time, written into the file once the lock is held)."""
        path = self.dir / name
        fd = files.open_append(path, self.dir)  # never through a planted link
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    holder = path.read_text(encoding="utf-8", errors="replace").strip()
                except OSError:
                    holder = ""
                raise UnmeasuredError(f"{self.dir}: another {who} holds {name} "
                                      f"({holder or 'holder unknown'}); wait for it to "
                                      "finish") from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{who}: pid {os.getpid()} on {socket.gethostname()} since {now()}\n"
                     .encode())
            yield
        finally:
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
            info = load_run_json(self.info_path)
            info.update(pins)
            problems = schemas.validate("run", info)
            errors = [p for p in problems if p.field.split(".")[0].split("[")[0] in pins
                      or not p.unknown]
            if errors:
                raise schemas.SchemaViolation("run.json", errors, self.info_path)
            _write_json_atomic(self.info_path, info, self.dir)
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

    def _check_batch(self, batch: list[dict[str, Any]], index: Index, fd: int,
                     supplied: set[str]) -> None:
        """Refuse repeated ids and whatever the ledger's rules refuse (`LedgerRules`), taking each
        event into the index's rules as it passes, so later events of the batch see earlier ones.
        A refusal leaves the index half-updated: the caller drops it.

        `supplied` holds the ids callers chose; a fresh uuid4 id cannot repeat, so it is not looked up.
        """
        batch_ids = {e["event_id"] for e in batch}
        targets = {e["target_event_id"] for e in batch if e["kind"] == "void"}
        known = index.existing(fd, supplied | (targets - batch_ids))
        seen: set[str] = set()

        def exists(event_id: str) -> bool:
            return event_id in seen or event_id in known

        for e in batch:
            eid = e["event_id"]
            if exists(eid):
                raise LedgerError(self.events_path, None, f"event_id {eid!r} is already in the ledger")
            refusal = index.rules.refusal(e, exists)
            if refusal is not None:
                if e["kind"] in UNIQUE_KINDS:
                    message = f"{refusal.message} ({refusal.other}); void it in the same batch first"
                elif refusal.other and refusal.other != e["target_event_id"]:
                    message = f"{refusal.message} (by {refusal.other})"
                else:
                    message = refusal.message
                raise LedgerError(self.events_path, None, message)
            index.rules.take(e)
            seen.add(eid)

    def append(self, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Validate and append a batch of events atomically; returns them as written (ids, times)."""
        events = list(events)
        batch = [self._prepare(e) for e in events]
        if not batch:
            return []
        try:
            # backslashreplace: a lone surrogate is written as its \\uXXXX escape, the same
            # string once read back; no other character is affected.
            lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":"),
                                allow_nan=False).encode("utf-8", "backslashreplace") + b"\n"
                     for e in batch]
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
            if os.fstat(fd).st_size and public_loop.first_line_is_public(public_loop.read_head(fd)):
                # Its lines have no ids a void could name, and a mixed file is nobody's format.
                raise LedgerError(self.events_path, 1, public_loop.refusal("appending to it"))
            index = None
            if needs_index:
                index = self._index if self._index is not None else Index()
                tail = index.refresh(fd)
                # Until the batch is written the index may hold what the file does not (a torn
                # last line taken in, the batch's own events): it is kept only once written.
                self._index = None
                if tail:
                    # A last line without its newline: this batch starts with a newline, which
                    # makes that line whole, so it counts (readers take it when it parses).
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
                    index.add_id(e, offset)  # its rules were taken in by _check_batch
                    offset += length
                index.offset = offset
                self._index = index
        return batch

    def append_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """Append one event; returns it as written."""
        return self.append([event])[0]

    def void(self, event_id: str, reason: str) -> dict[str, Any]:
        """Append a void retracting `event_id`."""
        return self.supersede([event_id], [], reason).voids[0]

    def supersede(self, old: Iterable[Mapping[str, Any] | str], new: Iterable[dict[str, Any]],
                  reason: str, reasons: Mapping[str, str] | None = None) -> Superseded:
        """Replace events in one atomic batch: a void (with `reason`, or the one `reasons` gives
        its id) for each `old` event (an event or its id), then the `new` events. Nothing is
        written when any is refused, so the old events stand until their successors are in the
        ledger."""
        ids = list(dict.fromkeys(o if isinstance(o, str) else o["event_id"] for o in old))
        why = reasons or {}
        voids = [{"kind": "void", "target_event_id": i, "reason": why.get(i, reason)} for i in ids]
        written = self.append([*voids, *new])
        return Superseded(voids=written[:len(voids)], events=written[len(voids):])

    # ---- reading

    def read(self) -> LedgerRead:
        """Every whole event of the ledger and the problems of the lines that are not (tolerant)."""
        return read_ledger(self.events_path)

    def view(self) -> LiveView:
        """The live view of the ledger as it is now: read it once per pass and ask it, not the run."""
        return LiveView.read(self.events_path)

    def live(self) -> list[dict[str, Any]]:
        """The live events (voids applied), in ledger order."""
        return self.view().events

    def key(self, qid: str, sample: int | None) -> AttemptKey:
        """The attempt key of (qid, sample) in this run's phase."""
        return AttemptKey(qid, sample, self.phase)

    def attempt(self, qid: str, sample: int | None, view: LiveView | None = None
                ) -> dict[str, Any] | None:
        """The latest live attempt event of (qid, sample) in this run's phase, or None."""
        return (view or self.view()).attempt(self.key(qid, sample))

    def attempts(self, view: LiveView | None = None) -> list[dict[str, Any]]:
        """One live attempt per key (the latest), in order of first appearance."""
        return (view or self.view()).attempts()

    def tool_calls(self, qid: str, sample: int | None, view: LiveView | None = None
                   ) -> list[dict[str, Any]]:
        """The live tool_call events of (qid, sample), ordered by call_index."""
        return (view or self.view()).tool_calls(self.key(qid, sample))

    def score(self, qid: str, sample: int | None, view: LiveView | None = None
              ) -> dict[str, Any] | None:
        """The live score of (qid, sample), or None."""
        return (view or self.view()).score(self.key(qid, sample))

    def retrieval_score(self, qid: str, sample: int | None, view: LiveView | None = None
                        ) -> dict[str, Any] | None:
        """The live retrieval_score of (qid, sample), or None."""
        return (view or self.view()).retrieval_score(self.key(qid, sample))

    # ---- artifacts

    def artifact_dir(self, qid: str, sample: int | None) -> Path:
        """`<run>/artifacts/<qid>/<sample or _>/`, built only from a validated qid and sample."""
        d = self.dir / ARTIFACTS_DIR / check_qid(qid) / sample_segment(sample)
        # Defence in depth against links: the one containment rule, as for recorded paths.
        files.inside(self.dir, d.relative_to(self.dir).as_posix(), "the run folder")
        return d

    def write_artifact(self, qid: str, sample: int | None, name: str, data: bytes | str | dict | list
                       ) -> Path:
        """Write a new artifact file, never overwriting and never through a link: a second `x.csv`
        becomes `x.2.csv`, then `x.3.csv`."""
        segments = check_name(name)
        parent = self.artifact_dir(qid, sample).joinpath(*segments[:-1])
        if isinstance(data, (dict, list)):
            data = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
        written = files.create_new(parent / segments[-1], data, self.dir, number=True)
        assert written is not None  # numbered: a free name is always found
        return written

    def write_once(self, folder: Path, name: str, data: Any) -> Path | None:
        """Write `name` in an artifact folder of this run unless it exists (write-once evidence);
        None when it did. Never through a link: a link in its place is an InputError."""
        if not isinstance(data, (bytes, str)):
            data = json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
        # Not flushed to disk: the score event that points at it is, and a judge folder is
        # evidence to read, never state the kit resumes from.
        return files.create_new(Path(folder) / name, data, self.dir, sync=False)

    def new_artifact_dir(self, qid: str, sample: int | None, name: str) -> Path:
        """Create a fresh artifact folder: `judge/`, or `judge.2/` when that exists, and so on."""
        segments = check_name(name)
        parent = self.artifact_dir(qid, sample).joinpath(*segments[:-1])
        return files.make_new_dir(parent / segments[-1], self.dir)

    def relpath(self, path: str | Path) -> str:
        """`path` relative to the run folder, as recorded in events (posix separators)."""
        return Path(path).resolve().relative_to(self.dir.resolve()).as_posix()

    def resolve(self, relative: str) -> Path:
        """The absolute path of an artifact path recorded in an event; refuses one outside the run
        (files.inside: absolute, a NUL byte, unresolvable, or out through `..` or a link)."""
        return files.inside(self.dir, relative, "the run folder")


def load_run_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, None, f"missing: not a run folder (create one with {commands.NEW_RUN})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot be read: {exc}") from None
    try:
        info = jsonl.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, f"not valid JSON: {exc.msg}") from None
    if not isinstance(info, dict):
        raise InputError(path, None, "must be a JSON object")
    return info


def _write_json_atomic(path: Path, obj: Any, root: Path) -> None:
    """Write JSON to a temp file beside `path`, fsync, then rename over it: readers never see half,
    and a link planted at `path` is replaced, never written through."""
    files.replace(path, json.dumps(obj, ensure_ascii=False, indent=2) + "\n", root)
