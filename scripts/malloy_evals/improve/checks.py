"""The checks on a proposed model change, before anything is spent on it.

A change may go to the gate only when: it compiles (the Node runner loads the candidate package
with no error); it does not write a golden's figure (a numeric literal of 4 or more significant
digits that equals, at the golden's precision, a value of some golden, or a quoted string equal
to a golden's text cell: anywhere in the lines it adds, descriptions and comments included); and
it does not touch the set (the candidate is not the set's cases, goldens or truth, and those are
byte for byte what they were when the improve journal started). Every reason is listed, never
only the first (skills/eval-improve/reference/improve.md).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, InputError
from malloy_evals.endpoint.runner import MalloyRuntime, default_allow
from malloy_evals.improve.model import added_lines, folder_digest, unified_diff
from malloy_evals.sets.eval_set import CASES_FILE, SET_FILE, EvalSet, golden_value

# What of a set a model change must never touch (besides set.json and cases.jsonl).
SET_FOLDERS = ("goldens", "truth")
MIN_SIGNIFICANT = 4
# A number as a model text writes it: 7845.21, 7,845.21, -0.4029, 1.2e3.
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
_QUOTED = re.compile(r"'((?:[^'\\\n]|\\.)*)'|\"((?:[^\"\\\n]|\\.)*)\"|`((?:[^`\\\n]|\\.)*)`")


@dataclass(frozen=True)
class GoldenFigure:
    """A value some golden holds, with the precision it is compared at."""

    qid: str
    value: float
    decimals: int | None    # compare rounded to this many decimals; None: exactly


@dataclass(frozen=True)
class GoldenCells:
    """Every golden's numbers and text cells, the things a change must never write."""

    figures: list[GoldenFigure]
    texts: dict[str, str]   # casefolded text cell -> the qid holding it


def _decimals_written(value: float) -> int:
    text = repr(float(value))
    if "e" in text or "E" in text:
        return 0
    return len(text.split(".")[1].rstrip("0")) if "." in text else 0


def _cells(value: Any) -> Iterator[tuple[Any, int | None]]:
    """The cells of a golden value with the precision its `round` gives (None: as written)."""
    if isinstance(value, dict):
        rnd = value.get("round")
        decimals = rnd if isinstance(rnd, int) and not isinstance(rnd, bool) else None
        for k, v in value.items():
            if k != "round":
                yield v, decimals
    elif isinstance(value, list):
        for row in value:
            yield from _cells(row)
    else:
        yield value, None


def golden_cells(eval_set: EvalSet) -> GoldenCells:
    """Every golden figure and text cell of the set (unreadable golden files are skipped: the
    set's own checks report them)."""
    figures: list[GoldenFigure] = []
    texts: dict[str, str] = {}
    for qid, case in eval_set.cases.items():
        try:
            value = golden_value(case, eval_set.dir)
        except InputError:
            continue
        for cell, decimals in _cells(value):
            if isinstance(cell, bool) or cell is None:
                continue
            number = _as_number(cell)
            if number is not None:
                figures.append(GoldenFigure(qid, number, decimals if decimals is not None
                                            else _decimals_written(number)))
            elif isinstance(cell, str) and cell.strip():
                texts.setdefault(cell.strip().casefold(), qid)
    return GoldenCells(figures, texts)


def _as_number(cell: Any) -> float | None:
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        return float(cell) if math.isfinite(float(cell)) else None
    if isinstance(cell, str) and _NUMBER.fullmatch(cell.strip()):
        return float(cell.strip().replace(",", ""))
    return None


def significant_digits(literal: str) -> int:
    """Significant digits of a number as written: `7845.21` 6, `0.0588` 3, `1200` 2."""
    mantissa = re.split(r"[eE]", literal.lstrip("-+"))[0].replace(",", "")
    if "." in mantissa:
        return len(mantissa.replace(".", "").lstrip("0"))
    return len(mantissa.lstrip("0").rstrip("0"))


def _equal_at(literal: float, figure: GoldenFigure) -> bool:
    if figure.decimals is None:
        return math.isclose(literal, figure.value, rel_tol=1e-9, abs_tol=0.0)
    scale = 10 ** figure.decimals
    return round(literal * scale) == round(figure.value * scale)


def golden_figures_written(lines: list[str], cells: GoldenCells) -> list[str]:
    """Each place the added `lines` write a golden's figure or text cell, in words."""
    found = []
    for line in lines:
        for m in _NUMBER.finditer(line):
            literal = m.group(0)
            if significant_digits(literal) < MIN_SIGNIFICANT:
                continue
            value = float(literal.replace(",", ""))
            hit = next((f for f in cells.figures if _equal_at(value, f)), None)
            if hit is not None:
                found.append(f"writes {literal}, the golden figure of {hit.qid}: a model change "
                             "must make the answer derivable, never state it")
        for m in _QUOTED.finditer(line):
            text = next(g for g in m.groups() if g is not None).strip()
            qid = cells.texts.get(text.casefold()) if text else None
            if qid is not None:
                found.append(f"writes the string {m.group(0)}, a cell of the golden of {qid}")
    return list(dict.fromkeys(found))


def _file_sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def set_digests(eval_set: EvalSet) -> dict[str, str | None]:
    """What of the set a change must not touch, digested: set.json, cases.jsonl, goldens/,
    truth/ (None: absent)."""
    out: dict[str, str | None] = {SET_FILE: _file_sha(eval_set.dir / SET_FILE),
                                  CASES_FILE: _file_sha(eval_set.dir / CASES_FILE)}
    for name in SET_FOLDERS:
        d = eval_set.dir / name
        out[name] = folder_digest(d) if d.is_dir() else None
    return out


def set_touches(eval_set: EvalSet, candidate: Path,
                started: Mapping[str, str | None] | None) -> list[str]:
    """How the change touches the set: the candidate is (or holds, or sits in) its cases,
    goldens or truth, or those changed since the journal started."""
    found = []
    cand = candidate.resolve()
    set_dir = eval_set.dir.resolve()
    if cand == set_dir or set_dir in cand.parents and cand.relative_to(set_dir).parts[0] in SET_FOLDERS:
        found.append(f"the candidate {candidate} is the set's own folder or inside its "
                     f"{'/'.join(SET_FOLDERS)}: a model change lives beside them, never in them")
    for name in (SET_FILE, CASES_FILE, *SET_FOLDERS):
        part = set_dir / name
        if (cand / name).exists() and part.resolve() == (cand / name).resolve():
            found.append(f"the candidate holds the set's {name}")
        if name in SET_FOLDERS and cand in part.resolve().parents and part.exists():
            found.append(f"the candidate holds the set's {name}/")
    if started is not None:
        now = set_digests(eval_set)
        for name, digest in started.items():
            if now.get(name) != digest:
                found.append(f"the set's {name} changed since the improve journal started: a "
                             "change to the model never edits the set")
    return list(dict.fromkeys(found))


def compile_errors(candidate: Path) -> list[str]:
    """The candidate package's compile errors through the Node runner (exit 3 without Node)."""
    with MalloyRuntime(candidate, allow=default_allow(candidate)) as runtime:
        surface = runtime.describe()
    errors = surface.get("errors") or []
    out = []
    for e in errors[:5]:
        if isinstance(e, dict):
            where = e.get("path") or e.get("model") or ""
            out.append(f"does not compile: {where}{': ' if where else ''}"
                       f"{e.get('message') or e.get('error') or e}")
        else:
            out.append(f"does not compile: {e}")
    if not surface.get("models") and not out:
        out.append("does not compile: no model loaded")
    return out


@dataclass(frozen=True)
class CheckResult:
    """improve.py check: may this change go to the gate? Every reason it may not."""

    set_dir: str
    model_dir: str
    candidate: str
    candidate_digest: str
    diff: str
    reasons: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FINDING


def check_change(eval_set: EvalSet, candidate: Path, *,
                 started: Mapping[str, str | None] | None = None,
                 baseline_model: Path | None = None) -> CheckResult:
    """Every check of a change (the candidate against `baseline_model`, default the set's
    model/): set untouched, no golden figure written, not empty, compiles."""
    before = baseline_model or eval_set.dir / "model"
    reasons = set_touches(eval_set, candidate, started)
    diff = unified_diff(before, candidate)
    notes = []
    if not diff:
        if folder_digest(before) == folder_digest(candidate):
            reasons.append("the candidate is the model unchanged: there is no change to gate "
                           "(an edit made in model/ itself is read against the improve "
                           "journal's checkpoint)")
        else:
            notes.append("the change touches no text file the diff reads (only binary or "
                         "unreadable files differ)")
    reasons += golden_figures_written(added_lines(diff), golden_cells(eval_set))
    if not (candidate / eval_set.target_model_path).is_file():
        reasons.append(f"the candidate has no {eval_set.target_model_path} (the set's "
                       "targetModelPath)")
    else:
        reasons += compile_errors(candidate)
    return CheckResult(set_dir=str(eval_set.dir), model_dir=str(before),
                       candidate=str(candidate), candidate_digest=folder_digest(candidate),
                       diff=diff, reasons=reasons, notes=notes)


def render_check(r: CheckResult) -> str:
    """What improve.py check prints."""
    lines = [f"change {r.candidate} against {r.model_dir}:"]
    lines += ["  " + line for line in (r.diff.splitlines() or ["(no textual difference)"])]
    if r.ok:
        lines.append("checks passed: the change compiles, writes no golden figure and leaves "
                     "the set alone; it may go to the gate")
    else:
        lines.append(f"REFUSED ({len(r.reasons)} reason{'s' if len(r.reasons) != 1 else ''}):")
        lines += [f"  - {x}" for x in r.reasons]
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)
