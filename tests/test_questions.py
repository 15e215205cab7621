"""import_set --questions: question lists (CSV, markdown, one per line) made provisional cases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from malloy_evals.core.errors import InputError
from malloy_evals.sets import questions
from malloy_evals.sets.eval_set import check_set, load_set
from malloy_evals.sets.goldens import values_equal
from set_support import bookshop_copy

KIT = Path(__file__).resolve().parents[1]
LISTS = KIT / "tests" / "fixtures" / "questions"
SCRIPT = KIT / "skills" / "eval-answer" / "scripts" / "import_set.py"


@pytest.fixture
def bookshop(tmp_path):
    return bookshop_copy(tmp_path / "bookshop")


def added(set_dir: Path, before: int) -> list[dict]:
    lines = (set_dir / "cases.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines[before:]]


def test_a_csv_with_golden_queries_gets_provisional_goldens_run_on_the_model(bookshop, needs_node):
    before = len(load_set(bookshop).cases)
    report = questions.import_questions(LISTS / "questions.csv", bookshop)
    assert report.format == "csv" and report.exit_code == 0
    revenue, genres, members = added(bookshop, before)
    assert revenue["question"] == "What was the shop's revenue across all the data?"
    assert revenue["qid"] == "q_shops_revenue_across_all_data"
    assert revenue["golden"]["status"] == "provisional" and revenue["golden"]["kind"] == "scalar"
    # The value is what the model gives, run there and then (the sample set's verified figure).
    assert values_equal(90963.84, revenue["golden"]["value"]["revenue"], 2)
    assert revenue["modelQuery"] == "run: order_items -> { aggregate: revenue }"
    assert revenue["notes"] == "net of discounts; shipped and pending orders"
    assert genres["golden"]["kind"] == "rows" and len(genres["golden"]["value"]) == 3
    assert "golden" not in members and "no-golden" in members["tags"]
    assert [c.golden for c in report.cases][2] == "none: the list gives no golden query"
    assert check_set(bookshop).errors == []


@pytest.mark.parametrize("name, fmt, expected", [
    ("questions.md", "markdown", ["What is our total revenue?",
                                  "How many orders were cancelled in 2024?",
                                  "Which region do most of our customers live in?",
                                  "What share of revenue came from the web channel?"]),
    ("questions.txt", "lines", ["What is the average discount on an order line?",
                                "Which book sold the most copies in 2025?"]),
])
def test_markdown_lists_and_plain_lines_become_cases_without_goldens(bookshop, name, fmt, expected):
    before = len(load_set(bookshop).cases)
    report = questions.import_questions(LISTS / name, bookshop)
    assert report.format == fmt
    new = added(bookshop, before)
    assert [c["question"] for c in new] == expected  # headings and prose are not questions
    assert all("golden" not in c and c["tags"] == ["from-question-list", "no-golden"] for c in new)
    assert len({c.qid.lower() for c in load_set(bookshop).cases.values()}) == before + len(new)


def test_a_question_already_in_the_set_is_not_added_twice(bookshop):
    questions.import_questions(LISTS / "questions.txt", bookshop)
    n = len(load_set(bookshop).cases)
    again = questions.import_questions(LISTS / "questions.txt", bookshop)
    assert len(load_set(bookshop).cases) == n
    assert all(not c.written and c.golden.startswith("unchanged") for c in again.cases)


def test_generated_qids_stay_unique_ignoring_case():
    taken = {"q_total_revenue"}
    assert questions.qid_for("Total revenue?", taken) == "q_total_revenue_2"
    assert questions.qid_for("TOTAL REVENUE", taken) == "q_total_revenue_3"
    assert questions.qid_for("???", taken) == "q"


def test_a_failing_golden_query_leaves_no_golden_and_is_a_finding(bookshop, tmp_path, needs_node):
    listing = tmp_path / "q.csv"
    listing.write_text("question,golden_query\nWhat is the profit?,run: order_items -> { aggregate: profit }\n")
    report = questions.import_questions(listing, bookshop)
    assert report.exit_code == 1
    [case] = report.cases
    assert case.golden.startswith("none: the golden query failed")
    [written] = added(bookshop, len(load_set(bookshop).cases) - 1)
    assert "golden" not in written and written["modelQuery"].endswith("profit }")


def test_a_csv_without_a_question_column_is_refused_naming_the_file(tmp_path):
    listing = tmp_path / "q.csv"
    listing.write_text("prompt,answer\nWhat?,1\n")
    with pytest.raises(InputError, match="no 'question' column"):
        questions.read_question_list(listing)


def test_the_script_adds_a_list_and_refuses_mixed_modes(bookshop):
    done = subprocess.run([sys.executable, str(SCRIPT), "--questions", str(LISTS / "questions.md"),
                           "--set", str(bookshop), "--json"], capture_output=True, text=True,
                          cwd=KIT, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["written"] == 4
    mixed = subprocess.run([sys.executable, str(SCRIPT), "--questions", str(LISTS / "questions.md"),
                            "--from", str(bookshop), "--out", "x"], capture_output=True, text=True,
                           cwd=KIT, check=False)
    assert mixed.returncode == 2 and "--questions goes with --set" in mixed.stderr
