"""Scoring one attempt of a run: read it from the ledger, decide it through the judge's decision path, append one score."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.answer.reexecute import (
    QueryEndpoint,
    ReexecuteResult,
    Reexecutions,
    fresh_reexecution,
    open_endpoint,
    reexecute_attempt,
)
from malloy_evals.checks.contamination.rules import check_contamination
from malloy_evals.checks.model_definitions import case_definitions
from malloy_evals.core import cli, commands
from malloy_evals.core.errors import EXIT_OK, EXIT_UNMEASURED, InputError, UsageError
from malloy_evals.core.findings import Ignored
from malloy_evals.core.vocab import (
    CONTAMINATION_UNKNOWN,
    contamination_value,
    is_contaminated,
    is_truncated,
)
from malloy_evals.core.words import sample_words
from malloy_evals.judge.decision import JudgeArtifacts, Reexecutor, evaluate, judge_samples_for
from malloy_evals.judge.doctrine import Doctrine
from malloy_evals.judge.packet import Submission
from malloy_evals.ledger.artifacts import PredictionView, read_prediction, read_prediction_csv
from malloy_evals.ledger.events import check_qid, sample_segment
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.llm.base import (
    COUNTED,
    EMITTED,
    NO_REPLY,
    DryRun,
    HostReplyPending,
    Provider,
    no_reply,
    phase_of,
)
from malloy_evals.sets.eval_set import EvalSet, case_content_sha, load_set


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
    # The attempt's live verdicts no reader counted (the untied score this one replaces, ...).
    ignored: list[Ignored] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        # An ingest that found no reply decided nothing (exit 3); an emit that wrote its request,
        # a dry run and a written (or printed) verdict are results (exit 0).
        return EXIT_UNMEASURED if self.status == "pending" else EXIT_OK

    def to_json(self) -> dict:
        """The --json document of score_attempt.py."""
        return {"qid": self.qid, "sample": self.sample, "phase": self.phase,
                "verdict": self.verdict, "reason": self.reason, "event_id": self.event_id,
                "ignored": self.ignored}


# The run's scoring lock (score_run.py and score_attempt.py): one scorer per run at a time.
SCORE_LOCK = ".score.lock"


def judge_recording_key(run: Run, qid: str, sample: int | None) -> str:
    """The key a run attempt's judge reply is recorded under: `<runId>.<qid>.<sample>` (null
    sample `_`). Not the ledger's attempt key (`ledger.events.attempt_key`)."""
    return f"{run.run_id}.{qid}.{sample_segment(sample)}"


def attempt_submission(run: Run, attempt: dict, qid: str, sample: int | None,
                       view: LiveView | None = None) -> Submission:
    """The attempt's answer, final query and every execute_query call, from the ledger."""
    queries = []
    for call in run.tool_calls(qid, sample, view):
        if call.get("tool") != "execute_query":
            continue
        text = call.get("query")
        if not text and call.get("query_name"):
            text = f"run: {call.get('source_name') or '?'} -> {call['query_name']}"
        queries.append({"query": text, "givens": call.get("givens"), "error": call.get("error")})
    return Submission(answer_text=attempt.get("answer_text") or "",
                        final_query=attempt.get("final_query") or None, queries=queries,
                        source_name=attempt.get("source_name"))


def attempt_contamination(run: Run, eval_set: EvalSet, attempt: dict) -> bool | str:
    """The attempt's contamination verdict: as recorded (read by `vocab.contamination_value`), else
    checked on its transcript, else "unknown" (no log to check counts as contaminated)."""
    recorded = contamination_value(attempt.get("contaminated"))
    if recorded is not None:
        return recorded
    transcript = attempt.get("transcript_path")
    if transcript:
        result = check_contamination(log=run.resolve(transcript), set_dir=eval_set.dir,
                                     run_dir=run.dir, model_paths=[eval_set.model_file],
                                     truth_package=eval_set.truth_package,
                                     reported_calls=attempt.get("reported_calls"))
        return result.contaminated
    return CONTAMINATION_UNKNOWN


def prediction_from_reexecution(result: ReexecuteResult, run: Run) -> PredictionView | None:
    """reexecute_attempt's result as what the judge sees (rows read back from prediction.csv);
    None when there was nothing to re-run."""
    if getattr(result, "status", None) == "no_query":
        return None
    if getattr(result, "status", None) == "query_error":
        return PredictionView(rows=None, row_count=None, error=result.error,
                                path=result.error_path)
    path = getattr(result, "prediction_path", None)
    rows = read_prediction_csv(run.resolve(path)) if path else []
    return PredictionView(rows=rows, row_count=getattr(result, "row_count", None) or len(rows),
                            path=path)


def score_attempt(run: Run, eval_set: EvalSet, qid: str, sample: int | None, *, provider: Provider,
                  endpoint: QueryEndpoint | None = None, reexecutor: Reexecutor | None = None,
                  judge_retries: int = 1, append: bool = True, reexecute: bool = True,
                  doctrine: Doctrine | None = None, view: LiveView | None = None,
                  judge_samples: int | None = None,
                  reexecutions: Reexecutions | None = None) -> ScoreResult:
    """Score one attempt in the order of reference/scoring.md and append exactly one score event
    (append=False: judge.py, which only prints). One endpoint, one provider and one live view of
    the ledger (`view`, read here when not given) serve every attempt of a run. `judge_samples`:
    how many times the judge is asked (--judge-samples); None is 3 where the judge is known
    unstable, else 1 (`decision.judge_samples_for`). `reexecutions`: the scoring pass's record of
    what it re-ran, so an identical final query is run once per pass."""

    view = view or run.view()
    attempt = run.attempt(qid, sample, view)
    if attempt is None:
        raise InputError(run.events_path, None,
                         f"no live attempt for qid {qid!r}, {sample_words(sample)}, in phase {run.phase!r}")
    live = run.score(qid, sample, view) if append else None
    untied_why = view.untied(live) if live is not None else None
    if live is not None and untied_why is None:
        # Checked before any judge call: one live score per attempt (reference/ledger-schema.md),
        # and a judgement that could never be written must not be paid for.
        raise InputError(run.events_path, None,
                         f"{qid} ({sample_words(sample)}) already has a live score "
                         f"({live.get('event_id')}); re-score it with: "
                         f"{commands.rescore(run.dir, eval_set.dir, [qid], judge_spec=None, endpoint=None)}")
    case = eval_set.case(qid)
    submission = attempt_submission(run, attempt, qid, sample, view)
    contaminated = attempt_contamination(run, eval_set, attempt)

    ingest = phase_of(provider) == "ingest"

    def rerun() -> PredictionView | None:
        if reexecutor is not None:
            return reexecutor(run, eval_set, qid, sample)
        if reexecute and endpoint is not None:
            # A fresh re-execution (reexecute.py a step earlier: same final query, endpoint and
            # model) is the prediction; running the query again would only write prediction.2.
            result = (fresh_reexecution(run, qid, sample, endpoint, attempt=attempt)
                      or reexecute_attempt(run, eval_set, qid, sample, endpoint, attempt=attempt,
                                           reexecutions=reexecutions))
            return prediction_from_reexecution(result, run)
        tainted = is_contaminated(contaminated)
        if ingest and not tainted and JudgeArtifacts(run, qid, sample).pending_host_folder() is None:
            # Nothing was emitted: say so, rather than judge a prediction nobody showed the host.
            raise HostReplyPending(_emit_first(run, eval_set, qid, sample))
        existing = read_prediction(run, qid, sample)
        if existing is None and tainted:
            return None  # the attempt is null `contaminated` whatever its rows say
        if existing is None:
            # A step left out, not an environment failure: nothing is decided and nothing written
            # (an InputError is not caught as environment_failure by the decision path).
            raise InputError(run.artifact_dir(qid, sample), None,
                             f"no re-executed prediction for {qid}; run "
                             f"{commands.reexecute(run.dir, eval_set.dir, qid, sample)} first")
        return existing

    artifacts = JudgeArtifacts(run, qid, sample)
    base: dict[str, Any] = {"qid": qid, "sample": sample, "phase": run.phase}
    try:
        decision = evaluate(eval_set, case, submission, provider=provider,
                            key=judge_recording_key(run, qid, sample),
                            truncated=is_truncated(attempt.get("truncated")),
                            run_error=attempt.get("run_error"), contaminated=contaminated,
                            reexecute=rerun, artifacts=artifacts, judge_retries=judge_retries,
                            doctrine=doctrine, definitions=case_definitions(eval_set, case),
                            judge_samples=judge_samples_for(case, submission, judge_samples))
    except (HostReplyPending, DryRun) as exc:
        waiting = no_reply(provider, exc)
        return ScoreResult(**base, verdict=None, reason=None, event_id=None,
                           status=WAITING_STATUS[waiting.state], message=waiting.message)
    # Bound to what it judged: this attempt, and the case content the judge and the veto read.
    event = {"kind": "score", **base, "attempt_event_id": attempt.get("event_id"),
             **decision.event_fields(), "case_sha": case_content_sha(case, eval_set.dir)}
    if not append:
        return ScoreResult(**base, verdict=decision.verdict, reason=decision.reason,
                           event_id=None, status="judged", event=event)
    # A live score not tied to this attempt is no verdict (ledger/ties.py): it is voided as the
    # new one is written, in one batch.
    old = [live] if live is not None else []
    written = run.supersede(old, [event], f"re-scored: untied ({untied_why})").events[0]
    replaced = [i for i in view.ignored() if (i.qid, i.sample, i.kind) == (qid, sample, "score")
                ] if untied_why is not None else []
    return ScoreResult(**base, verdict=decision.verdict, reason=decision.reason,
                       event_id=written.get("event_id"), status="scored", event=written,
                       ignored=replaced)


# A score that was not written, by why the judge call brought no reply (llm/base.py no_reply).
WAITING_STATUS = {EMITTED: "emitted", NO_REPLY: "pending", COUNTED: "dry_run"}


def _emit_first(run: Run, eval_set: EvalSet, qid: str, sample: int | None) -> str:
    return (f"{qid}: no emitted judge request in {run.artifact_dir(qid, sample)}; run with "
            f"--judge host --emit first ({commands.host_emit(run.dir, eval_set.dir, qid, sample)})")


def score_attempt_at(run_dir: str | Path, set_dir: str | Path, qid: str, sample: int | None, *,
                     provider: Provider, mcp_url: str | None = None, local: bool = False,
                     judge_retries: int = 1, append: bool = True,
                     model_dir: str | Path | None = None,
                     judge_samples: int | None = None) -> ScoreResult:
    """score_attempt.py / judge.py: open the run and set, connect when re-execution needs it,
    score (or only judge) one attempt. A host ingest reuses the prediction its emit judged.
    `model_dir` (--model): the package the attempt was answered against, served by --local and
    shown to the judge, instead of the set's model/."""

    run = Run.open(run_dir)
    if not append:  # judge.py prints a verdict and writes nothing: no lock to take
        return _score_attempt_at(run, set_dir, qid, sample, provider=provider, mcp_url=mcp_url,
                                 local=local, judge_retries=judge_retries, append=append,
                                 model_dir=model_dir, judge_samples=judge_samples)
    # One scorer per run: score_run.py's lock, taken before anything else is done.
    with run.holding(SCORE_LOCK, "score_attempt.py"):
        return _score_attempt_at(run, set_dir, qid, sample, provider=provider, mcp_url=mcp_url,
                                 local=local, judge_retries=judge_retries, append=append,
                                 model_dir=model_dir, judge_samples=judge_samples)


def _score_attempt_at(run: Run, set_dir: str | Path, qid: str, sample: int | None, *,
                      provider: Provider, mcp_url: str | None, local: bool, judge_retries: int,
                      append: bool, model_dir: str | Path | None,
                      judge_samples: int | None = None) -> ScoreResult:
    eval_set = load_set(set_dir, model_dir)
    check_qid(qid)
    ingest = phase_of(provider) == "ingest"
    if not append or ingest or not (mcp_url or local):
        if append and not ingest:
            raise UsageError(cli.ENDPOINT_NEEDED)
        return score_attempt(run, eval_set, qid, sample, provider=provider, reexecute=False,
                             judge_retries=judge_retries, append=append,
                             judge_samples=judge_samples)
    with open_endpoint(eval_set, mcp_url=mcp_url, local=local) as endpoint:
        return score_attempt(run, eval_set, qid, sample, provider=provider, endpoint=endpoint,
                             judge_retries=judge_retries, append=append,
                             judge_samples=judge_samples)


def render_score(result: ScoreResult) -> str:
    """One line: the attempt and its verdict (or why nothing was written)."""
    head = f"{result.qid} sample {'_' if result.sample is None else result.sample}: "
    if result.status in ("emitted", "pending", "dry_run"):
        return head + f"{result.status}: {result.message}"
    verdict = result.verdict or f"null ({result.reason})"
    tail = f" [event {result.event_id}]" if result.event_id else ""
    why = (result.event or {}).get("why")
    return head + verdict + tail + (f"\n  why: {why}" if why else "")
