"""The strict check of a run folder behind validate.py: run.json, every event, the ledger's rules."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core import schemas, vocab
from malloy_evals.core.codes import load_codes
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, InputError, KitError
from malloy_evals.core.findings import LineProblem
from malloy_evals.core.words import sample_words
from malloy_evals.ledger import public_loop
from malloy_evals.ledger.events import (
    EVENTS_FILE,
    RUN_FILE,
    UNIQUE_KINDS,
    AttemptKey,
    LedgerRead,
    _well_formed_key,
    parse_ledger,
)
from malloy_evals.ledger.run import _load_run_json


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
    public = public_loop.ledger_is_public(d / EVENTS_FILE)
    try:
        info = _load_run_json(d / RUN_FILE)
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
        if read.public_lines:
            warnings.append(LineProblem(EVENTS_FILE, None, (
                f"{len(read.public_lines)} event(s) written by the public eval loop, read as kit "
                f"events (ids {public_loop.ID_PREFIX}N, camelCase fields renamed, contaminated "
                "strings read as booleans); their departures from the kit's schemas are warnings")))
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
    public = set(read.public_lines)
    voided: dict[str, int] = {}
    live_unique: dict[tuple[str, AttemptKey], tuple[str, int]] = {}
    slots: dict[str, tuple[str, AttemptKey]] = {}
    for event, line in zip(read.events, read.line_numbers, strict=True):
        kind = event.get("kind")
        label = kind if isinstance(kind, str) else "event"
        for p in schemas.validate_event(event):
            soft = p.unknown or line in public
            (warnings if soft else errors).append(LineProblem(EVENTS_FILE, line, f"{label}: {p}"))
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
                                          f"({qid}, {sample_words(sample)}, {ph}); line "
                                          f"{live_unique[slot][1]} is not voided"))
            live_unique[slot] = (event["event_id"], line)
            slots[event["event_id"]] = slot
    return errors, warnings


def _unknown_cause_codes(event: dict[str, Any], line: int) -> list[LineProblem]:
    """Codes an issue names that are not rows of the eval-diagnose table: the schema checks only
    their spelling, membership comes from the table (SPEC 3)."""

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
