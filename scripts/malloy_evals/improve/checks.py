"""The checks on a proposed model change, before anything is spent on it.

A change may go to the gate only when: it compiles (the Node runner loads the candidate package
with no error); it does not write a golden's figure (a numeric literal of 4 or more significant
digits that equals, at the golden's precision, a value of some golden, or a quoted string equal
to a golden's text cell: anywhere in the lines it adds, descriptions and comments included); it
computes no golden's value out of no data (improve/values.py); and it does not touch the set (the candidate is not the set's cases, goldens or truth, and those are
byte for byte what they were when the improve journal started). Every reason is listed, never
only the first (skills/eval-improve/reference/improve.md).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK
from malloy_evals.endpoint.runner import MalloyRuntime, default_allow
from malloy_evals.improve.cells import (
    MIN_SIGNIFICANT,
    NUMBER,
    GoldenCells,
    equal_at,
    golden_cells,
    significant_digits,
)
from malloy_evals.improve.model import added_lines, folder_digest, unified_diff
from malloy_evals.improve.values import ValueCheck, baseline_sites, check_values
from malloy_evals.sets.eval_set import CASES_FILE, SET_FILE, EvalSet

# What of a set a model change must never touch (besides set.json and cases.jsonl).
SET_FOLDERS = ("goldens", "truth")
_QUOTED = re.compile(r"'((?:[^'\\\n]|\\.)*)'|\"((?:[^\"\\\n]|\\.)*)\"|`((?:[^`\\\n]|\\.)*)`")


def golden_figures_written(lines: list[str], cells: GoldenCells) -> list[str]:
    """Each place the added `lines` write a golden's figure or text cell, in words."""
    found = []
    for line in lines:
        for m in NUMBER.finditer(line):
            literal = m.group(0)
            if significant_digits(literal) < MIN_SIGNIFICANT:
                continue
            value = float(literal.replace(",", ""))
            hit = next((f for f in cells.figures if equal_at(value, f)), None)
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


def compile_errors(surface: Mapping[str, Any]) -> list[str]:
    """The candidate's compile errors from its runner's `describe`: each error the compiler
    reports with its file and line (warnings, such as one on an unchanged line, are not
    errors), else the runner's message."""
    out = []
    for e in surface.get("errors") or []:
        if not isinstance(e, dict):
            out.append(f"does not compile: {e}")
            continue
        where = e.get("path") or e.get("model") or ""
        errors = [p for p in e.get("problems") or []
                  if isinstance(p, dict) and p.get("severity") == "error"]
        for p in errors:
            at = p.get("at") or {}
            line = at.get("line")
            place = (f"{where} line {line + 1}" if isinstance(line, int) else where)
            out.append(f"does not compile: {place}: {p.get('message')}")
        if not errors:
            out.append(f"does not compile: {where}{': ' if where else ''}"
                       f"{e.get('message') or e.get('error') or e}")
    if not surface.get("models") and not out:
        out.append("does not compile: no model loaded")
    return out[:5]


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
    values: dict[str, Any] | None = None    # what the value check evaluated (None: not run)

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
    model/): set untouched, no golden figure written, not empty, compiles, and no golden value
    computed out of no data (improve/values.py)."""
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
    cells = golden_cells(eval_set)
    reasons += golden_figures_written(added_lines(diff), cells)
    values: ValueCheck | None = None
    if not (candidate / eval_set.target_model_path).is_file():
        reasons.append(f"the candidate has no {eval_set.target_model_path} (the set's "
                       "targetModelPath)")
    else:
        # The model before the change compiles beside the candidate meanwhile: its definitions
        # are what the value check compares with.
        with ThreadPoolExecutor(max_workers=1) as pool, \
                MalloyRuntime(candidate, allow=default_allow(candidate), pool_size=1) as runtime:
            sites_before = pool.submit(baseline_sites, before, candidate) if diff else None
            errors = compile_errors(runtime.describe())
            reasons += errors
            if not errors and sites_before is not None:
                values = check_values(candidate, before, runtime, cells, sites_before.result())
    if values is not None:
        reasons += values.reasons
        notes += [values.summary(), *values.notes]
    return CheckResult(set_dir=str(eval_set.dir), model_dir=str(before),
                       candidate=str(candidate), candidate_digest=folder_digest(candidate),
                       diff=diff, reasons=reasons, notes=notes,
                       values=values.counts() if values is not None else None)


def render_check(r: CheckResult) -> str:
    """What improve.py check prints."""
    lines = [f"change {r.candidate} against {r.model_dir}:"]
    lines += ["  " + line for line in (r.diff.splitlines() or ["(no textual difference)"])]
    if r.ok:
        lines.append("checks passed: the change compiles, writes no golden figure, computes "
                     "none out of no data and leaves the set alone; it may go to the gate")
    else:
        lines.append(f"REFUSED ({len(r.reasons)} reason{'s' if len(r.reasons) != 1 else ''}):")
        lines += [f"  - {x}" for x in r.reasons]
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)
