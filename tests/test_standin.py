"""The model stand-in (llm/standin.py): scripted turns through the real `anthropic` SDK, streamed
and not, matched by question and turn; every request logged; anything unscripted refused."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import anthropic
import pytest
from claude_support import write_script
from malloy_evals.core.errors import InputError
from malloy_evals.llm import standin

KIT = Path(__file__).resolve().parents[1]
QUESTION = "What is the shop's total revenue across all the data we have?"
TURNS = [
    {"text": "Looking.", "tool_use": {"name": "mcp__malloy__malloy_getContext",
                                      "input": {"query": "total revenue"}}},
    "Total revenue is $90,963.84.",
]


def _client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk-standin", max_retries=0)


def _after_first_turn(reply_content: list) -> list[dict]:
    use = next(b for b in reply_content if b["type"] == "tool_use")
    return [{"role": "user", "content": QUESTION},
            {"role": "assistant", "content": reply_content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                          "content": "revenue: measure"}]}]


def test_turns_replay_in_order_through_the_sdk_streamed_and_not(tmp_path):
    script = write_script(tmp_path, "rev", QUESTION, TURNS)
    log = tmp_path / "requests.jsonl"
    tools = [{"name": "mcp__malloy__malloy_getContext", "description": "d",
              "input_schema": {"type": "object"}}]
    with standin.serve(standin.load_scripts([script]), log_path=log) as server:
        client = _client(server.url)
        first = client.messages.create(model="m", max_tokens=100, tools=tools,  # type: ignore[arg-type]
                                       messages=[{"role": "user", "content": f"Q: {QUESTION}"}])
        assert first.stop_reason == "tool_use"
        assert [b.type for b in first.content] == ["text", "tool_use"]
        use = first.content[1]
        assert use.name == "mcp__malloy__malloy_getContext" and use.input == {"query": "total revenue"}
        with client.messages.stream(model="m", max_tokens=100, tools=tools,  # type: ignore[arg-type]
                                    messages=_after_first_turn([b.model_dump() for b in first.content])) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "end_turn"
        assert [b.text for b in final.content if b.type == "text"] == ["Total revenue is $90,963.84."]
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["turn"], e["stream"], e["tools"]) for e in logged] == [
        (0, False, ["mcp__malloy__malloy_getContext"]), (1, True, ["mcp__malloy__malloy_getContext"])]


def test_a_request_with_no_scripted_turn_is_refused_with_400_and_says_why(tmp_path):
    script = write_script(tmp_path, "rev", QUESTION, ["Total revenue is $90,963.84."])
    with standin.serve(standin.load_scripts([script])) as server:
        client = _client(server.url)
        # A question no script holds.
        with pytest.raises(anthropic.BadRequestError, match="no model script answers"):
            client.messages.create(model="m", max_tokens=10,
                                   messages=[{"role": "user", "content": "How many books?"}])
        # A turn past the script's last.
        with pytest.raises(anthropic.BadRequestError, match="has 1 turn.*asks for turn 2"):
            client.messages.create(model="m", max_tokens=10, messages=[
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": "Total revenue is $90,963.84."},
                {"role": "user", "content": "And by genre?"}])
        # Another route: refused in the API's error shape.
        request = urllib.request.Request(server.url + "/v1/complete", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=30)
        assert caught.value.code == 404
        assert json.loads(caught.value.read())["error"]["message"].startswith("stand-in: no route")
        refused = [r for r in server.requests if r["status"] != 200]
    assert len(refused) == 3 and all(r["refused"] for r in refused)


def test_count_tokens_answers_with_the_same_estimate(tmp_path):
    script = write_script(tmp_path, "rev", QUESTION, ["x"])
    with standin.serve(standin.load_scripts([script])) as server:
        counted = _client(server.url).messages.count_tokens(
            model="m", messages=[{"role": "user", "content": QUESTION}])
    assert counted.input_tokens > 0


@pytest.mark.parametrize("doc, message", [
    pytest.param({"turns": ["x"]}, "question:", id="no-question"),
    pytest.param({"question": "q", "turns": []}, "turns:", id="no-turns"),
    pytest.param({"question": "q", "turns": [{"tool_use": {"input": {}}}]}, "needs a `name`",
                 id="nameless-tool"),
    pytest.param({"question": "q", "turns": [{"say": "x"}]}, "a turn is a string", id="unknown-key"),
])
def test_a_malformed_script_names_its_file(tmp_path, doc, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=message) as caught:
        standin.load_scripts([path])
    assert str(caught.value.path) == str(path)


def test_the_script_prints_its_url_once_listening_and_refuses_a_missing_script(tmp_path):
    script = write_script(tmp_path, "rev", QUESTION, ["Total revenue is $90,963.84."])
    proc = subprocess.Popen([sys.executable, str(KIT / "scripts" / "model_standin.py"),
                             "--scripts", str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the readiness signal: printed once it accepts connections
        assert line.startswith("listening http://127.0.0.1:")
        reply = _client(line.split()[1]).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": QUESTION}])
        assert reply.content[0].type == "text"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    missing = subprocess.run([sys.executable, str(KIT / "scripts" / "model_standin.py"),
                              "--scripts", str(tmp_path / "nope.json")],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "no such file" in missing.stderr
