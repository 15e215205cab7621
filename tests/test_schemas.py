"""The JSON Schemas: valid Draft 2020-12, one vocabulary, examples that validate, a document that agrees."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from malloy_evals.core import paths, schemas, vocab
from malloy_evals.ledger.events import parse_ledger
from malloy_evals.ledger.validate import validate_run
from malloy_evals.sets.eval_set import check_set

EXAMPLES = paths.REFERENCE_DIR / "examples"
DOC = paths.REFERENCE_DIR / "ledger-schema.md"
# Every schema item 3 of issue 2 names must exist.
REQUIRED_SCHEMAS = {"defs", "set", "case", "golden", "run", "host_log", "attempt", "tool_call", "score",
                    "retrieval_score", "human_verdict", "reverify", "issue", "issue_status", "void", "judge_verdict",
                    "coverage_report", "judge_regression", "judge_calibration"}


def test_every_contract_has_a_schema():
    assert REQUIRED_SCHEMAS <= set(schemas.schema_names())


@pytest.mark.parametrize("name", sorted(REQUIRED_SCHEMAS))
def test_schema_is_valid_draft_2020_12(name):
    Draft202012Validator.check_schema(schemas.schema(name))
    assert schemas.schema(name)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_vocab_constants_come_from_defs():
    defs = json.loads((paths.SCHEMAS_DIR / "defs.schema.json").read_text())["$defs"]
    assert vocab.VERDICTS == tuple(defs["verdict"]["enum"])
    assert vocab.OWNERS == tuple(defs["owner"]["enum"])
    assert vocab.PHASES == ("baseline", "loop", "blind_gate", "canary", "final", "probe")
    assert vocab.QID_PATTERN == defs["qid"]["pattern"]
    assert set(vocab.EVENT_KINDS) == {"attempt", "tool_call", "score", "retrieval_score",
                                      "human_verdict", "reverify", "issue", "issue_status", "void"}


@pytest.mark.parametrize("reason, ok", [
    ("golden_missing", True), ("judge_error: timeout after 3 retries", True),
    ("environment_failure: runtime missing", True), ("judge_error:", False), ("judge_error: ", False),
    ("no_saved_verdict", False), ("", False), (None, False)])
def test_null_reason_is_fixed_or_patterned(reason, ok):
    assert vocab.is_null_reason(reason) is ok


def test_every_event_kind_has_its_schema():
    for kind in vocab.EVENT_KINDS:
        assert schemas.schema(kind)["properties"]["kind"] == {"const": kind}


# ------------------------------------------------------------------------------------------
# validate / check


def test_unknown_field_is_a_problem_marked_unknown():
    problems = schemas.validate("void", {"kind": "void", "event_id": "e1", "at": "2026-01-01T00:00:00Z",
                                         "target_event_id": "e0", "reason": "x", "note": "hm"})
    assert problems == [schemas.Problem("note", "unknown field", unknown=True)]


def test_a_field_named_with_a_line_break_is_quoted_so_the_message_is_one_line():
    # Found by the coverage-report fuzz test: a key "\n" made a refusal two lines long.
    [problem] = schemas.validate("void", {"kind": "void", "event_id": "e1", "reason": "x",
                                          "at": "2026-01-01T00:00:00Z", "target_event_id": "e0",
                                          "\n": None})
    assert str(problem) == "'\\n': unknown field" and "\n" not in str(problem)


def test_nested_wrong_type_names_the_dotted_field():
    problems = schemas.validate("case", {"qid": "q1", "question": "?",
                                         "expectedEntities": {"requiredAnyOf": [["measure:a:b", 3]]}})
    assert [p.field for p in problems] == ["expectedEntities.requiredAnyOf[0][1]"]


def test_check_raises_schema_violation_naming_the_field():
    with pytest.raises(schemas.SchemaViolation, match=r"golden: kind: 'scalr' is not one of"):
        schemas.check("golden", {"kind": "scalr"})


def test_check_lets_unknown_fields_through_in_authored_set_files_only():
    schemas.check("case", {"qid": "q1", "question": "?", "shapes": ["A9"]})
    with pytest.raises(schemas.SchemaViolation, match="note: unknown field"):
        schemas.check("issue_status", {"kind": "issue_status", "event_id": "e", "at": "2026-01-01T00:00:00Z",
                                       "issue_id": "x", "status": "open", "note": "hm"})


def test_fixed_issue_status_may_name_the_passing_attempts():
    # Issue 16 item 5: diagnose.py marks an issue fixed and names the attempts that pass now.
    fixed = {"kind": "issue_status", "event_id": "e", "at": "2026-01-01T00:00:00Z",
             "issue_id": "r1:x", "status": "fixed", "passing_attempt_ids": ["e3", "e7"]}
    assert schemas.validate("issue_status", fixed) == []
    [problem] = schemas.validate("issue_status", {**fixed, "passing_attempt_ids": ["e 3"]})
    assert "passing_attempt_ids" in str(problem)


@pytest.mark.parametrize("name, obj, expected", [
    pytest.param("case", {"qid": "q1", "question": "?", "golden": {"kind": "scalar", "value": None}},
                 "golden.value: null is not of type 'object'", id="null-type"),
    pytest.param("case", {"qid": "q1", "question": "?", "golden": {"kind": None}},
                 "golden.kind: null is not one of ['scalar', 'rows', 'unanswerable', 'criteria']",
                 id="null-enum"),
    pytest.param("score", {"kind": "score", "event_id": "e", "at": "2026-01-01T00:00:00Z", "qid": "q",
                           "sample": None, "phase": "baseline", "verdict": True},
                 "verdict: true is not one of ['match', 'near_match', 'no_match', 'needs_human', null]",
                 id="true-in-enum-with-null"),
])
def test_messages_quote_values_as_the_json_file_writes_them(name, obj, expected):
    # Issue 16 item 12: a JSON null was reported as `None is not of type ...`.
    assert [str(p) for p in schemas.validate(name, obj)] == [expected]


def test_missing_required_field_names_it():
    problems = schemas.validate("issue_status", {"kind": "issue_status", "event_id": "e", "at":
                                                 "2026-01-01T00:00:00Z", "issue_id": "x"})
    assert [str(p) for p in problems] == ["status: required field missing"]


def test_enum_behind_any_of_says_what_is_allowed():
    [problem] = schemas.validate("score", {"kind": "score", "event_id": "e", "at": "2026-01-01T00:00:00Z",
                                           "qid": "q", "sample": None, "phase": "loop", "verdict": None,
                                           "reason": "because"})
    assert problem.field == "reason"
    assert "'golden_missing'" in problem.message and "judge_error|environment_failure" in problem.message


def test_unknown_event_kind_is_a_problem_on_kind():
    assert [p.field for p in schemas.validate_event({"kind": "gate"})] == ["kind"]


def test_unknown_schema_name_is_a_key_error():
    with pytest.raises(KeyError, match="no schema named"):
        schemas.schema("nope")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4),
                     max_leaves=15)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(REQUIRED_SCHEMAS - {"defs"})), obj=_json)
def test_arbitrary_json_gives_problems_never_an_exception(name, obj):
    problems = schemas.validate(name, obj)
    assert all(isinstance(p, schemas.Problem) for p in problems)


# ------------------------------------------------------------------------------------------
# examples round trip


def _single_examples():
    return sorted(p for p in EXAMPLES.glob("*.json"))


@pytest.mark.parametrize("path", _single_examples(), ids=lambda p: p.name)
def test_single_object_example_validates(path):
    name = path.name.split(".")[0]
    assert schemas.validate(name, json.loads(path.read_text())) == []


def test_there_are_examples_of_every_standalone_shape():
    names = {p.name.split(".")[0] for p in _single_examples()}
    assert {"host_log", "judge_verdict", "coverage_report"} <= names


def test_example_run_validates_with_no_problem_and_holds_every_kind():
    check = validate_run(EXAMPLES / "run")
    assert (check.errors, check.warnings) == ([], [])
    read = parse_ledger((EXAMPLES / "run" / "events.jsonl").read_bytes())
    assert {e["kind"] for e in read.events} == set(vocab.EVENT_KINDS)
    assert all(schemas.validate_event(e) == [] for e in read.events)
    assert schemas.validate("run", json.loads((EXAMPLES / "run" / "run.json").read_text())) == []


def test_example_set_validates_with_no_problem():
    report = check_set(EXAMPLES / "set")
    assert (report.errors, report.warnings, report.count) == ([], [], 3)
    for file, name in (("cases.jsonl", "case"), ("judge-regressions.jsonl", "judge_regression"),
                       ("judge-calibration.jsonl", "judge_calibration")):
        for line in (EXAMPLES / "set" / file).read_text().splitlines():
            assert schemas.validate(name, json.loads(line)) == []
    assert schemas.validate("set", json.loads((EXAMPLES / "set" / "set.json").read_text())) == []


# ------------------------------------------------------------------------------------------
# reference/ledger-schema.md agrees with the schemas

_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _doc_sections() -> dict[str, list[list[str]]]:
    """schema name -> table rows (cells) of its section; `defs` for the shared-shapes table."""
    sections: dict[str, list[list[str]]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            current = "defs" if line.strip() == "## Shared shapes" else None
        m = re.match(r"Schema: \[`schemas/([a-z_]+)\.schema\.json`\]", line)
        if m:
            current = m.group(1)
        if current and line.startswith("| `"):
            cells = [c.strip() for c in _CELL_SPLIT.split(line.strip())[1:-1]]
            sections.setdefault(current, []).append(cells)
    return sections


def _enum_in_cell(cell: str) -> set[str] | None:
    """The backticked values of a type cell that starts with `one of`, else None."""
    if not cell.startswith("one of "):
        return None
    return set(re.findall(r"`([^`]*)`", cell.split(";")[0]))


def test_document_has_a_section_for_every_schema():
    assert set(_doc_sections()) == set(schemas.schema_names())


@pytest.mark.parametrize("name", sorted(set(schemas.schema_names()) - {"defs"}))
def test_document_and_schema_list_the_same_fields(name):
    doc = {cells[0].strip("`"): cells for cells in _doc_sections().get(name, [])}
    specs = {s.path: s for s in schemas.field_specs(name)}
    assert sorted(set(doc) - set(specs)) == [], "documented but not in the schema"
    assert sorted(set(specs) - set(doc)) == [], "in the schema but not documented"
    for path, spec in specs.items():
        assert doc[path][2] == ("yes" if spec.required else "no"), f"{path}: required differs"
        doc_enum = _enum_in_cell(doc[path][1])
        schema_enum = None if spec.enum is None else {str(v) for v in spec.enum}
        assert doc_enum == schema_enum, f"{path}: enumeration differs"
        assert doc[path][3], f"{path}: no meaning written"


def test_document_shared_shapes_match_defs():
    rows = {cells[0].strip("`"): cells for cells in _doc_sections()["defs"]}
    defs = schemas.schema("defs")["$defs"]
    assert set(rows) == set(defs)
    for name, definition in defs.items():
        if "enum" in definition:
            assert _enum_in_cell(rows[name][1]) == {str(v) for v in definition["enum"] if v is not None}, name


# ------------------------------------------------------------------------------------------
# the fast checker agrees with jsonschema


def _examples_by_schema() -> list[tuple[str, object]]:
    """(schema, object) for every example object in reference/examples."""
    out: list[tuple[str, object]] = []
    for p in _single_examples():
        out.append((p.name.split(".")[0], json.loads(p.read_text())))
    out.append(("run", json.loads((EXAMPLES / "run" / "run.json").read_text())))
    out.append(("set", json.loads((EXAMPLES / "set" / "set.json").read_text())))
    for line in (EXAMPLES / "run" / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        out.append((event["kind"], event))
    for file, name in (("cases.jsonl", "case"), ("judge-regressions.jsonl", "judge_regression"),
                       ("judge-calibration.jsonl", "judge_calibration")):
        for line in (EXAMPLES / "set" / file).read_text().splitlines():
            obj = json.loads(line)
            out.append((name, obj))
            if name == "case":
                out.append(("golden", obj["golden"]))
    return out


_tricky = (st.sampled_from([None, True, False, 0, 1, 1.0, -1, 11, 0.5, 2.5, "", "x", "match", "unknown",
                            "no_match", "baseline", "scalar", "judge_error: x", "measure:a:b",
                            "2026-11-30T09:00:00Z", "0" * 64, "A_B", [], {}, ["x"], [[]], [{}]])
           | _json)


def _mutate(data, value):
    """Replace, delete or add one key somewhere in a JSON value, Hypothesis choosing where and how."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        action = data.draw(st.sampled_from(["replace", "delete", "descend", "add"]))
        out = dict(value)
        if action == "replace":
            out[key] = data.draw(_tricky)
        elif action == "delete":
            del out[key]
        elif action == "descend":
            out[key] = _mutate(data, value[key])
        else:
            out[data.draw(st.sampled_from(["extra", "qid", "verdict", "reason", "kind", "round"]))] = (
                data.draw(_tricky))
        return out
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        out = list(value)
        out[i] = _mutate(data, value[i]) if data.draw(st.booleans()) else data.draw(_tricky)
        return out
    return data.draw(_tricky) if data.draw(st.booleans()) else value


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_checker_agrees_with_jsonschema_on_mutated_examples(data):
    name, base = data.draw(st.sampled_from(_examples_by_schema()))
    obj = base
    for _ in range(data.draw(st.integers(1, 3))):
        obj = _mutate(data, obj)
    assert schemas._fast(name)(obj) == schemas._validator(name).is_valid(obj)


@pytest.mark.parametrize("name", sorted(REQUIRED_SCHEMAS))
def test_every_schema_has_a_fast_checker(name):
    assert schemas._fast(name) is not None


def test_a_value_of_the_wrong_type_is_reported_once_with_the_narrowest_type():
    # The golden's general shape allows object or array; a scalar golden allows only an object.
    case = {"qid": "q1", "question": "How many?", "golden": {"kind": "scalar", "value": 5}}
    assert [str(p) for p in schemas.validate("case", case)] == [
        "golden.value: 5 is not of type 'object'"]
