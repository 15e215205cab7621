"""report.html, read in a real browser: the demo runs' pages against their summary.json, a case's
evidence, a hostile answer that must stay text, no network request, JavaScript off, a narrow
screen, print; and the page written for an unscored run and for a 500-attempt run."""

from __future__ import annotations

import json
import re
import runpy
import shutil
from pathlib import Path

import pytest
from browser_support import screenshot, visit
from malloy_evals.core.errors import EXIT_USAGE, InputError, KitError
from malloy_evals.report import run_page
from malloy_evals.report.html import pct
from malloy_evals.workflow.outputs import RunOutputs
from report_support import HOSTILE, SAMPLE_SET, SECRET, generated_run, hostile_run

KIT = Path(__file__).resolve().parents[1]
REPORT = KIT / "skills" / "eval-answer" / "scripts" / "report.py"


def report_main(argv: list[str]) -> int:
    """report.py's main, run in-process (the script itself, as by path)."""
    return runpy.run_path(str(REPORT), run_name="report")["main"](argv)


@pytest.fixture(scope="module")
def demo(demo_run) -> dict:
    """The session's demo run (conftest.demo_run): its output, and each run's page and
    summary.json."""
    if demo_run is None:
        return {}  # each test's needs_node fixture skips (or fails under CI) with the reason
    out: dict = {"proc": demo_run.proc, "scratch": demo_run.scratch}
    for name in ("baseline", "leaky"):
        run_dir = demo_run.scratch / "runs" / name
        out[name] = {"page": run_dir / "report.html",
                     "summary": json.loads((run_dir / "summary.json").read_text())}
    return out


@pytest.fixture
def unscored(tmp_path) -> Path:
    """The sample set's recorded baseline run, copied and never scored."""
    target = tmp_path / "baseline"
    shutil.copytree(SAMPLE_SET / "runs" / "baseline", target)
    return target


def _text(v, selector: str) -> str:
    return v.page.locator(selector).inner_text().strip()


# ---------------------------------------------------------------------------------------------
# The demo runs' pages


def test_demo_writes_a_page_per_run_and_prints_each_path(needs_node, demo):
    assert demo["proc"].returncode == 0, demo["proc"].stdout[-2000:] + demo["proc"].stderr[-2000:]
    for name in ("baseline", "leaky"):
        assert f"page: {demo[name]['page']}" in demo["proc"].stdout
        assert demo[name]["page"].is_file()


def test_baseline_headline_and_counts_in_the_page_are_summary_jsons(needs_node, demo, browser):
    summary = demo["baseline"]["summary"]
    v = visit(browser, demo["baseline"]["page"])
    assert _text(v, "#headline") == summary["headline"]
    counts = {k: int(_text(v, f'[data-count="{k}"]')) for k in summary["verdicts"]}
    assert counts == summary["verdicts"]
    assert int(_text(v, '[data-count="attempts"]')) == summary["attempts"]
    assert int(_text(v, '[data-count="scored"]')) == summary["scored"]
    assert _text(v, '[data-figure="mean_recall"]') == pct(summary["retrieval"]["mean_recall"])
    assert _text(v, '[data-figure="coverage"]') == pct(summary["coverage"]["coverage"])
    v.close()


def test_baseline_case_table_has_each_attempt_with_the_summarys_verdict(needs_node, demo,
                                                                       browser):
    summary = demo["baseline"]["summary"]
    v = visit(browser, demo["baseline"]["page"])
    rows = v.page.locator("#cases-table tbody tr")
    assert rows.count() == len(summary["cases"])
    shown = {}
    for i in range(rows.count()):
        cells = rows.nth(i).locator("td")
        shown[cells.nth(0).inner_text().strip()] = cells.nth(1).inner_text().strip()
    expected = {c["qid"]: c["verdict"] or f"null ({c['reason']})" for c in summary["cases"]}
    assert shown == expected
    v.close()


def test_baseline_cascade_table_is_summary_jsons_cascade(needs_node, demo, browser):
    cascade = demo["baseline"]["summary"]["cascade"]
    v = visit(browser, demo["baseline"]["page"])
    cells = {r: int(_text(v, f'#cascade-table [data-rung="{r}"]')) for r in cascade["rungs"]}
    assert cells == cascade["rungs"]
    assert v.page.locator("#cascade svg rect").count() >= 1
    v.close()


def test_baseline_diagnosis_names_each_owner_in_the_case_table(needs_node, demo, browser):
    v = visit(browser, demo["baseline"]["page"])
    owners = {}
    rows = v.page.locator("#cases-table tbody tr")
    for i in range(rows.count()):
        cells = rows.nth(i).locator("td")
        owners[cells.nth(0).inner_text().strip()] = cells.nth(3).inner_text().strip()
    assert owners["bk_refunded_amount"] == "model"
    assert owners["bk_gross_bookings"] == "agent-skill"
    assert owners["bk_total_revenue"] == ""
    assert v.page.locator("#issues-table tbody tr").count() == 5
    v.close()


def test_leaky_page_is_incomplete_with_its_reasons_and_repair_commands(needs_node, demo,
                                                                      browser):
    summary = demo["leaky"]["summary"]
    v = visit(browser, demo["leaky"]["page"])
    assert _text(v, "#headline") == summary["headline"]
    assert v.page.locator("#headline").get_attribute("data-status") == "incomplete"
    box = _text(v, "#incomplete")
    for label in summary["incomplete"]["truncated"] + summary["incomplete"]["contaminated"]:
        assert label in box
    commands = _text(v, "#incomplete pre").splitlines()
    assert len(commands) == len(summary["incomplete"]["commands"])
    assert all(c.startswith(".venv/bin/python skills/eval-answer/scripts/") for c in commands)
    assert commands[-1].endswith("--rescore")
    v.close()


def test_opening_a_case_from_the_table_shows_its_evidence(needs_node, demo, browser):
    case = next(c for c in demo["baseline"]["summary"]["cases"] if c["qid"] == "bk_avg_price_paid")
    v = visit(browser, demo["baseline"]["page"])
    section = v.page.locator("#attempt-bk_avg_price_paid")
    assert section.evaluate("e => e.open") is False
    v.page.click('#cases-table a[href="#attempt-bk_avg_price_paid"]')
    # The page opens the section on `hashchange`, an event that follows the click: wait for it
    # (a section that never opens fails here after the timeout).
    v.page.wait_for_function("document.getElementById('attempt-bk_avg_price_paid').open",
                             timeout=10_000)
    assert section.evaluate("e => e.open") is True
    text = section.inner_text()
    assert "What's the average price customers actually pay for a single copy?" in text
    assert '"avg_price_paid": 16.48' in text            # the golden value
    assert "books.list_price.avg()" in text             # must not use, and the veto's hit
    assert case["why"] in text                          # the judge's why, word for word
    # The re-executed rows, every digit the engine returned (never cut to six).
    assert "16.47597174424941" in section.locator("table.data").inner_text()
    assert "get_context" in text and "execute_query" in text
    screenshot(v, "baseline-case-bk_avg_price_paid")
    v.close()


@pytest.mark.parametrize("name", ["baseline", "leaky"])
def test_demo_page_makes_no_request_and_logs_no_error(needs_node, demo, browser, name):
    v = visit(browser, demo[name]["page"])
    v.page.click("#cases-table tbody tr a")  # open a section: nothing is fetched then either
    v.page.wait_for_timeout(200)
    assert v.requests == [demo[name]["page"].resolve().as_uri()]
    # A blocked script or style (the page's policy) would show here as an error.
    assert (v.console_errors, v.page_errors) == ([], [])
    v.close()


@pytest.mark.parametrize("name", ["baseline", "leaky"])
def test_demo_page_screenshot_is_kept(needs_node, demo, browser, name):
    v = visit(browser, demo[name]["page"])
    shot = screenshot(v, f"{name}-page")
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    v.close()


def test_page_reads_fully_with_javascript_off(needs_node, demo, browser):
    summary = demo["baseline"]["summary"]
    v = visit(browser, demo["baseline"]["page"], javascript=False)
    assert _text(v, "#headline") == summary["headline"]
    assert v.page.locator("#cases-table tbody tr").count() == len(summary["cases"])
    assert v.page.locator(".controls").count() == 0   # no dead filter box without its script
    assert v.page.locator("svg.chart").count() == 2
    section = v.page.locator("#attempt-bk_gross_bookings")
    section.locator("summary").click()                # details open natively, no script
    assert section.evaluate("e => e.open") is True
    assert "gross bookings" in section.inner_text()
    v.close()


def test_filtering_by_verdict_leaves_only_those_rows(needs_node, demo, browser):
    summary = demo["baseline"]["summary"]
    v = visit(browser, demo["baseline"]["page"])
    v.page.select_option("#cases .controls select", "no_match")
    visible = v.page.locator("#cases-table tbody tr:not(.hidden)")
    assert visible.count() == summary["verdicts"]["no_match"]
    assert _text(v, "#cases .controls output") == (
        f"{summary['verdicts']['no_match']} of {summary['attempts']} shown")
    v.page.select_option("#cases .controls select", "")
    v.page.fill("#cases .controls input", "refunded")
    assert v.page.locator("#cases-table tbody tr:not(.hidden)").count() == 1
    v.close()


def test_sorting_by_confidence_puts_the_unsure_verdict_first(needs_node, demo, browser):
    v = visit(browser, demo["baseline"]["page"])
    v.page.click("#cases-table thead th:nth-child(3) button")
    first = v.page.locator("#cases-table tbody tr").first.locator("td")
    confidences = [c["confidence"] for c in demo["baseline"]["summary"]["cases"]
                   if c["confidence"] is not None]
    assert first.nth(2).inner_text().strip() == str(min(confidences))
    assert first.nth(0).inner_text().strip() == "bk_units_per_order"
    v.close()


def test_page_fits_a_narrow_phone_screen(needs_node, demo, browser):
    v = visit(browser, demo["baseline"]["page"], width=360, height=740)
    v.page.locator("#attempt-bk_top_customers summary").click()
    width = v.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 360  # wide tables scroll inside their own box, never the page
    screenshot(v, "baseline-narrow")
    v.close()


def test_printed_page_keeps_the_headline_and_every_attempt_open(needs_node, demo, browser):
    v = visit(browser, demo["baseline"]["page"])
    v.page.emulate_media(media="print")
    v.page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
    assert v.page.locator("#headline").is_visible()
    assert v.page.locator(".controls").is_hidden()
    assert v.page.locator("details.attempt:not([open])").count() == 0
    pdf = v.page.pdf()
    assert pdf[:5] == b"%PDF-"
    v.close()


# ---------------------------------------------------------------------------------------------
# A hostile answer


def test_hostile_answer_renders_as_text_and_runs_nothing(browser, tmp_path):
    run = hostile_run(tmp_path)
    page = RunOutputs.load(run.dir, SAMPLE_SET).write().page
    v = visit(browser, Path(page.path), fragment="attempt-bk_total_revenue")
    p = v.page
    assert p.evaluate("typeof window.__pwned") == "undefined"
    assert "pwned" not in p.title()
    shown = HOSTILE.replace(SECRET, "[REDACTED]")
    assert p.locator("#attempt-bk_total_revenue pre.answer").inner_text() == shown
    assert shown in p.locator("#attempt-bk_total_revenue table.data").inner_text()
    assert p.locator("script").count() == 1           # the kit's own, nothing injected
    assert p.locator("img, iframe, object, embed").count() == 0
    hrefs = p.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
    assert hrefs and not [h for h in hrefs if re.match(r"(?i)\s*[a-z][a-z0-9+.-]*:|/", h)]
    page_uri = Path(page.path).resolve().as_uri()
    assert v.requests == [page_uri]
    screenshot(v, "hostile-answer")
    # Following the links the ledger named (a transcript at `javascript:alert(1)`) stays a
    # relative file beside the page and runs nothing.
    p.click("#attempt-bk_total_revenue .facts a")
    assert p.evaluate("typeof window.__pwned") == "undefined"
    folder = Path(page.path).resolve().parent.as_uri() + "/"
    assert all(r.startswith(folder) for r in v.requests)
    v.close()


def test_hostile_page_file_holds_no_secret_and_no_live_markup(tmp_path):
    run = hostile_run(tmp_path)
    html = Path(RunOutputs.load(run.dir, SAMPLE_SET).write().page.path).read_text()
    assert SECRET not in html
    assert html.count("<script") == 1 and "<img" not in html
    assert not re.search(r'(?i)\b(?:href|src)\s*=\s*"\s*[a-z][a-z0-9+.-]*:', html)
    assert 'href="javascript%3Aalert%281%29"' in html  # the odd file name, as a relative path
    assert "&lt;script&gt;window.__pwned = 1;" in html


# ---------------------------------------------------------------------------------------------
# A run not scored yet, a run of 500 attempts, the script


def test_unscored_run_gets_a_page_that_says_so_and_shows_each_answer(unscored, browser):
    page = RunOutputs.load(unscored, SAMPLE_SET).write().page
    assert (page.exit_code, page.unscored, page.attempts) == (0, 18, 18)
    v = visit(browser, Path(page.path))
    assert _text(v, "#headline") == ("PARTIAL: 18 unscored, 0 stale; no pass rate (nothing is "
                                     "scored under current pins yet)")
    assert _text(v, "#not-scored-line") == "not scored yet: none of the 18 attempt(s) has a score"
    assert "score_run.py --run" in _text(v, "#not-scored pre")
    assert v.page.locator("details.attempt").count() == 18
    section = v.page.locator("#attempt-bk_avg_days_to_ship")
    section.locator("summary").click()
    text = section.inner_text()
    assert "date_diff is not available in Malloy" in text   # the answer
    assert "Unknown function 'date_diff'" in text          # the failed query's error
    assert "Not scored yet." in text
    v.close()


# Regression (hostile input, writes through links): report.html planted as a link to a file
# elsewhere was written through.
def test_page_replaces_a_link_planted_in_its_place(unscored, tmp_path):
    target = tmp_path / "elsewhere.html"
    target.write_text("theirs")
    (unscored / "report.html").symlink_to(target)
    page = RunOutputs.load(unscored, SAMPLE_SET).write().page
    assert not Path(page.path).is_symlink() and "<!doctype html>" in Path(page.path).read_text().lower()
    assert target.read_text() == "theirs"


def test_run_inside_its_set_finds_the_set_without_set_flag():
    assert run_page.find_set(SAMPLE_SET / "runs" / "baseline", "bookshop") == SAMPLE_SET.resolve()
    assert run_page.find_set(SAMPLE_SET / "runs" / "baseline", "another-set") is None


def test_a_run_without_a_set_is_refused_and_no_page_is_written(unscored):
    # Issue 25: a page written without the set could not say which scores are stale, nor take a
    # verified_wrong golden out; its figures would differ from score_run's. It is refused.
    with pytest.raises(InputError, match="no set given and none found around the run"):
        RunOutputs.load(unscored, None)   # a copy outside any set: nothing to find
    assert not (unscored / "report.html").exists()


def test_page_of_a_500_attempt_run_stays_under_2_mb(tmp_path):
    run = generated_run(tmp_path, 500)
    page = RunOutputs.load(run.dir, SAMPLE_SET).write().page
    assert page.attempts == 500
    assert page.bytes == len(Path(page.path).read_bytes()) < 2_000_000
    html = Path(page.path).read_text()
    assert html.count('class="attempt"') == 500   # every attempt keeps its section
    assert re.search(r"\d+ of 500 are drawn shorter", html)


def test_report_script_writes_the_page_and_prints_one_json_document(unscored, capsys):
    assert report_main(["--run", str(unscored), "--set", str(SAMPLE_SET), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["path"] == str(unscored / "report.html") and doc["unscored"] == 18


@pytest.mark.parametrize("argv", [
    pytest.param([], id="neither-run-nor-compare"),
    pytest.param(["--run", "no/such/folder"], id="missing-run-folder"),
    pytest.param(["--run", "RUN", "--compare"], id="run-and-compare"),
    pytest.param(["--run", "RUN", "--base", "RUN"], id="arm-flag-with-run"),
    pytest.param(["--run", "RUN", "--coverage", "no-such.json"], id="missing-coverage-file"),
    pytest.param(["--compare", "--base", "RUN"], id="compare-without-candidate-and-out"),
])
def test_report_script_wrong_command_lines_exit_2(unscored, argv):
    argv = [str(unscored) if a == "RUN" else a for a in argv]
    with pytest.raises(SystemExit) as exc:
        report_main(argv)
    assert exc.value.code == EXIT_USAGE


def test_report_script_on_a_folder_without_run_json_cannot_measure(tmp_path):
    with pytest.raises(KitError) as exc:
        report_main(["--run", str(tmp_path)])
    assert exc.value.exit_code == 3
