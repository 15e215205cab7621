"""import_set --questions: a list of questions people wrote, made provisional cases of a set.

Three shapes are read (README.md, "Write your first set"): a CSV with a `question` column and optional
`golden_query` and `notes` columns; a markdown file whose list items (`- `, `* `, `+ `, `1. `,
`1) `, with or without a `[ ]` box) are the questions; or plain text, one question per line.
Blank lines and lines starting with `#` (headings, comments) are never questions.

Each new case gets a generated qid (from the question's words, unique in the set ignoring case),
the question exactly as written (surrounding spaces trimmed), and, where the list gives a golden
query, a golden derived by running that query on the set's model: `status: provisional`, kept
under `modelQuery` on the case, never treated as verified (promote_golden.py re-derives a value
golden from the truth package only, so a person still writes its canonicalQuery). A case with no
query gets no golden and the tag `no-golden`. Nothing is invented: a query that fails or returns
nothing leaves the case without a golden, and the report says why.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core import commands
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, InputError, KitError
from malloy_evals.endpoint import runner as rt
from malloy_evals.sets.eval_set import CASES_FILE, load_set, rewrite_jsonl

FROM_LIST_TAG = "from-question-list"
NO_GOLDEN_TAG = "no-golden"
MAX_GOLDEN_ROWS = 200     # a golden derived from a query keeps at most this many rows
_QID_WORDS = 6
_STOP = frozenset({"a", "an", "and", "are", "by", "did", "do", "does", "for", "from", "how", "in",
                   "is", "it", "of", "on", "our", "the", "to", "was", "we", "were", "what",
                   "which", "who"})
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,4}[.)])\s+(?:\[[ xX]\]\s+)?(?P<text>\S.*)$")


@dataclass(frozen=True)
class ListedQuestion:
    """One question of the list, where it was, and what came with it."""

    line: int
    question: str
    golden_query: str | None = None
    notes: str | None = None


@dataclass(frozen=True)
class QuestionCase:
    """What became of one listed question."""

    line: int
    qid: str | None          # None when the question was already in the set
    question: str
    golden: str              # how the golden was made, or why there is none
    written: bool


@dataclass(frozen=True)
class QuestionsReport:
    """import_set --questions over one list: the cases written and their goldens."""

    source: str
    set_dir: str
    format: str              # csv | markdown | lines
    cases: list[QuestionCase]
    unmeasured: str | None = None   # why no golden query could run at all
    next_steps: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if any(c.golden.startswith("none: the golden query failed") for c in self.cases):
            return EXIT_FINDING
        return EXIT_UNMEASURED if self.unmeasured else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "set_dir": self.set_dir, "format": self.format,
                "written": sum(c.written for c in self.cases), "cases": self.cases,
                "unmeasured": self.unmeasured, "next_steps": self.next_steps,
                "exit_code": self.exit_code}


def _cell(row: dict[str, str], name: str) -> str | None:
    value = (row.get(name) or "").strip()
    return value or None


def read_question_list(path: str | Path) -> tuple[str, list[ListedQuestion]]:
    """(format, questions) of a question list; InputError naming the file when it holds none or a
    CSV has no `question` column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot be read: {exc}") from None
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    header = [c.strip().lower() for c in next(csv.reader([first]), [])]
    if path.suffix.lower() == ".csv" or (len(header) > 1 and "question" in header):
        return "csv", _read_csv(path, text)
    items = [(n, m.group("text")) for n, line in enumerate(lines, start=1)
             if (m := _LIST_ITEM.match(line))]
    fmt = "markdown" if items else "lines"
    if not items:
        items = [(n, line) for n, line in enumerate(lines, start=1)
                 if line.strip() and not line.lstrip().startswith("#")]
    found = [ListedQuestion(n, q.strip()) for n, q in items if q.strip()]
    if not found:
        raise InputError(path, None, "holds no question (a CSV with a question column, a "
                                     "markdown list, or one question per line)")
    return fmt, found


def _read_csv(path: Path, text: str) -> list[ListedQuestion]:
    reader = csv.DictReader(io.StringIO(text))
    names = {(n or "").strip().lower(): n for n in reader.fieldnames or []}
    if "question" not in names:
        raise InputError(path, 1, "no 'question' column (the header names: "
                                  f"{', '.join(reader.fieldnames or []) or 'nothing'})")
    out = []
    for row in reader:
        lowered = {k: row.get(v) or "" for k, v in names.items()}
        question = _cell(lowered, "question")
        if question:
            out.append(ListedQuestion(reader.line_num, question, _cell(lowered, "golden_query"),
                                      _cell(lowered, "notes")))
    if not out:
        raise InputError(path, None, "the question column holds no question")
    return out


def qid_for(question: str, taken: set[str]) -> str:
    """A qid from the question's first significant words, unique among `taken` (lower-cased)."""
    plain = re.sub(r"['\u2019]", "", question.lower())  # shop's -> shops
    words = [w for w in re.findall(r"[a-z0-9]+", plain) if w not in _STOP]
    base = ("q_" + "_".join(words[:_QID_WORDS]))[:100] if words else "q"
    qid, n = base, 1
    while qid.lower() in taken:
        n += 1
        qid = f"{base}_{n}"
    taken.add(qid.lower())
    return qid


Executor = Callable[[str], list[dict[str, Any]]]


def derive_golden(query: str, execute: Executor) -> tuple[dict[str, Any] | None, str]:
    """(golden, how) from a golden query run on the model; (None, why) when it cannot give one."""
    try:
        rows = execute(query)
    except KitError as exc:
        return None, f"none: the golden query failed: {exc}"
    if not rows:
        return None, "none: the golden query returned no rows"
    if len(rows) > MAX_GOLDEN_ROWS:
        return None, (f"none: the golden query returned {len(rows)} rows; a golden keeps at most "
                      f"{MAX_GOLDEN_ROWS} (add a limit: to it)")
    if len(rows) == 1:
        return ({"status": "provisional", "kind": "scalar", "value": dict(rows[0])},
                "derived from the golden query on the model: scalar, provisional")
    return ({"status": "provisional", "kind": "rows", "value": [dict(r) for r in rows]},
            f"derived from the golden query on the model: {len(rows)} rows, provisional")


def import_questions(source: str | Path, set_dir: str | Path, *,
                     runtime_factory: Callable[..., Any] | None = None) -> QuestionsReport:
    """Append the questions of `source` to the set at `set_dir` as provisional cases."""
    fmt, listed = read_question_list(source)
    eval_set = load_set(set_dir)
    taken = {q.lower() for q in eval_set.cases}
    known = {c.question: c.qid for c in eval_set.cases.values()}
    unmeasured = None
    runtime = None
    if any(q.golden_query for q in listed):
        unmeasured = rt.runtime_missing_reason() if runtime_factory is None else None
        if unmeasured is None and not eval_set.model_dir.is_dir():
            unmeasured = f"{eval_set.model_dir}: no model folder to run the golden queries on"
        if unmeasured is None:
            factory = runtime_factory or rt.MalloyRuntime
            runtime = factory(eval_set.model_dir, allow=rt.default_allow(eval_set.model_dir))

    def execute(query: str) -> list[dict[str, Any]]:
        assert runtime is not None
        result = runtime.execute(query, model_path=eval_set.target_model_path)
        return list(result.get("rows") or [])

    new_cases: list[dict[str, Any]] = []
    outcomes: list[QuestionCase] = []
    try:
        for item in listed:
            if item.question in known:
                outcomes.append(QuestionCase(item.line, known[item.question], item.question,
                                             "unchanged: the question is already in the set",
                                             False))
                continue
            qid = qid_for(item.question, taken)
            known[item.question] = qid
            case: dict[str, Any] = {"qid": qid, "question": item.question, "split": "dev",
                                    "tags": [FROM_LIST_TAG]}
            if item.golden_query is None:
                how = "none: the list gives no golden query"
            elif runtime is None:
                how = f"none: the golden query was not run ({unmeasured})"
            else:
                golden, how = derive_golden(item.golden_query, execute)
                if golden is not None:
                    case["golden"] = golden
            if "golden" not in case:
                case["tags"].append(NO_GOLDEN_TAG)
            if item.golden_query is not None:
                case["modelQuery"] = item.golden_query
            if item.notes is not None:
                case["notes"] = item.notes
            new_cases.append(case)
            outcomes.append(QuestionCase(item.line, qid, item.question, how, True))
    finally:
        if runtime is not None:
            runtime.close()
    if new_cases:
        rewrite_jsonl(Path(set_dir) / CASES_FILE, append=new_cases)
    steps = [str(commands.validate_set(Path(set_dir)))]
    if any("golden" in c for c in new_cases):
        steps.append(str(commands.verify_goldens(Path(set_dir))))
    return QuestionsReport(str(source), str(set_dir), fmt, outcomes, unmeasured, steps)


def render_questions(r: QuestionsReport) -> str:
    """The cases written, one line each, then what to do next."""
    written = sum(c.written for c in r.cases)
    out = [f"{written} case(s) added to {r.set_dir} from {r.source} ({r.format})"]
    for c in r.cases:
        out.append(f"  line {c.line}: {c.qid or '-'}: {c.golden}")
    if r.unmeasured:
        out.append(f"golden queries not run: {r.unmeasured}")
    out += ["next:", *[f"  {s}" for s in r.next_steps]]
    return "\n".join(out)
