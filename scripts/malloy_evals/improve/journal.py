"""The improve journal: one folder per attempt at fixing one issue, its events, and where it is.

`<journal>/journal.jsonl` holds JSON lines of five kinds, each checked against
`reference/schemas/<kind>.schema.json` before it is written: `improve_started` (the issue, the
baseline run, the checkpoint), `change_proposed` (a candidate's diff and digest), `gate_decided`
(accept or reject, with the reasons and numbers), `accepted` and `rolled_back`. Appended only;
the latest event of a kind wins. Every step reads the journal first, so an interrupted step run
again continues where the journal says it is (skills/eval-improve/reference/improve.md).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core import files, jsonl, schemas
from malloy_evals.core.errors import InputError
from malloy_evals.ledger.events import new_event_id, now

JOURNAL_FILE = "journal.jsonl"
KINDS = ("improve_started", "change_proposed", "gate_decided", "accepted", "rolled_back")


def slug(text: str) -> str:
    """A folder-safe name for an issue id (`baseline:refund-rule` -> `baseline-refund-rule`)."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:80] or "issue"


@dataclass(frozen=True)
class Journal:
    """One improve journal folder and the events read from it."""

    dir: Path
    events: list[dict[str, Any]]

    @classmethod
    def open(cls, directory: str | Path) -> Journal:
        """Read a journal folder (InputError, exit 3, when it has none or a line is bad)."""
        d = Path(directory)
        path = d / JOURNAL_FILE
        if not path.is_file():
            raise InputError(d, None, f"no {JOURNAL_FILE}: not an improve journal (start one "
                                      "with improve.py start)")
        events = []
        for number, obj in jsonl.read_objects(path):
            if obj.get("kind") not in KINDS:
                raise InputError(path, number, f"not a journal event (kind one of {', '.join(KINDS)})")
            events.append(obj)
        if not events or events[0].get("kind") != "improve_started":
            raise InputError(path, 1, "the first event is not improve_started")
        return cls(d, events)

    @classmethod
    def create(cls, directory: str | Path, started: dict[str, Any]) -> Journal:
        """A new journal holding its `improve_started` event."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)  # the folder the user named, taken as given
        journal = cls(d, [])
        journal.append(started)
        return journal

    @property
    def path(self) -> Path:
        return self.dir / JOURNAL_FILE

    @property
    def started(self) -> dict[str, Any]:
        return self.events[0]

    def latest(self, kind: str) -> dict[str, Any] | None:
        """The last event of `kind`, or None."""
        return next((e for e in reversed(self.events) if e.get("kind") == kind), None)

    def after(self, kind: str, event: dict[str, Any] | None) -> dict[str, Any] | None:
        """The last event of `kind` written after `event` (any, when `event` is None)."""
        if event is None:
            return self.latest(kind)
        index = next(i for i, e in enumerate(self.events) if e is event)
        return next((e for e in reversed(self.events[index + 1:]) if e.get("kind") == kind), None)

    def append(self, event: dict[str, Any]) -> dict[str, Any]:
        """Validate and append one event (event_id and at assigned here)."""
        full = {"kind": event["kind"], "event_id": new_event_id(), "at": now(),
                **{k: v for k, v in event.items() if k != "kind"}}
        schemas.check(full["kind"], full)
        line = (json.dumps(full, ensure_ascii=False) + "\n").encode("utf-8")
        fd = files.open_append(self.path, self.dir)
        try:
            os.write(fd, line)  # one write of a short line under O_APPEND
            os.fsync(fd)
        finally:
            os.close(fd)
        self.events.append(full)
        return full

    def stage(self) -> str:
        """Where the journal is: `started`, `proposed`, `gated`, `accepted` or `rolled_back`."""
        last = next((e["kind"] for e in reversed(self.events)
                     if e["kind"] in ("change_proposed", "gate_decided", "accepted",
                                      "rolled_back")), None)
        return {"change_proposed": "proposed", "gate_decided": "gated", "accepted": "accepted",
                "rolled_back": "rolled_back", None: "started"}[last]
