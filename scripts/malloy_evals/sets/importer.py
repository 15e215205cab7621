"""import_set: a set written for the public Publisher eval loop, made a kit set.

The public golden sets (the Malloy ecommerce set is one) are close to the kit's format, and the
kit reads most of their fields as they are: `value: null` and `canonicalQuery: null` on
unanswerable goldens, `alternates`, `clarifyOk` / `clarifyPreferred`, `verifiedBy`, `ordered`.
The importer copies the set folder (its `model/`, `truth/` and data along with it), maps the few
fields the kit spells differently, keeps every other field verbatim, and writes an import report:
what it copied, what it mapped, which fields have no kit counterpart (kept, never dropped) and
every judgement call it made. It never promotes a golden: statuses stay as published.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core import cli, commands, files, jsonl, schemas
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, InputError
from malloy_evals.core.findings import FolderReport
from malloy_evals.sets import published_links
from malloy_evals.sets.eval_set import (
    CASES_FILE,
    SET_FILE,
    authored_lines,
    check_set,
    rewrite_jsonl,
)

REPORT_FILE = "import-report.json"
# set.json fields the public loop spells otherwise: public name -> kit name.
SET_RENAMES = {"truthModel": "truthModelPath"}
# Golden-level fields a public case may carry at the top level; the kit reads them on the golden.
GOLDEN_FIELDS_ON_CASE = ("clarifyOk", "clarifyPreferred", "alternates")
# How a public golden may say its rows are ranked (the kit's `ordered`).
RANKED_FLAGS = ("ranked", "ordered")
# What a public golden may call the column that numbers its ranked rows.
RANK_COLUMNS = ("rank", "ranking", "position")
_TABLE = re.compile(r"""duckdb\.table\(\s*['"]([^'"]+)['"]""")


@dataclass(frozen=True)
class ImportReport:
    """What import_set did, and what the imported set looks like to the kit."""

    source: str
    out: str
    cases: int
    statuses: dict[str, int]           # golden status -> cases (as published; never promoted)
    kinds: dict[str, int]
    copied: list[str]                  # top-level entries copied from the source folder
    skipped_links: list[str]           # links not carried: outside the set (not asked to copy), dangling
    mapped: list[str]                  # one line per field the kit spells otherwise
    kept_verbatim: dict[str, dict[str, int]]  # file -> field with no kit counterpart -> count
    judgement_calls: list[str]
    errors: list[str]                  # validate_set errors of the imported set
    warnings: int                      # validate_set warnings (unknown fields, mostly)
    missing: list[str]                 # what the kit needs that the source did not hold
    next_steps: list[str] = field(default_factory=list)
    links: list[published_links.LinkOutcome] = field(default_factory=list)  # every link, decided
    ranked: dict[str, str] = field(default_factory=dict)  # qid -> what was read as the order

    @property
    def exit_code(self) -> int:
        return EXIT_FINDING if self.errors else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {
            "links": [dataclasses.asdict(o) for o in self.links], "exit_code": self.exit_code}


def _read_json(path: Path) -> Any:
    try:
        return jsonl.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise InputError(path, None, "missing: a public set folder holds set.json and cases.jsonl") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot be read: {exc}") from None
    except ValueError as exc:
        raise InputError(path, getattr(exc, "lineno", None), f"not valid JSON: {exc}") from None


def _eval_toml(src: Path) -> dict[str, Any]:
    """The public set's eval.toml, when it has one (servers and paths; the kit takes names only)."""
    path = src / "eval.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(path, None, f"cannot be read: {exc}") from None


def _copy_tree(src: Path, out: Path) -> tuple[list[str], files.CopySkipped]:
    """Copy the source folder into `out` without following links on either side; (copied
    entries, what was skipped: links and special files)."""
    skipped = files.copy_tree(src, out)
    copied = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir())
    return copied, skipped


def map_set_json(config: dict[str, Any], toml: dict[str, Any]) -> tuple[dict[str, Any], list[str],
                                                                           list[str]]:
    """set.json in the kit's spelling: (config, mapped, judgement calls). Keys keep their order."""
    out: dict[str, Any] = {}
    mapped: list[str] = []
    calls: list[str] = []
    for key, value in config.items():
        kit = SET_RENAMES.get(key, key)
        if kit != key:
            mapped.append(f"set.json: {key} -> {kit}")
        if out.get(kit) is None:
            out[kit] = value
    model = got if isinstance(got := toml.get("model"), dict) else {}
    # A field written as null is absent, here as in the kit's reading of the set.
    if out.get("environment") is None and isinstance(model.get("environment"), str):
        out["environment"] = model["environment"]
        mapped.append("set.json: environment from eval.toml [model] environment")
    if out.get("targetPackage") is None:
        out["targetPackage"] = model.get("package") if isinstance(model.get("package"), str) \
            else out.get("name")
        calls.append(f"set.json: no targetPackage; took {out['targetPackage']!r} from "
                     + ("eval.toml [model] package" if model.get("package") else "the set's name"))
    if out.get("datasetVersion") is None:
        out["datasetVersion"] = 1
        calls.append("set.json: no datasetVersion; wrote 1")
    if out.get("targetModelPath") is None and isinstance(out.get("name"), str):
        out["targetModelPath"] = f"{out['targetPackage']}.malloy"
        calls.append(f"set.json: no targetModelPath; assumed {out['targetModelPath']!r}")
    if out.get("truthPackage") and out.get("truthModelPath") is None:
        out["truthModelPath"] = "truth.malloy"
        calls.append("set.json: truthPackage without truthModel; assumed truth.malloy (the public "
                     "loop's default)")
    return out, mapped, calls


def _infer_kind(golden: dict[str, Any], case: dict[str, Any]) -> str:
    value = golden.get("value")
    if isinstance(value, list) or golden.get("path"):
        return "rows"
    if isinstance(value, dict):
        return "scalar"
    refusal = any(t in ("refusal-expected", "coverage:absent") for t in case.get("tags") or [])
    return "unanswerable" if refusal or case.get("coverage") == "absent" else "criteria"


def _ranked_rows(rows: Any) -> str | None:
    """The rank column when every row carries it, starting at 1 and never falling in file order
    (ties repeat a rank)."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return None
    for column in RANK_COLUMNS:
        ranks = [r.get(column) for r in rows]
        if all(isinstance(n, int) and not isinstance(n, bool) for n in ranks) and ranks[0] == 1 \
                and all(a <= b for a, b in itertools.pairwise(ranks)):
            return column
    return None


def _returns(query: str, column: str) -> bool:
    """Whether a canonical query names `column` as one of its outputs: defined (`rank is ...`) or
    a field it groups or selects by that name; a function call (`rank()`) is not an output."""
    text = re.sub(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|--[^\n]*|//[^\n]*", " ", query)
    return re.search(rf"(?<![\w.]){re.escape(column)}(?![\w(])(?!\s*\()", text) is not None


def _map_ranked(qid: str, golden: dict[str, Any], mapped: list[str], calls: list[str],
                ranked: dict[str, str]) -> None:
    """A ranked rows golden in the kit's spelling: a published flag becomes `ordered`; a rank
    column numbering the rows 1..n is read as the order, and dropped from the compared columns
    when the canonical query does not return it (it could never re-derive)."""
    flag = next((f for f in RANKED_FLAGS if isinstance(golden.get(f), bool)), None)
    if golden.get("ordered") is None and flag is not None:
        golden["ordered"] = golden[flag]
        mapped.append(f"{qid}: golden.{flag} -> ordered")
    column = _ranked_rows(golden.get("value"))
    if column is None:
        return
    query = golden.get("canonicalQuery")
    if isinstance(query, str) and not _returns(query, column):
        golden["ordered"] = True
        golden["value"] = [{k: v for k, v in row.items() if k != column}
                           for row in golden["value"]]
        ranked[str(qid)] = (f"{column!r} is the order (ordered: true); the canonical query does not "
                       "return it, so it was dropped from the compared columns")
        calls.append(f"{qid}: rows carry a {column!r} column 1..n in order that the canonical "
                     "query does not return; read as the order (ordered: true) and dropped from "
                     "the compared columns")
    elif golden.get("ordered") is None:
        golden["ordered"] = True
        ranked[str(qid)] = f"{column!r} read as ranked (ordered: true); the canonical query returns it"
        calls.append(f"{qid}: rows carry a {column!r} column 1..n in order; read as ranked "
                     "(ordered: true), so verify_goldens compares them in order")


def map_case(case: dict[str, Any], ranked: dict[str, str] | None = None
             ) -> tuple[dict[str, Any], list[str], list[str]]:
    """One public case in the kit's spelling: (case, mapped, judgement calls), every field kept;
    `ranked` (qid -> what was read as the order) is filled for a ranked rows golden."""
    qid = case.get("qid", "?")
    mapped: list[str] = []
    calls: list[str] = []
    out = dict(case)
    golden = out.get("golden")
    if not isinstance(golden, dict):
        return out, mapped, calls
    golden = dict(golden)
    for key in GOLDEN_FIELDS_ON_CASE:
        if out.get(key) is not None and golden.get(key) is None:
            golden[key] = out.pop(key)
            mapped.append(f"{qid}: {key} moved onto the golden (where the kit reads it)")
    if golden.get("kind") is None:  # absent, or written as null
        golden["kind"] = _infer_kind(golden, case)
        calls.append(f"{qid}: the golden names no kind; read as {golden['kind']!r} from its value "
                     "and tags")
    if golden.get("kind") == "rows":
        _map_ranked(qid, golden, mapped, calls, {} if ranked is None else ranked)
    if isinstance(out.get("rubric"), str) and golden.get("rubric") is None:
        calls.append(f"{qid}: a case-level rubric is kept verbatim but not read: the judge reads "
                     "golden.rubric only (move it there if it is the key)")
    out["golden"] = golden
    return out, mapped, calls


def _unknown_fields(schema: str, obj: Any) -> list[str]:
    """Fields the kit's schema has no counterpart for (kept verbatim), by dotted name."""
    return [p.field for p in schemas.validate(schema, obj) if p.unknown]


def import_set(source: str | Path, out: str | Path, *, copy_linked_data: bool = False,
               check: Callable[[Path], FolderReport] = check_set) -> ImportReport:
    """Copy a public set into `out` as a kit set, with its report (written as import-report.json).
    Links are carried as published_links decides; one leaving the set is copied only with
    `copy_linked_data`. `check` is what validate_set.py runs (import_set.py passes the check
    against the compiled model): the report's errors and warnings are the ones it will print."""
    src, dst = Path(source), Path(out)
    if not src.is_dir():
        raise InputError(src, None, "not a folder")
    config = _read_json(src / SET_FILE)
    if not isinstance(config, dict):
        raise InputError(src / SET_FILE, None, "must be a JSON object")
    if not (src / CASES_FILE).is_file():
        raise InputError(src / CASES_FILE, None, "missing: a public set folder holds set.json and "
                                                 "cases.jsonl")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise InputError(dst, None, "exists and is not an empty folder; choose a new --out")
    if dst.resolve().is_relative_to(src.resolve()):
        raise InputError(dst, None, "is inside the source set; choose a folder outside it")
    toml = _eval_toml(src)
    copied, skipped = _copy_tree(src, dst)
    link_outcomes = published_links.carry_links(src, dst, skipped.links,
                                                copy_outside=copy_linked_data)
    links = [o.path for o in link_outcomes if not o.carried]
    copied = sorted(p.name + ("/" if p.is_dir() else "") for p in dst.iterdir())

    kit_config, mapped, calls = map_set_json(config, toml)
    calls += [f"{name}: not a plain file or folder (a pipe, socket or device); not copied"
              for name in skipped.special]
    if kit_config != config:
        files.replace(dst / SET_FILE, json.dumps(kit_config, indent=2, ensure_ascii=False)
                      + "\n", dst)
    kept: dict[str, Counter[str]] = {SET_FILE: Counter(_unknown_fields("set", kit_config)),
                                     CASES_FILE: Counter()}
    replace: dict[int, Any] = {}
    statuses: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    tables_read: set[str] = set()  # files the canonical queries name with duckdb.table(...)
    ranked: dict[str, str] = {}
    n_cases = 0
    for number, case, error in authored_lines((dst / CASES_FILE).read_bytes()):
        if error is not None or not isinstance(case, dict):
            continue  # left as it is; validate_set below names the line
        n_cases += 1
        new, case_mapped, case_calls = map_case(case, ranked)
        mapped += case_mapped
        calls += case_calls
        if new != case:
            replace[number] = new
        golden = got if isinstance(got := new.get("golden"), dict) else {}
        if isinstance(golden.get("canonicalQuery"), str):
            tables_read.update(_TABLE.findall(golden["canonicalQuery"]))
        statuses[str(golden.get("status") or "verified (no status)")] += 1
        kinds[str(golden.get("kind"))] += 1
        kept[CASES_FILE].update(_unknown_fields("case", new))
    if replace:
        rewrite_jsonl(dst / CASES_FILE, replace=replace)  # other lines keep their bytes

    missing = []
    truth_model = str(kit_config.get("truthModelPath") or kit_config.get("targetModelPath"))
    tables = sorted(tables_read)
    truth_need = ("the truth package, where canonical queries run (promote_golden.py and "
                  "verify_goldens.py need it)")
    if tables:
        truth_need += (f"; its canonical queries read {', '.join(tables)} relative to it, so "
                       f"truth/{truth_model} (it may be empty) with those files beside it will do")
    for folder, what in (("model", "the Malloy package under test"), ("truth", truth_need),
                         ("data", "the tables the models read")):
        if not (dst / folder).is_dir():
            missing.append(f"{folder}/: {what}")
    missing += [f"{o.path}: published as a link, {o.action}: {o.detail}" for o in link_outcomes
                if not o.carried]
    checked = check(dst)
    report = ImportReport(
        source=str(src), out=str(dst), cases=n_cases, statuses=dict(statuses), kinds=dict(kinds),
        copied=copied, skipped_links=links, mapped=mapped,
        kept_verbatim={f: dict(sorted(c.items())) for f, c in kept.items() if c},
        judgement_calls=calls, errors=checked.errors, warnings=len(checked.warnings),
        missing=missing, next_steps=_next_steps(dst, statuses), links=link_outcomes,
        ranked=ranked)
    files.replace(dst / REPORT_FILE, json.dumps(report.to_json(), indent=2, ensure_ascii=False)
                  + "\n", dst)
    return report


def _next_steps(dst: Path, statuses: Counter[str]) -> list[str]:
    steps = [str(commands.validate_set(dst))]
    if statuses.get("provisional"):
        steps += [
            f"{commands.promote_all(dst)}   # value goldens that re-derive from truth/",
            f"{commands.promote_attested(dst)}   # criteria, unanswerable",
        ]
    steps.append(str(commands.score_run(commands.RUN_DIR, dst, endpoint=cli.LOCAL)))
    return steps


def render_report(r: ImportReport) -> str:
    """The import report as a person reads it."""
    state = "OK" if not r.errors else f"{len(r.errors)} error(s)"
    out = [f"imported {r.cases} case(s) from {r.source} into {r.out} ({state}, {r.warnings} warning(s))",
           "statuses (as published; nothing promoted): "
           + ", ".join(f"{k} {n}" for k, n in sorted(r.statuses.items())),
           "kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(r.kinds.items())),
           "copied: " + ", ".join(r.copied)]
    if r.links:
        out += ["links (as published):", *[f"  - {o}" for o in r.links]]
    if r.ranked:
        out += ["ranked goldens:", *[f"  - {q}: {what}" for q, what in sorted(r.ranked.items())]]
    if r.mapped:
        out += ["mapped to the kit's spelling:", *[f"  - {m}" for m in r.mapped]]
    for file, fields in r.kept_verbatim.items():
        out.append(f"kept verbatim in {file} (no kit counterpart): "
                   + ", ".join(f"{k} ({n})" for k, n in fields.items()))
    if r.judgement_calls:
        out += ["judgement calls:", *[f"  - {c}" for c in r.judgement_calls]]
    if r.missing:
        out += ["not in the source, needed before scoring:", *[f"  - {m}" for m in r.missing]]
    if r.errors:
        out += ["errors (validate_set):", *[f"  - {e}" for e in r.errors]]
    out += ["next:", *[f"  {s}" for s in r.next_steps]]
    return "\n".join(out)
