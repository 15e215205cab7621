"""How values read in text a person sees: the words of the JSON files they come from, not Python's.

A message quoting a value from a set, a ledger or a reply says `null`, `true` and `false`, as the
file does; an attempt without a sample is "no sample", never "sample None".
"""

from __future__ import annotations

import json
from typing import Any

# A quoted object or list longer than this is cut: the message names the field, not the value.
_MAX_SHOWN = 120


def shown(value: Any) -> str:
    """A value quoted in a message, as its file writes it: `null`, `true`, `3`, `'text'`, `[1, 2]`.

    Strings keep single quotes (`golden.kind: 'scalr' is not one of ...`), so a value stands out
    from the words around it."""
    if isinstance(value, str):
        return repr(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def sample_words(sample: Any) -> str:
    """`sample 2`, or `no sample` for an attempt answered once (sample null)."""
    return "no sample" if sample is None else f"sample {sample}"


def number_or_na(value: Any) -> str:
    """A figure that may be unknown: the number, or `n/a`."""
    return "n/a" if value is None else str(value)


def attempt_label(qid: str, sample: Any) -> str:
    """An attempt as pages, progress lines and messages name it: `q1`, or `q1#2` for sample 2."""
    return qid if sample is None else f"{qid}#{sample}"


def signed(points: Any, digits: int = 1) -> str:
    """A difference in points with its sign, `+2.5` / `-1.0`, and `0.0` for none (a zero shows no
    sign, whichever side of zero it was rounded from); `n/a` when it is not a number."""
    if isinstance(points, bool) or not isinstance(points, (int, float)):
        return "n/a"
    value = round(float(points), digits)
    return f"{0.0:.{digits}f}" if value == 0 else f"{value:+.{digits}f}"
