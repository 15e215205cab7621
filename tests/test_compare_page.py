"""compare.html from a comparison's JSON document (built here by hand, in the shape compare_runs.py
prints): the verdict line word for word, the delta, the band decision, targets, and the flip table
ordered fixed, broken, moved, unchanged, each case linking into each arm's run page."""

from __future__ import annotations

import copy
import json
import runpy
import shutil
from html import escape
from pathlib import Path

import pytest
from browser_support import screenshot, visit
from malloy_evals.core.errors import EXIT_UNMEASURED
from malloy_evals.report import compare_page as cp
from malloy_evals.workflow.outputs import RunOutputs
from report_support import SAMPLE_SET

KIT = Path(__file__).resolve().parents[1]
COMPARE_RUNS = KIT / "skills" / "eval-answer" / "scripts" / "compare_runs.py"
REPORT = KIT / "skills" / "eval-answer" / "scripts" / "report.py"

VERDICT = ("candidate better: +12.5 points (95% CI +3.1 to +21.9), 2 fixed / 1 broken, "
           "McNemar p=0.63, flips 3 > A/A band 2; targets 1/2 fixed")


def _arm(outcome, verdict=None, reason=None):
    return {"outcome": outcome, "verdict": verdict, "reason": reason}


DOC = {
    "verdict": VERDICT, "comparable": True, "differences": [], "cases_compared": 5,
    "fixed": ["bk_gross_bookings", "bk_refunded_amount"], "broken": ["bk_total_revenue"],
    "moved": [{"qid": "bk_units_per_order", "base": _arm("neither", "needs_human"),
               "candidate": _arm("pass", "match")}],
    "base_pass_rate": 0.4, "candidate_pass_rate": 0.525, "delta_points": 12.5,
    "delta_ci": [3.1, 21.9], "bootstrap_seed": 1234, "mcnemar_p": 0.625,
    "band": {"max_flips": 2, "mean_flips": 1.5, "cases": 18}, "beyond_band": True,
    "targets": {"bk_refunded_amount": "fixed", "bk_channel_mix": "not fixed"},
    "cases": [
        # Deliberately out of order: the page orders them.
        {"qid": "bk_revenue_2024", "base": _arm("pass", "match"),
         "candidate": _arm("pass", "match")},
        {"qid": "bk_units_per_order", "base": _arm("neither", "needs_human"),
         "candidate": _arm("pass", "match")},
        {"qid": "bk_total_revenue", "base": _arm("pass", "match"),
         "candidate": _arm("fail", "no_match")},
        {"qid": "bk_gross_bookings", "base": _arm("fail", "no_match"),
         "candidate": _arm("pass", "match")},
        {"qid": "bk_refunded_amount", "base": _arm("fail", "no_match"),
         "candidate": _arm("pass", "match")},
        {"qid": "bk_channel_mix", "base": _arm("fail", "no_match"),
         "candidate": _arm("fail", "no_match")},
        {"qid": "bk_best_month", "base": _arm(None, reason="answerer_truncated"),
         "candidate": None},
    ],
}


@pytest.fixture
def arms(tmp_path) -> tuple[Path, Path, Path]:
    """Two arms (copies of the sample baseline run, each with its run page) and an --out folder."""
    base, candidate = tmp_path / "runs" / "base", tmp_path / "runs" / "candidate"
    for target in (base, candidate):
        shutil.copytree(SAMPLE_SET / "runs" / "baseline", target)
        RunOutputs.load(target, SAMPLE_SET).write()
    return base, candidate, tmp_path / "comparisons" / "c1"


def _render(doc: dict) -> str:
    return cp.render_compare_page(doc, base_pages=[("base", "../base/report.html")],
                                  candidate_pages=[("candidate", "../candidate/report.html")])


# ---------------------------------------------------------------------------------------------
# As a string


def test_verdict_line_and_figures_are_the_documents():
    html = _render(DOC)
    assert f'id="verdict">{escape(VERDICT)}</p>' in html
    assert "+12.5 points (95% CI +3.1 to +21.9)" in html
    # McNemar's p as the verdict line prints it (issue 25: statistics as the headline shows them).
    assert "40.0%" in html and "52.5%" in html and "1234" in html and "p=0.63" in html


def test_flip_table_orders_fixed_broken_moved_then_unchanged():
    html = _render(DOC)
    order = [line.split('data-change="')[1].split('"')[0]
             for line in html.split("<tr ")[1:] if 'data-change="' in line]
    assert order == ["fixed", "fixed", "broken", "moved", "unchanged", "unchanged", "unchanged"]


def test_without_a_band_the_page_says_it_was_never_measured():
    doc = dict(DOC, band=None, beyond_band=None)
    html = _render(doc)
    assert "Noise band not measured" in html and "measure_noise.py" in html


def test_flips_inside_the_band_are_not_called_an_improvement():
    html = _render(dict(DOC, beyond_band=False))
    assert "inside the A/A band: not an improvement by themselves" in html


def test_incomparable_arms_show_every_difference_first():
    doc = dict(DOC, comparable=False, differences=["bk_refunds: goldenRevision 2 vs 3",
                                                   "judge_version 2 vs 3"])
    html = _render(doc)
    assert html.index('id="differences"') < html.index('id="delta"')
    assert "Not comparable" in html and "bk_refunds: goldenRevision 2 vs 3" in html


@pytest.mark.parametrize("value, text", [
    pytest.param(None, "not in this arm", id="absent"),
    pytest.param("pass", "pass", id="plain-word"),
    pytest.param(_arm("fail", "no_match"), "fail (no_match)", id="with-verdict"),
    pytest.param(_arm(None, reason="contaminated"), "null (contaminated)", id="null-reason"),
    pytest.param({"outcome": "pass", "passed": 2, "samples": 3}, "pass 2/3", id="k-samples"),
    pytest.param({"outcome": "pass", "pass_fraction": 0.5}, "pass (pass fraction 0.50)",
                 id="pass-fraction"),
])
def test_an_arms_outcome_reads_as_a_person_says_it(value, text):
    assert cp.outcome_text(value) == text


def test_values_from_the_document_are_escaped():
    doc = copy.deepcopy(DOC)
    doc["verdict"] = "candidate better <script>alert(1)</script>"
    doc["cases"][0]["qid"] = "</table><img src=x>"
    html = _render(doc)
    assert "<script>alert" not in html and "<img" not in html
    assert "&lt;/table&gt;&lt;img src=x&gt;" in html


def test_links_to_each_arm_are_relative_from_the_comparisons_folder(arms):
    base, candidate, out = arms
    assert cp.page_links([base, candidate], out) == [
        ("base", "../../runs/base/report.html"), ("candidate", "../../runs/candidate/report.html")]


def test_an_arm_of_several_runs_links_each_run():
    html = cp.render_compare_page(DOC, base_pages=[("r1", "../r1/report.html"),
                                                   ("r2", "../r2/report.html")])
    assert 'href="../r1/report.html#case-bk_total_revenue">r1</a>' in html
    assert 'href="../r2/report.html#case-bk_total_revenue">r2</a>' in html


def test_a_case_with_its_own_page_beside_a_large_run_is_linked_there():
    # A run past the split (report/run_page.py SPLIT_AT) has a page per case beside report.html:
    # its cases link there; a case without one, and the other arm, link into report.html.
    html = cp.render_compare_page(
        DOC, base_pages=[("base", "../base/report.html")],
        candidate_pages=[("cand", "../cand/report.html")],
        case_pages={"../base/report.html": {"report-case-bk_total_revenue.html"}})
    assert 'href="../base/report-case-bk_total_revenue.html#case-bk_total_revenue"' in html
    assert 'href="../cand/report.html#case-bk_total_revenue"' in html
    assert 'href="../base/report.html#case-bk_gross_bookings"' in html


def test_report_compare_refuses_arms_that_compare_nothing_and_writes_no_page(arms):
    # The recorded baseline copies are unscored: an arm without scores is refused (exit 3),
    # and the refusal is written as data, never as a page of figures.
    base, candidate, out = arms
    main = runpy.run_path(str(REPORT), run_name="report")["main"]
    assert main(["--compare", "--base", str(base), "--candidate", str(candidate), "--out",
                 str(out), "--set", str(SAMPLE_SET)]) == EXIT_UNMEASURED
    doc = json.loads((out / "compare.json").read_text())
    assert doc["comparable"] is False and doc["differences"]
    page = (out / "compare.html").read_text()
    assert doc["verdict"].split(":")[0] in page


# Regression (hostile input, writes through links): compare.html planted as a link was written
# through.
def test_compare_page_replaces_a_link_planted_in_its_place(arms, tmp_path):
    base, candidate, out = arms
    out.mkdir(parents=True)
    target = tmp_path / "elsewhere.html"
    target.write_text("theirs")
    (out / "compare.html").symlink_to(target)
    page = cp.write_compare_page(DOC, out, [base], [candidate])
    assert not Path(page.path).is_symlink() and "2 fixed / 1 broken" in Path(page.path).read_text()
    assert target.read_text() == "theirs"


# ---------------------------------------------------------------------------------------------
# In the browser


def test_compare_page_in_the_browser_links_into_each_arms_case(arms, browser):
    base, candidate, out = arms
    written = cp.write_compare_page(DOC, out, [base], [candidate])
    assert (written.path, written.cases) == (str(out / "compare.html"), 7)
    v = visit(browser, Path(written.path))
    p = v.page
    assert p.locator("#verdict").inner_text() == VERDICT
    assert p.locator('[data-figure="fixed"]').inner_text() == "2"
    assert p.locator('[data-figure="broken"]').inner_text() == "1"
    assert p.locator("#band-decision").inner_text() == "the flips are beyond the A/A band"
    changes = [p.locator("#flip-table tbody tr").nth(i).get_attribute("data-change")
               for i in range(p.locator("#flip-table tbody tr").count())]
    assert changes == ["fixed", "fixed", "broken", "moved", "unchanged", "unchanged", "unchanged"]
    screenshot(v, "compare-page")
    assert v.requests == [Path(written.path).resolve().as_uri()]
    # Follow the first fixed case into the candidate arm's page: its detail opens there.
    p.locator("#flip-table tbody tr").first.locator("td").nth(5).locator("a").click()
    p.wait_for_load_state()
    assert p.url == (candidate / "report.html").resolve().as_uri() + "#case-bk_gross_bookings"
    assert p.locator("#attempt-bk_gross_bookings").evaluate("e => e.open") is True
    assert "gross bookings" in p.locator("#case-bk_gross_bookings").inner_text()
    assert all(r.startswith("file:") for r in v.requests)
    v.close()


def test_compare_runs_writes_the_comparison_page_of_scored_arms(needs_node, demo_run, browser,
                                                               tmp_path):
    # End to end: two real arms, scored by the session's demo run (score_run.py --local, the
    # candidate against model-candidate/), compared with compare_runs.py --out; open the page.
    runs = demo_run.scratch / "runs"
    out = tmp_path / "cmp"
    compare = runpy.run_path(str(COMPARE_RUNS), run_name="compare_runs")["main"]
    assert compare(["--base", str(runs / "baseline"), "--candidate", str(runs / "candidate"),
                    "--set", str(SAMPLE_SET), "--out", str(out)]) == 0
    doc = json.loads((out / "compare.json").read_text())
    v = visit(browser, out / "compare.html")
    assert v.page.locator("#verdict").inner_text() == doc["verdict"]
    assert v.page.locator('[data-figure="fixed"]').inner_text() == str(len(doc["fixed"]))
    assert v.page.locator('[data-figure="broken"]').inner_text() == str(len(doc["broken"]))
    assert v.page.locator("#flip-table tbody tr").count() == len(doc["cases"])
    assert all(r.startswith("file:") for r in v.requests)
    v.close()


def test_compare_page_reads_with_javascript_off(arms, browser):
    base, candidate, out = arms
    written = cp.write_compare_page(DOC, out, [base], [candidate])
    v = visit(browser, Path(written.path), javascript=False)
    assert v.page.locator("#verdict").inner_text() == VERDICT
    assert v.page.locator("#flip-table tbody tr").count() == len(DOC["cases"])
    assert v.page.locator("#targets-table tbody tr").count() == 2
    v.close()
