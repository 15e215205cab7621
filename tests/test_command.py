"""The command answerer's pieces: templates, the child process (timeout, output cap, process
group), and the rule that decides whether a finished child made an attempt."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from fuzz_support import FUZZ, damaged_bytes, mutated_transcript
from hypothesis import given
from hypothesis import strategies as st
from malloy_evals.answer.harness.claude_cli import claude_argv
from malloy_evals.answer.harness.command import (
    ChildRun,
    StreamScan,
    check_template,
    classify,
    close_cut_off_stream,
    fill_template,
    run_child,
    scan_stream,
)
from malloy_evals.answer.transcripts import parse_transcript
from malloy_evals.core.errors import UsageError

INIT = {"type": "system", "subtype": "init", "cwd": "/tmp/w"}


def child(status=0, *, timed_out=False, flooded=False, start_error=None) -> ChildRun:
    return ChildRun(exit_status=status, seconds=1.0, timed_out=timed_out, flooded=flooded,
                    stdout_bytes=10, start_error=start_error)


def result(subtype="success", is_error=False) -> dict:
    return {"type": "result", "subtype": subtype, "is_error": is_error, "result": "boom"}


@pytest.mark.parametrize("run, scan, attempt, cut_off, words", [
    pytest.param(child(), StreamScan(3, result(), False), True, False, None, id="clean"),
    pytest.param(child(1), StreamScan(3, result("error_max_turns", True), False), True, False,
                 None, id="turn-limit-exits-1"),
    pytest.param(child(-9, timed_out=True), StreamScan(2, None, True), True, True, None,
                 id="timeout-with-events"),
    pytest.param(child(-9, timed_out=True), StreamScan(0, None, False), False, False,
                 "no stream-json on stdout before it was stopped (30 s after its first output",
                 id="timeout-silent"),
    pytest.param(child(1), StreamScan(2, None, False), False, False, "crashed (exit 1)",
                 id="crash"),
    pytest.param(child(0), StreamScan(2, None, False), True, False, None,
                 id="clean-exit-without-result"),
    pytest.param(child(1), StreamScan(2, result("success", True), False), False, False,
                 "reported an error (success): boom", id="error-result"),
    pytest.param(child(-9, flooded=True), StreamScan(9, None, True), False, False,
                 "more than 1 MB", id="flood"),
    pytest.param(child(None, start_error="No such file"), StreamScan(0, None, False), False,
                 False, "could not start", id="not-started"),
])
def test_classify_decides_attempt_or_harness_failure(run, scan, attempt, cut_off, words):
    verdict = classify(run, scan, timeout=30, max_stdout_bytes=1 << 20)
    assert (verdict.is_attempt, verdict.cut_off) == (attempt, cut_off)
    if words is None:
        assert verdict.failure is None
    else:
        assert words in verdict.failure


def test_fill_template_shell_quotes_every_value():
    line = fill_template("cli --q {question_file} --n {max_turns} {workdir}",
                         {"question_file": "/tmp/a b/it's.txt", "max_turns": "3",
                          "workdir": "/w; rm -rf /"})
    assert shlex.split(line) == ["cli", "--q", "/tmp/a b/it's.txt", "--n", "3", "/w; rm -rf /"]


def test_check_template_finds_relative_paths_even_in_flag_values(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "agent").write_text("")
    check_template("/abs/agent {question_file} --plan=not/here.json", tmp_path)
    with pytest.raises(UsageError, match="'bin/agent' is relative"):
        check_template("bin/agent {question_file}", tmp_path)
    with pytest.raises(UsageError, match="is relative"):
        check_template("/abs/agent {question_file} --plan=bin/agent", tmp_path)
    with pytest.raises(UsageError, match="No closing quotation"):
        check_template("agent 'x {question_file}", tmp_path)


def test_claude_argv_puts_the_question_before_the_many_valued_flags():
    argv = claude_argv("claude", question="-- how much?", prompt="P", mcp_config=Path("/m.json"),
                       max_turns=5, allowed=["mcp__malloy__a"], withheld=["mcp__malloy__b"],
                       model=None)
    assert argv[:3] == ["claude", "-p", "-- how much?"]
    # No built-in tool at all; the endpoint's other tools withheld; nothing else asked about.
    assert argv[argv.index("--tools") + 1] == ""
    assert argv[argv.index("--disallowedTools") + 1] == "mcp__malloy__b"
    assert argv[argv.index("--permission-mode") + 1] == "dontAsk"
    assert "--model" not in argv and argv[-2:] == ["--append-system-prompt", "P"]


def test_run_child_stops_a_flood_at_the_cap(tmp_path):
    out, err = tmp_path / "out", tmp_path / "err"
    run = run_child([sys.executable, "-c", "while True: print('x' * 1000, flush=True)"],
                    cwd=tmp_path, env={}, timeout=60, stdout_path=out, stderr_path=err,
                    max_stdout_bytes=200_000)
    assert run.flooded and not run.timed_out
    assert out.stat().st_size == 200_000


def test_run_child_timeout_ends_a_child_that_ignores_sigterm(tmp_path):
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('{\"type\": \"system\"}', flush=True); time.sleep(60)")
    run = run_child([sys.executable, "-c", code], cwd=tmp_path, env={}, timeout=1,
                    stdout_path=tmp_path / "out", stderr_path=tmp_path / "err",
                    max_stdout_bytes=1 << 20)
    assert run.timed_out and run.status_text() == "killed by SIGKILL"
    assert scan_stream(tmp_path / "out").events == 1


# Regression (a suite under load): the time limit ran from the child's start, so a loaded
# machine's slow start-up used it up and a hang test read "no stream-json within 4 s". The limit
# now counts from the child's first output, its readiness signal.
def test_run_child_counts_its_timeout_from_the_first_output_not_the_start(tmp_path):
    # Silent for 3 s (its start-up), then one line, then a hang: with a 1 s limit from the start
    # it would be stopped silent; counted from its first output, the line is in and the hang cut.
    code = ("import time; time.sleep(3); print('{\"type\": \"system\"}', flush=True); "
            "time.sleep(120)")
    run = run_child([sys.executable, "-c", code], cwd=tmp_path, env={}, timeout=1,
                    stdout_path=tmp_path / "out", stderr_path=tmp_path / "err",
                    max_stdout_bytes=1 << 20)
    assert run.timed_out and scan_stream(tmp_path / "out").events == 1
    assert classify(run, scan_stream(tmp_path / "out"), timeout=1,
                    max_stdout_bytes=1 << 20).cut_off


def test_run_child_that_never_speaks_is_stopped_at_its_start_up_ceiling(tmp_path):
    run = run_child([sys.executable, "-c", "import time; time.sleep(120)"], cwd=tmp_path, env={},
                    timeout=600, start_up_limit=1, stdout_path=tmp_path / "out",
                    stderr_path=tmp_path / "err", max_stdout_bytes=100)
    assert run.timed_out and run.status_text() == "killed by SIGTERM"
    verdict = classify(run, scan_stream(tmp_path / "out"), timeout=600, max_stdout_bytes=100)
    assert not verdict.is_attempt and "no stream-json" in verdict.failure


def test_run_child_that_cannot_start_says_so(tmp_path):
    run = run_child([str(tmp_path / "no-such-program")], cwd=tmp_path, env={}, timeout=5,
                    stdout_path=tmp_path / "out", stderr_path=tmp_path / "err",
                    max_stdout_bytes=100)
    assert run.start_error and run.status_text() == "not started"


def test_a_cut_off_stream_loses_its_torn_line_and_reads_as_truncated(tmp_path):
    path = tmp_path / "t.jsonl"
    use = {"type": "assistant", "message": {"id": "m1", "content": [
        {"type": "tool_use", "id": "t1", "name": "mcp__malloy__malloy_getContext", "input": {}}]}}
    path.write_text(json.dumps(INIT) + "\n" + json.dumps(use) + "\n" + '{"type": "user", "mes')
    scan = scan_stream(path)
    assert scan.torn_tail and scan.events == 2 and scan.result is None
    close_cut_off_stream(path, timeout=30, seconds=31.5, torn_tail=scan.torn_tail)
    parsed = parse_transcript(path)
    assert parsed.truncated and parsed.run_error == "error_timeout"
    assert parsed.wall_seconds == 31.5 and parsed.cost_usd is None and len(parsed.tool_uses) == 1


# Regression (hostile input, writes through links): the capture files of an attempt were opened
# after the answerer started, so a link it planted in their place was written through.
def test_run_child_never_writes_through_a_link_in_place_of_its_capture_files(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("theirs")
    (tmp_path / "out").symlink_to(target)
    with pytest.raises(FileExistsError):
        run_child([sys.executable, "-c", "print('x')"], cwd=tmp_path, env={}, timeout=10,
                  stdout_path=tmp_path / "out", stderr_path=tmp_path / "err",
                  max_stdout_bytes=100)
    assert target.read_text() == "theirs" and not (tmp_path / "err").exists()


def test_closing_a_cut_off_stream_never_writes_through_a_link(tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text(json.dumps(INIT) + "\n")
    (tmp_path / "t.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        close_cut_off_stream(tmp_path / "t.jsonl", timeout=30, seconds=31.5, torn_tail=False)
    assert target.read_text() == json.dumps(INIT) + "\n"


# The answerer's captured stdout is outside text: a mutated sample transcript is scanned, never a
# traceback (hostile input, fuzzed).
@FUZZ
@given(data=st.data())
def test_scanning_a_mutated_transcript_never_raises(tmp_path_factory, data):
    path = mutated_transcript(data, tmp_path_factory.mktemp("scan"))
    raw = path.read_bytes()
    if data.draw(st.booleans()):
        path.write_bytes(data.draw(damaged_bytes(raw)))
    scan = scan_stream(path)
    assert scan.events >= 0 and (scan.result is None or isinstance(scan.result, dict))
