"""The one terminal sanitiser: text from outside the kit never drives the terminal it is printed on.

Answers, questions, qids, judge whys, gold notes, file names and names given with --by reach
stdout and stderr inside review cards, score_run and diagnose lines, import_set's messages and
error lines. A control character among them (ESC starting a colour or an OSC sequence that
retitles the window or plants a link, BEL, CR that rewrites the line, a C1 control, a bidi
override that reorders what is shown) is printed as its escape, `\\u001b`, visible and inert.

`safe(text)` is the rule; `SafeStream` applies it to everything written to a stream, and
`cli.run` puts one on stdout and stderr for every script, so no printed surface is left out. The
escape is JSON's own spelling: inside a `--json` document (where json.dumps already escaped the
C0 controls) a C1 control or a bidi override becomes the same escape, so the document reads back
to the same value.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

# C0 controls but tab and newline, DEL, C1 controls, and the Unicode format characters that
# reorder or hide text (bidi embeddings, overrides and isolates; line and paragraph separators).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def safe(text: str) -> str:
    """`text` with every control character shown as its `\\uXXXX` escape (tab and newline kept)."""
    return _UNSAFE.sub(_escape, text)


class SafeStream:
    """A text stream whose every write goes through `safe` (everything else is the stream's)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(safe(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
