"""The model side of the must-not-use veto (issue 18, class 8): the runner's definitions of a
compiled model, reading them once per model, a set's mustNotUseAllowedIn checked against them,
check_must_not_use.py --model, and the scorer vetoing a view built on a forbidden field."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from judge_support import FakeProvider, make_run, verdict, write_prediction
from malloy_evals.answer.scoring import score_attempt
from malloy_evals.checks import model_definitions
from malloy_evals.checks.model_definitions import check_set_with_model, read_definitions
from malloy_evals.checks.must_not_use import Definitions
from malloy_evals.endpoint.runner import MalloyRuntime, default_allow
from malloy_evals.sets.eval_set import load_set
from set_support import bookshop_copy
from veto_support import SHOP_DEFINITIONS, write_shop

KIT = Path(__file__).resolve().parents[1]
SCRIPT = KIT / "skills" / "eval-answer" / "scripts" / "check_must_not_use.py"
VALIDATE = KIT / "skills" / "eval-answer" / "scripts" / "validate_set.py"
BOOKSHOP_MODEL = KIT / "evals" / "bookshop" / "model"


def _shop_set(root: Path, golden_extra: dict | None = None) -> Path:
    """A set over the shop model with one case whose golden forbids shipped_at."""
    write_shop(root)
    (root / "set.json").write_text(json.dumps({
        "name": "shop", "datasetVersion": 1, "targetPackage": "shop",
        "targetModelPath": "shop.malloy"}))
    golden = {"status": "verified", "kind": "scalar", "value": {"n": 1},
              "rubric": "PREFERRED: 1.", "mustNotUse": ["shipped_at"], **(golden_extra or {})}
    (root / "cases.jsonl").write_text(json.dumps({
        "qid": "q_late", "question": "How many orders?", "goldenRevision": 1,
        "golden": golden}) + "\n")
    return root


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=180,
                          check=False, cwd=KIT)


# ------------------------------------------------------------------ the runner

def test_the_runner_gives_the_definitions_the_pure_tests_use(tmp_path, needs_node):
    model = write_shop(tmp_path)
    with MalloyRuntime(model, allow=default_allow(model)) as runtime:
        raw = runtime.definitions()
    assert raw["errors"] == []
    assert Definitions.from_runner(raw, "shop.malloy") == SHOP_DEFINITIONS


def test_the_sample_models_measures_are_read_through_their_joins(needs_node):
    defs = read_definitions(BOOKSHOP_MODEL, "bookshop.malloy")
    assert isinstance(defs, Definitions)
    items = defs.sources["order_items"]
    assert items["list_value"] == ("quantity", "books.list_price")
    assert items["revenue"] == ("line_amount", "orders.counts_as_sale")
    assert items["orders.counts_as_sale"] == ("orders.status",)
    assert defs.queries["top_customers"][0] == "order_items"


# ------------------------------------------------------------------ reading, once per model

def test_the_same_model_in_two_folders_is_compiled_once(tmp_path, needs_node):
    first = read_definitions(write_shop(tmp_path / "a"), "shop.malloy")
    second = read_definitions(write_shop(tmp_path / "b"), "shop.malloy")
    assert isinstance(first, Definitions) and first is second


def test_a_pass_reads_the_definitions_up_front_only_when_a_selected_case_has_a_veto(
        tmp_path, monkeypatch, needs_node):
    set_dir = _shop_set(tmp_path / "set")
    with (set_dir / "model" / "shop.malloy").open("a") as model:
        model.write(f"\n// {tmp_path.name}\n")  # a model of its own: not in the process cache
    with (set_dir / "cases.jsonl").open("a") as cases:
        cases.write(json.dumps({"qid": "q_free", "question": "How many?", "goldenRevision": 1,
                                "golden": {"status": "verified", "kind": "scalar",
                                           "value": {"n": 1}, "rubric": "PREFERRED: 1."}}) + "\n")
    eval_set = load_set(set_dir)
    compiled: list[Path] = []
    monkeypatch.setattr(model_definitions, "_compile",
                        lambda folder, path: compiled.append(folder) or "read")
    model_definitions.read_definitions_for(eval_set, ["q_free", "absent"])
    assert compiled == []
    model_definitions.read_definitions_for(eval_set, ["q_free", "q_late"])
    model_definitions.read_definitions_for(eval_set, ["q_late"])
    assert compiled == [eval_set.model_dir]
    assert model_definitions.case_definitions(eval_set, eval_set.cases["q_late"]) == "read"


@pytest.mark.parametrize("make, why", [
    pytest.param(lambda d: d / "absent", "no such model folder", id="no_folder"),
    pytest.param(lambda d: d, "no .malloy files", id="no_model_file"),
])
def test_a_model_that_is_not_there_is_a_reason_not_an_error(tmp_path, make, why):
    assert why in read_definitions(make(tmp_path))


def test_a_model_that_does_not_compile_is_a_reason(tmp_path, needs_node):
    (tmp_path / "bad.malloy").write_text("source: x is duckdb.table('nowhere.csv') extend {")
    reason = read_definitions(tmp_path, "bad.malloy")
    assert isinstance(reason, str) and reason.startswith("bad.malloy does not compile")


# ------------------------------------------------------------------ the set's allowed names

def test_allowed_names_that_the_model_defines_validate(tmp_path, needs_node):
    set_dir = _shop_set(tmp_path, {"mustNotUseAllowedIn": {"shipped_at": ["is_late",
                                                                           "orders.ship_lag"]}})
    report = check_set_with_model(set_dir)
    assert (report.errors, report.warnings) == ([], [])


def test_an_allowed_name_the_model_does_not_define_is_an_error_on_its_line(tmp_path, needs_node):
    set_dir = _shop_set(tmp_path, {"mustNotUseAllowedIn": {"shipped_at": ["late_view"]}})
    out = _run(str(VALIDATE), str(set_dir), "--json")
    assert out.returncode == 1, out.stderr
    [error] = json.loads(out.stdout)["errors"]
    assert error.startswith("cases.jsonl:1: golden.mustNotUseAllowedIn['shipped_at']: 'late_view'")


def test_an_allowed_entry_that_is_not_a_must_not_use_entry_is_an_error(tmp_path):
    set_dir = _shop_set(tmp_path, {"mustNotUseAllowedIn": {"ship_date": ["is_late"]}})
    [error] = check_set_with_model(set_dir).errors
    assert "'ship_date' is not an entry of golden.mustNotUse" in error


def test_a_model_that_does_not_compile_is_an_error_of_the_set(tmp_path, needs_node):
    set_dir = _shop_set(tmp_path, {"mustNotUseAllowedIn": {"shipped_at": ["is_late"]}})
    model = set_dir / "model" / "shop.malloy"
    model.write_text(model.read_text().replace("order_count is count()",
                                               "order_count is count(("))  # its own text is wrong
    report = check_set_with_model(set_dir)
    [error] = report.errors
    assert error.startswith("model/shop.malloy: ") and "does not compile" in error


@pytest.mark.parametrize("remove", [
    pytest.param(lambda d: shutil.rmtree(d / "data"), id="no_data_folder"),
    pytest.param(lambda d: (d / "data" / "orders.csv").unlink(), id="one_table_missing"),
    pytest.param(lambda d: (shutil.rmtree(d / "data"), (d / "data").symlink_to(d / "gone")),
                 id="a_dangling_link"),
])
def test_a_model_whose_tables_are_not_here_is_a_warning_naming_them(tmp_path, needs_node, remove):
    # The tables a model reads are data the set has not been given yet (an import left a link
    # out, data/ not yet supplied): the names cannot be checked here, which says nothing against
    # the set. As without Node: a warning, never an error.
    set_dir = _shop_set(tmp_path, {"mustNotUseAllowedIn": {"shipped_at": ["no_such_view"]}})
    remove(set_dir)
    report = check_set_with_model(set_dir)
    assert report.errors == [] and report.exit_code == 0
    [warning] = report.warnings
    assert "were not checked against it: shop.malloy reads tables that are not here" in warning
    assert "orders.csv" in warning and "--copy-linked-data" in warning


def test_without_node_the_names_are_not_checked_and_a_warning_says_so(tmp_path, monkeypatch):
    set_dir = _shop_set(tmp_path, {"mustNotUseAllowedIn": {"shipped_at": ["no_such_view"]}})
    monkeypatch.setattr(model_definitions, "runtime_missing_reason", lambda: "node: not found")
    report = check_set_with_model(set_dir)
    assert report.errors == []
    [warning] = report.warnings
    assert "were not checked against it: node: not found" in warning


# ------------------------------------------------------------------ check_must_not_use.py

def test_script_with_a_model_vetoes_a_view_and_prints_the_path(tmp_path, needs_node):
    model = write_shop(tmp_path)
    out = _run(str(SCRIPT), "--query", "run: orders -> late_shipments", "shipped_at",
               "--model", str(model), "--json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert doc["hits"] == ["shipped_at"]
    assert doc["paths"] == {"shipped_at": "late_shipments -> is_late -> shipped_at"}
    assert doc["expansion"] == "expanded"


def test_script_with_a_set_uses_its_model_and_its_allowed_names(tmp_path, needs_node):
    set_dir = _shop_set(tmp_path, {"mustNotUseAllowedIn": {"shipped_at": ["is_late"]}})
    query = tmp_path / "final.malloy"
    query.write_text("run: orders -> late_shipments\n")
    out = _run(str(SCRIPT), "--query-file", str(query), "--set", str(set_dir), "--qid", "q_late",
               "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["allowed"] == ["shipped_at"]


def test_script_without_a_model_says_the_expansion_was_not_possible(tmp_path):
    out = _run(str(SCRIPT), "--query", "run: orders -> late_shipments", "shipped_at", "--json")
    assert out.returncode == 0
    assert "expansion" not in json.loads(out.stdout)
    assert "no --model" in out.stderr
    text = _run(str(SCRIPT), "--query", "run: orders -> late_shipments", "shipped_at")
    assert "not possible (no model given)" in text.stdout


def test_script_model_that_is_not_a_folder_is_a_usage_error(tmp_path):
    out = _run(str(SCRIPT), "--query", "run: x", "y", "--model", str(tmp_path / "nope"))
    assert out.returncode == 2
    assert "--model" in out.stderr and "Traceback" not in out.stderr


# ------------------------------------------------------------------ the scorer

def _score_late_shipments(tmp_path: Path, golden_extra: dict | None = None) -> dict:
    """Score `run: orders -> late_shipments` (the judge says match) on the shop set."""
    set_dir = _shop_set(tmp_path / "set", golden_extra)
    run = make_run(tmp_path, set_dir, [{"qid": "q_late", "answer_text": "1 late order.",
                                        "final_query": "run: orders -> late_shipments"}])
    write_prediction(run, "q_late", None, "order_count\n1\n")
    score_attempt(run, load_set(set_dir), "q_late", None, reexecute=False,
                  provider=FakeProvider([verdict("match", 9)]))
    [event] = [e for e in run.read().events if e["kind"] == "score"]
    return event


def test_the_scorer_vetoes_a_view_built_on_a_forbidden_field(tmp_path, needs_node):
    event = _score_late_shipments(tmp_path)
    assert (event["verdict"], event["judge_verdict"]) == ("no_match", "match")
    assert event["must_not_use_hits"] == ["shipped_at"]


def test_the_scorer_respects_a_definition_the_set_allows(tmp_path, needs_node):
    event = _score_late_shipments(tmp_path, {"mustNotUseAllowedIn": {"shipped_at": ["is_late"]}})
    assert (event["verdict"], event["must_not_use_hits"]) == ("match", [])


# ------------------------------------------------------------------ names a set gives the model

def test_validate_set_names_an_unknown_entity_its_line_and_the_nearest_ones(tmp_path, needs_node):
    set_dir = bookshop_copy(tmp_path / "bookshop")
    lines = (set_dir / "cases.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["expectedEntities"]["required"] = ["measure:order_items:revenu"]  # a typo
    first["golden"]["mustNotUse"] = ["list_value", "books.list_prise", "list price as revenue"]
    lines[0] = json.dumps(first)
    (set_dir / "cases.jsonl").write_text("\n".join(lines) + "\n")
    out = _run(str(VALIDATE), str(set_dir), "--json")
    assert out.returncode == 1, out.stderr
    errors = json.loads(out.stdout)["errors"]
    assert len(errors) == 2
    assert errors[0].startswith(
        "cases.jsonl:1: expectedEntities.required: 'measure:order_items:revenu' is not an entity "
        "of bookshop.malloy (nearest: measure:order_items:revenue")
    assert errors[1].startswith("cases.jsonl:1: golden.mustNotUse: 'books.list_prise' is not a "
                                "field, view, join, named query or source of bookshop.malloy "
                                "(nearest: books.list_price")
    # The sample set as committed names only what its model has.
    assert check_set_with_model(KIT / "evals" / "bookshop").errors == []
