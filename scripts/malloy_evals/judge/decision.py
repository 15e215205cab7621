"""The one decision path from a submission to a verdict, shared by runs, calibration and regressions.

Its order: truncated -> golden gate -> not submitted -> contamination -> re-execution ->
must-not-use -> judge -> mechanical overrides. Golden gates and `not_submitted` decide before any
provider call. Provider failures map to null reasons (`judge_error: ...`, `budget_exhausted`); a
missing or stale recording, a pending host reply and a dry run raise instead: nothing is written,
so a resumed run picks the attempt up again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from malloy_evals.checks.must_not_use import Definitions, MustNotUseResult, check_must_not_use
from malloy_evals.core import files
from malloy_evals.core.errors import UnmeasuredError
from malloy_evals.core.vocab import GOLDEN_STATUSES, is_contaminated
from malloy_evals.judge.doctrine import Doctrine, judge_prompt_sha, judge_version_pin, load_doctrine
from malloy_evals.judge.packet import Submission, build_packet, build_request, source_definitions
from malloy_evals.judge.verdict import FinalVerdict, JudgeCall, call_judge, post_process
from malloy_evals.ledger.artifacts import PredictionView
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.ties import REPLIES_FILE, REQUEST_FILE, file_sha, reply_origin
from malloy_evals.llm.base import (
    BudgetExhausted,
    HostReplyPending,
    Provider,
    ProviderError,
    RecordingMissing,
    phase_of,
)
from malloy_evals.sets.eval_set import VALUE_KINDS, Case, EvalSet, golden_value

# Every golden status but `verified` stops an attempt before the judge (a missing status is verified).
GATED_STATUSES = tuple(s for s in GOLDEN_STATUSES if s != "verified")

# reexecutor(run, eval_set, qid, sample) -> PredictionView; injected by tests and calibration.
Reexecutor = Callable[[Run, EvalSet, str, int | None], PredictionView | None]


@dataclass(frozen=True)
class Decision:
    """Everything a score event records about one judged (or gated) submission."""

    verdict: str | None
    reason: str | None
    why: str | None = None
    confidence: int | None = None
    column_pairing: dict | None = None
    gold_status: str | None = None
    gold_note: str | None = None
    judge_verdict: str | None = None
    must_not_use_hits: list[str] | None = None
    must_not_use_notes: list[str] | None = None  # hits reached only through unreported columns
    leaf_hits: list[str] | None = None
    contaminated: bool | str | None = None
    judge_model: str | None = None
    judge_version: int | str | None = None
    rubric_sha: str | None = None
    judge_prompt_sha: str | None = None
    golden_revision: int | None = None
    prediction_path: str | None = None
    judge_artifact: str | None = None
    request_sha: str | None = None                # the judge request and reply artifact it came
    reply_artifact: str | None = None             # from, as written in the run (ledger/ties.py)
    reply_sha: str | None = None
    reply_origin: str | None = None
    judge_cost_usd: float | None = None
    judge_input_tokens: int | None = None
    judge_output_tokens: int | None = None
    judge_samples: list[str | None] | None = None  # every sample's verdict when asked K > 1 times
    provider_calls: int = 0                       # not an event field: how many calls it took
    raw_replies: list[dict] = field(default_factory=list, repr=False)  # kept for unparseable

    def event_fields(self) -> dict[str, Any]:
        """The score event's fields (without kind, qid, sample, phase)."""
        skip = {"provider_calls", "raw_replies"}
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in skip}


class JudgeArtifacts:
    """Where one attempt's judge request, replies and verdict go (write-once)."""

    def __init__(self, run: Run, qid: str, sample: int | None):
        self.run, self.qid, self.sample = run, qid, sample
        self.folder: Path | None = None

    def new_folder(self) -> Path:
        self.folder = self.run.new_artifact_dir(self.qid, self.sample, "judge")
        return self.folder

    def pending_host_folder(self) -> Path | None:
        """The newest judge folder holding an emitted request and no verdict yet (host ingest).
        Only real folders named `judge` or `judge.N` count: a link planted among them is not one."""
        base = self.run.artifact_dir(self.qid, self.sample)
        folders: list[tuple[int, Path]] = []
        for p in base.glob("judge*"):
            m = re.fullmatch(r"judge(?:\.(\d+))?", p.name)
            emitted = (p / "request.json").is_file() or (p / "s1" / "request.json").is_file()
            if m and files.is_real_dir(p) and emitted and not os.path.lexists(p / "verdict.json"):
                folders.append((int(m.group(1) or 1), p))
        if not folders:
            return None
        self.folder = max(folders)[1]
        return self.folder

    def write(self, name: str, data: Any) -> None:
        """Write `name` once into the judge folder (evidence is never overwritten, never written
        through a link)."""
        assert self.folder is not None
        self.run.write_once(self.folder, name, data)

    @property
    def relpath(self) -> str | None:
        return self.run.relpath(self.folder) if self.folder is not None else None

    def digests(self, provider: Provider, replied: bool) -> dict[str, Any]:
        """The score's ties to what was written here: the request's digest and, when a reply was
        written, the reply artifact's path, digest and origin (read back from the files, so a
        request a host emitted earlier is digested as it lies)."""
        if self.folder is None:
            return {}
        out: dict[str, Any] = {"request_sha": file_sha(self.folder / REQUEST_FILE)}
        if replied:
            reply = self.folder / REPLIES_FILE
            out.update(reply_artifact=self.run.relpath(reply), reply_sha=file_sha(reply),
                       reply_origin=reply_origin(provider.spec))
        return out


def _pins(doctrine: Doctrine, case: Case, provider: Provider, key: str) -> dict[str, Any]:
    return {"judge_model": provider.pinned_model(key),
            "judge_version": judge_version_pin(doctrine), "rubric_sha": doctrine.sha,
            "judge_prompt_sha": judge_prompt_sha(), "golden_revision": case.golden_revision}


def golden_gate(case: Case) -> str | None:
    """The null reason a golden imposes before any judging, or None when it may be judged."""
    if case.golden is None:
        return "golden_missing"
    status = case.golden_status
    if status in GATED_STATUSES:
        return f"golden_{status}"
    return None


UNSTABLE_SAMPLES = 3  # judge samples where the doctrine says the judge is known unstable
UNSTABLE = "judge_unstable"


def known_unstable(case: Case, submission: Submission) -> bool:
    """Where the judge is known unstable (reference/judge.md, "Self-consistency"): an answer that
    ran no final query (a refusal or a clarifying question, as far as the kit can tell before the
    judge reads it) against a golden that holds a value."""
    return (case.golden_kind in VALUE_KINDS and submission.submitted
            and not (submission.final_query or "").strip())


def judge_samples_for(case: Case, submission: Submission, asked: int | None) -> int:
    """How many times the judge is asked: `asked` (--judge-samples) when given, else
    UNSTABLE_SAMPLES where it is known unstable, else once."""
    if asked is not None:
        return max(1, asked)
    return UNSTABLE_SAMPLES if known_unstable(case, submission) else 1


def sample_keys(key: str, k: int) -> list[str]:
    """The recording keys of k judge samples: the key itself once, else `<key>.s1` ... `<key>.sK`."""
    return [key] if k <= 1 else [f"{key}.s{i}" for i in range(1, k + 1)]


def split_words(verdicts: list[str | None]) -> str:
    """`2 match / 1 no_match`: how K samples split, most common first."""
    counts: dict[str, int] = {}
    for v in verdicts:
        word = v or "unparseable"
        counts[word] = counts.get(word, 0) + 1
    return " / ".join(f"{n} {w}" for w, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def must_not_use_check(case: Case, final_query: str | None,
                       definitions: Definitions | str | None = None,
                       outputs: list[str] | None = None) -> MustNotUseResult | None:
    """The must-not-use veto on the final query against the case's golden.mustNotUse (None when
    it has none), expanded through the model's `definitions` when the caller read them;
    `outputs`: the prediction's columns, for the veto's lineage to what the answer reported."""
    entries = case.must_not_use
    if not entries:
        return None
    return check_must_not_use(final_query or None, entries, definitions=definitions,
                              allowed_in=getattr(case, "must_not_use_allowed_in", None),
                              outputs=outputs)


def output_columns(prediction: PredictionView | None) -> list[str]:
    """The columns of the re-executed rows, in order (none without rows)."""
    rows = prediction.rows if prediction is not None else None
    return [str(k) for k in rows[0]] if rows and isinstance(rows[0], dict) else []


def golden_columns(value: Any) -> list[str]:
    """The columns a golden compares: a scalar's keys, or the keys of its rows."""
    if isinstance(value, dict):
        return [str(k) for k in value if k != "round"]
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [str(k) for k in value[0]]
    return []


def reported_columns(outputs: list[str], gold: list[str],
                     pairing: dict[str, str | None] | None) -> list[str]:
    """The output columns the answer reports: the ones the judge paired with a golden column,
    and the ones named as a golden column. Empty (every output column counts) when the golden
    compares no column."""
    if not gold:
        return []
    paired = [v for v in (pairing or {}).values() if isinstance(v, str)]
    return [c for c in outputs if c in paired or c in gold]


def _model_sources(eval_set: EvalSet, submission: Submission) -> str:
    path = getattr(eval_set, "model_file", None)
    if path is None or not Path(path).is_file() or not submission.final_query:
        return ""
    return source_definitions(Path(path).read_text(encoding="utf-8"), submission.final_query,
                                submission.source_name)


def evaluate(eval_set: EvalSet, case: Case, submission: Submission, *, provider: Provider, key: str,
             truncated: bool = False, run_error: str | None = None,
             contaminated: bool | str | None = False,
             reexecute: Callable[[], PredictionView | None] | None = None,
             artifacts: JudgeArtifacts | None = None, judge_retries: int = 1,
             doctrine: Doctrine | None = None,
             phrases: tuple[list[str], list[str]] | None = None,
             definitions: Definitions | str | None = None,
             judge_samples: int = 1) -> Decision:
    """The decision for one submission (reference/scoring.md); asks the judge `judge_samples`
    times (each at most 1 + judge_retries calls), and never before the gates have passed.
    With K > 1 samples the verdict is the unanimous one, else needs_human `judge_unstable`.
    `definitions`: the model's, for the veto's expansion (or why they could not be read); None
    reads the query text alone."""
    doctrine = doctrine or load_doctrine()
    pins = _pins(doctrine, case, provider, key)

    tainted = is_contaminated(contaminated)

    def null(reason: str, **extra: Any) -> Decision:
        return Decision(verdict=None, reason=reason, contaminated=contaminated, **pins, **extra)

    def judge_null(reason: str, **extra: Any) -> Decision:
        # A contaminated attempt is void whatever the judge did; that is the reason to record.
        return null("contaminated" if tainted else reason, **extra)

    if truncated:
        return null("answerer_truncated")
    if run_error:
        return null(f"environment_failure: {run_error}")
    gate = golden_gate(case)
    if gate:
        return null(gate)
    if not submission.submitted:
        return null("not_submitted")

    # Re-execution: the prediction the judge sees is the kit's own run of the final query.
    if reexecute is not None and submission.final_query:
        try:
            submission = replace(submission, prediction=reexecute())
        except UnmeasuredError as exc:
            return null(f"environment_failure: {exc}")
    prediction_path = submission.prediction.path if submission.prediction else None

    outputs = output_columns(submission.prediction)
    mnu = must_not_use_check(case, submission.final_query, definitions, outputs)
    hits = list(mnu.hits) if mnu is not None else []
    leaf = list(mnu.leaf_hits) if mnu is not None else []
    note = mnu.judge_note if mnu is not None else ""

    gold_value = golden_value(case, eval_set.dir)
    gold_cols = golden_columns(gold_value)
    packet = build_packet(case, gold_value, submission, judge_note=note,
                            model_sources=_model_sources(eval_set, submission))
    keys = sample_keys(key, judge_samples)
    requests = [build_request(doctrine, packet, k) for k in keys]

    common = {"prediction_path": prediction_path, "must_not_use_hits": hits, "leaf_hits": leaf}
    # A contaminated attempt is null whatever the judge says, so a reply nobody wrote (no
    # authored or recorded reply, no host reply) is not required: the judge's read is kept when
    # there is one, and its absence never leaves the attempt unscored.
    # A two-phase provider's request and reply live in the attempt's judge folder: a new one
    # when emitting, the one an earlier emit left waiting when ingesting.
    emitting = phase_of(provider) == "emit"
    cycle = provider.cycle
    if artifacts is not None and cycle is not None:
        folder = artifacts.new_folder() if emitting else artifacts.pending_host_folder()
        if folder is None:
            if tainted:
                return null("contaminated", **common)
            raise HostReplyPending(f"{key}: no emitted judge request waiting for a reply; "
                                   "run with --emit first")
        for i, k in enumerate(keys, 1):
            # One request per sample: the judge folder itself, or its s1/ ... sK/ for K samples.
            cycle.place(k, folder if len(keys) == 1 else folder / f"s{i}",
                        root=artifacts.run.dir)

    calls: list[JudgeCall] = []
    pending: HostReplyPending | None = None
    try:
        for request in requests:
            try:
                calls.append(call_judge(provider, request, retries=judge_retries))
            except HostReplyPending as exc:
                # Emit writes every sample's request before it stops; ingest waits for all K.
                pending = pending or exc
        if pending is not None:
            raise pending
    except (RecordingMissing, HostReplyPending):
        if tainted and not emitting:
            return null("contaminated", **common)
        raise
    except BudgetExhausted:
        return judge_null("budget_exhausted", **common)
    except ProviderError as exc:
        if artifacts is not None:
            if artifacts.folder is None:
                artifacts.new_folder()
            artifacts.write(REQUEST_FILE, requests[0].to_json())
            artifacts.write("error.json", {"error": str(exc)})
        return judge_null(f"judge_error: {exc}", judge_artifact=artifacts.relpath if artifacts else None,
                          **(artifacts.digests(provider, False) if artifacts else {}), **common)

    if artifacts is not None:
        if artifacts.folder is None:
            artifacts.new_folder()
        artifacts.write(REQUEST_FILE, requests[0].to_json())
        artifacts.write(REPLIES_FILE, _replies_json(calls))
    usage = {"judge_model": calls[-1].source or pins["judge_model"],
             "judge_cost_usd": _total([c.cost_usd for c in calls], 8),
             "judge_input_tokens": _total([c.input_tokens for c in calls]),
             "judge_output_tokens": _total([c.output_tokens for c in calls]),
             "provider_calls": sum(len(c.replies) for c in calls),
             "judge_artifact": artifacts.relpath if artifacts else None,
             **(artifacts.digests(provider, True) if artifacts else {})}
    base = {**pins, **usage, **common}
    def vetoes(parsed: Any) -> list[str]:
        # The veto follows lineage to what the answer reported (reference/must-not-use.md).
        if mnu is None:
            return []
        return mnu.vetoes(reported_columns(outputs, gold_cols, parsed.column_pairing))

    finals = [None if c.parsed is None else
              post_process(c.parsed, veto_hits=vetoes(c.parsed),
                           contaminated=contaminated or False,
                           phrases=phrases, answer_text=submission.answer_text or "",
                           planted_agreement=c.planted_agreement) for c in calls]
    first = next((c.parsed for c in calls if c.parsed is not None), None)
    if mnu is not None and mnu.through_outputs and first is not None:
        shown = reported_columns(outputs, gold_cols, first.column_pairing)
        base = {**base, "must_not_use_hits": mnu.vetoes(shown),
                "must_not_use_notes": mnu.lineage_notes(shown) or None}
    raw = _replies_json(calls)
    decision = _decide(finals, tainted=tainted, contaminated=contaminated, raw=raw, base=base,
                       sampled=len(calls) > 1)
    if artifacts is not None:
        artifacts.write("verdict.json", decision.event_fields())
    return decision


def _total(values: list[Any], digits: int | None = None) -> Any:
    """The sum of per-sample figures; None when any is unknown (never a partial sum)."""
    if not values or any(v is None for v in values):
        return None
    total = sum(values)
    return round(total, digits) if digits is not None else total


def _replies_json(calls: list[JudgeCall]) -> list[dict]:
    if len(calls) == 1:
        return calls[0].to_json()
    return [{**r, "judge_sample": i} for i, c in enumerate(calls, 1) for r in c.to_json()]


def _decide(finals: list[FinalVerdict | None], *, tainted: bool, contaminated: bool | str | None,
            raw: list[dict], base: dict[str, Any], sampled: bool) -> Decision:
    """One decision from K post-processed samples: the unanimous verdict, else needs_human
    `judge_unstable` with the split; every sample's verdict recorded when K > 1."""
    verdicts = [f.verdict if f is not None else None for f in finals]
    samples = verdicts if sampled else None
    usable = [f for f in finals if f is not None]
    if not usable:
        return Decision(verdict=None, reason="contaminated" if tainted else "judge_unparseable",
                        contaminated=contaminated, raw_replies=raw, judge_samples=samples, **base)
    first = usable[0]
    if len(usable) == len(finals) and len(set(verdicts)) == 1:
        return Decision(verdict=first.verdict, reason=first.reason, why=first.why,
                        confidence=first.confidence, column_pairing=first.column_pairing,
                        gold_status=first.gold_status, gold_note=first.gold_note,
                        judge_verdict=first.judge_verdict, contaminated=contaminated,
                        raw_replies=raw, judge_samples=samples, **base)
    if tainted:
        return Decision(verdict=None, reason="contaminated", contaminated=contaminated,
                        raw_replies=raw, judge_samples=samples, **base)
    split = split_words(verdicts)
    why = f"{UNSTABLE}: the judge split {split} over {len(finals)} samples. " + " ".join(
        f"Sample {i} ({f.verdict if f else 'unparseable'}): {f.why if f else 'no usable reply'}"
        for i, f in enumerate(finals, 1))
    return Decision(verdict="needs_human", reason=f"{UNSTABLE}: {split}", why=why,
                    confidence=min((f.confidence for f in usable if f.confidence is not None),
                                   default=None),
                    column_pairing=first.column_pairing, gold_status=first.gold_status,
                    gold_note=first.gold_note, judge_verdict=None, contaminated=contaminated,
                    raw_replies=raw, judge_samples=samples, **base)
