"""The one LLM layer (SPEC 7.5): the judge, the coverage reader and the diagnoser all call a model here.

Providers, chosen by a spec string:

- `anthropic:<model>`: the Messages API through the `anthropic` SDK (2.x). Structured output goes
  through `output_config.format` (JSON schema); a model that refuses it gets the same schema as a
  forced tool. The system text (for the judge: the doctrine) is one cached block. Retries with
  exponential backoff on 429 / 5xx / 529 overloaded / timeouts are ours (the SDK's own are off so
  every attempt is counted). Cost comes from `reference/prices.md`; an unpriced model costs None.
- `replay[:DIR]`: reads `<key>.json` recordings (default `evals/<set>/recordings/<role>/`); a miss
  or a stale digest / prompt version fails closed and names the command that re-records.
- `host`: `emit` writes the exact request for a host subagent; `ingest` reads its `reply.json`.
- `hand:<FILE>`: replies authored by a person (JSONL of `{key, replies}`), answered by key; with
  `--record` this is how hand-authored recordings are written through the exact request path.

The request digest (SPEC 7.5) is sha256 over the canonical JSON (sorted keys, no spaces) of
model, system, messages, tools (the output schema) and parameters (max_tokens). The model is the
one that answers the request:

- `anthropic:<model>`: the model id the API reports for the reply (the requested id when it
  reports none), which is also the reply's `source`;
- `--record`: the recording's `request_digest` is taken with the model that produced the reply
  and is written as its `source` (a live model id, or `hand-authored` for `hand:`);
- `replay`: a recording is verified by recomputing the digest with the recording's own `source` as
  the model, so a recording made by claude-x replays, pins claude-x as `judge_model`, and a
  changed request, or a `source` edited to another model, fails closed as stale;
- `host`: the host subagent's model is not known, so the emitted request and its ingest are both
  digested with model null.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import paths
from .errors import InputError, KitError, UnmeasuredError, UsageError
from .jsonl import read_objects

ROLES = ("judge", "coverage", "diagnose")
HAND_AUTHORED = "hand-authored"
HOST_SOURCE = "host"
PRICES_PATH = paths.REFERENCE_DIR / "prices.md"
# The forced-tool fallback's name; a model that lacks JSON-schema output fills this tool's input.
STRUCTURED_TOOL = "submit_result"


# --------------------------------------------------------------------------- errors

class ProviderError(KitError):
    """The provider gave up (after bounded retries, or on an error a retry cannot fix)."""


class RecordingMissing(KitError):
    """Replay found no recording (or no k-th sample) for a key; fails closed."""


class RecordingStale(KitError):
    """Replay found a recording made for another request digest or prompt version; fails closed."""


class HostReplyPending(KitError):
    """Host mode: the request was emitted (or is waiting) and no reply.json is there yet."""

    exit_code = 0  # emitting is the job of --emit, not a failure


class BudgetExhausted(KitError):
    """--max-cost-usd is spent: no new call is made; the caller records null `budget_exhausted`."""


class DryRun(KitError):
    """--dry-run: the call was counted and not made."""

    exit_code = 0


# --------------------------------------------------------------------------- request / reply

def canonical_json(value: Any) -> str:
    """The canonical JSON every digest is taken over: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LlmRequest:
    """One model call, independent of the provider that answers it."""

    role: str                   # "judge" | "coverage" | "diagnose"
    key: str                    # recording key, e.g. "<runId>.<qid>.<sample>", "calib.<qid>.<answer>"
    system: str                 # the cached system block (for the judge: the doctrine)
    messages: list[dict]        # Messages API messages
    output_schema: dict | None  # JSON Schema for structured output
    prompt_version: str         # judge: "JUDGE_VERSION:rubric_sha:judge_prompt_sha"
    max_tokens: int = 4096

    def digest(self, *, model: str | None) -> str:
        """sha256 of what `model` is asked: model, system, messages, tools and parameters.

        `model` is the one that answers (see the module docstring); None only where it is not
        known (a host subagent). It is a required keyword so no caller leaves it out by accident.
        """
        tools = [] if self.output_schema is None else [{"name": STRUCTURED_TOOL,
                                                        "input_schema": self.output_schema}]
        body = {"model": model, "system": self.system, "messages": self.messages, "tools": tools,
                "parameters": {"max_tokens": self.max_tokens}}
        return sha256_text(canonical_json(body))

    def to_json(self, *, model: str | None = None) -> dict:
        """The request as a document (what a host subagent reads), digested with `model`; the
        default null is the host's digest, so emit and ingest agree."""
        return {"role": self.role, "key": self.key, "system": self.system,
                "messages": self.messages, "output_schema": self.output_schema,
                "prompt_version": self.prompt_version, "max_tokens": self.max_tokens,
                "digest_model": model, "request_digest": self.digest(model=model)}


@dataclass(frozen=True)
class LlmReply:
    """What came back: the raw text always, the structured object when there is one."""

    text: str
    data: dict | None
    source: str                 # a model id, "hand-authored", or "host"
    request_digest: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None   # None when the price is unknown, never 0

    def to_sample(self) -> dict:
        """The form a recording stores one reply in."""
        return {"text": self.text, "data": self.data, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens, "cost_usd": self.cost_usd}


class Provider(Protocol):
    spec: str
    model: str | None

    def complete(self, request: LlmRequest) -> LlmReply: ...


def reply_from_sample(sample: Any, *, source: str, digest: str) -> LlmReply:
    """A recorded or authored sample as a reply: an object with `text` (and maybe `data`) is taken
    as stored; any other object is the structured reply itself; a string is raw text only."""
    if isinstance(sample, str):
        return LlmReply(text=sample, data=None, source=source, request_digest=digest)
    if isinstance(sample, dict) and isinstance(sample.get("text"), str) and set(sample) <= {
            "text", "data", "input_tokens", "output_tokens", "cache_read_tokens",
            "cache_write_tokens", "cost_usd"}:
        data = sample.get("data")
        return LlmReply(text=sample["text"], data=data if isinstance(data, dict) else None,
                        source=source, request_digest=digest,
                        input_tokens=sample.get("input_tokens"),
                        output_tokens=sample.get("output_tokens"),
                        cache_read_tokens=sample.get("cache_read_tokens"),
                        cache_write_tokens=sample.get("cache_write_tokens"),
                        cost_usd=sample.get("cost_usd"))
    if isinstance(sample, dict):
        return LlmReply(text=json.dumps(sample, ensure_ascii=False), data=sample, source=source,
                        request_digest=digest)
    return LlmReply(text=json.dumps(sample), data=None, source=source, request_digest=digest)


# --------------------------------------------------------------------------- prices

@dataclass(frozen=True)
class Price:
    """Dollars per million tokens for one model id (prefix)."""

    model: str
    input: float
    output: float
    cache_write: float
    cache_read: float


def load_prices(path: Path = PRICES_PATH) -> dict[str, Price]:
    """The price table of reference/prices.md: rows `| model | input | output | cache write | cache read |`."""
    prices: dict[str, Price] = {}
    if not path.is_file():
        return prices
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("claude"):
            continue
        try:
            nums = [float(c.lstrip("$")) for c in cells[1:]]
        except ValueError:
            continue
        prices[cells[0]] = Price(cells[0], *nums)
    return prices


def price_for(model: str | None, prices: dict[str, Price] | None = None) -> Price | None:
    """The row for a model id: exact, or the row plus a date or `-latest` suffix
    (`claude-sonnet-4-5-20250929` takes the `claude-sonnet-4-5` row). Anything else is unknown
    (None): `claude-opus-4-7` must not silently borrow `claude-opus-4`'s price."""
    if not model:
        return None
    table = load_prices() if prices is None else prices
    if model in table:
        return table[model]
    base = re.sub(r"-(\d{8}|latest)$", "", model)
    return table.get(base)


def cost_usd(model: str | None, *, input_tokens: int | None, output_tokens: int | None,
             cache_read_tokens: int | None = 0, cache_write_tokens: int | None = 0,
             discount: float = 1.0, prices: dict[str, Price] | None = None) -> float | None:
    """Dollar cost of one call, or None when the model's price or the usage is unknown (never 0)."""
    price = price_for(model, prices)
    if price is None or input_tokens is None or output_tokens is None:
        return None
    total = (input_tokens * price.input + output_tokens * price.output
             + (cache_write_tokens or 0) * price.cache_write
             + (cache_read_tokens or 0) * price.cache_read) / 1_000_000
    return round(total * discount, 8)


# --------------------------------------------------------------------------- reading replies

def json_objects(text: str, key: str | None = None) -> list[dict]:
    """The JSON objects in a model's free text, in order; with `key`, only those carrying it.

    Decodes from every `{` with the JSON decoder rather than a greedy regex, so Malloy braces
    quoted earlier (`extend { ... }`) are skipped, and an object without `key` is looked into
    (a verdict wrapped in another object is still found). A hostile reply nesting without end
    is skipped, not raised.
    """
    decoder = json.JSONDecoder()
    found: list[dict] = []
    i = text.find("{")
    while i >= 0:
        try:
            obj, end = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict) and (key is None or key in obj):
            found.append(obj)
            i = text.find("{", end)
        else:
            i = text.find("{", i + 1)
    return found


def last_json_object(text: str, key: str | None = None) -> dict | None:
    """The last JSON object in free text that carries `key` (else the last object at all)."""
    if key is not None:
        keyed = json_objects(text, key)
        if keyed:
            return keyed[-1]
    found = json_objects(text)
    return found[-1] if found else None


# --------------------------------------------------------------------------- re-record hints

def rerecord_command(role: str, key: str, set_dir: Path | None) -> str:
    """The command that re-records a key, named in every miss / stale message."""
    s = str(set_dir) if set_dir else "evals/<set>"
    live = "--judge anthropic:<model> --record"
    if role == "judge":
        if key.startswith("calib."):
            return f".venv/bin/python skills/eval-judge/scripts/calibrate_judge.py --set {s} {live}"
        if key.startswith("regress."):
            return f".venv/bin/python skills/eval-judge/scripts/check_judge.py --set {s} {live}"
        return (f".venv/bin/python skills/eval-answer/scripts/score_run.py --run <run> --set {s} "
                f"{live} --rescore --local")
    if role == "coverage":
        return (f".venv/bin/python skills/eval-answer/scripts/check_coverage.py --set {s} "
                "--model <dir> --reader anthropic:<model> --record")
    if role == "diagnose":
        return (f".venv/bin/python skills/eval-diagnose/scripts/diagnose.py --run <run> --set {s} "
                "--diagnoser anthropic:<model> --record")
    return f"re-run the {role} step with a live provider and --record"


# Where a set keeps the hand-written replies its recordings were made from, per role.
AUTHORED_REPLIES = {"judge": "_authored.jsonl", "coverage": "authored-replies.jsonl",
                    "diagnose": "authored-replies.jsonl"}


def _hand_hint(role: str, set_dir: Path | None) -> str:
    """How to regenerate hand-authored recordings of a role through its own code path."""
    s = str(set_dir) if set_dir else "evals/<set>"
    name = AUTHORED_REPLIES.get(role, "_authored.jsonl")
    replies = Path(set_dir) / "recordings" / role / name if set_dir else None
    source = str(replies) if replies is not None and replies.is_file() else "<replies.jsonl>"
    if role == "coverage":
        return ("for hand-authored recordings: .venv/bin/python skills/eval-answer/scripts/"
                f"check_coverage.py --set {s} --model <dir> --reader hand:{source} --record")
    if role == "diagnose":
        return ("for hand-authored recordings: .venv/bin/python skills/eval-diagnose/scripts/"
                f"diagnose.py --run <run> --set {s} --diagnoser hand:{source} --record")
    return (f"for hand-authored recordings: .venv/bin/python scripts/author_recordings.py "
            f"--set {s} --replies {source}")


# --------------------------------------------------------------------------- anthropic

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}


@dataclass
class CallStats:
    """What a provider spent: counted calls, tokens and dollars (None when any cost was unknown)."""

    calls: int = 0
    attempts: int = 0
    estimated_input_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def to_json(self) -> dict:
        return {"calls": self.calls, "attempts": self.attempts,
                "estimated_input_tokens": self.estimated_input_tokens,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost_usd": self.cost_usd}


def estimate_tokens(request: LlmRequest) -> int:
    """A rough input-token count (4 characters a token) for --dry-run; never used for billing."""
    chars = len(request.system) + len(canonical_json(request.messages))
    if request.output_schema:
        chars += len(canonical_json(request.output_schema))
    return chars // 4 + 1


class AnthropicProvider:
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
        if max_cost_usd is not None and price_for(model, self.prices) is None and not dry_run:
            raise UsageError(f"--max-cost-usd needs a priced model; {model!r} is not in "
                             f"{PRICES_PATH.name} (add its row, or drop the cap)")
        self._batcher = _Batcher(self, batch_poll_seconds, batch_window_seconds) if batch else None

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
        err = body.get("error") if isinstance(body.get("error"), dict) else body
        detail = f" {err.get('type', '')}: {err.get('message', '')}".rstrip(": ")
    return f"HTTP {getattr(exc, 'status_code', '?')}{detail}"


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


# --------------------------------------------------------------------------- replay / record

def _load_recording(path: Path) -> dict:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(path, None, f"unreadable recording: {exc}") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("samples"), list):
        raise InputError(path, None, "a recording is {request_digest, prompt_version, source, "
                                     "samples: [...]}")
    return rec


class ReplayProvider:
    """`replay[:DIR]`: the k-th identical call of a key reads samples[k]; fails closed."""

    def __init__(self, directory: Path, *, role: str, set_dir: Path | None):
        self.spec = f"replay:{directory}"
        self.model: str | None = None
        self.dir = Path(directory)
        self.role = role
        self.set_dir = set_dir
        self._calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._folder_source: str | None = None

    def path_for(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def source_of(self, key: str) -> str | None:
        """The recording's source for a key, without consuming a sample (for pins); for a key
        with no readable recording (a score decided before any judge call), the folder's."""
        path = self.path_for(key)
        if path.is_file():
            try:
                source = _load_recording(path).get("source")
            except InputError:
                source = None
            if source:
                return str(source)
        return self.folder_source()

    def folder_source(self) -> str:
        """The source every recording in the folder shares, else `replay`: a fixed value, so a
        score that never reached the judge pins the same judge_model whatever order attempts ran
        in (falling back to the last call's source made that pin depend on thread timing)."""
        with self._lock:
            if self._folder_source is None:
                sources: set[str] = set()
                for path in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
                    try:
                        source = _load_recording(path).get("source")
                    except InputError:
                        continue
                    if source:
                        sources.add(str(source))
                self._folder_source = sources.pop() if len(sources) == 1 else "replay"
            return self._folder_source

    def _fix(self, key: str) -> str:
        return (f"re-record with: {rerecord_command(self.role, key, self.set_dir)}; "
                f"{_hand_hint(self.role, self.set_dir)}")

    def complete(self, request: LlmRequest) -> LlmReply:
        path = self.path_for(request.key)
        if not path.is_file():
            raise RecordingMissing(f"{path}: no recording for {request.key}; {self._fix(request.key)}")
        rec = _load_recording(path)
        # Verified with the recording's own source as the model: the request must be the one that
        # model was asked, so an edited source is as stale as an edited packet.
        recorded = rec.get("source")
        digest = request.digest(model=recorded if isinstance(recorded, str) else None)
        if rec.get("prompt_version") != request.prompt_version:
            raise RecordingStale(
                f"{path}: recorded under prompt version {rec.get('prompt_version')!r}, current is "
                f"{request.prompt_version!r}; {self._fix(request.key)}")
        if rec.get("request_digest") != digest:
            raise RecordingStale(
                f"{path}: request digest {str(rec.get('request_digest'))[:12]}... differs from the "
                f"request built now for model {recorded!r} ({digest[:12]}...): the packet or the "
                f"recorded model changed; {self._fix(request.key)}")
        with self._lock:
            k = self._calls[request.key]
            self._calls[request.key] += 1
        samples = rec["samples"]
        if k >= len(samples):
            raise RecordingMissing(f"{path}: call {k + 1} of {request.key} but only {len(samples)} "
                                   f"sample(s) recorded; {self._fix(request.key)}")
        source = str(rec.get("source") or "unknown")
        self.model = source
        return reply_from_sample(samples[k], source=source, digest=digest)


class RecordingProvider:
    """`--record [DIR]`: wraps a live (or hand) provider and writes each reply into `<key>.json`.
    The first call of a key in this session replaces an older recording; later calls append."""

    def __init__(self, inner: Any, directory: Path):
        self.inner = inner
        self.spec = inner.spec
        self.dir = Path(directory)
        self._fresh: set[str] = set()
        self._lock = threading.Lock()

    @property
    def model(self) -> str | None:
        return self.inner.model

    def __getattr__(self, name: str) -> Any:  # stats, dry_run, place(...) of the inner provider
        return getattr(self.inner, name)

    def complete(self, request: LlmRequest) -> LlmReply:
        reply = self.inner.complete(request)
        path = self.dir / f"{request.key}.json"
        with self._lock:
            if request.key in self._fresh and path.is_file():
                rec = json.loads(path.read_text(encoding="utf-8"))
            else:
                # Digested with the model that produced the reply, which is also written as the
                # source: replay recomputes the digest with that source and must find this one.
                rec = {"request_digest": request.digest(model=reply.source),
                       "prompt_version": request.prompt_version,
                       "source": reply.source, "samples": []}
                self._fresh.add(request.key)
            rec["samples"].append(reply.to_sample())
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(rec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            tmp.replace(path)
        return reply


class HandProvider:
    """`hand:<FILE>`: replies a person wrote, as JSONL lines `{key, replies: [reply, ...]}`.
    The k-th call of a key gets replies[k] (the last one repeats). A reply that is an object is the
    structured reply; a string is raw text (to exercise the text parser)."""

    def __init__(self, path: Path):
        self.spec = f"hand:{path}"
        self.model = HAND_AUTHORED
        self.replies: dict[str, list[Any]] = {}
        self._calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        for n, item in read_objects(path):
            if not isinstance(item.get("key"), str) \
                    or not isinstance(item.get("replies"), list) or not item["replies"]:
                raise InputError(path, n, "each line is {\"key\": str, \"replies\": [reply, ...]}")
            self.replies[item["key"]] = item["replies"]

    def complete(self, request: LlmRequest) -> LlmReply:
        if request.key not in self.replies:
            raise RecordingMissing(f"{self.spec}: no authored reply for key {request.key}")
        with self._lock:
            k = self._calls[request.key]
            self._calls[request.key] += 1
        items = self.replies[request.key]
        return reply_from_sample(items[min(k, len(items) - 1)], source=HAND_AUTHORED,
                                 digest=request.digest(model=HAND_AUTHORED))


# --------------------------------------------------------------------------- host

class HostProvider:
    """`host`: --emit writes the request for a host subagent; --ingest reads the reply beside it.

    Where: a folder placed for the key (`place(key, folder)`: the attempt's `judge/` artifact
    folder) holds `request.json` and `reply.json`; otherwise `<host_dir>/host/<role>/<key>.request.json`
    and `<key>.reply.json`. A reply file is either the result object itself or `{"text": ...}`."""

    def __init__(self, mode: str, host_dir: Path | None, *, role: str):
        if mode not in ("emit", "ingest"):
            raise UsageError("--judge host needs --emit or --ingest")
        self.spec = "host"
        self.model = HOST_SOURCE
        self.mode = mode
        self.host_dir = Path(host_dir) if host_dir else None
        self.role = role
        self._placed: dict[str, Path] = {}

    def place(self, key: str, folder: Path) -> None:
        """Put this key's request/reply in an attempt's artifact folder."""
        self._placed[key] = Path(folder)

    def files_for(self, key: str) -> tuple[Path, Path]:
        if key in self._placed:
            return self._placed[key] / "request.json", self._placed[key] / "reply.json"
        if self.host_dir is None:
            raise UsageError("host provider without an attempt folder needs an --out folder")
        base = self.host_dir / "host" / self.role
        return base / f"{key}.request.json", base / f"{key}.reply.json"

    def complete(self, request: LlmRequest) -> LlmReply:
        req_path, reply_path = self.files_for(request.key)
        # The host subagent's model is not known: emit (to_json's default) and ingest both
        # digest with model null, so they agree.
        digest = request.digest(model=None)
        if self.mode == "emit":
            req_path.parent.mkdir(parents=True, exist_ok=True)
            doc = request.to_json()
            doc["reply_path"] = str(reply_path)
            doc["reply_format"] = ("write the result object as JSON to reply_path (or "
                                   "{\"text\": \"<your whole reply>\"}); the system text is your brief")
            req_path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n",
                                encoding="utf-8")
            raise HostReplyPending(f"emitted {req_path}; a host subagent writes {reply_path}, "
                                   f"then re-run with --ingest")
        if not req_path.is_file() or not reply_path.is_file():
            raise HostReplyPending(f"no reply yet at {reply_path} (emit first, then let the host "
                                   f"subagent write it)")
        try:
            emitted = json.loads(req_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InputError(req_path, None, f"unreadable request: {exc}") from None
        if emitted.get("request_digest") != digest:
            raise RecordingStale(f"{req_path}: the request changed since it was emitted; "
                                 f"emit again with --emit")
        raw = reply_path.read_text(encoding="utf-8")
        try:
            sample: Any = json.loads(raw)
        except ValueError:
            sample = raw  # a reply that is not JSON is raw text, parsed like any other reply
        return reply_from_sample(sample, source=HOST_SOURCE, digest=digest)


# --------------------------------------------------------------------------- factory

def make_provider(spec: str, *, role: str, set_dir: Path | None, record_dir: Path | None = None,
                  host_mode: str | None = None, host_dir: Path | None = None,
                  max_cost_usd: float | None = None, dry_run: bool = False,
                  concurrency: int = 4, batch: bool = False, **anthropic_options: Any) -> Any:
    """The provider a spec names; with record_dir, wrapped so every reply is recorded there."""
    if role not in ROLES:
        raise UsageError(f"role {role!r} is not one of {', '.join(ROLES)}")
    kind, _, arg = spec.partition(":")
    provider: Any
    if kind == "anthropic":
        provider = AnthropicProvider(arg, max_cost_usd=max_cost_usd, dry_run=dry_run,
                                     concurrency=concurrency, batch=batch, **anthropic_options)
    elif kind == "replay":
        default = (Path(set_dir) / "recordings" / role) if set_dir else None
        if not arg and default is None:
            raise UsageError("replay needs a folder: replay:DIR, or --set")
        provider = ReplayProvider(Path(arg) if arg else default, role=role, set_dir=set_dir)
        if record_dir is not None:
            raise UsageError("--record records a live provider; it cannot wrap replay")
    elif kind == "host":
        provider = HostProvider(host_mode or "", host_dir, role=role)
    elif kind == "hand":
        if not arg:
            raise UsageError("hand needs the replies file: hand:FILE")
        provider = HandProvider(Path(arg))
    else:
        raise UsageError(f"unknown provider {spec!r}: use anthropic:<model>, replay[:DIR], host, "
                         "or hand:FILE")
    if record_dir is not None:
        provider = RecordingProvider(provider, Path(record_dir))
    return provider


def default_record_dir(set_dir: Path | None, role: str) -> Path | None:
    return Path(set_dir) / "recordings" / role if set_dir else None


def add_provider_arguments(p: Any, flag: str, *, host: bool = True) -> None:
    """The provider flags every LLM-using script shares (one spelling everywhere). A script
    without `host` (no --emit / --ingest to drive it) does not offer it in its help."""
    p.add_argument(flag, required=True, metavar="PROVIDER",
                   help="anthropic:<model> | replay[:DIR] | host | hand:FILE" if host
                   else "anthropic:<model> | replay[:DIR] | hand:FILE (host is not offered here)")
    p.add_argument("--record", nargs="?", const="", default=None, metavar="DIR",
                   help="record every reply (default folder: <set>/recordings/<role>/)")
    p.add_argument("--max-cost-usd", type=float, default=None,
                   help="no new call once this many dollars are spent")
    p.add_argument("--dry-run", action="store_true", help="count calls and tokens; call nothing")
    p.add_argument("--batch", action="store_true", help="use the Message Batches API (anthropic)")
    p.add_argument("--concurrency", type=int, default=4, help="parallel calls at most (anthropic)")
    if host:
        g = p.add_mutually_exclusive_group()
        g.add_argument("--emit", action="store_true", help="host: write the request and stop")
        g.add_argument("--ingest", action="store_true", help="host: read the host's reply")


def provider_from_args(args: Any, flag_attr: str, *, role: str, set_dir: Path | None,
                       host_dir: Path | None = None) -> Any:
    """make_provider from the flags of add_provider_arguments."""
    record = getattr(args, "record", None)
    record_dir = None if record is None else (Path(record) if record else
                                              default_record_dir(set_dir, role))
    host_mode = "emit" if getattr(args, "emit", False) else (
        "ingest" if getattr(args, "ingest", False) else None)
    if getattr(args, flag_attr) == "host" and not hasattr(args, "emit"):
        # This script has no --emit / --ingest, so "needs --emit or --ingest" would name flags
        # it does not accept.
        raise UsageError(f"this script does not take --{flag_attr} host (it has no --emit / "
                         "--ingest); use anthropic:<model>, replay[:DIR] or hand:FILE")
    return make_provider(getattr(args, flag_attr), role=role, set_dir=set_dir,
                         record_dir=record_dir, host_mode=host_mode, host_dir=host_dir,
                         max_cost_usd=getattr(args, "max_cost_usd", None),
                         dry_run=getattr(args, "dry_run", False),
                         concurrency=getattr(args, "concurrency", 4),
                         batch=getattr(args, "batch", False))


def provider_stats(provider: Any) -> dict | None:
    """Calls, tokens and dollars a provider spent, when it counts them."""
    stats = getattr(provider, "stats", None)
    return stats.to_json() if isinstance(stats, CallStats) else None


def pinned_model(provider: Any, key: str) -> str | None:
    """The model id a score pins before (or without) a call: the live model, the recording's
    source for replay, `host` / `hand-authored` otherwise."""
    source_of: Callable[[str], str | None] | None = getattr(provider, "source_of", None)
    if source_of is not None:
        return source_of(key) or getattr(provider, "model", None)
    inner = getattr(provider, "inner", None)
    if inner is not None and getattr(inner, "source_of", None) is not None:
        return pinned_model(inner, key)
    return getattr(provider, "model", None)


_KEY_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,250}$")


def check_key(key: str) -> str:
    """Keys become file names: refuse anything that could leave the recordings folder."""
    if not _KEY_SAFE.match(key) or ".." in key:
        raise InputError(None, None, f"unsafe recording key {key!r}")
    return key


__all__ = ["AnthropicProvider", "BudgetExhausted", "DryRun", "HandProvider", "HostProvider",
           "HostReplyPending", "LlmReply", "LlmRequest", "Provider", "ProviderError",
           "RecordingMissing", "RecordingProvider", "RecordingStale", "ReplayProvider",
           "add_provider_arguments", "canonical_json", "cost_usd", "load_prices", "make_provider",
           "pinned_model", "price_for", "provider_from_args", "provider_stats", "rerecord_command",
           "sha256_text"]
