"""The ledger's rules about other events, written once for the appender and for validate.py.

A void names an earlier event of the same ledger that is neither a void nor voided already; an
attempt key has at most one live `score` and one live `retrieval_score`. `Run.append` refuses a
batch that breaks a rule and `validate.py` reports a ledger line that does, through the same
`LedgerRules`, so the two can never disagree about what the ledger allows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from malloy_evals.core.words import sample_words
from malloy_evals.ledger.events import UNIQUE_KINDS, AttemptKey, well_formed_key

UniqueSlot = tuple[str, AttemptKey]  # (kind, attempt key): where at most one event may be live


@dataclass(frozen=True)
class Refusal:
    """Why the rules refuse an event, and the id of the event the refusal is about (the live score
    already there, the void that came first, the void named as a target), so a caller can say where."""

    message: str
    other: str | None = None


class LedgerRules:
    """What the rules need to know of the ledger so far: the ids of voids, which events are voided
    (and by which void), and the live score and retrieval_score of each attempt key. Memory follows
    voids and attempts, never events: whether a void's target exists is the caller's to answer."""

    def __init__(self) -> None:
        self.void_ids: set[str] = set()
        self.voided: dict[str, str] = {}                 # target id -> the void that retracted it
        self.live_unique: dict[UniqueSlot, str] = {}
        self.unique_key_of: dict[str, UniqueSlot] = {}   # live unique events only

    def refusal(self, event: Mapping[str, Any], exists: Callable[[str], bool]) -> Refusal | None:
        """Why `event` may not follow the events taken so far, or None when it may.

        `exists(id)` says whether an earlier event has that id. Fields of the wrong type are the
        schema's to report, so they break no rule here."""
        kind = event.get("kind")
        if kind == "void":
            target = event.get("target_event_id")
            if not isinstance(target, str):
                return None
            if not exists(target):
                return Refusal(f"void: target_event_id {target!r} is not an event of this ledger")
            if target in self.void_ids:
                return Refusal(f"void: {target!r} is itself a void; append the retracted event "
                               "again instead", target)
            if target in self.voided:
                return Refusal(f"void: {target!r} is already voided", self.voided[target])
            return None
        if kind in UNIQUE_KINDS and (key := well_formed_key(event)) is not None:
            existing = self.live_unique.get((kind, key))
            if existing is not None:
                return Refusal(f"{kind}: attempt ({key.qid}, {sample_words(key.sample)}, "
                               f"{key.phase}) already has a live {kind}", existing)
        return None

    def take(self, event: Mapping[str, Any]) -> None:
        """Take in an event that is in the ledger (or is about to be), whatever the rules said of
        it: a second live score written by hand replaces the first as the live one."""
        eid = event.get("event_id")
        if not isinstance(eid, str):
            return
        kind = event.get("kind")
        if kind == "void":
            self.void_ids.add(eid)
            target = event.get("target_event_id")
            if not isinstance(target, str):
                return
            self.voided.setdefault(target, eid)
            slot = self.unique_key_of.pop(target, None)
            if slot and self.live_unique.get(slot) == target:
                del self.live_unique[slot]
        elif kind in UNIQUE_KINDS and (key := well_formed_key(event)) is not None:
            slot = (kind, key)
            old = self.live_unique.get(slot)
            if old is not None:
                self.unique_key_of.pop(old, None)
            self.live_unique[slot] = eid
            self.unique_key_of[eid] = slot
