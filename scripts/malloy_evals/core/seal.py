"""Whether a run was answered sealed: the one decision every headline of a run makes about it.

run_answers.py records in run.json's `sandbox` how its answerers ran (bubblewrap, `none` for
--no-sandbox, `api-loop` for the in-process API loop). A run answered with `none` reads UNSEALED
in every headline built from it (RESULTS.md, summary.json, report.html, the comparison), through
`unsealed_note`, until a run answered sealed takes its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

UNSEALED = "UNSEALED"
NO_SANDBOX = "none"   # run.json `sandbox` of a run answered with --no-sandbox


def is_unsealed(info: Mapping[str, Any]) -> bool:
    """True when run.json says its answerers ran without the sandbox."""
    return info.get("sandbox") == NO_SANDBOX


def unsealed_note(runs: Iterable[tuple[str, Mapping[str, Any]]]) -> str | None:
    """`UNSEALED: run r1 answered with --no-sandbox ...` when any of the (name, run.json) pairs
    was answered unsealed, else None. Every headline builder calls this, and only this."""
    names = [name for name, info in runs if is_unsealed(info)]
    if not names:
        return None
    return (f"{UNSEALED}: run {', '.join(names)} answered with --no-sandbox (its answerers could "
            "read any file their user can; answer a new run sealed to replace it)")


def sealed_headline(headline: str, runs: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """The headline, led by the UNSEALED note when there is one."""
    note = unsealed_note(runs)
    return headline if note is None else f"{note}. {headline}"
