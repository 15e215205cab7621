"""The shared types of the LLM layer: requests, replies, errors, digests and reply parsing.

The request digest is sha256 over the canonical JSON (sorted keys, no spaces) of model, system,
messages, tools (the output schema) and parameters (max_tokens).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from malloy_evals.core import commands
from malloy_evals.core.errors import KitError
from malloy_evals.core.redact import redact

ROLES = ("judge", "coverage", "diagnose", "improve")
HAND_AUTHORED = "hand-authored"
HOST_SOURCE = "host"


# The forced-tool fallback's name; a model that lacks JSON-schema output fills this tool's input.
STRUCTURED_TOOL = "submit_result"


# --------------------------------------------------------------------------- errors

class ProviderError(KitError):
    """The provider gave up (after bounded retries, or on an error a retry cannot fix).

    Its message is a provider's text (an SDK or HTTP error that may echo the API key), so it is
    redacted here, once, before anything prints or stores it (score.reason, judge/error.json)."""

    def __init__(self, message: str):
        super().__init__(redact(message))


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
    # surrogatepass: a lone surrogate from hand-edited JSON digests like any other character
    # instead of failing (the kit's own readers replace them; UTF-8 text digests as it always did).
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class LlmRequest:
    """One model call, independent of the provider that answers it."""

    role: str                   # "judge" | "coverage" | "diagnose" | "improve"
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


# --------------------------------------------------------------------------- what a provider declares

Phase = Literal["emit", "ingest"]


class TwoPhase(Protocol):
    """The two-phase cycle (`host`): one run writes each request and stops (`emit`); a later run
    reads the reply someone wrote beside it (`ingest`). Judge, coverage and diagnosis drive it
    through this declaration alone (reference/providers.md)."""

    @property
    def phase(self) -> Phase: ...

    @property
    def folder(self) -> Path | None: ...  # where requests no attempt folder was placed for go

    def place(self, key: str, folder: Path, root: Path | None = None) -> None: ...
    # ^ this key's request is `folder/request.json` and its reply `folder/reply.json` (an
    #   attempt's judge folder, inside the run `root`, which writes never leave through a link)

    def emitter(self) -> Provider: ...  # this cycle's emit phase: a request first asked at ingest


class Provider(Protocol):
    """What a provider is and can do, declared: callers ask these, never probe for attributes
    (read-only, so a wrapper may forward them)."""

    @property
    def spec(self) -> str: ...  # "anthropic:<model>", "replay[:DIR]", "host", "hand:<FILE>"

    @property
    def model(self) -> str | None: ...  # the model id pinned (replay: the recording's source)

    @property
    def cycle(self) -> TwoPhase | None: ...  # None: one-shot, complete() returns the reply

    @property
    def dry_run(self) -> bool: ...  # complete() counts the call and makes none (raises DryRun)

    @property
    def batch(self) -> bool: ...  # calls go through a batch API (slower, cheaper)

    def call_stats(self) -> CallStats | None: ...  # calls, tokens and dollars, when it counts them

    def pinned_model(self, key: str) -> str | None: ...  # the model a score pins before any call

    def ready(self) -> None: ...  # raises now when no call could be made (no key): before spending

    def complete(self, request: LlmRequest) -> LlmReply: ...


class OneShot:
    """The declaration of a provider that answers within complete() and counts nothing; a
    provider class states only where it differs."""

    model: str | None
    cycle: TwoPhase | None = None
    dry_run: bool = False
    batch: bool = False

    def call_stats(self) -> CallStats | None:
        return None

    def pinned_model(self, key: str) -> str | None:
        return self.model

    def ready(self) -> None:
        return None  # nothing to check before the first call


def provider_label(provider: Provider) -> str:
    """How a report names the provider that answered: its spec, and the model when the spec
    does not already say it."""
    spec, model = provider.spec, provider.model
    return f"{spec} ({model})" if model and model not in spec else spec


# --------------------------------------------------------------------------- one call, any provider

# Why a call brought no reply without failing, in the words every report uses.
EMITTED = "host reply pending"   # emit wrote the request: a later --ingest reads the reply
NO_REPLY = "no host reply"       # ingest found no reply: that item is undecided
COUNTED = "dry run"              # --dry-run counted the call and made none


@dataclass(frozen=True)
class NoReply:
    """A call that returned no reply and is not a failure: `state` is EMITTED, NO_REPLY or
    COUNTED; `why` is the state and the provider's message, the way reports print it."""

    state: str
    message: str

    @property
    def why(self) -> str:
        return f"{self.state}: {self.message}"


def phase_of(provider: Provider) -> Phase | None:
    """`emit` or `ingest` for a two-phase provider, None for a one-shot one."""
    return provider.cycle.phase if provider.cycle is not None else None


def no_reply(provider: Provider, exc: HostReplyPending | DryRun) -> NoReply:
    """The one reading of a call that brought no reply: a dry run counted it; an ingest phase
    found no reply (nothing decided); otherwise the request was written and waits (its result)."""
    if isinstance(exc, DryRun):
        return NoReply(COUNTED, str(exc))
    return NoReply(NO_REPLY if phase_of(provider) == "ingest" else EMITTED, str(exc))


def ask(provider: Provider, request: LlmRequest) -> LlmReply | NoReply:
    """One call through any provider: its reply, or why there is none yet (NoReply). Every other
    failure (replay miss, budget, gave up) propagates."""
    try:
        return provider.complete(request)
    except (HostReplyPending, DryRun) as exc:
        return no_reply(provider, exc)


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
    cmd = commands.rerecord(role, key, set_dir)
    return str(cmd) if cmd is not None else f"re-run the {role} step with a live provider and --record"


# Where a set keeps the hand-written replies its recordings were made from, per role.
AUTHORED_REPLIES = {"judge": "_authored.jsonl", "coverage": "authored-replies.jsonl",
                    "diagnose": "authored-replies.jsonl"}


def hand_hint(role: str, set_dir: Path | None) -> str:
    """How to regenerate hand-authored recordings of a role through its own code path."""
    name = AUTHORED_REPLIES.get(role, "_authored.jsonl")
    replies = Path(set_dir) / "recordings" / role / name if set_dir else None
    source = replies if replies is not None and replies.is_file() else None
    return f"for hand-authored recordings: {commands.author_by_hand(role, set_dir, source)}"
