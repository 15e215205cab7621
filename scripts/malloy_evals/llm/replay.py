"""`replay[:DIR]`: recorded replies, and `--record`, which writes them.

A recording is verified by recomputing the digest with the recording's own `source` as the model,
so a recording made by claude-x replays, pins claude-x as `judge_model`, and a changed request, or
a `source` edited to another model, fails closed as stale, naming the command that re-records.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path

from malloy_evals.core import files, jsonl
from malloy_evals.core.errors import InputError
from malloy_evals.llm.base import (
    CallStats,
    LlmReply,
    LlmRequest,
    OneShot,
    Provider,
    RecordingMissing,
    RecordingStale,
    TwoPhase,
    hand_hint,
    reply_from_sample,
    rerecord_command,
)


def _load_recording(path: Path) -> dict:
    try:
        rec = jsonl.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(path, None, f"unreadable recording: {exc}") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("samples"), list):
        raise InputError(path, None, "a recording is {request_digest, prompt_version, source, "
                                     "samples: [...]}")
    return rec


class ReplayProvider(OneShot):
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

    def pinned_model(self, key: str) -> str:
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
                f"{hand_hint(self.role, self.set_dir)}")

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

    def __init__(self, inner: Provider, directory: Path):
        self.inner = inner
        self.spec = inner.spec
        self.dir = Path(directory)
        self._fresh: set[str] = set()
        self._lock = threading.Lock()

    # What the wrapped provider declares, forwarded: recording changes none of it.
    @property
    def model(self) -> str | None:
        return self.inner.model

    @property
    def cycle(self) -> TwoPhase | None:
        return self.inner.cycle

    @property
    def dry_run(self) -> bool:
        return self.inner.dry_run

    @property
    def batch(self) -> bool:
        return self.inner.batch

    def call_stats(self) -> CallStats | None:
        return self.inner.call_stats()

    def pinned_model(self, key: str) -> str | None:
        return self.inner.pinned_model(key)

    def ready(self) -> None:
        self.inner.ready()

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
            files.replace(path, json.dumps(rec, indent=2, ensure_ascii=False) + "\n")
        return reply
