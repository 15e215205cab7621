"""new_set: a first set scaffolded around a Malloy package, ready to validate, verify and run.

The set is written outside the kit's checkout by default (`~/malloy-evals-sets/NAME`), or into a
folder the checkout's git ignores (`runs/...`): a set under `evals/` would dirty the checkout. It
holds:

- `model/`: a copy of the package under test (`--model DIR`), and `data/`: a copy of the tables it
  reads (`--data DIR`; the model reads them as `../data/<file>`);
- `truth/truth.malloy`: one raw source per table, no semantics: where canonical queries run;
- `set.json`, and `cases.jsonl` with one case of each golden kind (scalar, rows, criteria,
  unanswerable), each with a `notes` field saying what the author changes. The scalar and rows
  goldens are derived there and then by running their canonical queries on the truth package
  (status provisional: promote_golden.py verifies them), so the set verifies as written.

Nothing here is invented about the author's domain: the example questions ask what the tables can
answer about themselves (how many rows, the commonest values), to be replaced by real questions.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core import commands, files, paths
from malloy_evals.core.errors import EXIT_OK, InputError, UnmeasuredError, UsageError
from malloy_evals.sets.eval_set import CASES_FILE, SET_FILE, check_set

DEFAULT_PARENT = Path("~/malloy-evals-sets")
TABLE_SUFFIXES = (".csv", ".parquet", ".json", ".jsonl", ".tsv")
TRUTH_FILE = "truth.malloy"


@dataclass(frozen=True)
class NewSet:
    """What new_set wrote, and the commands that come next."""

    set_dir: str
    model_path: str
    tables: list[str]
    cases: list[str]
    next_steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"set_dir": self.set_dir, "model_path": self.model_path, "tables": self.tables,
                "cases": self.cases, "next_steps": self.next_steps, "warnings": self.warnings,
                "exit_code": self.exit_code}


def default_out(name: str) -> Path:
    return DEFAULT_PARENT.expanduser() / name


def check_out(out: Path) -> None:
    """A set folder may not dirty the kit's checkout: outside it, or where its git ignores."""
    kit = paths.KIT_ROOT.resolve()
    target = out.expanduser().resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty folder")
    if not target.is_relative_to(kit):
        return
    try:
        ignored = subprocess.run(["git", "-C", str(kit), "check-ignore", "-q", str(target)],
                                 capture_output=True, check=False, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ignored = False
    if not ignored:
        raise UsageError(f"--out {out}: inside the kit's checkout and not ignored by git (a set "
                         "there dirties the checkout); choose a folder outside it, or under runs/")


def _identifier(stem: str) -> str:
    name = re.sub(r"\W+", "_", stem).strip("_").lower() or "t"
    return name if not name[0].isdigit() else f"t_{name}"


def _model_file(model: Path) -> str:
    found = sorted(p.relative_to(model).as_posix() for p in model.glob("*.malloy"))
    if not found:
        raise InputError(model, None, "holds no .malloy file at its top (--model takes a Malloy "
                                      "package folder)")
    return found[0]


def scaffold(name: str, model: str | Path, out: str | Path | None = None,
             data: str | Path | None = None) -> NewSet:
    """new_set.py: write the set NAME at `out` (default ~/malloy-evals-sets/NAME)."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", name):
        raise UsageError(f"{name!r}: a set name is letters, digits, _ . - (it names folders)")
    model_dir = Path(model)
    target = Path(out) if out is not None else default_out(name)
    check_out(target)
    model_path = _model_file(model_dir)
    from malloy_evals.endpoint import runner as rt  # here, not at import: new_set --help needs none

    why = rt.runtime_missing_reason()
    if why:
        raise UnmeasuredError(f"{why} (new_set derives its example goldens by running them)")
    target.mkdir(parents=True, exist_ok=True)
    files.copy_tree(model_dir, target / "model")
    tables: list[str] = []
    if data is not None:
        files.copy_tree(Path(data), target / "data")
        tables = sorted(p.name for p in (target / "data").iterdir()
                        if p.is_file() and p.suffix.lower() in TABLE_SUFFIXES)
    (target / "truth").mkdir()
    sources = {_identifier(Path(t).stem): t for t in tables}
    truth = ["// The truth package: the set's tables as raw sources, no measures, no docs, no",
             "// joins. Canonical queries run here, never on the model under test, so a bug in",
             "// the model cannot certify its own golden.",
             *[f"source: {s} is duckdb.table('../data/{t}')" for s, t in sources.items()]]
    (target / "truth" / TRUTH_FILE).write_text("\n".join(truth) + "\n", encoding="utf-8")
    config = {"name": name,
              "description": f"TODO: what the {name} set is for and what it is not good for.",
              "datasetVersion": 1, "targetPackage": name, "targetModelPath": model_path,
              "truthPackage": f"{name}_truth", "truthModelPath": TRUTH_FILE,
              "environment": "samples"}
    (target / SET_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    cases = _example_cases(name, target, model_path, sources)
    (target / CASES_FILE).write_text("".join(json.dumps(c) + "\n" for c in cases),
                                     encoding="utf-8")
    warnings = [] if tables else [
        ("no --data: put the tables the model reads in data/, add a raw source for each to "
         "truth/truth.malloy, then give the example cases canonical queries")]
    checked = check_set(target)
    warnings += checked.errors
    return NewSet(str(target), model_path, tables, [c["qid"] for c in cases],
                  _next_steps(target, cases), warnings)


def _example_cases(name: str, target: Path, model_path: str,
                   sources: dict[str, str]) -> list[dict[str, Any]]:
    """One case of each golden kind; the value goldens derived on the truth package."""
    entity = _first_source(target / "model", model_path)
    expected = {"required": [entity], "requiredAnyOf": [], "acceptable": []} if entity else None
    out: list[dict[str, Any]] = []
    if sources:
        table = next(iter(sources))
        from malloy_evals.endpoint import runner as rt

        with rt.MalloyRuntime(target / "truth", allow=rt.default_allow(target / "truth")) as truth:
            def run(query: str) -> list[dict[str, Any]]:
                return list(truth.execute(query, model_path=TRUTH_FILE, trusted=True)
                            .get("rows") or [])

            count_q = f"run: {table} -> {{ aggregate: row_count is count() }}"
            [row] = run(count_q)
            first = next(iter(run(f"run: {table} -> {{ select: *; limit: 1 }}")[0]))
            top_q = (f"run: {table} -> {{ group_by: `{first}`; aggregate: row_count is count(); "
                     f"order_by: row_count desc, `{first}`; limit: 3 }}")
            top = run(top_q)
        out.append({
            "qid": f"{name}_row_count", "question": f"How many rows does the {table} table hold?",
            "split": "dev", "tags": ["example", "scalar"], "coverage": "covered",
            "expectedEntities": expected, "goldenRevision": 1,
            "notes": ("A scalar golden: one row, compared per column within `round` decimals. "
                      "Replace the question with a real one, its canonicalQuery with the query "
                      "that answers it over truth/ (raw tables only), and re-derive the value "
                      "(verify_goldens.py says when it no longer follows)."),
            "golden": {"status": "provisional", "kind": "scalar",
                       "value": {"row_count": row["row_count"]}, "canonicalQuery": count_q,
                       "rubric": f"PREFERRED: {row['row_count']} rows."}})
        out.append({
            "qid": f"{name}_top_values",
            "question": f"Which three values of {first} are the commonest in the {table} table, "
                        "with how many rows each?",
            "split": "dev", "tags": ["example", "rows"], "coverage": "covered",
            "expectedEntities": expected, "goldenRevision": 1,
            "notes": ("A rows golden: rows compared as a multiset, unless ordered is true (then in "
                      "order). Ties make a top-N question ambiguous: order the query by a second "
                      "column, as here, or say so in the rubric."),
            "golden": {"status": "provisional", "kind": "rows", "value": top, "ordered": True,
                       "canonicalQuery": top_q,
                       "rubric": "PREFERRED: the three values and counts, commonest first."}})
    out.append({
        "qid": f"{name}_explain_model", "question": f"What does the {name} data cover, and over "
                                                    "what period?",
        "split": "dev", "tags": ["example", "criteria"], "coverage": "covered", "goldenRevision": 1,
        "notes": ("A criteria golden: no single value; the judge reads the rubric. Mark what the "
                  "answer must say REQUIRED, what it may add CREDITED, and traps WRONG. A person "
                  "promotes it: promote_golden.py --attest --by NAME."),
        "golden": {"status": "provisional", "kind": "criteria",
                   "rubric": "REQUIRED: names the tables the data holds. CREDITED: the date range "
                             "the rows span. WRONG: describing data the tables do not hold."}})
    out.append({
        "qid": f"{name}_not_in_data", "question": "How satisfied were our customers last year?",
        "split": "dev", "tags": ["example", "unanswerable", "refusal-expected"],
        "coverage": "absent", "goldenRevision": 1,
        "notes": ("An unanswerable golden: the right answer declines and says what is missing. "
                  "Use it for questions that sound answerable but are not; a person promotes it "
                  "with --attest."),
        "golden": {"status": "provisional", "kind": "unanswerable", "value": None,
                   "rubric": "PREFERRED: declines, saying the data holds no satisfaction measure "
                             "(no survey or rating). WRONG: any figure presented as satisfaction."}})
    return out


def _first_source(model: Path, model_path: str) -> str | None:
    from malloy_evals.endpoint import runner as rt

    with rt.MalloyRuntime(model, allow=rt.default_allow(model)) as runtime:
        surface = runtime.describe()
    for m in surface.get("models") or []:
        if m.get("path") == model_path:
            for src in m.get("sources") or []:
                return f"source:{src['name']}:{src['name']}"
    return None


def _next_steps(target: Path, cases: list[dict[str, Any]]) -> list[str]:
    attest = [c["qid"] for c in cases if c["golden"]["kind"] in ("criteria", "unanswerable")]
    return [str(commands.validate_set(target)), str(commands.verify_goldens(target)),
            str(commands.promote_all(target)),
            *[f"{commands.promote_attested(target)}".replace("<qid>", q) for q in attest[:1]]]


def render_text(r: NewSet) -> str:
    lines = [(f"new set {r.set_dir}: model/{r.model_path}, {len(r.tables)} table(s) in data/, "
             f"{len(r.cases)} example case(s) ({', '.join(r.cases)})"),
             "edit cases.jsonl (each case's notes say what to change), then:",
             *[f"  {s}" for s in r.next_steps]]
    lines += [f"warning: {w}" for w in r.warnings]
    return "\n".join(lines)
