"""The model side of the must-not-use veto: a package's definitions read through the kit's Node
runner (the compiled model, never the Malloy text by pattern), and a set's
`mustNotUseAllowedIn` names checked against them. The veto itself (checks/must_not_use.py)
stays a decider over values; this module is the caller that reads the model."""

from __future__ import annotations

import difflib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from malloy_evals.checks.must_not_use import (
    Definitions,
    MustNotUseResult,
    check_must_not_use,
    classify_entry,
)
from malloy_evals.core.errors import InputError, KitError
from malloy_evals.core.findings import FolderReport, LineProblem
from malloy_evals.core.vocab import split_entity_id
from malloy_evals.endpoint.package import package_sha
from malloy_evals.endpoint.runner import MalloyRuntime, default_allow, runtime_missing_reason
from malloy_evals.sets.eval_set import CASES_FILE, Case, EvalSet, check_set, load_set

# One compile per package content, model path and data files, for the life of the process (a
# scoring pass reads the same model for every attempt, from several threads).
_READ: dict[tuple[str, str | None, tuple[tuple[str, int], ...]], Definitions | str] = {}
_READ_LOCK = threading.Lock()


def read_definitions(model_dir: str | Path, model_path: str | None = None) -> Definitions | str:
    """The definitions of the package at `model_dir` (the model at `model_path` when the package
    has several), or why they cannot be read: no such folder, no .malloy file, no Node runtime,
    or a model that does not compile. Never raises for those: the veto then says the expansion
    was not possible and decides on the query text alone."""
    return _once(_READ, Path(model_dir), model_path, _compile)


def _once(cache: dict[Any, Any], folder: Path, model_path: str | None,
          compile_: Any) -> Any:
    """`compile_(folder, model_path)` once per package content, model path and data files, or
    why it cannot be: no such folder, no .malloy file, no Node runtime, an unreadable file."""
    if not folder.is_dir():
        return f"{folder}: no such model folder"
    if not any(folder.rglob("*.malloy")):
        return f"{folder}: no .malloy files"
    missing = runtime_missing_reason()
    if missing is not None:
        return missing
    try:
        key = (package_sha(folder), model_path, _data_files(folder))
    except OSError as exc:
        return f"{folder}: cannot be read ({exc.strerror or exc})"
    with _READ_LOCK:
        if key not in cache:
            cache[key] = compile_(folder, model_path)
        return cache[key]


def case_definitions(eval_set: EvalSet, case: Case) -> Definitions | str | None:
    """The definitions of the model a set's attempts were answered against (`model/`, or the
    `--model DIR` standing in for it), for the veto's expansion when scoring and diagnosing;
    read (once per model) only for a case with mustNotUse entries, else None."""
    model_dir = getattr(eval_set, "model_dir", None)
    if not case.must_not_use or model_dir is None:
        return None
    return read_definitions(model_dir, getattr(eval_set, "target_model_path", None))


def read_definitions_for(eval_set: EvalSet, qids: Iterable[str]) -> None:
    """Read (once, into the cache) the definitions the veto will need for `qids`, when any of
    their cases has mustNotUse entries: a scoring pass calls this beside the endpoint's start-up,
    so the model's compile is not paid by the first attempt while the others wait for it."""
    for qid in qids:
        case = eval_set.cases.get(qid)
        if case is not None and case.must_not_use:
            case_definitions(eval_set, case)
            return


def _data_files(folder: Path) -> tuple[tuple[str, int], ...]:
    """The tables a package may read (its sibling data/), by name and size: the same model
    bytes over the same tables compile to the same definitions, wherever the folder is."""
    return tuple(sorted((p.relative_to(root).as_posix(), p.stat().st_size)
                        for root in default_allow(folder) for p in root.rglob("*") if p.is_file()))


def _compile(folder: Path, model_path: str | None) -> Definitions | str:
    try:
        with MalloyRuntime(folder, allow=default_allow(folder)) as runtime:
            raw = runtime.definitions()
            surface = runtime.describe()  # which fields are measures (the veto's lineage)
    except KitError as exc:
        return f"the model could not be compiled: {exc}"
    failed = compile_failure(raw, model_path)
    return failed if failed is not None else Definitions.from_runner(raw, model_path, surface)


def compile_failure(raw: dict[str, Any], model_path: str | None) -> str | None:
    """Why the runner's answer says the model (at `model_path`, or every model) does not
    compile; None when it compiles."""
    bad = _failed_models(raw, model_path)
    if bad:
        first = bad[0]
        return f"{first.get('path', '?')} does not compile: {first.get('message', '?')}"
    return None


# The runner's problem code when DuckDB cannot read a table the model names: the file is not
# there (a data folder not supplied yet, a link an import left out) or cannot be read.
TABLE_NOT_READ = "failed-to-fetch-table-schema"


def tables_not_here(raw: dict[str, Any], model_path: str | None) -> list[str]:
    """The runner's messages for tables the failing model (at `model_path`, or every model)
    could not read. A model whose tables are not here cannot be compiled on this machine: that
    says nothing against the model's text (every field of a table it could not read is unknown
    after it), so validate_set warns, as it does without Node, instead of refusing the set."""
    return list(dict.fromkeys(
        str(p.get("message")) for e in _failed_models(raw, model_path)
        for p in e.get("problems") or [] if isinstance(p, dict) and p.get("code") == TABLE_NOT_READ))


def _failed_models(raw: dict[str, Any], model_path: str | None) -> list[dict[str, Any]]:
    """The runner's errors that make the model (at `model_path`, or every model) not compile."""
    errors = [e for e in raw.get("errors") or [] if isinstance(e, dict)]
    bad = [e for e in errors if model_path is None or e.get("path") == model_path]
    return bad if bad and (model_path is not None or not raw.get("models")) else []


def check_set_with_model(set_dir: str | Path) -> FolderReport:
    """validate_set.py: every check of check_set, then the set's model compiled (locally, when
    the Node runtime is here) and every name the cases give checked against it: each
    `expectedEntities` id an entity of the model, each `mustNotUse` field path a name of it, each
    `mustNotUseAllowedIn` name one of its definitions (an error naming the case's line, the
    unknown name and the nearest existing ones). A model that does not compile is an error; one
    that cannot be compiled here (no Node, or the tables it reads are not here) is a warning
    saying the names were not checked, and why."""
    report = check_set(set_dir)
    if not report.readable or report.errors:
        return report
    try:
        eval_set = load_set(set_dir)
    except InputError:
        return report
    if not any(_names_given(case) for case in eval_set.cases.values()):
        return report
    names = read_model_names(eval_set.model_dir, eval_set.target_model_path)
    model = eval_set.target_model_path
    if isinstance(names, ModelDoesNotCompile):
        problem = LineProblem(f"model/{model}", None, str(names))
        return replace(report, errors=[*report.errors, str(problem)])
    if isinstance(names, str):
        warning = LineProblem(CASES_FILE, None, "the model was not compiled here, so "
                              "expectedEntities, mustNotUse and mustNotUseAllowedIn names were "
                              f"not checked against it: {names}", "warning")
        return replace(report, warnings=[*report.warnings, str(warning)])
    errors = [str(p) for case in eval_set.cases.values()
              for p in (*_entity_problems(case, names, model),
                        *_must_not_use_problems(case, names, model))]
    return replace(report, errors=[*report.errors, *errors]) if errors else report


def check_query(query: str | None, entries: list[str], *, model_dir: str | Path | None = None,
                model_path: str | None = None,
                allowed_in: dict[str, list[str]] | None = None) -> MustNotUseResult:
    """check_must_not_use.py: the veto on one query, expanded through the model at `model_dir`
    when one is given (its expansion says why when it could not be)."""
    definitions = read_definitions(model_dir, model_path) if model_dir is not None else None
    return check_must_not_use(query, entries, definitions=definitions, allowed_in=allowed_in)


# ---------------------------------------------------------------------------------------------
# The names a set may use: expectedEntities, mustNotUse and mustNotUseAllowedIn checked against
# the compiled model (validate_set.py).

ENTITY_KINDS = ("source", "dimension", "measure", "view", "join", "query")
_NAMES: dict[tuple[str, str | None, tuple[tuple[str, int], ...]], ModelNames | str] = {}


@dataclass(frozen=True)
class ModelNames:
    """Every name the compiled model gives: entity ids (`kind:source:name`), field names per
    source, join names, and the definitions (for mustNotUseAllowedIn)."""

    entity_ids: frozenset[str]
    fields: dict[str, frozenset[str]]     # source -> its dimensions, measures, views, joins
    joins: frozenset[str]
    definitions: Definitions

    @classmethod
    def from_runner(cls, surface: dict[str, Any], definitions: Definitions,
                    model_path: str | None) -> ModelNames:
        models = [m for m in surface.get("models") or [] if isinstance(m, dict)]
        chosen = [m for m in models if m.get("path") == model_path] or models
        ids: set[str] = set()
        fields: dict[str, set[str]] = {}
        joins: set[str] = set()
        for model in chosen:
            for src in model.get("sources") or []:
                name = str(src.get("name"))
                ids.add(f"source:{name}:{name}")
                own = fields.setdefault(name, set())
                for kind, key in (("dimension", "dimensions"), ("measure", "measures"),
                                  ("view", "views"), ("join", "joins")):
                    for f in src.get(key) or []:
                        ids.add(f"{kind}:{name}:{f.get('name')}")
                        own.add(str(f.get("name")))
                        if kind == "join":
                            joins.add(str(f.get("name")))
            for q in model.get("queries") or []:
                ids.add(f"query:{q.get('source')}:{q.get('name')}")
                ids.add(f"query:{q.get('name')}:{q.get('name')}")
        return cls(frozenset(ids), {k: frozenset(v) for k, v in fields.items()},
                   frozenset(joins), definitions)

    def path_known(self, path: str) -> bool:
        """A field path a query could write: `field`, `source.field` or `join[.join].field`,
        each leading segment a source or join of the model and the last a field of one."""
        segs = path.split(".")
        every = set().union(*self.fields.values()) if self.fields else set()
        heads = set(self.fields) | self.joins
        if len(segs) == 1:
            return segs[0] in every or segs[0] in heads or path in self.definitions.names()
        return all(s in heads for s in segs[:-1]) and segs[-1] in every \
            or path in self.definitions.names()

    def entity_known(self, entity_id: str) -> bool:
        if entity_id in self.entity_ids:
            return True
        kind, source, name = split_entity_id(entity_id)
        if "." not in name or source not in self.fields:
            return False
        leaf_kind_ids = {i for i in self.entity_ids if i.startswith(f"{kind}:")
                         and i.rsplit(":", 1)[-1] == name.rsplit(".", 1)[-1]}
        return bool(leaf_kind_ids) and self.path_known(name)

    def path_names(self) -> list[str]:
        out = set(self.fields) | self.joins | self.definitions.names()
        for source, names in self.fields.items():
            out |= names
            out |= {f"{source}.{n}" for n in names}
        return sorted(out)


def nearest(name: str, candidates: Iterable[str]) -> str:
    """`nearest: a, b, c` (the closest existing names), or that there is none close."""
    pool = sorted(set(candidates))
    close = difflib.get_close_matches(name, pool, n=3, cutoff=0.6)
    if not close:
        leaf = name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
        close = [c for c in pool if c.rsplit(":", 1)[-1].rsplit(".", 1)[-1] == leaf][:3]
    return f"nearest: {', '.join(close)}" if close else "no existing name is close"


def read_model_names(model_dir: str | Path, model_path: str | None = None) -> ModelNames | str:
    """The compiled model's names, or why it could not be compiled here (as read_definitions)."""
    names: ModelNames | str = _once(_NAMES, Path(model_dir), model_path, _compile_names)
    return names


class ModelDoesNotCompile(str):
    """Why the model could not be read, when the reason is the model itself (an error of the
    set, not of this machine)."""


def _compile_names(folder: Path, model_path: str | None) -> ModelNames | str:
    try:
        with MalloyRuntime(folder, allow=default_allow(folder)) as runtime:
            surface = runtime.describe()
            raw = runtime.definitions()
    except KitError as exc:
        return f"the model could not be compiled here: {exc}"
    failed = compile_failure(surface, model_path)
    missing = tables_not_here(surface, model_path)
    if failed is not None and missing:
        return (f"{model_path or 'the model'} reads tables that are not here ({'; '.join(missing)}): "
                "put them where it reads them (data/, or import_set.py --copy-linked-data for a "
                "link the import left out), then validate again")
    if failed is not None:
        return ModelDoesNotCompile(failed)
    return ModelNames.from_runner(surface, Definitions.from_runner(raw, model_path, surface),
                                  model_path)


def _names_given(case: Case) -> bool:
    """Whether a case names anything of the model: expected entities or must-not-use entries."""
    ee = case.raw.get("expectedEntities")
    ids = any(ee.get(k) for k in ("required", "requiredAnyOf", "acceptable")) \
        if isinstance(ee, dict) else False
    return bool(ids or case.must_not_use or case.must_not_use_allowed_in)


def _entity_problems(case: Case, names: ModelNames, model: str) -> list[LineProblem]:
    out: list[LineProblem] = []
    ee = case.raw.get("expectedEntities")
    if not isinstance(ee, dict):
        return out
    groups: list[tuple[str, Any]] = [("required", ee.get("required")),
                                     ("acceptable", ee.get("acceptable"))]
    groups += [(f"requiredAnyOf[{i}]", g) for i, g in enumerate(ee.get("requiredAnyOf") or [])]
    for where, ids in groups:
        for entity in ids if isinstance(ids, list) else []:
            if isinstance(entity, str) and not names.entity_known(entity):
                out.append(LineProblem(CASES_FILE, case.line, (
                    f"expectedEntities.{where}: {entity!r} is not an entity of {model} "
                    f"({nearest(entity, names.entity_ids)})")))
    return out


def _must_not_use_problems(case: Case, names: ModelNames, model: str) -> list[LineProblem]:
    out = []
    for entry in case.must_not_use:
        path = classify_entry(entry) if isinstance(entry, str) else None
        if path is not None and not names.path_known(path):
            out.append(LineProblem(CASES_FILE, case.line, (
                f"golden.mustNotUse: {path!r} is not a field, view, join, named query or source "
                f"of {model} ({nearest(path, names.path_names())}); write prose for a concept "
                "the model does not name")))
    known = names.definitions.names()
    for entry, allowed in case.must_not_use_allowed_in.items():
        for name in allowed:
            if name.strip() not in known:
                out.append(LineProblem(CASES_FILE, case.line, (
                    f"golden.mustNotUseAllowedIn[{entry!r}]: {name!r} is not a view, measure, "
                    f"dimension, join, named query or source of {model} "
                    f"({nearest(name.strip(), known)})")))
    return out
