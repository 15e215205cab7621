"""Scoring one attempt (SPEC 5.5): the gates, the checks, the judge, the overrides, one score event.

`evaluate` is the one decision path, shared by a run's attempts (`score_attempt`), judge
calibration's canned answers and the regression fixtures, so what calibration proves is what a run
does. Its order is SPEC 5.5's: truncated -> golden gate -> not submitted -> contamination ->
re-execution -> must-not-use -> judge -> mechanical overrides. Golden gates and `not_submitted`
decide before any provider call.

Provider failures map to null reasons (`judge_error: ...`, `budget_exhausted`); a missing or stale
recording, a pending host reply and a dry run raise instead: nothing is written, so a resumed run
picks the attempt up again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import judge as J
from .errors import InputError, UnmeasuredError
from .providers import BudgetExhausted, ProviderError, pinned_model

GATED_STATUSES = ("provisional", "invalid", "ambiguous", "verified_wrong")

# reexecutor(run, eval_set, qid, sample) -> PredictionView; injected by tests and calibration.
Reexecutor = Callable[[Any, Any, str, Any], "J.PredictionView"]


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
    leaf_hits: list[str] | None = None
    contaminated: bool | str | None = None
    judge_model: str | None = None
    judge_version: int | str | None = None
    rubric_sha: str | None = None
    judge_prompt_sha: str | None = None
    golden_revision: int | None = None
    prediction_path: str | None = None
    judge_artifact: str | None = None
    judge_cost_usd: float | None = None
    judge_input_tokens: int | None = None
    judge_output_tokens: int | None = None
    provider_calls: int = 0                       # not an event field: how many calls it took
    raw_replies: list[dict] = field(default_factory=list, repr=False)  # kept for unparseable

    def event_fields(self) -> dict[str, Any]:
        """The score event's fields (without kind, qid, sample, phase)."""
        skip = {"provider_calls", "raw_replies"}
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in skip}


class JudgeArtifacts:
    """Where one attempt's judge request, replies and verdict go (write-once, SPEC 3)."""

    def __init__(self, run: Any, qid: str, sample: int | None):
        self.run, self.qid, self.sample = run, qid, sample
        self.folder: Path | None = None

    def new_folder(self) -> Path:
        self.folder = self.run.new_artifact_dir(self.qid, self.sample, "judge")
        return self.folder

    def pending_host_folder(self) -> Path | None:
        """The newest judge folder holding an emitted request and no verdict yet (host ingest)."""
        base = self.run.artifact_dir(self.qid, self.sample)
        folders = [p for p in base.glob("judge*") if p.is_dir() and (p / "request.json").is_file()
                   and not (p / "verdict.json").exists()]
        if not folders:
            return None
        self.folder = max(folders, key=lambda p: int(p.name.split(".")[1])
                          if "." in p.name and p.name.split(".")[1].isdigit() else 1)
        return self.folder

    def write(self, name: str, data: Any) -> None:
        assert self.folder is not None
        path = self.folder / name
        if path.exists():  # write-once: never overwrite evidence
            return
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n",
                        encoding="utf-8")

    @property
    def relpath(self) -> str | None:
        return self.run.relpath(self.folder) if self.folder is not None else None


def _pins(doctrine: J.Doctrine, case: Any, provider: Any, key: str) -> dict[str, Any]:
    return {"judge_model": pinned_model(provider, key),
            "judge_version": J.judge_version_pin(doctrine), "rubric_sha": doctrine.sha,
            "judge_prompt_sha": J.judge_prompt_sha(), "golden_revision": case.golden_revision}


def golden_gate(case: Any) -> str | None:
    """The null reason a golden imposes before any judging, or None when it may be judged."""
    if case.golden is None:
        return "golden_missing"
    status = case.golden_status
    if status in GATED_STATUSES:
        return f"golden_{status}"
    return None


def must_not_use_check(case: Any, final_query: str | None) -> Any:
    """SPEC 5.2 on the final query against the case's golden.mustNotUse (None when it has none)."""
    entries = case.must_not_use
    if not entries:
        return None
    from .must_not_use import check_must_not_use
    return check_must_not_use(final_query or None, entries)


def _model_sources(eval_set: Any, submission: J.Submission) -> str:
    path = getattr(eval_set, "model_file", None)
    if path is None or not Path(path).is_file() or not submission.final_query:
        return ""
    return J.source_definitions(Path(path).read_text(encoding="utf-8"), submission.final_query,
                                submission.source_name)


def evaluate(eval_set: Any, case: Any, submission: J.Submission, *, provider: Any, key: str,
             truncated: bool = False, run_error: str | None = None,
             contaminated: bool | str | None = False,
             reexecute: Callable[[], J.PredictionView | None] | None = None,
             artifacts: JudgeArtifacts | None = None, judge_retries: int = 1,
             doctrine: J.Doctrine | None = None,
             phrases: tuple[list[str], list[str]] | None = None) -> Decision:
    """The SPEC 5.5 decision for one submission; calls the provider at most 1 + judge_retries
    times, and never before the gates have passed."""
    doctrine = doctrine or J.load_doctrine()
    pins = _pins(doctrine, case, provider, key)

    tainted = contaminated is True or contaminated == "unknown"

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

    mnu = must_not_use_check(case, submission.final_query)
    hits = list(mnu.hits) if mnu is not None else []
    leaf = list(mnu.leaf_hits) if mnu is not None else []
    note = mnu.judge_note if mnu is not None else ""

    from .sets import golden_value
    packet = J.build_packet(case, golden_value(case, eval_set.dir), submission, judge_note=note,
                            model_sources=_model_sources(eval_set, submission))
    request = J.build_request(doctrine, packet, key)

    host = getattr(provider, "spec", "") == "host"
    if artifacts is not None and host:
        if getattr(provider, "mode", "") == "ingest":
            folder = artifacts.pending_host_folder()
            if folder is None:
                from .providers import HostReplyPending
                raise HostReplyPending(f"{key}: no emitted judge request waiting for a reply; "
                                       "run with --emit first")
        else:
            folder = artifacts.new_folder()
        provider.place(key, folder)

    common = {"prediction_path": prediction_path, "must_not_use_hits": hits, "leaf_hits": leaf}
    try:
        call = J.call_judge(provider, request, retries=judge_retries)
    except BudgetExhausted:
        return judge_null("budget_exhausted", **common)
    except ProviderError as exc:
        if artifacts is not None:
            if artifacts.folder is None:
                artifacts.new_folder()
            artifacts.write("request.json", request.to_json())
            artifacts.write("error.json", {"error": str(exc)})
        return judge_null(f"judge_error: {exc}", judge_artifact=artifacts.relpath if artifacts else None,
                    **common)

    if artifacts is not None:
        if artifacts.folder is None:
            artifacts.new_folder()
        artifacts.write("request.json", request.to_json())
        artifacts.write("replies.json", call.to_json())
    usage = {"judge_model": call.source or pins["judge_model"], "judge_cost_usd": call.cost_usd,
                 "judge_input_tokens": call.input_tokens, "judge_output_tokens": call.output_tokens,
                 "provider_calls": len(call.replies),
                 "judge_artifact": artifacts.relpath if artifacts else None}
    base = {**pins, **usage, **common}
    if call.parsed is None:
        decision = Decision(verdict=None, reason="contaminated" if tainted else "judge_unparseable",
                            contaminated=contaminated,
                            raw_replies=call.to_json(), **base)
    else:
        final = J.post_process(call.parsed, veto_hits=hits, contaminated=contaminated or False,
                               phrases=phrases, answer_text=submission.answer_text or "")
        decision = Decision(verdict=final.verdict, reason=final.reason, why=final.why,
                            confidence=final.confidence, column_pairing=final.column_pairing,
                            gold_status=final.gold_status, gold_note=final.gold_note,
                            judge_verdict=final.judge_verdict, contaminated=contaminated,
                            raw_replies=call.to_json(), **base)
    if artifacts is not None:
        artifacts.write("verdict.json", decision.event_fields())
    return decision


# --------------------------------------------------------------------------- one run attempt

@dataclass(frozen=True)
class ScoreResult:
    """What score_attempt did: the score event it appended (or why it appended none)."""

    qid: str
    sample: int | None
    phase: str
    verdict: str | None
    reason: str | None
    event_id: str | None
    status: str = "scored"  # "scored" | "judged" (no append) | "emitted" | "pending" | "dry_run"
    event: dict | None = None
    message: str | None = None

    def to_json(self) -> dict:
        """The --json document of score_attempt.py (SPEC 5.5)."""
        return {"qid": self.qid, "sample": self.sample, "phase": self.phase,
                "verdict": self.verdict, "reason": self.reason, "event_id": self.event_id}


def attempt_key(run: Any, qid: str, sample: int | None) -> str:
    """The judge recording key of a run attempt: `<runId>.<qid>.<sample>` (null sample `_`)."""
    return f"{run.run_id}.{qid}.{'_' if sample is None else sample}"


def attempt_submission(run: Any, attempt: dict, qid: str, sample: int | None) -> J.Submission:
    """The attempt's answer, final query and every execute_query call, from the ledger."""
    queries = []
    for call in run.tool_calls(qid, sample):
        if call.get("tool") != "execute_query":
            continue
        text = call.get("query")
        if not text and call.get("query_name"):
            text = f"run: {call.get('source_name') or '?'} -> {call['query_name']}"
        queries.append({"query": text, "givens": call.get("givens"), "error": call.get("error")})
    return J.Submission(answer_text=attempt.get("answer_text") or "",
                        final_query=attempt.get("final_query") or None, queries=queries,
                        source_name=attempt.get("source_name"))


def attempt_contamination(run: Any, eval_set: Any, attempt: dict) -> bool | str:
    """The attempt's contamination verdict: as recorded, else checked on its transcript, else
    "unknown" (no log to check counts as contaminated, SPEC 5.1)."""
    value = attempt.get("contaminated")
    if value in (True, False, "unknown"):
        return value
    transcript = attempt.get("transcript_path")
    if transcript:
        from .contamination import check_contamination
        result = check_contamination(log=run.resolve(transcript), set_dir=eval_set.dir,
                                     run_dir=run.dir, model_paths=[eval_set.model_file],
                                     truth_package=eval_set.truth_package,
                                     reported_calls=attempt.get("reported_calls"))
        return result.contaminated
    return "unknown"


def prediction_from_reexecution(result: Any, run: Any) -> J.PredictionView | None:
    """reexecute_attempt's result as what the judge sees (rows read back from prediction.csv);
    None when there was nothing to re-run."""
    if getattr(result, "status", None) == "no_query":
        return None
    if getattr(result, "status", None) == "query_error":
        return J.PredictionView(rows=None, row_count=None, error=result.error,
                                path=result.error_path)
    path = getattr(result, "prediction_path", None)
    rows = J.read_csv_rows(run.resolve(path).read_text(encoding="utf-8")) if path else []
    return J.PredictionView(rows=rows, row_count=getattr(result, "row_count", None) or len(rows),
                            path=path)


def score_attempt(run: Any, eval_set: Any, qid: str, sample: int | None, *, provider: Any,
                  endpoint: Any = None, reexecutor: Reexecutor | None = None,
                  judge_retries: int = 1, append: bool = True, reexecute: bool = True,
                  doctrine: J.Doctrine | None = None) -> ScoreResult:
    """Score one attempt in SPEC 5.5 order and append exactly one score event (append=False:
    judge.py, which only prints). One endpoint and one provider serve every attempt of a run."""
    from .providers import DryRun, HostReplyPending

    attempt = run.attempt(qid, sample)
    if attempt is None:
        raise InputError(run.events_path, None,
                         f"no live attempt for qid {qid!r} sample {sample!r} in phase {run.phase!r}")
    live = run.score(qid, sample) if append else None
    if live is not None:
        # Checked before any judge call: one live score per attempt (SPEC 3 rule 5), and a
        # judgement that could never be written must not be paid for.
        raise InputError(run.events_path, None,
                         f"{qid} sample {sample!r} already has a live score "
                         f"({live.get('event_id')}); re-score it with score_run.py --only {qid} "
                         "--rescore")
    case = eval_set.case(qid)
    submission = attempt_submission(run, attempt, qid, sample)
    contaminated = attempt_contamination(run, eval_set, attempt)

    def rerun() -> J.PredictionView | None:
        if reexecutor is not None:
            return reexecutor(run, eval_set, qid, sample)
        if reexecute and endpoint is not None:
            from .reexecute import reexecute_attempt
            return prediction_from_reexecution(
                reexecute_attempt(run, eval_set, qid, sample, endpoint), run)
        existing = J.read_prediction(run, qid, sample)
        if existing is None:
            raise UnmeasuredError(
                f"{qid}: no re-executed prediction in {run.artifact_dir(qid, sample)}; run "
                f"reexecute.py --run {run.dir} --set {eval_set.dir} --qid {qid} --local first")
        return existing

    artifacts = JudgeArtifacts(run, qid, sample)
    base = {"qid": qid, "sample": sample, "phase": run.phase}
    try:
        decision = evaluate(eval_set, case, submission, provider=provider,
                            key=attempt_key(run, qid, sample),
                            truncated=attempt.get("truncated") is True,
                            run_error=attempt.get("run_error"), contaminated=contaminated,
                            reexecute=rerun, artifacts=artifacts, judge_retries=judge_retries,
                            doctrine=doctrine)
    except HostReplyPending as exc:
        waiting = "pending" if getattr(provider, "mode", None) == "ingest" else "emitted"
        return ScoreResult(**base, verdict=None, reason=None, event_id=None, status=waiting,
                           message=str(exc))
    except DryRun as exc:
        return ScoreResult(**base, verdict=None, reason=None, event_id=None, status="dry_run",
                           message=str(exc))
    event = {"kind": "score", **base, **decision.event_fields()}
    if not append:
        return ScoreResult(**base, verdict=decision.verdict, reason=decision.reason,
                           event_id=None, status="judged", event=event)
    written = run.append([event])[0]
    return ScoreResult(**base, verdict=decision.verdict, reason=decision.reason,
                       event_id=written.get("event_id"), status="scored", event=written)


__all__ = [
    "Decision",
    "JudgeArtifacts",
    "ScoreResult",
    "attempt_key",
    "attempt_submission",
    "evaluate",
    "golden_gate",
    "must_not_use_check",
    "render_score",
    "score_attempt",
    "score_attempt_at",
]


def score_attempt_at(run_dir: str | Path, set_dir: str | Path, qid: str, sample: int | None, *,
                     provider: Any, mcp_url: str | None = None, local: bool = False,
                     judge_retries: int = 1, append: bool = True) -> ScoreResult:
    """score_attempt.py / judge.py: open the run and set, connect when re-execution needs it,
    score (or only judge) one attempt. A host ingest reuses the prediction its emit judged."""
    from .ledger import Run, check_qid
    from .sets import load_set

    run = Run.open(run_dir)
    eval_set = load_set(set_dir)
    check_qid(qid)
    ingest = getattr(provider, "mode", None) == "ingest"
    if not append or ingest or not (mcp_url or local):
        if append and not ingest:
            from .errors import UsageError
            raise UsageError("give exactly one of --mcp-url URL or --local")
        return score_attempt(run, eval_set, qid, sample, provider=provider, reexecute=False,
                             judge_retries=judge_retries, append=append)
    from .reexecute import open_endpoint
    with open_endpoint(eval_set, mcp_url=mcp_url, local=local) as endpoint:
        return score_attempt(run, eval_set, qid, sample, provider=provider, endpoint=endpoint,
                             judge_retries=judge_retries, append=append)


def render_score(result: ScoreResult) -> str:
    """One line: the attempt and its verdict (or why nothing was written)."""
    head = f"{result.qid} sample {'_' if result.sample is None else result.sample}: "
    if result.status in ("emitted", "pending", "dry_run"):
        return head + f"{result.status}: {result.message}"
    verdict = result.verdict or f"null ({result.reason})"
    tail = f" [event {result.event_id}]" if result.event_id else ""
    why = (result.event or {}).get("why")
    return head + verdict + tail + (f"\n  why: {why}" if why else "")
