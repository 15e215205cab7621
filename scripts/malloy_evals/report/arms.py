"""Arms of a comparison: runs read as outcomes per case, whether two arms may be compared, and
the flip table.

An arm is one or more run folders over the same set. Several runs, or several samples of a case
in one run, are repeated measurements of that arm. Everything comes from each run's live ledger
events (voids applied), never from summary.json, so an arm need not have been summarised.
`compare.py` (two arms, A/B) and `noise.py` (runs of one arm, A/A) both stand on this module, so
a flip means the same thing in a noise band and in the comparison it is held against.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core.findings import Ignored, ignored_counts
from malloy_evals.core.vocab import is_contaminated, is_cut_off
from malloy_evals.core.words import attempt_label
from malloy_evals.ledger.events import AttemptKey, effective_verdict
from malloy_evals.ledger.live import LiveView, TiedFold, decode_lean
from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import EvalSet

# An attempt's outcome, as the comparison sees it.
PASS, FAIL, NEITHER, NULL = "pass", "fail", "neither", "null"
# A case measured k times whose decided attempts passed exactly half the time: decided (it counts
# in the pass fractions), but neither a pass nor a fail, so moving to or from it is not a flip.
SPLIT = "split"
OUTCOME_OF_VERDICT = {"match": PASS, "no_match": FAIL, "near_match": NEITHER,
                      "needs_human": NEITHER}

# How one case changed from the base arm to the candidate, in the order the table lists them.
FIXED, BROKEN, MOVED, UNCHANGED = "fixed", "broken", "moved", "unchanged"
CHANGE_ORDER = (FIXED, BROKEN, MOVED, UNCHANGED)

# Why an attempt is left out of a comparison: the reasons the run summary takes an attempt out
# of its pass rate (an INCOMPLETE run is compared over its clean attempts only).
LEFT_OUT_REASONS = ("truncated", "contaminated", "verified_wrong")

# The judge pins two arms must share (score event keys).
JUDGE_PINS = ("judge_version", "rubric_sha", "judge_prompt_sha", "judge_model")

# Kinds of difference between arms, and the flag that lets each through (None: never).
ALLOWED_BY = {"set": None, "unscored": None, "arm": None,
              "cases": "--only-common-cases", "golden": "--only-common-cases",
              "question": "--only-common-cases", "judge": "--allow-different-judge",
              "dataset": "--allow-different-set",
              "retrieval": "--allow-different-retrieval",
              "publisher": "--allow-different-retrieval"}
NOT_A_MODE = ("indexing", "error")   # get_context answers that did not search


# ---------------------------------------------------------------------------------------------
# One attempt


@dataclass(frozen=True)
class AttemptOutcome:
    """One attempt as a comparison counts it."""

    outcome: str             # pass | fail | neither | null
    verdict: str | None      # the verdict that decided it (match, no_match, near_match, ...)
    reason: str | None       # why it is null: the score's null reason, or "unscored"
    left_out: str | None     # truncated | contaminated | verified_wrong: not compared at all


def attempt_outcome(events: Iterable[Mapping[str, Any]],
                    set_golden_status: str | None = None) -> AttemptOutcome:
    """The outcome of one attempt from its live events (attempt, score, human_verdict, and any
    later kind).

    pass = match, fail = no_match, neither = near_match / needs_human, null = no verdict (with
    its reason; an attempt nobody scored is null `unscored`). An attempt the run summary keeps
    out of its pass rate (truncated, contaminated or "unknown", a golden declared
    verified_wrong by the set, the judge or the person who settled it) is left out of the
    comparison.

    This is the one place a comparison turns a ledger into outcomes; the verdict is the
    attempt's effective verdict (`ledger.events.effective_verdict`): the judge's, or a person's
    who settled it.
    """
    attempt: Mapping[str, Any] = {}
    score: Mapping[str, Any] | None = None
    human: Mapping[str, Any] | None = None
    for e in events:
        if e.get("kind") == "attempt":
            attempt = e
        elif e.get("kind") == "score":
            score = e
        elif e.get("kind") == "human_verdict":
            human = e
    effective = effective_verdict(score, human, attempt or None)
    verdict = effective.verdict
    reason = (effective.reason if effective.scored else "unscored") if verdict is None else None

    left_out = None
    if is_cut_off(attempt.get("truncated"), reason):
        left_out = "truncated"
    elif (is_contaminated(attempt.get("contaminated"))
          or (score is not None and is_contaminated(score.get("contaminated")))
          or reason == "contaminated"):
        left_out = "contaminated"
    elif set_golden_status == "verified_wrong" or effective.gold_status == "verified_wrong":
        left_out = "verified_wrong"
    outcome = OUTCOME_OF_VERDICT.get(verdict or "", NULL)
    return AttemptOutcome(outcome, verdict, reason, left_out)


# ---------------------------------------------------------------------------------------------
# One case in one arm


@dataclass(frozen=True)
class CaseOutcome:
    """One case in one arm: every attempt of it, over every run of the arm."""

    qid: str
    outcome: str                  # pass | fail | split | neither | null
    passed: int                   # clean attempts that passed
    decided: int                  # clean attempts that passed or failed
    attempts: int                 # clean attempts
    pass_fraction: float | None   # passed / decided; None when nothing was decided
    verdicts: list[str | None]    # each clean attempt's verdict, runs in order, then samples
    reasons: list[str]            # why it is null or neither: null reasons / neither verdicts
    left_out: dict[str, int]      # attempts left out, by reason
    golden_revisions: list[int] = field(default_factory=list)  # distinct, from live scores
    question_shas: list[str] = field(default_factory=list)     # distinct, from attempts

    @property
    def text(self) -> str:
        """How a person reads it: `pass`, `fail`, `pass 2/3`, `neither (near_match)`, `null
        (not_submitted)`."""
        detail = f" ({', '.join(self.reasons)})" if self.reasons else ""
        if self.outcome in (NEITHER, NULL):
            return self.outcome + detail
        if self.decided > 1:
            return f"{self.outcome} {self.passed}/{self.decided}"
        return self.outcome

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "text": self.text, "pass_fraction": self.pass_fraction,
                "passed": self.passed, "decided": self.decided, "attempts": self.attempts,
                "verdicts": self.verdicts, "reasons": self.reasons, "left_out": self.left_out}


def case_outcome(qid: str, outcomes: Sequence[AttemptOutcome], *,
                 golden_revisions: Sequence[int] = (),
                 question_shas: Sequence[str] = ()) -> CaseOutcome:
    """A case's outcome in one arm from its attempts' outcomes.

    With k clean attempts the pass fraction is passes / decided, and the case counts as a pass
    when more than half of its decided attempts passed, a fail when fewer than half did, and
    `split` at exactly half. Nothing decided: `neither` when some attempt was, else `null`.
    """
    clean = [o for o in outcomes if o.left_out is None]
    left_out = dict(sorted(Counter(o.left_out for o in outcomes if o.left_out).items()))
    passed = sum(1 for o in clean if o.outcome == PASS)
    decided = passed + sum(1 for o in clean if o.outcome == FAIL)
    fraction = passed / decided if decided else None
    if fraction is not None:
        outcome = PASS if fraction > 0.5 else FAIL if fraction < 0.5 else SPLIT
        reasons: list[str] = []
    elif any(o.outcome == NEITHER for o in clean):
        outcome = NEITHER
        reasons = sorted({o.verdict for o in clean if o.outcome == NEITHER and o.verdict})
    else:
        outcome = NULL
        # Nothing clean to read: the case is null because every attempt was left out.
        reasons = (sorted({o.reason or "unscored" for o in clean}) if clean
                   else [f"left out: {r}" for r in left_out])
    return CaseOutcome(qid=qid, outcome=outcome, passed=passed, decided=decided,
                       attempts=len(clean), pass_fraction=fraction,
                       verdicts=[o.verdict for o in clean], reasons=reasons, left_out=left_out,
                       golden_revisions=sorted(set(golden_revisions)),
                       question_shas=sorted(set(question_shas)))


# ---------------------------------------------------------------------------------------------
# An arm


@dataclass(frozen=True)
class RunInfo:
    """One run folder of an arm, as its run.json and ledger describe it."""

    run_id: str
    dir: str
    started: str | None
    set_name: str | None
    phase: str | None
    answerer_model: str | None
    model_sha: str | None
    attempts: int
    left_out: dict[str, int]
    sandbox: str | None = None     # run.json's `sandbox`: how its answerers ran
    dataset_sha: str | None = None  # run.json datasetSha: the set's files the run was made over


@dataclass(frozen=True)
class Arm:
    """One arm: its runs, every case it attempted, and the judge pins its scores carry."""

    label: str                                  # "base", "candidate", or a run id (A/A)
    runs: list[RunInfo]
    cases: dict[str, CaseOutcome]               # qid -> outcome, every case attempted
    pins: dict[str, list[Any]]                  # judge pin -> distinct values in live scores
    attempts: int                               # every attempt, left out or not
    scored: int                                 # attempts with a live score
    left_out: dict[str, int]                    # attempts left out, by reason
    left_out_labels: dict[str, list[str]] = field(default_factory=dict)  # reason -> attempts
    # What the answers were retrieved against: the get_context retrieval modes the live calls
    # report (semantic, lexical, ... or unreported) and the Publisher versions run.json records.
    retrieval_modes: list[str] = field(default_factory=list)
    publisher_versions: list[str] = field(default_factory=list)
    # Live verdicts of its runs no outcome counts, each on its line with why (ledger/ties.py),
    # and how many verdicts named no attempt and were counted on the attempt before them.
    ignored: list[Ignored] = field(default_factory=list)
    placed: int = 0

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    @property
    def samples_per_case(self) -> int:
        """The most attempts any case has in this arm (1 for a single run answered once)."""
        return max((c.attempts + sum(c.left_out.values()) for c in self.cases.values()),
                   default=0)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "runs": [asdict(r) for r in self.runs],
                "attempts": self.attempts,
                "scored": self.scored, "cases": len(self.cases), "left_out": self.left_out,
                "left_out_attempts": self.left_out_labels, "pins": self.pins,
                "samples_per_case": self.samples_per_case,
                "retrieval_modes": self.retrieval_modes,
                "publisher_versions": self.publisher_versions,
                "ignored": [asdict(i) for i in self.ignored], "placed": self.placed}


def _golden_status(eval_set: EvalSet | None, qid: str) -> str | None:
    if eval_set is None or qid not in eval_set.cases:
        return None
    return eval_set.cases[qid].golden_status


# run.json, folder, and the run's live view (or its live events, voided ones already removed, or
# a `TiedFold` over its ledger not yet read: load_arm's streaming reading)
RunEvents = tuple[Mapping[str, Any], str, "LiveView | TiedFold | Sequence[Mapping[str, Any]]"]


@dataclass
class _RunReading:
    """What an arm takes from one run: per attempt key its live attempt, the events that decide
    its outcome (the attempt and its tied verdicts) and its tied score; the retrieval modes."""

    attempts: Mapping[AttemptKey, Mapping[str, Any]]
    deciding: Callable[[AttemptKey], Sequence[Mapping[str, Any]]]
    score: Callable[[AttemptKey], Mapping[str, Any] | None]
    modes: set[str]
    ignored: list[Ignored]
    placed: int


def _read_view(view: LiveView) -> _RunReading:
    return _RunReading(view.latest("attempt"), view.tied_of_key, view.tied_score,
                       _retrieval_modes(view.events), view.ignored(), view.placed)


def _read_fold(fold: TiedFold) -> _RunReading:
    """One streaming pass: the get_context calls give the modes, the fold keeps the rest."""
    modes = _retrieval_modes(e for e in fold if e.get("kind") == "tool_call")
    attempts = {key: fold.attempt(key) or {} for key in fold.attempt_keys()}

    def deciding(key: AttemptKey) -> list[Mapping[str, Any]]:
        tied = [fold.tied(kind, key) for kind in ("score", "human_verdict")]
        return [attempts[key], *(e for e in tied if e is not None)]

    return _RunReading(attempts, deciding, lambda key: fold.tied("score", key), modes,
                       fold.ignored(), fold.placed)


def _sample_order(key: AttemptKey) -> tuple[str, int]:
    return key.qid, -1 if key.sample is None else key.sample


def arm_from_events(label: str, runs: Sequence[RunEvents], eval_set: EvalSet | None = None) -> Arm:
    """An arm from its runs' run.json, folder and live view (or live events).

    A case-scoped event belongs to its attempt key (qid, sample, phase), within its run; a key
    with no `attempt` event is not an attempt and is ignored, as the run summary does.
    """
    per_case: dict[str, list[AttemptOutcome]] = {}
    revisions: dict[str, list[int]] = {}
    shas: dict[str, list[str]] = {}
    pins: dict[str, list[Any]] = {p: [] for p in JUDGE_PINS}
    infos: list[RunInfo] = []
    left_labels: dict[str, list[str]] = {}
    modes: set[str] = set()
    versions: set[str] = set()
    ignored: list[Ignored] = []
    total = scored = placed = 0
    for info, directory, events in runs:
        reading = (_read_fold(events) if isinstance(events, TiedFold)
                   else _read_view(events if isinstance(events, LiveView)
                                   else LiveView.of_events(events)))
        modes |= reading.modes
        ignored += reading.ignored
        placed += reading.placed
        if info.get("publisherVersion"):
            versions.add(str(info["publisherVersion"]))
        run_left: Counter[str] = Counter()
        run_attempts = 0
        for key, attempt in sorted(reading.attempts.items(),
                                   key=lambda kv: _sample_order(kv[0])):
            qid, sample = key.qid, key.sample
            run_attempts += 1
            # Only verdicts tied to the attempt they judged count (ledger/ties.py).
            outcome = attempt_outcome(reading.deciding(key), _golden_status(eval_set, qid))
            per_case.setdefault(qid, []).append(outcome)
            score = reading.score(key)
            if score is not None:
                scored += 1
                rev = score.get("golden_revision")
                if isinstance(rev, int) and not isinstance(rev, bool):
                    revisions.setdefault(qid, []).append(rev)
                for pin in JUDGE_PINS:
                    value = score.get(pin)
                    if value is not None and value not in pins[pin]:
                        pins[pin].append(value)
            if isinstance(attempt.get("question_sha"), str):
                shas.setdefault(qid, []).append(attempt["question_sha"])
            if outcome.left_out:
                run_left[outcome.left_out] += 1
                run_id = str(info.get("runId") or Path(directory).name)
                name = attempt_label(qid, sample)
                left_labels.setdefault(outcome.left_out, []).append(
                    f"{run_id}:{name}" if len(runs) > 1 else name)
        total += run_attempts
        infos.append(RunInfo(
            run_id=str(info.get("runId") or Path(directory).name), dir=str(directory),
            started=info.get("started"), set_name=info.get("setName"), phase=info.get("phase"),
            answerer_model=info.get("answererModel"), model_sha=info.get("modelSha"),
            attempts=run_attempts, left_out=dict(sorted(run_left.items())),
            sandbox=info.get("sandbox"),
            dataset_sha=info.get("datasetSha") if isinstance(info.get("datasetSha"), str)
            else None))
    cases = {qid: case_outcome(qid, outs, golden_revisions=revisions.get(qid, ()),
                               question_shas=shas.get(qid, ()))
             for qid, outs in sorted(per_case.items())}
    left = Counter(o.left_out for outs in per_case.values() for o in outs if o.left_out)
    return Arm(label=label, runs=infos, cases=cases, pins=pins,
               attempts=total, scored=scored, left_out=dict(sorted(left.items())),
               left_out_labels={k: sorted(v) for k, v in sorted(left_labels.items())},
               retrieval_modes=sorted(modes), publisher_versions=sorted(versions),
               ignored=ignored, placed=placed)


def _retrieval_modes(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """The retrieval modes the live get_context calls of a run report (semantic, lexical). An
    answer that names none (the older payload, the Publisher's plain-query path) says nothing
    about its mode, and `indexing` / `error` mean the server did not search: neither counts."""
    modes = set()
    for event in events:
        if event.get("kind") == "tool_call" and event.get("tool") == "get_context" \
                and not event.get("error"):
            mode = event.get("retrieval_mode")
            if isinstance(mode, str) and mode and mode not in NOT_A_MODE:
                modes.add(mode)
    return modes


def load_arm(label: str, run_dirs: Sequence[str | Path], eval_set: EvalSet | None = None) -> Arm:
    """An arm read from its run folders' run.json and live ledgers (InputError, exit 3, for a
    folder that is not a run). Each ledger is read once, streaming (`ledger.live.TiedFold`): per
    attempt its live attempt and tied verdicts, the get_context calls for their modes; memory
    follows the attempts, never the events."""
    runs: list[RunEvents] = []
    for d in run_dirs:
        run = Run.open(d)
        runs.append((run.info, str(d), TiedFold(run.events_path, needles=(b'"get_context"',),
                                                decode=decode_lean)))
    return arm_from_events(label, runs, eval_set)


# ---------------------------------------------------------------------------------------------
# May these two arms be compared?


@dataclass(frozen=True)
class Difference:
    """One way two arms (or one arm's runs) differ, named for a person."""

    kind: str                 # set | unscored | arm | cases | golden | question | judge |
                              # dataset | retrieval | publisher
    text: str                 # `bk_refunds: goldenRevision 2 vs 3`
    qid: str | None = None    # the case it concerns, when it concerns one

    @property
    def allowed_by(self) -> str | None:
        """The flag that lets a comparison go on despite it (None: nothing does)."""
        return ALLOWED_BY.get(self.kind)


def _dataset_shas(arm: Arm) -> list[str]:
    return sorted({r.dataset_sha for r in arm.runs if r.dataset_sha})


def _short(shas: Sequence[str]) -> str:
    return ", ".join(s[:12] for s in shas)


def _values(values: Sequence[Any]) -> str:
    return ", ".join(str(v) for v in values) if values else "none"


def arm_differences(arm: Arm, set_name: str) -> list[Difference]:
    """What is wrong inside one arm: another set, nothing scored, pins that vary between its
    runs or attempts, a case whose golden revision or question changed between attempts."""
    out = []
    for r in arm.runs:
        if r.set_name != set_name:
            out.append(Difference("set", f"{arm.label}: run {r.run_id} is over set "
                                         f"{r.set_name or 'null'}, not {set_name}"))
    if arm.scored == 0:
        counted = ignored_counts([i for i in arm.ignored if i.kind == "score"])
        why = (f"{counted}, each named above with its line; score "
               if counted else "score ")
        out.append(Difference("unscored", f"{arm.label}: no attempt has a score counted ({why}"
                                          f"{', '.join(arm.run_ids)} with score_run.py first)"))
    for pin, values in arm.pins.items():
        if len(values) > 1:
            out.append(Difference("judge", f"{arm.label}: {pin} varies across its scores "
                                           f"({_values(values)})"))
    shas = _dataset_shas(arm)
    if len(shas) > 1:
        out.append(Difference("dataset", f"{arm.label}: datasetSha varies across its runs "
                                         f"({_short(shas)})"))
    for qid, case in arm.cases.items():
        if len(case.golden_revisions) > 1:
            out.append(Difference("golden", f"{qid}: goldenRevision varies within {arm.label} "
                                            f"({_values(case.golden_revisions)})", qid))
        if len(case.question_shas) > 1:
            out.append(Difference("question", f"{qid}: question sha varies within {arm.label} "
                                              f"({_values(case.question_shas)})", qid))
    return out


def pair_differences(base: Arm, candidate: Arm) -> list[Difference]:
    """How two arms differ where they must agree: the cases attempted, each common case's golden
    revision and question, and the judge pins (judge version, rubric sha, judge prompt sha,
    judge model)."""
    out = []
    base_sets, cand_sets = _dataset_shas(base), _dataset_shas(candidate)
    if base_sets and cand_sets and base_sets != cand_sets:
        out.append(Difference("dataset", f"datasetSha: {_short(base_sets)} vs {_short(cand_sets)} "
                                         "(the set's files changed between the arms)"))
    only_base = sorted(set(base.cases) - set(candidate.cases))
    only_cand = sorted(set(candidate.cases) - set(base.cases))
    if only_base:
        out.append(Difference("cases", f"case set: {len(only_base)} case(s) only in "
                                       f"{base.label} ({', '.join(only_base)})"))
    if only_cand:
        out.append(Difference("cases", f"case set: {len(only_cand)} case(s) only in "
                                       f"{candidate.label} ({', '.join(only_cand)})"))
    for qid in sorted(set(base.cases) & set(candidate.cases)):
        b, c = base.cases[qid], candidate.cases[qid]
        if b.golden_revisions and c.golden_revisions and b.golden_revisions != c.golden_revisions:
            out.append(Difference("golden", f"{qid}: goldenRevision {_values(b.golden_revisions)} "
                                            f"vs {_values(c.golden_revisions)}", qid))
        if b.question_shas and c.question_shas and b.question_shas != c.question_shas:
            out.append(Difference("question", f"{qid}: question sha {_values(b.question_shas)} "
                                              f"vs {_values(c.question_shas)}", qid))
    for pin in JUDGE_PINS:
        bv, cv = base.pins.get(pin) or [], candidate.pins.get(pin) or []
        if bv and cv and bv != cv:
            out.append(Difference("judge", f"{pin}: {_values(bv)} vs {_values(cv)}"))
    out += retrieval_differences(base, candidate)
    return out


def retrieval_differences(base: Arm, candidate: Arm) -> list[Difference]:
    """Whether the two arms' answers were retrieved alike: the same get_context retrieval modes
    (a semantic arm against a lexical one measures search as much as the change) and the same
    Publisher version, when either arm records one."""
    out = []
    bm, cm = base.retrieval_modes, candidate.retrieval_modes
    if bm and cm and bm != cm:
        out.append(Difference("retrieval", f"retrieval mode: {_values(bm)} ({base.label}) vs "
                                           f"{_values(cm)} ({candidate.label})"))
    bv, cv = base.publisher_versions, candidate.publisher_versions
    if (bv or cv) and bv != cv:
        out.append(Difference("publisher", f"Publisher version: {_values(bv) if bv else 'unknown'} "
                                           f"({base.label}) vs {_values(cv) if cv else 'unknown'} "
                                           f"({candidate.label})"))
    return out


@dataclass(frozen=True)
class Pairing:
    """Whether two arms are compared, over which cases, and what was let through."""

    differences: list[Difference]
    refused: bool                   # a difference no flag allows, or one whose flag was not given
    qids: list[str]                 # the cases compared (in both arms, not dropped)
    dropped: dict[str, str]         # qid -> why it was left out by --only-common-cases

    @property
    def allowed(self) -> list[str]:
        """The flags that let a difference through."""
        if self.refused:
            return []
        return sorted({d.allowed_by for d in self.differences if d.allowed_by})


def pair_arms(base: Arm, candidate: Arm, set_name: str, *, only_common_cases: bool = False,
              allow_different_judge: bool = False, allow_different_set: bool = False,
              allow_different_retrieval: bool = False,
              extra: Sequence[Difference] = ()) -> Pairing:
    """Decide whether two arms may be compared, and over which cases.

    Every difference is named. A comparison goes on only when each difference is allowed by a
    flag that was given: --only-common-cases drops the cases attempted by one arm only and the
    cases whose golden revision or question differs; --allow-different-judge lets different
    judge pins through; --allow-different-set lets runs made over other versions of the set's
    files (run.json datasetSha) through; --allow-different-retrieval lets arms answered against
    different retrieval modes or Publisher versions through. `extra` adds differences found
    elsewhere (a noise band's pins).
    """
    found = [*arm_differences(base, set_name), *arm_differences(candidate, set_name),
             *pair_differences(base, candidate), *extra]
    given = {"--only-common-cases": only_common_cases,
             "--allow-different-judge": allow_different_judge,
             "--allow-different-set": allow_different_set,
             "--allow-different-retrieval": allow_different_retrieval}
    refused = any(d.allowed_by is None or not given[d.allowed_by] for d in found)
    dropped = {d.qid: d.text for d in found if d.qid and d.kind in ("golden", "question")}
    qids = sorted((set(base.cases) & set(candidate.cases)) - set(dropped))
    return Pairing(found, refused, qids, dropped)


# ---------------------------------------------------------------------------------------------
# The flip table


@dataclass(frozen=True)
class CaseRow:
    """One case of the flip table: each arm's outcome and how it changed."""

    qid: str
    change: str               # fixed | broken | moved | unchanged
    base: CaseOutcome
    candidate: CaseOutcome
    target: bool = False      # one of the cases the change meant to fix (--targets)

    @property
    def decided_in_both(self) -> bool:
        return self.base.decided > 0 and self.candidate.decided > 0

    def to_json(self) -> dict[str, Any]:
        return {"qid": self.qid, "change": self.change, "target": self.target,
                "decided_in_both": self.decided_in_both,
                "base": self.base.to_json(), "candidate": self.candidate.to_json()}


def change_of(base: CaseOutcome, candidate: CaseOutcome) -> str:
    """fail -> pass is fixed, pass -> fail is broken; any other difference (into or out of
    neither, null or split, a pass fraction that moved without crossing half) is moved."""
    if base.outcome == FAIL and candidate.outcome == PASS:
        return FIXED
    if base.outcome == PASS and candidate.outcome == FAIL:
        return BROKEN
    same = (base.outcome, base.pass_fraction, base.reasons) == (
        candidate.outcome, candidate.pass_fraction, candidate.reasons)
    return UNCHANGED if same else MOVED


def flip_table(base: Arm, candidate: Arm, qids: Iterable[str],
               targets: Iterable[str] = ()) -> list[CaseRow]:
    """One row per case, ordered fixed, broken, moved, unchanged (then by qid)."""
    wanted = set(targets)
    rows = [CaseRow(q, change_of(base.cases[q], candidate.cases[q]), base.cases[q],
                    candidate.cases[q], q in wanted) for q in qids]
    return sorted(rows, key=lambda r: (CHANGE_ORDER.index(r.change), r.qid))


def flips(rows: Sequence[CaseRow]) -> tuple[list[str], list[str]]:
    """(fixed qids, broken qids) of a flip table."""
    return ([r.qid for r in rows if r.change == FIXED], [r.qid for r in rows if r.change == BROKEN])
