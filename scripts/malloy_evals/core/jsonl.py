"""Reading the JSON-lines files people write (fixtures, calibration entries, authored replies)."""

from __future__ import annotations

import json
from pathlib import Path

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
            obj = json.loads(line)
        except ValueError as exc:
            raise InputError(path, n, f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InputError(path, n, "must be a JSON object")
        out.append((n, obj))
    return out
