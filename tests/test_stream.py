"""Sessions written as stream-json by the kit read back through record_attempt's own reader."""

from __future__ import annotations

import io

from malloy_evals.answer.harness.stream import StreamJson, Usage, tool_result_content
from malloy_evals.answer.transcripts import parse_transcript
from malloy_evals.endpoint.mcp_client import ToolResult


def test_a_written_session_reads_back_with_its_calls_answer_usage_and_cost(tmp_path):
    buf = io.StringIO()
    writer = StreamJson(buf, session_id="s1", model="m")
    writer.init(cwd="/tmp/work", tools=["malloy_getContext"],
                mcp_servers=[{"name": "malloy", "status": "connected"}])
    writer.assistant([{"type": "tool_use", "id": "t1", "name": "malloy_executeQuery",
                       "input": {"query": "run: a -> { aggregate: n }"}}],
                     message_id="m1", usage={"input_tokens": 10, "output_tokens": 2})
    result = ToolResult(payload={"rows": [{"n": 1}]}, texts=['{"rows": [{"n": 1}]}'], is_error=False)
    writer.tool_results([{"tool_use_id": "t1", "content": tool_result_content(result),
                          "is_error": False}])
    writer.assistant([{"type": "text", "text": "n is 1"}], message_id="m2",
                     usage={"input_tokens": 20, "output_tokens": 3})
    usage = Usage()
    usage.add({"input_tokens": 10, "output_tokens": 2})
    usage.add({"input_tokens": 20, "output_tokens": 3, "cache_read_input_tokens": 5})
    writer.result(subtype="success", answer="n is 1", num_turns=2, duration_ms=1500,
                  usage=usage, cost_usd=None)
    path = tmp_path / "t.jsonl"
    path.write_text(buf.getvalue())
    parsed = parse_transcript(path)
    assert parsed.format == "stream-json" and parsed.cwd == "/tmp/work"
    assert [u.name for u in parsed.tool_uses] == ["malloy_executeQuery"]
    assert parsed.tool_uses[0].is_error is False and parsed.answer_text == "n is 1"
    assert (parsed.input_tokens, parsed.output_tokens, parsed.cache_read_tokens) == (30, 5, 5)
    assert parsed.cost_usd is None and parsed.num_turns == 2 and parsed.wall_seconds == 1.5
    assert not parsed.truncated and parsed.run_error is None


def test_an_api_error_reported_as_success_is_still_an_error_line():
    buf = io.StringIO()
    StreamJson(buf, session_id="s").result(subtype="success", answer="API Error", num_turns=0,
                                           duration_ms=0, usage=Usage(), cost_usd=None,
                                           is_error=True)
    assert '"is_error": true' in buf.getvalue() and '"usage": {}' in buf.getvalue()
