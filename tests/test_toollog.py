"""toollog: reading host tool-use logs and Claude Code transcripts into one list of tool uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import (
    FUZZ,
    SAMPLE_TRANSCRIPTS,
    damaged_bytes,
    mutated,
    mutated_transcript,
    reads_or_refuses,
)
from hypothesis import given
from hypothesis import strategies as st
from malloy_evals.checks.toollog import ToolUse, read_tool_uses
from malloy_evals.core.errors import InputError


def write(tmp_path: Path, content: Any, name: str = "log.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def jsonl(tmp_path: Path, lines: list[Any], name: str = "t.jsonl") -> Path:
    return write(tmp_path, "\n".join(json.dumps(line) for line in lines) + "\n", name)


def assistant(*blocks: dict[str, Any], mid: str = "m1", **extra: Any) -> dict[str, Any]:
    return {"type": "assistant", "message": {"id": mid, "role": "assistant", "content": list(blocks)},
            **extra}


def tool_use(tid: str, name: str, **inputs: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": inputs}


def tool_result(tid: str, content: Any = "ok") -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tid, "content": content}]}}


# ------------------------------------------------------------------ host logs

def test_host_log_gives_tool_uses_reported_calls_and_cwd(tmp_path):
    log = read_tool_uses(write(tmp_path, {
        "toolUses": [{"name": "Read", "input": {"file_path": "a.txt"}},
                     {"name": "mcp__publisher__malloy_getContext", "input": {"query": "x"}}],
        "reportedCalls": 1, "cwd": "/work"}))
    assert log.kind == "host_log"
    assert log.tool_uses == [ToolUse("Read", {"file_path": "a.txt"}),
                             ToolUse("mcp__publisher__malloy_getContext", {"query": "x"})]
    assert (log.reported_calls, log.cwd) == (1, "/work")


@pytest.mark.parametrize("entry", [
    pytest.param({"tool": "Bash", "arguments": {"command": "ls"}}, id="tool_and_arguments"),
    pytest.param({"name": "Bash", "args": {"command": "ls"}}, id="args"),
    pytest.param({"name": "Bash", "arguments": '{"command": "ls"}'}, id="json_string_arguments"),
])
def test_host_log_aliases_read_the_same(tmp_path, entry):
    log = read_tool_uses(write(tmp_path, {"tool_uses": [entry], "reported_calls": 3}))
    assert log.tool_uses == [ToolUse("Bash", {"command": "ls"})]
    assert log.reported_calls == 3


def test_host_log_without_reported_calls_is_none(tmp_path):
    assert read_tool_uses(write(tmp_path, {"toolUses": []})).reported_calls is None


def test_non_object_entry_is_counted_and_kept_with_a_warning(tmp_path):
    log = read_tool_uses(write(tmp_path, {"toolUses": ["cat evals/x", {"name": "Read", "input": {}}]}))
    assert len(log.tool_uses) == 2
    assert log.tool_uses[0] == ToolUse("", "cat evals/x")
    assert "toolUses[0]" in log.warnings[0]


@pytest.mark.parametrize("doc, message", [
    pytest.param({"toolUses": {"name": "Read"}}, "toolUses: expected a list", id="tool_uses_not_list"),
    pytest.param({"toolUses": [], "reportedCalls": -1}, "reportedCalls", id="negative_count"),
    pytest.param({"toolUses": [], "reportedCalls": True}, "reportedCalls", id="boolean_count"),
    pytest.param({"toolUses": [], "reportedCalls": "many"}, "reportedCalls", id="text_count"),
    pytest.param({"toolUses": [], "cwd": 7}, "cwd", id="cwd_not_text"),
    pytest.param({"name": "bookshop", "datasetVersion": 1}, "neither", id="some_other_json"),
    pytest.param({"type": "result", "subtype": "success", "result": "42"}, "result-only",
                 id="result_only_document"),
])
def test_malformed_host_log_raises_input_error_naming_the_problem(tmp_path, doc, message):
    with pytest.raises(InputError) as err:
        read_tool_uses(write(tmp_path, doc))
    assert message in str(err.value)
    assert "log.json" in str(err.value)


def test_reported_calls_written_as_digits_is_read(tmp_path):
    assert read_tool_uses(write(tmp_path, {"toolUses": [], "reportedCalls": "4"})).reported_calls == 4


def test_bare_list_of_tool_uses_is_a_host_log(tmp_path):
    log = read_tool_uses(write(tmp_path, [{"name": "Read", "input": {"file_path": "a"}}]))
    assert log.kind == "host_log" and len(log.tool_uses) == 1


def test_json_lines_of_tool_uses_is_a_host_log(tmp_path):
    log = read_tool_uses(jsonl(tmp_path, [{"name": "Read", "input": {"file_path": "a"}},
                                          {"tool": "Bash", "args": {"command": "ls"}}]))
    assert [u.name for u in log.tool_uses] == ["Read", "Bash"]


# ------------------------------------------------------------------ transcripts

STREAM = [
    {"type": "system", "subtype": "init", "cwd": "/scratch/a1", "session_id": "s",
     "tools": ["Read", "mcp__publisher__malloy_getContext"]},
    assistant({"type": "text", "text": "Let me look."},
              tool_use("t1", "mcp__publisher__malloy_getContext", query="revenue")),
    tool_result("t1", [{"type": "text", "text": "{}"}]),
    assistant(tool_use("t2", "mcp__publisher__malloy_executeQuery", modelPath="shop.malloy",
                       query="run: orders -> { aggregate: revenue }"), mid="m2"),
    tool_result("t2"),
    {"type": "result", "subtype": "success", "is_error": False, "result": "42", "num_turns": 3},
]


def test_stream_json_transcript_gives_tool_uses_in_order_and_init_cwd(tmp_path):
    log = read_tool_uses(jsonl(tmp_path, STREAM))
    assert log.kind == "transcript"
    assert [u.name for u in log.tool_uses] == ["mcp__publisher__malloy_getContext",
                                                "mcp__publisher__malloy_executeQuery"]
    assert [u.id for u in log.tool_uses] == ["t1", "t2"]
    assert log.cwd == "/scratch/a1"
    assert log.reported_calls is None  # only the flag or a host log's field carries it


def test_tool_use_repeated_across_split_message_lines_counts_once(tmp_path):
    lines = [STREAM[0], assistant(tool_use("t1", "Read", file_path="a")),
             assistant(tool_use("t1", "Read", file_path="a"), tool_use("t2", "Read", file_path="b"))]
    assert [u.id for u in read_tool_uses(jsonl(tmp_path, lines)).tool_uses] == ["t1", "t2"]


def test_subagent_tool_uses_count_as_host_tool_uses(tmp_path):
    lines = [STREAM[0], assistant(tool_use("t1", "Task", prompt="look")),
             assistant(tool_use("t9", "Read", file_path="x"), mid="m9",
                       parent_tool_use_id="t1")]
    assert len(read_tool_uses(jsonl(tmp_path, lines)).tool_uses) == 2


def test_saved_session_takes_cwd_from_its_lines(tmp_path):
    lines = [{"type": "summary", "summary": "s", "leafUuid": "u"},
             {"type": "user", "cwd": "/home/a/repo", "sessionId": "s", "uuid": "u1",
              "message": {"role": "user", "content": "How much revenue?"}},
             assistant(tool_use("t1", "Bash", command="ls"), cwd="/home/a/repo", uuid="u2")]
    log = read_tool_uses(jsonl(tmp_path, lines))
    assert log.cwd == "/home/a/repo"
    assert log.tool_uses == [ToolUse("Bash", {"command": "ls"}, id="t1")]


def test_verbose_json_array_transcript_is_read(tmp_path):
    log = read_tool_uses(write(tmp_path, STREAM))
    assert log.kind == "transcript" and len(log.tool_uses) == 2


def test_transcript_without_tool_uses_has_none(tmp_path):
    log = read_tool_uses(jsonl(tmp_path, [STREAM[0], STREAM[-1]]))
    assert log.tool_uses == []


def test_torn_last_line_is_a_warning_and_the_rest_is_read(tmp_path):
    text = "\n".join(json.dumps(line) for line in STREAM[:2]) + '\n{"type": "assist'
    log = read_tool_uses(write(tmp_path, text, "t.jsonl"))
    assert len(log.tool_uses) == 1
    assert log.warnings == [f"{tmp_path / 't.jsonl'}:3: torn last line ignored"]


def test_bad_line_in_the_middle_names_the_line(tmp_path):
    text = json.dumps(STREAM[0]) + "\nnot json\n" + json.dumps(STREAM[-1]) + "\n"
    with pytest.raises(InputError) as err:
        read_tool_uses(write(tmp_path, text, "t.jsonl"))
    assert err.value.line == 2


def test_pretty_printed_log_broken_on_line_3_names_line_3(tmp_path):
    text = '{"toolUses": [\n  {"name": "Read", "input": {"file_path": "a"}},\n  {bad}\n]}\n'
    with pytest.raises(InputError) as err:
        read_tool_uses(write(tmp_path, text, "log.json"))
    assert err.value.line == 3 and "not JSON" in str(err.value)


@pytest.mark.parametrize("content", [pytest.param("", id="empty"), pytest.param("  \n\n", id="blank")])
def test_empty_file_is_an_input_error(tmp_path, content):
    with pytest.raises(InputError, match="empty"):
        read_tool_uses(write(tmp_path, content))


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        read_tool_uses(tmp_path / "nope.json")


def test_non_utf8_file_is_an_input_error(tmp_path):
    path = tmp_path / "bin.json"
    path.write_bytes(b'{"toolUses": ["\xff"]}')
    with pytest.raises(InputError, match="UTF-8"):
        read_tool_uses(path)


# ---------------------------------------------------------------- hostile input (fuzzed)
# Regression: a transcript whose `type` is an object or a list raised `TypeError: unhashable`
# (a traceback, and exit 1 from check_contamination, which reads as "contaminated").


SAMPLES = Path(__file__).resolve().parents[1] / "evals" / "bookshop" / "transcripts"
HOST_LOG = SAMPLES / "leaky" / "bk_member_count.hostlog.json"


@pytest.mark.parametrize("kind", [{"a": 1}, ["assistant"], 7])
def test_transcript_line_whose_type_is_not_a_string_is_refused_naming_the_line(tmp_path, kind):
    path = jsonl(tmp_path, [{"type": "system", "cwd": "/w"}, {"type": kind}])
    with pytest.raises(InputError, match=r"t\.jsonl:2: type: expected a string"):
        read_tool_uses(path)


@FUZZ
@given(data=st.data())
def test_mutated_transcript_is_read_or_refused_in_one_line(tmp_path_factory, data):
    path = mutated_transcript(data, tmp_path_factory.mktemp("fuzz"))
    reads_or_refuses(lambda: read_tool_uses(path), path)


@FUZZ
@given(data=st.data())
def test_damaged_transcript_bytes_are_read_or_refused_in_one_line(tmp_path_factory, data):
    source = data.draw(st.sampled_from(SAMPLE_TRANSCRIPTS))
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    path.write_bytes(data.draw(damaged_bytes(source.read_bytes())))
    reads_or_refuses(lambda: read_tool_uses(path), path)


@FUZZ
@given(data=st.data())
def test_mutated_host_log_is_read_or_refused_in_one_line(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "host.json"
    path.write_text(json.dumps(data.draw(mutated(json.loads(HOST_LOG.read_text())))))
    reads_or_refuses(lambda: read_tool_uses(path), path)
