"""verify_goldens: re-derive every value golden from the truth package and compare.

The rules, tolerance included, are in reference/scoring.md.

A golden is only as good as the query behind it. For each `scalar` and `rows` golden this runs its
`canonicalQuery` on the set's truth package (semantics-free raw sources, never the model under
test) through the kit's runtime, trusted (unrestricted compile), and compares the result with the
stored value: numbers within the golden's `round` (half a unit in that decimal place), else
relative 1e-6; rows as a multiset unless the golden says `ordered`; golden columns matched by name.

Outcome per case: `ok`, `drift` (the value no longer follows from its query), `error` (the query
failed or the golden could not be read), `skipped` (unanswerable / criteria / no golden). Exit 1 on
any drift, else 3 when anything could not be checked (a finding outranks a skip), else 0.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, InputError, KitError
from malloy_evals.endpoint import runner as rt
from malloy_evals.sets import eval_set as sets
from malloy_evals.sets.eval_set import EvalSet

REL_TOL = 1e-6
VALUE_KINDS = ("scalar", "rows")
UNDEFENDED_STATUSES = ("invalid", "verified_wrong")
# Keys of a scalar golden's value object that are formatting, not columns.
SCALAR_META_KEYS = ("round", "currency", "unit")


# ---------------------------------------------------------------------------------------------
# Comparing values


def _as_number(value: Any) -> float | None:
    """A number from an int/float or a plain numeric string (`1,234.5` included); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip().replace(",", "")
        if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
            return float(text)
    return None


_MIDNIGHT = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ]00:00:00(\.0+)?(Z|[+-]00:?00)?$")
_TIMESTAMP = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]00:?00)?$")


def _as_text(value: Any) -> str:
    """Text for a non-numeric value; a date written as midnight is the date (DuckDB returns
    dates as timestamps), and a UTC timestamp drops its zero fraction and zone."""
    if isinstance(value, (_dt.datetime, _dt.date)):
        value = value.isoformat()
    text = str(value)
    m = _MIDNIGHT.match(text)
    if m:
        return m.group(1)
    m = _TIMESTAMP.match(text)
    if m and (m.group(3) is None or set(m.group(3)[1:]) == {"0"}):
        return f"{m.group(1)}T{m.group(2)}"
    return text


def values_equal(expected: Any, actual: Any, round_to: int | None = None) -> bool:
    """Whether one golden value and one derived value agree (the tolerance of
    reference/scoring.md)."""
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, bool) or isinstance(actual, bool):
        return str(expected).lower() == str(actual).lower()
    e, a = _as_number(expected), _as_number(actual)
    if e is not None and a is not None:
        if round_to is not None:
            # The golden is a rounded figure: the derived value must round to it. Half a unit of
            # the last kept decimal, plus a hair for binary representation.
            return abs(a - e) <= 0.5 * 10 ** (-round_to) + 1e-9 * max(1.0, abs(e))
        return math.isclose(e, a, rel_tol=REL_TOL, abs_tol=1e-12)
    return _as_text(expected) == _as_text(actual)


def _row_matches(gold: Mapping[str, Any], got: Mapping[str, Any], round_to: int | None) -> bool:
    return all(values_equal(v, got.get(k), round_to) for k, v in gold.items())


def compare_scalar(value: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Differences between a scalar golden `{column: value, round?}` and the query's rows."""
    round_to = value.get("round")
    round_to = int(round_to) if isinstance(round_to, (int, float)) else None
    columns = {k: v for k, v in value.items() if k not in SCALAR_META_KEYS}
    if not rows:
        return ["the canonical query returned no rows"]
    problems = []
    if len(rows) > 1:
        problems.append(f"the canonical query returned {len(rows)} rows; a scalar needs one")
    row = rows[0]
    for col, expected in columns.items():
        if col not in row:
            problems.append(f"column {col!r} not in the result (columns: {', '.join(row)})")
        elif not values_equal(expected, row[col], round_to):
            problems.append(f"{col}: golden {expected!r}, derived {row[col]!r}")
    return problems


def compare_rows(gold: Sequence[Mapping[str, Any]], got: Sequence[Mapping[str, Any]], *,
                 ordered: bool = False, round_to: int | None = None) -> list[str]:
    """Differences between golden rows and derived rows.

    Golden columns are matched by name (extra derived columns are ignored: the golden states what
    it commits to). Rows are a multiset unless `ordered`; each golden row claims one derived row.
    """
    problems: list[str] = []
    if len(gold) != len(got):
        problems.append(f"golden has {len(gold)} rows, derived {len(got)}")
    gold_cols = sorted({k for r in gold for k in r})
    got_cols = {k for r in got for k in r}
    missing = [c for c in gold_cols if c not in got_cols] if got else []
    if missing:
        problems.append(f"columns {', '.join(missing)} not in the result "
                        f"(columns: {', '.join(sorted(got_cols))})")
        return problems
    if problems:
        return problems
    if ordered:
        for i, (g, r) in enumerate(zip(gold, got, strict=True), start=1):
            if not _row_matches(g, r, round_to):
                problems.append(f"row {i}: golden {dict(g)}, derived {_project(r, g)}")
        return problems
    unclaimed = list(range(len(got)))
    for i, g in enumerate(gold, start=1):
        hit = next((j for j in unclaimed if _row_matches(g, got[j], round_to)), None)
        if hit is None:
            problems.append(f"golden row {i} {dict(g)} has no equal derived row")
        else:
            unclaimed.remove(hit)
    return problems


def _project(row: Mapping[str, Any], like: Mapping[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in like}


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class GoldenCheck:
    """One case's golden re-derived (or why not)."""

    qid: str
    kind: str | None
    status: str              # ok | drift | error | skipped
    problems: list[str] = field(default_factory=list)
    derived_rows: int | None = None
    # The tables the canonical query's compiled SQL reads under the truth package or data/
    # (relative to the set); None when no SQL was compiled. Empty: derived from no table at all.
    reads: list[str] | None = None


@dataclass(frozen=True)
class GoldenReport:
    """verify_goldens over a set: one check per case, and the exit decision."""

    set_dir: str
    truth_package: str | None
    checks: list[GoldenCheck]
    counts: dict[str, int]
    unmeasured: str | None = None  # why nothing could be checked at all (runtime missing, ...)

    @property
    def drifted(self) -> list[str]:
        return [c.qid for c in self.checks if c.status == "drift"]

    @property
    def exit_code(self) -> int:
        # Drift is the finding this exists for, and outranks a check that could not run.
        if self.drifted:
            return EXIT_FINDING
        if self.unmeasured or any(c.status == "error" for c in self.checks):
            return EXIT_UNMEASURED
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"set_dir": self.set_dir, "truth_package": self.truth_package,
                "counts": self.counts, "drifted": self.drifted, "unmeasured": self.unmeasured,
                "exit_code": self.exit_code, "checks": self.checks}


# ---------------------------------------------------------------------------------------------
# Checking a set


Executor = Callable[[str], list[dict[str, Any]]]  # canonical query -> rows


def check_golden(qid: str, golden: Mapping[str, Any] | None, execute: Executor,
                 load_rows: Callable[[], list[dict[str, Any]]] | None = None) -> GoldenCheck:
    """Re-derive one golden with `execute` and compare it (pure apart from the executor)."""
    if not isinstance(golden, Mapping):
        return GoldenCheck(qid, None, "skipped", ["no golden"])
    kind = golden.get("kind")
    if kind not in VALUE_KINDS:
        return GoldenCheck(qid, kind, "skipped", [f"kind {kind}: nothing to re-derive"])
    status = golden.get("status") or "verified"
    if status in UNDEFENDED_STATUSES:
        # A person already settled that this value does not hold; re-deriving it proves nothing.
        return GoldenCheck(qid, kind, "skipped", [f"status {status}: not defended"])
    query = golden.get("canonicalQuery")
    if not query:
        return GoldenCheck(qid, kind, "error", ["no canonicalQuery to re-derive the value from"])
    try:
        if kind == "scalar":
            expected: Any = golden.get("value")
            if not isinstance(expected, Mapping):
                return GoldenCheck(qid, kind, "error", ["scalar golden has no value object"])
        else:
            expected = golden.get("value")
            if expected is None and load_rows is not None:
                expected = load_rows()
            if not isinstance(expected, list):
                return GoldenCheck(qid, kind, "error", ["rows golden has no rows (value or path)"])
    except KitError as exc:
        return GoldenCheck(qid, kind, "error", [f"cannot read the golden: {exc}"])
    try:
        rows = execute(query)
    except KitError as exc:
        return GoldenCheck(qid, kind, "error", [f"canonical query failed: {exc}"])
    if kind == "scalar":
        problems = compare_scalar(expected, rows)
    else:
        round_to = golden.get("round")
        problems = compare_rows(expected, rows, ordered=bool(golden.get("ordered")),
                                round_to=int(round_to) if isinstance(round_to, int) else None)
    return GoldenCheck(qid, kind, "drift" if problems else "ok", problems, len(rows))


# A table the compiled SQL reads: a quoted path right after FROM or JOIN, bare or as the first
# argument of a table function (read_csv('...'), read_parquet([...]) ...).
_TABLE_RE = re.compile(r"\b(?:FROM|JOIN)\s+(?:\w+\s*\(\s*\[?\s*)?'((?:[^']|'')+)'", re.IGNORECASE)


def tables_read(sql: str, base: Path, roots: Sequence[Path], relative_to: Path) -> list[str]:
    """The files under `roots` (the truth package, data/) the compiled `sql` reads as tables,
    paths resolved from `base` (the model file's folder) and shown relative to `relative_to`.
    A query that reads none (a constant, a literal table) derives its value from no data."""
    found: list[str] = []
    resolved_roots = [r.resolve() for r in roots if r.is_dir()]
    for match in _TABLE_RE.finditer(sql):
        text = match.group(1).replace("''", "'")
        try:
            path = (base / text).resolve()
        except (OSError, ValueError, RuntimeError):
            continue
        if path.is_file() and any(path.is_relative_to(r) for r in resolved_roots):
            try:
                shown = path.relative_to(relative_to.resolve()).as_posix()
            except ValueError:
                shown = str(path)
            if shown not in found:
                found.append(shown)
    return found


def _truth_location(eval_set: EvalSet) -> tuple[Path | None, str | None, str | None]:
    """(truth package folder, its name, its model path); the folder is None when absent."""
    folder = Path(eval_set.truth_dir)
    return (folder if folder.is_dir() else None), eval_set.truth_package, eval_set.truth_model_path


def verify_goldens(set_dir: str | Path, qids: Sequence[str] | None = None, *,
                   runtime_factory: Callable[..., Any] | None = None) -> GoldenReport:
    """Re-derive every value golden of a set (or only `qids`) from its truth package."""

    eval_set = sets.load_set(Path(set_dir))
    cases = list(eval_set.cases.values())
    if qids:
        wanted = {q.lower() for q in qids}
        unknown = wanted - {c.qid.lower() for c in cases}
        if unknown:

            raise InputError(Path(set_dir) / "cases.jsonl", None,
                             f"no case with qid {', '.join(sorted(unknown))}")
        cases = [c for c in cases if c.qid.lower() in wanted]

    truth_dir, truth_name, model_path = _truth_location(eval_set)
    value_cases = [c for c in cases if isinstance(c.golden, Mapping)
                   and c.golden.get("kind") in VALUE_KINDS
                   and (c.golden.get("status") or "verified") not in UNDEFENDED_STATUSES]

    def report(checks: list[GoldenCheck], unmeasured: str | None = None) -> GoldenReport:
        counts = {s: sum(1 for c in checks if c.status == s)
                  for s in ("ok", "drift", "error", "skipped")}
        return GoldenReport(str(set_dir), truth_name, checks, counts, unmeasured)

    skipped = [check_golden(c.qid, c.golden, _never) for c in cases if c not in value_cases]
    if not value_cases:
        return report(skipped)
    if truth_dir is None:
        return report(skipped, f"{set_dir}: no truth package folder (truth/); nothing re-derived")
    why = rt.runtime_missing_reason() if runtime_factory is None else None
    if why:
        return report(skipped, why)

    factory = runtime_factory or rt.MalloyRuntime
    allow = rt.default_allow(truth_dir)
    data_dir = Path(eval_set.data_dir)
    if data_dir.is_dir() and data_dir.resolve() not in [a.resolve() for a in allow]:
        allow.append(data_dir)
    runtime = factory(truth_dir, allow=allow)
    checks = []
    compiled: list[str] = []  # the SQL of the query just run
    try:
        def execute(query: str) -> list[dict[str, Any]]:
            result = runtime.execute(query, model_path=model_path, trusted=True)
            sql = result.get("sql") if isinstance(result, Mapping) else None
            compiled[:] = [sql] if isinstance(sql, str) else []
            return list(result.get("rows") or [])

        model_dir = (Path(truth_dir) / model_path).parent if model_path else Path(truth_dir)
        for case in value_cases:
            compiled.clear()
            check = check_golden(
                case.qid, case.golden, execute,
                load_rows=functools.partial(sets.golden_value, case, Path(eval_set.dir)))
            if compiled:
                check = replace(check, reads=tables_read(compiled[0], model_dir,
                                                         [Path(truth_dir), data_dir],
                                                         Path(eval_set.dir)))
            checks.append(check)
    finally:
        runtime.close()
    by_qid = {c.qid: c for c in checks + skipped}
    return report([by_qid[c.qid] for c in cases])


def _never(query: str) -> list[dict[str, Any]]:  # pragma: no cover - skipped kinds never execute
    raise AssertionError("a skipped golden must not run a query")


def render_text(r: GoldenReport) -> str:
    """One line per checked case, then the totals."""
    lines = []
    for c in r.checks:
        if c.status == "skipped":
            continue
        detail = f": {'; '.join(c.problems)}" if c.problems else ""
        lines.append(f"{c.status:6} {c.qid}{detail}")
    if r.unmeasured:
        lines.append(f"could not check: {r.unmeasured}")
    n = r.counts
    lines.append(f"{n['ok']} ok, {n['drift']} drift, {n['error']} error, {n['skipped']} skipped "
                 f"(truth package {r.truth_package or '?'})")
    return "\n".join(lines)
