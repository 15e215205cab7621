"""report.html, read in a real browser: the demo runs' pages against their summary.json, a case's
evidence, a hostile answer that must stay text, no network request, JavaScript off, a narrow
screen, print; the page written for an unscored run; and past the split (SPLIT_AT attempts),
the page that keeps its table and first sections with a page per case beside it, every case
reached from it in Chromium."""

from __future__ import annotations

import json
import re
import runpy
import shutil
from pathlib import Path

import pytest
from browser_support import screenshot, visit
from malloy_evals.core.errors import EXIT_USAGE, InputError, KitError
from malloy_evals.report import attempt_section as attempt_section_module
from malloy_evals.report import details, run_page
from malloy_evals.report.attempt_section import (
    LEVELS,
    attempt_section,
    attempt_sections,
    choose_levels,
    first_of_cases,
)
from malloy_evals.report.html import anchor_id, case_anchor, pct
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


# ---------------------------------------------------------------------------------------------
# Pages that stay linear (issue 30): past SPLIT_AT attempts report.html keeps the table and the
# first sections, and each case has its own page beside it


@pytest.fixture(scope="module")
def split_run(tmp_path_factory) -> dict:
    """A run just past the split, answered unsealed (its headline leads with UNSEALED), with its
    outputs written by their owner."""
    root = tmp_path_factory.mktemp("split")
    run = generated_run(root, run_page.SPLIT_AT + 41)
    run.update_info(sandbox="none")
    # A diagnosis of the table's last case, whose attempts are far past the first sections.
    last = RunOutputs.load(run.dir, SAMPLE_SET).summary().cases[-1].qid
    run.append([{"kind": "issue", "issue_id": "cluster-1", "qids": [last],
                 "primary_code": "WRONG-FIELD", "component": "construction",
                 "owner": "agent-skill", "diagnosis": "picked the wrong revenue"}])
    written = RunOutputs.load(run.dir, SAMPLE_SET).write()
    return {"run": run, "written": written, "page": Path(written.page.path), "diagnosed": last,
            "summary": json.loads((run.dir / "summary.json").read_text())}


def _hrefs(v, selector: str) -> list[str]:
    return v.page.eval_on_selector_all(selector, "els => els.map(e => e.getAttribute('href'))")


def test_past_the_split_every_attempt_is_reachable_from_the_page_in_chromium(split_run, browser):
    page, summary = split_run["page"], split_run["summary"]
    folder = page.parent
    expected = {anchor_id(c["qid"], c["sample"]) for c in summary["cases"]}
    v = visit(browser, page)
    links = _hrefs(v, "#cases-table tbody tr td:first-child a")
    assert len(links) == summary["attempts"] == len(expected)
    here = set(v.page.eval_on_selector_all("details.attempt", "els => els.map(e => e.id)"))
    assert 0 < len(here) <= run_page.INLINE_SECTIONS < summary["attempts"]
    reached, pages = set(), {}
    for href in links:
        target, _, fragment = href.partition("#")
        if not target:          # a section kept on the page itself
            assert fragment in here
            reached.add(fragment)
        else:
            pages.setdefault(target, set()).add(fragment)
    assert v.requests == [page.resolve().as_uri()]
    v.close()
    for target, fragments in pages.items():
        assert run_page.CASE_PAGE.fullmatch(target) and (folder / target).is_file()
        w = visit(browser, folder / target)
        ids = set(w.page.eval_on_selector_all("details.attempt", "els => els.map(e => e.id)"))
        assert fragments <= ids
        reached |= fragments
        # Each case page carries the run's headline word for word, and a way back.
        assert _text(w, "#headline") == summary["headline"]
        assert _hrefs(w, "nav a") == [run_page.PAGE_FILE]
        assert w.requests == [(folder / target).resolve().as_uri()]
        assert (w.console_errors, w.page_errors) == ([], [])
        w.close()
    assert reached == expected


def test_past_the_split_the_headline_and_its_unsealed_note_stay_as_the_summary_says(split_run,
                                                                                 browser):
    v = visit(browser, split_run["page"])
    assert _text(v, "#headline") == split_run["summary"]["headline"]
    assert _text(v, "#headline").startswith("UNSEALED: run ")
    v.close()


def test_following_a_row_to_its_case_page_opens_that_attempt(split_run, browser):
    page, summary = split_run["page"], split_run["summary"]
    last = summary["cases"][-1]
    anchor = anchor_id(last["qid"], last["sample"])
    v = visit(browser, page)
    row_link = v.page.locator(f'#cases-table a[href$="#{anchor}"]')
    assert row_link.get_attribute("href") == f"{run_page.case_page(last['qid'])}#{anchor}"
    row_link.click()
    v.page.wait_for_function(f"document.getElementById('{anchor}') && "
                             f"document.getElementById('{anchor}').open", timeout=20_000)
    text = v.page.locator(f"#{anchor}").inner_text()
    assert last["why"] in text                     # the judge's why, word for word
    assert "final query" in text and "get_context" in text
    v.close()


def test_a_comparison_link_to_a_case_reaches_it_past_the_split(split_run, browser):
    # compare.html links to `report.html#case-<qid>`: a case whose first attempt is only on its
    # case page keeps that anchor on its row, which links to the case page.
    page, summary = split_run["page"], split_run["summary"]
    v = visit(browser, page)
    here = set(v.page.eval_on_selector_all("details.attempt", "els => els.map(e => e.id)"))
    qids = list(dict.fromkeys(c["qid"] for c in summary["cases"]))
    for qid in qids:
        found = v.page.locator(f"#{case_anchor(qid)}")
        assert found.count() == 1
        section = found.evaluate("e => e.closest('details.attempt') && "
                                 "e.closest('details.attempt').id")
        if section:             # its first attempt's section is on the page
            assert section == anchor_id(qid, 1) in here
        else:
            assert anchor_id(qid, 1) not in here
            assert found.locator("a").get_attribute("href") == (
                f"{run_page.case_page(qid)}#{anchor_id(qid, 1)}")
    v.close()


def test_past_the_split_issue_links_cross_between_the_page_and_the_case_page(split_run, browser):
    page, qid = split_run["page"], split_run["diagnosed"]
    v = visit(browser, page)
    assert v.page.locator("#issue-cluster-1").count() == 1
    assert _hrefs(v, "#issues-table a") == [f"{run_page.case_page(qid)}#{case_anchor(qid)}"]
    v.close()
    w = visit(browser, page.parent / run_page.case_page(qid))
    assert w.page.locator(f"#{case_anchor(qid)}").count() == 1
    assert set(_hrefs(w, "details.attempt p a[href*='issue-']")) == {"report.html#issue-cluster-1"}
    w.close()


def test_past_the_split_the_owner_lists_the_case_pages_and_removes_stale_ones(split_run,
                                                                             tmp_path):
    run, written = split_run["run"], split_run["written"]
    qids = list(dict.fromkeys(c["qid"] for c in split_run["summary"]["cases"]))
    assert sorted(written.page.case_pages) == sorted(run_page.case_page(q) for q in qids)
    assert run_page.case_pages_in(run.dir) == sorted(written.page.case_pages)
    # A case page this writing does not make (a case gone since, a page planted as a link) does
    # not outlive the next writing; the link is removed, never followed.
    stale = run.dir / "report-case-bk_no_longer_here.html"
    stale.write_text("an old page")
    elsewhere = tmp_path / "theirs.html"
    elsewhere.write_text("theirs")
    (run.dir / "report-case-bk_planted.html").symlink_to(elsewhere)
    (run.dir / "report-case-a_folder.html").mkdir()   # not a page: left alone
    again = RunOutputs.load(run.dir, SAMPLE_SET).write()
    assert run_page.case_pages_in(run.dir) == sorted([*again.page.case_pages,
                                                      "report-case-a_folder.html"])
    assert not stale.exists() and elsewhere.read_text() == "theirs"
    assert not (run.dir / "report-case-bk_planted.html").is_symlink()


def test_a_case_of_many_attempts_spreads_over_pages_each_reached_from_the_table(
        monkeypatch, browser, tmp_path):
    # Small numbers stand for large ones: past 30 attempts, two attempts a case page.
    monkeypatch.setattr(run_page, "SPLIT_AT", 30)
    monkeypatch.setattr(run_page, "INLINE_SECTIONS", 5)
    monkeypatch.setattr(run_page, "CASE_PAGE_ATTEMPTS", 2)
    run = generated_run(tmp_path, 100)        # 31 cases of 3 or 4 attempts
    page = RunOutputs.load(run.dir, SAMPLE_SET).write().page
    v = visit(browser, Path(page.path))
    links = _hrefs(v, "#cases-table tbody tr td:first-child a")
    v.close()
    assert len(links) == 100
    targets: dict[str, set[str]] = {}
    for href in links:
        target, _, fragment = href.partition("#")
        targets.setdefault(target or run_page.PAGE_FILE, set()).add(fragment)
    for target, fragments in targets.items():
        text = (run.dir / target).read_text()
        assert fragments <= set(re.findall(r'<details id="([^"]+)" class="attempt"', text))
    assert set(targets) - {run_page.PAGE_FILE} <= set(page.case_pages)
    assert sorted(page.case_pages) == run_page.case_pages_in(run.dir)
    second = sorted(t for t in page.case_pages if t.endswith("~2.html"))
    assert len(page.case_pages) == 62 and len(second) == 31
    w = visit(browser, run.dir / second[0])
    assert _hrefs(w, "nav a") == [run_page.PAGE_FILE, second[0].replace("~2.html", ".html")]
    assert w.page.locator("details.attempt").count() <= 2
    w.close()


def test_a_rescore_below_the_split_leaves_no_case_page(unscored):
    (unscored / "report-case-bk_total_revenue.html").write_text("from when the run was larger")
    page = RunOutputs.load(unscored, SAMPLE_SET).write().page
    assert page.case_pages == () and run_page.case_pages_in(unscored) == []


def test_below_the_split_the_page_is_every_section_at_its_first_level(unscored):
    # Runs below the split are drawn as before: every attempt's section on the page, in the
    # summary's order, each drawn at the first level, and nothing beside the page.
    outputs = RunOutputs.load(unscored, SAMPLE_SET)
    page = outputs.write().page
    html = Path(page.path).read_text()
    s = outputs.summary()
    attempts = details.attempt_details(outputs.run, outputs.eval_set, outputs.view,
                                       [outputs.run.key(r.qid, r.sample) for r in s.cases])
    rows = {(r.qid, r.sample): r for r in s.cases}
    drawn = "".join(attempt_section(a, rows[(a.qid, a.sample)], first_of_case=f, caps=LEVELS[0])
                    for a, f in zip(attempts, first_of_cases(attempts), strict=True))
    assert html.count('class="attempt"') == page.attempts == 18
    assert drawn in html
    assert "Each attempt&#x27;s evidence: open one (or follow a link from the table).</p>" in html
    assert "report-case-" not in html and page.case_pages == ()


def test_a_section_is_drawn_once_whatever_the_budget(monkeypatch, tmp_path):
    run = generated_run(tmp_path, 40)
    outputs = RunOutputs.load(run.dir, SAMPLE_SET)
    s = outputs.summary()
    attempts = details.attempt_details(run, outputs.eval_set, outputs.view,
                                       [run.key(r.qid, r.sample) for r in s.cases])
    rows = {(r.qid, r.sample): r for r in s.cases}
    full = sum(len(h.encode()) for h in attempt_sections(attempts, rows, 10**9)[0])
    calls = []
    real = attempt_section_module.attempt_section
    monkeypatch.setattr(attempt_section_module, "attempt_section",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    budget = full * 9 // 10   # within reach: the shortest levels keep about three quarters
    sections, shortened = attempt_sections(attempts, rows, budget)
    assert len(calls) == len(sections) == len(attempts)
    assert 0 < shortened < len(attempts)
    assert sum(len(h.encode()) for h in sections) <= budget


def test_levels_go_to_the_largest_section_first_without_rescans():
    sizes = [[100, 80, 60], [500, 300, 100], [50, 40, 30], [400, 390, 380]]
    # 1050 in all: 500 drops to 300 (total 850), then 400 to 390 (840), then 390 to 380 (830).
    assert choose_levels(sizes, 1050) == [0, 0, 0, 0]
    assert choose_levels(sizes, 1049) == [0, 1, 0, 0]
    assert choose_levels(sizes, 840) == [0, 1, 0, 1]
    assert choose_levels(sizes, 830) == [0, 1, 0, 2]
    assert choose_levels(sizes, 10**6) == [0, 0, 0, 0]
    assert choose_levels(sizes, 0) == [2, 2, 2, 2]   # as short as each gets


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
