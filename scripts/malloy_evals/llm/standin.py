"""A loopback Messages API that replays model scripts: the model's side of a session, written in
advance, so a real client (Claude Code, the `anthropic` SDK) runs end to end offline.

A *model script* is one JSON document per attempt: the question it answers and the assistant turns
in order (reference/model-scripts.md has the format). A request is matched to a script by its
first user message, which must contain the script's `question`; the turn it gets is the number of
assistant messages the request already holds, so the server keeps no session state and any
number of attempts may run at once. A request no script answers, or one past a script's last
turn, is refused with HTTP 400 and a message saying why: nothing is ever made up.

Replies come in the API's own shapes: a `message` object, or, when the request asks for
`stream`, server-sent events (`message_start`, `content_block_start`, `content_block_delta` with
`text_delta` or `input_json_delta`, `content_block_stop`, `message_delta`, `message_stop`).
`POST /v1/messages/count_tokens` answers with the same token estimate the replies carry (bytes
over four: the stand-in has no tokenizer, and says so here). Every request is logged as one JSON
line: what was asked, which tools were offered, which script and turn answered, and the status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from malloy_evals.core import jsonl
from malloy_evals.core.errors import InputError

DEFAULT_MODEL = "claude-sonnet-4-5"
MESSAGES_PATH = "/v1/messages"
COUNT_PATH = "/v1/messages/count_tokens"
_TURN_KEYS = {"text", "tool_use", "stop_reason"}


# ---------------------------------------------------------------- model scripts

@dataclass(frozen=True)
class ScriptedTurn:
    """One assistant message: optional text, then tool uses (each `{"name", "input"}`)."""

    text: str | None
    tool_uses: tuple[dict[str, Any], ...]
    stop_reason: str

    def content(self, script_no: int, turn_no: int) -> list[dict[str, Any]]:
        """The message's content blocks; tool-use ids are fixed by script, turn and position, so a
        replayed session is the same every time."""
        blocks: list[dict[str, Any]] = []
        if self.text is not None:
            blocks.append({"type": "text", "text": self.text})
        for i, use in enumerate(self.tool_uses):
            blocks.append({"type": "tool_use", "id": f"toolu_s{script_no}t{turn_no}u{i}",
                           "name": use["name"], "input": use["input"]})
        return blocks


@dataclass(frozen=True)
class ModelScript:
    """The model's turns for every session whose first user message contains `question`."""

    question: str
    turns: tuple[ScriptedTurn, ...]
    model: str = DEFAULT_MODEL
    source: str = ""          # the file it came from, for the log and the messages


def _turn(raw: Any, where: Path, i: int) -> ScriptedTurn:
    if isinstance(raw, str):
        return ScriptedTurn(raw, (), "end_turn")
    if not isinstance(raw, dict) or not raw or set(raw) - _TURN_KEYS:
        raise InputError(where, None, f"turns[{i}]: a turn is a string (the final answer) or an "
                                      f"object with {', '.join(sorted(_TURN_KEYS))}")
    text = raw.get("text")
    if text is not None and not isinstance(text, str):
        raise InputError(where, None, f"turns[{i}].text: must be a string")
    uses = raw.get("tool_use") or []
    uses = [uses] if isinstance(uses, dict) else uses
    if not isinstance(uses, list):
        raise InputError(where, None, f"turns[{i}].tool_use: an object or a list of objects")
    for j, use in enumerate(uses):
        if not (isinstance(use, dict) and isinstance(use.get("name"), str)
                and isinstance(use.get("input", {}), dict)):
            raise InputError(where, None, f"turns[{i}].tool_use[{j}]: needs a `name` and an "
                                          "object `input`")
    if text is None and not uses:
        raise InputError(where, None, f"turns[{i}]: says nothing and calls nothing")
    stop = raw.get("stop_reason") or ("tool_use" if uses else "end_turn")
    return ScriptedTurn(text, tuple({"name": u["name"], "input": u.get("input", {})} for u in uses),
                        str(stop))


def parse_script(doc: Any, where: Path) -> ModelScript:
    """One model script from its JSON document (errors name the file)."""
    if not isinstance(doc, dict):
        raise InputError(where, None, "a model script is a JSON object")
    question, turns = doc.get("question"), doc.get("turns")
    if not isinstance(question, str) or not question.strip():
        raise InputError(where, None, "question: the text the session's first user message holds")
    if not isinstance(turns, list) or not turns:
        raise InputError(where, None, "turns: a non-empty list of assistant turns")
    model = doc.get("model", DEFAULT_MODEL)
    if not isinstance(model, str):
        raise InputError(where, None, "model: must be a string")
    return ModelScript(question, tuple(_turn(t, where, i) for i, t in enumerate(turns)), model,
                       str(where))


def load_scripts(paths: list[Path]) -> list[ModelScript]:
    """Model scripts from files (`*.json`) and folders of them, in name order."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.json")) if path.is_dir() else [path]
    scripts: list[ModelScript] = []
    for path in files:
        try:
            doc = jsonl.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(path, None, f"cannot be read: {exc}") from None
        except ValueError as exc:
            raise InputError(path, None, f"not JSON: {exc}") from None
        scripts.append(parse_script(doc, path))
    return scripts


# ---------------------------------------------------------------- matching a request

class Refusal(Exception):
    """A request the stand-in has no scripted reply for: HTTP 400 with this message."""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content
                         if isinstance(b, dict) and b.get("type") == "text")
    return ""


def first_user_text(messages: list[Any]) -> str:
    """The text of the request's first user message (all its text blocks)."""
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user":
            return _text_of(m.get("content"))
    return ""


def assistant_turns(messages: list[Any]) -> int:
    """How many assistant messages the conversation holds: the index of the turn owed next."""
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def choose(scripts: list[ModelScript], body: Mapping[str, Any]) -> tuple[int, ModelScript, int]:
    """(script number, script, turn number) for a Messages request, or Refusal saying why not."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refusal("stand-in: the request has no messages")
    first = first_user_text(messages)
    matches = [(i, s) for i, s in enumerate(scripts) if s.question in first]
    if not matches:
        raise Refusal("stand-in: no model script answers this conversation (no script's question "
                      f"is in its first user message, which begins {first[:160]!r})")
    if len(matches) > 1:
        names = ", ".join(s.source or f"#{i}" for i, s in matches)
        raise Refusal(f"stand-in: more than one model script answers this conversation ({names})")
    i, script = matches[0]
    k = assistant_turns(messages)
    if k >= len(script.turns):
        raise Refusal(f"stand-in: {script.source or 'the script'} has {len(script.turns)} turn(s) "
                      f"and this request asks for turn {k + 1}: no scripted turn for it")
    return i, script, k


def estimate_tokens(data: bytes | str) -> int:
    """Bytes over four: the stand-in has no tokenizer; the figure only has to be stable."""
    return max(1, len(data) // 4)


def message(script_no: int, script: ModelScript, turn_no: int, input_tokens: int) -> dict[str, Any]:
    """The non-streamed reply: one `message` object."""
    turn = script.turns[turn_no]
    content = turn.content(script_no, turn_no)
    return {"id": f"msg_standin_s{script_no}t{turn_no}", "type": "message", "role": "assistant",
            "model": script.model, "content": content, "stop_reason": turn.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": estimate_tokens(json.dumps(content)),
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def stream_events(reply: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The same reply as the API's server-sent events, in order."""
    head = {**reply, "content": [], "stop_reason": None,
            "usage": {**reply["usage"], "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": head}
    for i, block in enumerate(reply["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "text", "text": ""}}
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {**block, "input": {}}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": reply["usage"]["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


# ---------------------------------------------------------------- the server

def tool_names(body: Mapping[str, Any]) -> list[str]:
    """The names of the tools a request offers the model, in its order."""
    tools = body.get("tools")
    return [t.get("name", "") for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []


@dataclass
class StandIn:
    """The running server: its URL and the log of every request it got (also kept in memory)."""

    scripts: list[ModelScript]
    log_path: Path | None = None
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def answered(self) -> list[dict[str, Any]]:
        """The logged Messages requests that got a scripted turn."""
        with self._lock:
            return [r for r in self.requests if r.get("turn") is not None]


def _handler(stand_in: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send_json(self, status: int, payload: Mapping[str, Any]) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, kind: str, text: str, entry: dict[str, Any]) -> None:
            stand_in.record({**entry, "status": status, "refused": text})
            self._send_json(status, {"type": "error", "error": {"type": kind, "message": text}})

        def _entry(self, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
            path = self.path.split("?", 1)[0]
            entry: dict[str, Any] = {"method": self.command, "path": path,
                                     "user_agent": self.headers.get("user-agent", "")}
            if body is not None:
                messages = body.get("messages")
                n_messages = len(messages) if isinstance(messages, list) else 0
                entry.update(model=body.get("model"), stream=bool(body.get("stream")),
                             tools=tool_names(body), n_messages=n_messages, body=body)
            return entry

        def do_GET(self) -> None:
            self._error(404, "not_found_error", f"stand-in: no route GET {self.path}",
                        self._entry())

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = jsonl.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                body = None
            if not isinstance(body, dict):
                self._error(400, "invalid_request_error", "stand-in: the body is not a JSON object",
                            self._entry())
                return
            entry = self._entry(body)
            path = entry["path"]
            if path == COUNT_PATH:
                tokens = estimate_tokens(raw)
                stand_in.record({**entry, "status": 200, "input_tokens": tokens})
                self._send_json(200, {"input_tokens": tokens})
                return
            if path != MESSAGES_PATH:
                self._error(404, "not_found_error", f"stand-in: no route POST {path}", entry)
                return
            try:
                script_no, script, turn_no = choose(stand_in.scripts, body)
            except Refusal as exc:
                self._error(400, "invalid_request_error", str(exc), entry)
                return
            reply = message(script_no, script, turn_no, estimate_tokens(raw))
            stand_in.record({**entry, "status": 200, "script": script.source, "turn": turn_no,
                             "reply": reply["content"]})
            if not body.get("stream"):
                self._send_json(200, reply)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            for name, data in stream_events(reply):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

    return Handler


@contextmanager
def serve(scripts: list[ModelScript], *, port: int = 0,
          log_path: Path | None = None) -> Iterator[StandIn]:
    """Serve the scripts on 127.0.0.1 (port 0: an ephemeral one) until the block ends."""
    stand_in = StandIn(scripts, log_path=log_path)
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(stand_in))
    httpd.daemon_threads = True
    stand_in.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, name="model-standin", daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
