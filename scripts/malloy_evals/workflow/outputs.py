"""The one owner of a run's outputs: RESULTS.md, summary.json, report.html and run.json's pins.

Every workflow that changes what a run amounts to (score_run, review's settle and unsettle,
report.py, diagnose.py, promote_golden.py for the runs it names) loads the run through
`RunOutputs.load` and writes through `RunOutputs.write`. Loading reads each input once, with its
one loader, and checks it before any work or spending: the run folder, the set (and that the run
was made on it), the ledger's live view, and the coverage report. Writing computes ONE summary
and renders it into all four outputs together, through core/files.py's safe writers: no page can
say one thing while RESULTS.md says another. A large run's case pages (report/run_page.py) are
part of report.html: written with it, and the ones it no longer has removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from malloy_evals.answer.retrieval import COVERAGE_FIGURES, CoverageReport, load_coverage_report
from malloy_evals.core import jsonl, schemas
from malloy_evals.core.errors import InputError
from malloy_evals.ledger import public_loop
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.report.figures import RunSummary, judge_counts, judges_text, summarize
from malloy_evals.report.markdown import write_results
from malloy_evals.report.run_page import RunPage, find_set, remove_case_pages, write_run_page
from malloy_evals.sets.eval_set import EvalSet, load_set

SUMMARY_FILE = "summary.json"
T = TypeVar("T")


def check_same_set(run: Run, eval_set: EvalSet) -> None:
    """A run is read only against the set it was made on (its run.json `setName`), as
    compare_runs refuses arms over another set: refused before anything is written. A run that
    names no set (a public-loop run.json) is read against the set given."""
    made_on = run.info.get("setName")
    if made_on is not None and made_on != eval_set.name:
        raise InputError(run.dir / "run.json", None,
                         f"run {run.run_id} was made on set {made_on or 'null'}, not on set "
                         f"{eval_set.name} ({eval_set.dir}): give the set it was made on")


@dataclass(frozen=True)
class Written:
    """What `RunOutputs.write` wrote: the one summary and the four outputs rendered from it."""

    summary: RunSummary
    results_md: str
    summary_json: str
    page: RunPage
    pins: dict[str, Any]


class RunOutputs:
    """A run, its set, its live view and its coverage figures, loaded once and checked; `write`
    renders them into the run's outputs."""

    def __init__(self, run: Run, eval_set: EvalSet, view: LiveView,
                 coverage: CoverageReport | None, *, run_label: str, set_label: str):
        self.run = run
        self.eval_set = eval_set
        self.view = view
        self.coverage = coverage
        self.run_label = run_label
        self.set_label = set_label

    @classmethod
    def load(cls, run_dir: Path, set_dir: Path | None, *, coverage: Path | None = None,
             model_dir: Path | None = None, refuse_public: str | None = None) -> RunOutputs:
        """Open the run, load its set (the one given, else the set the run folder sits in),
        check the run was made on it, read the coverage report, then the ledger's live view.
        `refuse_public` names the script that cannot read a public-loop ledger."""
        run = Run.open(run_dir)
        if refuse_public and public_loop.ledger_is_public(run.events_path):
            raise InputError(run.events_path, 1, public_loop.refusal(refuse_public))
        if set_dir is None:
            set_dir = find_set(Path(run_dir), run.info.get("setName"))
            if set_dir is None:
                raise InputError(run.dir / "run.json", None,
                                 f"no set given and none found around the run (its setName is "
                                 f"{run.info.get('setName') or 'null'}): give --set SET")
        eval_set = load_set(set_dir, model_dir)
        check_same_set(run, eval_set)
        report = load_coverage_report(coverage) if coverage is not None else None
        return cls(run, eval_set, run.view(), report, run_label=str(run_dir),
                   set_label=str(set_dir))

    def coverage_figures(self) -> Mapping[str, Any] | None:
        """The coverage report's figures; without one, the figures the last summary showed (a
        settlement or a diagnosis changes no coverage measurement)."""
        if self.coverage is not None:
            return self.coverage.figures
        try:
            doc = jsonl.loads((self.run.dir / SUMMARY_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # a decode error included
            return None
        figures = doc.get("coverage") if isinstance(doc, dict) else None
        if not isinstance(figures, dict):
            return None
        # Kept only when they are a coverage report's figures (its schema, without the detail).
        kept = {k: figures.get(k) for k in COVERAGE_FIGURES}
        return kept if schemas.is_valid("coverage_report", {**kept, "cases_detail": []}) else None

    def summary(self, *, judge_spec: str | None = None,
                endpoint_flag: str | None = None) -> RunSummary:
        """The run's summary from the ledger as it stands, read streaming (`figures.summarize`)."""
        return summarize(self.run, self.eval_set, self.coverage_figures(), judge_spec=judge_spec,
                         endpoint_flag=endpoint_flag, run_label=self.run_label,
                         set_label=self.set_label)

    def write(self, *, pins: Mapping[str, Any] | None = None, judge_spec: str | None = None,
              endpoint_flag: str | None = None) -> Written:
        """run.json's pins, then ONE summary written as RESULTS.md, summary.json and
        report.html, and its status and costs pinned in run.json."""
        self.view.refresh()
        given = {k: v for k, v in (pins or {}).items() if v is not None}
        # run.json names every judge behind the live scores, not only the one of this pass.
        tied = [t for key in self.view.latest("score") if (t := self.view.tied_score(key))]
        judge = judges_text(judge_counts(tied),
                            given.get("judgeModel") or self.run.info.get("judgeModel"))
        if judge is not None:
            given["judgeModel"] = judge
        if given:
            self.run.update_info(**given)  # before the summary, which prints the judge it names
        s = self.summary(judge_spec=judge_spec, endpoint_flag=endpoint_flag)
        derived: dict[str, Any] = {"status": s.status}
        if s.cost.get("judge_usd") is not None:
            derived["judgeCostUsd"] = s.cost["judge_usd"]
        if s.cost.get("answerer_usd") is not None:
            derived["answererCostUsd"] = s.cost["answerer_usd"]
        self.run.update_info(**derived)
        md, js = write_results(self.run.dir, s)
        # The page renders this very summary, so it says exactly what summary.json says. Past a
        # few hundred attempts each case has a page beside it: written with report.html, and
        # every case page this writing did not make removed, so none outlives a rescore.
        page = write_run_page(self.run, self.eval_set, self.view, s, run_label=self.run_label,
                              set_label=self.set_label)
        remove_case_pages(self.run.dir, page.case_pages)
        return Written(s, str(md), str(js), page, {**given, **derived})


def outputs_writer(set_dir: Path) -> Callable[[Path], Written]:
    """`write_outputs(run_dir)` for runs over one set (a comparison's arms that have no page yet):
    each loaded and written by its owner."""

    def write_outputs(run_dir: Path) -> Written:
        return RunOutputs.load(run_dir, set_dir).write()

    return write_outputs


def rewrite_runs_after(runs: Sequence[Path], set_dir: Path, change: Callable[[], T]
                       ) -> tuple[T, list[Written]]:
    """Change the set (`change`: promote_golden), then rewrite the outputs of the runs named, so
    their pages say what the set now says (a score judged against the older golden is stale).
    Every run is loaded and checked against the set BEFORE the change: a run made on another set
    refuses the whole command with nothing written."""
    for run_dir in runs:
        RunOutputs.load(run_dir, set_dir)
    result = change()
    return result, [RunOutputs.load(run_dir, set_dir).write() for run_dir in runs]


def render_rewritten(written: Sequence[Written]) -> str:
    """One line per rewritten run: its RESULTS.md and the headline it now carries."""
    return "\n".join(f"rewrote {w.results_md}, {w.summary_json} and {w.page.path}: "
                     f"{w.summary.headline}"
                     + (f"\n  finish it with: {w.summary.partial.command}"
                        if w.summary.partial is not None else "") for w in written)
