"""score_run (reference/scoring.md): score every attempt of a run, then retrieval, then the summary.

Attempts are scored in parallel threads sharing one endpoint and one provider. The run is
resumable: an attempt whose live score carries the current pins (golden_revision, judge_version,
rubric_sha, judge_prompt_sha) is skipped; a score with any other pin (or every score, with
`rescore`) is voided and the attempt scored again, counted as `re-scored (stale pin)`. A null
score that records a transient failure (judge_error, environment_failure, budget_exhausted) is
retried too, counted as `re-scored (retry)`: resuming a run must finish what did not finish.

After scoring: retrieval (`retrieval.score_view`, appended), then `figures.summarize`, printed and
written as RESULTS.md and summary.json, and the run.json pins updated through the ledger. The
ledger is read once for the whole pass: one live view, refreshed with what the pass appended.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.answer import scoring
from malloy_evals.answer.reexecute import QueryEndpoint, Reexecutions, open_endpoint
from malloy_evals.answer.retrieval import score_view
from malloy_evals.checks.model_definitions import read_definitions_for
from malloy_evals.core import cli, commands
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, InputError, KitError
from malloy_evals.core.findings import Ignored, ignored_lines
from malloy_evals.core.redact import redact_url
from malloy_evals.core.vocab import null_reason_head
from malloy_evals.core.words import attempt_label
from malloy_evals.endpoint.package import package_sha
from malloy_evals.endpoint.runner import runtime_missing_reason
from malloy_evals.judge import doctrine as judge_mod
from malloy_evals.judge.decision import golden_gate
from malloy_evals.ledger import ties
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.ties import Untie, placed_note
from malloy_evals.ledger.validate import check_before_append
from malloy_evals.llm.base import Provider, RecordingMissing
from malloy_evals.llm.select import provider_stats
from malloy_evals.report.figures import STATUS_PARTIAL, RunSummary
from malloy_evals.report.markdown import render_markdown, summary_json
from malloy_evals.sets.eval_set import VALUE_KINDS, EvalSet, case_content_sha
from malloy_evals.sets.goldens import GoldenCheck, verify_goldens
from malloy_evals.workflow.outputs import RunOutputs

PIN_KEYS = ties.PIN_KEYS  # the pins a current score shares with the present (ledger/ties.py)
# Null reasons that say the scoring itself did not finish; a resumed run tries them again.
TRANSIENT_REASONS = ("judge_error", "environment_failure", "budget_exhausted")

ACTION_SCORE = "scored"
ACTION_SKIP = "skipped (current pins)"
ACTION_STALE = "re-scored (stale pin)"
ACTION_RETRY = "re-scored (retry)"
ACTION_FORCED = "re-scored (--rescore)"
ACTION_UNTIED = "re-scored (untied)"  # its live score judged another attempt, or lost its reply
SCORE_LOCK = scoring.SCORE_LOCK  # one scorer per run (score_attempt.py takes it too)

# score_one(run, eval_set, qid, sample) -> the score event to append (not yet written), or a str
# saying why nothing is to be written (a dry run). score_attempts appends it, superseding the old
# score in one batch, so a scoring that raises leaves the old score standing.
ScoreOne = Callable[[Run, EvalSet, str, int | None], "dict[str, Any] | str"]


@dataclass(frozen=True)
class AttemptOutcome:
    """What score_run did with one attempt."""

    qid: str
    sample: int | None
    action: str                  # one of the ACTION_* values, or "failed"
    verdict: str | None
    reason: str | None
    seconds: float
    error: str | None = None     # why scoring raised (the attempt is left without a live score)
    stale_pins: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunScoreResult:
    """score_run's output: per-attempt outcomes, counts, and the run summary it wrote."""

    run_dir: str
    attempts: int
    counts: dict[str, int]       # scored / skipped / re-scored (stale pin) / ... / failed
    outcomes: list[AttemptOutcome]
    retrieval_rows: int
    summary: RunSummary
    results_md: str | None
    summary_json: str | None     # None for a dry run, which writes nothing
    pins: dict[str, Any]
    provider_stats: dict[str, Any] | None = None  # calls, tokens, dollars the judge spent
    dry_run: bool = False
    report_html: str | None = None  # the run's page (report/run_page.py), written last

    @property
    def ignored(self) -> list[Ignored]:
        """The live verdicts the summary written after scoring does not count, and why."""
        return self.summary.ignored

    @property
    def exit_code(self) -> int:
        # Results were written: that is success, INCOMPLETE and low scores included.
        # Nothing judged at all (every attempt to score raised) is "could not measure".
        # A partial run (attempts unscored or scored under older pins) is not measured yet.
        tried = [o for o in self.outcomes if o.action not in (ACTION_SKIP, "not scored")]
        if tried and all(o.action == "failed" for o in tried):
            return EXIT_UNMEASURED
        if not self.dry_run and self.summary.status == STATUS_PARTIAL:
            return EXIT_UNMEASURED
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "attempts": self.attempts, "counts": self.counts,
                "headline": self.summary.headline, "status": self.summary.status,
                "results_md": self.results_md, "summary_json": self.summary_json,
                "report_html": self.report_html, "pins": self.pins, "provider_stats": self.provider_stats,
                "ignored": self.ignored,
                "dry_run": self.dry_run, "outcomes": self.outcomes,
                "summary": summary_json(self.summary)}


# ---------------------------------------------------------------------------------------------
# Deciding what to do with each attempt (pure)


def stale_pins(score: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The pin keys whose recorded value differs from the current one (`ledger.ties.stale_pins`)."""
    return ties.stale_pins(score, current)


def is_transient(score: dict[str, Any]) -> bool:
    """A null score that records a failure to score rather than a decision."""
    return score.get("verdict") is None and null_reason_head(score.get("reason")) in TRANSIENT_REASONS


def plan_action(score: dict[str, Any] | None, current: dict[str, Any], rescore: bool,
                untied: Untie | None = None) -> tuple[str, list[str]]:
    """What to do with one attempt given its live score (reference/scoring.md's table); `untied`
    says why that score is not tied to the attempt (then it is no verdict: judged again)."""
    if score is None:
        return ACTION_SCORE, []
    if untied is not None:
        return ACTION_UNTIED, []
    stale = stale_pins(score, current)
    if stale:
        return ACTION_STALE, stale
    if rescore:
        return ACTION_FORCED, []
    if is_transient(score):
        return ACTION_RETRY, []
    return ACTION_SKIP, []


def progress_line(done: int, total: int, qid: str, sample: Any, text: str, seconds: float) -> str:
    """`[3/18] q07 match (0.4s)`."""
    return f"[{done}/{total}] {attempt_label(qid, sample)} {text} ({seconds:.1f}s)"


def verdict_text(event: dict[str, Any] | None) -> str:
    if not event:
        return "unscored"
    if event.get("verdict"):
        return str(event["verdict"])
    return f"null ({event.get('reason')})"


# ---------------------------------------------------------------------------------------------
# The run


def select_attempts(attempts: list[dict[str, Any]], only: Sequence[str] | None,
                    run_dir: Path) -> list[dict[str, Any]]:
    """The attempts `--only` names (all without it); a name with no attempt is an input error."""
    if not only:
        return attempts
    wanted = {q.lower(): q for q in only}
    have = {str(a.get("qid")).lower() for a in attempts}
    unknown = [q for k, q in wanted.items() if k not in have]
    if unknown:
        raise InputError(run_dir / "events.jsonl", None,
                         f"--only names qids with no live attempt in this run: {', '.join(unknown)}"
                         + cli.nearest_hint(unknown, sorted(str(a.get("qid")) for a in attempts)))
    return [a for a in attempts if str(a.get("qid")).lower() in wanted]


def current_pins(eval_set: EvalSet, qid: str, judge_pins: dict[str, Any]) -> dict[str, Any]:
    """The pins a fresh score of `qid` would carry: the judge's, the case's golden revision and
    the digest of its content (a case edited without a revision bump is stale too)."""
    try:
        case = eval_set.case(qid)
    except KitError:
        return {**judge_pins, "golden_revision": None, "case_sha": None}
    return {**judge_pins, "golden_revision": case.golden_revision,
            "case_sha": case_content_sha(case, eval_set.dir)}


def score_attempts(run: Run, eval_set: EvalSet, score_one: ScoreOne, judge_pins: dict[str, Any], *,
                   only: Sequence[str] | None = None, rescore: bool = False, parallel: int = 4,
                   progress: Callable[[str], None] = cli.progress,
                   dry_run: bool = False, view: LiveView | None = None) -> list[AttemptOutcome]:
    """Score (or skip) every selected attempt, in parallel; one progress line per attempt.
    With `dry_run` nothing is appended, not even a score decided without a judge call. `view` is
    the pass's live view of the ledger (read here when not given); never a ledger scan per attempt."""

    view = view or run.view()
    live_scores = view.latest("score")
    untied = {key: why for key, score in live_scores.items()
              if (why := view.untied(score)) is not None}
    scores_ignored = [i for i in view.ignored() if i.kind == "score"]
    for line in ignored_lines(scores_ignored):
        progress(line)
    if untied:
        progress(f"{len(untied)} live score(s) not tied to their attempt: judged again")
    if note := placed_note(view.placed, str(run.events_path)):
        progress(note)
    # What the pass appends goes through a view of its own, refreshed under this lock: a score
    # voided meanwhile (its attempt re-recorded) is not voided twice, and the shared view is
    # never written while the scoring threads read it.
    append_lock = threading.Lock()
    tail = LiveView(run.events_path)
    attempts = sorted(select_attempts(view.attempts(), only, Path(run.dir)),
                      key=lambda a: (str(a.get("qid")), -1 if a.get("sample") is None
                                     else int(a["sample"])))
    total = len(attempts)
    lock = threading.Lock()
    done = 0
    missing: list[str] = []  # why each attempt had no recorded judge reply

    def report(qid: str, sample: Any, text: str, seconds: float) -> None:
        nonlocal done
        with lock:
            done += 1
            progress(progress_line(done, total, qid, sample, text, seconds))

    def work(att: dict[str, Any]) -> AttemptOutcome:
        qid, sample = att["qid"], att.get("sample")
        started = time.monotonic()
        key = run.key(qid, sample)
        old = live_scores.get(key)
        action, stale = plan_action(old, current_pins(eval_set, qid, judge_pins), rescore,
                                    untied.get(key))
        if action == ACTION_SKIP:
            elapsed = time.monotonic() - started
            report(qid, sample, f"{verdict_text(old)} (skipped: live score, current pins)", elapsed)
            # plan_action skips only an attempt that has a live score: `old` is that score.
            return AttemptOutcome(qid, sample, action, old.get("verdict"),  # type: ignore[union-attr]
                                  old.get("reason"), elapsed)  # type: ignore[union-attr]  # as above
        try:
            event = score_one(run, eval_set, qid, sample)
            if not isinstance(event, str) and dry_run:
                event = f"dry run: would write {verdict_text(event)} (decided without a call)"
            if isinstance(event, str):  # nothing to write (a dry run): the old score stands
                elapsed = time.monotonic() - started
                report(qid, sample, f"not scored: {event}", elapsed)
                return AttemptOutcome(qid, sample, "not scored", None, None, elapsed,
                                      error=event, stale_pins=stale)
            why = (f"re-scored: stale pins {', '.join(stale)}" if stale
                   else f"re-scored: untied ({untied[key]})" if key in untied
                   else f"re-scored ({action})")
            with append_lock:
                tail.refresh()
                standing = tail.score(key)  # None when a re-recording voided it meanwhile
                event = run.supersede([standing] if standing is not None else [], [event],
                                      why).events[0]
                moved = tail.attempt(key)
            judged = event.get("attempt_event_id")
            if judged and moved is not None and moved.get("event_id") != judged:
                progress(f"{attempt_label(qid, sample)}: re-recorded while it was judged; the "
                         "verdict stays on the attempt it judged, the new one is unscored")
        except RecordingMissing as exc:
            # Said once for the whole pass below: the same fix for every attempt.
            elapsed = time.monotonic() - started
            with lock:
                missing.append(str(exc))
            return AttemptOutcome(qid, sample, "failed", None, None, elapsed, error=str(exc),
                                  stale_pins=stale)
        except KitError as exc:
            elapsed = time.monotonic() - started
            report(qid, sample, f"error: {exc}", elapsed)
            return AttemptOutcome(qid, sample, "failed", None, None, elapsed, error=str(exc),
                                  stale_pins=stale)
        elapsed = time.monotonic() - started
        label = verdict_text(event)
        if action != ACTION_SCORE:
            label += f" [{action}]"
        report(qid, sample, label, elapsed)
        return AttemptOutcome(qid, sample, action, event.get("verdict"), event.get("reason"),
                              elapsed, stale_pins=stale)

    outcomes: list[AttemptOutcome] = []
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = [pool.submit(work, a) for a in attempts]
        for f in as_completed(futures):
            outcomes.append(f.result())
    outcomes.sort(key=lambda o: (o.qid, -1 if o.sample is None else o.sample))
    if missing:
        progress(no_recordings_line(len(missing), total, missing[0]))
    return outcomes


def no_recordings_line(n: int, total: int, first: str) -> str:
    """ONE line for every attempt replay found no recording for (not one per attempt): how many,
    the first, and the judges that need no recording."""
    return (f"{n} of {total} attempt(s) have no recorded judge reply (first: "
            f"{first.split(';', 1)[0]}). Judge them without a key with --judge host --emit (a "
            "host agent's subagent writes each reply, then --judge host --ingest) or --judge "
            "hand:FILE (replies a person wrote); or record them: --judge anthropic:<model> "
            "--record (needs ANTHROPIC_API_KEY)")


def outcome_counts(outcomes: list[AttemptOutcome]) -> dict[str, int]:
    keys = (ACTION_SCORE, ACTION_SKIP, ACTION_STALE, ACTION_FORCED, ACTION_RETRY, ACTION_UNTIED,
            "not scored", "failed")
    return {k: sum(1 for o in outcomes if o.action == k) for k in keys}


def finish_run(outputs: RunOutputs, *, judge_spec: str | None, endpoint_flag: str | None,
               pins: dict[str, Any], outcomes: list[AttemptOutcome],
               provider_stats: dict[str, Any] | None = None,
               dry_run: bool = False) -> RunScoreResult:
    """Retrieval (appended), then the run's outputs written by their one owner: RESULTS.md,
    summary.json, report.html and the run.json pins, from one summary. A dry run computes the
    summary from what the ledger already holds and writes nothing."""

    run, view = outputs.run, outputs.view
    view.refresh()
    if dry_run:
        s = outputs.summary(judge_spec=judge_spec, endpoint_flag=endpoint_flag)
        return RunScoreResult(
            run_dir=str(run.dir), attempts=len(outcomes), counts=outcome_counts(outcomes),
            outcomes=outcomes, retrieval_rows=0, summary=s, results_md=None, summary_json=None,
            pins={}, provider_stats=provider_stats, dry_run=True)
    result = score_view(run, outputs.eval_set, view, coverage=outputs.coverage, append=True)
    written = outputs.write(pins=pins, judge_spec=judge_spec, endpoint_flag=endpoint_flag)
    return RunScoreResult(
        run_dir=str(run.dir), attempts=len(outcomes), counts=outcome_counts(outcomes),
        outcomes=outcomes, retrieval_rows=len(result.rows), summary=written.summary,
        results_md=written.results_md, summary_json=written.summary_json, pins=written.pins,
        provider_stats=provider_stats, report_html=written.page.path)


@dataclass(frozen=True)
class DriftRefusal:
    """score_run refused: goldens it would score no longer re-derive from the truth package."""

    run_dir: str
    drifted: list[GoldenCheck]
    set_dir: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_FINDING  # drift is what the check before scoring exists to find

    def to_json(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "refused": "golden drift",
                "drifted": [{"qid": c.qid, "problems": c.problems} for c in self.drifted],
                "exit_code": self.exit_code}


def render_refusal(r: DriftRefusal) -> str:
    lines = [(f"refused to score {r.run_dir}: {len(r.drifted)} golden(s) it would score no "
              "longer re-derive from the truth package:")]
    lines += [f"  {c.qid}: {'; '.join(c.problems)}" for c in r.drifted]
    lines.append(f"Repair the goldens ({commands.verify_goldens(r.set_dir)} shows the same), or "
                 "score anyway with --allow-drift: the summary's headline then names them.")
    return "\n".join(lines)


def check_drift(eval_set: EvalSet, qids: Sequence[str],
                progress: Callable[[str], None] = cli.progress) -> list[GoldenCheck] | None:
    """The goldens of `qids` that would be judged (value goldens not gated), re-derived from the
    set's truth package: the drifted ones, or None when no check could run (no truth package, no
    Node runtime); a check that errors is reported and does not refuse."""
    judged = [q for q in qids if q in eval_set.cases and eval_set.cases[q].golden_kind in VALUE_KINDS
              and golden_gate(eval_set.cases[q]) is None]
    if not judged or not Path(eval_set.truth_dir).is_dir():
        return None
    why = runtime_missing_reason()
    if why:
        progress(f"goldens not checked against the truth package before scoring: {why}")
        return None
    report = verify_goldens(eval_set.dir, sorted(set(judged)))
    if report.unmeasured:
        progress(f"goldens not checked against the truth package: {report.unmeasured}")
        return None
    for c in report.checks:
        if c.status == "error":
            progress(f"golden of {c.qid} could not be re-derived: {'; '.join(c.problems)}")
    return [c for c in report.checks if c.status == "drift"]


def score_run(outputs: RunOutputs, *, judge: Provider, judge_spec: str | None = None,
              mcp_url: str | None = None, local: bool = False, parallel: int = 4,
              only: Sequence[str] | None = None, rescore: bool = False,
              allow_drift: bool = False,
              progress: Callable[[str], None] = cli.progress,
              judge_samples: int | None = None,
              reuse: bool = True) -> RunScoreResult | DriftRefusal:
    """score_run: every attempt, then retrieval, then the summary and the files.

    `outputs` is the run loaded by its outputs' owner (the set it was made on, the coverage
    report, the live view: each checked before anything here is spent). Before anything is
    scored, the goldens it would judge are re-derived from the truth package (when the set has
    one and Node is present): any drift refuses the whole run, naming every drifted case, unless
    `allow_drift`, which scores anyway and pins them as `goldenDrift`. The set's model folder
    (--model: another package folder) is served by --local, shown to the judge and pinned as
    the run's modelSha. `judge_samples` (--judge-samples K): the judge asked K times per
    attempt (None: 3 where it is known unstable, else once; reference/judge.md). Within the
    pass an identical final query (same call, givens and model) is re-executed once and its
    result written to every attempt that asked for it, each artifact saying so (`reuse`; False
    runs every attempt's query, which gives the same verdicts and artifacts)."""

    cli.require_one_endpoint(mcp_url, local)
    judge.ready()  # a judge that cannot be called (no key) fails before any re-execution
    run, eval_set, view = outputs.run, outputs.eval_set, outputs.view
    run_dir, set_dir = outputs.run_label, outputs.set_label
    # The ledger it appends to, checked before any judge call: a bad line is the ledger's.
    check_before_append(run.dir, "score_run.py")
    qids = [str(a.get("qid")) for a in select_attempts(view.attempts(), only, Path(run.dir))]
    doctrine = judge_mod.load_doctrine()
    judge_pins = current_judge_pins(doctrine)
    endpoint_flag = commands.endpoint_flag(mcp_url, local)

    with contextlib.ExitStack() as stack:
        # The drift check (a runtime of its own over the truth package), the veto's read of the
        # model's definitions (another) and the endpoint's start-up are fixed costs of every
        # pass: they run side by side. Drift still decides first: a refusal, or an endpoint that
        # cannot start, is reported as before.
        start_up = stack.enter_context(ThreadPoolExecutor(max_workers=2))
        drift_job = start_up.submit(check_drift, eval_set, qids, progress)
        start_up.submit(read_definitions_for, eval_set, qids)
        try:
            endpoint = stack.enter_context(open_endpoint(eval_set, mcp_url=mcp_url, local=local))
            if not drift_job.done():
                endpoint.warm()
        except KitError:
            if drift_job.result() and not allow_drift:
                # drift_job.result() is the same non-empty list the test above read
                return DriftRefusal(str(run_dir), drift_job.result(),  # type: ignore[arg-type]
                                    str(set_dir))
            raise
        drifted = drift_job.result()
        if drifted and not allow_drift:
            return DriftRefusal(str(run_dir), drifted, str(set_dir))

        reexecutions = Reexecutions() if reuse else None

        def score_one(run_: Run, es: EvalSet, qid: str, sample: int | None) -> dict[str, Any] | str:
            result = scoring.score_attempt(run_, es, qid, sample, provider=judge,
                                           endpoint=endpoint, doctrine=doctrine, append=False,
                                           view=view, judge_samples=judge_samples,
                                           reexecutions=reexecutions)
            return result.event if result.event is not None else (
                result.message or result.status)

        dry_run = judge.dry_run
        outcomes = score_attempts(run, eval_set, score_one, judge_pins, only=only,
                                  rescore=rescore, parallel=parallel, progress=progress,
                                  dry_run=dry_run, view=view)
        if reexecutions is not None and reexecutions.reused:
            progress(f"re-executed {reexecutions.executed} distinct final queries; "
                     f"{reexecutions.reused} attempt(s) reused one of them (their artifacts say so)")
        model_sha = _model_sha(eval_set, endpoint, local)
        served = {"mcpUrl": redact_url(mcp_url) if mcp_url else None, "servedRevision": endpoint.served_revision,
                  "environment": endpoint.environment, "package": endpoint.package,
                  "modelPath": endpoint.model_path}

    drift_pin = None if drifted is None else sorted(c.qid for c in drifted)
    pins = {"judgeModel": judge.model or None, "goldenDrift": drift_pin,
            "judgeVersion": judge_pins.get("judge_version"),
            "rubricSha": judge_pins.get("rubric_sha"),
            "judgePromptSha": judge_pins.get("judge_prompt_sha"),
            "modelSha": model_sha, **served}
    return finish_run(outputs, judge_spec=judge_spec, endpoint_flag=endpoint_flag, pins=pins,
                      outcomes=outcomes, provider_stats=provider_stats(judge), dry_run=dry_run)


@contextlib.contextmanager
def scoring_lock(run_dir: str | Path, who: str = "score_run.py") -> Iterator[None]:
    """One scorer per run: the run's lock (`SCORE_LOCK`), taken before any other work (before
    the set is loaded, a golden re-derived or an endpoint started); a second scorer exits 3 at
    once naming the holder. score_run.py holds it around everything it does."""
    with Run.open(run_dir).holding(SCORE_LOCK, who):
        yield


def current_judge_pins(doctrine: judge_mod.Doctrine) -> dict[str, Any]:
    """The judge pins a score made now carries (reference/judge.md), from eval-judge's doctrine."""

    return {"judge_version": judge_mod.judge_version_pin(doctrine), "rubric_sha": doctrine.sha,
            "judge_prompt_sha": judge_mod.judge_prompt_sha()}


def _model_sha(eval_set: EvalSet, endpoint: QueryEndpoint, local: bool) -> str | None:
    """modelSha: sha256 over the served model files, known here for the local endpoint."""
    if endpoint.model_sha:
        return endpoint.model_sha
    if local:

        return package_sha(eval_set.model_dir)
    return None


def render_text(r: RunScoreResult) -> str:
    """The summary as printed after scoring, preceded by what was done."""
    c = r.counts
    done = ", ".join(f"{k} {n}" for k, n in c.items() if n)
    head = f"{r.attempts} attempts: {done or 'nothing to do'}\n"
    if r.dry_run:
        stats = r.provider_stats or {}
        return (head + f"dry run: {stats.get('calls', 0)} judge call(s), about "
                f"{stats.get('estimated_input_tokens', 0)} input tokens; nothing written\n")
    return (head + f"wrote {r.results_md} and {r.summary_json}\n\n"
            + render_markdown(r.summary) + f"\nreport: {r.report_html}\n")
