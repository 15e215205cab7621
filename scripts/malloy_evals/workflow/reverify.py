"""Re-verification: does the judge, asked again today, still give the verdicts a run recorded?

A seeded random sample of the run's judged attempts (a live score whose verdict is `match`,
`near_match`, `no_match` or `needs_human`) is re-judged through the same decision path, with any
provider. Each re-judgement is appended as a `reverify` event naming the score and the attempt it
re-judged; a score is never replaced. The disagreement rate is reported with its Wilson interval;
the finding is a lower bound above the allowed rate (reference/judge.md, "Re-verification").
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.answer.scoring import score_attempt
from malloy_evals.core.cli import to_jsonable
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, UsageError
from malloy_evals.core.words import sample_words
from malloy_evals.judge.calibration import RegressionReport, check_regressions, render_regressions
from malloy_evals.judge.doctrine import DEFAULT_MAX_DISAGREEMENT
from malloy_evals.ledger.events import AttemptKey
from malloy_evals.ledger.run import Run
from malloy_evals.llm.base import Provider
from malloy_evals.llm.select import provider_stats
from malloy_evals.report.agreement import (
    LABELS,
    AgreementReport,
    figure_line,
    measure,
    regression_pairs,
)
from malloy_evals.report.stats import DEFAULT_SEED, wilson_interval
from malloy_evals.sets.eval_set import EvalSet, load_set


@dataclass(frozen=True)
class Reverified:
    """One re-judged attempt: what the run recorded and what the judge says now."""

    qid: str
    sample: int | None
    recorded: str
    verdict: str | None
    reason: str | None
    status: str              # "reverified" | "dry_run" | "emitted" | "pending"
    event_id: str | None
    why: str | None = None

    @property
    def agrees(self) -> bool | None:
        return None if self.status != "reverified" else self.verdict == self.recorded


@dataclass(frozen=True)
class ReverifyReport:
    """check_judge.py --reverify: the sample, the disagreement rate and its interval."""

    run_id: str
    seed: int
    judged_attempts: int          # how many the sample was drawn from
    sampled: int
    compared: int                 # re-judged with a verdict to compare
    disagreements: int
    rate: float | None
    rate_ci: list[float] | None
    max_disagreement: float
    dry_run: bool
    items: list[Reverified] = field(default_factory=list)
    provider_stats: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        if self.dry_run:
            return EXIT_OK
        if self.compared == 0:
            return EXIT_UNMEASURED
        return EXIT_FINDING if self.rate_ci and self.rate_ci[0] > self.max_disagreement else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run_id, "seed": self.seed, "judged_attempts": self.judged_attempts,
                "sampled": self.sampled, "compared": self.compared,
                "disagreements": self.disagreements, "rate": self.rate, "rate_ci": self.rate_ci,
                "max_disagreement": self.max_disagreement, "dry_run": self.dry_run,
                "items": [{"qid": i.qid, "sample": i.sample, "recorded": i.recorded,
                           "verdict": i.verdict, "reason": i.reason, "status": i.status,
                           "agrees": i.agrees, "event_id": i.event_id, "why": i.why}
                          for i in self.items],
                "provider_stats": self.provider_stats}


def draw_sample(keys: list[AttemptKey], n: int, seed: int) -> list[AttemptKey]:
    """`n` of the judged attempts (all of them when there are fewer), drawn with `seed` from the
    keys in a fixed order, so the same run and seed give the same sample."""
    ordered = sorted(keys, key=lambda k: (k.qid, -1 if k.sample is None else k.sample, k.phase))
    return sorted(random.Random(seed).sample(ordered, min(n, len(ordered))),
                  key=lambda k: (k.qid, -1 if k.sample is None else k.sample))


def reverify(run: Run, eval_set: EvalSet, *, provider: Provider, sample: int,
             seed: int = DEFAULT_SEED, max_disagreement: float = DEFAULT_MAX_DISAGREEMENT,
             judge_retries: int = 1, dry_run: bool = False,
             judge_samples: int | None = None) -> ReverifyReport:
    """Re-judge `sample` judged attempts of `run` and append one `reverify` event for each one
    the judge decided again (nothing on a dry run, an emit or a pending host reply)."""
    if not 0 <= max_disagreement <= 1:
        raise UsageError("--max-disagreement is a fraction from 0 to 1")
    view = run.view()
    scores = {k: s for k, s in view.latest("score").items() if s.get("verdict") in LABELS}
    chosen = draw_sample(list(scores), sample, seed)
    items: list[Reverified] = []
    for key in chosen:
        score = scores[key]
        result = score_attempt(run, eval_set, key.qid, key.sample, provider=provider,
                               reexecute=False,
                               judge_retries=judge_retries, append=False, view=view,
                               judge_samples=judge_samples)
        if result.status != "judged":
            items.append(Reverified(key.qid, key.sample, str(score["verdict"]), None, None,
                                    result.status, None, result.message))
            continue
        event = _event(key, score, view.attempt(key), result.event or {}, seed)
        written = run.append([event])[0]
        items.append(Reverified(key.qid, key.sample, str(score["verdict"]), result.verdict,
                                result.reason, "reverified", written.get("event_id"),
                                (result.event or {}).get("why")))
    compared = [i for i in items if i.agrees is not None]
    disagree = sum(1 for i in compared if not i.agrees)
    interval = wilson_interval(disagree, len(compared))
    return ReverifyReport(
        run_id=run.run_id, seed=seed, judged_attempts=len(scores), sampled=len(chosen),
        compared=len(compared), disagreements=disagree,
        rate=round(disagree / len(compared), 4) if compared else None,
        rate_ci=[round(interval[0], 4), round(interval[1], 4)] if interval else None,
        max_disagreement=max_disagreement, dry_run=dry_run, items=items,
        provider_stats=provider_stats(provider))


def _event(key: AttemptKey, score: dict[str, Any], attempt: dict[str, Any] | None,
           judged: dict[str, Any], seed: int) -> dict[str, Any]:
    pins = ("judge_model", "judge_version", "rubric_sha", "judge_prompt_sha", "golden_revision",
            "judge_artifact", "judge_samples")
    return {"kind": "reverify", "qid": key.qid, "sample": key.sample,
            "score_event_id": score.get("event_id"),
            "attempt_event_id": (attempt or {}).get("event_id"),
            "recorded_verdict": score.get("verdict"), "verdict": judged.get("verdict"),
            "reason": judged.get("reason"), "why": judged.get("why"),
            "confidence": judged.get("confidence"),
            "agrees": judged.get("verdict") == score.get("verdict"), "seed": seed,
            **{k: judged.get(k) for k in pins if judged.get(k) is not None}}


def reverify_at(run_dir: str | Path, set_dir: str | Path, *, provider: Provider, sample: int,
                seed: int = DEFAULT_SEED, max_disagreement: float = DEFAULT_MAX_DISAGREEMENT,
                judge_retries: int = 1, dry_run: bool = False,
                judge_samples: int | None = None) -> ReverifyReport:
    """check_judge.py --reverify: open the run and the set; each attempt is judged on the
    prediction its scoring re-executed."""
    return reverify(Run.open(run_dir), load_set(set_dir), provider=provider, sample=sample,
                    seed=seed, max_disagreement=max_disagreement, judge_retries=judge_retries,
                    dry_run=dry_run, judge_samples=judge_samples)


def render_text(report: ReverifyReport) -> str:
    """The report: the rate and its interval, then each disagreement (and what was not judged)."""
    head = f"reverify {report.run_id}: {report.sampled} of {report.judged_attempts} judged " \
           f"attempt(s) drawn (seed {report.seed})"
    if report.dry_run:
        stats = report.provider_stats or {}
        return head + f"; dry run: {len(report.items)} judge call(s) counted, nothing called" + (
            f" ({stats})" if stats else "")
    lines = [head]
    if report.rate is None or report.rate_ci is None:
        lines.append("nothing re-judged: no disagreement rate")
    else:
        lines.append(f"disagreement {100 * report.rate:.1f}% ({report.disagreements}/"
                     f"{report.compared}; 95% Wilson CI {100 * report.rate_ci[0]:.1f}-"
                     f"{100 * report.rate_ci[1]:.1f}%), allowed {100 * report.max_disagreement:.1f}%"
                     + (": the lower bound is above it" if report.exit_code == EXIT_FINDING else ""))
    for i in report.items:
        label = f"{i.qid} ({sample_words(i.sample)})"
        if i.agrees is False:
            now = i.verdict or f"null ({i.reason})"
            lines.append(f"  DISAGREES {label}: recorded {i.recorded}, now {now}: {i.why or ''}")
        elif i.agrees is None:
            lines.append(f"  {i.status} {label}: {i.why or ''}")
    return "\n".join(lines)


@dataclass(frozen=True)
class JudgeCheck:
    """check_judge.py's regression report, with the judge's agreement with people beside it when
    the set's fixtures record what the judge said (reference/judge.md)."""

    regressions: RegressionReport
    agreement: AgreementReport | None

    @property
    def exit_code(self) -> int:
        return self.regressions.exit_code

    def to_json(self) -> dict[str, Any]:
        doc = to_jsonable(self.regressions)
        return {**doc, "agreement": self.agreement.to_json() if self.agreement else None}


def check_judge(eval_set: EvalSet, provider: Provider, *, repeat: int = 1, judge_retries: int = 1,
                fixtures: Path | None = None, only: list[str] | None = None) -> JudgeCheck:
    """check_regressions, and the agreement figure over the fixtures when there are pairs."""
    report = check_regressions(eval_set, provider, repeat=repeat, judge_retries=judge_retries,
                               fixtures=fixtures, only=only)
    path = fixtures or eval_set.dir / "judge-regressions.jsonl"
    pairs = regression_pairs(Path(path))
    return JudgeCheck(report, measure(pairs, sources=[str(path)]) if pairs else None)


def render_check(check: JudgeCheck) -> str:
    text = render_regressions(check.regressions)
    line = figure_line(check.agreement) if check.agreement else None
    return text + (f"\n{line}" if line else "")
