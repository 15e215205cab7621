"""append_events: the events a host agent wrote by the documented shapes, bound and appended.

The eval-answer protocol lets a host write events itself (an attempt from a log no script
reads, a score its own judge subagent decided, a retrieval row). Written straight into
events.jsonl such a line still counts (a verdict naming no attempt is counted on the attempt
before it, `events.Placer`), but it carries nothing a reader can hold it to. Given to this step
instead, each event gets what the kit's own writers give theirs: its `event_id`, `at` and the
run's `phase`; a verdict, the id of the attempt it judged (the one it names, or its case's live
attempt, or an attempt earlier in the same file); a score, the digests of the judge request and
reply files it names; a person's verdict, its fixture's digest. Every event is checked against
its kind's schema and the ledger's rules before any is written, and the whole file goes in as
one batch, or nothing does (reference/ledger-schema.md, "Events a host writes").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core import jsonl, schemas, vocab
from malloy_evals.core.errors import EXIT_OK, InputError
from malloy_evals.ledger.events import (
    PLACED_KINDS,
    AttemptKey,
    new_event_id,
    now,
    well_formed_key,
)
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.ties import REQUEST_FILE, file_sha
from malloy_evals.sets.eval_set import EvalSet, case_content_sha

# Filled in by this step whatever the file says (a host never mints them).
ASSIGNED = ("event_id", "at")
# The artifact a field names -> the field that holds its digest.
DIGESTS = {"reply_artifact": "reply_sha", "fixture_path": "fixture_sha"}


@dataclass(frozen=True)
class BoundEvent:
    """One event as it was appended: where it came from and what binding gave it."""

    line: int                  # its line in the host's file
    kind: str
    qid: str | None
    sample: int | None
    event_id: str
    attempt_event_id: str | None = None   # a verdict's judged attempt
    filled: dict[str, Any] = field(default_factory=dict)  # digests and pins filled in


@dataclass(frozen=True)
class AppendResult:
    """What append_events.py appended (everything, or nothing: it raised)."""

    run_dir: str
    source: str
    events: list[BoundEvent]
    voided: list[str]          # earlier live verdicts --replace retracted

    @property
    def exit_code(self) -> int:
        return EXIT_OK


def _artifact(run: Run, source: Path, line: int, field_name: str, relative: Any) -> Path:
    """The run's file a host event names, refused unless it is a file inside the run."""
    if not isinstance(relative, str) or not relative or relative.startswith("/"):
        raise InputError(source, line, f"{field_name}: {relative!r} is not a path relative to "
                                       "the run folder")
    path = run.dir / relative
    try:
        inside = path.resolve().is_relative_to(run.dir.resolve())
    except (OSError, RuntimeError):
        inside = False
    if not inside:
        raise InputError(source, line, f"{field_name}: {relative} leaves the run folder")
    if not path.exists():
        raise InputError(source, line, f"{field_name}: {relative} is not in the run ({path})")
    return path


def _digest(run: Run, source: Path, line: int, event: dict[str, Any],
            field_name: str, relative: Any, digest_field: str) -> str | None:
    """Fill `digest_field` from the file `relative` names (a digest the host wrote must match):
    the digest filled in, or None when the host had written it."""
    path = _artifact(run, source, line, field_name, relative)
    actual = file_sha(path)
    if actual is None:
        raise InputError(source, line, f"{field_name}: {relative} is not a regular file")
    written = event.get(digest_field)
    if written is not None and written != actual:
        raise InputError(source, line, f"{digest_field}: {written!r} is not the digest of "
                                       f"{relative} ({actual})")
    event[digest_field] = actual
    return None if written is not None else actual


def _bind_artifacts(run: Run, source: Path, line: int, event: dict[str, Any]) -> list[str]:
    """The digest of every artifact the event names, filled in; returns the fields it filled."""
    named: list[tuple[str, Any, str]] = []
    folder = event.get("judge_artifact")
    if folder is not None:
        _artifact(run, source, line, "judge_artifact", folder)
        if (run.dir / str(folder) / REQUEST_FILE).is_file():
            named.append(("judge_artifact", f"{folder}/{REQUEST_FILE}", "request_sha"))
    named += [(name, event[name], digest) for name, digest in DIGESTS.items()
              if event.get(name) is not None]
    return [digest for name, relative, digest in named
            if _digest(run, source, line, event, name, relative, digest) is not None]


def _bind_golden(eval_set: EvalSet | None, event: dict[str, Any]) -> list[str]:
    """A score's golden revision and case digest from the set it was judged against, when the
    host left them out (so a later golden edit makes it stale); returns the fields filled."""
    if eval_set is None or event.get("kind") != "score" or event["qid"] not in eval_set.cases:
        return []
    case = eval_set.cases[event["qid"]]
    pins = {"golden_revision": case.golden_revision,
            "case_sha": case_content_sha(case, eval_set.dir)}
    filled = [k for k, v in pins.items() if event.get(k) is None]
    event.update({k: pins[k] for k in filled})
    return filled


def append_events(run_dir: str | Path, source: str | Path, *, replace: bool = False,
                  eval_set: EvalSet | None = None) -> AppendResult:
    """append_events.py: bind every event of the host's JSON-lines file `source` and append them
    to the run's ledger in one batch. A verdict for an attempt that already has a live one of
    its kind is refused unless `replace`, which voids the earlier one in the same batch. With
    `eval_set` (the set the run was made on), a score gets the case's golden revision and
    content digest it left out."""
    run = Run.open(run_dir)
    source = Path(source)
    view = run.view()
    batch: list[dict[str, Any]] = []
    bound: list[BoundEvent] = []
    attempts: dict[AttemptKey, str] = {key: a["event_id"] for key, a in
                                       view.latest("attempt").items()}
    superseded: list[str] = []
    taken: set[tuple[str, AttemptKey]] = set()
    for line, raw in jsonl.read_objects(source):
        event = {k: v for k, v in raw.items() if k not in ASSIGNED}
        event.update(event_id=new_event_id(), at=now())
        kind = event.get("kind")
        if kind not in vocab.EVENT_KINDS:
            raise InputError(source, line, f"kind: {kind!r} is not an event kind (one of "
                                           f"{', '.join(vocab.EVENT_KINDS)})")
        if kind in vocab.CASE_SCOPED_KINDS:
            event.setdefault("phase", run.phase)
            event.setdefault("sample", None)
            if event["phase"] != run.phase:
                raise InputError(source, line, f"phase: {event['phase']!r} is not the run's "
                                               f"phase {run.phase!r}; a run has one phase")
        key = well_formed_key(event)
        judged = None
        filled: list[str] = []
        if kind == "attempt" and key is not None:
            attempts[key] = event["event_id"]
        elif kind in PLACED_KINDS and key is not None:
            live = attempts.get(key)
            named = event.get("attempt_event_id")
            if live is None:
                raise InputError(source, line, f"{kind} {key.qid}: its case has no live attempt "
                                               "in the run or earlier in this file")
            if named is not None and named != live:
                raise InputError(source, line, f"attempt_event_id: {named!r} is not the live "
                                               f"attempt of {key.qid} ({live})")
            event["attempt_event_id"] = judged = live
            filled = _bind_artifacts(run, source, line, event) + _bind_golden(eval_set, event)
            slot = (str(kind), key)
            earlier = view.latest(str(kind)).get(key)
            if slot in taken:
                raise InputError(source, line, f"a second {kind} for {key.qid} in this file")
            taken.add(slot)
            if earlier is not None:
                if not replace:
                    raise InputError(source, line, (
                        f"{key.qid} already has a live {kind} ({earlier['event_id']}); give "
                        "--replace to void it in the same batch"))
                superseded.append(earlier["event_id"])
        problems = schemas.validate_event(event)
        if problems:
            raise InputError(source, line, f"{kind}: {problems[0]}"
                             + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        batch.append(event)
        bound.append(BoundEvent(line, str(kind), key.qid if key else None,
                                key.sample if key else None, event["event_id"], judged,
                                {f: event[f] for f in filled}))
    if not batch:
        raise InputError(source, None, "holds no event to append")
    written = run.supersede(superseded, batch, f"replaced by {source.name} (append_events.py)")
    return AppendResult(str(run.dir), str(source), bound, [v["target_event_id"]
                                                           for v in written.voids])


def render_text(result: AppendResult) -> str:
    """One line per event appended, then the count."""
    lines = []
    for e in result.events:
        what = f"{e.kind} {e.qid}" + ("" if e.sample is None else f"#{e.sample}") if e.qid \
            else e.kind
        bound = f", judged attempt {e.attempt_event_id}" if e.attempt_event_id else ""
        filled = f", {', '.join(sorted(e.filled))} filled in" if e.filled else ""
        lines.append(f"{result.source}:{e.line}: {what} appended as {e.event_id}{bound}{filled}")
    voided = f", voided {len(result.voided)} earlier verdict(s)" if result.voided else ""
    lines.append(f"appended {len(result.events)} event(s) to {result.run_dir}{voided}")
    return "\n".join(lines)
