"""The run summary: pass rate, verdict counts, INCOMPLETE, cascade, recall, cost, per case.

Every figure comes from the ledger's live events and the set, never from an agent's arithmetic.
`summarize(run, eval_set)` is the entry; `summarize_events(...)` is the pure core the tests drive
with inline events.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from malloy_evals.answer import retrieval
from malloy_evals.core import commands, seal
from malloy_evals.core.cli import to_jsonable
from malloy_evals.core.commands import from_kit_root
from malloy_evals.core.errors import EXIT_OK, EXIT_UNMEASURED, KitError
from malloy_evals.core.findings import STALE, Ignored
from malloy_evals.core.vocab import (
    DECIDED_VERDICTS,
    VERDICTS,
    is_contaminated,
    is_cut_off,
    null_reason_head,
)
from malloy_evals.core.words import attempt_label
from malloy_evals.diagnose.issues import open_issues
from malloy_evals.judge.decision import JudgeArtifacts
from malloy_evals.ledger.events import EVENTS_FILE, AttemptKey, effective_verdict, well_formed_key
from malloy_evals.ledger.live import LiveView, TiedFold, decode_lean
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.ties import stale_pins, stale_why
from malloy_evals.report.stats import sample_figures, wilson_interval
from malloy_evals.sets.eval_set import EvalSet, case_content_sha

# The verdict counts in the order a summary shows them: the two decisions first, then the rest.
VERDICT_ORDER = (*DECIDED_VERDICTS, *(v for v in VERDICTS if v not in DECIDED_VERDICTS))
ENVIRONMENT_FAILURE = "environment_failure"  # the null reason that makes a run INCOMPLETE too
STATUS_COMPLETE, STATUS_PARTIAL, STATUS_INCOMPLETE = "complete", "partial", "incomplete"


# ---------------------------------------------------------------------------------------------
# Pass rate with a Wilson interval


@dataclass(frozen=True)
class PassRate:
    """match / (match + no_match), with its 95% Wilson interval (fractions; None when undecided)."""

    passed: int
    decided: int
    rate: float | None
    ci_low: float | None
    ci_high: float | None
    text: str  # the printed form: `pass rate 62.5% (10/16; 95% CI 38.6-81.5%)`


def pass_rate(passed: int, decided: int) -> PassRate:
    """The headline rate (reference/run-summary.md), with the exact printed form."""
    interval = wilson_interval(passed, decided)
    if interval is None:
        return PassRate(passed, decided, None, None, None,
                        f"pass rate n/a ({passed}/{decided}; nothing decided)")
    rate = passed / decided
    low, high = interval
    text = (f"pass rate {100 * rate:.1f}% ({passed}/{decided}; "
            f"95% CI {100 * low:.1f}-{100 * high:.1f}%)")
    return PassRate(passed, decided, rate, low, high, text)


# ---------------------------------------------------------------------------------------------
# Result types


@dataclass(frozen=True)
class CaseRow:
    """One attempt as the summary saw it (one row of the RESULTS.md case table)."""

    qid: str
    sample: int | None
    verdict: str | None
    reason: str | None            # the null reason, when the verdict is null
    scored: bool                  # a live score exists
    counted: bool                 # in the pass-rate denominator (match or no_match, golden trusted)
    excluded: str | None          # why it is out of every aggregate: "verified_wrong" or None
    confidence: int | None
    gold_status: str | None       # the judge's read of the golden
    set_status: str | None        # the set's golden.status (missing = verified)
    truncated: bool
    contaminated: bool | str | None
    must_not_use_hits: list[str]
    coverage: str | None          # effective coverage from the retrieval row
    recall: float | None
    where_to_fix: str | None
    cascade_rung: str | None      # the rung of the cascade (None: not in the cascade)
    retrieval_verdict: str | None  # the verdict the retrieval row was computed with
    answerer_cost_usd: float | None
    judge_cost_usd: float | None
    num_turns: int | None
    n_get_context: int
    n_execute: int
    entities_delivered: int       # distinct entity ids returned by this attempt's get_context calls
    why: str | None               # the judge's why, or the person's when they settled it
    settled_by: str | None = None     # the person whose live human_verdict decided the verdict
    judge_verdict: str | None = None  # the judge's verdict a person's settled one replaced
    stale: bool = False           # judged under other pins than the case's now: counted apart
    settled_at: str | None = None     # when the person settled it (the human_verdict's time)
    awaiting_host: bool = False   # unscored, its judge request emitted for a host subagent


@dataclass(frozen=True)
class Incomplete:
    """Why a run has no pass rate, and the commands that repair it."""

    truncated: list[str]          # attempt labels (`q07`, `q07#2`)
    contaminated: list[str]
    qids: list[str]               # sorted, unique: what --only takes
    commands: list[str]
    # Scored null for environment_failure: nothing was measured about the answer, so the run
    # cannot say how often answers were right (resuming score_run retries them).
    environment_failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Partial:
    """Why a run's figures are not final yet, and the one command that finishes it."""

    unscored: list[str]           # attempt labels with no live score
    stale: list[str]              # attempt labels whose live score was judged under older pins
    awaiting_host: list[str]      # of the unscored: a judge request emitted, no host reply yet
    command: str                  # the one command that finishes the run


@dataclass(frozen=True)
class RunSummary:
    """The summary of one run (reference/run-summary.md); RESULTS.md and summary.json are both
    renderings of this."""

    run_id: str | None
    set_name: str | None
    phase: str | None
    answerer_model: str | None
    judge_model: str | None
    judge_version: int | str | None
    status: str                   # "complete" | "partial" | "incomplete"
    headline: str                 # the pass-rate text, or the PARTIAL or INCOMPLETE line
    attempts: int
    scored: int
    unscored: list[str]
    pass_rate: PassRate | None    # None when INCOMPLETE: no rate is printed
    verdicts: dict[str, int]      # match, no_match, near_match, needs_human, null
    null_reasons: dict[str, int]
    excluded_verified_wrong: int
    doubted_goldens: list[dict[str, Any]]
    vetoes: list[dict[str, Any]]
    incomplete: Incomplete | None
    cascade: dict[str, Any] | None
    retrieval: dict[str, Any]
    coverage: dict[str, Any] | None
    cost: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    cases: list[CaseRow] = field(default_factory=list)
    settled_by_person: int = 0    # verdicts a live human_verdict decided (review.py)
    overruled_by_person: int = 0  # ... of which the person's verdict differs from the judge's
    golden_drift: list[str] = field(default_factory=list)  # qids scored with --allow-drift
    judges: dict[str, int] = field(default_factory=dict)  # judge_model of each live score -> scores
    open_issues: list[dict[str, Any]] = field(default_factory=list)  # live, not fixed or rejected
    partial: Partial | None = None  # what is unscored or stale, and the command that finishes it
    stale: list[str] = field(default_factory=list)  # attempts scored under older pins
    samples: dict[str, Any] | None = None  # k answerer samples per case: `sample_summary`
    # Live verdicts the summary did not count, each on its line with why (untied, a missing or
    # altered artifact, stale, superseded), and the verdicts that named no attempt and were
    # counted on the attempt before them (ledger/ties.py).
    ignored: list[Ignored] = field(default_factory=list)
    placed: int = 0

    @property
    def exit_code(self) -> int:
        # An INCOMPLETE run or a low rate is a result, not a failure (README.md, "Exit codes");
        # a partial run is not measured yet.
        return EXIT_UNMEASURED if self.status == STATUS_PARTIAL else EXIT_OK


# ---------------------------------------------------------------------------------------------
# Helpers over events



def _sort_key(key: AttemptKey) -> tuple[str, int, str]:
    return (key.qid, -1 if key.sample is None else key.sample, key.phase)


def _null_reason_group(reason: Any) -> str:
    """The count a null reason goes under: its head (vocab.null_reason_head), `(no reason)` when
    it has none; the row keeps the full text."""
    return null_reason_head(reason) or "(no reason)"


def _set_status(eval_set: EvalSet | None, qid: str) -> str | None:
    """The set's golden.status for a case; None when the case or its golden is unknown."""
    golden = _case_golden(eval_set, qid)
    if golden is None:
        return None
    return golden.get("status") or "verified"


def _case_golden(eval_set: EvalSet | None, qid: str) -> Mapping[str, Any] | None:
    if eval_set is None:
        return None
    try:
        case = eval_set.case(qid)
    except (KitError, LookupError):  # a case no longer in the set: no golden to read
        return None
    if case is None:
        return None
    golden = getattr(case, "golden", None)
    if golden is None and isinstance(case, Mapping):
        golden = case.get("golden")
    return golden if isinstance(golden, Mapping) else None


def _sum_known(values: Iterable[Any]) -> tuple[float | None, int]:
    """Sum of the known values and how many were unknown; None when every value is unknown (a
    value that is not a number, in a ledger another program wrote, is unknown too)."""
    total, known, unknown = 0.0, 0, 0
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            unknown += 1
        else:
            total += float(v)
            known += 1
    return (round(total, 6) if known else None), unknown


@dataclass
class _Attempt:
    attempt: dict[str, Any] | None = None
    score: dict[str, Any] | None = None
    retrieval: dict[str, Any] | None = None
    human: dict[str, Any] | None = None   # the live human_verdict, when a person settled it
    calls: _Calls | None = None           # what its live tool_call events add up to


@dataclass
class _Calls:
    """What the summary keeps of an attempt's tool calls: counts and the entities delivered."""
    get_context: int = 0
    execute: int = 0
    entities: set[str] = field(default_factory=set)

    def add(self, call: Mapping[str, Any]) -> None:
        tool = call.get("tool")
        if tool == "execute_query":
            self.execute += 1
        elif tool == "get_context":
            self.get_context += 1
            summary = call.get("ranked_summary")
            ids = summary.get("entity_ids") if isinstance(summary, Mapping) else None
            self.entities.update(str(i) for i in (ids if isinstance(ids, list) else []))


_FOLDED = ("attempt", "score", "retrieval_score", "tool_call", "human_verdict")


def _group(events: Iterable[Mapping[str, Any]]) -> dict[AttemptKey, _Attempt]:
    """Live events by attempt key; only keys that have an attempt event are attempts."""
    groups: dict[AttemptKey, _Attempt] = {}
    for e in events:
        kind = e.get("kind")
        if kind not in _FOLDED:
            continue
        key = well_formed_key(e)
        if key is None:
            continue
        g = groups.setdefault(key, _Attempt())
        if kind == "attempt":
            g.attempt = dict(e)
        elif kind == "score":
            g.score = dict(e)
        elif kind == "retrieval_score":
            g.retrieval = dict(e)
        elif kind == "human_verdict":
            g.human = dict(e)
        else:
            if g.calls is None:
                g.calls = _Calls()
            g.calls.add(e)
    return {k: g for k, g in groups.items() if g.attempt is not None}


# The lines the streaming summary decodes (voids are found by the stream itself).
_NEEDLES = (b'"tool_call"', b'"issue"', b'"issue_status"')


@dataclass(frozen=True)
class LedgerReading:
    """What the summary's reader of a ledger counted apart from the groups: the verdicts it
    ignored and why (untied, superseded), how many verdicts it placed on the attempt before them
    (they name none), and the line of each attempt's live score (for the stale ones it names)."""

    ignored: list[Ignored]
    placed: int
    score_line: Callable[[AttemptKey], int | None]
    file: str


def _stream_groups(path: Path) -> tuple[dict[AttemptKey, _Attempt], list[dict[str, Any]],
                                        set[AttemptKey], LedgerReading]:
    """The summary's groups read from the ledger in one streaming pass (`ledger.live.TiedFold`):
    per attempt its latest live attempt, its tied verdicts and its tool calls counted, plus the
    live issue events, the keys with any live score (tied or not) and what the reading ignored.
    What `_group` makes of the live view's `tied_events()`, without holding the ledger."""
    fold = TiedFold(path, needles=_NEEDLES, decode=decode_lean)
    calls: dict[AttemptKey, _Calls] = {}
    issues: list[dict[str, Any]] = []
    for e in fold:
        kind = e.get("kind")
        if kind == "tool_call":
            key = well_formed_key(e)
            if key is not None:
                (calls.get(key) or calls.setdefault(key, _Calls())).add(e)
        elif kind in ("issue", "issue_status"):
            issues.append(e)
    groups: dict[AttemptKey, _Attempt] = {}
    scored: set[AttemptKey] = set()
    for key in fold.attempt_keys():
        if fold.latest("score", key) is not None:
            scored.add(key)
        groups[key] = _Attempt(attempt=fold.attempt(key), score=fold.tied("score", key),
                               retrieval=fold.tied("retrieval_score", key),
                               human=fold.tied("human_verdict", key), calls=calls.get(key))
    reading = LedgerReading(fold.ignored(), fold.placed, lambda key: fold.line("score", key),
                            str(path))
    return groups, issues, scored, reading


def _call_counts(g: _Attempt) -> tuple[int, int, int]:
    """(get_context calls, execute_query calls, distinct entities delivered) for one attempt.

    tool_call events are the record; the attempt's own n_* counters stand in when a run was
    recorded without per-call events.
    """
    if g.calls is None:
        att = g.attempt or {}
        return _count(att.get("n_get_context")), _count(att.get("n_execute")), 0
    return g.calls.get_context, g.calls.execute, len(g.calls.entities)


def _count(value: Any) -> int:
    """A counter as a ledger another program wrote it: a whole number, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def judge_counts(scores: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many live scores each judge produced, most first: a run scored partly by a host
    subagent and partly by hand is not one judge's run. A score that pins no judge (an older
    ledger) names none and is left out."""
    counts = Counter(str(s["judge_model"]) for s in scores if s.get("judge_model"))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def judges_text(judges: Mapping[str, int], fallback: str | None = None) -> str | None:
    """The judge as a person reads it: the one judge, or every judge with its count of scores."""
    if not judges:
        return fallback
    if len(judges) == 1:
        return next(iter(judges))
    return "mixed: " + ", ".join(f"{name} {n}" for name, n in judges.items())


def case_pins(score: Mapping[str, Any], eval_set: EvalSet | None, qid: str) -> dict[str, Any]:
    """The case's pins now that a score may be held to: its golden revision and the digest of
    the content the judge and the veto read (an edit without a bump); empty for a set that is
    not known or a case no longer in it (nothing to be stale against)."""
    try:
        case = eval_set.case(qid) if eval_set is not None else None
    except (KitError, LookupError):
        case = None
    if case is None or not hasattr(case, "golden_revision"):
        return {}
    current: dict[str, Any] = {}
    if "golden_revision" in score:
        current["golden_revision"] = case.golden_revision
    if "case_sha" in score and eval_set is not None:
        current["case_sha"] = case_content_sha(case, eval_set.dir)
    return current


def verdict_standing(score: Mapping[str, Any] | None, eval_set: EvalSet | None,
                     qid: str) -> str | None:
    """Whether an attempt's live score still stands under the current pins: None (no score),
    "current", or STALE (judged against another golden revision than the case's now). THE one
    rule every page and the status use; a set that is not known cannot make a score stale."""
    if score is None:
        return None
    # The stale rule (ledger.ties.stale_pins) over the case's pins the score carries.
    return STALE if stale_pins(score, case_pins(score, eval_set, qid)) else "current"


# ---------------------------------------------------------------------------------------------
# Commands printed for an INCOMPLETE run


def _counted(n: int, what: str, labels: Sequence[str]) -> str:
    """`3 contaminated (q1, q2, q3)`; a zero count has no list."""
    return f"{n} {what} ({', '.join(sorted(labels))})" if n else f"{n} {what}"


def repair_commands(run_dir: str, set_dir: str, attempts: Sequence[AttemptKey],
                    judge_spec: str | None, endpoint_flag: str | None,
                    host_logged: frozenset[AttemptKey] = frozenset()) -> list[str]:
    """The re-record command per attempt, then the one re-score command. An attempt
    recorded from a host tool-use log is re-recorded the same way (`host_logged`)."""
    cmds = [commands.record_attempt(run_dir, set_dir, key.qid, key.sample,
                                    host_log=key in host_logged)
            for key in attempts]
    cmds.append(commands.rescore(run_dir, set_dir, sorted({key.qid for key in attempts}),
                                 judge_spec=judge_spec, endpoint=endpoint_flag))
    return [str(c) for c in cmds]


# ---------------------------------------------------------------------------------------------
# The summary


def summarize_events(
    info: Mapping[str, Any],
    events: Iterable[Mapping[str, Any]],
    eval_set: EvalSet | None = None,
    *,
    coverage_report: Mapping[str, Any] | None = None,
    run_dir: str = "<run>",
    set_dir: str = "<set>",
    judge_spec: str | None = None,
    endpoint_flag: str | None = None,
    awaiting_host: frozenset[AttemptKey] = frozenset(),
    reading: LedgerReading | None = None,
) -> RunSummary:
    """The summary over a run's live events (voided ones already removed) and its set.

    Args:
        info: run.json.
        events: live events (attempt, tool_call, score, retrieval_score, and issues with their
            statuses for the open-issue list; others ignored). The
            cascade and recall come from the retrieval_score rows, through retrieval's own
            `summarize` and `cascade`, so the two reports can never disagree.
        eval_set: the loaded set, for each case's golden status; None when unavailable.
        coverage_report: a coverage report's figures (`CoverageReport.figures`), shown as the
            coverage figure.
        run_dir, set_dir, judge_spec, endpoint_flag: spelled into the repair commands.
        awaiting_host: unscored attempts whose judge request waits for a host's reply.
        reading: what the ledger's reader ignored and placed (None: nothing known of it).
    """
    events = list(events)
    return _summarize_groups(info, _group(events), events, eval_set,
                             coverage_report=coverage_report, run_dir=run_dir, set_dir=set_dir,
                             judge_spec=judge_spec, endpoint_flag=endpoint_flag,
                             awaiting_host=awaiting_host, reading=reading)


def _summarize_groups(
    info: Mapping[str, Any],
    groups: Mapping[AttemptKey, _Attempt],
    issue_events: Iterable[Mapping[str, Any]],
    eval_set: EvalSet | None,
    *,
    coverage_report: Mapping[str, Any] | None,
    run_dir: str,
    set_dir: str,
    judge_spec: str | None,
    endpoint_flag: str | None,
    awaiting_host: frozenset[AttemptKey],
    reading: LedgerReading | None = None,
) -> RunSummary:
    """The summary over each attempt's group (its live attempt, tied verdicts and tool calls
    counted) and the live issue events: `summarize_events` and the streaming `summarize` both
    end here. A score ignored as stale is added to what the reader ignored, on its line."""
    keys = sorted(groups, key=_sort_key)
    ignored: list[Ignored] = list(reading.ignored) if reading is not None else []

    verdicts: Counter[str] = Counter()
    null_reasons: Counter[str] = Counter()
    doubted: list[dict[str, Any]] = []
    vetoes: list[dict[str, Any]] = []
    truncated: list[AttemptKey] = []
    contaminated: list[AttemptKey] = []
    environment_failed: list[AttemptKey] = []
    unscored: list[str] = []
    rows: list[CaseRow] = []
    retrieval_rows: list[dict[str, Any]] = []
    excluded_vw = 0
    settled: list[AttemptKey] = []
    stale: list[str] = []

    host_logged: list[AttemptKey] = []
    for key in keys:
        g = groups[key]
        qid, sample = key.qid, key.sample
        label = attempt_label(qid, sample)
        att = g.attempt or {}
        if str(att.get("transcript_path") or "").endswith("host-log.json"):
            host_logged.append(key)
        score = g.score
        set_status = _set_status(eval_set, qid)

        # The judge's verdict, or a person's where a live human_verdict settled it: one rule.
        effective = effective_verdict(score, g.human, g.attempt)
        verdict, reason, gold_status = effective.verdict, effective.reason, effective.gold_status
        if effective.settled_by is not None:
            settled.append(key)

        cut_off = is_cut_off(att.get("truncated"), reason)
        contam_value = att.get("contaminated")
        if score is not None and is_contaminated(score.get("contaminated")):
            contam_value = score.get("contaminated")
        voided_by_contamination = is_contaminated(contam_value) or reason == "contaminated"
        if cut_off:
            truncated.append(key)
        if voided_by_contamination:
            contaminated.append(key)
        if verdict is None and null_reason_head(reason) == ENVIRONMENT_FAILURE:
            environment_failed.append(key)

        # A golden the set or the judge declared wrong takes the attempt out of every aggregate:
        # the attempt did not fail, the key did.
        excluded = None
        if set_status == "verified_wrong" or gold_status == "verified_wrong":
            excluded = "verified_wrong"
            excluded_vw += 1
        if gold_status in ("verified_wrong", "suspect") or set_status == "verified_wrong":
            doubted.append({
                "qid": qid, "sample": sample, "label": label,
                "declared_by": "set" if set_status == "verified_wrong" else "judge",
                "gold_status": "verified_wrong" if set_status == "verified_wrong" else gold_status,
                "gold_note": score.get("gold_note") if score else None,
                "excluded": excluded is not None,
            })

        standing = verdict_standing(score, eval_set, qid)
        if score is None:
            unscored.append(label)
        elif standing == STALE:
            stale.append(label)  # judged against another key: counted apart, never as a verdict
            pins_now = case_pins(score, eval_set, qid)
            ignored.append(Ignored(
                reading.file if reading is not None else EVENTS_FILE,
                reading.score_line(key) if reading is not None else None, "score", qid, sample,
                STALE, stale_why(score, pins_now, stale_pins(score, pins_now))))
        elif excluded is None:
            if verdict is None:
                verdicts["null"] += 1
                null_reasons[_null_reason_group(reason)] += 1
            else:
                verdicts[verdict] += 1

        hits = list((score or {}).get("must_not_use_hits") or [])
        if hits:
            vetoes.append({"qid": qid, "sample": sample, "label": label, "hits": hits,
                           "judge_verdict": (score or {}).get("judge_verdict")})

        n_ctx, n_exec, n_entities = _call_counts(g)
        r = g.retrieval or {}
        in_cascade = g.retrieval is not None and excluded is None
        if in_cascade:
            retrieval_rows.append(dict(r))
        rows.append(CaseRow(
            qid=qid, sample=sample, verdict=verdict, reason=reason, scored=score is not None,
            counted=score is not None and excluded is None and verdict in DECIDED_VERDICTS,
            excluded=excluded,
            confidence=(score or {}).get("confidence"), gold_status=gold_status,
            set_status=set_status, truncated=cut_off,
            contaminated=contam_value if contam_value is not None else (
                True if reason == "contaminated" else None),
            must_not_use_hits=hits, coverage=r.get("coverage"), recall=r.get("recall"),
            where_to_fix=r.get("where_to_fix"),
            cascade_rung=retrieval.cascade_rung(r) if in_cascade else None,
            retrieval_verdict=r.get("verdict"),
            answerer_cost_usd=att.get("cost_usd"), judge_cost_usd=(score or {}).get("judge_cost_usd"),
            num_turns=att.get("num_turns"), n_get_context=n_ctx, n_execute=n_exec,
            entities_delivered=n_entities,
            why=(g.human or {}).get("why") if effective.settled_by else (score or {}).get("why"),
            settled_by=effective.settled_by,
            judge_verdict=effective.judge_verdict if effective.settled_by else None,
            stale=standing == STALE,
            settled_at=(g.human or {}).get("at") if effective.settled_by else None,
            awaiting_host=score is None and key in awaiting_host,
        ))

    verdict_counts = {**{v: verdicts[v] for v in VERDICT_ORDER}, "null": verdicts["null"]}

    incomplete = None
    if truncated or contaminated or environment_failed:
        bad = sorted(set(truncated) | set(contaminated), key=_sort_key)
        rescore = sorted(set(bad) | set(environment_failed), key=_sort_key)
        repairs = repair_commands(run_dir, set_dir, bad, judge_spec, endpoint_flag,
                                  host_logged=frozenset(host_logged))
        if not bad:  # only environment failures: re-scoring them is the whole repair
            repairs = repair_commands(run_dir, set_dir, rescore, judge_spec, endpoint_flag)[-1:]
        elif environment_failed:
            repairs[-1] = repair_commands(run_dir, set_dir, rescore, judge_spec, endpoint_flag)[-1]
        incomplete = Incomplete(
            truncated=[attempt_label(k.qid, k.sample) for k in truncated],
            contaminated=[attempt_label(k.qid, k.sample) for k in contaminated],
            qids=sorted({key.qid for key in rescore}),
            commands=repairs,
            environment_failures=[attempt_label(k.qid, k.sample) for k in environment_failed],
        )

    rate = pass_rate(verdict_counts["match"], verdict_counts["match"] + verdict_counts["no_match"])
    if incomplete is not None:
        # Each count carries its own qids: one shared list after "3 contaminated" read as if
        # all of them were contaminated.
        env_part = (", " + _counted(len(environment_failed), "environment failure",
                                    incomplete.environment_failures) if environment_failed else "")
        headline = (f"INCOMPLETE: {_counted(len(truncated), 'truncated', incomplete.truncated)}, "
                    f"{_counted(len(contaminated), 'contaminated', incomplete.contaminated)}"
                    f"{env_part}; no pass rate")
        shown_rate = None
    partial = None
    if unscored or stale:
        awaiting = [attempt_label(k.qid, k.sample) for k in keys
                    if k in awaiting_host and groups[k].score is None]
        if awaiting and len(awaiting) == len(unscored) and not stale:
            finish = commands.host_ingest(run_dir, set_dir, endpoint=endpoint_flag)
        else:
            finish = commands.score_run(run_dir, set_dir, endpoint=endpoint_flag,
                                        judge_spec=judge_spec)
        partial = Partial(unscored=unscored, stale=stale, awaiting_host=awaiting,
                          command=str(finish))
    if not rows:
        # An empty run has measured nothing: it says how to fill it, never "pass rate n/a".
        partial = Partial(unscored=[], stale=[], awaiting_host=[],
                          command=str(commands.answer_run(run_dir, set_dir)))
        headline = (f"PARTIAL: no attempt recorded yet; no pass rate (answer the run with "
                    f"run_answers.py, or record an answer with "
                    f"{commands.record_first(run_dir, set_dir)})")
        shown_rate = None
    elif incomplete is None and partial is not None:
        current = len(rows) - len(unscored) - len(stale)
        scored_part = (f"over the {current} attempt(s) scored under current pins only: "
                       f"{rate.text.replace('pass rate ', '', 1)}" if current
                       else "nothing is scored under current pins yet")
        headline = f"PARTIAL: {partial_counts(partial)}; no pass rate ({scored_part})"
        shown_rate = None
    elif incomplete is None:
        headline = rate.text
        shown_rate = rate
    drift = [str(q) for q in (info.get("goldenDrift") or [])]
    headline += "".join(f"; {mark}" for mark in headline_marks(info))
    headline = seal.sealed_headline(headline, [(str(info.get("runId") or run_dir), info)])

    retrieval_figures = _retrieval_figures(retrieval_rows)
    cascade_result = retrieval_figures.pop("cascade", None) if retrieval_rows else None
    warnings = _warnings(rows, retrieval_rows)
    cost = _cost(rows)
    judges = judge_counts(g.score for g in groups.values() if g.score is not None)

    return RunSummary(
        run_id=info.get("runId"), set_name=info.get("setName"), phase=info.get("phase"),
        answerer_model=info.get("answererModel"),
        judge_model=judges_text(judges, info.get("judgeModel")),
        judge_version=info.get("judgeVersion"),
        status=(STATUS_INCOMPLETE if incomplete else STATUS_PARTIAL if partial
                else STATUS_COMPLETE), headline=headline,
        attempts=len(rows), scored=sum(1 for r in rows if r.scored), unscored=unscored,
        pass_rate=shown_rate, verdicts=verdict_counts, null_reasons=dict(sorted(null_reasons.items())),
        excluded_verified_wrong=excluded_vw, doubted_goldens=doubted, vetoes=vetoes,
        incomplete=incomplete, cascade=cascade_result, retrieval=retrieval_figures,
        coverage=_coverage_figures(coverage_report), cost=cost, warnings=warnings, cases=rows,
        settled_by_person=len(settled),
        overruled_by_person=sum(1 for r in rows if r.settled_by and r.judge_verdict != r.verdict),
        golden_drift=drift,
        judges=judges, open_issues=open_issues(issue_events), partial=partial, stale=stale,
        samples=sample_summary(rows),
        ignored=sorted(ignored, key=lambda i: i.line or 0),
        placed=reading.placed if reading is not None else 0,
    )


def sample_summary(rows: Sequence[CaseRow]) -> dict[str, Any] | None:
    """With k answerer samples per case (--samples K > 1): per case the fraction of decided
    samples that matched, and for the run pass@1, pass@k and pass^k with their intervals beside
    the majority figure (reference/run-summary.md). None when every case was answered once."""
    per_case: dict[str, list[CaseRow]] = {}
    for r in rows:
        per_case.setdefault(r.qid, []).append(r)
    k = max((len(v) for v in per_case.values()), default=0)
    if k < 2:
        return None
    cases: list[dict[str, Any]] = []
    counts: list[tuple[int, int]] = []
    for qid, attempts in per_case.items():
        # decided as the pass rate decides: match or no_match, on a golden it trusts
        matched = sum(1 for r in attempts if r.counted and r.verdict == "match")
        decided = sum(1 for r in attempts if r.counted)
        counts.append((matched, decided))
        cases.append({"qid": qid, "samples": len(attempts), "decided": decided,
                      "matched": matched,
                      "fraction": round(matched / decided, 4) if decided else None})
    figures = sample_figures(counts)
    return {"k": k, **figures, "per_case": cases}


def samples_text(samples: Mapping[str, Any] | None) -> str | None:
    """`k=3 samples over 14 cases: pass@1 61.9% (95% CI ..), pass@k .., pass^k .., majority ..`."""
    if not samples or not samples.get("cases"):
        return None

    def fig(name: str, label: str) -> str:
        ci = samples.get(f"{name}_ci")
        interval = f" (95% CI {100 * ci[0]:.1f}-{100 * ci[1]:.1f}%)" if ci else ""
        return f"{label} {100 * samples[name]:.1f}%{interval}"

    return (f"k={samples['k']} samples over {samples['cases']} case(s): "
            + ", ".join((fig("pass_at_1", "pass@1"), fig("pass_at_k", "pass@k"),
                         fig("pass_hat_k", "pass^k"), fig("majority", "majority"))))


PARTIAL_NOTE = ("Not every attempt has a verdict under the current pins: no pass rate is given "
                "until the run is finished.")


def partial_lines(p: Partial) -> list[tuple[str, str]]:
    """What a partial run owes, as (what, `count: labels`) lines: RESULTS.md and the page both
    list exactly these."""
    owed = (("unscored", p.unscored), ("awaiting host replies", p.awaiting_host),
            ("stale (judged against an older golden)", p.stale))
    return [(what, f"{len(labels)}" + (f": {', '.join(labels)}" if labels else ""))
            for what, labels in owed]


def headline_marks(info: Mapping[str, Any]) -> list[str]:
    """What every headline carries after its figures, from run.json: the words that say the
    figures rest on something nobody defends. THE one place such a word is added."""
    marks = []
    drift = [str(q) for q in (info.get("goldenDrift") or [])]
    if drift:
        # Scored with --allow-drift: the figures rest on goldens the truth package no longer
        # gives, and the headline must not read as if they did.
        marks.append(f"GOLDEN DRIFT in {len(drift)} case(s) ({', '.join(drift)}): scored "
                     "against goldens that no longer re-derive")
    return marks


def partial_counts(p: Partial) -> str:
    """`23 unscored (3 awaiting host replies), 2 stale`: what a partial run still owes."""
    waiting = f" ({len(p.awaiting_host)} awaiting host replies)" if p.awaiting_host else ""
    return (f"{len(p.unscored)} unscored{waiting}, {len(p.stale)} stale"
            + (f" (judged against an older golden: {', '.join(p.stale)})" if p.stale else ""))


def _as_retrieval_row(event: Mapping[str, Any]) -> retrieval.RetrievalRow:
    """A retrieval_score event back into the retrieval module's row (tolerant of missing keys)."""
    values: dict[str, Any] = {f.name: event.get(f.name) for f in fields(retrieval.RetrievalRow)}
    values["failed"] = bool(values["failed"])
    values["groups"] = int(values["groups"] or 0)
    for key in ("delivery",):
        values[key] = dict(values[key] or {})
    for key in ("missing", "noise", "asked_kinds"):
        values[key] = list(values[key] or [])
    return retrieval.RetrievalRow(**values)


def _retrieval_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """score_retrieval's summary over the counted attempts' rows, cascade included."""

    figures = to_jsonable(retrieval.summarize([_as_retrieval_row(r) for r in rows]))
    figures["measured"] = sum(1 for r in rows if r.get("recall") is not None)
    return figures


def _warnings(rows: list[CaseRow], retrieval_rows: list[dict[str, Any]]) -> list[str]:
    """What makes the cascade or recall less than the whole run, said out loud."""
    out = []
    missing = [attempt_label(r.qid, r.sample) for r in rows
               if r.excluded is None and r.cascade_rung is None]
    if missing:
        out.append(f"{len(missing)} attempt(s) have no retrieval row and are not in the cascade "
                   f"({', '.join(missing)}): run {commands.SCORE_RETRIEVAL_APPEND} (score_run does)")
    stale = [attempt_label(r.qid, r.sample) for r in rows
             if r.cascade_rung is not None and r.retrieval_verdict != r.verdict]
    if stale:
        out.append(f"retrieval rows carry an older verdict for {', '.join(stale)}: "
                   f"re-run {commands.SCORE_RETRIEVAL_APPEND}")
    return out


def _coverage_figures(figures: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The headline of a coverage report (`CoverageReport.figures`, or the last summary's)."""
    if not figures:
        return None
    return {k: figures.get(k) for k in retrieval.COVERAGE_FIGURES}


def _cost(rows: list[CaseRow]) -> dict[str, Any]:
    """The cost over every attempt (a voided-golden attempt still cost money)."""
    answerer, answerer_unknown = _sum_known(r.answerer_cost_usd for r in rows)
    judged = [r for r in rows if r.scored]
    judge, judge_unknown = _sum_known(r.judge_cost_usd for r in judged)
    turns, _ = _sum_known(r.num_turns for r in rows)
    n = len(rows)
    return {
        "answerer_usd": answerer,
        "answerer_unknown": answerer_unknown,
        "judge_usd": judge,
        "judge_unknown": judge_unknown,
        "turns": int(turns) if turns is not None else None,
        "get_context_calls": sum(r.n_get_context for r in rows),
        "execute_query_calls": sum(r.n_execute for r in rows),
        "entities_delivered_per_answer": round(sum(r.entities_delivered for r in rows) / n, 3)
        if n else None,
    }


def summarize(run: Run, eval_set: EvalSet | None,
              coverage_figures: Mapping[str, Any] | None = None,
              *, judge_spec: str | None = None, endpoint_flag: str | None = None,
              run_label: str | None = None, set_label: str | None = None) -> RunSummary:
    """The summary (reference/run-summary.md) for a ledger run: its live events, the set's
    goldens, retrieval's cascade. `coverage_figures`: a loaded coverage report's figures
    (`retrieval.load_coverage_report(...).figures`), or the last summary's.

    The ledger is read once, streaming (`ledger.live.TiedFold`): per attempt its live attempt,
    its verdicts tied to it (ledger/ties.py) and its tool calls counted, so memory follows the
    attempts, never the events; the figures are those of `summarize_events` over the live view's
    `tied_events()`.

    `run_label` / `set_label` are the paths as the user typed them, for the printed commands;
    a relative one that does not reach the same folder from the kit's root (where the printed
    `.venv/bin/python skills/...` commands run) is printed absolute.
    """
    groups, issues, scored, reading = _stream_groups(run.events_path)
    return _summarize_groups(
        _run_info(run), groups, issues, eval_set, coverage_report=coverage_figures,
        run_dir=from_kit_root(run_label or str(getattr(run, "dir", "<run>"))),
        set_dir=from_kit_root(set_label or str(getattr(eval_set, "dir", "<set>"))),
        judge_spec=commands.provider_from_kit_root(judge_spec), endpoint_flag=endpoint_flag,
        awaiting_host=awaiting_host_replies(run, [k for k in groups if k not in scored]),
        reading=reading,
    )


def summarize_view(run: Run, eval_set: EvalSet | None, view: LiveView,
                   coverage_figures: Mapping[str, Any] | None = None, *,
                   judge_spec: str | None = None, endpoint_flag: str | None = None,
                   run_label: str | None = None, set_label: str | None = None) -> RunSummary:
    """The same summary from a live view already in memory (`summarize_events` over its
    `tied_events()`): the reading the streaming `summarize` must equal, kept as its reference."""
    return summarize_events(
        _run_info(run), view.tied_events(), eval_set, coverage_report=coverage_figures,
        run_dir=from_kit_root(run_label or str(getattr(run, "dir", "<run>"))),
        set_dir=from_kit_root(set_label or str(getattr(eval_set, "dir", "<set>"))),
        judge_spec=commands.provider_from_kit_root(judge_spec), endpoint_flag=endpoint_flag,
        awaiting_host=awaiting_host_replies(
            run, [k for k in view.latest("attempt") if view.score(k) is None]),
        reading=LedgerReading(view.ignored(), view.placed, lambda key: view.line("score", key),
                              str(run.events_path)),
    )


def awaiting_host_replies(run: Run, unscored: Iterable[AttemptKey]) -> frozenset[AttemptKey]:
    """Of the attempts with no live score, those whose judge request was emitted for a host
    subagent (judge/ holds a request.json and no verdict yet): a host ingest, not a new scoring,
    finishes them."""
    waiting = set()
    for key in unscored:
        try:
            if JudgeArtifacts(run, key.qid, key.sample).pending_host_folder() is not None:
                waiting.add(key)
        except KitError:  # an artifact folder that resolves outside the run: not waiting
            continue
    return frozenset(waiting)


def _run_info(run: Run) -> Mapping[str, Any]:
    info = getattr(run, "info", None)
    if callable(info):
        info = info()
    return info if isinstance(info, Mapping) else {}
