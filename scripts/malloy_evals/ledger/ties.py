"""The tie rule: whether a verdict is bound to the attempt it judged, and whether it is stale.

A verdict event (`score`, `retrieval_score`, `human_verdict`) names the attempt it judged
(`attempt_event_id`). It is *tied* when that attempt is its case's live attempt and, for a verdict
that rests on an artifact of the run (a judge's reply, a person's regression fixture), when that
artifact is where the event says and still has the digest the event recorded. An untied verdict
is not a verdict: every reader counts its attempt as unscored, `score_run` judges it again and
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
from pathlib import Path
from typing import Any

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


def _artifact_problem(run_dir: Path | None, relative: Any, digest: Any, what: str) -> str | None:
    """Why an artifact a verdict names does not back it (missing, moved, edited), or None."""
    if not isinstance(relative, str) or not relative:
        return f"names no {what}"
    if not isinstance(digest, str) or not digest:
        return f"records no digest of its {what} {relative}"
    if run_dir is None:
        return None  # events in memory, no folder to look in: the fields are all we can check
    path = _inside(run_dir, relative)
    actual = file_sha(path) if path is not None else None
    if actual is None:
        return f"its {what} {relative} is missing"
    if actual != digest:
        return f"its {what} {relative} differs from the digest it recorded ({digest[:12]})"
    return None


def attempt_untied(event: Mapping[str, Any], attempt: Mapping[str, Any] | None) -> str | None:
    """Why a verdict event does not name `attempt` as the attempt it judged (None when it does):
    the part of the tie rule that needs no run folder."""
    judged = event.get("attempt_event_id")
    if attempt is None:
        return "its case has no live attempt"
    if not isinstance(judged, str) or not judged:
        return "names no attempt it judged (no attempt_event_id: written by hand or by an older kit)"
    live = attempt.get("event_id")
    if judged != live:
        return f"judged attempt {judged}, not the live one {live}"
    return None


def score_untied(score: Mapping[str, Any], attempt: Mapping[str, Any] | None,
                 run_dir: Path | None, *, public: bool = False) -> str | None:
    """Why a score is not tied to its case's live `attempt` (None when it is).

    A score a judge decided (any verdict, or a judge folder named) must also name its request and
    its reply artifact with their digests, and with `run_dir` those files must hold them. In a
    ledger written by the public eval loop (`public`), which records no digests, a score is tied
    by its attempt alone (the reader names the attempt line before it)."""
    problem = attempt_untied(score, attempt)
    if problem is not None or public:
        return problem
    judged = score.get("verdict") is not None or bool(score.get("reply_sha"))
    if not judged:
        return None  # decided by a rule (a gate, truncation, ...): no reply to tie it to
    folder = score.get("judge_artifact")
    request = f"{folder}/{REQUEST_FILE}" if isinstance(folder, str) and folder else None
    for relative, digest, what in ((request, score.get("request_sha"), "judge request"),
                                   (score.get("reply_artifact"), score.get("reply_sha"),
                                    "judge reply")):
        problem = _artifact_problem(run_dir, relative, digest, what)
        if problem is not None:
            return problem
    return None


def human_untied(human: Mapping[str, Any], attempt: Mapping[str, Any] | None,
                 run_dir: Path | None, *, public: bool = False) -> str | None:
    """Why a human_verdict is not tied (None when it is): it must name the live attempt and the
    copy of the regression fixture its settlement wrote into the run, with that copy's digest
    (a public-loop ledger's, by its attempt alone)."""
    problem = attempt_untied(human, attempt)
    if problem is not None or public:
        return problem
    return _artifact_problem(run_dir, human.get("fixture_path"), human.get("fixture_sha"),
                             "regression fixture")


def retrieval_untied(row: Mapping[str, Any], attempt: Mapping[str, Any] | None) -> str | None:
    """Why a retrieval_score is not tied to the live attempt (None when it is)."""
    return attempt_untied(row, attempt)


def untied(event: Mapping[str, Any], attempt: Mapping[str, Any] | None,
           run_dir: Path | None, *, public: bool = False) -> str | None:
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
    """THE stale rule: the pins (`PIN_KEYS`) whose value on the score differs from `current`
    (what a score made now would carry: the judge's pins, the case's golden revision and content
    digest). A score made before content digests were recorded has no `case_sha`: stale."""
    return [k for k in PIN_KEYS if k in current and score.get(k) != current.get(k)]


def is_stale(score: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether a score is stale against `current` (see `stale_pins`)."""
    return bool(stale_pins(score, current))
