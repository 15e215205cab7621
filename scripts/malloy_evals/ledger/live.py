"""The live view of a run: its events as they stand, voids applied, indexed by attempt key.

An event is live when it is not a void and no void anywhere in the ledger names it. That rule is
here once: `LiveView` holds a run's live events for a whole pass (scoring, retrieval, the summary,
a diagnosis all ask it, never the file, so the ledger is parsed once per pass), and
`stream_live` yields them one at a time for a reader whose memory must not grow with the ledger.
Both find void targets first with a byte search (voids are rare, and a kind is spelled plainly),
then decode each line once, through `events.LineDecoder`: a line written by the public eval loop
is read as the kit's event, and one that cannot be placed on an attempt stops the reader (exit 3).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from malloy_evals.core import vocab
from malloy_evals.core.errors import InputError
from malloy_evals.core.findings import SUPERSEDED, Ignored, LineProblem
from malloy_evals.ledger import public_loop
from malloy_evals.ledger.events import (
    EVENTS_FILE,
    AttemptKey,
    Decode,
    LineDecoder,
    decode_line,
    iter_blocks,
    iter_chunks,
    iter_lines,
    snapshot_end,
    well_formed_key,
)
from malloy_evals.ledger.ties import Untie, untied

# Readers find an event's kind by its plain spelling (as json.dumps writes it), never decoding a
# line to learn that it is of no interest; validate.py refuses a kind spelled with escapes.
VOID_NEEDLE = b'"void"'
TIED_KINDS = ("score", "human_verdict", "retrieval_score")  # verdicts held to their attempt


def is_live(event: Mapping[str, Any], voided: set[str] | Mapping[str, Any]) -> bool:
    """The live rule: not a void, and not named by any void (`voided`: every void's target, a
    string; an id of another type, hand-written, can be named by none)."""
    eid = event.get("event_id")
    return event.get("kind") != "void" and not (isinstance(eid, str) and eid in voided)


def void_target(event: Mapping[str, Any]) -> str | None:
    """The id a void event retracts (None for any other event, or a void without a usable target)."""
    target = event.get("target_event_id")
    return target if event.get("kind") == "void" and isinstance(target, str) else None


def _void_targets(fh: BinaryIO, start: int, end: int) -> set[str]:
    """The targets of the voids between `start` and `end`. A chunk without the word is skipped
    whole; in the others only the lines holding it are decoded."""
    voided: set[str] = set()
    for chunk, torn in iter_chunks(fh, start, end):
        if VOID_NEEDLE not in chunk:
            continue
        for line in chunk.split(b"\n"):
            if VOID_NEEDLE in line:
                event, _ = decode_line(line, 0, torn)
                target = void_target(event) if event is not None else None
                if target is not None:
                    voided.add(target)
    return voided


def stream_live(path: Path, *, needles: tuple[bytes, ...] | None = None,
                decode: Decode | None = None, problems: list[LineProblem] | None = None
                ) -> Iterator[dict[str, Any]]:
    """Every live event of the ledger at `path`, in ledger order, one at a time.

    With `needles`, a line holding none of them is skipped undecoded (they must find every line
    that could be an event the caller needs: kinds as `b'"attempt"'`); `decode` replaces the full
    decode of a line (a caller that needs only some fields may cut the rest first). Problems of
    decoded lines go to `problems`; lines of the public eval loop are read as kit events, and one
    that cannot be placed on an attempt raises InputError naming it."""
    return iter(LiveStream(path, needles=needles, decode=decode, problems=problems))


class LiveStream:
    """One streaming pass over a ledger's live events (`stream_live`), which afterwards says
    whether the ledger was written by the public eval loop (as `LiveView.public_ledger`)."""

    def __init__(self, path: Path, *, needles: tuple[bytes, ...] | None = None,
                 decode: Decode | None = None, problems: list[LineProblem] | None = None) -> None:
        self.path = path
        self.needles = needles
        self.problems = problems
        self.decoder = LineDecoder(path.name, decode, refuse=path)
        self.line = 0  # the line of the event last yielded

    @property
    def placed(self) -> dict[int, int | None]:
        """The verdicts that named no attempt, placed on the attempt before them: line -> the
        attempt's line (`events.Placer`)."""
        return self.decoder.placer.placed

    @property
    def public_ledger(self) -> bool:
        """Whether the first line read was the public eval loop's (read every line to know)."""
        return bool(self.decoder.public_lines) and self.decoder.public_lines[0] == 1

    def __iter__(self) -> Iterator[dict[str, Any]]:
        path, needles, problems, decoder = self.path, self.needles, self.problems, self.decoder
        try:
            with path.open("rb") as fh:
                end = snapshot_end(fh.fileno())
                voided = _void_targets(fh, 0, end)
                first = 1
                for lines, torn in iter_blocks(fh, 0, end):
                    for number, line in enumerate(lines, first):
                        if needles is not None and not torn:
                            for needle in needles:
                                if needle in line:
                                    break
                            else:
                                continue
                        event, problem = decoder(line, number, torn)
                        if problem is not None and problems is not None:
                            problems.append(problem)
                        if event is not None and is_live(event, voided):
                            self.line = number
                            yield event
                    first += len(lines)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise InputError(path, None, f"cannot be read: {exc.strerror or exc}") from None


class TiedFold:
    """One streaming pass over a ledger that keeps, per attempt key, only its latest live attempt
    and its latest live verdict of each tied kind (`TIED_KINDS`): memory per attempt, never per
    event. Iterating yields every live event (attempts and verdicts included) for the caller's own
    fold (tool calls counted, issues kept); afterwards `tied(kind, key)` is THE tie rule
    (ledger/ties.py) exactly as `LiveView.tied_score` and its siblings apply it, so a streaming
    reader counts what a reader of the live view counts.

    A ledger of the public eval loop is read whole (its lines are placed by the lines before
    them), whatever the needles; `decode` may cut fields the caller never reads."""

    def __init__(self, path: Path, *, needles: tuple[bytes, ...] | None = None,
                 decode: Decode | None = None) -> None:
        self.path = path
        self.problems: list[LineProblem] = []
        public = public_loop.ledger_is_public(path)
        if needles is not None and not public:
            needles = tuple(dict.fromkeys([*needles, b'"attempt"',
                                           *(f'"{k}"'.encode() for k in TIED_KINDS)]))
        self._stream = LiveStream(path, needles=None if public else needles,
                                  decode=None if public else decode, problems=self.problems)
        self._attempts: dict[AttemptKey, dict[str, Any]] = {}
        self._verdicts: dict[tuple[str, AttemptKey], dict[str, Any]] = {}
        self._lines: dict[tuple[str, AttemptKey], int] = {}  # each kept verdict's line
        self._superseded: list[Ignored] = []  # earlier live verdicts a hand-made ledger left
        self._decided: dict[tuple[str, AttemptKey], bool] = {}  # tied, once the pass has ended

    def __iter__(self) -> Iterator[dict[str, Any]]:
        attempts, verdicts, stream = self._attempts, self._verdicts, self._stream
        for event in stream:
            kind = event.get("kind")
            if kind == "attempt" or kind in TIED_KINDS:
                key = well_formed_key(event)
                if key is not None:
                    if kind == "attempt":
                        attempts.pop(key, None)  # keys in the order their latest attempt came
                        attempts[key] = event
                    else:
                        slot = (str(kind), key)
                        if slot in verdicts:  # two live verdicts of one attempt: the later counts
                            self._superseded.append(Ignored(
                                str(self.path), self._lines[slot], str(kind), key.qid,
                                key.sample, SUPERSEDED,
                                f"a later live {kind} of the attempt (line {stream.line}) "
                                "stands in its place; void one of them"))
                        verdicts[slot] = event
                        self._lines[slot] = stream.line
                    self._decided.clear()  # a later attempt or verdict: decide again
            yield event

    def read(self) -> TiedFold:
        """Run the pass without folding anything else; returns self."""
        for _ in self:
            pass
        return self

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    def attempt_keys(self) -> list[AttemptKey]:
        """Every key with a live attempt."""
        return list(self._attempts)

    def attempt(self, key: AttemptKey) -> dict[str, Any] | None:
        """The latest live attempt of `key`, or None."""
        return self._attempts.get(key)

    def latest(self, kind: str, key: AttemptKey) -> dict[str, Any] | None:
        """The latest live verdict of `kind` (a `TIED_KINDS` kind) of `key`, tied or not."""
        return self._verdicts.get((kind, key))

    def tied(self, kind: str, key: AttemptKey) -> dict[str, Any] | None:
        """The latest live verdict of `kind` of `key` when it is tied to the key's live attempt
        (`LiveView.tied_score`, `tied_human_verdict`, `tied_retrieval_score`), else None."""
        event = self._verdicts.get((kind, key))
        if event is None:
            return None
        decided = self._decided.get((kind, key))
        if decided is None:  # the artifacts are checked once a verdict, however often asked
            decided = self._decided[(kind, key)] = untied(
                event, self._attempts.get(key), self.run_dir,
                public=self._stream.public_ledger) is None
        return event if decided else None

    def line(self, kind: str, key: AttemptKey) -> int | None:
        """The line of the latest live verdict of `kind` of `key` (None: there is none)."""
        return self._lines.get((kind, key))

    def ignored(self) -> list[Ignored]:
        """Every live verdict this pass did not count, in ledger order, and why: untied ones
        (`tied` is None for them) and earlier ones a later live verdict of the attempt replaced."""
        out = list(self._superseded)
        public = self._stream.public_ledger
        for (kind, key), event in self._verdicts.items():
            if self.tied(kind, key) is None:
                why = untied(event, self._attempts.get(key), self.run_dir, public=public)
                if why is not None:
                    out.append(Ignored(str(self.path), self._lines.get((kind, key)), kind,
                                       key.qid, key.sample, why.cause, why.why))
        return sorted(out, key=lambda i: i.line or 0)

    @property
    def placed(self) -> int:
        """How many verdicts named no attempt and were counted on the attempt before them."""
        return len(self._stream.placed)


# The JSON decoder's C scanner, called directly: json.loads adds three Python-level calls a line.
_scan_once: Callable[[str, int], tuple[Any, int]] = (
    # scan_once is set on every JSONDecoder at run time; the stubs do not declare it.
    json.JSONDecoder().scan_once)  # type: ignore[attr-defined]


def _cut_hits(line: bytes) -> bytes:
    """The line without the contents of its `hits` array, which the streaming readers never read
    (the array repeats entity_ids with relevance and position; dropping it halves what json must
    decode). Hit objects are flat, so the first `]` closes the array; should an id itself hold
    one, the cut line no longer parses and the caller decodes the whole line instead."""
    start = line.find(b'"hits":[')
    if start < 0:
        return line
    close = line.find(b"]", start + 8)
    return line if close < 0 else line[:start + 8] + line[close:]


def decode_lean(line: bytes, number: int, torn: bool
                ) -> tuple[dict[str, Any] | None, LineProblem | None]:
    """A ledger line decoded for a streaming reader: a get_context call without its ranked
    hits, by the JSON scanner alone, when that gives a whole object; else the line as every
    reader decodes it (`events.decode_line`)."""
    if not torn:
        try:
            text = _cut_hits(line).decode("utf-8")
            value, end = _scan_once(text, 0)
        except (ValueError, StopIteration, RecursionError):  # UnicodeDecodeError included
            pass
        else:
            if end == len(text) and isinstance(value, dict):
                return value, None
    return decode_line(line, number, torn)


class LiveView:
    """A run's live events, read once, indexed by attempt key (qid, sample, phase).

    Built by `read` (the ledger at a path) or `of_events` (events in memory). `refresh` takes in
    only what was appended since the view was read, by this process or another, so a pass that
    appends (scores, then retrieval rows) keeps one view and reads every byte once."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.problems: list[LineProblem] = []
        self._events: dict[int, dict[str, Any]] = {}   # position (order taken in) -> live event
        self._position: dict[str, int] = {}              # event id -> position
        self._repeats: dict[str, list[int]] = {}         # positions of ids seen more than once
        self._by_key: dict[AttemptKey, list[int]] = {}   # case-scoped positions by attempt key
        self._line_of: dict[int, int] = {}               # a verdict's position -> its line
        self._voided: set[str] = set()                   # every void's target so far
        self._next = 0
        self._file: tuple[int, int] | None = None        # (st_dev, st_ino) of the file read
        self._offset = 0                                 # bytes taken in
        self._lines = 0
        self._torn_tail = False                          # the last line taken had no newline
        # Public-loop lines read as kit events; one that cannot be placed stops the reader (exit 3).
        self._decode = LineDecoder(path.name if path is not None else EVENTS_FILE, refuse=path)

    # ---- building

    @classmethod
    def read(cls, path: str | Path) -> LiveView:
        """The live view of the ledger at `path` (an events.jsonl); a missing file is empty."""
        view = cls(Path(path))
        view.refresh()
        return view

    @classmethod
    def of_events(cls, events: Iterable[Mapping[str, Any]]) -> LiveView:
        """The live view of events already in memory, in ledger order (voids among them applied)."""
        events = list(events)
        view = cls()
        view._voided = {t for e in events if (t := void_target(e)) is not None}
        placer = view._decode.placer  # verdicts naming no attempt placed as a reader places them
        for e in events:
            event = dict(e)
            placer.take(event, None)
            view._add(event)
        return view

    def refresh(self) -> None:
        """Take in the lines appended since the last read; start over if the file was replaced."""
        if self.path is None:
            return
        try:
            with self.path.open("rb") as fh:
                st = os.fstat(fh.fileno())
                if (st.st_dev, st.st_ino) != self._file or st.st_size < self._offset:
                    self.__init__(self.path)  # type: ignore[misc]  # start over, in place
                    self._file = (st.st_dev, st.st_ino)
                end = snapshot_end(fh.fileno())
                self._take(fh, self._offset, end)
        except FileNotFoundError:
            self.__init__(self.path)  # type: ignore[misc]  # start over, in place
        except OSError as exc:
            raise InputError(self.path, None, f"cannot be read: {exc.strerror or exc}") from None

    def _take(self, fh: BinaryIO, start: int, end: int) -> None:
        new_voids = _void_targets(fh, start, end)
        self._voided |= new_voids
        for target in new_voids:  # events read earlier that a new void retracts
            self._drop(target)
        for line, torn in iter_lines(fh, start, end):
            if self._torn_tail and line == b"":
                # The newline an appender writes first to close the torn line taken last time.
                self._torn_tail = False
                continue
            self._torn_tail = torn
            self._lines += 1
            event, problem = self._decode(line, self._lines, torn)
            if problem is not None:
                self.problems.append(problem)
            if event is not None:
                self._add(event, self._lines)
        self._offset = end

    def _add(self, event: dict[str, Any], line: int | None = None) -> None:
        if not is_live(event, self._voided):
            return
        position = self._next
        self._next += 1
        self._events[position] = event
        if line is not None and event.get("kind") in TIED_KINDS:
            self._line_of[position] = line
        eid = event.get("event_id")
        if isinstance(eid, str):
            if eid in self._position:  # a hand-made ledger may repeat an id: a void retracts all
                self._repeats.setdefault(eid, []).append(position)
            else:
                self._position[eid] = position
        if event.get("kind") in vocab.CASE_SCOPED_KINDS and (key := well_formed_key(event)):
            self._by_key.setdefault(key, []).append(position)

    def _drop(self, event_id: str) -> None:
        first = self._position.pop(event_id, None)
        positions = ([] if first is None else [first]) + self._repeats.pop(event_id, [])
        for position in positions:
            event = self._events.pop(position)
            self._line_of.pop(position, None)
            key = well_formed_key(event)
            if key is not None and position in self._by_key.get(key, ()):
                self._by_key[key].remove(position)
                if not self._by_key[key]:
                    del self._by_key[key]  # a later event of the key puts it back, in its place

    # ---- asking

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every live event, in ledger order."""
        return list(self._events.values())

    def of_key(self, key: AttemptKey, kinds: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The live case-scoped events of one attempt key (of `kinds`, when given), in ledger order."""
        wanted = None if kinds is None else set(kinds)
        found = [self._events[p] for p in self._by_key.get(key, ())]
        return found if wanted is None else [e for e in found if e.get("kind") in wanted]

    def _latest(self, kind: str, key: AttemptKey) -> dict[str, Any] | None:
        found = self.of_key(key, (kind,))
        return found[-1] if found else None

    def attempt(self, key: AttemptKey) -> dict[str, Any] | None:
        """The latest live attempt event of `key`, or None."""
        return self._latest("attempt", key)

    def score(self, key: AttemptKey) -> dict[str, Any] | None:
        """The live score of `key` (the latest, should a hand-made ledger hold two), or None."""
        return self._latest("score", key)

    def retrieval_score(self, key: AttemptKey) -> dict[str, Any] | None:
        """The live retrieval_score of `key`, or None."""
        return self._latest("retrieval_score", key)

    def human_verdict(self, key: AttemptKey) -> dict[str, Any] | None:
        """The live human_verdict of `key` (a person's settlement), or None."""
        return self._latest("human_verdict", key)

    # ---- the tie rule (ledger/ties.py): a verdict counts only on the attempt it judged

    @property
    def run_dir(self) -> Path | None:
        """The run folder whose artifacts back the verdicts (None for events held in memory)."""
        return self.path.parent if self.path is not None else None

    @property
    def public_ledger(self) -> bool:
        """Whether the ledger was written by the public eval loop (its first line is one of
        its): it records no digests, so its verdicts are tied by their attempt alone."""
        return bool(self._decode.public_lines) and self._decode.public_lines[0] == 1

    def untied(self, event: Mapping[str, Any]) -> Untie | None:
        """Why a verdict event of this view is not tied to its case's live attempt (None: tied)."""
        key = well_formed_key(event)
        attempt = self.attempt(key) if key is not None else None
        return untied(event, attempt, self.run_dir, public=self.public_ledger)

    @property
    def placed(self) -> int:
        """How many verdicts named no attempt and were counted on the attempt before them."""
        return len(self._decode.placer.placed)

    def line(self, kind: str, key: AttemptKey) -> int | None:
        """The line of the latest live event of `kind` of `key` (None: none, or held in memory)."""
        found = [p for p in self._by_key.get(key, ()) if self._events[p].get("kind") == kind]
        return self._line_of.get(found[-1]) if found else None

    def ignored(self) -> list[Ignored]:
        """Every live verdict no reader counts, in ledger order, and why: the latest of each
        attempt and kind when it is untied, and any earlier live one a later one replaced."""
        file = str(self.path) if self.path is not None else EVENTS_FILE
        out: list[Ignored] = []
        for key, positions in self._by_key.items():
            for kind in TIED_KINDS:
                found = [p for p in positions if self._events[p].get("kind") == kind]
                for p in found[:-1]:
                    out.append(Ignored(file, self._line_of.get(p), kind, key.qid, key.sample,
                                       SUPERSEDED, f"a later live {kind} of the attempt (line "
                                       f"{self._line_of.get(found[-1])}) stands in its place; "
                                       "void one of them"))
                if found and (why := self.untied(self._events[found[-1]])) is not None:
                    out.append(Ignored(file, self._line_of.get(found[-1]), kind, key.qid,
                                       key.sample, why.cause, why.why))
        return sorted(out, key=lambda i: i.line or 0)

    def score_untied(self, key: AttemptKey) -> Untie | None:
        """Why the live score of `key` is not tied to its live attempt (None: tied, or no score)."""
        score = self.score(key)
        return None if score is None else self.untied(score)

    def tied_score(self, key: AttemptKey) -> dict[str, Any] | None:
        """THE live score of `key` every reader counts: the live score when it is tied to the
        live attempt (its attempt id, its judge request and reply artifacts with their digests),
        else None; an untied score leaves its attempt unscored."""
        score = self.score(key)
        return score if score is not None and self.untied(score) is None else None

    def tied_human_verdict(self, key: AttemptKey) -> dict[str, Any] | None:
        """The live human_verdict of `key` when it is tied (the live attempt, and the fixture copy
        its settlement wrote with that copy's digest), else None."""
        human = self.human_verdict(key)
        return human if human is not None and self.untied(human) is None else None

    def tied_retrieval_score(self, key: AttemptKey) -> dict[str, Any] | None:
        """The live retrieval_score of `key` when it names the live attempt, else None."""
        row = self.retrieval_score(key)
        return row if row is not None and self.untied(row) is None else None

    def tied_of_key(self, key: AttemptKey) -> list[dict[str, Any]]:
        """`of_key(key)` without the verdicts that are not tied (what a reader of one attempt's
        events, as a comparison's outcome, reads)."""
        keep = {id(e) for e in (self.tied_score(key), self.tied_human_verdict(key),
                                self.tied_retrieval_score(key)) if e is not None}
        return [e for e in self.of_key(key)
                if e.get("kind") not in TIED_KINDS or id(e) in keep]

    def tied_events(self) -> list[dict[str, Any]]:
        """Every live event, in ledger order, without the verdicts that are not tied to their
        attempt (`tied_score`, `tied_human_verdict`, `tied_retrieval_score`): what a reader that
        folds events (the summary, diagnosis) reads."""
        out: list[dict[str, Any]] = []
        checked: dict[tuple[str, AttemptKey], dict[str, Any] | None] = {}
        ties = {"score": self.tied_score, "human_verdict": self.tied_human_verdict,
                "retrieval_score": self.tied_retrieval_score}
        for event in self._events.values():
            kind = event.get("kind")
            tie = ties.get(kind) if isinstance(kind, str) else None
            key = well_formed_key(event) if tie is not None else None
            if tie is not None and key is not None:
                slot = (str(kind), key)
                if slot not in checked:
                    checked[slot] = tie(key)
                if checked[slot] is not event:
                    continue  # untied, or an earlier live one a hand-made ledger left behind
            out.append(event)
        return out

    def tool_calls(self, key: AttemptKey) -> list[dict[str, Any]]:
        """The live tool_call events of `key`, ordered by call_index."""
        return sorted(self.of_key(key, ("tool_call",)),
                      key=lambda e: e["call_index"] if isinstance(e.get("call_index"), int) else 0)

    def latest(self, kind: str) -> dict[AttemptKey, dict[str, Any]]:
        """The latest live event of `kind` per attempt key, keys in order of first appearance."""
        out: dict[AttemptKey, dict[str, Any]] = {}
        for key in self._by_key:
            event = self._latest(kind, key)
            if event is not None:
                out[key] = event
        return out

    def attempts(self) -> list[dict[str, Any]]:
        """One live attempt per key (the latest), in order of the key's first live event."""
        return list(self.latest("attempt").values())


def live_view(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events still standing, in ledger order: `LiveView.of_events(events).events`."""
    return LiveView.of_events(events).events
