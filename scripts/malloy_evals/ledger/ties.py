"""The tie rule: whether a verdict is bound to the attempt it judged, and whether it is stale.

A verdict event (`score`, `retrieval_score`, `human_verdict`) judged one attempt: the one it
names (`attempt_event_id`), or, when it names none (a line a host wrote by hand, or a ledger
older than binding), the attempt of its case on the line before it (the readers fill that in as
they decode, `events.LineDecoder`). It is *tied* while that attempt is its case's live attempt
and every artifact of the run it names (its judge request and reply, a person's regression
fixture) is where it says, with the digest it recorded. A verdict is held to what it names and
to nothing it does not: a score that names no reply artifact is counted on its attempt, and the
readers say how many such verdicts they counted. An untied verdict is not a verdict: every
reader counts its attempt as unscored and says why, `score_run` judges it again and
`validate.py` reports it. A tied score is *stale* when a pin it carries (judge version, rubric,
prompt, golden revision, the case's content digest) differs from the current one.

This is the one place both rules are written (reference/ledger-schema.md, "Verdicts are tied to
attempts"); `LiveView.tied_score` and `LiveView.tied_human_verdict` apply them to a run.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core.findings import (
    ALTERED_ARTIFACT,
    MISSING_ARTIFACT,
    UNTIED,
)

# A judge's reply artifact and request, inside the judge folder a score names (`judge_artifact`).
REQUEST_FILE = "request.json"
REPLIES_FILE = "replies.json"
# Where a reply came from (score.reply_origin), by the kind of the provider's spec.
REPLY_ORIGINS = {"replay": "recording", "host": "host", "hand": "hand", "anthropic": "live"}
# The pins a tied score must share with the present to be current (not stale), in the order a
# message names them. `case_sha` is the digest of what the judge and the veto read of the case.
PIN_KEYS = ("golden_revision", "judge_version", "rubric_sha", "judge_prompt_sha", "case_sha")

_cache: dict[tuple[str, int, int, int], str] = {}
_cache_lock = threading.Lock()


def file_sha(path: Path) -> str | None:
    """sha256 of a regular file's bytes, or None when there is no such file (a link, a folder and
    a missing file are all None: an artifact is a file the kit wrote). Cached by size and mtime."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    slot = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    with _cache_lock:
        known = _cache.get(slot)
    if known is not None:
        return known
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
    with _cache_lock:
        _cache[slot] = digest
    return digest


def reply_origin(spec: str | None) -> str | None:
    """The origin a provider spec's replies have: recording, host, hand or live (None: unknown)."""
    kind = str(spec or "").partition(":")[0]
    return REPLY_ORIGINS.get(kind)


def _inside(run_dir: Path, relative: Any) -> Path | None:
    """The run's file at a recorded relative path, or None when the path is unusable or climbs out."""
    if not isinstance(relative, str) or not relative or relative.startswith("/"):
        return None
    path = run_dir / relative
    try:
        if not path.resolve().is_relative_to(run_dir.resolve()):
            return None
    except (OSError, ValueError, RuntimeError):
        return None
    return path


@dataclass(frozen=True)
class Untie:
    """Why a verdict is not tied: the cause readers count (`CAUSES`) and the sentence they print."""

    cause: str
    why: str

    def __str__(self) -> str:
        return self.why


def _artifact_problem(run_dir: Path | None, relative: Any, digest: Any, what: str
                      ) -> Untie | None:
    """Why an artifact a verdict names does not back it (missing, moved, edited), or None. A
    verdict is held to what it names: no path and no digest is no claim; a digest with no path
    names nothing that could hold it; a path with no digest (an older kit's score) must exist."""
    named = isinstance(relative, str) and bool(relative)
    digested = isinstance(digest, str) and bool(digest)
    if not named:
        return Untie(MISSING_ARTIFACT, f"records the digest of a {what} but names no file "
                                       "holding it") if digested else None
    if run_dir is None:
        return None  # events in memory, no folder to look in: the fields are all we can check
    path = _inside(run_dir, relative)
    if path is None:
        return Untie(MISSING_ARTIFACT, f"its {what} {relative} is not a path inside the run")
    if not digested:
        return None if path.exists() else Untie(MISSING_ARTIFACT,
                                                f"its {what} {relative} is missing")
    actual = file_sha(path)
    if actual is None:
        return Untie(MISSING_ARTIFACT, f"its {what} {relative} is missing")
    if actual != digest:
        return Untie(ALTERED_ARTIFACT, f"its {what} {relative} differs from the digest it "
                                       f"recorded ({digest[:12]})")
    return None


def attempt_untied(event: Mapping[str, Any], attempt: Mapping[str, Any] | None) -> Untie | None:
    """Why a verdict event did not judge `attempt`, its case's live attempt (None when it did):
    the part of the tie rule that needs no run folder. The attempt it judged is the one it names,
    or the one the reader placed it on (the line before it, `events.LineDecoder`)."""
    judged = event.get("attempt_event_id")
    if attempt is None:
        return Untie(UNTIED, "its case has no live attempt")
    if not isinstance(judged, str) or not judged:
        return Untie(UNTIED, "names no attempt it judged, and no attempt of its case comes "
                             "before it in the ledger")
    live = attempt.get("event_id")
    if judged != live:
        return Untie(UNTIED, f"judged attempt {judged}, not the live one {live} (its case was "
                             "recorded again)")
    return None


def score_untied(score: Mapping[str, Any], attempt: Mapping[str, Any] | None,
                 run_dir: Path | None, *, public: bool = False) -> Untie | None:
    """Why a score is not tied to its case's live `attempt` (None when it is).

    Besides the attempt, the judge request and the reply artifact it names must be in the run
    with the digests it recorded (with `run_dir`; what it does not name is not asked for). In a
    ledger written by the public eval loop (`public`), whose artifact paths are its own, a score
    is tied by its attempt alone (the reader names the attempt line before it)."""
    problem = attempt_untied(score, attempt)
    if problem is not None or public:
        return problem
    folder = score.get("judge_artifact")
    named = isinstance(folder, str) and bool(folder)
    request = f"{folder}/{REQUEST_FILE}" if named and score.get("request_sha") else folder
    for relative, digest, what in ((request, score.get("request_sha"),
                                    "judge request" if score.get("request_sha") else
                                    "judge folder"),
                                   (score.get("reply_artifact"), score.get("reply_sha"),
                                    "judge reply")):
        problem = _artifact_problem(run_dir, relative, digest, what)
        if problem is not None:
            return problem
    return None


def human_untied(human: Mapping[str, Any], attempt: Mapping[str, Any] | None,
                 run_dir: Path | None, *, public: bool = False) -> Untie | None:
    """Why a human_verdict is not tied (None when it is): it must have judged the live attempt,
    and the copy of the regression fixture its settlement wrote into the run, when it names one,
    must be there with that copy's digest (a public-loop ledger's, by its attempt alone)."""
    problem = attempt_untied(human, attempt)
    if problem is not None or public:
        return problem
    return _artifact_problem(run_dir, human.get("fixture_path"), human.get("fixture_sha"),
                             "regression fixture")


def retrieval_untied(row: Mapping[str, Any], attempt: Mapping[str, Any] | None) -> Untie | None:
    """Why a retrieval_score is not tied to the live attempt (None when it is)."""
    return attempt_untied(row, attempt)


def untied(event: Mapping[str, Any], attempt: Mapping[str, Any] | None,
           run_dir: Path | None, *, public: bool = False) -> Untie | None:
    """The tie rule for any verdict event, by its kind (None for a tied one or another kind)."""
    kind = event.get("kind")
    if kind == "score":
        return score_untied(event, attempt, run_dir, public=public)
    if kind == "human_verdict":
        return human_untied(event, attempt, run_dir, public=public)
    if kind == "retrieval_score":
        return retrieval_untied(event, attempt)
    return None


def stale_pins(score: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """THE stale rule: the pins (`PIN_KEYS`) the score carries whose value differs from
    `current` (what a score made now would carry: the judge's pins, the case's golden revision
    and content digest). A pin the score does not carry is not known, so it cannot differ: a
    score written by hand with no pins, or before content digests were recorded, is held to the
    pins it has (`unpinned` names the others, for the readers to say)."""
    return [k for k in PIN_KEYS if k in current and score.get(k) is not None
            and score.get(k) != current.get(k)]


def unpinned(score: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The pins (`PIN_KEYS`) a score made now would carry that this score does not."""
    return [k for k in PIN_KEYS if current.get(k) is not None and score.get(k) is None]


def is_stale(score: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether a score is stale against `current` (see `stale_pins`)."""
    return bool(stale_pins(score, current))


def stale_why(score: Mapping[str, Any], current: Mapping[str, Any], pins: list[str]) -> str:
    """`judged under golden_revision 2 (now 3), case_sha 1f2e... (now 9a0b...)`: the pins that
    made a score stale, as readers print them."""
    def shown(value: Any) -> str:
        return f"{value[:12]}..." if isinstance(value, str) and len(value) == 64 else str(value)
    return "judged under " + ", ".join(f"{k} {shown(score.get(k))} (now {shown(current.get(k))})"
                                       for k in pins) + "; score_run.py judges it again"


def placed_note(placed: int, file: str) -> str | None:
    """The line a reader prints when it placed verdicts that name no attempt (None: none)."""
    if not placed:
        return None
    return (f"{file}: {placed} verdict(s) name no attempt they judged (written by hand, or "
            "before verdicts were bound): each counted on the attempt of its case on the line "
            "before it; append_events.py binds what a host writes")
