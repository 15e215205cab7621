"""The gate: does a candidate model fix the issue's cases without breaking others?

The gate answers the issue's cases (the targets) and a seeded sample of the cases the baseline
passed (the regression guard), blind, on the candidate model (run_answers over the candidate
served on loopback), scores them (score_run with the candidate's sources), compares the result
with the baseline arm (compare_runs, the targets named) against a measured A/A band, and decides.

The decision rule (`decide`, pure): accept only when every target went from fail to pass and is
not a case the A/A runs saw flip (a fix there cannot be told from noise), and no guard case
stopped passing beyond the band: a case the A/A runs never saw flip that no longer passes is a
break beyond the band, and more breaks among the noisy cases than the band's largest flip count
is one too. Everything else is a rejection, with the reason in words and numbers.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from malloy_evals.answer.harness.harness import HarnessOptions, run_answers
from malloy_evals.answer.harness.local import serve_model_http
from malloy_evals.answer.harness.plan import AnswererSpec
from malloy_evals.core import cli
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, UnmeasuredError, UsageError
from malloy_evals.improve.checks import check_change
from malloy_evals.improve.journal import Journal, slug
from malloy_evals.ledger.run import Run
from malloy_evals.llm.base import Provider
from malloy_evals.report.arms import FIXED, PASS, Arm, CaseRow, load_arm
from malloy_evals.report.compare import Comparison, compare_runs, write_outputs
from malloy_evals.report.compare_page import write_compare_page
from malloy_evals.report.noise import NoiseBand, measure_noise, read_band
from malloy_evals.report.run_page import PAGE_FILE
from malloy_evals.sets.eval_set import EvalSet, load_set
from malloy_evals.workflow.outputs import RunOutputs, outputs_writer
from malloy_evals.workflow.run_scorer import DriftRefusal, score_run

ACCEPT, REJECT = "accept", "reject"
GATES_DIR = "gates"


# ---------------------------------------------------------------------------------------------
# The decision, pure


@dataclass(frozen=True)
class Decision:
    """What the gate decided and why, in words and numbers."""

    decision: str                     # accept | reject
    reasons: list[str]                # why it was rejected (empty when accepted)
    summary: str                      # one line with the numbers
    targets: dict[str, str]           # qid -> fixed beyond the band | fixed within the band | ...
    broken_beyond: list[str]          # guard cases that stopped passing, never seen to flip
    broken_within: list[str]          # guard cases that stopped passing, seen to flip in A/A
    noisy: list[str]                  # the cases the A/A runs saw flip
    band_max: int


def no_longer_passes(rows: Sequence[CaseRow], targets: Sequence[str]) -> list[str]:
    """Guard cases that passed in the base arm and do not pass in the candidate (a fail, a
    split, a null or a neither: a case that stopped passing is broken for the gate)."""
    out = []
    for r in rows:
        if r.qid in targets:
            continue
        if r.base.outcome == PASS and r.candidate.outcome != PASS and r.candidate.attempts:
            out.append(r.qid)
    return out


def decide(rows: Sequence[CaseRow], targets: Sequence[str], band: NoiseBand) -> Decision:
    """Accept or reject from the flip table, the targets and the A/A band (module doc)."""
    noisy = sorted({q for p in band.pairs for q in p.flipped})
    by_qid = {r.qid: r for r in rows}
    states: dict[str, str] = {}
    reasons: list[str] = []
    for q in targets:
        row = by_qid.get(q)
        if row is None or not row.candidate.attempts:
            states[q] = "not answered"
            reasons.append(f"target {q} was not answered on the candidate (nothing to decide on)")
        elif row.change != FIXED:
            states[q] = "not fixed"
            reasons.append(f"target {q} is not fixed: {row.base.text} in the baseline, "
                           f"{row.candidate.text} on the candidate")
        elif q in noisy:
            states[q] = "fixed within the band"
            reasons.append(f"target {q} went from fail to pass, but it is one of the {len(noisy)} "
                           f"case(s) two runs of the unchanged arm already disagree on "
                           f"({', '.join(noisy)}): its fix cannot be told from noise")
        else:
            states[q] = "fixed beyond the band"
    broken = no_longer_passes(rows, targets)
    beyond = [q for q in broken if q not in noisy]
    within = [q for q in broken if q in noisy]
    for q in beyond:
        row = by_qid[q]
        reasons.append(f"broke {q}: {row.base.text} in the baseline, "
                       f"{row.candidate.text} on the candidate, and "
                       "the A/A runs never saw it flip: beyond the band")
    if len(within) > band.max_flips:
        reasons.append(f"broke {len(within)} case(s) the A/A runs saw flip ({', '.join(within)}), "
                       f"more than the band's {band.max_flips}")
    fixed_beyond = sum(1 for v in states.values() if v == "fixed beyond the band")
    summary = (f"targets {fixed_beyond}/{len(targets)} fixed beyond the band; "
               f"{len(broken)} guard case(s) no longer pass ({len(beyond)} beyond the band, "
               f"{len(within)} within it); A/A band {band.max_flips} flip(s) over {band.cases} "
               f"cases ({', '.join(noisy) or 'none'})")
    return Decision(ACCEPT if not reasons else REJECT, reasons, summary, states, beyond, within,
                    noisy, band.max_flips)


# ---------------------------------------------------------------------------------------------
# The plan and its cost


def guard_sample(base: Arm, targets: Sequence[str], size: int, seed: int) -> list[str]:
    """The regression guard: `size` of the cases the baseline passed (targets excluded), drawn
    with `seed`, in qid order. Only a case that passed can break."""
    passing = sorted(q for q, c in base.cases.items() if c.outcome == PASS and q not in targets)
    if size >= len(passing):
        return passing
    return sorted(random.Random(seed).sample(passing, size))


@dataclass(frozen=True)
class GatePlan:
    """What a gate will answer, where, and what it is expected to cost."""

    targets: list[str]
    guard: list[str]
    samples: int
    attempts: int
    run_dir: str
    run_id: str
    estimated_usd: float | None       # from the baseline's own spend per attempt; None: unknown
    estimate_basis: str


def _mean_cost(base_run: Run) -> tuple[float | None, str]:
    """Mean answerer plus judge dollars per attempt in the baseline run (None when it has no
    priced attempt)."""
    view = base_run.view()
    attempts = view.attempts()
    answer: list[float] = [float(a["cost_usd"]) for a in attempts
                           if isinstance(a.get("cost_usd"), (int, float))]
    judge: list[float] = []
    for a in attempts:
        score = view.score(base_run.key(a["qid"], a.get("sample")))
        if score and isinstance(score.get("judge_cost_usd"), (int, float)):
            judge.append(float(score["judge_cost_usd"]))
    if not answer and not judge:
        return None, "the baseline run records no dollars per attempt"
    mean = (sum(answer) / len(answer) if answer else 0.0) + (sum(judge) / len(judge) if judge else 0.0)
    return mean, (f"the baseline's mean per attempt: ${mean:.4f} ({len(answer)} priced answers, "
                  f"{len(judge)} priced judge calls)")


# ---------------------------------------------------------------------------------------------
# The gate


@dataclass(frozen=True)
class GateOptions:
    """How the gate answers, scores and compares."""

    answerer: AnswererSpec
    judge: Provider
    judge_spec: str
    band: Path | None = None               # a band file measure_noise.py wrote
    aa_runs: list[Path] = field(default_factory=list)  # or two runs of the baseline arm to measure it
    samples: int = 1
    guard: int = 4
    seed: int = 0
    parallel: int = 1
    max_turns: int = 30
    timeout: float = 900.0
    prompt_file: Path | None = None
    max_cost_usd: float | None = None
    dry_run: bool = False
    run_id: str | None = None
    allow_different_set: bool = False        # compare_runs' flags, for a baseline made over an
    allow_different_retrieval: bool = False  # older revision of the set or by another retrieval
    harness: dict[str, Any] = field(default_factory=dict)  # further HarnessOptions fields, as given


@dataclass(frozen=True)
class GateResult:
    """improve.py gate: the decision (or the plan, for --dry-run), the numbers and where."""

    journal: str
    candidate: str
    candidate_digest: str
    plan: GatePlan | None
    decision: str | None                 # accept | reject | None (dry run)
    reasons: list[str]
    summary: str
    verdict: str | None                  # compare_runs' verdict line
    compare_dir: str | None
    passing_attempt_ids: list[str]
    diff: str
    resumed: bool = False

    @property
    def exit_code(self) -> int:
        return EXIT_FINDING if self.decision == REJECT else EXIT_OK


def _band(journal: Journal, eval_set: EvalSet, options: GateOptions) -> NoiseBand:
    if options.band is not None:
        return read_band(options.band)
    out = journal.dir / "noise-band.json"
    if out.is_file():
        return read_band(out)
    result = measure_noise([str(p) for p in options.aa_runs], eval_set.dir, out)
    if result.band is None:
        raise UnmeasuredError("the A/A band could not be measured: " + "; ".join(result.differences))
    return result.band


def _proposed(journal: Journal, candidate: Path, digest: str, diff: str,
              reasons: list[str]) -> dict[str, Any]:
    """The change_proposed event for this candidate digest: the last one when it matches (a
    resumed gate), else a new one."""
    last = journal.latest("change_proposed")
    if last is not None and last.get("digest") == digest and journal.after("rolled_back", last) is None \
            and journal.after("accepted", last) is None:
        return last
    return journal.append({"kind": "change_proposed", "candidate": str(candidate.resolve()),
                           "digest": digest, "diff": diff, "check_reasons": reasons})


def _verdict_ids(run: Run, qids: Sequence[str]) -> list[str]:
    """The attempt ids of `qids` whose live verdict is match (the attempts that show the fix)."""
    view = run.view()
    out = []
    for a in view.attempts():
        if a.get("qid") in qids:
            score = view.score(run.key(a["qid"], a.get("sample")))
            if score is not None and score.get("verdict") == "match":
                out.append(str(a["event_id"]))
    return out


def run_gate(journal_dir: str | Path, candidate: str | Path, options: GateOptions,
             progress: Any = cli.progress) -> GateResult:
    """improve.py gate: checks, plan, answers, scores, comparison, decision, journal."""
    if options.band is None and len(options.aa_runs) < 2:
        raise UsageError("the gate needs the A/A band: --band FILE, or --aa-runs RUN RUN")
    journal = Journal.open(journal_dir)
    started = journal.started
    if journal.stage() in ("accepted", "rolled_back"):
        raise UsageError(f"{journal.dir}: this journal is {journal.stage().replace('_', ' ')}; "
                         "start a new one for another change")
    eval_set = load_set(started["set_dir"])
    cand = Path(candidate)
    checkpoint = journal.dir / started["checkpoint"]["copy"]
    check = check_change(eval_set, cand, started=started["set_digests"], baseline_model=checkpoint)
    proposed = _proposed(journal, cand, check.candidate_digest, check.diff, check.reasons)
    targets = list(started["issue"]["qids"])
    base_dir = Path(started["baseline_run"]["dir"])

    done = journal.after("gate_decided", proposed)
    if done is not None:  # already decided for this very change: say it again
        return GateResult(str(journal.dir), str(cand), check.candidate_digest, None,
                          done["decision"], done["reasons"], done["summary"], done.get("verdict"),
                          done.get("compare_dir"), done.get("passing_attempt_ids") or [],
                          check.diff, resumed=True)
    if not check.ok:
        event = journal.append({"kind": "gate_decided", "change_id": proposed["event_id"],
                                "digest": check.candidate_digest, "decision": REJECT,
                                "reasons": check.reasons,
                                "summary": f"refused by the checks before any spending "
                                           f"({len(check.reasons)} reason(s))",
                                "targets": {}, "guard": [], "run_dir": None, "compare_dir": None,
                                "verdict": None, "passing_attempt_ids": []})
        return GateResult(str(journal.dir), str(cand), check.candidate_digest, None, REJECT,
                          check.reasons, event["summary"], None, None, [], check.diff)

    base_run = Run.open(base_dir)
    base_arm = load_arm("base", [base_dir], eval_set)
    guard = guard_sample(base_arm, targets, options.guard, options.seed)
    short = check.candidate_digest[:8]
    gate_dir = journal.dir / GATES_DIR / short
    run_id = options.run_id or f"improve-{slug(started['issue']['issue_id'])[:40]}-{short}"
    qids = [*targets, *guard]
    mean, basis = _mean_cost(base_run)
    plan = GatePlan(targets, guard, options.samples, len(qids) * options.samples,
                    str(gate_dir / "run"), run_id,
                    None if mean is None else round(mean * len(qids) * options.samples, 4), basis)
    if options.dry_run:
        return GateResult(str(journal.dir), str(cand), check.candidate_digest, plan, None, [],
                          _plan_words(plan), None, None, [], check.diff)
    if options.max_cost_usd is not None and plan.estimated_usd is not None \
            and plan.estimated_usd > options.max_cost_usd:
        raise UnmeasuredError(f"the gate is estimated at ${plan.estimated_usd:.2f} "
                              f"({plan.estimate_basis}), over --max-cost-usd "
                              f"{options.max_cost_usd:g}: nothing was spent")
    band = _band(journal, eval_set, options)

    run_dir = gate_dir / "run"
    if not (run_dir / "run.json").is_file():
        Run.create(run_dir, eval_set, options.answerer.model or options.answerer.label,
                   phase="blind_gate", run_id=run_id)
    candidate_set = eval_set.with_model(cand)
    progress(f"gate: answering {len(targets)} target(s) and {len(guard)} guard case(s) on "
             f"{cand} ({options.samples} sample(s) each)")
    harness = HarnessOptions(answerer=options.answerer, mcp_url="pending", samples=options.samples,
                             only=qids, parallel=options.parallel, max_turns=options.max_turns,
                             timeout=options.timeout, max_cost_usd=options.max_cost_usd,
                             prompt_file=options.prompt_file, **options.harness)
    with serve_model_http(candidate_set) as url:
        answered = run_answers(run_dir, eval_set.dir, replace(harness, mcp_url=url),
                               progress=progress)
    if answered.exit_code != EXIT_OK:
        raise UnmeasuredError(f"the gate's answers stopped: {answered.stopped or 'see '}"
                              f"{run_dir / 'harness.jsonl'}")
    # The gate's run is scored through its outputs' owner, with the candidate as its model.
    scored = score_run(RunOutputs.load(run_dir, eval_set.dir, model_dir=cand),
                       judge=options.judge, judge_spec=options.judge_spec, local=True,
                       progress=progress)
    if isinstance(scored, DriftRefusal):
        raise UnmeasuredError("the gate could not score: goldens drifted from the truth package")

    compare_dir = gate_dir / "compare"
    comparison = compare_runs([base_dir], [run_dir], eval_set.dir, targets=targets,
                              band_path=band.path, only_common_cases=True,
                              allow_different_set=options.allow_different_set,
                              allow_different_retrieval=options.allow_different_retrieval)
    if not comparison.comparable:
        raise UnmeasuredError(f"the gate's run cannot be compared with the baseline: "
                              f"{comparison.verdict}")
    decision = decide(comparison.rows, targets, band)
    _write_comparison(comparison, compare_dir, eval_set, base_dir, run_dir, decision,
                      check.candidate_digest, check.diff, cand)
    passing = _verdict_ids(Run.open(run_dir), targets)
    journal.append({"kind": "gate_decided", "change_id": proposed["event_id"],
                    "digest": check.candidate_digest, "decision": decision.decision,
                    "reasons": decision.reasons, "summary": decision.summary,
                    "targets": decision.targets, "guard": guard, "run_dir": str(run_dir),
                    "compare_dir": str(compare_dir), "verdict": comparison.verdict,
                    "passing_attempt_ids": passing, "broken_beyond": decision.broken_beyond,
                    "broken_within": decision.broken_within, "noisy": decision.noisy,
                    "band_max": decision.band_max, "band_file": band.path,
                    "seed": options.seed, "samples": options.samples,
                    "compared_despite": comparison.differences,
                    "spent_usd": round(answered.spent_usd, 6)})
    return GateResult(str(journal.dir), str(cand), check.candidate_digest, plan, decision.decision,
                      decision.reasons, decision.summary, comparison.verdict, str(compare_dir),
                      passing, check.diff)


def _write_comparison(comparison: Comparison, out: Path, eval_set: EvalSet, base_dir: Path,
                      run_dir: Path, decision: Decision, digest: str, diff: str,
                      candidate: Path) -> None:
    """COMPARE.md, compare.json and compare.html; the page also shows the change's diff."""
    write_outputs(out, comparison)
    write = outputs_writer(eval_set.dir)
    for run in (base_dir, run_dir):
        if not (run / PAGE_FILE).is_file():
            write(run)  # the flip table links into each arm's page
    change = {"decision": decision.decision, "candidate": str(candidate), "digest": digest,
              "diff": diff, "reasons": decision.reasons or [decision.summary]}
    write_compare_page({**comparison.to_json(), "change": change}, out, [base_dir], [run_dir])


def _plan_words(plan: GatePlan) -> str:
    cost = ("unknown" if plan.estimated_usd is None else f"about ${plan.estimated_usd:.2f}")
    return (f"dry run: would answer {plan.attempts} attempt(s) ({len(plan.targets)} target(s): "
            f"{', '.join(plan.targets)}; guard: {', '.join(plan.guard) or 'none'}; "
            f"{plan.samples} sample(s) each) into {plan.run_dir}; cost {cost} "
            f"({plan.estimate_basis}); nothing was spent")


def render_gate(r: GateResult) -> str:
    """What improve.py gate prints."""
    lines = []
    if r.decision is None:
        lines.append(r.summary)
    else:
        word = "ACCEPT" if r.decision == ACCEPT else "REJECT"
        lines.append(f"gate: {word}{' (already decided for this change)' if r.resumed else ''}: "
                     f"{r.summary}")
        if r.verdict:
            lines.append(f"comparison: {r.verdict}")
        lines += [f"  - {x}" for x in r.reasons]
        if r.compare_dir:
            lines.append(f"page: {Path(r.compare_dir) / 'compare.html'}")
        lines.append("next: improve.py accept" if r.decision == ACCEPT
                     else "next: improve.py rollback (or change the candidate and gate again)")
    lines.append(f"change (digest {r.candidate_digest[:12]}):")
    lines += ["  " + x for x in (r.diff.splitlines() or ["(no textual difference)"])]
    return "\n".join(lines)
