"""The value check: a change must not compute a golden's value out of no data.

The figure check (improve/checks.py) reads the text a change adds, and arithmetic splits a figure
past it (`7000 + 845.21`). This check reads what the change computes. Every dimension, measure,
view and named query the candidate adds or changes (the model has nothing at that place, or its
definition's digest differs), and every one that reads such a definition, is evaluated on the
set's data by the candidate's own runner,
restricted as an answerer's query is: a measure ungrouped and grouped by each golden table's text
columns its source reaches, a dimension by its values, a view and a query by their rows.

A cell equal to a golden value at the golden's precision (or, for a golden of 4 or more
significant digits, within 1% of it) is a hit. A hit is refused when its column does not follow
the data:
- a number: the column holds the same values, at the golden's precision, when every number in
  the set's tables is shifted by one and again when every third row is dropped;
- a text: when every text in the set's tables is relabelled, no cell of the column carries the
  relabelling (the text was written in the model, not read from the data).

The set's tables are all the tables the candidate reads, except files the change itself adds or
edits inside the candidate folder: a constant in a table the change writes is a constant.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from malloy_evals.endpoint.runner import MalloyQueryError, MalloyRuntime, default_allow
from malloy_evals.improve.cells import (
    GoldenCells,
    GoldenFigure,
    as_number,
    equal_at,
    significant_digits,
)

NUMBER_VARIANTS = ("shifted", "subset")  # a number that follows the data moves under one of them
TEXT_VARIANT = "relabelled"
RELABEL_MARK = "\u00a7"                  # what the runner's relabelled variant appends to a text
NEAR = 0.01                              # a figure within 1% of a golden is near it
NEAR_DIGITS = 4                          # ... for goldens of this many significant digits or more
MIN_VALUE_DIGITS = 2                     # goldens of 1 significant digit (0, 3) are not figures
MAX_GROUPINGS = 8                        # groupings a measure is evaluated by
EVALUATED_KINDS = ("dimension", "measure", "view", "query")
GROUP_KEY = "group_key"                  # the column a grouped measure's probe groups by
_VARIANT_WORDS = {"shifted": "every number in the set's tables is shifted by one",
                  "subset": "every third row is dropped"}


@dataclass(frozen=True)
class Site:
    """One definition of the candidate, where it is written and what it computes."""

    model: str              # the model file it was compiled in (package-relative)
    source: str | None      # None for a named query
    path: str               # its field path from the source (`orders.status`), or the query
    kind: str               # dimension | measure | view | query
    column: bool            # a table's own column (its line is the table's)
    file: str               # the file it is written in, relative to the candidate
    line: int               # 1-based line of the definition
    expression: str
    digest: str
    changed: bool = True    # False: unchanged itself, it reads a definition the change made

    @property
    def name(self) -> str:
        return f"{self.source}.{self.path}" if self.source else self.path


@dataclass(frozen=True)
class Probe:
    """One query that evaluates a site, and how (ungrouped, grouped by a path, its values)."""

    site: Site
    query: str
    how: str
    grouping: str | None = None   # the path a measure is grouped by (its column is GROUP_KEY)


@dataclass(frozen=True)
class Hit:
    """A result cell equal (or near) a golden value."""

    column: str
    computed: Any
    qid: str
    golden: Any
    decimals: int | None    # the golden's precision (numbers); None for a text
    near: bool = False


@dataclass
class ValueCheck:
    """What the value check found: refusals in words, and what it evaluated."""

    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sites: int = 0           # definitions evaluated
    queries: int = 0         # queries run on the set's data
    variant_queries: int = 0  # queries run on its variants (only for results that hit a golden)
    varied_tables: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, Any]:
        return {"sites": self.sites, "queries": self.queries,
                "variant_queries": self.variant_queries, "varied_tables": self.varied_tables,
                "refused": len(self.reasons)}

    def summary(self) -> str:
        return (f"values: {self.sites} added or changed definition"
                f"{'s' if self.sites != 1 else ''} evaluated ({self.queries} "
                f"quer{'ies' if self.queries != 1 else 'y'} on the set's data, "
                f"{self.variant_queries} on its variants)")


# ---------------------------------------------------------------------------------------------
# Which definitions changed


def _file_of(url: str | None) -> Path | None:
    if not url or not url.startswith("file:"):
        return None
    return Path(unquote(urlparse(url).path))


def _definition_line(lines: list[str], start: int, end: int, name: str) -> int:
    """The 0-based line, between start and end, where `name is` is written (a range begins at
    the definition's doc annotation); start when none."""
    pattern = re.compile(rf"(?<![\w`]){re.escape(name)}`?\s+is\b")
    for i in range(max(0, start), min(len(lines), end + 1)):
        if pattern.search(lines[i]):
            return i
    return start


def _site(raw: Mapping[str, Any], model: str, package: Path,
          texts: dict[Path, list[str]], *, changed: bool = True) -> Site | None:
    kind = raw.get("kind")
    if kind not in EVALUATED_KINDS:
        return None
    path = _file_of(raw.get("url"))
    line, end_line = raw.get("line"), raw.get("end_line")
    start = line if isinstance(line, int) else 0
    end = end_line if isinstance(end_line, int) else start
    name = str(raw.get("path") or "").rsplit(".", 1)[-1]
    lines: list[str] = []
    if path is not None:
        if path not in texts:
            try:
                texts[path] = path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                texts[path] = []
        lines = texts[path]
    if raw.get("column"):
        at, expression = start, name
    else:
        at = _definition_line(lines, start, end, name) if lines else start
        expression = raw.get("code") or (lines[at].strip() if at < len(lines) else "") or name
    try:
        file = path.relative_to(package).as_posix() if path else model
    except ValueError:
        file = str(path)
    return Site(model=model, source=raw.get("source"), path=str(raw.get("path") or ""),
                kind=str(kind), column=bool(raw.get("column")), file=file, line=at + 1,
                expression=" ".join(expression.split()),
                digest=str(raw.get("digest") or ""), changed=changed)


def _raw_sites(surface: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for model in surface.get("models") or []:
        for raw in model.get("sites") or []:
            yield str(model.get("path") or ""), raw


Key = tuple[str, "str | None", str]  # (model, source, path): one place a definition is reached


def _key(model: str, raw: Mapping[str, Any]) -> Key:
    return (model, raw.get("source"), str(raw.get("path") or ""))


def _place(raw: Mapping[str, Any]) -> tuple:
    """Where a definition is written and what it computes: one definition, however reached."""
    return (raw.get("url"), raw.get("line"), raw.get("end_line"), raw.get("digest"))


def readers_of(definitions: Mapping[str, Any], changed: set[Key]) -> set[Key]:
    """The definitions (from the runner's `definitions`) that read a changed one, directly or
    through others, and are not changed themselves."""
    reached = set(changed)
    grew = True
    while grew:
        grew = False
        for model in definitions.get("models") or []:
            path = str(model.get("path") or "")
            for source, fields in (model.get("sources") or {}).items():
                for name, refs in fields.items():
                    key = (path, source, name)
                    if name and key not in reached and any((path, source, r) in reached
                                                           for r in refs):
                        reached.add(key)
                        grew = True
            for name, query in (model.get("queries") or {}).items():
                key = (path, None, name)
                if key not in reached and any((path, query.get("source"), r) in reached
                                              for r in query.get("refs") or []):
                    reached.add(key)
                    grew = True
    return reached - changed


def changed_sites(before: Mapping[str, Any], after: Mapping[str, Any], package: Path,
                  definitions: Mapping[str, Any] | None = None) -> list[Site]:
    """The candidate's definitions (from field_sites) that the model lacks at that place or
    defines otherwise, then (with the candidate's `definitions`) those that read one of them.
    A definition reached through a new join but written, unchanged, where the model has it is
    not a change of its own."""
    known = {(raw.get("source"), raw.get("path")): raw.get("digest")
             for _m, raw in _raw_sites(before)}
    raws = list(_raw_sites(after))
    same = lambda raw: known.get((raw.get("source"), raw.get("path"))) == raw.get("digest")
    unchanged = {_place(raw) for _m, raw in raws if same(raw)}
    changed = {_key(m, raw) for m, raw in raws if not same(raw) and _place(raw) not in unchanged}
    reading = readers_of(definitions, changed) if definitions else set()
    texts: dict[Path, list[str]] = {}
    out: list[Site] = []
    seen: set[tuple] = set()
    package = package.resolve()
    for model, raw in raws:
        key = _key(model, raw)
        if (key not in changed and key not in reading) or _place(raw) in seen:
            continue
        seen.add(_place(raw))
        site = _site(raw, model, package, texts, changed=key in changed)
        if site is not None:
            out.append(site)
    return out


# ---------------------------------------------------------------------------------------------
# What a site computes


def quote_path(path: str) -> str:
    return ".".join(f"`{part}`" for part in path.split("."))


def reachable_dimensions(source_info: Mapping[str, Any], depth: int = 2) -> dict[str, str]:
    """Each dimension name a source reaches (its own, then through joins, nearest first) -> the
    shortest path to it."""
    out: dict[str, str] = {}
    level: list[tuple[str, Mapping[str, Any]]] = [("", source_info)]
    for _ in range(depth + 1):
        below: list[tuple[str, Mapping[str, Any]]] = []
        for prefix, info in level:
            for f in (info.get("schema") or {}).get("fields") or []:
                if f.get("kind") == "dimension":
                    out.setdefault(str(f.get("name")), prefix + str(f.get("name")))
                elif f.get("kind") == "join":
                    below.append((f"{prefix}{f.get('name')}.", f))
        level = below
    return out


def probes(site: Site, groupings: Sequence[str]) -> list[Probe]:
    """The queries that evaluate `site`."""
    name = quote_path(site.path)
    if site.kind == "query":
        return [Probe(site, f"run: {name}", "as a query")]
    if site.source is None:
        return []
    source = quote_path(site.source)
    if site.kind == "measure":
        out = [Probe(site, f"run: {source} -> {{ aggregate: value is {name} }}", "ungrouped")]
        out += [Probe(site, f"run: {source} -> {{ group_by: {GROUP_KEY} is {quote_path(g)}\n"
                            f"  aggregate: value is {name} }}", f"grouped by {g}", g)
                for g in groupings if g != site.path]
        return out
    if site.kind == "dimension":
        return [Probe(site, f"run: {source} -> {{ group_by: value is {name} }}", "by its values")]
    if site.kind == "view" and "." not in site.path:
        return [Probe(site, f"run: {source} -> {name}", "as a view")]
    return []


# ---------------------------------------------------------------------------------------------
# Hits and whether they follow the data


def figure_digits(value: float) -> int:
    """Significant digits of a golden figure's value (3.0 has 1, 7845.21 has 6, 7000 has 1)."""
    text = f"{abs(value):.12g}"
    if "." in text and "e" not in text:
        text = text.rstrip("0").rstrip(".")
    return significant_digits(text)


def _figure_matches(value: float, figure: GoldenFigure) -> bool | None:
    """True: equal at the golden's precision; False: near it; None: neither."""
    if equal_at(value, figure):
        return True
    if (figure_digits(figure.value) >= NEAR_DIGITS
            and abs(value - figure.value) <= NEAR * abs(figure.value)):
        return False
    return None


def find_hits(rows: Sequence[Mapping[str, Any]], cells: GoldenCells) -> list[Hit]:
    """Each (column, golden) whose value a cell of `rows` computes, first cell first."""
    figures = [f for f in cells.figures if figure_digits(f.value) >= MIN_VALUE_DIGITS]
    hits: dict[tuple[str, str, Any], Hit] = {}
    for row in rows:
        for column, value in row.items():
            number = as_number(value)  # a number, or one written as text (a big integer)
            if isinstance(value, str) and number is None:
                qid = cells.texts.get(value.strip().casefold())
                if qid is not None and (column, qid, value) not in hits:
                    hits[(column, qid, value)] = Hit(column, value, qid, value, None)
                continue
            if number is None:
                continue
            for figure in figures:
                matched = _figure_matches(number, figure)
                if matched is not None and (column, figure.qid, figure.value) not in hits:
                    hits[(column, figure.qid, figure.value)] = Hit(
                        column, value, figure.qid, figure.value, figure.decimals, near=not matched)
    return list(hits.values())


def flat_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows with each nested result (a `nest:`) as rows of its own, its columns named
    `nest.column`, so a figure inside a nest is a cell like any other."""
    out: list[dict[str, Any]] = []
    for row in rows:
        own: dict[str, Any] = {}
        nests = []
        for k, v in row.items():
            if isinstance(v, Mapping):  # a nest of one row, or a record
                nests.append((k, [v]))
            elif isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
                nests.append((k, v))
            else:
                own[k] = v
        out.append(own)
        for k, inner in nests:
            out += [{f"{k}.{c}": x for c, x in r.items()} for r in flat_rows(inner)]
    return out


def _column(rows: Sequence[Mapping[str, Any]], column: str) -> list[Any]:
    return [row.get(column) for row in rows]


def _signature(values: Iterable[Any], decimals: int | None) -> list[str]:
    """A column's distinct values at the golden's precision, nulls left out: a variant's rows may
    group differently (a dropped order leaves its lines in a null group), its values not."""
    out = set()
    for v in values:
        if v is None:
            continue
        n = as_number(v)
        out.add(repr(v) if n is None else repr(round(n, decimals if decimals is not None else 9)))
    return sorted(out)


def carries_mark(values: Iterable[Any]) -> bool:
    return any(isinstance(v, str) and RELABEL_MARK in v for v in values)


# ---------------------------------------------------------------------------------------------
# The check


def varied_tables(tables: Sequence[str], candidate: Path, baseline: Path) -> list[str]:
    """The tables (SQL names) whose variants the check reads: every one but a file inside the
    candidate folder that the baseline model does not hold byte for byte."""
    cand = candidate.resolve()
    out = []
    for name in tables:
        m = re.fullmatch(r"'((?:[^']|'')*)'", name)
        target = (cand / (m.group(1).replace("''", "'") if m else name)).resolve()
        if cand in target.parents and (m or target.is_file()):
            before = baseline / target.relative_to(cand)
            same = (before.is_file() and target.is_file()
                    and before.read_bytes() == target.read_bytes())
            if not same:
                continue
        out.append(name)
    return out


def _shown(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}"


def _figure_words(hit: Hit) -> str:
    if hit.decimals is None:
        return f"{hit.golden!r}"
    if hit.decimals == 0:
        return _shown(hit.golden, 0)
    return (f"{_shown(hit.golden, hit.decimals)} at {hit.decimals} "
            f"decimal{'s' if hit.decimals != 1 else ''}")


def _computed_words(hit: Hit) -> str:
    if isinstance(hit.computed, str):
        return f"the text {hit.computed!r}"
    n = as_number(hit.computed)
    if n is None:
        return repr(hit.computed)
    # Two decimals more than the golden keeps, so a near figure shows how near it is.
    return _shown(n, (hit.decimals or 0) + 2).rstrip("0").rstrip(".")


def refusal(probe: Probe, hit: Hit, why: str) -> str:
    site = probe.site
    relation = ("within 1% of the golden" if hit.near else "the golden")
    column = f" (column {hit.column})" if site.kind in ("view", "query") else ""
    what = (f"the column {site.name} of the table read there" if site.column
            else f"the {site.kind} {site.name} (`{site.expression}`)")
    if not site.changed:
        what += ", unchanged but reading a definition the change made,"
    return (f"{site.file} line {site.line}: {what} computes {_computed_words(hit)} "
            f"{probe.how}{column}, {relation} "
            f"{_figure_words(hit)} of {hit.qid}, from no data: {why}. A model change must "
            "make the answer derivable, never state it")


def _run(runtime: MalloyRuntime, probe: Probe, check: ValueCheck, *, variant: str | None = None,
         vary: Sequence[str] = ()) -> list[dict] | str:
    """The probe's rows, or the error that stopped it."""
    if variant is None:
        check.queries += 1
    else:
        check.variant_queries += 1
    try:
        result = runtime.execute(probe.query, model_path=probe.site.model, variant=variant,
                                 vary=vary)
    except MalloyQueryError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return flat_rows(result.get("rows") or [])


def _unfollowed(runtime: MalloyRuntime, probe: Probe, rows: list[dict], hit: Hit,
                vary: Sequence[str], check: ValueCheck,
                cache: dict[str, list[dict] | str]) -> str | None:
    """Why `hit` does not follow the data (None: it does). A variant the probe fails on shows
    nothing moving: it counts against the change, with its error."""
    def variant_rows(variant: str) -> list[dict] | str:
        if variant not in cache:
            cache[variant] = _run(runtime, probe, check, variant=variant, vary=vary)
        return cache[variant]

    if hit.decimals is None:  # a text
        relabelled = variant_rows(TEXT_VARIANT)
        # No rows at all: a filter on a written text (`status = 'returned'`) matched nothing
        # relabelled, so there is nothing to read either way; the text check still reads the
        # filter's own text.
        if isinstance(relabelled, list) and (
                not relabelled or carries_mark(_column(relabelled, hit.column))):
            return None
        failed = f" (it fails there: {relabelled})" if isinstance(relabelled, str) else ""
        return ("when every text in the set's tables is relabelled, none of its values carries "
                f"the relabelling{failed}: its text is written in the model, not read from the "
                "data")
    same = _signature(_column(rows, hit.column), hit.decimals)
    failures = []
    for variant in NUMBER_VARIANTS:
        moved = variant_rows(variant)
        if isinstance(moved, str):
            failures.append(f"it fails when {_VARIANT_WORDS[variant]}: {moved}")
        elif _signature(_column(moved, hit.column), hit.decimals) != same:
            return None
    why = "its result stays the same when " + " and when ".join(
        _VARIANT_WORDS[v] for v in NUMBER_VARIANTS)
    return why + (f" ({'; '.join(failures)})" if failures else "")


def baseline_sites(baseline: Path, candidate: Path) -> dict:
    """field_sites of the baseline model, compiled beside the candidate (a checkpoint kept in a
    journal folder would not find the data its relative paths name)."""
    if baseline.resolve().parent == candidate.resolve().parent:
        with MalloyRuntime(baseline, allow=default_allow(baseline), pool_size=1) as runtime:
            return runtime.field_sites()
    try:
        place = Path(tempfile.mkdtemp(prefix=".value-check-", dir=candidate.resolve().parent))
    except OSError as exc:
        return {"models": [], "errors": [f"no folder beside the candidate to compile it in: {exc}"]}
    try:
        shutil.copytree(baseline, place, symlinks=True, dirs_exist_ok=True)
        with MalloyRuntime(place, allow=default_allow(place), pool_size=1) as runtime:
            return runtime.field_sites()
    finally:
        shutil.rmtree(place, ignore_errors=True)


def check_values(candidate: Path, baseline: Path, runtime: MalloyRuntime, cells: GoldenCells,
                 before: Mapping[str, Any] | None = None) -> ValueCheck:
    """The value check of `candidate` (compiled in `runtime`) against `baseline` (its
    field_sites `before` when already read) and the set's golden `cells`."""
    check = ValueCheck()
    after = runtime.field_sites()
    if before is None:
        before = baseline_sites(baseline, candidate)
    if before.get("errors"):
        first = before["errors"][0]
        problems = first.get("problems") if isinstance(first, Mapping) else None
        why = (problems[0].get("message") if problems and isinstance(problems[0], Mapping)
               else first.get("message", first) if isinstance(first, Mapping) else first)
        check.notes.append("the model before the change could not be compiled "
                           f"({str(why).splitlines()[0]}): every definition of the candidate "
                           "is evaluated")
    sites = changed_sites(before, after, candidate, runtime.definitions())
    check.varied_tables = varied_tables(after.get("tables") or [], candidate, baseline)
    reach: dict[tuple[str, str], dict[str, str]] = {}
    for site in sites:
        groupings: list[str] = []
        if site.kind == "measure" and site.source:
            key = (site.model, site.source)
            if key not in reach:
                info = runtime.model_info(site.model)
                own: Mapping[str, Any] = next((s for s in info.get("sourceInfos") or []
                                               if s.get("name") == site.source), {})
                reach[key] = reachable_dimensions(own)
            for column in cells.text_columns:
                path = reach[key].get(column)
                if path and path not in groupings:
                    groupings.append(path)
            groupings = groupings[:MAX_GROUPINGS]
        site_probes = probes(site, groupings)
        if not site_probes:
            check.notes.append(f"{site.file} line {site.line}: {site.name} ({site.kind}) is not "
                               "evaluated: a view reached through a join runs from its own source")
            continue
        check.sites += 1
        refused: set[str] = set()
        for probe in site_probes:
            rows = _run(runtime, probe, check)
            if isinstance(rows, str):
                check.notes.append(f"{site.file} line {site.line}: {site.name} could not be "
                                   f"evaluated {probe.how}: {rows}")
                continue
            cache: dict[str, list[dict] | str] = {}
            for hit in find_hits(rows, cells):
                if hit.qid in refused or (probe.grouping and hit.column == GROUP_KEY):
                    continue
                why = _unfollowed(runtime, probe, rows, hit, check.varied_tables, check, cache)
                if why is not None:
                    refused.add(hit.qid)
                    check.reasons.append(refusal(probe, hit, why))
    return check
