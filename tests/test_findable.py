"""check_findable: can get_context find each case's expected entities; unfindable ones are the
set's or the model's, and retrieval attribution says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import skip_without_node
from malloy_evals.answer import findable, retrieval
from set_support import bookshop_copy

KIT = Path(__file__).resolve().parents[1]
SCRIPT = KIT / "skills" / "eval-answer" / "scripts" / "check_findable.py"
PLANTED = "measure:order_items:profit_margin"   # the sample model has no such measure


@pytest.fixture(scope="module")
def planted_set(tmp_path_factory):
    set_dir = bookshop_copy(tmp_path_factory.mktemp("findable") / "bookshop")
    lines = (set_dir / "cases.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["qid"] == "bk_total_revenue"
    first["expectedEntities"]["required"].append(PLANTED)
    lines[0] = json.dumps(first)
    (set_dir / "cases.jsonl").write_text("\n".join(lines) + "\n")
    return set_dir


@pytest.fixture(scope="module")
def report(planted_set):
    skip_without_node()
    done = subprocess.run([sys.executable, str(SCRIPT), "--set", str(planted_set), "--local",
                           "--only", "bk_total_revenue,bk_gross_bookings", "--json"],
                          capture_output=True, text=True, cwd=KIT, check=False)
    assert done.returncode == 1, done.stderr   # something is unfindable: a finding
    return json.loads(done.stdout)


def test_the_planted_entity_is_unfindable_and_owned_by_the_set(report):
    assert report["unfindable"] == {PLANTED: "dataset"}
    cases = {c["qid"]: c for c in report["cases"]}
    total = cases["bk_total_revenue"]
    assert total["status"] == findable.UNFINDABLE
    by_id = {e["entity_id"]: e for e in total["entities"]}
    assert by_id[PLANTED] == {"entity_id": PLANTED, "by_question": "missing", "by_name": False,
                              "in_model": False, "owner": "dataset"}
    # The real expected entity of the same case is found by the question's own words.
    assert by_id["measure:order_items:revenue"]["by_question"] == "exact"
    assert "not in the model" in total["why"]


def test_a_case_whose_entities_the_question_finds_is_findable(report):
    cases = {c["qid"]: c for c in report["cases"]}
    gross = cases["bk_gross_bookings"]
    assert gross["status"] == findable.FINDABLE, gross
    assert all(e["owner"] is None for e in gross["entities"])


def test_retrieval_attributes_a_failure_on_an_unfindable_entity_to_its_owner(report, tmp_path):
    path = tmp_path / "findable.json"
    path.write_text(json.dumps(report))
    unfindable = retrieval.read_unfindable(path)
    delivered = retrieval.Delivered(returned={"measure:order_items:revenue": None},
                                    asked={"measure"}, calls=1)
    expected = {"required": ["measure:order_items:revenue", PLANTED]}
    row = retrieval.score_row(qid="bk_total_revenue", sample=None, phase="baseline",
                              verdict="no_match", expected=expected, coverage="covered",
                              coverage_source="authored", delivered=delivered,
                              unfindable=unfindable)
    assert (row.where_to_fix, row.owner, row.component) == ("unfindable", "dataset", "dataset")
    assert PLANTED in row.why and "not the answerer's" in row.why
    # Without the report the same row blames search on the model, as before.
    plain = retrieval.score_row(qid="bk_total_revenue", sample=None, phase="baseline",
                                verdict="no_match", expected=expected, coverage="covered",
                                coverage_source="authored", delivered=delivered)
    assert plain.where_to_fix == "not retrieved"


def test_a_report_that_is_not_check_findables_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(Exception, match="other.json.*unfindable: missing"):
        retrieval.read_unfindable(path)
