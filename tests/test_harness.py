"""run_answers end to end: the scripted answerer through the real endpoint, recorded and scored;
the claude-code path; timeouts, turn limits, harness failures, the failure stop, the budget,
resume, --redo, samples, and the usage errors decided before anything runs."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest
from fuzz_support import FUZZ, damaged_bytes, mutated_lines, reads_or_refuses
from harness_support import (
    BOOKSHOP,
    KIT,
    SCRIPTED,
    answer,
    harness_lines,
    ledger,
    make_set,
    new_run,
    run_answers_script,
    scripted_cmd,
)
from hypothesis import given
from hypothesis import strategies as st
from malloy_evals.answer.harness import claude_cli
from malloy_evals.answer.harness.command import PLACEHOLDERS
from malloy_evals.answer.harness.plan import (
    AnswererSpec,
    Budget,
    HarnessLog,
    parse_answerer,
    plan_attempts,
    run_spend,
)
from malloy_evals.core.errors import InputError, UsageError
from malloy_evals.ledger.live import live_view
from malloy_evals.llm.select import make_provider
from malloy_evals.sets.eval_set import load_set
from malloy_evals.workflow.outputs import RunOutputs
from malloy_evals.workflow.run_scorer import score_run


def attempts(run) -> list[dict]:
    return [e for e in live_view(ledger(run)) if e["kind"] == "attempt"]


def running(pid: int, wait: float = 60.0) -> bool:
    """Whether a process is alive after up to `wait` seconds (a zombie is not alive); it returns
    as soon as the process is gone, so the ceiling costs nothing when the kill worked."""
    deadline = time.monotonic() + wait
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)


def verdict(v: str) -> dict:
    return {"why": "compared the re-executed rows with the golden", "verdict": v,
            "confidence": 9, "column_pairing": {}, "gold_status": "verified", "gold_note": ""}


# ---------------------------------------------------------------- the whole loop

def test_scripted_answerer_through_the_local_endpoint_is_recorded_and_scored(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    run = new_run(tmp_path, BOOKSHOP, "loop1")
    qids = "bk_total_revenue,bk_revenue_2024,bk_profit_margin"
    code, doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--local",
                             "--only", qids, "--answerer-cmd", scripted_cmd()], capsys)
    assert code == 0, err
    assert doc["recorded"] == 3 and doc["failed"] == 0 and doc["stopped"] is None
    assert "[3/3] " in err and " submitted, 4 turns, $0.000, " in err
    by_qid = {a["qid"]: a for a in attempts(run)}
    assert by_qid["bk_total_revenue"]["final_query"] == "run: order_items -> { aggregate: revenue }"
    assert by_qid["bk_total_revenue"]["final_query_source"] == "declared"
    assert by_qid["bk_profit_margin"]["final_query"] is None  # a refusal: prose only
    assert all(a["contaminated"] is False and a["question_sha"] for a in by_qid.values())
    # The transcript says where the answerer ran: a fresh folder outside the kit.
    first = json.loads((run.dir / by_qid["bk_total_revenue"]["transcript_path"]).read_text()
                       .splitlines()[0])
    assert first["subtype"] == "init" and not first["cwd"].startswith(str(KIT))
    assert json.loads(run.info_path.read_text())["answererPromptSha"]

    replies = tmp_path / "judge.jsonl"
    replies.write_text("".join(json.dumps({"key": f"loop1.{q}._", "replies": [verdict("match")]})
                               + "\n" for q in qids.split(",")))
    judge = make_provider(f"hand:{replies}", role="judge", set_dir=BOOKSHOP)
    scored = score_run(RunOutputs.load(run.dir, BOOKSHOP), judge=judge, judge_spec=f"hand:{replies}",
                       mcp_url=bookshop_mcp_url, progress=lambda _m: None)
    verdicts = {o.qid: o.verdict for o in scored.outcomes}
    # The 2024 answer filtered by ship_date: the case's mustNotUse vetoes the judge's match.
    assert verdicts == {"bk_total_revenue": "match", "bk_revenue_2024": "no_match",
                        "bk_profit_margin": "match"}
    assert scored.summary.status == "complete"


def test_claude_code_answerer_gets_only_publisher_tools_and_the_prompt(needs_node, tmp_path, capsys,
                                                                       monkeypatch,
                                                                       bookshop_mcp_url):
    # A stand-in `claude` named by --claude: it logs the command line it got, then answers as the
    # scripted answerer would, from the question Claude Code gets after -p. (The real CLI runs in
    # test_claude_code.py; this one checks the command line alone, fast.)
    log = tmp_path / "claude-argv.json"
    fake = _fake_claude(tmp_path / "bin", "2.1.332 (Claude Code)", log)
    run = new_run(tmp_path, BOOKSHOP, "cc1")
    code, doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url",
                             bookshop_mcp_url, "--only", "bk_total_revenue", "--answerer",
                             "claude-code:claude-sonnet-4-5", "--max-turns", "12",
                             "--claude", str(fake), "--no-sandbox"],  # the stand-in logs to,
                            capsys)  # and runs from, tmp_path
    assert code == 0, err
    argv = json.loads(log.read_text())
    question = load_set(BOOKSHOP).case("bk_total_revenue").question
    assert argv[:2] == ["-p", question]
    assert sorted(argv[argv.index("--allowedTools") + 1].split(",")) == [
        "mcp__malloy__malloy_executeQuery", "mcp__malloy__malloy_getContext"]
    assert argv[argv.index("--tools") + 1] == ""  # no built-in tool at all
    assert sorted(argv[argv.index("--disallowedTools") + 1].split(",")) == [
        "mcp__malloy__malloy_getStatus", "mcp__malloy__malloy_reloadPackage"]
    assert "--strict-mcp-config" in argv and argv[argv.index("--max-turns") + 1] == "12"
    assert argv[argv.index("--model") + 1] == "claude-sonnet-4-5"
    prompt = argv[argv.index("--append-system-prompt") + 1]
    assert "`bookshop.malloy` in package `bookshop` of environment `samples`" in prompt
    assert doc["recorded"] == 1 and attempts(run)[0]["submitted"] is True
    # The version as the pin spells it, the same everywhere the run says it.
    assert json.loads(run.info_path.read_text())["claudeCodeVersion"] == "2.1.332"
    [start] = [line for line in harness_lines(run) if line["event"] == "start"]
    assert start["claude_code_version"] == "2.1.332"
    assert "claude-code: Claude Code 2.1.332 (" in err and "(Claude Code)" not in err


def _fake_claude(folder: Path, version_line: str, log: Path | None = None) -> Path:
    """A stand-in `claude`: `--version` prints `version_line`; otherwise it logs the command
    line it got (to `log`) and answers as the scripted answerer would, from the question
    Claude Code gets after -p."""
    folder.mkdir(parents=True, exist_ok=True)
    fake = folder / "claude"
    fake.write_text(f"""#!{sys.executable}
import json, os, sys
argv = sys.argv[1:]
if argv == ["--version"]:
    print({version_line!r})
    sys.exit(0)
if {str(log) if log else ""!r}:
    json.dump(argv, open({str(log) if log else ""!r}, "w"))
value = lambda flag: argv[argv.index(flag) + 1]
os.execv(sys.executable, [sys.executable, {str(SCRIPTED)!r}, "--question", value("-p"),
                          "--mcp-config", value("--mcp-config")])
""")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


@pytest.mark.parametrize("line, version", [
    pytest.param("2.1.332 (Claude Code)", "2.1.332", id="the_cli_line"),
    pytest.param("2.1.332", "2.1.332", id="the_pin"),
    pytest.param("^2.1.332", "2.1.332", id="a_range"),
    pytest.param("2.2.0-beta.1 (Claude Code)", "2.2.0-beta.1", id="a_prerelease"),
    pytest.param("Claude Code v2.1.332", "2.1.332", id="with_a_v"),
    pytest.param("build2.1.332", None, id="glued_to_a_word"),
    pytest.param("Claude Code", None, id="no_version"),
    pytest.param(None, None, id="nothing"),
])
def test_a_cli_version_is_read_one_way(line, version):
    assert claude_cli.parse_version(line) == version


def test_the_pin_is_read_as_the_cli_names_its_version():
    assert claude_cli.parse_version(claude_cli.pinned_version()) == claude_cli.pinned_version()
    assert claude_cli.same_version("2.1.332 (Claude Code)", "2.1.332")
    assert not claude_cli.same_version("2.0.77 (Claude Code)", "2.1.332")


def test_a_run_recorded_with_the_whole_version_line_is_the_same_version(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    # A run answered before the version was parsed holds the CLI's whole line: the same CLI
    # answers it again (and the run now says the version alone); another version is refused,
    # the message naming both versions as the pin spells them.
    run = new_run(tmp_path, BOOKSHOP, "cc3")
    run.update_info(claudeCodeVersion="2.1.332 (Claude Code)")
    base = ["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url", bookshop_mcp_url,
            "--only", "bk_total_revenue", "--answerer", "claude-code", "--no-sandbox"]
    same = _fake_claude(tmp_path / "same", "2.1.332 (Claude Code)")
    code, doc, err = answer([*base, "--claude", str(same)], capsys)
    assert code == 0 and doc["recorded"] == 1, err
    assert json.loads(run.info_path.read_text())["claudeCodeVersion"] == "2.1.332"
    run.update_info(claudeCodeVersion="2.1.332 (Claude Code)")
    other = _fake_claude(tmp_path / "other", "2.0.77 (Claude Code)")
    code, _doc, err = answer([*base, "--redo", "bk_total_revenue", "--claude", str(other)], capsys)
    assert code == 2
    assert f"answered by Claude Code 2.1.332; {other} is 2.0.77. One run" in err
    assert len(attempts(run)) == 1


def test_a_cli_that_names_no_version_is_not_an_answerer(tmp_path, capsys):
    run = new_run(tmp_path, BOOKSHOP, "cc4")
    mute = _fake_claude(tmp_path / "bin", "Claude Code")
    code, _doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url",
                              "http://127.0.0.1:9/mcp", "--only", "bk_total_revenue",
                              "--answerer", "claude-code", "--claude", str(mute),
                              "--no-sandbox"], capsys)
    assert code == 3 and "--version names no version: 'Claude Code'" in err
    assert ledger(run) == []


def test_a_claude_that_cannot_run_exits_3_before_answering(tmp_path, capsys):
    not_executable = tmp_path / "claude"
    not_executable.write_text("")
    run = new_run(tmp_path, BOOKSHOP, "cc2")
    base = ["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url", "http://127.0.0.1:9/mcp",
            "--only", "bk_total_revenue", "--claude", str(not_executable)]
    code, _doc, err = answer([*base, "--answerer", "claude-code"], capsys)
    assert code == 3 and "not an executable file" in err
    code, _doc, err = answer([*base, "--answerer", "anthropic:claude-haiku-4-5"], capsys)
    assert code == 2 and "--claude" in err
    assert ledger(run) == []


# ---------------------------------------------------------------- cut off: recorded truncated

def test_timeout_records_a_truncated_attempt_and_kills_the_whole_process_group(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    pids = tmp_path / "pids.txt"
    run = new_run(tmp_path, BOOKSHOP, "to1")
    code, doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url",
                             bookshop_mcp_url, "--only", "bk_total_revenue", "--timeout", "15",
                             "--no-sandbox",  # unsealed: the group kill alone must end them
                             "--answerer-cmd", scripted_cmd("--mode hang", f"--pid-file {pids}")],
                            capsys)
    assert code == 0, err
    [attempt] = attempts(run)
    assert attempt["truncated"] is True and attempt["run_error"] == "error_timeout"
    assert attempt["n_get_context"] == 1  # what it did before it hung is kept
    assert doc["outcomes"][0]["truncated"] is True and "truncated" in err
    # The answerer ignored SIGTERM and left a sleeping child: both are gone (or dead, waiting to
    # be reaped by init).
    assert not [pid for pid in map(int, pids.read_text().split()) if running(pid)]
    [try_line] = [t for t in harness_lines(run) if t["event"] == "try"]
    assert try_line["timed_out"] is True and try_line["outcome"] == "recorded"


def test_turn_limit_records_a_truncated_attempt(needs_node, tmp_path, capsys, bookshop_mcp_url):
    run = new_run(tmp_path, BOOKSHOP, "mt1")
    code, _doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url",
                              bookshop_mcp_url, "--only", "bk_total_revenue", "--max-turns", "2",
                              "--answerer-cmd", scripted_cmd()], capsys)
    assert code == 0, err
    [attempt] = attempts(run)
    assert attempt["truncated"] is True and attempt["run_error"] == "error_max_turns"


# ---------------------------------------------------------------- not an attempt: harness failures

def test_crashes_are_not_attempts_and_four_in_a_row_stop_the_run_with_exit_3(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    set_dir = make_set(tmp_path, {"bk_total_revenue": None, "bk_revenue_2024": None,
                                  "bk_profit_margin": None})
    run = new_run(tmp_path, set_dir, "cr1")
    code, doc, _err = answer(["--run", str(run.dir), "--set", str(set_dir), "--mcp-url",
                              bookshop_mcp_url, "--answerer-cmd", scripted_cmd("--mode crash")],
                            capsys)
    assert code == 3
    assert ledger(run) == []  # nothing appended for a crash
    # 3 tries of the first case (1 + 2 retries), then the first try of the second: 4 in a row.
    tries = [t for t in harness_lines(run) if t["event"] == "try"]
    assert [(t["qid"], t["try_no"]) for t in tries] == [
        ("bk_total_revenue", 1), ("bk_total_revenue", 2), ("bk_total_revenue", 3),
        ("bk_revenue_2024", 1)]
    assert all(t["exit_status"] == 1 and "scripted crash" in t["stderr_tail"] for t in tries)
    assert doc["stop_kind"] == "failures" and "4 harness failures in a row" in doc["stopped"]
    assert [o["outcome"] for o in doc["outcomes"]] == ["failed", "failed", "not_run"]
    assert json.loads(run.info_path.read_text())["status"] == "aborted"


def test_a_recorded_attempt_resets_the_count_of_failures_in_a_row(needs_node, tmp_path, capsys,
                                                                 bookshop_mcp_url):
    stored = load_set(BOOKSHOP)
    set_dir = make_set(tmp_path, {
        "bk_total_revenue": stored.case("bk_total_revenue").question + " [scripted:crash]",
        "bk_revenue_2024": None,
        "bk_profit_margin": stored.case("bk_profit_margin").question + " [scripted:crash]"})
    run = new_run(tmp_path, set_dir, "cr2")
    code, doc, _err = answer(["--run", str(run.dir), "--set", str(set_dir), "--mcp-url",
                              bookshop_mcp_url, "--retries", "0", "--max-failures", "2",
                              "--answerer-cmd", scripted_cmd()], capsys)
    assert code == 0 and doc["stopped"] is None
    assert [o["outcome"] for o in doc["outcomes"]] == ["failed", "recorded", "failed"]
    assert [a["qid"] for a in attempts(run)] == ["bk_revenue_2024"]


@pytest.mark.parametrize("mode, words", [
    pytest.param("error", "reported an error (success): API Error: 529", id="api-error-result"),
    pytest.param("noise", "without writing stream-json", id="prose-on-stdout"),
    pytest.param("flood", "more than 1 MB on stdout", id="flooded-stdout"),
])
def test_misbehaving_answerers_are_harness_failures_with_nothing_recorded(
        needs_node, tmp_path, capsys, bookshop_mcp_url, mode, words):
    run = new_run(tmp_path, BOOKSHOP, f"mb-{mode}")
    code, doc, _err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url",
                              bookshop_mcp_url, "--only", "bk_total_revenue", "--retries", "0",
                              "--max-output-mb", "1", "--answerer-cmd",
                              scripted_cmd(f"--mode {mode}")], capsys)
    assert code == 3  # the only attempt tried failed: nothing measured
    assert ledger(run) == []
    assert words in doc["outcomes"][0]["failure"]


def test_reading_a_file_it_should_not_is_recorded_and_marked_contaminated(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    set_dir = make_set(tmp_path, {"bk_total_revenue": None})
    leak = set_dir / "cases.jsonl"
    question = load_set(set_dir).case("bk_total_revenue").question
    (set_dir / "cases.jsonl").write_text(leak.read_text().replace(
        json.dumps(question)[1:-1], json.dumps(f"{question} [scripted:read={leak}]")[1:-1]))
    run = new_run(tmp_path, set_dir, "rd1")
    code, _doc, err = answer(["--run", str(run.dir), "--set", str(set_dir), "--mcp-url",
                              bookshop_mcp_url, "--answerer-cmd", scripted_cmd()], capsys)
    assert code == 0, err
    [attempt] = attempts(run)
    assert attempt["contaminated"] is True
    assert any(r["tool"] == "Read" for r in attempt["contamination_reasons"])
    assert "contaminated" in err


# ---------------------------------------------------------------- isolation

def test_the_answerer_runs_in_an_empty_folder_with_the_kit_and_set_filtered_out(
        needs_node, tmp_path, capsys, monkeypatch, bookshop_mcp_url):
    set_dir = make_set(tmp_path, {"bk_total_revenue": None})
    monkeypatch.setenv("EVAL_SET_HINT", str(set_dir / "cases.jsonl"))
    monkeypatch.setenv("MALLOY_EVALS_ANYTHING", "x")
    monkeypatch.setenv("PATH", f"{KIT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("UNRELATED_SETTING", "kept")
    seen = tmp_path / "seen.json"
    run = new_run(tmp_path, set_dir, "env1")
    code, _doc, err = answer(["--run", str(run.dir), "--set", str(set_dir), "--mcp-url",
                              bookshop_mcp_url, "--no-sandbox",  # the unsealed deny-list
                              "--answerer-cmd", scripted_cmd(f"--env-out {seen}")],
                             capsys)
    assert code == 0, err
    got = json.loads(seen.read_text())
    assert got["entries"] == [] and not got["cwd"].startswith((str(KIT), str(tmp_path)))
    env = got["env"]
    assert "EVAL_SET_HINT" not in env and "MALLOY_EVALS_ANYTHING" not in env
    assert env["UNRELATED_SETTING"] == "kept" and env["PWD"] == got["cwd"]
    assert str(KIT) not in env["PATH"] and os.environ["PATH"].split(os.pathsep)[-1] in env["PATH"]
    assert not any(str(KIT) in v or str(set_dir) in v or str(run.dir) in v for v in env.values())


# ---------------------------------------------------------------- money

def test_budget_for_a_command_answerer_is_checked_between_attempts_over_the_whole_run(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    set_dir = make_set(tmp_path, {"bk_total_revenue": None, "bk_revenue_2024": None,
                                  "bk_profit_margin": None})
    run = new_run(tmp_path, set_dir, "bud1")
    argv = ["--run", str(run.dir), "--set", str(set_dir), "--mcp-url", bookshop_mcp_url,
            "--max-cost-usd", "0.05", "--answerer-cmd", scripted_cmd("--cost-per-turn 0.01")]
    code, doc, _err = answer(argv, capsys)
    # $0.04 an attempt: the second starts at $0.04 (under $0.05), the third would start at $0.08.
    assert code == 0 and doc["stop_kind"] == "budget"
    assert [o["outcome"] for o in doc["outcomes"]] == ["recorded", "recorded", "not_run"]
    assert doc["spent_usd"] == pytest.approx(0.08)
    # Resuming counts what the run already spent: nothing more is started.
    code, doc, _err = answer(argv, capsys)
    assert code == 0 and doc["skipped"] == 2 and doc["stop_kind"] == "budget"
    assert len(attempts(run)) == 2


def test_budget_take_refuses_what_the_limit_cannot_cover_including_reservations():
    budget = Budget(limit=1.0, spent=0.5)
    assert budget.take(0.3) is True
    assert budget.take(0.3) is False  # 0.5 spent + 0.3 reserved + 0.3 > 1.0
    budget.settle(0.3, 0.1)
    assert budget.spent == pytest.approx(0.6) and budget.take(0.3) is True
    budget.add(None)
    assert budget.unknown == 1 and not budget.exhausted()


def test_run_spend_counts_live_attempts_and_failed_tries_but_not_recorded_tries_twice():
    live = [{"cost_usd": 0.25}, {"cost_usd": None}, {"cost_usd": 0.5}]
    log = [{"event": "try", "outcome": "recorded", "cost_usd": 0.25},
           {"event": "try", "outcome": "failed", "cost_usd": 0.125},
           {"event": "try", "outcome": "budget_stop", "cost_usd": 0.0625}]
    assert run_spend(live, log) == pytest.approx(0.25 + 0.5 + 0.125 + 0.0625)


# ---------------------------------------------------------------- resume, redo, samples

def test_rerunning_resumes_and_redo_answers_a_case_again_voiding_the_old_recording(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    set_dir = make_set(tmp_path, {"bk_total_revenue": None, "bk_profit_margin": None})
    run = new_run(tmp_path, set_dir, "res1")
    argv = ["--run", str(run.dir), "--set", str(set_dir), "--mcp-url", bookshop_mcp_url,
            "--parallel", "2", "--answerer-cmd", scripted_cmd()]
    assert answer(argv, capsys)[0] == 0
    before = ledger(run)
    code, doc, _err = answer(argv, capsys)
    assert code == 0 and doc["planned"] == 0 and doc["skipped"] == 2
    assert ledger(run) == before
    code, doc, _err = answer([*argv, "--redo", "bk_total_revenue"], capsys)
    assert code == 0 and doc["recorded"] == 1 and doc["skipped"] == 1
    live = attempts(run)
    assert sorted(a["qid"] for a in live) == ["bk_profit_margin", "bk_total_revenue"]
    redone = next(a for a in live if a["qid"] == "bk_total_revenue")
    assert redone["transcript_path"].endswith("transcript.2.jsonl")
    assert [t["voided"] for t in harness_lines(run) if t.get("outcome") == "recorded"][-1] > 0


def test_samples_number_attempts_1_to_k_and_refuse_to_mix_with_null_samples(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    set_dir = make_set(tmp_path, {"bk_total_revenue": None})
    run = new_run(tmp_path, set_dir, "smp1")
    base = ["--run", str(run.dir), "--set", str(set_dir), "--mcp-url", bookshop_mcp_url,
            "--answerer-cmd", scripted_cmd()]
    code, _doc, err = answer([*base, "--samples", "2"], capsys)
    assert code == 0, err
    assert sorted(a["sample"] for a in attempts(run)) == [1, 2]
    assert "bk_total_revenue#2 submitted" in err
    code, _doc, err = answer(base, capsys)
    assert code == 2 and "numbered samples" in err


def test_answerer_cmd_beside_claude_code_takes_its_place_and_beside_anthropic_is_refused():
    assert parse_answerer("claude-code", "agent {question_file}") == AnswererSpec(
        "command", template="agent {question_file}")
    assert parse_answerer(None, "agent {question_file}").label == "--answerer-cmd"
    with pytest.raises(UsageError, match="cannot go with --answerer anthropic:m"):
        parse_answerer("anthropic:m", "agent {question_file}")
    assert parse_answerer("claude-code:opus", None) == AnswererSpec("claude-code", model="opus")


def test_plan_selects_by_split_and_only_and_skips_what_is_recorded():
    eval_set = load_set(BOOKSHOP)
    plan = plan_attempts(eval_set, {("bk_top_books", None)}, samples=1, only=None, redo=[],
                         split="holdout")
    holdout = [q for q, c in eval_set.cases.items() if c.raw.get("split") == "holdout"]
    assert [p.qid for p in plan.todo] == [q for q in holdout if q != "bk_top_books"]
    assert plan.skipped == [("bk_top_books", None)]
    with pytest.raises(UsageError, match="--redo bk_total_revenue: not among"):
        plan_attempts(eval_set, set(), samples=1, only=["bk_profit_margin"],
                      redo=["bk_total_revenue"], split="all")


# ---------------------------------------------------------------- wrong command lines

@pytest.mark.parametrize("extra, words", [
    pytest.param(["--answerer-cmd", "mycli --config {mcp_config}"], "must pass {question_file}",
                 id="no-question-file"),
    pytest.param(["--answerer-cmd", "mycli {question_file} {model}"], "unknown placeholder",
                 id="unknown-placeholder"),
    pytest.param(["--answerer-cmd", "python scripts/scripted_answerer.py {question_file}"],
                 "is relative", id="relative-path"),
    pytest.param(["--answerer", "anthropic:claude-haiku-4-5", "--answerer-cmd", "x {question_file}"],
                 "cannot go with --answerer", id="two-answerers"),
    pytest.param([], "say who answers", id="no-answerer"),
    pytest.param(["--answerer", "openai:gpt"], "unknown answerer", id="unknown-answerer"),
    pytest.param(["--answerer", "claude-code", "--samples", "0"], "must be at least 1", id="zero-samples"),
    pytest.param(["--answerer", "claude-code", "--prompt", "nope.md"], "no such file", id="no-prompt"),
    pytest.param(["--answerer", "anthropic:claude-unpriced-9", "--max-cost-usd", "1"],
                 "needs a priced model", id="unpriced-budget"),
])
def test_wrong_command_lines_exit_2_before_anything_runs(tmp_path, capsys, extra, words,
                                                         monkeypatch):
    monkeypatch.chdir(KIT)
    # The run folder holds no run.json even: usage is decided before any input is read.
    code, _doc, err = answer(["--run", str(tmp_path), "--set", str(BOOKSHOP),
                              "--mcp-url", "http://127.0.0.1:9/mcp", *extra], capsys)
    assert code == 2 and words in err


def test_a_folder_without_run_json_or_an_unknown_qid_exits_3(tmp_path, capsys):
    cmd = ["--answerer-cmd", scripted_cmd(), "--mcp-url", "http://127.0.0.1:9/mcp"]
    code, _doc, err = answer(["--run", str(tmp_path), "--set", str(BOOKSHOP), *cmd], capsys)
    assert code == 3 and "run.json" in err
    run = new_run(tmp_path, BOOKSHOP, "u1")
    code, _doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--only", "nope",
                              *cmd], capsys)
    assert code == 3 and "--only names qids not in the set: nope" in err and "cases.jsonl" in err


def test_a_model_that_does_not_load_stops_the_run_before_any_answerer_starts(needs_node, tmp_path,
                                                                             capsys):
    set_dir = make_set(tmp_path, {"bk_total_revenue": None})
    (set_dir / "model").mkdir()
    (set_dir / "model" / "bookshop.malloy").write_text("source: orders is duckdb.tabl(\n")
    run = new_run(tmp_path, set_dir, "broken1")
    code, _doc, err = answer(["--run", str(run.dir), "--set", str(set_dir), "--local",
                              "--answerer-cmd", scripted_cmd()], capsys)
    assert code == 3 and "nothing to query" in err
    assert ledger(run) == [] and "answererPromptSha" not in json.loads(run.info_path.read_text())


def test_another_prompt_than_the_runs_is_refused(needs_node, tmp_path, capsys, bookshop_mcp_url):
    set_dir = make_set(tmp_path, {"bk_profit_margin": None})
    run = new_run(tmp_path, set_dir, "pr1")
    base = ["--run", str(run.dir), "--set", str(set_dir), "--mcp-url", bookshop_mcp_url,
            "--answerer-cmd", scripted_cmd()]
    assert answer(base, capsys)[0] == 0
    other = tmp_path / "other-prompt.md"
    other.write_text("Answer in one word.")
    code, _doc, err = answer([*base, "--redo", "bk_profit_margin", "--prompt", str(other)], capsys)
    assert code == 2 and "one run, one prompt" in err


# Regressions (hostile input, writes through links): harness.jsonl and harness.lock were opened
# following a link planted in their place, so the harness wrote outside the run.
def test_a_link_planted_as_the_harness_log_is_refused_and_its_target_untouched(tmp_path):
    run = new_run(tmp_path, BOOKSHOP, "lk1")
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    (run.dir / "harness.jsonl").symlink_to(target)
    with pytest.raises(InputError, match="symbolic link"):
        HarnessLog(run.dir).write("start", answerer="x")
    assert target.read_text() == ""


def test_a_link_planted_as_the_harness_lock_stops_the_run_before_anything_runs(tmp_path, capsys):
    run = new_run(tmp_path, BOOKSHOP, "lk2")
    target = tmp_path / "elsewhere.lock"
    target.write_text("theirs")
    (run.dir / "harness.lock").symlink_to(target)
    code, _doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url",
                              "http://127.0.0.1:9/mcp", "--answerer-cmd", scripted_cmd()], capsys)
    assert code == 3 and "harness.lock" in err and "symbolic link" in err
    assert target.read_text() == "theirs" and ledger(run) == []


# Regression (one redaction): the harness blanked secrets in an answerer's stderr with a second
# redaction of its own, which missed a password standing alone once its URL was seen.
def test_secrets_in_an_answerers_stderr_are_blanked_in_the_log_and_the_failure(
        needs_node, tmp_path, capsys, bookshop_mcp_url):
    run = new_run(tmp_path, BOOKSHOP, "sec1")
    cmd = ("cat {question_file} > /dev/null; "
           "echo 'connect postgres://app:Pw0rdHidden77@db.example/shop failed' >&2; "
           "echo 'retry with Pw0rdHidden77' >&2; exit 1")
    code, doc, _err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url",
                              bookshop_mcp_url, "--only", "bk_total_revenue", "--retries", "0",
                              "--answerer-cmd", cmd], capsys)
    assert code == 3, _err
    [tried] = [t for t in harness_lines(run) if t["event"] == "try"]
    assert "Pw0rdHidden77" not in json.dumps(doc) + (run.dir / "harness.jsonl").read_text()
    assert "retry with [REDACTED]" in tried["stderr_tail"] and "[REDACTED]" in tried["failure"]


# harness.jsonl is a log anyone may edit: mutated, it is read tolerantly (run_spend counts what it
# can) or refused in one line, never a traceback (hostile input, fuzzed).
LOG_LINES = [{"at": "2026-12-01T10:00:00Z", "event": "start", "answerer": "x"},
             {"at": "2026-12-01T10:00:01Z", "event": "try", "qid": "q1", "outcome": "failed",
              "cost_usd": 0.25},
             {"at": "2026-12-01T10:00:02Z", "event": "stop", "reason": None}]


@FUZZ
@given(data=st.data())
def test_a_mutated_harness_log_is_read_tolerantly(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("log")
    raw = data.draw(mutated_lines(LOG_LINES)).encode("utf-8", "backslashreplace")
    (d / "harness.jsonl").write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    lines = reads_or_refuses(lambda: HarnessLog(d).read(), d / "harness.jsonl")
    assert lines is not None and all(isinstance(line, dict) for line in lines)
    assert run_spend([], lines) >= 0


def test_help_names_every_placeholder(capsys):
    with pytest.raises(SystemExit) as done:
        run_answers_script.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert all("{" + p + "}" in out for p in PLACEHOLDERS)
