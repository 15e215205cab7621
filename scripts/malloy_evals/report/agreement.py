"""How often the judge agrees with the people who settle its verdicts: pairs of a judge verdict and a
settled human verdict, raw agreement, Cohen's kappa with a seeded bootstrap interval, the confusion
matrix and every disagreement (reference/judge.md, "Agreement with people").

A pair is an attempt whose live score holds a judge verdict (`match`, `near_match`, `no_match` or
`needs_human`) and whose live `human_verdict` applies to it (`ledger.events.human_verdict_applies`:
the same attempt, a score not nulled by rule). A set's `judge-regressions.jsonl` adds the fixtures
whose provenance records the judge's verdict, unless that attempt was already read from a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK
from malloy_evals.core.jsonl import read_objects
from malloy_evals.ledger.events import human_verdict_applies
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.report.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, cohen_kappa, kappa_bootstrap

LABELS = ("match", "near_match", "no_match", "needs_human")
MIN_PAIRS = 10  # below this, the figures are printed with "too few pairs to trust"
TOO_FEW = "too few pairs to trust"


@dataclass(frozen=True)
class Pair:
    """One attempt judged by both: where it was read, the two verdicts, who settled it and why."""

    source: str          # "<runId>" or "regressions"
    qid: str
    sample: int | None
    judge: str
    human: str
    who: str
    why: str


@dataclass(frozen=True)
class AgreementReport:
    """The --json document of judge_agreement.py (its keys are the issue's contract)."""

    pairs: int
    agreement: float | None
    kappa: float | None
    kappa_ci: list[float] | None
    confusion: dict[str, dict[str, int]]
    disagreements: list[dict[str, Any]]
    trusted: bool
    note: str | None
    bootstrap_seed: int
    bootstrap_resamples: int
    sources: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.trusted else EXIT_FINDING

    def to_json(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "agreement": self.agreement, "kappa": self.kappa,
                "kappa_ci": self.kappa_ci, "confusion": self.confusion,
                "disagreements": self.disagreements, "trusted": self.trusted, "note": self.note,
                "bootstrap_seed": self.bootstrap_seed,
                "bootstrap_resamples": self.bootstrap_resamples, "sources": self.sources}


def run_pairs(run_id: str, view: LiveView) -> list[Pair]:
    """Every attempt of one run's live view that both the judge and a person decided."""
    out: list[Pair] = []
    for key, score in view.latest("score").items():
        human = view.human_verdict(key)
        if score.get("verdict") not in LABELS or human is None:
            continue
        if not human_verdict_applies(score, human, view.attempt(key)):
            continue
        out.append(Pair(run_id, key.qid, key.sample, str(score["verdict"]), str(human["verdict"]),
                        str(human.get("settled_by") or "?"), str(human.get("why") or "")))
    return out


def regression_pairs(path: Path) -> list[Pair]:
    """The fixtures of a judge-regressions.jsonl whose provenance records the judge's verdict."""
    out: list[Pair] = []
    if not path.is_file():
        return out
    for _line, fixture in read_objects(path):
        found = fixture.get("provenance")
        prov: dict[str, Any] = found if isinstance(found, dict) else {}
        judge, human = prov.get("judgeVerdict"), fixture.get("verdict")
        if judge not in LABELS or human not in LABELS or not isinstance(fixture.get("qid"), str):
            continue
        sample = prov.get("sample") if isinstance(prov.get("sample"), int) else None
        out.append(Pair(str(prov.get("run") or "regressions"), fixture["qid"], sample, judge,
                        human, str(fixture.get("settledBy") or "?"), str(fixture.get("why") or "")))
    return out


def measure(pairs: Sequence[Pair], *, seed: int = DEFAULT_SEED,
            resamples: int = DEFAULT_RESAMPLES, sources: Sequence[str] = ()) -> AgreementReport:
    """The figures over `pairs`: agreement, kappa and its interval, confusion, disagreements."""
    votes = [(p.judge, p.human) for p in pairs]
    n = len(votes)
    confusion = {j: {h: sum(1 for v in votes if v == (j, h)) for h in LABELS} for j in LABELS}
    agreement = sum(1 for a, b in votes if a == b) / n if n else None
    kappa = cohen_kappa(votes)
    interval = kappa_bootstrap(votes, seed=seed, resamples=resamples) if n else None
    disagreements = [{"run": p.source, "qid": p.qid, "sample": p.sample, "judge": p.judge,
                      "human": p.human, "who": p.who, "why": p.why}
                     for p in pairs if p.judge != p.human]
    if n == 0:
        note: str | None = "no pairs: no attempt has both a judge verdict and a settled one"
    elif n < MIN_PAIRS:
        note = f"{TOO_FEW} ({n} < {MIN_PAIRS})"
    elif kappa is None:
        note = "kappa undefined: the judge and the people each used one verdict throughout"
    else:
        note = None
    return AgreementReport(
        pairs=n, agreement=_round(agreement), kappa=_round(kappa),
        kappa_ci=[round(interval[0], 4), round(interval[1], 4)] if interval else None,
        confusion=confusion, disagreements=disagreements, trusted=note is None, note=note,
        bootstrap_seed=seed, bootstrap_resamples=resamples, sources=list(sources))


def judge_agreement(run_dirs: Sequence[str | Path], set_dir: str | Path | None = None, *,
                    seed: int = DEFAULT_SEED,
                    resamples: int = DEFAULT_RESAMPLES) -> AgreementReport:
    """judge_agreement.py: the pairs of every run, then the set's regression fixtures not
    already read from a run (the same run, qid and sample)."""
    pairs: list[Pair] = []
    sources: list[str] = []
    for d in run_dirs:
        run = Run.open(d)
        pairs.extend(run_pairs(run.run_id, run.view()))
        sources.append(str(d))
    if set_dir is not None:
        seen = {(p.source, p.qid, p.sample) for p in pairs}
        path = Path(set_dir) / "judge-regressions.jsonl"
        pairs.extend(p for p in regression_pairs(path) if (p.source, p.qid, p.sample) not in seen)
        sources.append(str(path))
    return measure(pairs, seed=seed, resamples=resamples, sources=sources)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def figure_line(report: AgreementReport) -> str | None:
    """The one line a run page or check_judge shows; None when there is no pair."""
    if report.pairs == 0 or report.agreement is None:
        return None
    kappa = "undefined" if report.kappa is None else f"{report.kappa:.2f}"
    ci = (f" (95% CI {report.kappa_ci[0]:.2f} to {report.kappa_ci[1]:.2f})"
          if report.kappa is not None and report.kappa_ci else "")
    tail = f"; {report.note}" if report.note and report.pairs else ""
    return (f"judge agrees with people on {100 * report.agreement:.1f}% of {report.pairs} "
            f"pair(s), Cohen's kappa {kappa}{ci}{tail}")


def render_text(report: AgreementReport) -> str:
    """The text report: the figure, the confusion matrix, each disagreement."""
    lines = [figure_line(report) or report.note or "no pairs"]
    if report.pairs:
        if report.note and report.note not in lines[0]:
            lines.append(report.note)
        lines.append("")
        lines.append("judge \\ person  " + "  ".join(f"{h:>11}" for h in LABELS))
        for j in LABELS:
            lines.append(f"{j:<14}  " + "  ".join(f"{report.confusion[j][h]:>11}" for h in LABELS))
    if report.disagreements:
        lines.append("")
        lines.append(f"{len(report.disagreements)} disagreement(s):")
        for d in report.disagreements:
            label = d["qid"] if d["sample"] is None else f"{d['qid']}#{d['sample']}"
            lines.append(f"  {label} ({d['run']}): judge {d['judge']}, person {d['human']} "
                         f"({d['who']}): {d['why']}")
    return "\n".join(lines)
