"""`hand:<FILE>`: replies a person wrote (JSON lines of `{key, replies}`), answered by key."""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from collections.abc import Container
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import InputError
from malloy_evals.core.jsonl import read_objects
from malloy_evals.llm.base import (
    HAND_AUTHORED,
    LlmReply,
    LlmRequest,
    OneShot,
    RecordingMissing,
    reply_from_sample,
)

_SAMPLE_KEY = re.compile(r"^(?P<base>.+)\.s[1-9][0-9]*$")


def answering_key(key: str, authored: Container[str]) -> str | None:
    """The authored key that answers `key`: itself, or for a judge sample `<key>.sN` with no line
    of its own, the attempt's `<key>` (a person writes one reply per attempt; asked K times, the
    judge gets it K times). None when neither was written."""
    if key in authored:
        return key
    m = _SAMPLE_KEY.match(key)
    return m.group("base") if m and m.group("base") in authored else None


class HandProvider(OneShot):
    """`hand:<FILE>`: replies a person wrote, as JSONL lines `{key, replies: [reply, ...]}`.
    The k-th call of a key gets replies[k] (the last one repeats); a judge sample's key
    (`<key>.sN`) without a line of its own is answered from `<key>` (`answering_key`). A reply
    that is an object is the structured reply; a string is raw text (to exercise the text
    parser)."""

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
        key = answering_key(request.key, self.replies)
        if key is None:
            raise RecordingMissing(f"{self.spec}: no authored reply for key {request.key}")
        with self._lock:
            k = self._calls[request.key]
            self._calls[request.key] += 1
        items = self.replies[key]
        return reply_from_sample(items[min(k, len(items) - 1)], source=HAND_AUTHORED,
                                 digest=request.digest(model=HAND_AUTHORED))
