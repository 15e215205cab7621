"""`host`: a host agent's subagent answers. `emit` writes the exact request; `ingest` reads the reply.

The subagent's model is not known, so the emitted request and its ingest are digested with model null.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from malloy_evals.core import files, jsonl
from malloy_evals.core.errors import InputError, UsageError
from malloy_evals.llm.base import (
    HOST_SOURCE,
    HostReplyPending,
    LlmReply,
    LlmRequest,
    OneShot,
    Phase,
    RecordingStale,
    reply_from_sample,
)


class HostProvider(OneShot):
    """`host`: --emit writes the request for a host subagent; --ingest reads the reply beside it.

    Where: a folder placed for the key (`place(key, folder)`: the attempt's `judge/` artifact
    folder) holds `request.json` and `reply.json`; otherwise `<host_dir>/host/<role>/<key>.request.json`
    and `<key>.reply.json`. A reply file is either the result object itself or `{"text": ...}`."""

    def __init__(self, mode: str, host_dir: Path | None, *, role: str,
                 host_root: Path | None = None):
        if mode not in ("emit", "ingest"):
            raise UsageError("--judge host needs --emit or --ingest")
        self.spec = "host"
        self.model = HOST_SOURCE
        self.phase: Phase = "emit" if mode == "emit" else "ingest"
        self.cycle = self  # two-phase: the declaration every caller asks (llm/base.py TwoPhase)
        self.host_dir = Path(host_dir) if host_dir else None
        # Outside a run, the folder taken as given: host_dir's folders below it are walked
        # without following links (a shared temporary folder is anyone's to plant a link in).
        self.host_root = Path(host_root) if host_root else self.host_dir
        self.role = role
        self._placed: dict[str, Path] = {}
        self._roots: dict[str, Path] = {}

    def place(self, key: str, folder: Path, root: Path | None = None) -> None:
        """Put this key's request/reply in an attempt's artifact folder (inside the run `root`,
        which writes never leave through a link)."""
        self._placed[key] = Path(folder)
        if root is not None:
            self._roots[key] = Path(root)

    @property
    def folder(self) -> Path | None:
        """Where a request no attempt folder was placed for is written: `<host_dir>/host/<role>/`."""
        return self.host_dir / "host" / self.role if self.host_dir is not None else None

    def emitter(self) -> HostProvider:
        """The emit phase of this cycle, over the same folders (a request first asked at ingest,
        such as diagnosis's clustering request)."""
        return HostProvider("emit", self.host_dir, role=self.role, host_root=self.host_root)

    def files_for(self, key: str) -> tuple[Path, Path]:
        if key in self._placed:
            return self._placed[key] / "request.json", self._placed[key] / "reply.json"
        base = self.folder
        if base is None:
            raise UsageError("host provider without an attempt folder needs an --out folder")
        return base / f"{key}.request.json", base / f"{key}.reply.json"

    def complete(self, request: LlmRequest) -> LlmReply:
        req_path, reply_path = self.files_for(request.key)
        # The host subagent's model is not known: emit (to_json's default) and ingest both
        # digest with model null, so they agree.
        digest = request.digest(model=None)
        if self.phase == "emit":
            doc = request.to_json()
            doc["reply_path"] = str(reply_path)
            doc["reply_format"] = ("write the result object as JSON to reply_path (or "
                                   "{\"text\": \"<your whole reply>\"}); the system text is your brief")
            root = self._roots.get(request.key)
            if root is None:  # outside a run: the host folder given on the command line
                root = self.host_root or req_path.parent
                root.mkdir(parents=True, exist_ok=True)
            files.replace(req_path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n", root)
            raise HostReplyPending(f"emitted {req_path}; a host subagent writes {reply_path}, "
                                   f"then re-run with --ingest")
        for path in (req_path, reply_path):
            if path.is_symlink():  # a reply is read from the attempt's own folder, never via a link
                raise InputError(path, None, files.LINK_MESSAGE)
        if not req_path.is_file():
            raise HostReplyPending(f"no emitted request in {req_path.parent} (looked for "
                                   f"{req_path.name}): run with --emit first")
        if not reply_path.is_file():
            raise HostReplyPending(self._missing_reply(reply_path))
        try:
            emitted = jsonl.loads(req_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise InputError(req_path, getattr(exc, "lineno", None),
                             f"unreadable request: {exc}") from None
        if not isinstance(emitted, dict) or emitted.get("request_digest") != digest:
            raise RecordingStale(f"{req_path}: the request changed since it was emitted; "
                                 f"emit again with --emit")
        try:
            raw = reply_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(reply_path, None, f"unreadable reply: {exc}") from None
        try:
            sample: Any = jsonl.loads(raw)
        except ValueError:
            sample = raw  # a reply that is not JSON is raw text, parsed like any other reply
        return reply_from_sample(sample, source=HOST_SOURCE, digest=digest)

    @staticmethod
    def _missing_reply(reply_path: Path) -> str:
        """Where ingest looked, and the likeliest slip: a reply written under another name."""
        message = f"no reply yet in {reply_path.parent} (looked for {reply_path.name})"
        stray = reply_path.parent / "reply.json"
        if stray != reply_path and stray.is_file():
            message += f"; {stray.name} is there, but this request's reply is {reply_path.name}"
        return message
