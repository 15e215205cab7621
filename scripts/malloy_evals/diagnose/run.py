"""diagnose.py end to end: select, one call per case, one clustering call, issue events."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.answer.retrieval import CoverageReport, row_fields, score_view
from malloy_evals.core import cli, codes, files
from malloy_evals.core.errors import EXIT_OK, EXIT_UNMEASURED, KitError
from malloy_evals.core.findings import Ignored
from malloy_evals.diagnose.issues import (
    Cluster,
    fixed_issue_statuses,
    issue_events,
    open_issues,
    own_issues,
    singleton_clusters,
    validate_clusters,
)
from malloy_evals.diagnose.packets import build_packet, controls_block
from malloy_evals.diagnose.replies import (
    Diagnosis,
    Undiagnosed,
    case_request,
    cluster_request,
    validate_diagnosis,
)
from malloy_evals.diagnose.selection import (
    DIAGNOSED_BY,
    PARALLEL,
    Bucketed,
    Selection,
    select_cases,
)
from malloy_evals.ledger.events import AttemptKey, attempt_key, effective_verdict
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.llm.base import (
    COUNTED,
    EMITTED,
    NO_REPLY,
    LlmReply,
    LlmRequest,
    NoReply,
    Provider,
    ask,
    last_json_object,
    provider_label,
)
from malloy_evals.llm.select import provider_stats
from malloy_evals.sets.eval_set import CASES_FILE, EvalSet

# An --ingest that found no reply for a request (llm/base.py NO_REPLY): that case is undiagnosed
# (exit 3 when no case was diagnosed), unlike an --emit, whose written requests are its result.


@dataclass(frozen=True)
class DiagnoseResult:
    """diagnose.py's output."""

    run_id: str
    diagnoser: str
    selection: Selection
    diagnoses: list[Diagnosis]
    undiagnosed: list[Undiagnosed]
    clusters: list[Cluster]
    clustered_by: str          # "diagnoser", "single case", "fallback: <why>", "pending: ..."
    issues_appended: list[str]
    issues_voided: int
    warnings: list[str] = field(default_factory=list)
    issues_fixed: list[str] = field(default_factory=list)   # issue_status fixed appended now
    open_issues: list[dict[str, Any]] = field(default_factory=list)  # after this pass
    ignored: list[Ignored] = field(default_factory=list)  # verdicts not counted: unscored here

    @property
    def exit_code(self) -> int:
        # Selected cases and not one diagnosed is "could not measure" (exit 3); host emits are not.
        if self.selection.selected_qids and not self.diagnoses and not all(
                u.reason.startswith((EMITTED, COUNTED)) for u in self.undiagnosed):
            return EXIT_UNMEASURED
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "diagnoser": self.diagnoser,
                "selection": self.selection.to_json(),
                "diagnosed": len(self.diagnoses), "undiagnosed_count": len(self.undiagnosed),
                "diagnoses": self.diagnoses, "undiagnosed": self.undiagnosed,
                "clusters": self.clusters, "clustered_by": self.clustered_by,
                "issues_appended": self.issues_appended, "issues_voided": self.issues_voided,
                "issues_fixed": self.issues_fixed, "open_issues": self.open_issues,
                "warnings": self.warnings, "ignored": self.ignored}


def attempt_retrieval_rows(run: Run, view: LiveView, eval_set: EvalSet,
                    warnings: list[str]) -> dict[AttemptKey, dict[str, Any]]:
    """Each attempt's retrieval row: its live retrieval_score event, else computed now from the
    same live view."""
    rows = view.latest("retrieval_score")
    if set(view.latest("attempt")) - set(rows):
        try:
            computed = score_view(run, eval_set, view)
        except KitError as exc:
            warnings.append(f"retrieval rows not computed: {exc}")
            return rows
        for r in computed.rows:
            fields = row_fields(r)
            rows.setdefault(attempt_key(fields), fields)
    return rows


def _call(provider: Provider, request: LlmRequest) -> tuple[LlmReply | None, str | None]:
    """(reply, None) or (None, why): provider failures become a reason, never a guess."""

    try:
        reply = ask(provider, request)
    except KitError as exc:
        return None, f"diagnoser failed: {exc}"
    if isinstance(reply, NoReply):
        return None, reply.why
    return reply, None


def _reply_object(reply: LlmReply, key: str) -> Any:
    if reply.data is not None:
        return reply.data
    return last_json_object(reply.text or "", key)


def diagnose_run(run: Run, eval_set: EvalSet, view: LiveView,
                 provider_factory: Callable[[Path], Provider], *,
                 only: list[str] | None = None, verdicts: Iterable[str] = ("no_match",),
                 split: str = "dev", limit: int | None = None,
                 coverage: CoverageReport | None = None,
                 progress: Callable[[str], None] | None = None) -> DiagnoseResult:
    """diagnose.py end to end: select, build packets, diagnose, validate, cluster, append issues.
    The run, its set, the pass's live view and the coverage report come loaded and checked
    (workflow/outputs.py's RunOutputs, which writes the run's outputs after)."""

    table = codes.load_codes()
    cli.check_known(only, eval_set.cases, where=eval_set.dir / CASES_FILE)
    events = view.tied_events()  # untied verdicts leave their attempt unscored (ledger/ties.py)
    warnings: list[str] = []
    retrieval_rows = attempt_retrieval_rows(run, view, eval_set, warnings)
    misses = {k: ((recall := r.get("recall")) is not None and recall < 1)
              for k, r in retrieval_rows.items()}
    selection = select_cases(events, {q: c.split for q, c in eval_set.cases.items()},
                             verdicts=verdicts, split=split, only=only, limit=limit,
                             retrieval_misses=misses)
    measured = coverage.verdicts if coverage is not None else None
    provider = provider_factory(run.dir)
    by_qid: dict[str, list[Bucketed]] = defaultdict(list)
    for b in selection.selected:
        by_qid[b.qid].append(b)
    diagnoses: list[Diagnosis] = []
    undiagnosed: list[Undiagnosed] = []
    artifacts = run.dir / "diagnose"
    def one(item: tuple[str, list[Bucketed]]) -> Diagnosis | Undiagnosed:
        qid, attempts = item
        packet = build_packet(view, eval_set, qid, attempts, retrieval_rows, measured)
        request = case_request(run.run_id, qid, packet, table)
        reply, why = _call(provider, request)
        passed_only = all(b.verdict == "match" for b in attempts)
        if reply is None:
            outcome: Diagnosis | Undiagnosed = Undiagnosed(qid, why or "no reply")
        else:
            outcome = validate_diagnosis(qid, _reply_object(reply, "primary_code"), table,
                                         answered_correctly=passed_only)
        _keep(artifacts / f"{qid}.json", request, reply, outcome)
        if progress:
            label = (f"[{outcome.component}] {outcome.primary_code} -> {outcome.owner}"
                     if isinstance(outcome, Diagnosis) else f"undiagnosed: {outcome.reason}")
            progress(f"diagnose {qid}: {label}")
        return outcome

    # Cases are independent; the provider bounds its own concurrency. Results keep case order.
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        for outcome in pool.map(one, by_qid.items()):
            if isinstance(outcome, Diagnosis):
                diagnoses.append(outcome)
            else:
                undiagnosed.append(outcome)
    clusters, clustered_by = _cluster(run, view, selection, diagnoses, provider, table,
                                      artifacts)
    diagnoser = provider_label(provider)  # after the calls: replay learns its source from them
    # An earlier issue whose cases all pass now is fixed, whoever filed it: it gets a `fixed`
    # status rather than being replaced by a re-diagnosis. A dry run writes nothing at all.
    passing = {k: v == "match" and not misses.get(k, False) for k, v in _verdicts(view).items()}
    fixed = [] if provider.dry_run else fixed_issue_statuses(events, passing)
    fixed_ids = {e["issue_id"] for e in fixed}
    appended: list[str] = []
    old: list[Mapping[str, Any]] = []
    new: list[dict[str, Any]] = []
    voided = 0
    if clusters:
        narrowed = only is not None or limit is not None
        earlier = own_issues(events, {d.qid for d in diagnoses} if narrowed else None)
        old = [e for e in earlier if e.get("issue_id") not in fixed_ids]
        attempt_ids: dict[str, list[str]] = {}
        for key, att in view.latest("attempt").items():
            if isinstance(att.get("event_id"), str):
                attempt_ids.setdefault(key.qid, []).append(att["event_id"])
        new = issue_events(run.run_id, clusters, diagnoses, f"{DIAGNOSED_BY} {diagnoser}",
                           attempt_ids)
        appended = [e["issue_id"] for e in new if e["kind"] == "issue"]
    if old or new or fixed:
        # One batch: the earlier issues superseded by the new ones, and the fixed statuses.
        done = run.supersede(old, [*new, *fixed], "superseded by a new diagnose.py run")
        voided = len(done.voids)
        view.refresh()
    still_open = open_issues(view.events)

    stats = provider_stats(provider)
    if stats:
        warnings.append(f"diagnoser calls: {json.dumps(stats, sort_keys=True)}")
    return DiagnoseResult(run.run_id, diagnoser, selection, diagnoses, undiagnosed, clusters,
                          clustered_by, appended, voided, warnings,
                          [e["issue_id"] for e in fixed], still_open, view.ignored())


def _verdicts(view: LiveView) -> dict[AttemptKey, str | None]:
    """Each attempt's effective verdict (None when unscored): the judge's, or a person's who
    settled it (`effective_verdict`)."""
    return {key: effective_verdict(view.tied_score(key), view.tied_human_verdict(key),
                                   attempt).verdict
            for key, attempt in view.latest("attempt").items()}


def _cluster(run: Run, view: LiveView, selection: Selection,
             diagnoses: list[Diagnosis], provider: Provider, table: Mapping[str, codes.CauseCode],
             artifacts: Path) -> tuple[list[Cluster], str]:
    if not diagnoses:
        return [], "nothing diagnosed"
    if len(diagnoses) == 1:
        return singleton_clusters(diagnoses), "single case"
    request = cluster_request(run.run_id, diagnoses, controls_block(view, selection), table)
    reply, why = _call(provider, request)
    cycle = provider.cycle
    if reply is None and cycle is not None and why and why.startswith(NO_REPLY):
        # Two-phase flow: the per-case replies are in; emit the clustering request and write
        # no issue until its reply is there (a second --ingest picks it up).
        _, why = _call(cycle.emitter(), request)
        return [], f"pending: {why}"
    if reply is None:
        if why and why.startswith((EMITTED, COUNTED)):
            return [], f"pending: {why}"  # nothing was asked, so nothing may be written
        _keep(artifacts / "clusters.json", request, None, why)
        return singleton_clusters(diagnoses), f"fallback: {why}"
    result = validate_clusters(_reply_object(reply, "clusters"), diagnoses, table)
    _keep(artifacts / "clusters.json", request, reply, result)
    if isinstance(result, str):
        return singleton_clusters(diagnoses), f"fallback: {result}"
    return result, "diagnoser"


def _keep(path: Path, request: LlmRequest, reply: LlmReply | None, outcome: Any) -> None:
    """The raw request digest, reply and outcome of one call, kept beside the run for review."""

    # The digest the answering model was asked under (the model is part of it,
    # reference/providers.md); with no reply no model answered, so it is taken with model null,
    # as a host request is.
    digest = reply.request_digest if reply is not None else request.digest(model=None)
    doc = {"key": request.key, "request_digest": digest,
           "prompt_version": request.prompt_version,
           "reply": None if reply is None else {"source": reply.source, "text": reply.text,
                                                "data": reply.data},
           "outcome": outcome}
    # Under the run folder (its `diagnose/`): created and rewritten without following a link.
    files.replace(path, cli.dumps(doc) + "\n", path.parent.parent)


def render_text(result: DiagnoseResult) -> str:
    """Per case `qid component/code -> owner`, then the clusters and the selection account."""
    sel = result.selection
    lines = [f"run {result.run_id}: diagnoser {result.diagnoser}"]
    for d in result.diagnoses:
        flag = " (answered correctly; retrieval miss)" if d.answered_correctly else ""
        lines.append(f"  {d.qid}: [{d.component}] {d.primary_code} -> {d.owner}{flag}: {d.diagnosis}")
    for u in result.undiagnosed:
        lines.append(f"  {u.qid}: UNDIAGNOSED: {u.reason}")
    lines.append(f"clusters ({result.clustered_by}):")
    for c in result.clusters:
        lines.append(f"  {c.cluster_id} [{c.primary_code} -> {c.owner}] {', '.join(c.qids)}: "
                     f"{c.root_cause}")
    lines.append(f"diagnosed {len(result.diagnoses)} case(s) of {len(sel.selected_qids)} selected; "
                 f"{sel.non_passing} non-passing attempt(s) in the run, {len(sel.failed)} selected "
                 f"as failed, {len(sel.retrieval_only)} retrieval-only passes, {len(sel.passed)} "
                 f"passed")
    if sel.excluded:
        lines.append("excluded: " + ", ".join(f"{k} {v}" for k, v in
                                              sel.excluded_by_reason().items()))
    lines.append(f"issues appended {len(result.issues_appended)}, voided {result.issues_voided}"
                 f", fixed {len(result.issues_fixed)}"
                 + (f" ({', '.join(result.issues_fixed)}: every attempt of their cases passes now)"
                    if result.issues_fixed else ""))
    if result.open_issues:
        lines.append(f"open issues ({len(result.open_issues)}):")
        lines += [f"  {i['issue_id']} [{i['status']}] {i['primary_code']} -> {i['owner']}: "
                  f"{', '.join(i['qids'])}" for i in result.open_issues]
    else:
        lines.append("open issues: none")
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)
