"""Set loading: set.json, cases.jsonl, goldens; errors name file and line, unknown fields warn."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from fuzz_support import (
    FUZZ,
    damaged_bytes,
    mutated_lines,
    mutated_set_file,
    read_lines,
    reads_or_refuses,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from malloy_evals.core.errors import InputError
from malloy_evals.core.jsonl import read_objects
from malloy_evals.sets.eval_set import (
    check_set,
    golden_value,
    load_set,
    question_sha,
    rewrite_jsonl,
)

SET_JSON = {"name": "demo", "datasetVersion": 2, "targetPackage": "demo",
            "targetModelPath": "demo.malloy"}


def case(qid: str = "q1", **extra) -> dict:
    return {"qid": qid, "question": f"What is {qid}?", **extra}


def write_set(root: Path, cases: list, config: dict | None = None, raw_cases: str | None = None) -> Path:
    """A set folder with the given set.json and cases (objects, or raw text for broken lines)."""
    d = root / "set"
    d.mkdir(exist_ok=True)
    (d / "set.json").write_text(json.dumps(SET_JSON if config is None else config))
    text = raw_cases if raw_cases is not None else "".join(json.dumps(c) + "\n" for c in cases)
    (d / "cases.jsonl").write_text(text)
    return d


def test_valid_set_loads_cases_in_file_order(tmp_path):
    d = write_set(tmp_path, [case("b"), case("a", split="holdout", tags=["x"])])
    es = load_set(d)
    assert list(es.cases) == ["b", "a"]
    assert es.case("a").split == "holdout" and es.case("b").split == "dev"
    assert es.case("a").tags == ["x"] and es.case("a").line == 2
    assert (es.name, es.dataset_version, es.environment) == ("demo", 2, "samples")
    assert es.model_file == d / "model" / "demo.malloy"
    assert es.truth_dir == d / "truth" and es.recordings_dir("judge") == d / "recordings" / "judge"


def test_dataset_sha_is_sha256_of_set_json_then_cases(tmp_path):
    d = write_set(tmp_path, [case()])
    expected = hashlib.sha256((d / "set.json").read_bytes() + (d / "cases.jsonl").read_bytes())
    assert load_set(d).dataset_sha == expected.hexdigest()


def test_question_sha_is_first_16_hex_of_sha256(tmp_path):
    d = write_set(tmp_path, [case()])
    c = load_set(d).case("q1")
    assert c.question_sha == hashlib.sha256(b"What is q1?").hexdigest()[:16] == question_sha("What is q1?")


def test_missing_golden_status_reads_as_verified(tmp_path):
    d = write_set(tmp_path, [case(golden={"kind": "scalar", "value": {"n": 1}}), case("q2")])
    es = load_set(d)
    assert es.case("q1").golden_status == "verified"
    assert es.case("q2").golden is None and es.case("q2").golden_status is None


def test_case_properties_read_the_golden(tmp_path):
    golden = {"kind": "rows", "status": "provisional", "value": [{"a": 1}], "mustNotUse": ["x.y"],
              "rubric": "WRONG: z", "mustState": ["say it"]}
    d = write_set(tmp_path, [case(golden=golden, goldenRevision=4, coverage="derivable",
                                  expectedEntities={"required": ["measure:orders:revenue"]})])
    c = load_set(d).case("q1")
    assert (c.golden_kind, c.golden_status, c.golden_revision) == ("rows", "provisional", 4)
    assert c.must_not_use == ["x.y"] and c.rubric == "WRONG: z" and c.coverage == "derivable"
    assert c.expected_entities == {"required": ["measure:orders:revenue"], "requiredAnyOf": [],
                                   "acceptable": []}


def test_bad_golden_kind_raises_naming_file_line_and_field(tmp_path):
    d = write_set(tmp_path, [case(), case("q2", golden={"kind": "scalr"})])
    with pytest.raises(InputError) as info:
        load_set(d)
    assert str(info.value).startswith(f"{d / 'cases.jsonl'}:2: golden.kind: 'scalr' is not one of")


def test_unknown_fields_are_warnings_and_the_set_loads(tmp_path):
    d = write_set(tmp_path, [case(state="selected", golden={"kind": "scalar", "value": {"n": 1},
                                                             "receipts": []})],
                  config={**SET_JSON, "notes": {"sizing": "x"}})
    es = load_set(d)
    assert es.warnings == ["set.json: notes: unknown field", "cases.jsonl:1: golden.receipts: unknown field",
                           "cases.jsonl:1: state: unknown field"]


def test_duplicate_qid_ignoring_case_is_an_error_naming_both_lines(tmp_path):
    d = write_set(tmp_path, [case("Q1"), case("x"), case("q1")])
    report = check_set(d)
    assert report.errors == [("cases.jsonl:3: qid: 'q1' repeats 'Q1' of line 1 (qids are unique "
                              "ignoring case: they name folders)")]


@pytest.mark.parametrize("qid", ["../../x", "a/b", ".hidden", "", "q 1"])
def test_unsafe_qid_is_an_error(tmp_path, qid):
    report = check_set(write_set(tmp_path, [case(qid)]))
    assert len(report.errors) == 1 and report.errors[0].startswith("cases.jsonl:1: qid:")


def test_qid_with_trailing_newline_is_an_error(tmp_path):
    # JSON Schema's `$` lets a trailing newline through; a qid names a folder, so it must not.
    report = check_set(write_set(tmp_path, [case("q1\n")]))
    assert report.errors == ["cases.jsonl:1: qid: 'q1\\n' is not a safe id"]


def test_bad_entity_ids_and_empty_any_of_group_are_errors(tmp_path):
    ee = {"required": ["measure:revenue"], "requiredAnyOf": [["view:orders:by_month"], []]}
    report = check_set(write_set(tmp_path, [case(expectedEntities=ee)]))
    assert len(report.errors) == 2
    assert any(e.startswith("cases.jsonl:1: expectedEntities.required[0]: 'measure:revenue'")
               for e in report.errors)
    assert "cases.jsonl:1: expectedEntities.requiredAnyOf[1]: [] should be non-empty" in report.errors


def test_unknown_entity_kind_is_an_error(tmp_path):
    report = check_set(write_set(tmp_path, [case(expectedEntities={"required": ["field:orders:x"]})]))
    assert report.errors and "expectedEntities.required[0]" in report.errors[0]


def test_scalar_value_must_be_an_object(tmp_path):
    report = check_set(write_set(tmp_path, [case(golden={"kind": "scalar", "value": [3]})]))
    assert report.errors == ["cases.jsonl:1: golden.value: [3] is not of type 'object'"]


def test_unanswerable_golden_with_null_value_and_null_query_loads_clean(tmp_path):
    # As the public loop writes them: `"value": null` and `"canonicalQuery": null`.
    golden = {"status": "provisional", "kind": "unanswerable", "value": None,
              "canonicalQuery": None, "rubric": "PREFERRED: declines, naming the missing data."}
    d = write_set(tmp_path, [case(golden=golden)])
    report = check_set(d)
    assert (report.errors, report.warnings) == ([], [])
    es = load_set(d)
    assert golden_value(es.case("q1"), d) is None
    assert es.case("q1").canonical_query is None


def test_null_value_on_a_scalar_golden_is_still_an_error(tmp_path):
    report = check_set(write_set(tmp_path, [case(golden={"kind": "scalar", "value": None})]))
    assert report.errors == ["cases.jsonl:1: golden.value: null is not of type 'object'"]  # text says null, never None


def test_public_golden_fields_are_schema_fields_the_case_reads(tmp_path):
    golden = {"kind": "rows", "status": "provisional", "ordered": True, "clarifyOk": True,
              "value": [{"category": "ferns", "rank": 1}],
              "alternates": [{"assumption": "by units", "value": None, "accept": True,
                              "lever": "field_doc", "note": "labelled"}],
              "verifiedBy": "authored_query", "verifiedAt": None}
    d = write_set(tmp_path, [case(golden=golden)])
    assert (check_set(d).errors, check_set(d).warnings) == ([], [])
    c = load_set(d).case("q1")
    assert (c.ordered, c.clarify_ok, c.clarify_preferred) == (True, True, False)
    assert c.alternates[0]["assumption"] == "by units"


def test_a_set_in_the_public_loops_format_validates_as_published_with_warnings_only():
    report = check_set(Path(__file__).resolve().parent / "fixtures" / "public_loop" / "set")
    assert report.errors == [] and report.exit_code == 0 and report.count == 5
    assert "cases.jsonl:1: golden.receipts: unknown field" in report.warnings


def test_clarify_preferred_implies_clarify_ok(tmp_path):
    d = write_set(tmp_path, [case(golden={"kind": "criteria", "clarifyPreferred": True})])
    c = load_set(d).case("q1")
    assert (c.clarify_ok, c.clarify_preferred) == (True, True)


def test_question_sha_that_disagrees_with_the_question_is_an_error(tmp_path):
    report = check_set(write_set(tmp_path, [case(questionSha="0" * 16)]))
    assert report.errors and report.errors[0].startswith("cases.jsonl:1: questionSha:")


def test_question_sha_that_agrees_is_accepted(tmp_path):
    c = case()
    c["questionSha"] = question_sha(c["question"])
    assert check_set(write_set(tmp_path, [c])).errors == []


def test_golden_rows_read_from_csv_inside_the_set(tmp_path):
    d = write_set(tmp_path, [case(golden={"kind": "rows", "path": "gold/q1.csv"})])
    (d / "gold").mkdir()
    (d / "gold" / "q1.csv").write_text("name,n,share,zip\nA,3,0.5,007\nB,,-1.25e2,10\n")
    rows = golden_value(load_set(d).case("q1"), d)
    assert rows == [{"name": "A", "n": 3, "share": 0.5, "zip": "007"},
                    {"name": "B", "n": None, "share": -125.0, "zip": 10}]


def test_golden_rows_read_from_json(tmp_path):
    d = write_set(tmp_path, [case(golden={"kind": "rows", "path": "q1.json"})])
    (d / "q1.json").write_text('[{"a": 1}]')
    assert golden_value(load_set(d).case("q1"), d) == [{"a": 1}]


def test_golden_value_wins_over_path(tmp_path):
    d = write_set(tmp_path, [case(golden={"kind": "rows", "value": [{"a": 2}], "path": "q1.json"})])
    (d / "q1.json").write_text('[{"a": 1}]')
    assert golden_value(load_set(d).case("q1"), d) == [{"a": 2}]


@pytest.mark.parametrize("path, message", [
    ("../outside.csv", "outside the set folder"),
    ("/etc/hosts", "must be relative"),
    ("gold/none.csv", "does not exist"),
    ("gold/q1.txt", "must be a .csv or .json file"),
])
def test_bad_golden_path_is_an_error_naming_the_line(tmp_path, path, message):
    (tmp_path / "outside.csv").write_text("a\n1\n")
    d = write_set(tmp_path, [case(), case("q2", golden={"kind": "rows", "path": path})])
    (d / "gold").mkdir()
    (d / "gold" / "q1.txt").write_text("a\n")
    report = check_set(d)
    assert len(report.errors) == 1
    assert report.errors[0].startswith("cases.jsonl:2: golden.path:") and message in report.errors[0]


@pytest.mark.parametrize("path", ["a\x00b.csv", "x" * 5000 + ".csv"], ids=["nul-byte", "too-long"])
def test_golden_path_the_os_cannot_take_is_an_error_not_a_crash(tmp_path, path):
    report = check_set(write_set(tmp_path, [case(golden={"kind": "rows", "path": path})]))
    assert report.exit_code == 1 and report.errors[0].startswith("cases.jsonl:1: golden.path:")


def test_golden_json_that_is_not_rows_is_an_error(tmp_path):
    d = write_set(tmp_path, [case(golden={"kind": "rows", "path": "q1.json"})])
    (d / "q1.json").write_text('{"a": 1}')
    assert "JSON array of row objects" in check_set(d).errors[0]


def test_broken_json_line_is_an_error_naming_its_line(tmp_path):
    d = write_set(tmp_path, [], raw_cases='{"qid": "q1", "question": "a"}\n\n{"qid": "q2",\n')
    report = check_set(d)
    assert [e.split(":")[:2] for e in report.errors] == [["cases.jsonl", "3"]]
    assert report.count == 1 and report.counted == "cases"


def test_missing_set_json_and_required_fields_are_errors(tmp_path):
    d = write_set(tmp_path, [case()], config={"name": "x"})
    report = check_set(d)
    assert "set.json: datasetVersion: required field missing" in report.errors
    (d / "set.json").unlink()
    assert check_set(d).errors == ["set.json: missing"]


def test_unreadable_folder_is_exit_3(tmp_path):
    report = check_set(tmp_path / "nope")
    assert report.exit_code == 3 and not report.readable
    with pytest.raises(InputError, match="not a folder"):
        load_set(tmp_path / "nope")


def test_unreadable_cases_file_is_exit_3_naming_the_file(tmp_path):
    d = write_set(tmp_path, [case()])
    (d / "cases.jsonl").unlink()
    (d / "cases.jsonl").mkdir()  # a file that exists and cannot be read as one
    report = check_set(d)
    assert report.exit_code == 3 and not report.readable
    assert report.errors[0].startswith(f"{d / 'cases.jsonl'}: cannot be read")


def test_unknown_case_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="no case with qid 'zz'"):
        load_set(write_set(tmp_path, [case()])).case("zz")


def test_fixture_files_are_checked_by_check_set(tmp_path):
    d = write_set(tmp_path, [case()])
    (d / "judge-regressions.jsonl").write_text(
        json.dumps({"fixtureId": "q1.a", "qid": "q1", "prediction": {"answer_text": "3",
                    "final_query": None}, "verdict": "yes"}) + "\n"
        + json.dumps({"fixtureId": "q9.b", "qid": "q9", "prediction": {"answer_text": "3",
                      "final_query": None}, "verdict": "match"}) + "\n")
    report = check_set(d)
    assert report.errors[0].startswith("judge-regressions.jsonl:1: verdict: 'yes'")
    assert report.warnings == ["judge-regressions.jsonl:2: qid: 'q9' is not a case of cases.jsonl"]


def _nest(inner: st.SearchStrategy) -> st.SearchStrategy:
    """Lists and case-shaped objects of `inner` (a named function: hypothesis cannot read the
    source of a multi-line lambda and warns that it does not recurse)."""
    keys = st.sampled_from(["qid", "question", "golden", "kind", "path", "value",
                            "expectedEntities", "x"])
    return st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12), _nest,
                     max_leaves=15)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(set_bytes=st.binary(max_size=300), case_bytes=st.binary(max_size=600))
def test_arbitrary_bytes_give_a_report_or_input_error(tmp_path_factory, set_bytes, case_bytes):
    d = tmp_path_factory.mktemp("s")
    (d / "set.json").write_bytes(set_bytes)
    (d / "cases.jsonl").write_bytes(case_bytes)
    report = check_set(d)
    assert report.exit_code in (0, 1)
    try:
        load_set(d)
    except InputError:
        assert report.errors


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(config=_json, cases=st.lists(_json, max_size=5))
def test_arbitrary_json_gives_a_report_or_input_error(tmp_path_factory, config, cases):
    d = tmp_path_factory.mktemp("s")
    (d / "set.json").write_text(json.dumps(config))
    (d / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    report = check_set(d)
    try:
        es = load_set(d)
    except InputError:
        assert report.errors
    else:
        assert report.errors == []
        for c in es.cases.values():
            golden_value(c, d) if c.golden and "path" not in c.golden else None



# ---------------------------------------------------------------- hostile input (fuzzed)
# Each set file of the sample set, mutated: read, or refused in one line naming the file.

BOOKSHOP = Path(__file__).resolve().parents[1] / "evals" / "bookshop"


def _set_copy(root: Path) -> Path:
    d = root / "set"
    d.mkdir()
    for name in ("set.json", "cases.jsonl", "judge-calibration.jsonl", "judge-regressions.jsonl"):
        (d / name).write_bytes((BOOKSHOP / name).read_bytes())
    shutil.copytree(BOOKSHOP / "goldens", d / "goldens")
    return d


@FUZZ
@given(data=st.data())
def test_mutated_set_files_are_read_or_refused_in_one_line(tmp_path_factory, data):
    d = _set_copy(tmp_path_factory.mktemp("s"))
    name = mutated_set_file(data, BOOKSHOP, d)
    # set.json decides how cases.jsonl is read: a refusal may name either.
    reads_or_refuses(lambda: load_set(d), d / name, d / "set.json", d / "cases.jsonl")


@FUZZ
@given(data=st.data())
def test_mutated_judge_fixture_files_are_read_or_refused_in_one_line(tmp_path_factory, data):
    d = _set_copy(tmp_path_factory.mktemp("s"))
    name = data.draw(st.sampled_from(["judge-calibration.jsonl", "judge-regressions.jsonl"]))
    raw = data.draw(mutated_lines(read_lines(BOOKSHOP / name))).encode("utf-8", "backslashreplace")
    (d / name).write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    reads_or_refuses(lambda: read_objects(d / name), d / name)


def test_model_dir_stands_in_for_model_and_keeps_cases(tmp_path):
    d = write_set(tmp_path, [case("a")])
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "demo.malloy").write_text("// candidate\n")
    es = load_set(d, cand)
    assert es.model_dir == cand.resolve() and es.model_file == cand.resolve() / "demo.malloy"
    assert list(es.cases) == ["a"] and es.dataset_sha == load_set(d).dataset_sha
    assert es.package_spec == f"samples/demo={cand.resolve()}"
    assert load_set(d).model_dir == d / "model"


def test_model_dir_without_the_target_model_file_is_an_input_error(tmp_path):
    d = write_set(tmp_path, [case("a")])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="has no demo.malloy"):
        load_set(d, empty)


def test_rewrite_jsonl_changes_only_the_named_lines_keeping_style_and_line_endings(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"a":1}\r\n{"b": 2, "c": "\\u00e9"}\r\n{"d":4}')  # CRLF, no final newline
    rewrite_jsonl(path, replace={2: {"b": 3, "c": "é"}, 3: None}, append=[{"e": 5}])
    assert path.read_bytes() == (b'{"a":1}\r\n{"b": 3, "c": "\\u00e9"}\r\n{"e":5}\n')
