"""review.py: the verdicts a person should look at, and a person's verdict recorded for good.

The queue holds every live attempt whose verdict is `needs_human` or `near_match`, or whose golden
the judge doubted (`gold_status` suspect or verified_wrong), and that no person has settled yet;
with `include_disagreements`, also attempts whose prediction a person already settled elsewhere
(a fixture of judge-regressions.jsonl with the same prediction) with another verdict than this
judge's. Each item carries what a person needs to decide: question, golden and rubric, the answer,
the re-executed rows, the judge's why and confidence.

Settling one appends a `human_verdict` event (voiding the attempt's earlier one), which every
summary counts in place of the judge's verdict (`ledger.events.effective_verdict`); writes the
prediction into judge-regressions.jsonl with `protects`, `settledAt` and `settledBy`, so
check_judge proves the judge on it from then on; and rewrites the run's outputs (RESULTS.md,
summary.json, report.html) at once, through their one owner (workflow/outputs.py).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from malloy_evals.answer.retrieval import reattribute, row_fields
from malloy_evals.answer.scoring import attempt_submission
from malloy_evals.core import commands, files, schemas
from malloy_evals.core.errors import EXIT_OK, InputError
from malloy_evals.core.findings import Ignored
from malloy_evals.core.redact import Redactor
from malloy_evals.core.vocab import SETTLE_VERDICTS, null_reason_head
from malloy_evals.core.words import attempt_label
from malloy_evals.ledger import ties
from malloy_evals.ledger.artifacts import read_prediction, read_prediction_csv
from malloy_evals.ledger.events import MECHANICAL_NULL_REASONS, attempt_key, effective_verdict
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.validate import check_before_append
from malloy_evals.sets.eval_set import Case, EvalSet, authored_lines, golden_value, rewrite_jsonl
from malloy_evals.workflow.outputs import RunOutputs

DOUBTED = ("suspect", "verified_wrong")
REFUSAL_TAG = "answerable-sounds-unanswerable"
ROWS_SHOWN = 10           # rows of a table in a review card; the count says how many there are
TEXT_SHOWN = 1200         # characters of the answer, rubric or a query in a review card
# Keys of the interactive walk: one key per verdict, then skip and quit.
KEYS = {"m": "match", "n": "near_match", "x": "no_match", "s": "skip", "q": "quit"}


# ---------------------------------------------------------------------------------------------
# Small pure helpers


def parse_target(text: str) -> tuple[str, int | None]:
    """`q07` -> (q07, None); `q07#2` -> (q07, 2). ValueError for a malformed sample."""
    qid, sep, sample = text.partition("#")
    if not qid.strip():
        raise ValueError(f"{text!r} names no qid")
    if not sep:
        return qid.strip(), None
    if not sample.strip().isdigit():
        raise ValueError(f"{text!r}: the sample after # must be a whole number")
    return qid.strip(), int(sample)


def prediction_sha(answer_text: str | None, final_query: str | None) -> str:
    """16 hex of sha256 over the prediction's answer text and final query: the fixture's identity."""
    body = json.dumps([answer_text or "", final_query or ""], ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def is_refusal_case(case: Case) -> bool:
    """A case whose key is about refusing: an unanswerable golden, or one tagged as only sounding so."""
    return case.golden_kind == "unanswerable" or REFUSAL_TAG in case.tags


def default_protects(case: Case, judge_verdict: str | None, gold_status: str | None,
                     verdict: str | None) -> str:
    """The decision class a settled fixture protects, from the case and what was settled.

    A refusal case protects refusal_correct (settled match) or refusal_wrong; a near_match (the
    judge's or the person's) the near_match boundary; a doubted golden gold_status; else a
    required disclosure, the commonest reason a judge and a person part.
    """
    if is_refusal_case(case):
        return "refusal_correct" if verdict == "match" else "refusal_wrong"
    if "near_match" in (judge_verdict, verdict):
        return "near_match_boundary"
    if gold_status in DOUBTED:
        return "gold_status"
    return "required_disclosure"


def _clip(text: Any, limit: int = TEXT_SHOWN) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f" ... ({len(text)} characters)"


def text_table(rows: Sequence[Mapping[str, Any]], cap: int = ROWS_SHOWN, width: int = 28) -> str:
    """Rows as a plain aligned table for a terminal: at most `cap` rows, cells cut to `width`."""
    if not rows:
        return "(no rows)"
    columns: list[str] = []
    for row in rows[:cap]:
        columns += [c for c in row if c not in columns]

    def cell(value: Any) -> str:
        text = "null" if value is None else str(value)
        return text if len(text) <= width else text[: width - 1] + "…"

    shown = [[cell(r.get(c)) for c in columns] for r in rows[:cap]]
    widths = [max(len(c), *(len(r[i]) for r in shown)) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in shown]
    if len(rows) > cap:
        out.append(f"... {len(rows) - cap} more row(s)")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# The queue


@dataclass(frozen=True)
class ReviewItem:
    """One attempt a person should look at, with everything needed to decide it."""

    qid: str
    sample: int | None
    label: str                       # `q07` or `q07#2`: what --settle takes
    reasons: list[str]               # needs_human / near_match / doubted golden / overruled elsewhere
    question: str
    golden: dict[str, Any]           # kind, status, value (rows capped), canonicalQuery
    rubric: str | None
    must_state: list[str]
    answer_text: str
    final_query: str | None
    rows: list[dict[str, Any]] | None  # the re-executed prediction the judge saw (None: none)
    row_count: int | None
    prediction_error: str | None
    verdict: str | None              # the judge's verdict as scored
    judge_verdict: str | None        # the judge's own read, when a mechanical rule replaced it
    confidence: int | None
    why: str | None
    gold_status: str | None
    gold_note: str | None
    protects: str                    # what a settlement would protect, unless --protects says
    settled_elsewhere: list[dict[str, Any]] = field(default_factory=list)  # fixtures disagreeing


@dataclass(frozen=True)
class ReviewQueue:
    """review.py's listing."""

    run_dir: str
    set_dir: str
    run_id: str
    items: list[ReviewItem]
    settled: int                     # attempts a person already settled (live human_verdicts)
    include_disagreements: bool
    # near_matches stable across the arms given (--arm): coverage findings, routed to diagnosis
    to_diagnosis: list[dict[str, Any]] = field(default_factory=list)
    diagnose_command: str | None = None
    ignored: list[Ignored] = field(default_factory=list)  # verdicts not counted, and why

    @property
    def exit_code(self) -> int:
        return EXIT_OK  # a queue, empty or not, is a result

    def to_json(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "set_dir": self.set_dir, "run_id": self.run_id,
                "to_review": len(self.items), "settled": self.settled,
                "include_disagreements": self.include_disagreements, "items": self.items,
                "to_diagnosis": self.to_diagnosis, "diagnose_command": self.diagnose_command,
                "ignored": self.ignored}


def _fixtures(eval_set: EvalSet) -> list[tuple[int, dict[str, Any]]]:
    """(line, fixture) of judge-regressions.jsonl, lines counted as rewrite_jsonl counts them
    (split on newline only); none when the file is absent, InputError on a broken line."""
    path = eval_set.regressions_path
    if not path.is_file():
        return []
    out = []
    for number, obj, error in authored_lines(path.read_bytes()):
        if error is not None:
            raise InputError(path, number, error)
        if isinstance(obj, dict):
            out.append((number, obj))
    return out


def _prediction_rows(run: Run, qid: str, sample: int | None,
                     score: Mapping[str, Any]) -> tuple[list[dict] | None, int | None, str | None]:
    """The rows the judge saw: the score's own prediction file, else the latest re-execution."""
    path = score.get("prediction_path")
    if isinstance(path, str) and path.endswith(".csv"):
        try:
            rows = read_prediction_csv(run.resolve(path))
            return rows, len(rows), None
        except InputError:
            pass  # unreadable or outside the run: the latest re-execution stands in
    pred = read_prediction(run, qid, sample)
    if pred is None:
        return None, None, None
    return pred.rows, pred.row_count, pred.error


def _golden_card(case: Case, value: Any) -> dict[str, Any]:
    golden: dict[str, Any] = {"kind": case.golden_kind, "status": case.golden_status,
                              "canonicalQuery": case.canonical_query}
    if isinstance(value, list):
        golden["row_count"] = len(value)
        golden["rows"] = value[:ROWS_SHOWN]
    else:
        golden["value"] = value
    if case.alternates:
        golden["alternates"] = case.alternates
    if case.clarify_ok:
        golden["clarify"] = "preferred" if case.clarify_preferred else "allowed"
    return golden


def _queue_reasons(verdict: str | None, gold_status: str | None) -> list[str]:
    reasons = []
    if verdict in ("needs_human", "near_match"):
        reasons.append(verdict)
    if gold_status in DOUBTED:
        reasons.append("doubted golden")
    return reasons


def arm_verdicts(run_dirs: Sequence[str | Path]) -> list[dict[str, list[str | None]]]:
    """Per other arm (a run of the same cases), qid -> the effective verdict of each attempt."""
    out: list[dict[str, list[str | None]]] = []
    for d in run_dirs:
        view = Run.open(d).view()
        verdicts: dict[str, list[str | None]] = {}
        for attempt in view.attempts():
            key = attempt_key(attempt)
            eff = effective_verdict(view.score(key), view.human_verdict(key), attempt)
            verdicts.setdefault(key.qid, []).append(eff.verdict)
        out.append(verdicts)
    return out


def stable_near_match(qid: str, arms: Sequence[Mapping[str, list[str | None]]]) -> bool:
    """A near_match is stable across arms when every other arm judged the case, and judged every
    attempt of it near_match: the answer is not the variable, the model's reading is, so it is
    a coverage finding for diagnosis, not a call for a person (reference/judge.md)."""
    return bool(arms) and all(arm.get(qid) and all(v == "near_match" for v in arm[qid])
                              for arm in arms)


def review_queue(outputs: RunOutputs, *, include_disagreements: bool = False,
                 arms: Sequence[str | Path] = ()) -> ReviewQueue:
    """Every live attempt a person should settle, in qid order, with what they need to decide.
    `arms`: other runs of the same cases; a near_match every one of them shares is routed to
    diagnosis (`to_diagnosis`) instead of the queue."""
    run, eval_set, view = outputs.run, outputs.eval_set, outputs.view
    run_dir, set_dir = outputs.run_label, outputs.set_label
    fixtures = _fixtures(eval_set) if include_disagreements else []
    others = arm_verdicts(arms)
    items: list[ReviewItem] = []
    routed: list[dict[str, Any]] = []
    settled = 0
    for attempt in sorted(view.attempts(), key=lambda a: (
            str(a.get("qid")), -1 if a.get("sample") is None else int(a["sample"]))):
        key = attempt_key(attempt)
        score = view.tied_score(key)
        if score is None:
            continue
        eff = effective_verdict(score, view.tied_human_verdict(key), attempt)
        if eff.settled_by is not None:
            settled += 1
            continue
        reasons = _queue_reasons(eff.verdict, eff.gold_status)
        qid, sample = key.qid, key.sample
        case = eval_set.cases.get(qid)
        if case is None:
            continue  # a case no longer in the set: nothing to judge it against
        sub = attempt_submission(run, attempt, qid, sample, view)
        elsewhere = []
        if fixtures:
            sha = prediction_sha(sub.answer_text, sub.final_query)
            elsewhere = [{"fixtureId": f.get("fixtureId"), "verdict": f.get("verdict"),
                          "line": line, "settledBy": f.get("settledBy")}
                         for line, f in fixtures
                         if f.get("qid") == qid and str(f.get("predictionSha") or "")[:16] == sha
                         and f.get("verdict") != eff.verdict]
            if elsewhere:
                reasons.append("overruled elsewhere")
        if not reasons:
            continue
        if reasons == ["near_match"] and stable_near_match(qid, others):
            routed.append({"qid": qid, "sample": sample, "label": attempt_label(qid, sample),
                           "why": "near_match in every arm: a coverage finding"})
            continue
        rows, count, error = _prediction_rows(run, qid, sample, score)
        items.append(ReviewItem(
            qid=qid, sample=sample, label=attempt_label(qid, sample), reasons=reasons,
            question=case.question, golden=_golden_card(case, golden_value(case, eval_set.dir)),
            rubric=case.rubric, must_state=case.must_state, answer_text=sub.answer_text,
            final_query=sub.final_query, rows=rows, row_count=count, prediction_error=error,
            verdict=eff.verdict, judge_verdict=score.get("judge_verdict"),
            confidence=score.get("confidence"), why=score.get("why"),
            gold_status=eff.gold_status, gold_note=score.get("gold_note"),
            protects=("refusal_correct or refusal_wrong, by the verdict" if is_refusal_case(case)
                      else default_protects(case, eff.verdict, eff.gold_status, eff.verdict)),
            settled_elsewhere=elsewhere))
    items = _redacted(items)
    qids = list(dict.fromkeys(r["qid"] for r in routed))
    command = str(commands.diagnose_near_matches(run_dir, set_dir, qids)) if qids else None
    return ReviewQueue(str(run_dir), str(set_dir), run.run_id, items, settled,
                       include_disagreements, routed, command, view.ignored())


# What a card shows from outside the kit: the set's text, the answerer's, the rows, the judge's.
_OUTSIDE_FIELDS = ("question", "golden", "rubric", "must_state", "answer_text", "final_query",
                   "rows", "prediction_error", "why", "gold_note")


def _redacted(items: Sequence[ReviewItem]) -> list[ReviewItem]:
    """The cards with every secret blanked by the kit's one redaction (core/redact.py), as the
    ledger and the pages blank them: one redactor for the whole queue learns every card's
    fields first, so a secret seen in any field of any card is blanked in all of them."""
    fields = [{name: getattr(item, name) for name in _OUTSIDE_FIELDS} for item in items]
    secrets = Redactor()
    for shown in fields:
        secrets.learn_json(shown)
    return [replace(item, **secrets.json(shown)) for item, shown in zip(items, fields, strict=True)]


def _field(label: str, text: str) -> str:
    """`  LABEL     first line`, later lines indented under the first: multi-line text stays a block."""
    first, *rest = (text or "").splitlines() or [""]
    return "\n".join([f"  {label:<9} {first}".rstrip()] + [f"{' ' * 12}{line}".rstrip() for line in rest])


def render_item(item: ReviewItem, position: str = "") -> str:
    """One review card: what a person reads before deciding."""
    judge = item.verdict or "null"
    if item.judge_verdict and item.judge_verdict != item.verdict:
        judge += f" (the judge itself said {item.judge_verdict})"
    g = item.golden
    if "rows" in g:
        golden = f"{g['kind']}, {g['status']}; {g['row_count']} row(s):\n" + text_table(g["rows"])
    else:
        value = "null" if g.get("value") is None else json.dumps(g["value"], ensure_ascii=False)
        golden = f"{g['kind']}, {g['status']}: {value}"
    out = [f"{position}{item.label}  [{', '.join(item.reasons)}]",
           _field("QUESTION", item.question), _field("GOLDEN", golden)]
    for alt in g.get("alternates") or []:
        accepted = {True: "accepted", False: "rejected"}.get(alt.get("accept"), "unmarked")
        out.append(_field("ALTERNATE", f"{accepted}: {alt.get('assumption') or '?'}"))
    if g.get("clarify"):
        out.append(_field("CLARIFY", f"a clarifying question is {g['clarify']} for this case"))
    out.append(_field("RUBRIC", _clip(item.rubric) or "(none)"))
    if item.must_state:
        out.append(_field("MUST STATE", "; ".join(item.must_state)))
    out.append(_field("ANSWER", _clip(item.answer_text) or "(empty)"))
    out.append(_field("QUERY", _clip(item.final_query) if item.final_query else "(none)"))
    if item.prediction_error:
        out.append(_field("ROWS", f"the query failed: {_clip(item.prediction_error, 400)}"))
    elif item.rows is not None:
        out.append(_field("ROWS", f"{item.row_count} row(s), re-executed by the kit:\n"
                                  + text_table(item.rows)))
    else:
        out.append(_field("ROWS", "(none: nothing was re-executed)"))
    confidence = item.confidence if item.confidence is not None else "n/a"
    out.append(_field("JUDGE", f"{judge}, confidence {confidence}; gold_status "
                               f"{item.gold_status or 'n/a'}"))
    out.append(_field("WHY", _clip(item.why, 800) or "(none)"))
    if item.gold_note:
        out.append(_field("GOLD NOTE", _clip(item.gold_note, 400)))
    for f in item.settled_elsewhere:
        out.append(_field("SETTLED", f"as {f['verdict']} in fixture {f['fixtureId']} "
                                     f"(judge-regressions.jsonl:{f['line']})"))
    return "\n".join(out)


def render_queue(queue: ReviewQueue) -> str:
    """The listing: one card per item, each with the command that settles it, then the totals."""
    out = []
    total = len(queue.items)
    for i, item in enumerate(queue.items, 1):
        out.append(render_item(item, f"[{i}/{total}] "))
        out.append(_field("SETTLE", f"{commands.settle(queue.run_dir, queue.set_dir, item.label)}\n"
                                    f"(protects {item.protects})"))
        out.append("")
    out.append(f"{total} to review in {queue.run_id}; {queue.settled} already settled by a person.")
    if queue.to_diagnosis:
        labels = ", ".join(r["label"] for r in queue.to_diagnosis)
        out.append(f"{len(queue.to_diagnosis)} near_match(es) stable across arms routed to "
                   f"diagnosis as coverage findings ({labels}): {queue.diagnose_command}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Settling


@dataclass(frozen=True)
class SettleResult:
    """What settling one attempt wrote."""

    qid: str
    sample: int | None
    verdict: str
    judge_verdict: str | None
    settled_by: str
    protects: str
    event_id: str
    voided: str | None               # the earlier human_verdict this one replaced
    fixture_id: str
    fixture_action: str              # appended | replaced | unchanged
    fixtures_path: str
    results_md: str
    summary_json: str
    headline: str
    settled_by_person: int
    report_html: str

    @property
    def exit_code(self) -> int:
        return EXIT_OK


def _today() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")


def _write_fixture(eval_set: EvalSet, fixture: dict[str, Any]) -> str:
    """Append the fixture to judge-regressions.jsonl, or replace the line of the same prediction
    when its settled verdict changed; returns appended / replaced / unchanged."""
    schemas.check("judge_regression", fixture)
    path = eval_set.regressions_path
    for line, old in _fixtures(eval_set):
        if old.get("fixtureId") == fixture["fixtureId"]:
            if (old.get("verdict"), old.get("protects")) == (fixture["verdict"],
                                                             fixture["protects"]):
                return "unchanged"
            rewrite_jsonl(path, replace={line: fixture})
            return "replaced"
    rewrite_jsonl(path, append=[fixture])
    return "appended"


def settle(outputs: RunOutputs, target: str, *, verdict: str, why: str,
           by: str, protects: str | None = None, gold_status: str | None = None) -> SettleResult:
    """Record a person's verdict on one attempt (`QID` or `QID#SAMPLE`): a human_verdict event,
    a judge-regressions fixture, and the run's outputs rewritten by their owner (RESULTS.md,
    summary.json and report.html from one summary). `outputs` was loaded with
    refuse_public="review.py --settle"."""
    if verdict not in SETTLE_VERDICTS:
        raise InputError(None, None, f"verdict {verdict!r} is not one of {list(SETTLE_VERDICTS)}")
    if not why.strip() or not by.strip():
        raise InputError(None, None, "a settled verdict needs a reason (--why) and a name (--by)")
    qid, sample = parse_target(target)
    run, eval_set, view = outputs.run, outputs.eval_set, outputs.view
    case = eval_set.case(qid)
    attempt = run.attempt(qid, sample, view)
    if attempt is None:
        raise InputError(run.events_path, None, f"no live attempt {attempt_label(qid, sample)} "
                                                f"in this run")
    score = view.tied_score(run.key(qid, sample))
    if score is None:
        untied = view.score_untied(run.key(qid, sample))
        raise InputError(run.events_path, None, f"{attempt_label(qid, sample)} has no live score"
                                                f"{f' tied to its attempt ({untied})' if untied else ''}"
                                                ": score it first (score_run.py), then settle it")
    if score.get("verdict") is None and null_reason_head(score.get("reason")) in MECHANICAL_NULL_REASONS:
        raise InputError(run.events_path, None, (
            f"{attempt_label(qid, sample)} is null {score.get('reason')}: that is decided by a "
            "rule, not a judgement, so a person's verdict cannot replace it (re-record the "
            "attempt, or fix or promote the golden, then re-score)"))
    old = view.human_verdict(run.key(qid, sample))
    gold = gold_status or "verified"  # settling against the golden as written vouches for it
    protects = protects or default_protects(case, score.get("verdict"), score.get("gold_status"),
                                            verdict)
    sub = attempt_submission(run, attempt, qid, sample, view)
    sha = prediction_sha(sub.answer_text, sub.final_query)
    fixture_id = f"{qid}.{sha[:8]}"
    rows, _count, _error = _prediction_rows(run, qid, sample, score)
    fixture = {"fixtureId": fixture_id, "qid": qid, "goldenRevision": case.golden_revision,
               "prediction": {"answer_text": sub.answer_text, "final_query": sub.final_query,
                              "queries": sub.queries, "rows": rows},
               "verdict": verdict, "why": why.strip(), "protects": protects,
               "settledAt": _today(), "settledBy": by.strip(), "predictionSha": sha,
               "provenance": {"run": run.run_id, "sample": sample,
                              "judgeVerdict": score.get("verdict"),
                              "judgeVersionObserved": score.get("judge_version")}}
    event = {"kind": "human_verdict", "qid": qid, "sample": sample, "verdict": verdict,
             "why": why.strip(), "settled_by": by.strip(), "protects": protects,
             "gold_status": gold, "judge_verdict": score.get("verdict"),
             "score_event_id": score.get("event_id"),
             "attempt_event_id": attempt.get("event_id"), "fixture_id": fixture_id}
    stale, fresh = _retrieval_row_for(run, view, qid, sample, verdict)
    schemas.check("judge_regression", fixture)  # before the ledger moves: nothing half-written
    # All or nothing: every write this settlement makes is checked before the first is made.
    _check_settle_writes(run, eval_set, qid, sample)
    try:
        # The fixture first: a copy in the run (the human_verdict's tie, ledger/ties.py), then the
        # set's regression file; the ledger moves only once both are written.
        copy = run.write_artifact(qid, sample, "human/fixture.json", fixture)
        action = _write_fixture(eval_set, fixture)
    except OSError as exc:
        raise InputError(getattr(exc, "filename", None) or eval_set.regressions_path, None,
                         f"cannot be written ({exc.strerror or exc}); nothing was settled") from None
    event.update(fixture_path=run.relpath(copy), fixture_sha=ties.file_sha(copy))
    # One batch: the earlier settlement and the retrieval row voided, their successors appended.
    done = run.supersede([*([old] if old is not None else []), *stale], [event, *fresh],
                         f"re-settled by {by.strip()}", reasons=_row_void_reasons(stale))
    written = next(e for e in done.events if e["kind"] == "human_verdict")
    out = outputs.write()
    return SettleResult(qid, sample, verdict, score.get("verdict"), by.strip(), protects,
                        written["event_id"], old["event_id"] if old else None, fixture_id,
                        action, str(eval_set.regressions_path), out.results_md,
                        out.summary_json, out.summary.headline, out.summary.settled_by_person,
                        out.page.path)


def _check_settle_writes(run: Run, eval_set: EvalSet, qid: str, sample: int | None) -> None:
    """Every write a settlement makes, checked before any is made (exit 3, one line, nothing
    written): the ledger it appends to (no bad line in it either), the fixture copy's folder in
    the run, the set's regression file, and the run's pages (RESULTS.md, summary.json,
    report.html)."""
    check_before_append(run.dir, "review.py --settle")
    folder = run.artifact_dir(qid, sample)
    probe = folder if folder.exists() else run.dir / "artifacts"
    checks = [(run.events_path, True), (probe / "human" / "fixture.json", False),
              (eval_set.regressions_path, False), (run.dir / "RESULTS.md", False),
              (run.dir / "summary.json", False), (run.dir / "report.html", False)]
    for path, append in checks:
        while not path.parent.exists() and path.parent != run.dir:
            path = path.parent  # a folder the write would create: its first existing parent
        why = files.cannot_write(path, append=append)
        if why is not None:
            raise InputError(path, None, f"settling {attempt_label(qid, sample)} would write "
                                         f"here and cannot ({why}); nothing was written")


# Why a settlement (or its undoing) supersedes an attempt's retrieval row.
ROW_VOID_REASON = "verdict settled by a person: attribution re-decided"


def _retrieval_row_for(run: Run, view: LiveView, qid: str, sample: int | None,
                       verdict: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The attempt's retrieval row to supersede and the new retrieval_score that carries a
    changed verdict into it (its attribution depends on whether it failed); nothing when it has
    no row or the row already carries that verdict. Delivery is unchanged: nothing is
    re-measured."""
    row = run.retrieval_score(qid, sample, view)
    if row is None or row.get("verdict") == verdict:
        return [], []
    fresh = row_fields(reattribute(row, verdict))
    return [row], [{"kind": "retrieval_score", **fresh, "phase": run.phase,
                    "attempt_event_id": row.get("attempt_event_id")}]


def _row_void_reasons(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    return {row["event_id"]: ROW_VOID_REASON for row in rows}


@dataclass(frozen=True)
class UnsettleResult:
    """What voiding a person's verdict did."""

    qid: str
    sample: int | None
    voided: str
    verdict: str | None              # the verdict that stands again: the judge's
    fixture_id: str | None
    fixture_removed: bool
    results_md: str
    summary_json: str
    headline: str
    report_html: str

    @property
    def exit_code(self) -> int:
        return EXIT_OK


def unsettle(outputs: RunOutputs, target: str, *, why: str) -> UnsettleResult:
    """Void the live human_verdict of one attempt: the judge's verdict stands again. The fixture
    that settlement wrote is taken out of judge-regressions.jsonl (only when it is that
    settlement's, by fixture id, run and sample), and the run's results are rewritten."""
    if not why.strip():
        raise InputError(None, None, "voiding a settled verdict needs a reason (--why)")
    qid, sample = parse_target(target)
    run, eval_set, view = outputs.run, outputs.eval_set, outputs.view
    human = view.human_verdict(run.key(qid, sample))
    if human is None:
        raise InputError(run.events_path, None, f"{attempt_label(qid, sample)} has no live "
                                                "human_verdict to void")
    score = run.score(qid, sample, view)
    judge = score.get("verdict") if score else None
    stale, fresh = _retrieval_row_for(run, view, qid, sample, judge)
    run.supersede([human, *stale], fresh, why.strip(), reasons=_row_void_reasons(stale))
    fixture_id = human.get("fixture_id")
    removed = False
    for line, fx in _fixtures(eval_set):
        prov = got if isinstance(got := fx.get("provenance"), dict) else {}
        if (fx.get("fixtureId") == fixture_id and prov.get("run") == run.run_id
                and prov.get("sample") == sample):
            rewrite_jsonl(eval_set.regressions_path, replace={line: None})
            removed = True
            break
    out = outputs.write()
    return UnsettleResult(qid, sample, human["event_id"], judge, fixture_id, removed,
                          out.results_md, out.summary_json, out.summary.headline, out.page.path)


def render_unsettled(r: UnsettleResult) -> str:
    fixture = (f"fixture {r.fixture_id} taken out of judge-regressions.jsonl" if r.fixture_removed
               else "no fixture of this settlement to take out")
    return (f"voided {r.voided}: {attempt_label(r.qid, r.sample)} is the judge's "
            f"{r.verdict or 'null'} again; {fixture}\nrewrote {r.results_md}, "
            f"{r.summary_json} and {r.report_html}: {r.headline}")


def render_settled(r: SettleResult) -> str:
    label = attempt_label(r.qid, r.sample)
    replaced = f" (replacing {r.voided})" if r.voided else ""
    return "\n".join([
        (f"settled {label}: {r.verdict} by {r.settled_by} (judge said {r.judge_verdict or 'null'})"
         f"{replaced}; human_verdict {r.event_id}"),
        (f"fixture {r.fixture_id} {r.fixture_action} in {r.fixtures_path} (protects "
         f"{r.protects}); check_judge.py re-judges it from now on"),
        (f"rewrote {r.results_md}, {r.summary_json} and {r.report_html}: {r.headline}; "
         f"{r.settled_by_person} verdict(s) settled by a person")])


# ---------------------------------------------------------------------------------------------
# The interactive walk (one key per verdict)


@dataclass(frozen=True)
class WalkResult:
    """What an interactive review did."""

    queue: ReviewQueue
    settled: list[SettleResult]
    skipped: list[str]
    quit: bool

    @property
    def exit_code(self) -> int:
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"to_review": len(self.queue.items), "settled": self.settled,
                "skipped": self.skipped, "quit": self.quit}


def walk_queue(queue: ReviewQueue, *, read_key: Callable[[str], str],
               read_line: Callable[[str], str], write: Callable[[str], None],
               settle_one: Callable[..., SettleResult], by: str | None = None) -> WalkResult:
    """Walk the queue card by card: m match, n near_match, x no_match, s skip, q quit. A verdict
    asks for the reason (and, once, the person's name), then settles it at once."""
    settled: list[SettleResult] = []
    skipped: list[str] = []
    total = len(queue.items)
    if not total:
        write(f"nothing to review in {queue.run_id}; {queue.settled} already settled by a person.\n")
        return WalkResult(queue, settled, skipped, False)
    for i, item in enumerate(queue.items, 1):
        write(render_item(item, f"[{i}/{total}] ") + "\n")
        while True:
            key = read_key("verdict? [m]atch [n]ear_match no_match[x] [s]kip [q]uit: ").lower()
            key = key or "q"  # end of input: stop, settling nothing more
            write(key + "\n")
            if key in KEYS:
                break
        choice = KEYS[key]
        if choice == "quit":
            return WalkResult(queue, settled, skipped, True)
        if choice == "skip":
            skipped.append(item.label)
            continue
        why = read_line("why (one line): ").strip()
        if not by:
            by = read_line("settled by (your name): ").strip() or None  # asked once a session
        if not why or not by:
            write("a settled verdict needs a reason and a name: skipped\n")
            skipped.append(item.label)
            continue
        result = settle_one(item.label, verdict=choice, why=why, by=by)
        settled.append(result)
        write(render_settled(result) + "\n\n")
    return WalkResult(queue, settled, skipped, False)


def render_walk(result: WalkResult) -> str:
    end = "stopped (q)" if result.quit else "done"
    return (f"{end}: {len(result.settled)} settled, {len(result.skipped)} skipped, "
            f"{len(result.queue.items)} in the queue")


def terminal_io() -> tuple[Callable[[str], str], Callable[[str], str], Callable[[str], None]]:
    """(read one key, read one line, write) on the controlling terminal; one key needs no Enter.

    The prompt for a key is written only once the terminal is in single-key mode, and the mode
    is set without flushing, so a key typed the moment the prompt shows is never lost.
    """
    import termios
    import tty

    def read_key(prompt: str) -> str:
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
        try:
            tty.setcbreak(fd, termios.TCSANOW)
            sys.stdout.write(prompt)
            sys.stdout.flush()
            return os.read(fd, 1).decode("utf-8", "replace")
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

    def read_line(prompt: str) -> str:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        return sys.stdin.readline().rstrip("\n")

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    return read_key, read_line, write
