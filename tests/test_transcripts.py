"""record_attempt: transcripts and host logs into one attempt and its tool_call events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import FUZZ, damaged_bytes, mutated_lines, read_lines, reads_or_refuses
from hypothesis import given
from hypothesis import strategies as st
from malloy_evals.answer.transcripts import (
    CUT_OFF,
    ExecuteCall,
    choose_final_query,
    is_mcp_tool,
    parse_transcript,
    publisher_tool,
    record_attempt,
)
from malloy_evals.core import schemas
from malloy_evals.core.errors import InputError
from malloy_evals.core.redact import redact
from malloy_evals.endpoint.context_payload import doc_tokens, ranked_summary
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.validate import validate_run
from malloy_evals.sets.eval_set import question_sha

KIT_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "record_attempt.py"
QUESTION = "What was revenue by month in 2024?"

# ---------------------------------------------------------------- builders


def make_set(root: Path) -> Path:
    """A two-case set folder with nothing else in it (no model: ingestion never reads one)."""
    d = root / "evals" / "mini"
    d.mkdir(parents=True)
    (d / "set.json").write_text(json.dumps({"name": "mini", "datasetVersion": 1, "targetPackage": "bookshop",
                                            "targetModelPath": "bookshop.malloy"}))
    cases = [{"qid": "q1", "question": QUESTION, "coverage": "covered"},
             {"qid": "q2", "question": "How many customers live in the EU?"}]
    (d / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return d


def make_run(root: Path, set_dir: Path) -> Path:
    out = root / "runs" / "r1"
    Run.create(out, set_dir, answerer_model="claude-test", run_id="r1")
    return out


def resource(payload: Any) -> list[dict[str, Any]]:
    """The Publisher's resource block at content[0], as a host passing MCP content through keeps it."""
    return [{"type": "resource", "resource": {"uri": "malloy://samples/bookshop", "mimeType": "application/json",
                                              "text": json.dumps(payload)}}]


def labelled_text(payload: Any) -> list[dict[str, Any]]:
    """The same block as Claude Code flattens it into text, with its resource label in front."""
    return [{"type": "text", "text": "[Resource from publisher at malloy://samples/bookshop] " + json.dumps(payload)}]


OLD_PAYLOAD = {"results": [
    {"kind": "measure", "name": "total_revenue", "source": "orders", "environmentName": "samples",
     "packageName": "bookshop", "modelPath": "bookshop.malloy", "doc": "Sum of line_amount over shipped orders"},
    {"kind": "dimension", "name": "order_month", "source": "orders", "doc": "Month of the order"},
    {"kind": "source", "name": "orders", "source": "orders", "doc": "One row per order; see net_revenue"}]}

NEW_PAYLOAD = {"sources": [{
    "source_info": {"resource_id": {"environment": "samples", "package": "bookshop",
                                    "model_path": "bookshop.malloy", "source": "customers"},
                    "doc": "Customers and their home_region"},
    "entities": [
        {"entity_id": "dimension:customers:region", "name": "region", "entity_type": "dimension",
         "relevance": 0.91, "matched_targets": [{"search_text": "region", "relevance": 0.91}]},
        {"entity_id": "publisher-private-17", "name": "customer_count", "entity_type": "Measure",
         "relevance": 0.5, "matched_targets": None}]}],
    "retrieval": "lexical"}

DECLARED = "run: orders -> {\n  group_by: order_month\n  aggregate: total_revenue\n}"
FINAL_TEXT = f"Revenue by month:\n\n```malloy\n{DECLARED}\n```\n\nJanuary 2024: 10."


def assistant(mid: str, *blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "assistant", "message": {"id": mid, "role": "assistant", "content": list(blocks),
                                             "usage": {"input_tokens": 10, "output_tokens": 5}},
            "parent_tool_use_id": None, "session_id": "s1", **extra}


def tool_use(tid: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": arguments}


def tool_result(tid: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": content}
    if is_error:
        block["is_error"] = True
    return {"type": "user", "message": {"role": "user", "content": [block]}, "parent_tool_use_id": None,
            "session_id": "s1"}


PKG = {"environmentName": "samples", "packageName": "bookshop", "modelPath": "bookshop.malloy"}


def stream_json_lines(final_text: str = FINAL_TEXT, subtype: str = "success") -> list[dict[str, Any]]:
    """A stream-json session: two get_context calls (one per payload generation, prefixed names),
    an execute_query that fails, a Bash call, a named view, the declared ad-hoc query, a result line."""
    lines = [
        {"type": "system", "subtype": "init", "cwd": "/home/ana/work", "session_id": "s1",
         "model": "claude-sonnet-4-5",
         "tools": ["Bash", "mcp__publisher__malloy_getContext", "mcp__publisher__malloy_executeQuery"]},
        assistant("msg_1", {"type": "text", "text": "Looking at the model first."}),
        assistant("msg_1", tool_use("toolu_1", "mcp__publisher__malloy_getContext",
                                    {"environmentName": "samples", "packageName": "bookshop",
                                     "query": "revenue by month"})),
        tool_result("toolu_1", labelled_text(OLD_PAYLOAD)),
        assistant("msg_2", tool_use("toolu_2", "mcp__publisher__malloy_getContext",
                                    {"search_targets": [{"target_type": "dimension", "search_text": "region"},
                                                        {"target_type": "measure"}],
                                     "scopes": [{"environment": "samples", "package": "bookshop"}]})),
        tool_result("toolu_2", resource(NEW_PAYLOAD)),
        assistant("msg_3", tool_use("toolu_3", "mcp__publisher__malloy_executeQuery",
                                    {**PKG, "query": "run: orders -> { aggregate: nope }"})),
        tool_result("toolu_3", [{"type": "text", "text": json.dumps({"error": "'nope' is not defined",
                                                                     "suggestions": []})},
                                {"type": "text", "text": "'nope' is not defined"}], is_error=True),
        assistant("msg_4", tool_use("toolu_4", "Bash", {"command": "ls"})),
        tool_result("toolu_4", "notes.txt"),
        assistant("msg_5", tool_use("toolu_5", "mcp__publisher__malloy_executeQuery",
                                    {**PKG, "sourceName": "orders", "queryName": "by_month"})),
        tool_result("toolu_5", resource({"rows": [{"order_month": "2024-01", "total_revenue": 10}]})),
        assistant("msg_6", tool_use("toolu_6", "mcp__publisher__malloy_executeQuery",
                                    {**PKG, "query": DECLARED, "givens": {"min_year": 2024}})),
        tool_result("toolu_6", resource({"rows": [{"order_month": "2024-01", "total_revenue": 10}]})),
        assistant("msg_7", {"type": "text", "text": final_text}),
    ]
    result: dict[str, Any] = {"type": "result", "subtype": subtype, "is_error": subtype != "success",
                              "duration_ms": 45210, "num_turns": 7, "session_id": "s1",
                              "total_cost_usd": 0.1234,
                              "usage": {"input_tokens": 1200, "cache_creation_input_tokens": 300,
                                        "cache_read_input_tokens": 5000, "output_tokens": 800}}
    if subtype == "success":
        result["result"] = final_text
    lines.append(result)
    return lines


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def env(tmp_path: Path) -> tuple[Path, Path]:
    set_dir = make_set(tmp_path)
    return set_dir, make_run(tmp_path, set_dir)


def events_of(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in Run.open(run_dir).live() if e["kind"] == kind]


# ---------------------------------------------------------------- a real transcript shape


def test_stream_json_transcript_records_exact_attempt_fields(env, tmp_path):
    set_dir, run_dir = env
    t = write_lines(tmp_path / "q1.jsonl", stream_json_lines())
    out = record_attempt(run_dir, set_dir, "q1", transcript=t)
    [attempt] = events_of(run_dir, "attempt")
    expected = {
        "qid": "q1", "sample": None, "phase": "baseline", "submitted": True,
        "final_query": DECLARED, "final_query_source": "declared", "answer_text": FINAL_TEXT,
        "source_name": None, "query_name": None, "model_path": "bookshop.malloy",
        "givens": {"min_year": 2024}, "question_sha": question_sha(QUESTION),
        "host_tool_uses": 6, "mcp_tool_uses": 5, "reported_calls": None,
        "n_get_context": 2, "n_execute": 3, "n_execute_errors": 1,
        "truncated": False, "run_error": None,
        "input_tokens": 1200, "output_tokens": 800, "cache_read_tokens": 5000, "cache_write_tokens": 300,
        "cost_usd": 0.1234, "num_turns": 7, "wall_seconds": 45.21,
        "transcript_path": "artifacts/q1/_/transcript.jsonl",
    }
    assert {k: attempt.get(k) for k in expected} == expected
    assert out.attempt_event_id == attempt["event_id"] and out.tool_calls == 5
    assert (run_dir / "artifacts" / "q1" / "_" / "transcript.jsonl").is_file()
    assert attempt["contaminated"] in (True, False, "unknown")


def test_get_context_calls_record_targets_and_ranked_summary_of_both_generations(env, tmp_path):
    set_dir, run_dir = env
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", stream_json_lines()))
    calls = [e for e in events_of(run_dir, "tool_call") if e["tool"] == "get_context"]
    old, new = sorted(calls, key=lambda e: e["call_index"])
    assert old["call_index"] == 0
    assert old["targets"] == ["any: revenue by month"]
    assert old["target_shapes"] == [{"type": "any", "has_text": True}]
    assert old["ranked_summary"] == {
        "entity_ids": ["measure:orders:total_revenue", "dimension:orders:order_month", "source:orders:orders"],
        "hits": [{"entity_id": "measure:orders:total_revenue", "relevance": None, "position": 0},
                 {"entity_id": "dimension:orders:order_month", "relevance": None, "position": 1},
                 {"entity_id": "source:orders:orders", "relevance": None, "position": 2}],
        "result_count": 3, "doc_tokens": ["line_amount", "net_revenue"]}
    assert old["retrieval_mode"] is None and old["error"] is None
    assert new["call_index"] == 1
    assert new["targets"] == ["dimension: region"]
    assert new["target_shapes"] == [{"type": "dimension", "has_text": True}, {"type": "measure", "has_text": False}]
    assert new["scopes"] == [{"environment": "samples", "package": "bookshop"}]
    # A server-private entity id is re-minted from type, source and name so it compares with the set.
    assert new["ranked_summary"]["entity_ids"] == [
        "source:customers:customers", "dimension:customers:region", "measure:customers:customer_count"]
    assert new["ranked_summary"]["hits"][1] == {"entity_id": "dimension:customers:region",
                                                "relevance": 0.91, "position": 1}
    assert new["ranked_summary"]["doc_tokens"] == ["home_region"]
    assert new["retrieval_mode"] == "lexical"


def test_execute_query_calls_record_query_named_view_givens_and_error(env, tmp_path):
    set_dir, run_dir = env
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", stream_json_lines()))
    calls = sorted((e for e in events_of(run_dir, "tool_call") if e["tool"] == "execute_query"),
                   key=lambda e: e["call_index"])
    failing, named, adhoc = calls
    assert failing["query"] == "run: orders -> { aggregate: nope }"
    assert failing["error"] == "'nope' is not defined"
    assert (named["query"], named["source_name"], named["query_name"]) == (None, "orders", "by_month")
    assert named["error"] is None and named["model_path"] == "bookshop.malloy"
    assert adhoc["givens"] == {"min_year": 2024}
    # Events never hold result rows.
    assert all("rows" not in json.dumps(e) for e in calls)


def test_every_event_written_validates_against_its_schema(env, tmp_path):
    set_dir, run_dir = env
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", stream_json_lines()))
    for event in Run.open(run_dir).live():
        assert schemas.validate_event(event) == []


def test_error_max_turns_result_marks_attempt_truncated(env, tmp_path):
    set_dir, run_dir = env
    t = write_lines(tmp_path / "t.jsonl", stream_json_lines(subtype="error_max_turns"))
    record_attempt(run_dir, set_dir, "q1", transcript=t)
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["truncated"] is True
    assert attempt["run_error"] == "error_max_turns"
    # Without result.result the answer is the last assistant text.
    assert attempt["answer_text"] == FINAL_TEXT


def test_stream_json_cut_off_before_its_result_line_is_truncated_not_an_answer(env, tmp_path):
    # Issue 16 item 1: a session with its init line and no result line was recorded as submitted
    # and untruncated, and its mid-session narration was judged as the answer.
    set_dir, run_dir = env
    t = write_lines(tmp_path / "t.jsonl", stream_json_lines()[:-2])
    record_attempt(run_dir, set_dir, "q1", transcript=t)
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["truncated"] is True
    assert attempt["run_error"] == CUT_OFF


def test_saved_session_without_a_result_line_is_not_truncated(tmp_path):
    # A saved session never has a result line; only stream-json (with its init line) promises one.
    lines = [line for line in stream_json_lines() if line["type"] not in ("system", "result")]
    parsed = parse_transcript(write_lines(tmp_path / "s.jsonl", lines))
    assert (parsed.format, parsed.truncated, parsed.run_error) == ("session", False, None)


def test_get_context_error_is_recorded_without_a_ranked_summary(env, tmp_path):
    set_dir, run_dir = env
    lines = [assistant("m1", tool_use("t1", "malloy_getContext", {"query": "revenue"})),
             tool_result("t1", [{"type": "text", "text": json.dumps({"error": "package not found"})}], is_error=True),
             assistant("m2", {"type": "text", "text": "I could not reach the model."})]
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    [call] = events_of(run_dir, "tool_call")
    assert call["error"] == "package not found" and call["ranked_summary"] is None


def test_saved_session_jsonl_reads_answer_usage_and_wall_time_from_its_messages(env, tmp_path):
    set_dir, run_dir = env
    base = {"cwd": "/home/ana/work", "sessionId": "s9"}
    lines = [
        {**base, "type": "user", "uuid": "u1", "timestamp": "2026-11-30T10:00:00.000Z",
         "message": {"role": "user", "content": QUESTION}},
        {**base, **assistant("msg_a", tool_use("t1", "mcp__publisher__get_context", {"query": "customers"})),
         "uuid": "a1", "timestamp": "2026-11-30T10:00:05.000Z"},
        {**base, **tool_result("t1", resource(OLD_PAYLOAD)), "uuid": "u2", "timestamp": "2026-11-30T10:00:06.000Z"},
        # A subagent's text is not the answer.
        {**base, **assistant("msg_s", {"type": "text", "text": "subagent notes"}), "isSidechain": True,
         "uuid": "s1", "timestamp": "2026-11-30T10:00:07.000Z"},
        {**base, **assistant("msg_b", {"type": "text", "text": "About 40 customers live in the EU."}),
         "uuid": "a2", "timestamp": "2026-11-30T10:00:30.000Z"},
    ]
    record_attempt(run_dir, set_dir, "q2", 0, transcript=write_lines(tmp_path / "s.jsonl", lines))
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["answer_text"] == "About 40 customers live in the EU."
    assert attempt["submitted"] is True and attempt["final_query"] is None
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (20, 10)  # msg_a + msg_b, once each
    assert attempt["wall_seconds"] == 30.0
    assert attempt["cost_usd"] is None and attempt["num_turns"] is None
    assert attempt["transcript_path"] == "artifacts/q2/0/transcript.jsonl"


def test_torn_last_line_of_a_transcript_is_a_warning_not_a_failure(tmp_path):
    lines = stream_json_lines()
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines[:-1]) + json.dumps(lines[-1])[:40])
    parsed = parse_transcript(path)
    assert any("torn" in w for w in parsed.warnings)
    assert len(parsed.tool_uses) == 6 and parsed.cost_usd is None


# ---------------------------------------------------------------- host log + answer file


def test_host_log_with_answer_file_records_counts_and_declared_query(env, tmp_path):
    set_dir, run_dir = env
    log = tmp_path / "host.json"
    log.write_text(json.dumps({"toolUses": [
        {"name": "mcp__publisher__malloy_getContext", "input": {"query": "revenue"}},
        {"name": "Read", "input": {"file_path": "/home/ana/notes.md"}},
        {"name": "mcp__publisher__malloy_executeQuery", "input": {**PKG, "query": DECLARED}},
    ], "reportedCalls": 2, "cwd": "/home/ana/work"}))
    answer = tmp_path / "answer.md"
    answer.write_text(FINAL_TEXT)
    out = record_attempt(run_dir, set_dir, "q1", host_log=log, answer_file=answer)
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["host_tool_uses"] == 3 and attempt["mcp_tool_uses"] == 2
    assert attempt["reported_calls"] == 2
    assert (attempt["final_query"], attempt["final_query_source"]) == (DECLARED, "declared")
    assert attempt["answer_text"] == FINAL_TEXT
    assert attempt["transcript_path"] == "artifacts/q1/_/host-log.json"
    assert (run_dir / "artifacts" / "q1" / "_" / "answer.md").read_text() == FINAL_TEXT
    [ctx] = [e for e in events_of(run_dir, "tool_call") if e["tool"] == "get_context"]
    assert ctx["ranked_summary"] is None  # a host log carries no results
    assert out.tool_calls == 2


def test_reported_calls_flag_overrides_the_host_log_field(env, tmp_path):
    set_dir, run_dir = env
    log = tmp_path / "host.json"
    log.write_text(json.dumps({"toolUses": [{"name": "malloy_executeQuery", "input": {"query": "run: x"}}],
                               "reportedCalls": 1}))
    answer = tmp_path / "a.md"
    answer.write_text("42")
    record_attempt(run_dir, set_dir, "q1", host_log=log, answer_file=answer, reported_calls=5)
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["reported_calls"] == 5
    # Without results nothing is known to have succeeded: the last call is the final query.
    assert (attempt["final_query"], attempt["final_query_source"]) == ("run: x", "last")


def test_transcript_without_flag_has_unknown_reported_calls(tmp_path):
    parsed = parse_transcript(write_lines(tmp_path / "t.jsonl", stream_json_lines()))
    assert parsed.reported_calls is None


# ---------------------------------------------------------------- the final-query rule


def call(query: str | None = None, *, ok: bool | None = True, source: str | None = None,
         view: str | None = None) -> ExecuteCall:
    return ExecuteCall(query=query, source_name=source, query_name=view, model_path="m.malloy", givens=None,
                       error=None if ok is not False else "boom", ok=ok)


def test_declared_block_matching_a_run_query_wins_over_a_later_query():
    calls = [call("run: a -> {\n aggregate: n\n}"), call("run: b -> x")]
    final = choose_final_query(calls, "Answer:\n```malloy\nrun: a -> { aggregate: n }\n```")
    assert (final.final_query, final.source) == ("run: a -> {\n aggregate: n\n}", "declared")


def test_last_matching_block_is_the_declared_one():
    calls = [call("run: a"), call("run: b")]
    final = choose_final_query(calls, "```malloy\nrun: b\n```\nthen\n```malloy\nrun: a\n```")
    assert (final.final_query, final.source) == ("run: a", "declared")


def test_block_that_matches_no_run_query_falls_back_to_last_ok():
    calls = [call("run: a"), call("run: b", ok=False)]
    final = choose_final_query(calls, "```malloy\nrun: never_ran\n```")
    assert (final.final_query, final.source) == ("run: a", "last_ok")


def test_last_ok_call_using_query_name_is_a_named_view():
    calls = [call("run: a", ok=False), call(source="orders", view="by_month")]
    final = choose_final_query(calls, "By month, see above.")
    assert (final.final_query, final.source) == ("run: orders -> by_month", "named_view")
    assert (final.source_name, final.query_name) == ("orders", "by_month")


def test_declared_named_view_keeps_its_source_and_view_names():
    calls = [call(source="orders", view="by_month"), call("run: z")]
    final = choose_final_query(calls, "```malloy\nrun: orders -> by_month\n```")
    assert (final.final_query, final.source, final.query_name) == ("run: orders -> by_month", "declared", "by_month")


def test_every_call_failing_leaves_the_last_call():
    calls = [call("run: a", ok=False), call("run: b", ok=False)]
    final = choose_final_query(calls, None)
    assert (final.final_query, final.source) == ("run: b", "last")


def test_no_execute_calls_means_no_final_query():
    final = choose_final_query([], "```malloy\nrun: a\n```")
    assert (final.final_query, final.source) == (None, None)


def test_no_query_and_no_answer_text_is_not_submitted(env, tmp_path):
    set_dir, run_dir = env
    lines = [assistant("m1", tool_use("t1", "mcp__publisher__malloy_getContext", {"query": "x"})),
             tool_result("t1", resource({"results": []}))]
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    [attempt] = events_of(run_dir, "attempt")
    assert (attempt["submitted"], attempt["final_query"], attempt["answer_text"]) == (False, None, None)


# ---------------------------------------------------------------- tool names


@pytest.mark.parametrize(("name", "tool"), [
    pytest.param("mcp__publisher__malloy_executeQuery", "execute_query", id="prefixed-execute"),
    pytest.param("malloy_executeQuery", "execute_query", id="wire-execute"),
    pytest.param("execute_query", "execute_query", id="bare-execute"),
    pytest.param("mcp__malloy__get_context", "get_context", id="prefixed-bare-context"),
    pytest.param("malloy_getContext", "get_context", id="wire-context"),
    pytest.param("mcp__publisher__malloy_getStatus", None, id="status-is-not-recorded"),
    pytest.param("Bash", None, id="host-tool"),
])
def test_publisher_tool_names_bare_or_prefixed(name, tool):
    assert publisher_tool(name) == tool


def test_any_prefixed_mcp_tool_counts_as_mcp_and_host_tools_do_not():
    assert is_mcp_tool("mcp__github__search") and is_mcp_tool("malloy_getStatus")
    assert not is_mcp_tool("Read") and not is_mcp_tool("Bash")


# ---------------------------------------------------------------- payload helpers


def test_one_word_names_are_never_doc_tokens():
    tokens = doc_tokens({"results": [{"kind": "source", "name": "o", "doc": "revenue from order_items, not Gross"}]})
    assert tokens == ["order_items"]


def test_older_per_target_grouping_is_read_as_results():
    summary = ranked_summary({"targets": [{"results": [{"kind": "view", "name": "by_month", "source": "orders"}]}]})
    assert summary["entity_ids"] == ["view:orders:by_month"]


# ---------------------------------------------------------------- secrets


def test_transcript_copy_redacts_secrets_and_events_carry_none(env, tmp_path):
    set_dir, run_dir = env
    secret_key = "sk-ant-api03-" + "A1b2C3d4" * 4
    lines = stream_json_lines()
    lines.insert(1, assistant("msg_0", tool_use("toolu_0", "Bash", {
        "command": f"export ANTHROPIC_API_KEY={secret_key}; DB_PASSWORD='hunter2 x' "
                   "curl -H 'Authorization: Bearer abcdefghijklmnop123' http://127.0.0.1/mcp"})))
    lines.insert(2, tool_result("toolu_0", json.dumps({"github_token": "ghx-plain-value", "ok": True})))
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    copy = (run_dir / "artifacts" / "q1" / "_" / "transcript.jsonl").read_text()
    for secret in (secret_key, "hunter2", "abcdefghijklmnop123", "ghx-plain-value"):
        assert secret not in copy
    assert "[REDACTED]" in copy
    for line in copy.splitlines():
        json.loads(line)  # the copy is still a transcript
    ledger = (run_dir / "events.jsonl").read_text()
    assert secret_key not in ledger and "hunter2" not in ledger


def test_transcript_copy_redacts_values_of_secret_named_environment_variables(env, tmp_path,
                                                                              monkeypatch):
    set_dir, run_dir = env
    monkeypatch.setenv("WAREHOUSE_API_KEY", "plainvalue-no-known-shape-42")
    lines = stream_json_lines()
    lines.insert(1, assistant("msg_0", tool_use("toolu_0", "Bash", {"command": "env"})))
    lines.insert(2, tool_result("toolu_0", "HOME=/root\nplainvalue-no-known-shape-42\n"))
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    copy = (run_dir / "artifacts" / "q1" / "_" / "transcript.jsonl").read_text()
    assert "plainvalue-no-known-shape-42" not in copy and "[REDACTED]" in copy


def test_redaction_leaves_malloy_filters_alone():
    assert redact("where: sort_key = 3") == "where: sort_key = 3"


# Regressions (hostile input): secrets that reached the ledger, the judge and the copy.
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"


def test_api_key_given_as_a_query_parameter_never_reaches_the_ledger(env, tmp_path):
    set_dir, run_dir = env
    lines = stream_json_lines()
    lines[-4] = assistant("msg_6", tool_use("toolu_6", "mcp__publisher__malloy_executeQuery",
                                            {**PKG, "query": DECLARED,
                                             "givens": {"min_year": 2024, "api_key": "zz-9f8e7d6c5b"}}))
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    ledger = (run_dir / "events.jsonl").read_text()
    assert "zz-9f8e7d6c5b" not in ledger
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["givens"] == {"min_year": 2024, "api_key": "[REDACTED]"}


def test_environment_secret_is_redacted_in_answer_error_and_givens(env, tmp_path, monkeypatch):
    set_dir, run_dir = env
    value = "plainvalue-no-known-shape-42"
    monkeypatch.setenv("WAREHOUSE_API_KEY", value)
    lines = stream_json_lines(final_text=f"{FINAL_TEXT} (used {value})")
    lines[7] = tool_result("toolu_3", [{"type": "text", "text": json.dumps(
        {"error": f"auth {value} refused", "suggestions": []})}], is_error=True)
    lines[-4] = assistant("msg_6", tool_use("toolu_6", "mcp__publisher__malloy_executeQuery",
                                            {**PKG, "query": DECLARED, "givens": {"who": value}}))
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    assert value not in (run_dir / "events.jsonl").read_text()
    [attempt] = events_of(run_dir, "attempt")
    assert "[REDACTED]" in attempt["answer_text"] and attempt["givens"] == {"who": "[REDACTED]"}
    assert any(c.get("error") and "[REDACTED]" in c["error"] for c in events_of(run_dir, "tool_call"))


def test_transcript_copy_redacts_every_secret_shape_and_the_password_where_it_stands_alone(env, tmp_path):
    set_dir, run_dir = env
    lines = stream_json_lines(final_text=f"{FINAL_TEXT} The warehouse password is Tr0ub4dor3.")
    lines.insert(1, assistant("msg_0", tool_use("toolu_0", "Bash", {"command": "cat .env"})))
    lines.insert(2, tool_result("toolu_0", "\n".join([
        "DATABASE_URL=postgres://app:Tr0ub4dor3@db.internal:5432/shop",
        f"SESSION={JWT}",
        "aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "MAPS=AIzaSyA-1234567890abcdefghijklmnopqrstu",
        f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----"])))
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    copy = (run_dir / "artifacts" / "q1" / "_" / "transcript.jsonl").read_text()
    ledger = (run_dir / "events.jsonl").read_text()
    for secret in ("Tr0ub4dor3", JWT, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                   "AIzaSyA-1234567890abcdefghijklmnopqrstu", PEM_BODY):
        assert secret not in copy and secret not in ledger
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["answer_text"].endswith("The warehouse password is [REDACTED].")
    assert attempt["final_query"] == DECLARED  # ordinary Malloy is untouched


# ---------------------------------------------------------------- refusals and the CLI


def test_unknown_qid_is_refused_naming_cases_jsonl(env, tmp_path):
    set_dir, run_dir = env
    with pytest.raises(InputError, match="cases.jsonl"):
        record_attempt(run_dir, set_dir, "nope", transcript=write_lines(tmp_path / "t.jsonl", stream_json_lines()))


def test_recording_an_attempt_again_voids_the_first_recording(env, tmp_path):
    set_dir, run_dir = env
    t = write_lines(tmp_path / "t.jsonl", stream_json_lines())
    record_attempt(run_dir, set_dir, "q1", transcript=t)
    second = record_attempt(run_dir, set_dir, "q1", transcript=t)
    assert second.voided == 6  # the attempt and its five calls
    assert len(events_of(run_dir, "attempt")) == 1 and len(events_of(run_dir, "tool_call")) == 5
    assert second.transcript_path == "artifacts/q1/_/transcript.2.jsonl"


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], check=False, capture_output=True, text=True,
                          cwd=KIT_ROOT, timeout=600)


def test_cli_json_prints_one_document_with_the_recorded_attempt(env, tmp_path):
    set_dir, run_dir = env
    t = write_lines(tmp_path / "t.jsonl", stream_json_lines())
    proc = run_cli("--run", run_dir, "--set", set_dir, "--qid", "q1", "--sample", "2", "--transcript", t, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"qid", "sample", "phase", "attempt_event_id", "tool_calls", "voided", "submitted", "final_query",
            "final_query_source", "contaminated", "transcript_path"} <= doc.keys()
    assert (doc["qid"], doc["sample"], doc["tool_calls"]) == ("q1", 2, 5)


def test_cli_text_says_true_and_false_as_the_ledger_writes_them(env, tmp_path):
    # Issue 16 item 12: the text said `submitted True` and `contaminated: False`.
    set_dir, run_dir = env
    t = write_lines(tmp_path / "t.jsonl", stream_json_lines())
    proc = run_cli("--run", run_dir, "--set", set_dir, "--qid", "q1", "--transcript", t)
    assert "submitted true;" in proc.stdout and "contaminated: false" in proc.stdout
    assert "True" not in proc.stdout and "False" not in proc.stdout


def test_cli_refuses_a_folder_without_run_json_with_exit_3(tmp_path):
    set_dir = make_set(tmp_path)
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    t = write_lines(tmp_path / "t.jsonl", stream_json_lines())
    proc = run_cli("--run", empty, "--set", set_dir, "--qid", "q1", "--transcript", t, "--json")
    assert proc.returncode == 3
    assert "run.json" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_cli_host_log_without_answer_file_is_a_usage_error(env, tmp_path):
    set_dir, run_dir = env
    log = tmp_path / "h.json"
    log.write_text(json.dumps({"toolUses": []}))
    proc = run_cli("--run", run_dir, "--set", set_dir, "--qid", "q1", "--host-log", log)
    assert proc.returncode == 2


def test_host_log_given_as_transcript_without_answer_is_refused_like_host_log(env, tmp_path):
    # Issue 16 item 14: --host-log without --answer-file was refused while the same log passed
    # as --transcript was recorded silently with no answer text. One rule for both flags.
    set_dir, run_dir = env
    log = tmp_path / "h.json"
    log.write_text(json.dumps({"toolUses": [{"name": "malloy_executeQuery", "input": {"query": "run: x"}}]}))
    proc = run_cli("--run", run_dir, "--set", set_dir, "--qid", "q1", "--transcript", log)
    assert proc.returncode == 2
    assert "--host-log with --answer-file" in proc.stderr and "Traceback" not in proc.stderr
    assert events_of(run_dir, "attempt") == []


def test_transcript_given_as_host_log_is_a_usage_error(env, tmp_path):
    set_dir, run_dir = env
    t = write_lines(tmp_path / "t.jsonl", stream_json_lines())
    answer = tmp_path / "a.md"
    answer.write_text("42")
    proc = run_cli("--run", run_dir, "--set", set_dir, "--qid", "q1", "--host-log", t,
                   "--answer-file", answer)
    assert proc.returncode == 2 and "pass it as --transcript" in proc.stderr


def test_cli_unreadable_transcript_names_the_file_and_exits_3(env, tmp_path):
    set_dir, run_dir = env
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "assistant"\nnot json at all\n{"type": "result"}\n')
    proc = run_cli("--run", run_dir, "--set", set_dir, "--qid", "q1", "--transcript", bad)
    assert proc.returncode == 3
    assert "bad.jsonl:1" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- contamination on the attempt


def test_clean_transcript_records_contaminated_false(env, tmp_path):
    set_dir, run_dir = env
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", stream_json_lines()))
    [attempt] = events_of(run_dir, "attempt")
    assert (attempt["contaminated"], attempt["contamination_reasons"]) == (False, [])


def test_reading_the_set_records_contaminated_with_the_reason(env, tmp_path):
    set_dir, run_dir = env
    lines = stream_json_lines()
    lines.insert(1, assistant("msg_0", tool_use("toolu_0", "Read", {"file_path": str(set_dir / "cases.jsonl")})))
    record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["contaminated"] is True
    assert attempt["contamination_reasons"][0]["rule"] == "eval-area"
    assert attempt["contamination_reasons"][0]["tool_use_index"] == 0


def test_reported_calls_above_host_tool_uses_is_contaminated(env, tmp_path):
    set_dir, run_dir = env
    t = write_lines(tmp_path / "t.jsonl", stream_json_lines())
    record_attempt(run_dir, set_dir, "q1", transcript=t, reported_calls=9)
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["reported_calls"] == 9 and attempt["host_tool_uses"] == 6
    assert attempt["contaminated"] is True


def test_output_format_json_verbose_array_is_read_like_stream_json(tmp_path):
    path = tmp_path / "session.json"
    path.write_text(json.dumps(stream_json_lines()))
    parsed = parse_transcript(path)
    assert parsed.format == "stream-json"
    assert len(parsed.tool_uses) == 6 and parsed.answer_text == FINAL_TEXT and parsed.num_turns == 7


def test_non_publisher_mcp_tool_counts_as_mcp_but_is_not_recorded(env, tmp_path):
    set_dir, run_dir = env
    lines = [assistant("m1", tool_use("t1", "mcp__github__search_code", {"q": "revenue"})),
             tool_result("t1", "nothing"),
             assistant("m2", {"type": "text", "text": "No idea."})]
    out = record_attempt(run_dir, set_dir, "q1", transcript=write_lines(tmp_path / "t.jsonl", lines))
    [attempt] = events_of(run_dir, "attempt")
    assert (attempt["host_tool_uses"], attempt["mcp_tool_uses"], out.tool_calls) == (1, 1, 0)


def test_new_generation_entity_without_a_usable_id_is_minted_from_type_source_and_name():
    summary = ranked_summary({"sources": [{"source_info": {"name": "books"},
                                           "entities": [{"name": "genre", "entity_type": "DIMENSION",
                                                         "relevance": "high"}]}]})
    assert summary["entity_ids"] == ["source:books:books", "dimension:books:genre"]
    assert summary["hits"][1] == {"entity_id": "dimension:books:genre", "relevance": None, "position": 1}


def test_cli_bad_sample_is_a_usage_error_said_in_words(tmp_path):
    # argparse names the type function on a bad value; the message must not leak `_count`.
    (tmp_path / "t.jsonl").write_text("")
    proc = run_cli("--run", tmp_path, "--set", tmp_path, "--qid", "q1", "--transcript",
                   tmp_path / "t.jsonl", "--sample", "abc")
    assert proc.returncode == 2
    assert "'abc' is not a whole number" in proc.stderr and "_count" not in proc.stderr


# Regression (hostile input): the transcript copy followed a link planted in the artifact folder.
def test_transcript_copy_is_never_written_through_a_planted_link(env, tmp_path):
    set_dir, run_dir = env
    folder = run_dir / "artifacts" / "q1" / "_"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / "transcript.jsonl").symlink_to(outside / "copy.jsonl")
    with pytest.raises(InputError, match="symbolic link"):
        record_attempt(run_dir, set_dir, "q1",
                       transcript=write_lines(tmp_path / "t.jsonl", stream_json_lines()))
    assert list(outside.iterdir()) == [] and events_of(run_dir, "attempt") == []



# ---------------------------------------------------------------- hostile input (fuzzed)
# Regressions: a transcript whose `type` is an object or a list, or that spells a lone surrogate
# (`\ud800`), made record_attempt die with a traceback.

BOOKSHOP = KIT_ROOT / "evals" / "bookshop"
SAMPLE_TRANSCRIPTS = sorted((BOOKSHOP / "transcripts").rglob("*.jsonl"))


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@FUZZ
@given(data=st.data())
def test_mutated_transcript_parses_or_is_refused_in_one_line(tmp_path_factory, data):
    source = data.draw(st.sampled_from(SAMPLE_TRANSCRIPTS))
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    text = data.draw(mutated_lines(read_lines(source)))
    if data.draw(st.booleans()):
        path.write_bytes(data.draw(damaged_bytes(text.encode())))
    else:
        path.write_text(text)
    reads_or_refuses(lambda: parse_transcript(path), path)


@FUZZ
@given(data=st.data())
def test_recording_a_hostile_transcript_records_a_valid_attempt_or_writes_nothing(tmp_path_factory,
                                                                                  data):
    root = tmp_path_factory.mktemp("fuzz")
    set_dir = make_set(root)
    run_dir = make_run(root, set_dir)
    good = write_lines(root / "good.jsonl", stream_json_lines())
    record_attempt(run_dir, set_dir, "q1", transcript=good)  # already written: must not be lost
    before = _tree(run_dir)
    source = data.draw(st.sampled_from(SAMPLE_TRANSCRIPTS))
    path = root / "t.jsonl"
    path.write_text(data.draw(mutated_lines(read_lines(source))))
    recorded = reads_or_refuses(lambda: record_attempt(run_dir, set_dir, "q2", transcript=path),
                                path)
    if recorded is None:
        assert _tree(run_dir) == before
    else:
        assert all(after == before[name] for name, after in _tree(run_dir).items()
                   if name in before and name not in ("events.jsonl",))
        assert (run_dir / "events.jsonl").read_bytes().startswith(before["events.jsonl"])
        assert validate_run(run_dir).exit_code == 0


def test_record_attempt_script_refuses_an_object_type_with_exit_3_and_one_line(env, tmp_path):
    set_dir, run_dir = env
    lines = stream_json_lines()
    lines[3] = {"type": {"a": 1}, "message": {}}
    path = write_lines(tmp_path / "t.jsonl", lines)
    out = subprocess.run([sys.executable, str(SCRIPT), "--run", str(run_dir), "--set", str(set_dir),
                          "--qid", "q1", "--transcript", str(path)], capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 3 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "t.jsonl:4: type: expected a string" in out.stderr


def test_lone_surrogate_in_a_transcript_is_recorded_as_a_replacement_character(env, tmp_path):
    set_dir, run_dir = env
    path = tmp_path / "t.jsonl"
    path.write_text(write_lines(tmp_path / "x.jsonl", stream_json_lines(
        final_text="Revenue is 10 \ud800.")).read_text())
    out = subprocess.run([sys.executable, str(SCRIPT), "--run", str(run_dir), "--set", str(set_dir),
                          "--qid", "q1", "--transcript", str(path)], capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    [attempt] = events_of(run_dir, "attempt")
    assert attempt["answer_text"].endswith("10 \ufffd.") and validate_run(run_dir).exit_code == 0
