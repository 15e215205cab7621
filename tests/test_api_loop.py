"""The `anthropic:` answerer: the kit's tool-use loop through the real SDK, pointed at a loopback
stand-in of the Messages API that returns scripted turns, over the real MCP endpoint."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from harness_support import BOOKSHOP, KIT, answer, harness_lines, ledger, make_set, new_run
from malloy_evals.answer.harness import api_loop
from malloy_evals.answer.harness.plan import Budget
from malloy_evals.llm.prices import price_for
from malloy_evals.sets.eval_set import load_set

MODEL = "claude-haiku-4-5"   # priced: $1 in, $5 out per million tokens
QUERY = "run: order_items -> { aggregate: revenue }"
TOOL_TURNS = [
    {"stop_reason": "tool_use", "content": [
        {"type": "text", "text": "Let me look for revenue."},
        {"type": "tool_use", "id": "toolu_1", "name": "malloy_getContext",
         "input": {"environmentName": "samples", "packageName": "bookshop",
                   "query": "total revenue"}}]},
    {"stop_reason": "tool_use", "content": [
        {"type": "tool_use", "id": "toolu_2", "name": "malloy_executeQuery",
         "input": {"environmentName": "samples", "packageName": "bookshop",
                   "modelPath": "bookshop.malloy", "query": QUERY}}]},
    {"stop_reason": "end_turn", "content": [
        {"type": "text", "text": f"Total revenue is $90,963.84.\n\n```malloy\n{QUERY}\n```"}]},
]


class StandIn:
    """A loopback Messages API: the k-th POST gets turns[k] (or an error status), every request
    body is kept, and `delay` holds chosen replies back."""

    def __init__(self, turns: list[dict], *, input_tokens: int = 1000,
                 statuses: dict[int, int] | None = None, delay: dict[int, float] | None = None):
        self.turns = turns
        self.input_tokens = input_tokens
        self.statuses = statuses or {}
        self.delay = delay or {}
        self.requests: list[dict] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                k = len(stand_in.requests)
                stand_in.requests.append(body)
                time.sleep(stand_in.delay.get(k, 0))
                status = stand_in.statuses.get(k, 200)
                if status != 200:
                    payload = {"type": "error", "error": {"type": "api_error",
                                                          "message": f"scripted {status}"}}
                else:
                    turn = stand_in.turns[min(k, len(stand_in.turns) - 1)]
                    payload = {"id": f"msg_{k}", "type": "message", "role": "assistant",
                               "model": MODEL + "-20251001", "stop_sequence": None,
                               "usage": {"input_tokens": stand_in.input_tokens,
                                         "output_tokens": 100},
                               **turn}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up waiting (the timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stand_in(monkeypatch):
    """Start a stand-in with the given turns; the SDK finds it through ANTHROPIC_BASE_URL."""
    made: list[StandIn] = []

    def start(turns=TOOL_TURNS, **kwargs) -> StandIn:
        server = StandIn(turns, **kwargs)
        made.append(server)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
        return server

    yield start
    for server in made:
        server.close()


def api_argv(run, set_dir, url, *extra: str) -> list[str]:
    return ["--run", str(run.dir), "--set", str(set_dir), "--mcp-url", url,
            "--answerer", f"anthropic:{MODEL}", *extra]


def attempts(run) -> list[dict]:
    return [e for e in ledger(run) if e["kind"] == "attempt"]


def test_tool_use_turns_go_to_the_endpoint_and_the_session_is_recorded_as_stream_json(
        needs_node, tmp_path, capsys, stand_in, bookshop_mcp_url):
    api = stand_in()
    run = new_run(tmp_path, BOOKSHOP, "api1")
    code, doc, err = answer(api_argv(run, BOOKSHOP, bookshop_mcp_url, "--only",
                                     "bk_total_revenue"), capsys)
    assert code == 0, err
    [attempt] = attempts(run)
    assert attempt["final_query"] == QUERY and attempt["final_query_source"] == "declared"
    assert (attempt["n_get_context"], attempt["n_execute"], attempt["num_turns"]) == (1, 1, 3)
    # Three calls of 1000 input and 100 output tokens at $1 / $5 per million.
    assert attempt["cost_usd"] == pytest.approx(3 * (1000 * 1 + 100 * 5) / 1e6)
    assert attempt["input_tokens"] == 3000 and attempt["contaminated"] is False
    assert doc["outcomes"][0]["cost_usd"] == pytest.approx(0.0045)
    assert "bk_total_revenue submitted, 3 turns, $0.005, " in err

    first, _second, third = api.requests
    # The model is handed the Publisher's two tools and nothing else: no file or shell tool.
    assert sorted(t["name"] for t in first["tools"]) == ["malloy_executeQuery", "malloy_getContext"]
    assert "package `bookshop` of environment `samples`" in first["system"][0]["text"]
    assert first["messages"] == [{"role": "user", "content":
                                  load_set(BOOKSHOP).case("bk_total_revenue").question}]
    # The endpoint's real rows went back to the model as the tool result.
    [result] = third["messages"][-1]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_2"
    assert "90963.84" in result["content"][0]["text"]
    transcript = (run.dir / attempt["transcript_path"]).read_text().splitlines()
    init, last = json.loads(transcript[0]), json.loads(transcript[-1])
    assert init["subtype"] == "init" and not init["cwd"].startswith(str(KIT))
    assert last["type"] == "result" and last["subtype"] == "success" and last["num_turns"] == 3


def test_budget_stops_before_the_call_that_could_exceed_it_and_records_nothing(
        needs_node, tmp_path, capsys, stand_in, bookshop_mcp_url):
    # The first call may cost at most ~$0.022 (its input, all 4096 output tokens): under $0.025.
    # It reports 5000 input tokens ($0.0055), so the second could reach 0.0055 + ~0.027: refused.
    api = stand_in(input_tokens=5000)
    run = new_run(tmp_path, BOOKSHOP, "api2")
    code, doc, _err = answer(api_argv(run, BOOKSHOP, bookshop_mcp_url, "--only",
                                      "bk_total_revenue,bk_revenue_2024", "--max-cost-usd",
                                      "0.025"), capsys)
    assert code == 0 and doc["stop_kind"] == "budget"
    assert len(api.requests) == 1
    assert attempts(run) == []
    assert [o["outcome"] for o in doc["outcomes"]] == ["budget_stop", "not_run"]
    [stopped] = [t for t in harness_lines(run) if t["event"] == "try"]
    assert stopped["outcome"] == "budget_stop" and stopped["cost_usd"] == pytest.approx(0.0055)
    assert doc["spent_usd"] == pytest.approx(0.0055)


@pytest.mark.parametrize("flags, behaviour, run_error", [
    pytest.param(["--max-turns", "2"], {}, "error_max_turns", id="turn-limit"),
    pytest.param(["--timeout", "3"], {"delay": {1: 6.0}}, "error_timeout", id="no-answer-in-time"),
])
def test_a_cut_off_session_is_recorded_truncated(needs_node, tmp_path, capsys, stand_in,
                                                 bookshop_mcp_url, flags, behaviour, run_error):
    api = stand_in(**behaviour)
    run = new_run(tmp_path, BOOKSHOP, "api3")
    code, _doc, err = answer(api_argv(run, BOOKSHOP, bookshop_mcp_url, "--only",
                                      "bk_total_revenue", *flags), capsys)
    assert code == 0, err
    [attempt] = attempts(run)
    assert attempt["truncated"] is True and attempt["run_error"] == run_error
    # Two model calls were asked for; what the first one did is kept.
    assert len(api.requests) == 2 and attempt["n_get_context"] == 1


def test_a_refused_request_is_a_harness_failure_and_stops_the_run(
        needs_node, tmp_path, capsys, stand_in, bookshop_mcp_url):
    stand_in(statuses={k: 401 for k in range(10)})
    set_dir = make_set(tmp_path, {"bk_total_revenue": None, "bk_revenue_2024": None})
    run = new_run(tmp_path, set_dir, "api5")
    code, doc, _err = answer(api_argv(run, set_dir, bookshop_mcp_url, "--retries", "0",
                                      "--max-failures", "2"), capsys)
    assert code == 3 and doc["stop_kind"] == "failures"
    assert ledger(run) == []
    assert all("HTTP 401" in o["failure"] for o in doc["outcomes"])


def test_without_an_api_key_it_exits_3_naming_the_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    run = new_run(tmp_path, BOOKSHOP, "api6")
    code, _doc, err = answer(api_argv(run, BOOKSHOP, "http://127.0.0.1:9/mcp", "--only",
                                      "bk_total_revenue"), capsys)
    assert code == 3 and "ANTHROPIC_API_KEY" in err


def test_overload_is_retried_inside_the_attempt_and_a_missing_tool_is_told_to_the_model(
        needs_node, tmp_path, stand_in, bookshop_mcp_url):
    import anthropic

    turns = [{"stop_reason": "tool_use", "content": [
        {"type": "tool_use", "id": "toolu_r", "name": "Read",
         "input": {"file_path": str(BOOKSHOP / "cases.jsonl")}}]}, *TOOL_TURNS]
    api = stand_in(turns=[turns[0], *turns], statuses={0: 529})
    answerer = api_loop.ApiAnswerer(
        model=MODEL, price=price_for(MODEL), sleep=lambda _s: None,
        client=anthropic.Anthropic(base_url=api.url, api_key="test-key-not-real", max_retries=0))
    transcript = tmp_path / "t.jsonl"
    session = api_loop.run_api_session(
        answerer, mcp_url=bookshop_mcp_url, question="What is the total revenue?",
        system_prompt="Answer.", workdir=tmp_path, max_turns=10,
        timeout=600, budget=Budget(None), transcript=transcript)
    assert session.subtype == "success" and session.turns == 4
    assert len(api.requests) == 5  # the 529 was tried again
    refused = api.requests[2]["messages"][-1]["content"][0]
    assert refused["is_error"] is True and "no tool named 'Read'" in refused["content"][0]["text"]


def test_most_cost_assumes_every_output_token_and_the_dearer_input_rate():
    answerer = api_loop.ApiAnswerer(model=MODEL, client=None, price=price_for(MODEL))
    # haiku 4.5: input $1, cache write $1.25, output $5 per million; 4096 output tokens.
    assert answerer.most_cost(1000) == pytest.approx((1000 * 1.25 + 4096 * 5) / 1e6)
    assert api_loop.ApiAnswerer(model="claude-unpriced", client=None, price=None).most_cost(9) is None

