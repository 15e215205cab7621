"""The strict check of a run folder behind validate.py: run.json, every event, the ledger's rules.

The ledger streams: each line is decoded, checked and dropped, and what is kept is the id and line
of every event and the rules' own state (`LedgerRules`, shared with `Run.append`), so memory
follows the number of events, never their size. It reads up to a size taken under the writers'
lock (`snapshot_end`), so a batch another process is appending is never reported as torn.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core import schemas, vocab
from malloy_evals.core.codes import CauseCode, load_codes
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, InputError, KitError
from malloy_evals.core.findings import FolderReport, LineProblem
from malloy_evals.core.words import sample_words
from malloy_evals.ledger import public_loop
from malloy_evals.ledger.events import (
    EVENTS_FILE,
    RUN_FILE,
    TORN,
    AttemptKey,
    LineDecoder,
    gc_paused,
    iter_lines,
    snapshot_end,
    well_formed_key,
)
from malloy_evals.ledger.rules import LedgerRules
from malloy_evals.ledger.run import load_run_json
from malloy_evals.ledger.ties import untied


@dataclass(frozen=True)
class ValidationReport:
    """validate.py's result over several run folders."""

    runs: list[FolderReport]

    @property
    def exit_code(self) -> int:
        codes = [r.exit_code for r in self.runs]
        if EXIT_UNMEASURED in codes:
            return EXIT_UNMEASURED
        return EXIT_FINDING if EXIT_FINDING in codes else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.exit_code == EXIT_OK, "exit_code": self.exit_code,
                "runs": [r.to_json() for r in self.runs]}

    def render(self) -> str:
        """One line per folder, then its problems."""
        return "\n".join(r.render() for r in self.runs)


def _report(directory: str | Path, readable: bool, events: int, errors: list[str],
            warnings: list[str]) -> FolderReport:
    return FolderReport(str(directory), readable, "events", events, errors, warnings)


def validate_run(directory: str | Path) -> FolderReport:
    """Check one run folder strictly: run.json, every line, phases, voids, one live score per key."""
    d = Path(directory)
    errors: list[LineProblem] = []
    warnings: list[LineProblem] = []
    if not d.is_dir():
        return _report(directory, False, 0, [f"{directory}: not a folder"], [])
    try:
        os.listdir(d)
    except OSError as exc:
        return _report(directory, False, 0, [f"{directory}: cannot be read: {exc.strerror}"], [])

    phase = None
    public = public_loop.ledger_is_public(d / EVENTS_FILE)
    try:
        info = load_run_json(d / RUN_FILE)
    except InputError as exc:
        errors.append(LineProblem(RUN_FILE, exc.line, exc.message))
    else:
        phase = info.get("phase")
        for p in schemas.validate("run", info):
            # The public loop's run.json lacks the kit's set pins (setName, schemaVersion, ...):
            # what it is, not a defect of it; a wrong value is still an error.
            soft = p.unknown or (public and p.message == "required field missing")
            (warnings if soft else errors).append(LineProblem(RUN_FILE, None, str(p)))

    try:
        fh = (d / EVENTS_FILE).open("rb")
    except FileNotFoundError:
        errors.append(LineProblem(EVENTS_FILE, None, "missing"))
        n_events = 0
    except OSError as exc:
        return _report(directory, False, 0, [f"{EVENTS_FILE}: cannot be read: {exc.strerror}"], [])
    else:
        checker = _LedgerCheck(phase, errors, warnings, run_dir=d)
        try:
            with fh, gc_paused():
                end = snapshot_end(fh.fileno())
                for number, (line, torn) in enumerate(iter_lines(fh, 0, end), start=1):
                    checker.line(number, line, torn)
        except OSError as exc:
            return _report(directory, False, 0, [f"{EVENTS_FILE}: cannot be read: {exc.strerror}"],
                           [])
        checker.finish()
        n_events = checker.events
        placed = checker.decode.placer.placed
        if placed:
            warnings.append(LineProblem(EVENTS_FILE, min(placed), placed_warning(placed)))
        if checker.decode.public_lines:
            warnings.append(LineProblem(EVENTS_FILE, None, (
                f"{len(checker.decode.public_lines)} event(s) written by the public eval loop, read "
                f"as kit events (ids {public_loop.ID_PREFIX}N, camelCase fields renamed, "
                "contaminated strings read as booleans); their departures from the kit's schemas "
                "are warnings")))
    errors.sort(key=lambda p: (p.file != RUN_FILE, p.line or 0))
    warnings.sort(key=lambda p: (p.file != RUN_FILE, p.line or 0))
    return _report(directory, True, n_events, [str(p) for p in errors], [str(p) for p in warnings])


class _LedgerCheck:
    """Per-event schema checks and the ledger's rules over events fed one line at a time."""

    def __init__(self, phase: str | None, errors: list[LineProblem],
                 warnings: list[LineProblem], run_dir: Path | None = None) -> None:
        self.phase = phase
        self.run_dir = run_dir  # with it, verdicts are checked against the tie rule at the end
        # The tie rule's state: per attempt key, its attempts and verdicts in ledger order, with
        # their lines (memory per attempt, never per event); voided ids dropped at the end.
        self.attempts: dict[AttemptKey, list[tuple[str, int]]] = {}
        self.verdicts: dict[tuple[str, AttemptKey], list[tuple[dict[str, Any], int]]] = {}
        self.errors = errors
        self.warnings = warnings
        self.events = 0
        self.rules = LedgerRules()
        self.line_of: dict[str, int] = {}           # event id -> its first line
        self.pending: dict[str, list[int]] = {}     # void target not (yet) seen -> the voids' lines
        self._codes: dict[str, CauseCode] | KitError | None = None
        self.decode = LineDecoder()  # public-loop lines read as kit events, their lines counted

    def error(self, line: int, message: str) -> None:
        self.errors.append(LineProblem(EVENTS_FILE, line, message))

    def line(self, number: int, raw: bytes, torn: bool) -> None:
        """Decode, check and take in one line."""
        event, problem = self.decode(raw, number, torn)
        if problem is not None:
            self.errors.append(problem)
        if event is None:
            return
        self.events += 1
        # A public-loop line is read as the kit's event; its departures from the kit's schemas are
        # what it is, not defects (warnings), and its kind may be renamed, so not found as spelled.
        public = bool(self.decode.public_lines) and self.decode.public_lines[-1] == number
        self._schema(event, number, public)
        for name in () if public else ("kind", "tool"):
            value = event.get(name)
            if isinstance(value, str) and value.isidentifier() \
                    and f'"{value}"'.encode() not in raw:
                self.error(number, f"{name}: {value!r} is written with JSON escapes; write it "
                                   "plainly (readers find it by its spelling)")
        eid = event.get("event_id")
        first = self.line_of.get(eid) if isinstance(eid, str) else None
        repeated = first is not None
        if repeated:
            self.error(number, f"event_id {eid!r} repeats line {first}")
        refusal = self.rules.refusal(event, lambda target: target in self.line_of)
        if refusal is not None:
            target = event.get("target_event_id")
            if event.get("kind") == "void" and target not in self.line_of:
                # Not seen yet: `finish` says whether it comes later or never.
                self.pending.setdefault(str(target), []).append(number)
            else:
                where = self.line_of.get(refusal.other or "")
                not_voided = ", not voided" if event.get("kind") != "void" else ""
                self.error(number, refusal.message
                           + (f" (line {where}{not_voided})" if where is not None else ""))
        if isinstance(eid, str) and not repeated:
            self.line_of[eid] = number
            self._remember(event, eid, number)
        self.rules.take(event)

    def _remember(self, event: dict[str, Any], eid: str, number: int) -> None:
        kind = event.get("kind")
        if self.run_dir is None or kind not in ("attempt", *TIED_KINDS):
            return
        key = well_formed_key(event)
        if key is None:
            return
        if kind == "attempt":
            self.attempts.setdefault(key, []).append((eid, number))
        else:
            self.verdicts.setdefault((str(kind), key), []).append((event, number))

    def finish(self) -> None:
        """Report the voids whose target never came before them, and the live verdicts that are
        not tied to the attempt they judged (`ledger.ties`)."""
        self._ties()
        for target, lines in self.pending.items():
            later = self.line_of.get(target)
            for line in lines:
                if later is None:
                    self.error(line, f"void: target_event_id {target!r} is not an event of this "
                                     "ledger")
                else:
                    self.error(line, f"void: target {target!r} comes later (line {later})")

    def _ties(self) -> None:
        if self.run_dir is None:
            return
        voided = self.rules.voided
        public = bool(self.decode.public_lines) and self.decode.public_lines[0] == 1
        for (kind, key), found in self.verdicts.items():
            live = [(e, n) for e, n in found if e.get("event_id") not in voided]
            if not live:
                continue
            event, line = live[-1]
            attempts = [eid for eid, _ in self.attempts.get(key, []) if eid not in voided]
            attempt = {"event_id": attempts[-1]} if attempts else None
            why = untied(event, attempt, self.run_dir, public=public)
            if why is not None:
                self.error(line, f"{kind} {key.qid} ({sample_words(key.sample)}): not tied to "
                                 f"its attempt: {why} (re-score it, or void it)")

    def _schema(self, event: dict[str, Any], line: int, public: bool) -> None:
        kind = event.get("kind")
        label = kind if isinstance(kind, str) else "event"
        for p in schemas.validate_event(event):
            if p.unknown or public:
                self.warnings.append(LineProblem(EVENTS_FILE, line, f"{label}: {p}"))
            else:
                self.error(line, f"{label}: {p}")
        if kind in vocab.CASE_SCOPED_KINDS:
            if "qid" in event and not vocab.is_qid(event["qid"]):
                self.error(line, f"{label}: qid: {event['qid']!r} is not a safe id")
            if self.phase is not None and "phase" in event and event["phase"] != self.phase:
                self.error(line, f"{label}: phase {event['phase']!r} differs from run.json's "
                                 f"{self.phase!r}")
        if kind == "attempt":
            rc, htu = event.get("reported_calls"), event.get("host_tool_uses")
            if isinstance(rc, int) and isinstance(htu, int) and rc > htu:
                self.warnings.append(LineProblem(EVENTS_FILE, line, (
                    f"attempt {event.get('qid')}: reported_calls {rc} > host_tool_uses {htu} (the "
                    "host log misses calls; check_contamination treats this as contamination)")))
        if kind == "issue":
            self._cause_codes(event, line)

    def _cause_codes(self, event: dict[str, Any], line: int) -> None:
        """Codes an issue names that are not rows of the eval-diagnose table: the schema checks
        only their spelling, membership comes from the table."""
        contributing = event.get("contributing_codes")
        named = [event.get("primary_code"), *(contributing if isinstance(contributing, list) else [])]
        named = [c for c in named if isinstance(c, str)]
        if not named:
            return
        if self._codes is None:
            try:
                self._codes = load_codes()
            except KitError as exc:
                self._codes = exc
        if isinstance(self._codes, KitError):
            self.error(line, f"issue: cannot check its codes: {self._codes}")
            return
        for c in named:
            if c not in self._codes:
                self.error(line, f"issue {event.get('issue_id')!r}: cause code {c!r} is not a row "
                                 "of the eval-diagnose table")


def placed_warning(placed: dict[int, int | None], shown: int = 10) -> str:
    """What validate.py says of the verdicts that name no attempt: counted, and on which line."""
    pairs = sorted(placed.items())
    lines = ", ".join(f"{v} on the attempt of line {a}" for v, a in pairs[:shown])
    more = f", and {len(pairs) - shown} more" if len(pairs) > shown else ""
    return (f"{len(pairs)} verdict(s) name no attempt they judged (written by hand, or before "
            f"verdicts were bound), each counted on the attempt of its case before it: line "
            f"{lines}{more}; append_events.py binds the events a host writes")


# The verdict kinds the tie rule holds to the attempt they judged.
TIED_KINDS = ("score", "retrieval_score", "human_verdict")


def check_before_append(run_dir: str | Path, who: str) -> None:
    """The ledger of the run at `run_dir` checked line by line before `who` spends anything on
    it: a line that is not a whole event of the kit's schemas, or that breaks the ledger's rules,
    raises InputError naming the file, the line and what is wrong, blamed on the ledger. A torn
    last line is not refused (the next append starts on a fresh line), and verdicts that are not
    tied to their attempt are not bad lines (older ledgers have them: scoring judges them again)."""
    path = Path(run_dir) / EVENTS_FILE
    errors: list[LineProblem] = []
    checker = _LedgerCheck(None, errors, [])
    try:
        with path.open("rb") as fh, gc_paused():
            end = snapshot_end(fh.fileno())
            for number, (line, torn) in enumerate(iter_lines(fh, 0, end), start=1):
                checker.line(number, line, torn)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(path, None, f"cannot be read: {exc.strerror or exc}") from None
    checker.finish()
    bad = [p for p in errors if not p.message.startswith(TORN.split(" (")[0])]
    if bad:
        first = min(bad, key=lambda p: p.line or 0)
        more = f" (and {len(bad) - 1} more; validate.py lists them)" if len(bad) > 1 else ""
        raise InputError(path, first.line, f"the ledger has a bad line, {who} appends nothing "
                                           f"to it: {first.message}{more}")


def validate_runs(directories: Iterable[str | Path]) -> ValidationReport:
    """validate_run over several folders."""
    return ValidationReport([validate_run(d) for d in directories])
