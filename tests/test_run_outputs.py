"""The one owner of a run's outputs (workflow/outputs.py), and pages and lines that are evidence.

Each test is a trip a new user took (issue 25): a settled verdict the page did not show, a promoted
golden RESULTS.md did not mention, a wrong --set that overwrote the page, a malformed coverage
report found only after the judge was paid, control characters from outside driving the terminal,
numbers cut to six digits on the page, a comparison page that did not name its arms.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from browser_support import screenshot, visit
from judge_support import CASES, make_run, make_set, write_prediction
from malloy_evals.core import cli, terminal
from malloy_evals.core.errors import EXIT_UNMEASURED, InputError
from malloy_evals.report import figures
from malloy_evals.report.compare_page import render_compare_page
from malloy_evals.workflow import review
from malloy_evals.workflow.outputs import RunOutputs
from script_support import run_outcome
from tie_support import tied

KIT = Path(__file__).resolve().parents[1]
SCRIPTS = KIT / "skills" / "eval-answer" / "scripts"
SCORE_RUN = SCRIPTS / "score_run.py"
REPORT = SCRIPTS / "report.py"
PROMOTE = SCRIPTS / "promote_golden.py"
REVIEW = KIT / "skills" / "eval-judge" / "scripts" / "review.py"
DIAGNOSE = KIT / "skills" / "eval-diagnose" / "scripts" / "diagnose.py"
OUTPUTS = ("RESULTS.md", "summary.json", "report.html")

# A share and a count with more digits than six significant ones: the page must keep them all.
SHARE, COUNT = 0.123456789012345, 12345678901234567
UNANSWERED = {"qid": "q_unans", "question": "How many staff work weekends?", "goldenRevision": 1,
              "golden": {"status": "provisional", "kind": "unanswerable",
                         "rubric": "REQUIRED: the model holds no staff data."}}
EXACT = {"qid": "q_exact", "question": "Share of members, and orders?", "goldenRevision": 1,
         "golden": {"status": "verified", "kind": "rows",
                    "value": [{"share": SHARE, "orders": COUNT}],
                    "rubric": "PREFERRED: the share and the count."}}


def score(qid: str, verdict: str | None, **kw) -> dict:
    return {"kind": "score", "qid": qid, "sample": None, "verdict": verdict, "judge_version": 2,
            "golden_revision": 1, "why": f"the judge on {qid}", "confidence": 8, **kw}


@pytest.fixture
def scored(tmp_path):
    """The tiny set plus two cases, and a run with a live score for every attempt."""
    set_dir = make_set(tmp_path, [*CASES, UNANSWERED, EXACT])
    run = make_run(tmp_path, set_dir, [
        {"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
         "final_query": "run: order_items -> { aggregate: revenue }",
         "contamination_reasons": [{"rule": "read-protected", "tool_use_index": 2,
                                    "tool": "Bash", "needle": "evals/"}]},
        {"qid": "q_unans", "answer_text": "The model has no staff data."},
        {"qid": "q_exact", "answer_text": "12.3% of members; 12345678901234567 orders."}])
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    write_prediction(run, "q_exact", None, f"share,orders\n{SHARE!r},{COUNT}\n")
    run.append([tied(run.dir, e) for e in (
        score("q_rev", "needs_human", judge_verdict="no_match", confidence=4,
              golden_revision=2, column_pairing={"revenue": "total"},
              prediction_path="artifacts/q_rev/_/prediction.csv"),
        score("q_unans", "match"), score("q_exact", "match"))])
    return run, set_dir


def outputs_of(run, set_dir) -> RunOutputs:
    return RunOutputs.load(Path(run.dir), Path(set_dir))


def headlines(run_dir: Path) -> tuple[str, str, str]:
    """The headline of RESULTS.md, summary.json and report.html, in that order."""
    md = re.search(r"^\*\*(.+)\*\*$", (run_dir / "RESULTS.md").read_text(), re.MULTILINE)
    page = re.search(r'id="headline" data-status="[a-z]+">([^<]*)</p>',
                     (run_dir / "report.html").read_text())
    assert md and page
    return (md.group(1), json.loads((run_dir / "summary.json").read_text())["headline"],
            html.unescape(page.group(1)))


def other_set(tmp_path: Path, set_dir: Path) -> Path:
    """A copy of the set under another name: a run made on `tiny` is not a run of it."""
    other = tmp_path / "other"
    shutil.copytree(set_dir, other)
    doc = json.loads((other / "set.json").read_text())
    (other / "set.json").write_text(json.dumps({**doc, "name": "other"}))
    return other


# --- settle, then every output says the same ------------------------------------------------


def test_settle_then_page_results_and_summary_say_the_same(scored):
    run, set_dir = scored
    result = review.settle(outputs_of(run, set_dir), "q_rev", verdict="no_match",
                           why="counts pending orders", by="Dana Reyes")
    md, js, page = headlines(run.dir)
    assert md == js == page == result.headline
    assert result.report_html == str(run.dir / "report.html")
    html = (run.dir / "report.html").read_text()
    section = html[html.index('id="attempt-q_rev"'):]
    section = section[:section.index("</details>")]
    # The person's verdict inside the attempt (who, when, why) and in its badge.
    assert "Settled by a person" in section and "counts pending orders" in section
    assert "Dana Reyes" in section and re.search(r"\d{4}-\d{2}-\d{2}", section)
    assert "no_match (settled by Dana Reyes)" in section
    undone = review.unsettle(outputs_of(run, set_dir), "q_rev", why="wrong case")
    assert headlines(run.dir) == (undone.headline,) * 3
    assert "Settled by a person" not in (run.dir / "report.html").read_text()


# --- a promoted golden makes the old score stale, on every page ----------------------------


def test_promote_with_run_rewrites_results_and_counts_the_old_score_stale(scored):
    run, set_dir = scored
    outputs_of(run, set_dir).write()
    assert json.loads((run.dir / "summary.json").read_text())["status"] == "complete"
    done = run_outcome(PROMOTE, ["--set", str(set_dir), "--qid", "q_unans", "--attest", "--by",
                                 "Dana Reyes", "--run", str(run.dir)])
    assert done.code == 0, done.err
    summary = json.loads((run.dir / "summary.json").read_text())
    assert (summary["status"], summary["stale"], summary["pass_rate"]) == (
        "partial", ["q_unans"], None)
    md, js, page = headlines(run.dir)
    assert md == js == page and md.startswith("PARTIAL: 0 unscored, 1 stale (judged against an "
                                              "older golden: q_unans); no pass rate")
    results = (run.dir / "RESULTS.md").read_text()
    assert "| q_unans | stale (was match) |" in results
    assert "score_run.py --run" in summary["partial"]["command"]
    assert summary["partial"]["command"] in results and summary["partial"]["command"] in done.err
    assert "stale (was match; judged against an older golden)" in (
        run.dir / "report.html").read_text()


def test_promote_with_a_run_of_another_set_changes_nothing(scored, tmp_path):
    run, set_dir = scored
    other = other_set(tmp_path, set_dir)
    before = (other / "cases.jsonl").read_bytes()
    done = run_outcome(PROMOTE, ["--set", str(other), "--qid", "q_unans", "--attest", "--by",
                                 "Dana", "--run", str(run.dir)])
    assert done.code == EXIT_UNMEASURED
    assert "made on set tiny, not on set other" in done.err
    assert (other / "cases.jsonl").read_bytes() == before


# --- a run is refused with a set it was not made on, before anything is written ------------


@pytest.mark.parametrize("script,extra", [
    (SCORE_RUN, ["--judge", "replay", "--local"]),
    (REPORT, []),
    (REVIEW, []),
    (REVIEW, ["--settle", "q_rev", "--verdict", "match", "--why", "w", "--by", "Dana"]),
    (DIAGNOSE, ["--diagnoser", "replay"]),
], ids=["score_run", "report", "review", "review-settle", "diagnose"])
def test_wrong_set_is_refused_naming_both_and_nothing_is_overwritten(scored, tmp_path, script,
                                                                      extra):
    run, set_dir = scored
    outputs_of(run, set_dir).write()
    other = other_set(tmp_path, set_dir)
    kept = {name: (run.dir / name).read_bytes() for name in (*OUTPUTS, "events.jsonl", "run.json")}
    done = run_outcome(script, ["--run", str(run.dir), "--set", str(other), *extra])
    assert done.code == EXIT_UNMEASURED, done.err
    assert "was made on set tiny, not on set other" in done.err
    assert {name: (run.dir / name).read_bytes() for name in kept} == kept


# --- a malformed coverage report is refused before any judge call ---------------------------


@pytest.mark.parametrize("report", [
    {"coverage": 0.5, "cases": 3, "decided": 2, "modelled": 1},      # no per-case detail
    {"cases_detail": [{"qid": "q_rev", "verdict": "MODELLED"}]},       # no figures
    {"cases_detail": "every case", "coverage": 2},                     # wrong types
], ids=["figures-only", "detail-only", "wrong-types"])
def test_malformed_coverage_is_refused_before_any_judge_request(scored, tmp_path, report):
    run, set_dir = scored
    bad = tmp_path / "coverage.json"
    bad.write_text(json.dumps(report))
    ledger = (run.dir / "events.jsonl").read_bytes()
    judged = sorted(run.dir.glob("artifacts/*/*/judge*/**/*"))  # the fixture's tied scores
    done = run_outcome(SCORE_RUN, ["--run", str(run.dir), "--set", str(set_dir), "--judge",
                                   "host", "--emit", "--local", "--rescore", "--coverage",
                                   str(bad)])
    assert done.code == EXIT_UNMEASURED
    assert f"{bad}" in done.err and "not a check_coverage report" in done.err
    # No request emitted (nothing spent): the judge folders hold only what the fixture wrote.
    assert sorted(run.dir.glob("artifacts/*/*/judge*/**/*")) == judged
    assert (run.dir / "events.jsonl").read_bytes() == ledger
    assert not (run.dir / "summary.json").exists()


def test_the_coverage_report_has_one_loader():
    assert not hasattr(figures, "load_coverage_report")


# --- the terminal shows control characters from outside escaped -----------------------------


HOSTILE = "\x1b]0;owned\x07\x1b[31mred\rover\x9b2J\u202eevil"


def test_safe_escapes_esc_bel_cr_osc_c1_and_bidi_but_keeps_lines():
    shown = terminal.safe(f"a\t{HOSTILE}\nb")
    assert shown == ("a\t\\u001b]0;owned\\u0007\\u001b[31mred\\u000dover\\u009b2J\\u202eevil\nb")


def _captured(main) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            pytest.raises(SystemExit) as ended:
        cli.run(main, [])
    return int(ended.value.code or 0), out.getvalue(), err.getvalue()


def test_every_printed_surface_of_cli_run_escapes_outside_text():
    def main(argv):
        cli.emit({"why": HOSTILE}, as_json=False, render=lambda r: f"card: {r['why']}")
        cli.progress(f"progress {HOSTILE}")
        print(f"plain {HOSTILE}")
        raise InputError(Path(f"file{HOSTILE}.json"), 3, f"bad value {HOSTILE}")

    code, out, err = _captured(main)
    assert code == EXIT_UNMEASURED
    for text in (out, err):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", text), repr(text)
    assert "card: \\u001b]0;owned\\u0007" in out and "plain \\u001b" in out
    assert "progress \\u001b]0;owned" in err
    assert re.search(r"error: file\\u001b.*\.json:3: bad value \\u001b", err)


def test_a_json_document_stays_the_same_value_with_controls_escaped():
    code, out, _ = _captured(lambda argv: cli.emit({"why": HOSTILE}, as_json=True) or 0)
    assert code == 0 and "\x9b" not in out and "\u202e" not in out
    assert json.loads(out) == {"why": HOSTILE}


def test_review_card_shows_a_hostile_question_and_answer_escaped(tmp_path):
    cases = [{**CASES[0], "question": f"Revenue? {HOSTILE}"}]
    set_dir = make_set(tmp_path, cases)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": f"1234.5 {HOSTILE}"}])
    run.append([tied(run.dir, score("q_rev", "needs_human", golden_revision=2,
                                    why=f"unsure {HOSTILE}"))])
    done = run_outcome(REVIEW, ["--run", str(run.dir), "--set", str(set_dir)])
    assert done.code == 0, done.err
    assert "\x1b" not in done.out and "\x07" not in done.out and "\r" not in done.out
    assert "Revenue? \\u001b]0;owned\\u0007" in done.out
    assert "unsure \\u001b]0;owned" in done.out


def test_an_unknown_qid_suggests_the_nearest():
    with pytest.raises(InputError, match="names qids not in the set: bk_total_revenu; nearest: "
                                         "bk_total_revenue"):
        cli.check_known(["bk_total_revenu"], ["bk_total_revenue", "bk_orders"], where=None)


# --- the page is evidence -------------------------------------------------------------------


def test_page_shows_reasons_as_words_the_pairing_arrow_and_a_why_column(scored):
    run, set_dir = scored
    page = outputs_of(run, set_dir).write().page
    text = Path(page.path).read_text()
    assert "rule read-protected at tool use 3 (Bash): evals/" in text
    assert "{&#x27;rule" not in text and "{'rule" not in text and "'needle'" not in text
    assert "column pairing (golden → answer)" in text
    assert re.search(r"<code>revenue</code> → <code>total</code>", text)
    header = text[text.index('id="cases-table"'):]
    assert "<th scope=\"col\">why</th>" in header[:header.index("</thead>")]
    assert "the judge on q_exact" in header


def test_page_shows_numbers_exactly_as_the_engine_returned_them(scored, browser, tmp_path):
    run, set_dir = scored
    page = outputs_of(run, set_dir).write().page
    v = visit(browser, Path(page.path), fragment="attempt-q_exact")
    try:
        v.page.evaluate("document.getElementById('attempt-q_exact').open = true")
        body = v.page.locator("#attempt-q_exact").inner_text()
        plain = body.replace("\u2009", "")
        # The golden's rows (from cases.jsonl) and the re-executed rows (from the CSV), whole.
        assert plain.count(repr(SHARE)) == 2, body
        assert plain.count(str(COUNT)) >= 2, body
        assert "0.123457" not in body and "1.23457e+16" not in body
        v.page.set_viewport_size({"width": 390, "height": 844})
        screenshot(v, "exact-numbers-390")
        # At 390 px the attempt id and the cases table stay readable: nothing wider than the
        # screen but the table's own scroll box.
        wide = v.page.evaluate("""() => [...document.querySelectorAll('h1, h3, .headline, p')]
            .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
            .map(e => e.textContent.slice(0, 40))""")
        assert wide == []
        assert v.page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        v.close()


def test_comparison_page_names_both_arms_their_pins_and_the_set_in_words():
    arm = {"runs": [{"run_id": "base-1", "answerer_model": "claude-x", "model_sha": "ab" * 32}],
           "pins": {"judge_model": ["hand-authored"], "judge_version": [3],
                    "rubric_sha": ["r1"], "judge_prompt_sha": ["p1"]},
           "attempts": 14, "scored": 14}
    cand = {**arm, "runs": [{"run_id": "cand-1", "answerer_model": "claude-y",
                             "model_sha": "cd" * 32}]}
    doc = {"verdict": "no detectable difference: +7.1 points", "comparable": True,
           "set": "bookshop", "arms": {"base": arm, "candidate": cand},
           "base_pass_rate": 0.642857, "candidate_pass_rate": 0.714286, "delta_points": 7.1429,
           "delta_ci": [-14.2857, 28.5714], "bootstrap_seed": 20240601,
           "bootstrap_resamples": 10000, "mcnemar_p": 1.0, "cases_compared": 14,
           "band": {"file": "runs/band.json", "max_flips": 3, "mean_flips": 3, "cases": 14,
                    "pairs": 1, "runs": ["baseline", "baseline-2"], "measured_at": "2026-01-01"},
           "beyond_band": False, "fixed": [], "broken": [], "moved": [], "cases": []}
    html = render_compare_page(doc)
    assert "cand-1 (candidate) against base-1 (base) on set bookshop" in html
    for word in ("claude-x", "claude-y", "ab" * 32, "hand-authored", "JUDGE_VERSION 3",
                 "rubric sha r1", "judge prompt sha p1", "Set bookshop"):
        assert word in html, word
    assert ("at most 3 flip(s) (mean 3) between runs of the same arm over 1 pair(s) (baseline, "
            "baseline-2), on 14 case(s)") in html
    assert "McNemar" in html and "p=1.00" in html and "10000 paired resamples, seed 20240601" in html
    for raw in ("max_flips", "mean_flips", "measured_at", "bootstrap_seed", "mcnemar_p"):
        assert raw not in html, raw


# --- messages that say what to do next ------------------------------------------------------


def test_new_run_prints_the_command_that_answers_it(tmp_path):
    done = run_outcome(SCRIPTS / "new_run.py", ["--set", str(KIT / "evals" / "bookshop"),
                                                "--out", str(tmp_path / "r"),
                                                "--answerer-model", "m"])
    assert done.code == 0, done.err
    assert "run_answers.py --run" in done.out and "--answerer <answerer>" in done.out
    assert "record_attempt.py --run" in done.out


def test_an_empty_run_says_how_to_record_or_answer_and_is_not_complete(tmp_path):
    s = figures.summarize_events({"runId": "r"}, [], run_dir="runs/r", set_dir="evals/bookshop")
    assert (s.status, s.pass_rate, s.exit_code) == ("partial", None, EXIT_UNMEASURED)
    assert s.headline.startswith("PARTIAL: no attempt recorded yet; no pass rate")
    assert "record_attempt.py --run runs/r" in s.headline
    assert s.partial is not None and "run_answers.py --run runs/r" in s.partial.command


def test_replay_without_recordings_says_so_once_naming_host_and_hand(scored):
    from malloy_evals.llm.base import RecordingMissing
    from malloy_evals.workflow import run_scorer as rs

    run, set_dir = scored
    lines: list[str] = []

    def no_recording(run_, es, qid, sample):
        raise RecordingMissing(f"replay/{qid}.json: no recording for {qid}; re-record it")

    outcomes = rs.score_attempts(run, outputs_of(run, set_dir).eval_set, no_recording, {},
                                 rescore=True, progress=lines.append)
    assert [o.action for o in outcomes] == ["failed"] * 3
    assert len(lines) == 1, lines
    assert lines[0].startswith("3 of 3 attempt(s) have no recorded judge reply (first: replay/")
    assert "--judge host --emit" in lines[0] and "--judge hand:FILE" in lines[0]


def test_an_anthropic_judge_without_a_key_fails_before_any_re_execution(scored, monkeypatch):
    from malloy_evals.core.errors import UnmeasuredError
    from malloy_evals.llm.anthropic import AnthropicProvider
    from malloy_evals.workflow import run_scorer as rs

    run, set_dir = scored
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)

    def no_endpoint(*args, **kwargs):
        raise AssertionError("the endpoint was opened: re-execution started without a key")

    monkeypatch.setattr(rs, "open_endpoint", no_endpoint)
    with pytest.raises(UnmeasuredError, match="needs ANTHROPIC_API_KEY"):
        rs.score_run(outputs_of(run, set_dir), judge=AnthropicProvider("claude-sonnet-4-5"),
                     local=True)


def test_the_relative_path_hint_keeps_the_virtual_environments_path(tmp_path):
    from malloy_evals.answer.harness.command import check_template
    from malloy_evals.core.errors import UsageError

    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    with pytest.raises(UsageError) as refused:
        check_template(".venv/bin/python agent.py {question_file}", tmp_path)
    assert f"write it as {tmp_path / '.venv' / 'bin' / 'python'}" in str(refused.value)


def test_a_missing_package_in_the_answerer_is_named_not_called_an_unreachable_server(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"malloy": {"type": "http",
                                                            "url": "http://127.0.0.1:9/mcp"}}}))
    question = tmp_path / "q.txt"
    question.write_text("How many orders?")
    # -S: an interpreter without site-packages, as a system python without the kit's packages.
    done = subprocess.run([sys.executable, "-S", str(KIT / "scripts" / "scripted_answerer.py"),
                           "--mcp-config", str(config), "--question-file", str(question)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert "the Python package 'mcp' is missing in" in done.stderr
    assert "cannot reach the MCP server" not in done.stderr


def test_ctrl_c_of_run_answers_is_an_interruption_with_the_command_that_resumes(
        needs_node, tmp_path, bookshop_mcp_url):
    import signal
    import subprocess
    import sys
    import time

    from harness_support import harness_lines, new_run, scripted_cmd

    run = new_run(tmp_path, KIT / "evals" / "bookshop", "int1")
    pids = tmp_path / "pids.txt"
    child = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "run_answers.py"), "--run", str(run.dir), "--set",
         str(KIT / "evals" / "bookshop"), "--mcp-url", bookshop_mcp_url, "--only",
         "bk_total_revenue", "--timeout", "600", "--no-sandbox",  # the pid file is outside
         "--answerer-cmd", scripted_cmd("--mode hang", f"--pid-file {pids}")],
        cwd=KIT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a generous ceiling: the answerer is running, hung
        while not (pids.is_file() and pids.read_text().strip()):
            assert child.poll() is None and time.monotonic() < deadline, "the answerer never started"
            time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        _out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130
    assert "interrupted: the attempts recorded so far are kept; the same command resumes" in err
    assert "run_answers.py --run" in err and "harness failure" not in err
    lines = harness_lines(run)
    assert [t["outcome"] for t in lines if t["event"] == "try"] in ([], ["interrupted"])
    assert [t["kind"] for t in lines if t["event"] == "stop"] == ["interrupted"]
