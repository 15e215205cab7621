"""The model side of the must-not-use veto: a package's definitions read through the kit's Node
runner (the compiled model, never the Malloy text by pattern), and a set's
`mustNotUseAllowedIn` names checked against them. The veto itself (checks/must_not_use.py)
stays a decider over values; this module is the caller that reads the model."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from malloy_evals.checks.must_not_use import Definitions, MustNotUseResult, check_must_not_use
from malloy_evals.core.errors import InputError, KitError
from malloy_evals.core.findings import FolderReport, LineProblem
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
    folder = Path(model_dir)
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
        if key not in _READ:
            _READ[key] = _compile(folder, model_path)
        return _READ[key]


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
    errors = [e for e in raw.get("errors") or [] if isinstance(e, dict)]
    bad = [e for e in errors if model_path is None or e.get("path") == model_path]
    if bad and (model_path is not None or not raw.get("models")):
        first = bad[0]
        return f"{first.get('path', '?')} does not compile: {first.get('message', '?')}"
    return Definitions.from_runner(raw, model_path, surface)


def check_set_with_model(set_dir: str | Path) -> FolderReport:
    """validate_set.py: every check of check_set, then, when the set's model is at hand, that each
    name in a golden's `mustNotUseAllowedIn` is a definition of that model (an error when it is
    not; a warning saying why when the model cannot be read)."""
    report = check_set(set_dir)
    if not report.readable or report.errors:
        return report
    try:
        eval_set = load_set(set_dir)
    except InputError:
        return report
    cases = [c for c in eval_set.cases.values() if c.must_not_use_allowed_in]
    if not cases:
        return report
    defs = read_definitions(eval_set.model_dir, eval_set.target_model_path)
    if isinstance(defs, str):
        warning = LineProblem(CASES_FILE, None, "golden.mustNotUseAllowedIn: the names were not "
                              f"checked against the model: {defs}", "warning")
        return replace(report, warnings=[*report.warnings, str(warning)])
    known = defs.names()
    errors = [str(LineProblem(CASES_FILE, case.line, f"golden.mustNotUseAllowedIn[{entry!r}]: "
                              f"{name!r} is not a view, measure, dimension, join, named query or "
                              f"source of {eval_set.target_model_path}"))
              for case in cases for entry, names in case.must_not_use_allowed_in.items()
              for name in names if name.strip() not in known]
    return replace(report, errors=[*report.errors, *errors]) if errors else report


def check_query(query: str | None, entries: list[str], *, model_dir: str | Path | None = None,
                model_path: str | None = None,
                allowed_in: dict[str, list[str]] | None = None) -> MustNotUseResult:
    """check_must_not_use.py: the veto on one query, expanded through the model at `model_dir`
    when one is given (its expansion says why when it could not be)."""
    definitions = read_definitions(model_dir, model_path) if model_dir is not None else None
    return check_must_not_use(query, entries, definitions=definitions, allowed_in=allowed_in)
