"""`anthropic:<model>`: the kit's own tool-use loop, the answerer for users without Claude Code.

The loop lists the endpoint's tools through the kit's MCP client, hands the model only the
Publisher's (no file, shell or web tool exists in this loop), forwards every `tool_use` to the
endpoint and every result back, and stops at the final answer, the turn limit, the attempt's
deadline or the budget. It writes the session as Claude Code stream-json (`stream.StreamJson`),
so recording, contamination and every check read it unchanged. One model call is one turn.

Before each call the budget is asked for the most that call could cost (its input so far, all of
`max_tokens` as output); a call the budget cannot cover is not made (`BudgetStop`). Rate limits,
overload and server errors are retried with backoff inside the attempt; an error that outlives
the retries, or an endpoint that stops answering, ends the session as a harness failure
(`SessionFailed`), never as an attempt.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from malloy_evals.answer.harness.isolation import MCP_SERVER_NAME, answerer_tools
from malloy_evals.answer.harness.stream import StreamJson, Usage, tool_result_content
from malloy_evals.core.errors import KitError, UnmeasuredError
from malloy_evals.endpoint.mcp_client import (
    McpClient,
    McpConnectionError,
    McpProtocolError,
    connect,
)
from malloy_evals.llm.anthropic import RETRY_STATUS, AnthropicProvider, status_text
from malloy_evals.llm.prices import Price, cost_usd, price_for

MAX_TOKENS = 4096          # per model call
CALL_TIMEOUT_S = 120.0     # one Messages API call, within the attempt's own deadline
RETRIES = 4                # per call, on 429 / 5xx / overloaded / timeouts


class SessionFailed(Exception):
    """The model or the endpoint failed (after retries): not an attempt, a harness failure."""

    def __init__(self, message: str, cost_usd: float | None):
        super().__init__(message)
        self.cost_usd = cost_usd


class BudgetStop(Exception):
    """The next call could exceed --max-cost-usd, so it was not made."""

    def __init__(self, message: str, cost_usd: float | None):
        super().__init__(message)
        self.cost_usd = cost_usd


class Reserve(Protocol):
    """What a loop asks of the run's budget: `take(most)` before a call (False: do not call),
    `settle(most, spent)` after it. The harness's `Budget` is one."""

    def take(self, most: float) -> bool: ...

    def settle(self, most: float, spent: float | None) -> None: ...


@dataclass(frozen=True)
class ApiSession:
    """How one API session ended: the transcript at `path` is complete and ready to record."""

    subtype: str               # success | error_max_turns | error_timeout
    turns: int
    cost_usd: float | None


@dataclass
class ApiAnswerer:
    """`anthropic:<model>` with its client, prices and limits (one per run, shared by threads)."""

    model: str
    client: Any
    price: Price | None
    max_tokens: int = MAX_TOKENS
    retries: int = RETRIES
    backoff_seconds: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    @classmethod
    def create(cls, model: str) -> ApiAnswerer:
        """The answerer with an SDK client; without ANTHROPIC_API_KEY it raises UnmeasuredError
        (exit 3) naming the variable, as every anthropic: role does."""
        try:
            client = AnthropicProvider(model, timeout_seconds=CALL_TIMEOUT_S).client()
        except UnmeasuredError:
            raise UnmeasuredError(f"anthropic:{model} as the answerer needs ANTHROPIC_API_KEY in "
                                  "the environment; without a key, answer with --answerer "
                                  "claude-code or --answerer-cmd") from None
        return cls(model=model, client=client, price=price_for(model))

    # ---- one call

    def most_cost(self, input_tokens: int) -> float | None:
        """The most a call with about `input_tokens` of input can cost: input at the dearer of
        the plain and cache-write rates, and every one of `max_tokens` spent on output."""
        if self.price is None:
            return None
        rate_in = max(self.price.input, self.price.cache_write)
        return (input_tokens * rate_in + self.max_tokens * self.price.output) / 1_000_000

    def call_cost(self, usage: dict[str, Any], model: str | None) -> float | None:
        """Dollars of one call, priced by the dated id the API reported, else by the id asked
        for; None when neither is in reference/prices.md (unknown, never 0)."""
        def priced(model_id: str) -> float | None:
            return cost_usd(model_id, input_tokens=usage.get("input_tokens"),
                            output_tokens=usage.get("output_tokens"),
                            cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
                            cache_write_tokens=usage.get("cache_creation_input_tokens") or 0)

        cost = priced(model) if model else None
        return cost if cost is not None else priced(self.model)

    def create_message(self, params: dict[str, Any], deadline: float) -> Any:
        """One Messages API call, retried on the transient failures; `TimeoutError` when the
        attempt's deadline passes, `SessionFailed` (cost unknown here) when it gives up."""
        import anthropic

        last = "no call made"
        for attempt in range(self.retries + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            try:
                return self.client.messages.create(**params,
                                                   timeout=min(CALL_TIMEOUT_S, remaining))
            except anthropic.APIStatusError as exc:
                if exc.status_code not in RETRY_STATUS and exc.status_code < 500:
                    raise SessionFailed(f"{self.model}: {status_text(exc)}", None) from None
                last = status_text(exc)
            except (anthropic.APITimeoutError, anthropic.APIConnectionError) as exc:
                if deadline - time.monotonic() <= 0:
                    raise TimeoutError from None
                last = f"{type(exc).__name__}: {exc}"
            if attempt < self.retries:
                self.sleep(min(self.backoff_seconds * (2 ** attempt),
                               max(0.0, deadline - time.monotonic())))
        raise SessionFailed(f"{self.model}: gave up after {self.retries + 1} tries: {last}", None)


def _block_dict(block: Any) -> dict[str, Any]:
    """A response content block as the message param (and transcript block) it stands for."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    return block.to_dict() if hasattr(block, "to_dict") else dict(block)


def _usage_dict(message: Any) -> dict[str, Any]:
    usage = getattr(message, "usage", None)
    out: dict[str, Any] = {}
    for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                 "cache_creation_input_tokens"):
        value = getattr(usage, name, None)
        if isinstance(value, int):
            out[name] = value
    return out


def _chars_to_tokens(value: Any) -> int:
    """A rough token count (4 characters a token) for the budget's estimate; never billed."""
    return len(json.dumps(value, ensure_ascii=False)) // 4 + 1


def _call_tool(mcp: McpClient, allowed: set[str], block: dict[str, Any],
               deadline: float) -> dict[str, Any]:
    """Run one tool_use through the endpoint; the model's own mistakes (a tool it was not given,
    arguments the server refuses) go back to it as error results. A dead endpoint raises."""
    name = block["name"]
    if name not in allowed:
        return {"tool_use_id": block["id"], "is_error": True,
                "content": [{"type": "text", "text": f"no tool named {name!r} is available"}]}
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    try:
        result = mcp.call(name, block.get("input") or {}, timeout=remaining)
    except McpProtocolError as exc:
        return {"tool_use_id": block["id"], "is_error": True,
                "content": [{"type": "text", "text": exc.message}]}
    except McpConnectionError:
        if deadline - time.monotonic() <= 0:
            raise TimeoutError from None
        raise
    return {"tool_use_id": block["id"], "is_error": result.is_error,
            "content": tool_result_content(result)}


def run_api_session(answerer: ApiAnswerer, *, mcp_url: str, question: str, system_prompt: str,
                    workdir: Path, max_turns: int, timeout: float, budget: Reserve,
                    transcript: Path) -> ApiSession:
    """One blind attempt through the Messages API, written to `transcript` as stream-json.

    `timeout` counts from the session's init line, written once the endpoint is connected and
    has listed its tools (its readiness), as a command answerer's counts from its first output:
    connecting waits up to the MCP client's start-up ceiling instead."""
    started = time.monotonic()
    spent: float | None = 0.0
    usage = Usage()
    turns = 0

    def add_cost(call: float | None) -> None:
        nonlocal spent
        spent = None if call is None or spent is None else spent + call

    try:
        mcp = connect(url=mcp_url)
    except KitError as exc:
        raise SessionFailed(f"the endpoint did not answer: {exc}", 0.0) from None
    try:
        with transcript.open("x", encoding="utf-8") as fh:  # created fresh, never through a link
            try:
                listed = mcp.tool_specs()
            except KitError as exc:
                raise SessionFailed(f"the endpoint did not list its tools: {exc}", 0.0) from None
            names = answerer_tools([spec["name"] for spec in listed])
            specs = [spec for spec in listed if spec["name"] in names]
            if not specs:
                raise SessionFailed("the endpoint offers no get_context or execute_query tool", 0.0)
            writer = StreamJson(fh, session_id=str(uuid.uuid4()), model=answerer.model)
            writer.init(cwd=str(workdir), tools=[s["name"] for s in specs],
                        mcp_servers=[{"name": MCP_SERVER_NAME, "status": "connected"}])
            deadline = time.monotonic() + timeout
            params: dict[str, Any] = {
                "model": answerer.model, "max_tokens": answerer.max_tokens,
                "system": [{"type": "text", "text": system_prompt,
                            "cache_control": {"type": "ephemeral"}}],
                "tools": specs,
            }
            messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
            input_estimate = _chars_to_tokens([system_prompt, specs, question])
            allowed = {s["name"] for s in specs}

            def finish(subtype: str, answer: str | None) -> ApiSession:
                writer.result(subtype=subtype, answer=answer, num_turns=turns,
                              duration_ms=int((time.monotonic() - started) * 1000), usage=usage,
                              cost_usd=spent)
                return ApiSession(subtype, turns, spent)

            while True:
                if time.monotonic() >= deadline:
                    return finish("error_timeout", None)
                most = answerer.most_cost(input_estimate)
                if most is not None and not budget.take(most):
                    raise BudgetStop("--max-cost-usd would be exceeded by the next model call",
                                     spent)
                try:
                    message = answerer.create_message({**params, "messages": messages}, deadline)
                except TimeoutError:
                    if most is not None:
                        budget.settle(most, 0.0)
                    return finish("error_timeout", None)
                except SessionFailed as exc:
                    if most is not None:
                        budget.settle(most, 0.0)
                    raise SessionFailed(str(exc), spent) from None
                call_usage = _usage_dict(message)
                call_cost = answerer.call_cost(call_usage, getattr(message, "model", None))
                if most is not None:
                    budget.settle(most, call_cost)
                add_cost(call_cost)
                usage.add(call_usage)
                turns += 1
                content = [_block_dict(b) for b in message.content]
                writer.assistant(content, message_id=str(message.id), usage=call_usage)
                messages.append({"role": "assistant", "content": content})
                input_estimate = sum(call_usage.get(k, 0) for k in (
                    "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")) \
                    + _chars_to_tokens(content)
                uses = [b for b in content if b.get("type") == "tool_use"]
                if message.stop_reason == "tool_use" and uses:
                    try:
                        results = [_call_tool(mcp, allowed, b, deadline) for b in uses]
                    except TimeoutError:
                        return finish("error_timeout", None)
                    except McpConnectionError as exc:
                        raise SessionFailed(f"the endpoint stopped answering: {exc}", spent) from None
                    writer.tool_results(results)
                    messages.append({"role": "user", "content": [
                        {"type": "tool_result", **r} for r in results]})
                    input_estimate += _chars_to_tokens(results)
                    if turns >= max_turns:
                        return finish("error_max_turns", None)
                    continue
                if message.stop_reason == "pause_turn":
                    if turns >= max_turns:
                        return finish("error_max_turns", None)
                    continue
                answer = "".join(b["text"] for b in content if b.get("type") == "text").strip()
                return finish("success", answer)
    finally:
        mcp.close()
