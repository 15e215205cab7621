"""Reading JSON that came from outside the kit: the JSON-lines files people write (fixtures,
calibration entries, authored replies), and `loads` for any outside JSON text.

JSON may spell a lone surrogate (`"\\ud800"`), which Python decodes into a string that cannot be
written as UTF-8 anywhere later (the ledger, an artifact, a digest, the terminal). `loads` puts
U+FFFD in its place, as a decoder of invalid UTF-8 bytes would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import InputError


def read_objects(path: str | Path) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; InputError naming file and line otherwise."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot be read: {exc}") from None
    out: list[tuple[int, dict]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except ValueError as exc:
            raise InputError(path, n, f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InputError(path, n, "must be a JSON object")
        out.append((n, obj))
    return out


def json_lines(text: str, path: str | Path) -> tuple[list[tuple[int, Any]], list[str]]:
    """(line number, value) for every non-blank line of a JSON-lines log, and its warnings.

    The one torn-line rule for a log a session writes as it goes (a transcript, a stream): a
    session killed mid-write leaves half a line, so the LAST non-blank line may be torn when a
    line before it was read; it is skipped with a warning and the lines before it still stand.
    Any other line that is not JSON, or a file whose only line is torn, is an InputError naming
    the line."""
    lines = text.splitlines()
    last = max((n for n, line in enumerate(lines, start=1) if line.strip()), default=0)
    records: list[tuple[int, Any]] = []
    warnings: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append((number, loads(line)))
        except json.JSONDecodeError as exc:
            if number == last and records:
                warnings.append(f"{path}:{number}: torn last line ignored")
                continue
            raise InputError(path, number, f"not JSON: {exc.msg}") from None
    return records, warnings


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _mended(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_mended(v) for v in value]
    if isinstance(value, dict):
        return {_mended(k): _mended(v) for k, v in value.items()}
    return value


def loads(text: str) -> Any:
    """json.loads for outside text, with any lone surrogate it spells replaced by U+FFFD (a
    surrogate pair is one character and stays). Every failure is a json.JSONDecodeError (with
    `msg` and `lineno`): nesting too deep for the decoder and numbers too long to convert
    included, which json.loads raises as other errors."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None
    except ValueError as exc:  # an integer longer than Python converts, and the like
        raise json.JSONDecodeError(str(exc), text, 0) from None
    return _mended(value) if _SURROGATE_ESCAPE.search(text) else value
