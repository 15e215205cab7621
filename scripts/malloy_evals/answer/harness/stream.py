"""Writing a session in Claude Code's stream-json format, the transcript shape the kit reads.

The API answerer and the kit's scripted answerer both write their sessions with `StreamJson`, so
`record_attempt` reads them exactly as it reads a `claude -p --output-format stream-json` session
(skills/eval-answer/reference/transcript-format.md): a `system` init line with `cwd`, `assistant`
lines holding `text` and `tool_use` blocks, `user` lines holding the matching `tool_result`
blocks, and one closing `result` line with usage, cost and turns. Every line is flushed as it is
written, so a session cut off mid-way leaves every whole line it reached.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TextIO

from malloy_evals.endpoint.mcp_client import ToolResult


@dataclass
class Usage:
    """Token counts summed over a session's model calls (None: never reported)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def add(self, other: dict[str, Any]) -> None:
        """Add one call's usage; a count the call did not report leaves the total as it was."""
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                     "cache_creation_input_tokens"):
            value = other.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, name, (getattr(self, name) or 0) + value)

    def to_json(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if v is not None}


def tool_result_content(result: ToolResult) -> list[dict[str, str]]:
    """An MCP tool result as the text blocks Claude Code stores in a `tool_result`: the resource
    text (the JSON payload) first, then any text block, in the server's order."""
    return [{"type": "text", "text": text} for text in result.texts]


@dataclass
class StreamJson:
    """One session written line by line to `out` (an open text stream)."""

    out: TextIO
    session_id: str
    model: str | None = None
    lines: int = field(default=0, init=False)

    def _write(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()
        self.lines += 1

    def init(self, *, cwd: str, tools: list[str], mcp_servers: list[dict[str, str]]) -> None:
        """The opening `system` line: where the session ran and what it could call."""
        self._write({"type": "system", "subtype": "init", "cwd": cwd, "session_id": self.session_id,
                     "tools": tools, "mcp_servers": mcp_servers, "model": self.model,
                     "permissionMode": "default"})

    def assistant(self, content: list[dict[str, Any]], *, message_id: str,
                  usage: dict[str, Any] | None = None) -> None:
        """One assistant message: text and tool_use blocks as the model returned them."""
        message: dict[str, Any] = {"id": message_id, "type": "message", "role": "assistant",
                                   "model": self.model, "content": content}
        if usage:
            message["usage"] = usage
        self._write({"type": "assistant", "message": message, "parent_tool_use_id": None,
                     "session_id": self.session_id})

    def tool_results(self, results: list[dict[str, Any]]) -> None:
        """One user message carrying `tool_result` blocks ({tool_use_id, content, is_error})."""
        blocks = [{"type": "tool_result", **r} for r in results]
        self._write({"type": "user", "message": {"role": "user", "content": blocks},
                     "parent_tool_use_id": None, "session_id": self.session_id})

    def result(self, *, subtype: str, answer: str | None, num_turns: int, duration_ms: int,
               usage: Usage, cost_usd: float | None, is_error: bool | None = None) -> None:
        """The closing `result` line. `subtype` is `success`, `error_max_turns` or
        `error_timeout`; `cost_usd` None means unknown (never written as 0). `is_error` defaults
        to "not a success" (Claude Code also reports API errors as `success` with is_error)."""
        error = subtype != "success" if is_error is None else is_error
        self._write({"type": "result", "subtype": subtype, "is_error": error,
                     "duration_ms": duration_ms, "num_turns": num_turns, "result": answer or "",
                     "session_id": self.session_id, "total_cost_usd": cost_usd,
                     "usage": usage.to_json()})
