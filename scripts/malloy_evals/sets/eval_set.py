"""Eval sets: `set.json`, `cases.jsonl` and goldens, loaded and checked.

Their fields are described in reference/ledger-schema.md.

`load_set` is what every script uses: it raises one InputError naming file and line on the first
error. `check_set` (validate_set.py) collects every error and warning instead, and also checks the
judge fixture files. Unknown fields are warnings, never errors, so a set written for another
harness loads.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from malloy_evals.core import files, jsonl, schemas, vocab
from malloy_evals.core.errors import InputError
from malloy_evals.core.findings import FolderReport, LineProblem

SET_FILE = "set.json"
CASES_FILE = "cases.jsonl"
REGRESSIONS_FILE = "judge-regressions.jsonl"
CALIBRATION_FILE = "judge-calibration.jsonl"
DEFAULT_ENVIRONMENT = "samples"
VALUE_KINDS = ("scalar", "rows")  # golden kinds that hold a value to compare against


def question_sha(text: str) -> str:
    """The first 16 hex characters of the sha256 of the question's exact text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Case:
    """One line of cases.jsonl: its qid, exact question, line number and the whole authored object."""

    qid: str
    question: str
    line: int
    raw: dict[str, Any] = field(repr=False, compare=False)  # the whole line; unknown fields kept

    @property
    def question_sha(self) -> str:
        """First 16 hex of sha256(question)."""
        return question_sha(self.question)

    @property
    def golden(self) -> dict[str, Any] | None:
        """The golden object, or None when the case has none (scored null `golden_missing`)."""
        g = self.raw.get("golden")
        return g if isinstance(g, dict) else None

    @property
    def golden_status(self) -> str | None:
        """The golden's status; a golden without one reads as `verified` (older sets); None without a golden."""
        g = self.golden
        if g is None:
            return None
        return g.get("status") or "verified"

    @property
    def golden_kind(self) -> str | None:
        g = self.golden
        return g.get("kind") if g else None

    @property
    def golden_revision(self) -> int | None:
        rev = self.raw.get("goldenRevision")
        return rev if isinstance(rev, int) and not isinstance(rev, bool) else None

    @property
    def coverage(self) -> str | None:
        """The authored coverage judgement (covered / derivable / absent), or None."""
        return self.raw.get("coverage")

    @property
    def coverage_note(self) -> str | None:
        return self.raw.get("coverageNote")

    @property
    def requires_concepts(self) -> list[str]:
        return list(self.raw.get("requiresConcepts") or [])

    @property
    def expected_entities(self) -> dict[str, list[Any]]:
        """`{required, requiredAnyOf, acceptable}`, each a list (empty when not authored)."""
        ee = self.raw.get("expectedEntities")
        ee = ee if isinstance(ee, dict) else {}
        return {k: list(ee.get(k) or []) for k in ("required", "requiredAnyOf", "acceptable")}

    @property
    def must_not_use(self) -> list[str]:
        """golden.mustNotUse, as written."""
        g = self.golden or {}
        return list(g.get("mustNotUse") or [])

    @property
    def must_not_use_allowed_in(self) -> dict[str, list[str]]:
        """golden.mustNotUseAllowedIn: entry -> the model definitions it is allowed inside."""
        g = self.golden or {}
        raw = g.get("mustNotUseAllowedIn")
        if not isinstance(raw, dict):
            return {}
        return {k: [n for n in v if isinstance(n, str)] for k, v in raw.items()
                if isinstance(k, str) and isinstance(v, list)}

    @property
    def must_state(self) -> list[str]:
        g = self.golden or {}
        return list(g.get("mustState") or [])

    @property
    def rubric(self) -> str | None:
        g = self.golden or {}
        return g.get("rubric")

    @property
    def canonical_query(self) -> str | None:
        g = self.golden or {}
        return g.get("canonicalQuery")

    @property
    def alternates(self) -> list[dict[str, Any]]:
        """golden.alternates: other readings, accepted (`accept: true`) or rejected traps."""
        g = self.golden or {}
        return [a for a in (g.get("alternates") or []) if isinstance(a, dict)]

    @property
    def clarify_ok(self) -> bool:
        """Whether a clarifying question that names the missing detail answers this case."""
        return bool((self.golden or {}).get("clarifyOk")) or self.clarify_preferred

    @property
    def clarify_preferred(self) -> bool:
        """Whether a clarifying question is the preferred answer to this case."""
        return bool((self.golden or {}).get("clarifyPreferred"))

    @property
    def ordered(self) -> bool:
        """Whether a rows golden is ranked: its row order is part of the key."""
        return bool((self.golden or {}).get("ordered"))

    @property
    def tags(self) -> list[str]:
        return list(self.raw.get("tags") or [])

    @property
    def split(self) -> str:
        """dev (the default) or holdout."""
        return self.raw.get("split") or "dev"


@dataclass
class EvalSet:
    """A loaded set folder: its config (set.json), its cases in file order, and load warnings."""

    dir: Path
    config: dict[str, Any]
    cases: dict[str, Case]
    warnings: list[str]
    dataset_sha: str  # sha256 over set.json's bytes then cases.jsonl's bytes
    # Another package folder standing in for `model/` (`--model DIR`): a candidate model is
    # served, judged against and pinned from here, while cases and goldens stay the set's.
    served_model: Path | None = None

    def case(self, qid: str) -> Case:
        """The case `qid`; InputError naming cases.jsonl when there is none."""
        try:
            return self.cases[qid]
        except KeyError:
            raise InputError(self.dir / CASES_FILE, None, f"no case with qid {qid!r}") from None

    @property
    def name(self) -> str:
        return self.config["name"]

    @property
    def dataset_version(self) -> int:
        return self.config["datasetVersion"]

    @property
    def environment(self) -> str:
        return self.config.get("environment") or DEFAULT_ENVIRONMENT

    @property
    def target_package(self) -> str:
        return self.config["targetPackage"]

    @property
    def target_model_path(self) -> str:
        return self.config["targetModelPath"]

    @property
    def truth_package(self) -> str | None:
        return self.config.get("truthPackage")

    @property
    def truth_model_path(self) -> str:
        return self.config.get("truthModelPath") or self.target_model_path

    @property
    def model_dir(self) -> Path:
        """The Malloy package under test: `<set>/model/`, or the folder `--model DIR` named."""
        return self.served_model if self.served_model is not None else self.dir / "model"

    @property
    def package_spec(self) -> str:
        """`ENV/PKG=DIR`: how serve_local.py takes this set's package under test."""
        return f"{self.environment}/{self.target_package}={self.model_dir.resolve()}"

    def with_model(self, directory: str | Path) -> EvalSet:
        """This set with `directory` serving as its model package (a candidate model beside
        `model/`); InputError when the folder lacks the set's targetModelPath."""
        folder = Path(directory)
        if not folder.is_dir():
            raise InputError(folder, None, "not a folder (--model takes a Malloy package folder)")
        if not (folder / self.target_model_path).is_file():
            raise InputError(folder, None, f"has no {self.target_model_path} (the set's "
                                           "targetModelPath): not a package of this set's model")
        return replace(self, served_model=folder.resolve())

    @property
    def model_file(self) -> Path:
        return self.model_dir / self.target_model_path

    @property
    def truth_dir(self) -> Path:
        """The truth package (`<set>/truth/`), where canonical queries run."""
        return self.dir / "truth"

    @property
    def truth_model_file(self) -> Path:
        return self.truth_dir / self.truth_model_path

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def regressions_path(self) -> Path:
        return self.dir / REGRESSIONS_FILE

    @property
    def calibration_path(self) -> Path:
        return self.dir / CALIBRATION_FILE

    def recordings_dir(self, role: str) -> Path:
        """`<set>/recordings/<role>/` (judge, coverage, diagnose)."""
        return self.dir / "recordings" / role


# --------------------------------------------------------------------------------------------

@dataclass
class _Scan:
    config: dict[str, Any] | None = None
    cases: dict[str, Case] = field(default_factory=dict)
    errors: list[LineProblem] = field(default_factory=list)
    warnings: list[LineProblem] = field(default_factory=list)
    dataset_sha: str = ""

    def problem(self, file: str, line: int | None, message: str, warning: bool = False) -> None:
        (self.warnings if warning else self.errors).append(
            LineProblem(file, line, message, "warning" if warning else "error"))

    def schema_problems(self, schema: str, obj: Any, file: str, line: int | None,
                        prefix: str = "") -> None:
        for p in schemas.validate(schema, obj):
            self.problem(file, line, f"{prefix}{p}", warning=p.unknown)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def authored_lines(data: bytes) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, parsed object or None, error) for each non-blank line of a JSON-lines file
    people write (cases.jsonl, the judge fixtures): lines split on newline only, as rewrite_jsonl
    counts them, a byte-order mark before the first line and CR endings allowed. Every reader of
    such a file reads it through this, so none skips a line another reads."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield number, None, "not UTF-8"
            continue
        if number == 1:
            text = text.removeprefix("\ufeff")
        if not text.strip():
            continue  # blank lines are harmless in an authored file
        try:
            yield number, jsonl.loads(text), None
        except (ValueError, RecursionError) as exc:
            yield number, None, f"not valid JSON: {getattr(exc, 'msg', exc)}"


def _check_readable(set_dir: Path) -> None:
    if not set_dir.is_dir():
        raise InputError(set_dir, None, "not a folder")
    try:
        next(iter(set_dir.iterdir()), None)
    except OSError as exc:
        raise InputError(set_dir, None, f"cannot be read: {exc.strerror}") from None


def _scan(set_dir: Path) -> _Scan:
    """Read set.json and cases.jsonl, collecting every problem (raises only for an unreadable folder)."""
    _check_readable(set_dir)
    scan = _Scan()
    try:
        set_bytes = _read_bytes(set_dir / SET_FILE)
        case_bytes = _read_bytes(set_dir / CASES_FILE)
    except OSError as exc:
        # Name the file that failed (set.json or cases.jsonl), not only its folder.
        raise InputError(exc.filename or set_dir, None, f"cannot be read: {exc.strerror}") from None
    scan.dataset_sha = hashlib.sha256((set_bytes or b"") + (case_bytes or b"")).hexdigest()

    if set_bytes is None:
        scan.problem(SET_FILE, None, "missing")
    else:
        try:
            config = jsonl.loads(set_bytes.decode("utf-8-sig"))
        except UnicodeDecodeError:
            scan.problem(SET_FILE, None, "not UTF-8")
        except (ValueError, RecursionError) as exc:
            scan.problem(SET_FILE, getattr(exc, "lineno", None),
                         f"not valid JSON: {getattr(exc, 'msg', exc)}")
        else:
            if isinstance(config, dict):
                scan.config = config
                scan.schema_problems("set", config, SET_FILE, None)
            else:
                scan.problem(SET_FILE, None, "must be a JSON object")

    if case_bytes is None:
        scan.problem(CASES_FILE, None, "missing")
        return scan
    seen: dict[str, tuple[str, int]] = {}
    for number, obj, error in authored_lines(case_bytes):
        if error:
            scan.problem(CASES_FILE, number, error)
            continue
        if not isinstance(obj, dict):
            scan.problem(CASES_FILE, number, "a case must be a JSON object")
            continue
        n_errors = len(scan.errors)
        scan.schema_problems("case", obj, CASES_FILE, number)
        qid, question = obj.get("qid"), obj.get("question")
        if isinstance(qid, str) and re.search(vocab.QID_PATTERN, qid) and not vocab.is_qid(qid):
            # The schema's `$` lets "q1\n" through; a qid names a folder, so refuse it here.
            scan.problem(CASES_FILE, number, f"qid: {qid!r} is not a safe id")
        if vocab.is_qid(qid):
            folded = qid.casefold()
            if folded in seen:
                other, other_line = seen[folded]
                scan.problem(CASES_FILE, number, f"qid: {qid!r} repeats {other!r} of line {other_line} "
                                                 "(qids are unique ignoring case: they name folders)")
                continue
            seen[folded] = (qid, number)
        if isinstance(question, str) and isinstance(obj.get("questionSha"), str):
            full = hashlib.sha256(question.encode("utf-8")).hexdigest()
            if not full.startswith(obj["questionSha"]):
                scan.problem(CASES_FILE, number, f"questionSha: {obj['questionSha']!r} is not the "
                             f"question's sha256 ({full[:16]}...): the question was edited; a changed "
                             "question needs a new qid")
        golden = obj.get("golden")
        if isinstance(golden, dict):
            _check_golden(set_dir, scan, golden, number)
        if len(scan.errors) == n_errors and vocab.is_qid(qid) and isinstance(question, str):
            scan.cases[qid] = Case(qid, question, number, obj)
    return scan


def _check_golden(set_dir: Path, scan: _Scan, golden: dict[str, Any], number: int) -> None:
    """The golden checks a schema cannot express: a path inside the set and readable."""
    path = golden.get("path")
    if isinstance(path, str) and path:
        try:
            _read_golden_file(set_dir, path)
        except InputError as exc:
            where = f" (line {exc.line})" if exc.line else ""
            scan.problem(CASES_FILE, number, f"golden.path: {exc.message}{where}")
    allowed_in = golden.get("mustNotUseAllowedIn")
    if isinstance(allowed_in, dict):
        entries = got if isinstance(got := golden.get("mustNotUse"), list) else []
        for entry in allowed_in:
            if entry not in entries:
                scan.problem(CASES_FILE, number, f"golden.mustNotUseAllowedIn: {files.clipped(entry)} is not "
                             "an entry of golden.mustNotUse (write the entry exactly as it is there)")
    kind, status = golden.get("kind"), golden.get("status") or "verified"
    if kind in VALUE_KINDS and status == "verified" and golden.get("value") is None and not path:
        scan.problem(CASES_FILE, number, f"golden: a verified {kind} golden has neither value nor "
                                         "path; the judge will see no answer key", warning=True)


_INT = re.compile(r"-?(0|[1-9][0-9]*)")
# No leading zeros: "007" is a code, not a number.
_FLOAT = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def _cell(text: str) -> Any:
    """A CSV cell as a JSON value: empty -> None, integers and decimals as numbers, else the text."""
    if text == "":
        return None
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def _read_golden_file(set_dir: Path, relative: str) -> list[dict[str, Any]]:
    """The rows of a golden CSV (with header) or JSON file (an array of objects)."""
    target = files.inside(set_dir, relative, "the set folder")
    suffix = target.suffix.lower()
    if suffix not in (".csv", ".json"):
        raise InputError(relative, None, f"{files.clipped(relative)} must be a .csv or .json file")
    try:
        text = target.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(relative, None, f"{files.clipped(relative)} does not exist") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(relative, None, f"{files.clipped(relative)} cannot be read: "
                                        f"{getattr(exc, 'strerror', None) or exc}") from None
    if suffix == ".json":
        try:
            rows = jsonl.loads(text)
        except (ValueError, RecursionError) as exc:
            raise InputError(relative, getattr(exc, "lineno", None),
                             f"{files.clipped(relative)} is not valid JSON") from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise InputError(relative, None, f"{files.clipped(relative)} must hold a JSON array of row objects")
        return rows
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames:
            raise InputError(relative, None, f"{files.clipped(relative)} has no header row")
        rows = []
        for row in reader:
            if None in row:
                raise InputError(relative, reader.line_num, f"{files.clipped(relative)} has more cells than columns")
            rows.append({k: _cell(v) if isinstance(v, str) else None for k, v in row.items()})
    except csv.Error as exc:
        raise InputError(relative, None, f"{files.clipped(relative)} is not valid CSV: {exc}") from None
    return rows


def golden_value(case: Case, set_dir: str | Path) -> Any:
    """The golden's value: `value` when present (it wins), else the rows of `path`, else None."""
    g = case.golden
    if not g:
        return None
    if "value" in g:
        return g["value"]
    path = g.get("path")
    if isinstance(path, str) and path:
        try:
            return _read_golden_file(Path(set_dir), path)
        except InputError as exc:
            raise InputError(Path(set_dir) / CASES_FILE, case.line,
                             f"golden.path: {exc.message}") from None
    return None


# What the judge, the veto and retrieval scoring read of a case: a score made against other
# content is stale (ledger/ties.py), with or without a revision bump. Bookkeeping stays out.
CONTENT_KEYS = ("question", "tags", "golden", "expectedEntities", "coverage")
GOLDEN_BOOKKEEPING = ("verifiedBy", "verifiedAt")


def case_content_sha(case: Case, set_dir: str | Path) -> str:
    """sha256 over what the judge and the veto read of `case` (CONTENT_KEYS, the golden without
    who verified it and when, and the bytes of a golden rows file it names), as canonical JSON."""
    content: dict[str, Any] = {k: case.raw.get(k) for k in CONTENT_KEYS}
    golden = case.golden
    if golden is not None:
        content["golden"] = {k: v for k, v in golden.items() if k not in GOLDEN_BOOKKEEPING}
        path = golden.get("path")
        if isinstance(path, str) and path and "value" not in golden:
            try:
                data = (Path(set_dir) / path).read_bytes()
                content["goldenFile"] = hashlib.sha256(data).hexdigest()
            except OSError:
                content["goldenFile"] = None
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_set(set_dir: str | Path, model_dir: str | Path | None = None) -> EvalSet:
    """Load a set folder; raises InputError naming file and line on its first error. With
    `model_dir`, that package folder stands in for the set's `model/` (see `with_model`)."""
    d = Path(set_dir)
    scan = _scan(d)
    if scan.errors:
        first = scan.errors[0]
        raise InputError(d / first.file, first.line, first.message)
    assert scan.config is not None
    es = EvalSet(d, scan.config, scan.cases, [str(w) for w in scan.warnings], scan.dataset_sha)
    return es if model_dir is None else es.with_model(model_dir)


def _check_fixtures(set_dir: Path, scan: _Scan) -> None:
    """judge-regressions.jsonl and judge-calibration.jsonl, when present: schema and known qids."""
    known = set(scan.cases)
    for file, schema, id_key in ((REGRESSIONS_FILE, "judge_regression", "fixtureId"),
                                 (CALIBRATION_FILE, "judge_calibration", "qid")):
        data = _read_bytes(set_dir / file)
        if data is None:
            continue
        seen: dict[str, int] = {}
        for number, obj, error in authored_lines(data):
            if error:
                scan.problem(file, number, error)
                continue
            if not isinstance(obj, dict):
                scan.problem(file, number, "must be a JSON object")
                continue
            scan.schema_problems(schema, obj, file, number)
            key = obj.get(id_key)
            if isinstance(key, str):
                if key in seen:
                    scan.problem(file, number, f"{id_key}: {key!r} repeats line {seen[key]}")
                seen.setdefault(key, number)
            qid = obj.get("qid")
            if isinstance(qid, str) and known and qid not in known:
                scan.problem(file, number, f"qid: {qid!r} is not a case of cases.jsonl", warning=True)


def check_set(set_dir: str | Path) -> FolderReport:
    """Every error and warning of a set folder (validate_set.py); an unreadable folder is exit 3."""
    d = Path(set_dir)
    try:
        scan = _scan(d)
        _check_fixtures(d, scan)
    except InputError as exc:
        return FolderReport(str(set_dir), False, "cases", 0, [str(exc)], [])
    return FolderReport(str(set_dir), True, "cases", len(scan.cases),
                        [str(p) for p in scan.errors], [str(p) for p in scan.warnings])


# --------------------------------------------------------------------------------------------
# Rewriting authored JSON-lines files in place, one line at a time


def dump_like(obj: Any, like: bytes | None = None) -> bytes:
    """`obj` as one JSON line written the way `like` (a line of the same file) is written: compact
    or with spaces after `:` and `,`, escaped to ASCII or not. A person's file keeps its style."""
    text = (like or b"").decode("utf-8", "replace")
    compact = bool(text) and '": ' not in text and '", "' not in text
    return json.dumps(obj, ensure_ascii="\\u" in text,
                      separators=(",", ":") if compact else (", ", ": ")).encode("utf-8")


def rewrite_jsonl(path: str | Path, replace: dict[int, Any] | None = None,
                  append: list[Any] | None = None) -> None:
    """Replace the given 1-based lines of a JSON-lines file (None drops the line) and append
    objects after the last, keeping every other byte as it was (line endings included); atomic."""
    path = Path(path)
    data = path.read_bytes() if path.exists() else b""
    lines: list[bytes | None] = list(data.split(b"\n"))  # last item b"" after a final newline
    style = next((line for line in lines if line and line.strip()), None)
    for number, obj in (replace or {}).items():
        old = lines[number - 1] or b""
        ending = b"\r" if old.endswith(b"\r") else b""
        lines[number - 1] = None if obj is None else dump_like(obj, old) + ending
    out = b"\n".join(line for line in lines if line is not None)
    for obj in append or []:
        if out and not out.endswith(b"\n"):
            out += b"\n"
        out += dump_like(obj, style) + b"\n"
    # A temporary file beside it, renamed over it: a link planted in its place is replaced,
    # never written through.
    files.replace(path, out)
