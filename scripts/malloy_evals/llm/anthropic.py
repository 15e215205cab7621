"""`anthropic:<model>`: the Messages API through the `anthropic` SDK (2.x).

Structured output goes through `output_config.format` (JSON schema); a model that refuses it gets
the same schema as a forced tool. The system text (for the judge: the doctrine) is one cached
block. Retries with exponential backoff on 429 / 5xx / 529 overloaded / timeouts are ours (the
SDK's own are off so every attempt is counted).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from malloy_evals.core.errors import UnmeasuredError, UsageError
from malloy_evals.llm.base import (
    STRUCTURED_TOOL,
    BudgetExhausted,
    CallStats,
    DryRun,
    LlmReply,
    LlmRequest,
    OneShot,
    ProviderError,
    canonical_json,
)
from malloy_evals.llm.prices import PRICES_PATH, Price, cost_usd, load_prices, price_for

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}


def estimate_tokens(request: LlmRequest) -> int:
    """A rough input-token count (4 characters a token) for --dry-run; never used for billing."""
    chars = len(request.system) + len(canonical_json(request.messages))
    if request.output_schema:
        chars += len(canonical_json(request.output_schema))
    return chars // 4 + 1


def unpriced_cap(model: str, max_cost_usd: float | None, dry_run: bool,
                 prices: dict[str, Price] | None = None) -> str | None:
    """Why a dollar cap cannot be kept for this model (it has no price), or None."""
    if max_cost_usd is None or dry_run or price_for(model, prices) is not None:
        return None
    return (f"--max-cost-usd needs a priced model; {model!r} is not in {PRICES_PATH.name} (add "
            "its row, or drop the cap)")


class AnthropicProvider(OneShot):
    """`anthropic:<model>`: the Messages API, structured output, cached system, bounded retries."""

    def __init__(self, model: str, *, max_cost_usd: float | None = None, dry_run: bool = False,
                 concurrency: int = 4, batch: bool = False, retries: int = 4,
                 backoff_seconds: float = 1.0, timeout_seconds: float = 120.0,
                 client: Any = None, prices: dict[str, Price] | None = None,
                 batch_poll_seconds: float = 10.0, batch_window_seconds: float = 2.0):
        if not model:
            raise UsageError("anthropic provider needs a model: anthropic:<model>")
        self.spec = f"anthropic:{model}"
        self.model = model
        self.max_cost_usd = max_cost_usd
        self.dry_run = dry_run
        self.batch = batch
        self.retries = max(0, retries)
        self.backoff_seconds = backoff_seconds
        self.timeout_seconds = timeout_seconds
        self.prices = load_prices() if prices is None else prices
        self.stats = CallStats()
        self._slots = threading.BoundedSemaphore(max(1, concurrency))
        self._client = client
        # Learned once per provider: this model rejected output_config, so use the forced tool.
        self._use_tool = False
        problem = unpriced_cap(model, max_cost_usd, dry_run, self.prices)
        if problem:
            raise UsageError(problem)
        self._batcher = _Batcher(self, batch_poll_seconds, batch_window_seconds) if batch else None

    def ready(self) -> None:
        """Fail now, before a caller re-executes or spends anything, when no call could be made
        (no key in the environment); a dry run needs none."""
        if not self.dry_run:
            self.client()

    def call_stats(self) -> CallStats:
        return self.stats

    # The SDK client is built lazily so --dry-run and --help never need a key.
    def client(self) -> Any:
        if self._client is None:
            # Without a credential the SDK fails inside the request with a TypeError (a
            # traceback); say what is missing instead, naming the variable, never its value.
            if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
                raise UnmeasuredError(
                    f"anthropic:{self.model} needs ANTHROPIC_API_KEY in the environment; without "
                    "a key, work offline with replay, hand:FILE, or host (--emit, then --ingest) "
                    "where the script offers it")
            import anthropic
            self._client = anthropic.Anthropic(max_retries=0, timeout=self.timeout_seconds)
        return self._client

    def params(self, request: LlmRequest, *, tool: bool | None = None) -> dict:
        """Messages API parameters for a request (no sampling parameters: 2.x has none)."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "system": [{"type": "text", "text": request.system,
                        "cache_control": {"type": "ephemeral"}}],
            "messages": request.messages,
        }
        use_tool = self._use_tool if tool is None else tool
        if request.output_schema is not None:
            if use_tool:
                params["tools"] = [{"name": STRUCTURED_TOOL,
                                    "description": "Record the result object.",
                                    "input_schema": request.output_schema}]
                params["tool_choice"] = {"type": "tool", "name": STRUCTURED_TOOL}
            else:
                params["output_config"] = {"format": {"type": "json_schema",
                                                      "schema": request.output_schema}}
        return params

    def _check_budget(self) -> None:
        if self.max_cost_usd is None:
            return
        with self.stats.lock:
            spent = self.stats.cost_usd
        if spent is not None and spent >= self.max_cost_usd:
            raise BudgetExhausted(f"--max-cost-usd {self.max_cost_usd} spent "
                                  f"(${spent:.4f}); no new call made")

    def complete(self, request: LlmRequest) -> LlmReply:
        """One call with bounded retries; raises ProviderError when it gives up."""
        if self.dry_run:
            with self.stats.lock:
                self.stats.calls += 1
                self.stats.estimated_input_tokens += estimate_tokens(request)
            raise DryRun(f"dry run: {request.key} not sent")
        self._check_budget()
        if self._batcher is not None:
            message = self._batcher.submit(request)
            return self._reply(request, message, discount=0.5)
        with self._slots:
            message = self._call_with_retries(request)
        return self._reply(request, message, discount=1.0)

    def _call_with_retries(self, request: LlmRequest) -> Any:
        import anthropic
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            with self.stats.lock:
                self.stats.attempts += 1
            try:
                return self.client().messages.create(**self.params(request))
            except anthropic.BadRequestError as exc:
                if request.output_schema is not None and not self._use_tool \
                        and _rejects_output_config(exc):
                    # This model lacks JSON-schema output: the same schema as a forced tool.
                    self._use_tool = True
                    continue
                raise ProviderError(f"{self.model}: request refused: {_status_text(exc)}") from None
            except anthropic.APIStatusError as exc:
                if exc.status_code not in _RETRY_STATUS and exc.status_code < 500:
                    raise ProviderError(f"{self.model}: {_status_text(exc)}") from None
                last = _status_text(exc)
            except (anthropic.APITimeoutError, anthropic.APIConnectionError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if attempt < self.retries:
                time.sleep(self.backoff_seconds * (2 ** attempt))
        raise ProviderError(f"{self.model}: gave up after {self.retries + 1} attempts: {last}")

    def _reply(self, request: LlmRequest, message: Any, *, discount: float) -> LlmReply:
        text_parts: list[str] = []
        data: dict | None = None
        for block in getattr(message, "content", None) or []:
            kind = getattr(block, "type", None)
            if kind == "text":
                text_parts.append(block.text)
            elif kind == "tool_use" and getattr(block, "name", None) == STRUCTURED_TOOL:
                data = dict(block.input) if isinstance(block.input, dict) else None
                text_parts.append(json.dumps(block.input, ensure_ascii=False))
        text = "".join(text_parts)
        if data is None and request.output_schema is not None and not self._use_tool:
            # JSON-schema output arrives as the text of the reply.
            try:
                parsed = json.loads(text)
                data = parsed if isinstance(parsed, dict) else None
            except ValueError:
                data = None
        usage = getattr(message, "usage", None)
        tin = getattr(usage, "input_tokens", None)
        tout = getattr(usage, "output_tokens", None)
        cread = getattr(usage, "cache_read_input_tokens", None) or 0
        cwrite = getattr(usage, "cache_creation_input_tokens", None) or 0
        cost = cost_usd(getattr(message, "model", None) or self.model, input_tokens=tin,
                        output_tokens=tout, cache_read_tokens=cread, cache_write_tokens=cwrite,
                        discount=discount, prices=self.prices)
        if cost is None:
            cost = cost_usd(self.model, input_tokens=tin, output_tokens=tout,
                            cache_read_tokens=cread, cache_write_tokens=cwrite,
                            discount=discount, prices=self.prices)
        with self.stats.lock:
            self.stats.calls += 1
            self.stats.input_tokens += tin or 0
            self.stats.output_tokens += tout or 0
            if cost is None or self.stats.cost_usd is None:
                self.stats.cost_usd = None
            else:
                self.stats.cost_usd += cost
        # The dated id the API reports is the most exact pin for judge_model.
        source = getattr(message, "model", None) or self.model
        # The digest is taken with the model that answered, the same id the recording's source
        # carries, so a replay of this reply verifies against it.
        return LlmReply(text=text, data=data, source=str(source),
                        request_digest=request.digest(model=str(source)),
                        input_tokens=tin, output_tokens=tout, cache_read_tokens=cread,
                        cache_write_tokens=cwrite, cost_usd=cost)


def _status_text(exc: Any) -> str:
    body = getattr(exc, "body", None)
    detail = ""
    if isinstance(body, dict):
        err = got if isinstance(got := body.get("error"), dict) else body
        detail = f" {err.get('type', '')}: {err.get('message', '')}".rstrip(": ")
    return f"HTTP {getattr(exc, 'status_code', '?')}{detail}"


# The same retry rule and error wording for the API answerer's tool-use loop
# (answer/harness/api_loop.py), which calls the Messages API without this provider's request type.
RETRY_STATUS = frozenset(_RETRY_STATUS)
status_text = _status_text


def _rejects_output_config(exc: Any) -> bool:
    text = _status_text(exc).lower() + " " + str(exc).lower()
    return "output_config" in text or "output_format" in text or "structured output" in text


class _Batcher:
    """--batch: requests arriving within a short window go out as one Message Batch; each caller
    blocks until its own result is in. Retries are the batch API's; an errored item is a
    ProviderError for that request only."""

    def __init__(self, provider: AnthropicProvider, poll: float, window: float):
        self.provider = provider
        self.poll = poll
        self.window = window
        self.cond = threading.Condition()
        self.pending: list[tuple[str, LlmRequest]] = []
        self.results: dict[str, Any] = {}
        self.flushing = False
        self.counter = 0
        self.first_at = 0.0

    def submit(self, request: LlmRequest) -> Any:
        with self.cond:
            self.counter += 1
            custom_id = f"r{self.counter}"
            if not self.pending:
                self.first_at = time.monotonic()
            self.pending.append((custom_id, request))
            while custom_id not in self.results:
                due = self.pending and time.monotonic() >= self.first_at + self.window
                if due and not self.flushing:
                    self._flush_locked()
                    continue
                self.cond.wait(timeout=max(0.01, self.window / 4))
            result = self.results.pop(custom_id)
        if isinstance(result, Exception):
            raise result
        return result

    def _flush_locked(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        self.flushing = True
        self.cond.release()
        try:
            outcome = self._run(batch)
        except ProviderError as exc:
            outcome = {cid: exc for cid, _ in batch}
        finally:
            self.cond.acquire()
            self.flushing = False
        self.results.update(outcome)
        self.cond.notify_all()

    def _run(self, batch: list[tuple[str, LlmRequest]]) -> dict[str, Any]:
        import anthropic
        client = self.provider.client()
        try:
            created = client.messages.batches.create(requests=[
                {"custom_id": cid, "params": self.provider.params(req)} for cid, req in batch])
            while created.processing_status != "ended":
                time.sleep(self.poll)
                created = client.messages.batches.retrieve(created.id)
            out: dict[str, Any] = {}
            for item in client.messages.batches.results(created.id):
                if item.result.type == "succeeded":
                    out[item.custom_id] = item.result.message
                else:
                    out[item.custom_id] = ProviderError(
                        f"{self.provider.model}: batch item {item.result.type}")
        except anthropic.APIError as exc:
            raise ProviderError(f"{self.provider.model}: batch failed: {exc}") from None
        for cid, _ in batch:
            out.setdefault(cid, ProviderError(f"{self.provider.model}: batch returned no result"))
        return out
