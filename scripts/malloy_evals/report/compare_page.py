"""compare.html: one self-contained page for a comparison of two arms.

It renders the comparison's own JSON document (the one compare_runs.py prints with --json and
writes as compare.json), never recomputing a figure: the verdict line word for word, the delta
with its interval, the flip table (fixed, broken, moved, unchanged, as the document classifies
them), the band decision and the targets. Each case links, by relative path, into the detail
section of that case on each arm's run page (report.html beside each run's ledger), or, for a run
large enough to have them, straight to that case's own page beside it (report-case-<qid>.html).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import EXIT_OK, EXIT_UNMEASURED
from malloy_evals.core.words import signed
from malloy_evals.report.compare import Comparison, compare_runs, p_text
from malloy_evals.report.html import (
    Html,
    case_anchor,
    definition_list,
    el,
    esc,
    href_to,
    join,
    link,
    page,
    pct,
    shown,
    table,
    td,
)
from malloy_evals.report.run_page import PAGE_FILE, case_page, case_pages_in, write_atomic

COMPARE_FILE = "compare.html"
CHANGE_ORDER = ("fixed", "broken", "moved", "unchanged")


@dataclass(frozen=True)
class ComparePage:
    """report.py --compare's result: the page written and the verdict it carries."""

    path: str
    bytes: int
    verdict: str
    cases: int
    comparable: bool = True

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.comparable else EXIT_UNMEASURED


def _delta_text(doc: Mapping[str, Any]) -> str:
    ci = doc.get("delta_ci")
    interval = (f" (95% CI {signed(ci[0])} to {signed(ci[1])})"
                if isinstance(ci, (list, tuple)) and len(ci) == 2 else " (no interval)")
    return f"{signed(doc.get('delta_points'))} points{interval}"


def _p_text(p: Any) -> str:
    """McNemar's p as the verdict line prints it (`p=1.00`), or n/a."""
    return (f"p={p_text(float(p))}" if isinstance(p, (int, float)) and not isinstance(p, bool)
            else "n/a")


def _verdict_class(verdict: str) -> str:
    """The colour of the verdict line, from its first words (the rule compare_runs applies)."""
    if verdict.startswith("candidate better"):
        return "headline better"
    if verdict.startswith("candidate worse"):
        return "headline worse"
    return "headline"


def _outcome(row: Mapping[str, Any], arm: str) -> Any:
    """An arm's outcome in a case row: `row[arm]`, else `row[arm + "_outcome"]`."""
    return row.get(arm, row.get(f"{arm}_outcome"))


def outcome_text(value: Any) -> str:
    """An arm's outcome as a person reads it: `pass`, `fail`, `neither (near_match)`,
    `null (answerer_truncated)`, `pass 2/3` for k samples, `not in this arm` when absent."""
    if value is None:
        return "not in this arm"
    if not isinstance(value, Mapping):
        return shown(value)
    word = value.get("outcome", value.get("result"))
    text = shown(word, none="null")
    detail = value.get("verdict") or value.get("reason")
    if detail and str(detail) != str(word):
        text += f" ({detail})"
    passed, total = value.get("passed"), value.get("samples", value.get("decided"))
    fraction = value.get("pass_fraction")
    if isinstance(passed, int) and isinstance(total, int) and total > 1:
        text += f" {passed}/{total}"
    elif isinstance(fraction, (int, float)) and not isinstance(fraction, bool):
        text += f" (pass fraction {fraction:.2f})"
    return text


def _qids(items: Any) -> list[str]:
    """qids from a list of qids or of objects with a `qid`."""
    out = []
    for item in items or []:
        q = item.get("qid") if isinstance(item, Mapping) else item
        if q is not None:
            out.append(str(q))
    return out


def _arm_links(qid: str, pages: Sequence[tuple[str, str]],
               case_pages: Mapping[str, Collection[str]]) -> Html:
    """Links into one arm's run pages, one per run (`r1`, `r2`) when the arm has several: to the
    case's own page when its run has one (`case_pages`, by run page URL), else into report.html."""
    def url_of(url: str) -> str:
        own = case_page(qid)
        if own in case_pages.get(url, ()):
            return href_to(posixpath.join(posixpath.dirname(url), own), fragment=case_anchor(qid))
        return href_to(url, fragment=case_anchor(qid))

    if not pages:
        return esc("")
    if len(pages) == 1:
        return link("detail", url_of(pages[0][1]))
    return join(*[join(link(name, url_of(url)), " ") for name, url in pages])


def page_links(runs: Sequence[str | Path], out_dir: str | Path) -> list[tuple[str, str]]:
    """(run name, relative URL of its report.html from the comparison's folder) for each run."""
    out = Path(out_dir).resolve()
    links = []
    for run in runs:
        target = Path(run).resolve() / PAGE_FILE
        links.append((Path(run).name, Path(os.path.relpath(target, out)).as_posix()))
    return links


def render_compare_page(doc: Mapping[str, Any], *, base_pages: Sequence[tuple[str, str]] = (),
                        candidate_pages: Sequence[tuple[str, str]] = (),
                        case_pages: Mapping[str, Collection[str]] | None = None) -> str:
    """The comparison page from the comparison's JSON document.

    Args:
        doc: compare_runs' document (verdict, comparable, differences, cases_compared, fixed,
            broken, moved, pass rates, delta_points, delta_ci, bootstrap_seed, mcnemar_p, band,
            beyond_band, targets, cases).
        base_pages, candidate_pages: (run name, relative URL of its report.html) per run of each
            arm, for the links into each arm's detail (`page_links` makes them).
        case_pages: by run page URL, the case pages beside it (a run past the split), which the
            links of those cases go to.
    """
    own = case_pages or {}
    verdict = str(doc.get("verdict") or "no verdict")
    fixed, broken = _qids(doc.get("fixed")), _qids(doc.get("broken"))
    moved = _qids(doc.get("moved"))
    differences = [str(x) for x in doc.get("differences") or []]
    arms = _mapping(doc.get("arms"))
    names = {arm: ", ".join(_run_ids(arms.get(arm))) or arm for arm in ("base", "candidate")}
    parts: list[Any] = [
        el("h1", f"Did the change help? {names['candidate']} (candidate) against "
                 f"{names['base']} (base) on set {shown(doc.get('set'), none='unknown')}"),
        el("p", verdict, class_=_verdict_class(verdict), id="verdict"),
        _arms(doc, arms),
    ]
    if doc.get("comparable") is False or differences:
        parts.append(el("div", el("p", el("strong", "The arms differ: " if doc.get("comparable")
                                          is not False else "Not comparable: "),
                                  "every figure below carries these differences."),
                        el("ul", [el("li", x) for x in differences]), class_="alert",
                        id="differences"))
    parts.append(el("section", el("h2", "The delta"), definition_list([
        ("base pass rate", el("span", pct(doc.get("base_pass_rate")), data_figure="base")),
        ("candidate pass rate", el("span", pct(doc.get("candidate_pass_rate")),
                                   data_figure="candidate")),
        ("delta", el("span", _delta_text(doc), data_figure="delta")),
        ("cases decided in both arms", el("span", shown(doc.get("cases_compared")),
                                          data_figure="cases_compared")),
        ("fixed (fail to pass)", el("span", len(fixed), data_figure="fixed")),
        ("broken (pass to fail)", el("span", len(broken), data_figure="broken")),
        ("other moves (not flips)", el("span", len(moved), data_figure="moved")),
        ("McNemar p (exact, two-sided)", _p_text(doc.get("mcnemar_p"))),
        ("bootstrap", (f"{shown(doc.get('bootstrap_resamples'), none='?')} paired resamples, "
                       f"seed {shown(doc.get('bootstrap_seed'), none='n/a')}")),
    ]), id="delta"))
    parts.append(_band(doc))
    parts.append(_targets(doc, base_pages, candidate_pages, own))
    if isinstance(doc.get("change"), Mapping):
        parts.append(_change(doc["change"]))
    parts.append(_flips(doc, fixed, broken, moved, base_pages, candidate_pages, own))
    return page(f"comparison: {verdict}", el("main", parts), description=verdict)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _run_ids(arm: Any) -> list[str]:
    runs = arm.get("runs") if isinstance(arm, Mapping) else None
    return [str(r.get("run_id")) for r in runs or [] if isinstance(r, Mapping)]


PIN_WORDS = (("judge_model", "judge"), ("judge_version", "JUDGE_VERSION"),
             ("rubric_sha", "rubric sha"), ("judge_prompt_sha", "judge prompt sha"))


def _arms(doc: Mapping[str, Any], arms: Mapping[str, Any]) -> Html:
    """Both arms named: each run with its answerer and served model, the judge pins of its live
    scores, and the set they were compared on."""
    rows = []
    for label in ("base", "candidate"):
        arm = _mapping(arms.get(label))
        pins = _mapping(arm.get("pins"))
        judged = "; ".join(f"{word} {', '.join(shown(v) for v in pins.get(key) or []) or 'none'}"
                           for key, word in PIN_WORDS)
        for run in arm.get("runs") or []:
            if not isinstance(run, Mapping):
                continue
            rows.append([label, td(el("code", shown(run.get("run_id"))), data_run=label),
                         shown(run.get("answerer_model"), none="unknown"),
                         shown(run.get("model_sha"), none="unknown"),
                         judged, f"{shown(arm.get('scored'))} of {shown(arm.get('attempts'))}"])
    return el("section", el("h2", "The arms"),
              el("p", f"Set {shown(doc.get('set'), none='unknown')}; every case compared is "
                      "judged against the same golden in both arms."),
              table(["arm", "run", "answerer", "model sha", "judge pins", "scored"], rows,
                    caption="the runs of each arm", id="arms-table"), id="arms")


def _band_words(band: Mapping[str, Any]) -> str:
    """The noise band as the verdict line says it: `at most 3 flips (mean 2.5) between ...`."""
    runs = ", ".join(str(r) for r in band.get("runs") or [])
    return (f"at most {shown(band.get('max_flips'), none='?')} flip(s) (mean "
            f"{shown(band.get('mean_flips'), none='?')}) between runs of the same arm over "
            f"{shown(band.get('pairs'), none='?')} pair(s) ({runs or 'runs not named'}), on "
            f"{shown(band.get('cases'), none='?')} case(s); measured "
            f"{shown(band.get('measured_at'), none='at an unknown time')}; from "
            f"{shown(band.get('file'), none='an unnamed file')}")


def _band(doc: Mapping[str, Any]) -> Html:
    band = doc.get("band")
    if band is None:
        return el("section", el("h2", "Noise band"),
                  el("p", "Noise band not measured: a difference in flips cannot be told from "
                          "noise. measure_noise.py (eval-answer) measures it from two or more runs "
                          "of the same arm; give the file it writes with --band.",
                     id="band-decision"), id="band")
    beyond = doc.get("beyond_band")
    decision = ("the flips are beyond the A/A band" if beyond is True
                else "the flips are inside the A/A band: not an improvement by themselves"
                if beyond is False else "band given; no decision recorded")
    words = _band_words(band) if isinstance(band, Mapping) else shown(band)
    return el("section", el("h2", "Noise band"), el("p", decision, id="band-decision"),
              el("p", "The A/A band: ", words, ".", id="band-words"), id="band")


def _change(change: Mapping[str, Any]) -> Html:
    """The model change under comparison (eval-improve's gate): its decision and its diff."""
    items = [(k, shown(change.get(k))) for k in ("decision", "candidate", "digest")
             if change.get(k) is not None]
    reasons = [str(x) for x in change.get("reasons") or []]
    return el("section", el("h2", "The model change"), definition_list(items),
              el("ul", [el("li", x) for x in reasons]) if reasons else "",
              el("div", el("pre", str(change.get("diff") or "(no textual difference)"),
                           id="change-diff"), class_="scroll"), id="change")


def _targets(doc: Mapping[str, Any], base_pages: Sequence[tuple[str, str]],
             candidate_pages: Sequence[tuple[str, str]],
             case_pages: Mapping[str, Collection[str]]) -> Html:
    targets = doc.get("targets") or {}
    if not targets:
        return el("section", el("h2", "Targets"),
                  el("p", "No targets given (--targets q1,q2 names the cases the change meant "
                          "to fix).", class_="note"), id="targets")
    fixed = sum(1 for v in targets.values() if v == "fixed")
    return el("section", el("h2", "Targets"),
              el("p", f"{fixed} of {len(targets)} target case(s) fixed."),
              table(["case", "result", "base", "candidate"],
                    [[q, td(shown(v), data_target=q), _arm_links(q, base_pages, case_pages),
                      _arm_links(q, candidate_pages, case_pages)] for q, v in targets.items()],
                    caption="targets", id="targets-table"), id="targets")


def _flips(doc: Mapping[str, Any], fixed: list[str], broken: list[str], moved: list[str],
           base_pages: Sequence[tuple[str, str]], candidate_pages: Sequence[tuple[str, str]],
           case_pages: Mapping[str, Collection[str]]) -> Html:
    change = {q: "moved" for q in moved}
    change.update({q: "broken" for q in broken})
    change.update({q: "fixed" for q in fixed})
    rows = [r for r in doc.get("cases") or [] if isinstance(r, Mapping) and r.get("qid")]
    rows.sort(key=lambda r: CHANGE_ORDER.index(change.get(str(r["qid"]), "unchanged")))
    body = []
    for r in rows:
        q = str(r["qid"])
        kind = change.get(q, "unchanged")
        body.append(el("tr", td(q), td(kind, class_=f"c-{kind}", data_sort=kind),
                       td(outcome_text(_outcome(r, "base"))),
                       td(outcome_text(_outcome(r, "candidate"))),
                       td(_arm_links(q, base_pages, case_pages)),
                       td(_arm_links(q, candidate_pages, case_pages)),
                       data_change=kind, data_verdict=kind))
    head = el("thead", el("tr", [el("th", h, scope="col") for h in (
        "case", "change", "base outcome", "candidate outcome", "base detail",
        "candidate detail")]))
    caption = (f"{len(rows)} case(s): {len(fixed)} fixed, {len(broken)} broken, {len(moved)} "
               "moved into or out of neither/null (not flips), the rest unchanged")
    return el("section", el("h2", "Flip table"),
              el("div", el("table", el("caption", caption), head, el("tbody", body),
                           id="flip-table", data_sortable=True, data_filterable=True,
                           data_filter_word="change"),
                 class_="scroll"), id="flips")


def write_compare_page(doc: Mapping[str, Any], out_dir: str | Path,
                       base_runs: Sequence[str | Path], candidate_runs: Sequence[str | Path]
                       ) -> ComparePage:
    """Write `compare.html` into the comparison's --out folder (created when missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base_pages, candidate_pages = page_links(base_runs, out), page_links(candidate_runs, out)
    own = {url: frozenset(case_pages_in(Path(run))) for run, (_, url) in
           zip([*base_runs, *candidate_runs], [*base_pages, *candidate_pages], strict=True)
           if Path(run).is_dir()}
    text = render_compare_page(doc, base_pages=base_pages, candidate_pages=candidate_pages,
                               case_pages=own)
    target = out / COMPARE_FILE
    write_atomic(target, text)
    return ComparePage(path=str(target), bytes=len(text.encode("utf-8")),
                       verdict=str(doc.get("verdict") or ""), cases=len(doc.get("cases") or []))


def render_text(result: ComparePage) -> str:
    """report.py --compare's text output: where the page is, and the verdict line."""
    return f"wrote {result.path} ({result.bytes // 1024} KB, {result.cases} cases)\n{result.verdict}"


def write_comparison_pages(result: Comparison, out_dir: str | Path,
                           base_runs: Sequence[Path], candidate_runs: Sequence[Path],
                           write_outputs: Callable[[Path], Any]) -> ComparePage:
    """compare.html for a comparison, after writing the outputs of any arm's run that has no
    page yet (the flip table links into them): `write_outputs(run_dir)` is the run outputs'
    one owner (workflow/outputs.py), which writes the page with RESULTS.md and summary.json."""
    for run in [*base_runs, *candidate_runs]:
        if not (Path(run) / PAGE_FILE).is_file():
            write_outputs(run)
    written = write_compare_page(result.to_json(), out_dir, base_runs, candidate_runs)
    return ComparePage(path=written.path, bytes=written.bytes, verdict=written.verdict,
                       cases=written.cases, comparable=result.comparable)


def compare_report(base: Sequence[Path], candidate: Sequence[Path], *, set_dir: Path,
                   out_dir: Path, write_outputs: Callable[[Path], Any],
                   targets: Sequence[str] | None = None, band: Path | None = None,
                   allow_different_judge: bool = False, only_common_cases: bool = False
                   ) -> ComparePage:
    """report.py --compare: compare the arms as compare_runs.py does (COMPARE.md and
    compare.json land in `out_dir` too), then write each run's page and compare.html."""
    result = compare_runs(base, candidate, set_dir, targets=targets or (), band_path=band,
                          out_dir=out_dir, allow_different_judge=allow_different_judge,
                          only_common_cases=only_common_cases)
    return write_comparison_pages(result, out_dir, base, candidate, write_outputs)
