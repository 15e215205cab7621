"""import_set: a set in the public loop's format, made a kit set with every field kept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_support import FUZZ, mutated_set_file, reads_or_refuses
from hypothesis import given
from hypothesis import strategies as st
from malloy_evals.core.errors import InputError
from malloy_evals.sets import importer, published_links
from malloy_evals.sets.eval_set import check_set, load_set
from malloy_evals.sets.goldens import verify_goldens
from malloy_evals.sets.promote import promote_golden

KIT = Path(__file__).resolve().parents[1]
PUBLIC_SET = KIT / "tests" / "fixtures" / "public_loop" / "set"
SCRIPT = KIT / "skills" / "eval-answer" / "scripts" / "import_set.py"


def cases(set_dir: Path) -> dict[str, dict]:
    text = (set_dir / "cases.jsonl").read_text(encoding="utf-8-sig")
    return {c["qid"]: c for c in map(json.loads, filter(str.strip, text.splitlines()))}


@pytest.fixture
def imported(tmp_path):
    report = importer.import_set(PUBLIC_SET, tmp_path / "nursery")
    return report, tmp_path / "nursery"


def test_the_import_validates_and_keeps_every_status_as_published(imported):
    report, out = imported
    assert report.exit_code == 0 and report.errors == [] and check_set(out).errors == []
    assert report.statuses == {"provisional": 5}
    assert all(c["golden"]["status"] == "provisional" for c in cases(out).values())
    assert report.kinds == {"scalar": 2, "rows": 1, "unanswerable": 1, "criteria": 1}


def test_model_truth_data_and_other_files_are_copied_along(imported):
    report, out = imported
    assert report.copied == ["README.md", "cases.jsonl", "data/", "judge-regressions.jsonl",
                             "model/", "set.json", "truth/"]
    assert (out / "data" / "sales.csv").read_bytes() == (PUBLIC_SET / "data" / "sales.csv").read_bytes()
    assert report.missing == []
    assert json.loads((out / importer.REPORT_FILE).read_text())["cases"] == 5


def test_unanswerable_golden_keeps_value_null_and_canonical_query_null(imported):
    _, out = imported
    golden = cases(out)["nur_frost_losses"]["golden"]
    assert "value" in golden and golden["value"] is None
    assert "canonicalQuery" in golden and golden["canonicalQuery"] is None
    assert load_set(out).case("nur_frost_losses").golden_kind == "unanswerable"


def test_alternates_clarify_flags_and_ranked_rows_reach_the_golden(imported):
    report, out = imported
    es = load_set(out)
    revenue = es.case("nur_revenue_h1_2024")
    assert [a["accept"] for a in revenue.alternates] == [True, False]
    assert es.case("nur_top_categories").clarify_ok and es.case("nur_top_categories").ordered
    saturday = es.case("nur_busiest_saturday")
    assert saturday.clarify_preferred and "clarifyPreferred" not in saturday.raw
    assert "nur_busiest_saturday: clarifyPreferred moved onto the golden (where the kit reads it)" \
        in report.mapped
    assert any(c.startswith("nur_top_categories: rows carry a 'rank' column")
               for c in report.judgement_calls)


def test_fields_without_a_kit_counterpart_are_kept_verbatim_and_listed(imported):
    report, out = imported
    source = cases(PUBLIC_SET)["nur_revenue_h1_2024"]
    kept = cases(out)["nur_revenue_h1_2024"]
    for key in ("executions", "source", "state", "shapes", "modelQuery"):
        assert kept[key] == source[key]
    assert kept["golden"]["receipts"] == source["golden"]["receipts"]
    assert report.kept_verbatim["cases.jsonl"]["golden.receipts"] == 1
    assert report.kept_verbatim["set.json"] == {"notes": 1, "truthTableRewrite": 1}
    config = json.loads((out / "set.json").read_text())
    assert config["truthModelPath"] == "truth.malloy" and "truthModel" not in config
    assert config["notes"] == json.loads((PUBLIC_SET / "set.json").read_text())["notes"]


def test_cases_the_kit_reads_as_written_keep_their_bytes(imported):
    _, out = imported
    source = (PUBLIC_SET / "cases.jsonl").read_bytes().split(b"\n")
    written = (out / "cases.jsonl").read_bytes().split(b"\n")
    changed = [i + 1 for i, (a, b) in enumerate(zip(source, written, strict=True)) if a != b]
    assert changed == [2, 4]  # the ranked rows golden and the moved clarifyPreferred only


@pytest.mark.parametrize("golden, tags, kind", [
    pytest.param({"value": [{"a": 1}]}, [], "rows", id="rows"),
    pytest.param({"value": {"n": 3}}, [], "scalar", id="scalar"),
    pytest.param({"value": None}, ["refusal-expected"], "unanswerable", id="refusal"),
    pytest.param({"rubric": "REQUIRED: x"}, [], "criteria", id="criteria"),
])
def test_a_golden_without_a_kind_gets_one_as_a_judgement_call(golden, tags, kind):
    case, _, calls = importer.map_case({"qid": "q", "question": "?", "tags": tags, "golden": golden})
    assert case["golden"]["kind"] == kind and calls[0].startswith("q: the golden names no kind")


def test_an_explicit_ranked_flag_becomes_ordered():
    case, mapped, _ = importer.map_case({"qid": "q", "golden": {"kind": "rows", "ranked": True,
                                                                "value": [{"a": 1}]}})
    assert case["golden"]["ordered"] is True and mapped == ["q: golden.ranked -> ordered"]


def test_an_occupied_out_folder_and_a_source_without_cases_are_refused(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("")
    with pytest.raises(InputError, match="exists and is not an empty folder"):
        importer.import_set(PUBLIC_SET, tmp_path / "busy")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "set.json").write_text("{}")
    with pytest.raises(InputError, match="cases.jsonl: missing"):
        importer.import_set(tmp_path / "half", tmp_path / "o")


def test_links_in_the_source_are_not_followed(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(PUBLIC_SET, src)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the set")
    os.symlink(secret, src / "notes.txt")
    report = importer.import_set(src, tmp_path / "out")
    assert report.skipped_links == ["notes.txt"] and not (tmp_path / "out" / "notes.txt").exists()


# Regression (hostile input): a linked folder in the source set was copied through the link
# (files from outside it became the set's), and a pipe named like a data file made the copy
# wait forever on it.
def test_linked_folders_and_pipes_in_the_source_are_not_copied(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(PUBLIC_SET, src)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private.csv").write_text("a\n1\n")
    os.symlink(elsewhere, src / "data" / "more")
    os.mkfifo(src / "data" / "stream.csv")
    report = importer.import_set(src, tmp_path / "out")
    assert "data/more" in report.skipped_links
    assert not (tmp_path / "out" / "data" / "more").exists()
    assert not (tmp_path / "out" / "data" / "stream.csv").exists()
    assert any("data/stream.csv: not a plain file" in c for c in report.judgement_calls)
    assert json.loads((tmp_path / "out" / "import-report.json").read_text())["skipped_links"] == (
        report.skipped_links)


# ---------------------------------------------------------------- hostile input (fuzzed)
# The public set's set.json and cases.jsonl, mutated: imported, or refused in one line naming
# the file, never a traceback.

@FUZZ
@given(data=st.data())
def test_mutated_public_set_is_imported_or_refused_in_one_line(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("imp")
    src = root / "src"
    shutil.copytree(PUBLIC_SET, src)
    name = mutated_set_file(data, PUBLIC_SET, src)
    report = reads_or_refuses(lambda: importer.import_set(src, root / "out"), src / name,
                              root / "out" / name, root / "out" / "set.json")
    if report is not None:
        importer.render_report(report)
        assert json.loads((root / "out" / "import-report.json").read_text())["cases"] == report.cases


def test_a_bom_and_crlf_endings_do_not_hide_the_first_case_from_the_import(tmp_path):
    # validate_set reads a cases.jsonl that opens with a byte-order mark and ends its lines with
    # CRLF; the import reads it the same way, so the first case is mapped and counted too.
    src = tmp_path / "src"
    shutil.copytree(PUBLIC_SET, src)
    lines = (src / "cases.jsonl").read_text().splitlines()
    (src / "cases.jsonl").write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode())
    report = importer.import_set(src, tmp_path / "out")
    assert report.cases == 5 and report.errors == []
    assert report.kept_verbatim["cases.jsonl"]["golden.receipts"] == 1  # of the first case
    assert check_set(tmp_path / "out").count == 5


def test_the_script_prints_one_json_document(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--from", str(PUBLIC_SET), "--out",
                           str(tmp_path / "o"), "--json"], capture_output=True, text=True, cwd=KIT, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["exit_code"] == 0


def test_import_then_promote_then_verify_is_the_path_to_a_scorable_set(imported, needs_node):
    _, out = imported
    promoted = promote_golden(out, all_cases=True)
    assert sorted(promoted.promoted) == ["nur_avg_line", "nur_revenue_h1_2024", "nur_top_categories"]
    assert {p.qid for p in promoted.promotions if p.outcome == "skipped"} == {
        "nur_frost_losses", "nur_busiest_saturday"}
    assert verify_goldens(out).exit_code == 0
    attested = promote_golden(out, ["nur_frost_losses"], attest=True, by="Dana Reyes")
    assert attested.promoted == ["nur_frost_losses"]
    assert load_set(out).case("nur_frost_losses").golden_status == "verified"


def test_a_missing_truth_package_is_reported_with_the_tables_its_queries_read(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(PUBLIC_SET, src, ignore=shutil.ignore_patterns("truth"))
    report = importer.import_set(src, tmp_path / "out")
    [truth] = [m for m in report.missing if m.startswith("truth/")]
    assert "read ../data/sales.csv relative to it" in truth and "truth/truth.malloy" in truth
    assert report.exit_code == 0  # missing folders are for scoring, not for validating the set


# ---------------------------------------------------------------- a set laid out as published
# The public ecommerce set reaches its tables through links: model/data and truth/data point at
# the set's data/, and data/ itself may point into the package folder beside the set. Its ranked
# goldens carry a rank column their canonical queries never return.

def _published(root: Path, *, data_outside: bool) -> Path:
    """A repository holding the nursery package and, under evals/, its set as published."""
    package = root / "repo" / "nursery"
    shutil.copytree(PUBLIC_SET / "model", package)
    shutil.copytree(PUBLIC_SET / "data", package / "data")
    src = root / "repo" / "evals" / "nursery"
    shutil.copytree(PUBLIC_SET, src, ignore=shutil.ignore_patterns("data"))
    if data_outside:
        os.symlink("../../nursery/data", src / "data")
    else:
        shutil.copytree(PUBLIC_SET / "data", src / "data")
    for pkg, name in (("model", "nursery.malloy"), ("truth", "truth.malloy")):
        os.symlink("../data", src / pkg / "data")
        text = (src / pkg / name).read_text()
        (src / pkg / name).write_text(text.replace("'../data/", "'data/"))
    os.symlink(package / "data", src / "package-data")
    lines = []
    for line in (src / "cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        query = (case.get("golden") or {}).get("canonicalQuery")
        if isinstance(query, str):
            query = query.replace("'../data/", "'data/").replace(" calculate: rank is rank();", "")
            case["golden"]["canonicalQuery"] = query
        lines.append(json.dumps(case))
    (src / "cases.jsonl").write_text("\n".join(lines) + "\n")
    return src


def test_a_published_layout_imports_with_its_links_and_verifies_with_no_hand_step(tmp_path, needs_node):
    src = _published(tmp_path, data_outside=False)
    out = tmp_path / "imported"
    report = importer.import_set(src, out)
    by_path = {o.path: o for o in report.links}
    assert set(by_path) == {"model/data", "truth/data", "package-data"}
    for inside in ("model/data", "truth/data"):
        assert by_path[inside].action == published_links.REMADE
        assert os.readlink(out / inside) == "../data"
        assert (out / inside / "sales.csv").resolve() == (out / "data" / "sales.csv").resolve()
    assert by_path["package-data"].action == published_links.LEFT_OUT
    assert not (out / "package-data").exists() and report.skipped_links == ["package-data"]
    assert any(m.startswith("package-data: published as a link") for m in report.missing)
    # The ranked golden: its rank column is the order, not a compared column.
    golden = cases(out)["nur_top_categories"]["golden"]
    assert golden["ordered"] is True and all("rank" not in row for row in golden["value"])
    assert "dropped from the compared columns" in report.ranked["nur_top_categories"]
    text = importer.render_report(report)
    assert "model/data -> ../data: re-made inside the imported set" in text
    assert "package-data -> " in text and "left out" in text
    written = json.loads((out / importer.REPORT_FILE).read_text())
    assert {entry["path"]: entry["action"] for entry in written["links"]} == {
        p: o.action for p, o in by_path.items()}
    # No hand step: the goldens re-derive from the imported truth package as they stand.
    checked = verify_goldens(out)
    assert checked.exit_code == 0, [c.problems for c in checked.checks]
    assert [c.status for c in checked.checks if c.qid == "nur_top_categories"] == ["ok"]


def test_a_data_link_leaving_the_set_is_copied_only_when_asked(tmp_path, needs_node):
    src = _published(tmp_path, data_outside=True)
    left = importer.import_set(src, tmp_path / "left")
    assert {o.path: o.action for o in left.links}["data"] == published_links.LEFT_OUT
    assert any(m.startswith("data: published as a link") and "--copy-linked-data" in m
               for m in left.missing)
    assert verify_goldens(tmp_path / "left").exit_code == 3  # the tables are not there: unmeasured
    done = subprocess.run([sys.executable, str(SCRIPT), "--from", str(src), "--out",
                           str(tmp_path / "copied"), "--copy-linked-data"],
                          capture_output=True, text=True, cwd=KIT, check=False)
    assert done.returncode == 0, done.stderr
    assert "data -> ../../nursery/data: copied" in done.stdout
    copied = tmp_path / "copied"
    assert (copied / "data").is_dir() and not (copied / "data").is_symlink()
    assert os.readlink(copied / "truth" / "data") == "../data"
    assert verify_goldens(copied).exit_code == 0


def test_a_link_to_a_link_inside_the_set_and_a_dangling_link(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(PUBLIC_SET, src)
    os.symlink("model/data-alias", src / "second")
    os.symlink("../data", src / "model" / "data-alias")
    os.symlink(str(src / "data"), src / "absolute")   # absolute, but inside the set
    os.symlink("nowhere", src / "gone")
    report = importer.import_set(src, tmp_path / "out")
    actions = {o.path: o.action for o in report.links}
    assert actions == {"second": published_links.REMADE, "model/data-alias": published_links.REMADE,
                       "absolute": published_links.REMADE, "gone": published_links.DANGLING}
    out = tmp_path / "out"
    assert os.readlink(out / "absolute") == "data"   # made relative: it reaches the copy
    assert (out / "second" / "sales.csv").resolve() == (out / "data" / "sales.csv").resolve()


# ---------------------------------------------------------------- imported, then validated
# A set as it is published and as people write into it: the package beside the set with its
# tables, the set's model/ and truth/ reaching them through links (inside the set, and one
# leaving it), ranked goldens, and cases a person added by hand in the published shape with
# their quirks (nulls for what they did not fill in, fields on the case instead of the golden, no
# kind, no golden yet, prose and backticked must-not-use entries, a BOM, CRLF, a blank line).
# Imported with import_set.py and checked with validate_set.py, it is valid, and every warning
# is a field the kit keeps verbatim.

HAND_WRITTEN = [
    {"qid": "nur_units_q2", "question": "How many plants did we sell in the second quarter?",
     "split": None, "tags": None, "coverage": "covered", "coverageNote": None,
     "golden": {"status": "provisional", "kind": "scalar", "value": {"units_sold": 11},
                "alternates": None, "clarifyOk": None, "clarifyPreferred": None,
                "ordered": None, "path": None, "mustState": None,
                "mustNotUse": ["sale_count", "sale_count as units", "`qty`"],
                "mustNotUseAllowedIn": {"`qty`": ["units_sold"]},
                "canonicalQuery": "run: duckdb.table('data/sales.csv') -> { where: status = "
                                  "'complete'; aggregate: units_sold is qty.sum() }",
                "verifiedBy": None},
     "goldenRevision": None,
     "expectedEntities": {"required": ["measure:sales:units_sold"], "requiredAnyOf": None,
                          "acceptable": ["measure:sales:units_sold", "source:sales:sales"]}},
    {"qid": "nur_category_lines", "question": "How many sale lines did each category have?",
     "clarifyOk": True, "rubric": "Counts lines, not units.",
     "alternates": [{"assumption": "units instead of lines", "value": None, "accept": False}],
     "golden": {"status": "provisional", "kind": None,
                "value": [{"category": "ferns", "lines": 4, "position": 1},
                          {"category": "succulents", "lines": 3, "position": 2},
                          {"category": "trees", "lines": 3, "position": 2}],
                "canonicalQuery": "run: duckdb.table('data/sales.csv') -> { group_by: category; "
                                  "aggregate: lines is count(); order_by: lines desc }"},
     "expectedEntities": {"required": ["view:sales:by_category"]}},
    {"qid": "nur_top_plant", "question": "Which plant sold best?",
     "golden": {"kind": "rows", "ranked": True, "value": [{"plant": "Boston fern"}],
                "canonicalQuery": "run: duckdb.table('data/sales.csv') -> { group_by: plant; "
                                  "aggregate: u is qty.sum(); order_by: u desc; limit: 1 } -> "
                                  "{ select: plant }"}},
    {"qid": "nur_staff_hours", "question": "How many hours did the staff work in May?",
     "golden": None, "notes": "no golden yet: the data has no rota"},
]


def _published_with_hand_cases(root: Path) -> Path:
    """The nursery as published (`_published`, its tables reached through a link leaving the
    set), its set.json as the public loop writes it, and the hand-written cases appended."""
    src = _published(root, data_outside=True)
    config = json.loads((src / "set.json").read_text())
    del config["truthModel"]  # the public loop's default, as the ecommerce set leaves it out
    config["truthTableRewrite"] = True
    (src / "set.json").write_text(json.dumps(config, indent=2))
    (src / "CALIBRATION.md").write_text("No current band.\n")
    (src / "candidates-time.jsonl").write_text('{"question": "When do ferns sell?"}\n')
    lines = (src / "cases.jsonl").read_text().splitlines()
    lines += [json.dumps(c) for c in HAND_WRITTEN]
    lines.insert(3, "")
    (src / "cases.jsonl").write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode())
    return src


def _script(script: str, *args: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(SCRIPT.with_name(script)), *args, "--json"],
                          capture_output=True, text=True, cwd=KIT, check=False)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("copy", [True, False], ids=["tables_copied", "tables_left_out"])
def test_a_published_set_imported_then_validated_is_valid_with_warnings_only_for_what_is_kept(
        tmp_path, needs_node, copy):
    src = _published_with_hand_cases(tmp_path)
    out = tmp_path / "imported"
    code, report = _script("import_set.py", "--from", str(src), "--out", str(out),
                           *(["--copy-linked-data"] if copy else []))
    validated_code, validated = _script("validate_set.py", str(out))
    assert (code, report["errors"]) == (0, []), report["errors"]
    assert (validated_code, validated["errors"]) == (0, []), validated["errors"]
    assert validated["status"] == "ok" and validated["cases"] == 5 + len(HAND_WRITTEN)
    # What import_set says of the set is what validate_set says of it.
    assert report["warnings"] == len(validated["warnings"])
    kept = {f for fields in report["kept_verbatim"].values() for f in fields}
    verbatim = [w for w in validated["warnings"] if w.endswith(": unknown field")]
    assert {w.rsplit(": ", 2)[-2] for w in verbatim} == kept
    others = [w for w in validated["warnings"] if w not in verbatim]
    if copy:
        assert others == []
    else:  # the model's tables stayed behind the link: the names were not checked, and why
        [tables] = others
        assert "reads tables that are not here" in tables and "--copy-linked-data" in tables
        assert any(m.startswith("data: published as a link") for m in report["missing"])
    imported = cases(out)
    # The hand-written quirks read as the kit reads them.
    assert imported["nur_category_lines"]["golden"]["kind"] == "rows"
    assert imported["nur_category_lines"]["golden"]["clarifyOk"] is True
    assert imported["nur_category_lines"]["golden"]["alternates"][0]["accept"] is False
    # Its `position` column ranks the rows (a tie repeats a rank) and the query does not return
    # it: the order, not a compared column.
    ranked = imported["nur_category_lines"]["golden"]
    assert ranked["ordered"] is True and all("position" not in row for row in ranked["value"])
    assert "rubric" in imported["nur_category_lines"]  # kept where it was, named as a call
    assert any("nur_category_lines: a case-level rubric" in c for c in report["judgement_calls"])
    assert imported["nur_top_plant"]["golden"]["ordered"] is True
    assert imported["nur_staff_hours"]["golden"] is None
    loaded = load_set(out)
    assert loaded.case("nur_staff_hours").golden is None
    assert loaded.case("nur_units_q2").golden_status == "provisional"
    assert loaded.case("nur_units_q2").alternates == [] and not loaded.case("nur_units_q2").ordered
    assert loaded.truth_model_path == "truth.malloy"
