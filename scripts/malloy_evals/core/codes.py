"""THE cause-code table, parsed from skills/eval-diagnose/SKILL.md.

The table in that SKILL.md is the only copy of the codes: every script that validates a code asks
`load_codes()`. The coverage verdict vocabulary (MODELLED and the four gap verdicts,
reference/coverage.md) is defined here once and checked against the table by
`check_gap_verdicts`, so a rename in the table that is not made here stops check_coverage at
startup instead of writing codes nobody can read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from malloy_evals.core import paths, vocab
from malloy_evals.core.errors import InputError, UnmeasuredError

# Where the table lives. A module attribute (read at call time) so a test can point the loader at a
# modified copy of the SKILL.md.
TABLE_PATH: Path = paths.skill_md("eval-diagnose")

# The coverage reader's verdicts (reference/coverage.md), defined once: the `coverage_verdict`
# enumeration of the schemas, which the report schema checks too. MODELLED is the pass and
# deliberately not a cause code; every other verdict is a gap and must be a row of the table,
# with the same meaning there.
MODELLED = "MODELLED"
COVERAGE_VERDICTS: tuple[str, ...] = vocab.COVERAGE_VERDICTS
GAP_VERDICTS: tuple[str, ...] = tuple(v for v in COVERAGE_VERDICTS if v != MODELLED)

# A cause code is upper case, with `_` (RULE_UNWRITTEN) or `-` (NOT-RETURNED) inside.
CODE_PATTERN = re.compile(r"^[A-Z][A-Z_-]+$")
# A table row whose first cell is one back-quoted code: | `MISSING` | component | owner | meaning |
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")


@dataclass(frozen=True)
class CauseCode:
    """One row of the table: where the defect sits, who must act, and what the code means."""

    code: str        # e.g. "NOT-RETURNED"
    component: str   # one of vocab.COMPONENTS
    owner: str       # one of vocab.OWNERS
    meaning: str


def parse_codes(text: str, *, source: str | Path = "SKILL.md") -> dict[str, CauseCode]:
    """Every row of the cause-code table in `text`, keyed by code; bad rows raise InputError.

    A row counts when its first cell is a back-quoted upper-case code. Its component and owner
    must be in the closed vocabularies; a code may appear once.
    """
    components, owners = vocab.COMPONENTS, vocab.OWNERS
    codes: dict[str, CauseCode] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _ROW.match(line.strip())
        if not match:
            continue
        code = match.group(1).strip()
        if not CODE_PATTERN.match(code):
            continue  # a back-quoted lower-case word in some other table is not a code row
        cells = [c.strip() for c in match.group(2).split("|")]
        if len(cells) < 3:
            raise InputError(source, number, f"code {code}: expected component, owner, meaning")
        component, owner = cells[0], cells[1]
        meaning = " | ".join(cells[2:]).strip()
        if component not in components:
            raise InputError(source, number,
                             f"code {code}: component {component!r} is not one of {list(components)}")
        if owner not in owners:
            raise InputError(source, number,
                             f"code {code}: owner {owner!r} is not one of {list(owners)}")
        if not meaning:
            raise InputError(source, number, f"code {code}: empty meaning")
        if code in codes:
            raise InputError(source, number, f"code {code} appears twice in the table")
        codes[code] = CauseCode(code=code, component=component, owner=owner, meaning=meaning)
    if not codes:
        raise InputError(source, None, "no cause-code table found (rows starting | `CODE` |)")
    return codes


def load_codes(path: Path | None = None) -> dict[str, CauseCode]:
    """The cause-code table of eval-diagnose/SKILL.md (or of `path`), keyed by code."""
    source = Path(path) if path is not None else TABLE_PATH
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(source, None, f"cannot read the cause-code table: {exc.strerror}") from exc
    return parse_codes(text, source=source)


def missing_gap_verdicts(codes: dict[str, CauseCode]) -> list[str]:
    """The coverage gap verdicts that are not rows of the table (empty when all are)."""
    return [v for v in GAP_VERDICTS if v not in codes]


def check_gap_verdicts(path: Path | None = None) -> dict[str, CauseCode]:
    """Load the table and require every gap verdict to be a row (check_coverage's start-up
    check, reference/coverage.md).

    Raises UnmeasuredError (exit 3) naming the verdicts the table lacks, and the table's path.
    """
    codes = load_codes(path)
    lacking = missing_gap_verdicts(codes)
    if lacking:
        where = path if path is not None else TABLE_PATH
        raise UnmeasuredError(
            f"coverage verdict(s) {', '.join(lacking)} are not rows of the cause-code table in "
            f"{where}; rename them in scripts/malloy_evals/codes.py and the table together")
    if MODELLED in codes:
        raise UnmeasuredError(f"{MODELLED} is a row of the cause-code table in "
                              f"{path or TABLE_PATH}; it is the coverage pass, not a cause code")
    return codes


def render_table(codes: dict[str, CauseCode]) -> str:
    """The table as markdown, for prompts that must carry the exact vocabulary."""
    lines = ["| code | component | owner | meaning |", "|---|---|---|---|"]
    lines += [f"| `{c.code}` | {c.component} | {c.owner} | {c.meaning} |" for c in codes.values()]
    return "\n".join(lines)
