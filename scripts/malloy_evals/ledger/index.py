"""The appender's index over events.jsonl: ids, voids and live score ids, never the events.

It streams only the bytes appended since its last look (by any process), so appending to a
200,000-event ledger costs about a second and a few MiB.
"""

from __future__ import annotations

import json
import os
import re
from array import array
from itertools import accumulate, repeat
from typing import Any, cast

from malloy_evals.ledger.events import UNIQUE_KINDS
from malloy_evals.ledger.rules import LedgerRules

# The appender's index (rules 5 and void targets) streams the ledger and keeps what the rules need:
# every id as a hash and an offset (16 bytes an event), and, for voids and the two unique kinds, the
# ids themselves. It never holds the events, so its memory follows attempts and voids, not lines.
_INDEX_CHUNK = 1 << 20
# A line the kit wrote starts `{"kind":"<kind>","event_id":"<id>",` (json.dumps keeps _prepare's key
# order). For such a line of a kind the rules ignore, the id is all the index needs, so it is cut
# out of the bytes instead of decoding the whole line (4x cheaper on get_context lines). Anything
# else, hand-written lines included, is decoded with json.loads.
_KIT_LINE = re.compile(rb'\{"kind":"([a-z_]+)","event_id":"([!#-\[\]-~]+)",')
_RULED_KINDS = frozenset({b"void", *(k.encode() for k in UNIQUE_KINDS)})


def _id_hash(event_id: str) -> int:
    """The table hash of an event id: the hash of its UTF-8 bytes (what a kit line holds raw)."""
    return hash(event_id.encode("utf-8", "surrogatepass"))


def _decode_line(line: bytes) -> dict[str, Any] | None:
    """The event on one ledger line, or None when the line is not a whole JSON object (as parse_ledger)."""
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _line_at(fd: int, offset: int) -> bytes:
    """The line starting at byte `offset` of the open file, without its newline."""
    parts: list[bytes] = []
    while True:
        chunk = os.pread(fd, 1 << 16, offset)
        if not chunk:
            break
        nl = chunk.find(b"\n")
        if nl >= 0:
            parts.append(chunk[:nl])
            break
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


class _IdTable:
    """Every event id of the ledger as a hash, beside the byte offset of its line.

    Two flat arrays, 16 bytes an event, where a set of id strings costs about 120: the index's
    only per-event memory. Appending is C-speed `extend`; a lookup is one pass over the hashes for
    a whole batch, then the candidate lines are read back, so answers stay exact.
    """

    def __init__(self) -> None:
        self.hashes = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.hashes)

    def add(self, h: int, offset: int) -> None:
        """Record that the line at `offset` holds an event whose id hashes to `h`."""
        self.hashes.append(h)
        self.offsets.append(offset)

    def extend(self, hashes: list[int], offsets: list[int]) -> None:
        """`add` over parallel lists."""
        self.hashes.extend(hashes)
        self.offsets.extend(offsets)

    def candidates(self, wanted: set[int]) -> list[int]:
        """Offsets of the lines whose id hash is in `wanted` (one pass, however many are wanted)."""
        offsets = self.offsets
        return [offsets[i] for i, h in enumerate(self.hashes) if h in wanted]


class Index:
    """What an appender must know of the ledger to enforce its rules (`LedgerRules`), read incrementally.

    `refresh` (under the append lock) reads only the bytes past `offset`, the end of the last line
    it took in; it starts over when the file is another file (inode) or shorter than `offset`.
    """

    def __init__(self) -> None:
        self.file: tuple[int, int] | None = None  # (st_dev, st_ino) of the file indexed
        self.offset = 0
        self.ids = _IdTable()
        self.rules = LedgerRules()

    def add(self, event: dict[str, Any], offset: int) -> None:
        """Take in one event whose line starts at byte `offset`."""
        if self.add_id(event, offset):
            self.rules.take(event)

    def add_id(self, event: dict[str, Any], offset: int) -> bool:
        """Record the event's id in the id table (not its rules); False when it has no usable id."""
        eid = event.get("event_id")
        if isinstance(eid, str):
            self.ids.add(_id_hash(eid), offset)
            return True
        return False

    def add_line(self, line: bytes, offset: int) -> None:
        """Take in one ledger line (without its newline) starting at byte `offset`."""
        self._take_block(line + b"\n", offset)

    def refresh(self, fd: int) -> bytes:
        """Take in the whole lines past `offset` of the locked file `fd`; return the bytes after the
        last newline (a torn line, usually empty), which the caller decides about."""
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.file or st.st_size < self.offset:
            # Another file, or a rewritten one: start over, in place.
            self.__init__()  # type: ignore[misc]
            self.file = (st.st_dev, st.st_ino)
        pos, end, carry = self.offset, st.st_size, b""
        while pos < end:
            chunk = os.pread(fd, min(_INDEX_CHUNK, end - pos), pos)
            if not chunk:
                break
            pos += len(chunk)
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n") + 1
            carry = buf[cut:]
            if cut:
                self.offset = self._take_block(buf if cut == len(buf) else buf[:cut],
                                               pos - len(buf))
        return carry

    def _take_block(self, block: bytes, start: int) -> int:
        """Take in a block of whole lines, each ending in a newline, from byte `start`; returns the
        offset past it.

        This runs over every line of the ledger, so the common case is decided for the block at
        once: when every line has the kit's prefix, ends in `}` and the block holds exactly one
        `"kind"` and one `"event_id"` per line, no line repeats either key (json.loads would take
        the repeat) and only lines of the ruled kinds (voids, scores) need decoding; the others give
        their id straight from the bytes. Other blocks go line by line, decoding every line not in
        the kit's shape."""
        lines = block.split(b"\n")
        lines.pop()  # the empty string after the last newline
        starts = list(accumulate([len(line) + 1 for line in lines], initial=start))
        found = list(map(_KIT_LINE.match, lines))
        n = len(lines)
        if (None not in found and all(map(bytes.endswith, lines, repeat(b"}")))
                and block.count(b'"kind"') == n and block.count(b'"event_id"') == n):
            matches = cast("list[re.Match[bytes]]", found)  # None is not in it (checked above)
            self.ids.extend([hash(m[2]) for m in matches], starts[:-1])
            ruled = _RULED_KINDS
            for i in [i for i, m in enumerate(matches) if m[1] in ruled]:
                event = _decode_line(lines[i])
                if event is not None:  # else its id stays in the table; `existing` reads it back
                    self.rules.take(event)
            return starts[-1]
        for line, m, offset in zip(lines, found, starts, strict=False):
            if (m is not None and m[1] not in _RULED_KINDS and line.endswith(b"}")
                    and line.count(b'"kind"') == 1 and line.count(b'"event_id"') == 1):
                self.ids.add(hash(m[2]), offset)
            elif line:
                event = _decode_line(line)
                if event is not None:
                    self.add(event, offset)
        return starts[-1]

    def existing(self, fd: int, event_ids: set[str]) -> set[str]:
        """Which of `event_ids` the indexed ledger holds (exact: candidate lines are read back)."""
        found = {i for i in event_ids if i in self.rules.void_ids or i in self.rules.unique_key_of}
        rest = event_ids - found
        if rest:
            for offset in self.ids.candidates({_id_hash(i) for i in rest}):
                event = _decode_line(_line_at(fd, offset))
                eid = event.get("event_id") if event is not None else None
                if isinstance(eid, str) and eid in rest:
                    found.add(eid)
        return found
