"""new_set: a first set scaffolded outside the checkout, then the loop README's "Write your
first set" walks, end to end on the scaffold (validate, verify, promote, answer, score)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from malloy_evals.core.errors import UsageError
from malloy_evals.sets import scaffold
from malloy_evals.sets.eval_set import load_set

KIT = Path(__file__).resolve().parents[1]
SCRIPTS = KIT / "skills" / "eval-answer" / "scripts"
MODEL = KIT / "evals" / "bookshop" / "model"
DATA = KIT / "evals" / "bookshop" / "data"


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *args], capture_output=True,
                          text=True, cwd=KIT, check=False, timeout=900)


def test_the_walkthrough_from_nothing_to_a_scored_run(tmp_path, needs_node):
    set_dir, run_dir = tmp_path / "shop", tmp_path / "shop-r1"
    made = _run("new_set.py", "shop", "--model", str(MODEL), "--data", str(DATA), "--out",
                str(set_dir), "--json")
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["tables"] == ["books.csv", "customers.csv", "order_items.csv", "orders.csv"]
    es = load_set(set_dir)
    assert sorted(c.golden_kind or "" for c in es.cases.values()) == [
        "criteria", "rows", "scalar", "unanswerable"]
    assert all(c.raw.get("notes") for c in es.cases.values())  # each says what to change
    assert (set_dir / "truth" / "truth.malloy").read_text().count("duckdb.table('../data/") == 4
    assert any(s.endswith(f"validate_set.py {set_dir}") for s in report["next_steps"])
    assert _run("validate_set.py", str(set_dir)).returncode == 0
    assert _run("verify_goldens.py", "--set", str(set_dir)).returncode == 0
    promoted = _run("promote_golden.py", "--set", str(set_dir), "--all", "--json")
    assert json.loads(promoted.stdout)["promoted"] == ["shop_row_count", "shop_top_values"]
    for qid in ("shop_explain_model", "shop_not_in_data"):
        assert _run("promote_golden.py", "--set", str(set_dir), "--qid", qid, "--attest", "--by",
                    "Dana Reyes").returncode == 0
    assert {c.golden_status for c in load_set(set_dir).cases.values()} == {"verified"}
    assert _run("new_run.py", "--set", str(set_dir), "--out", str(run_dir), "--answerer-model",
                "scripted-answerer", "--run-id", "shop-r1").returncode == 0
    answerer = (f"{sys.executable} {KIT / 'scripts' / 'scripted_answerer.py'} "
                "--mcp-config {mcp_config} --question-file {question_file}")
    answered = _run("run_answers.py", "--run", str(run_dir), "--set", str(set_dir), "--local",
                    "--only", "shop_row_count", "--answerer-cmd", answerer)
    assert answered.returncode == 0, answered.stderr
    scored = _run("score_run.py", "--run", str(run_dir), "--set", str(set_dir), "--local",
                  "--judge", "host", "--emit")
    assert scored.returncode == 3, scored.stderr   # PARTIAL: the host has not answered yet
    assert (run_dir / "artifacts" / "shop_row_count" / "_" / "judge" / "request.json").is_file()


def test_a_set_inside_the_checkout_must_be_where_git_ignores():
    with pytest.raises(UsageError, match="dirties the checkout"):
        scaffold.check_out(KIT / "evals" / "myshop")
    scaffold.check_out(KIT / "runs" / "never-made-by-this-test")   # runs/ is ignored: fine


def test_the_default_place_is_outside_the_checkout():
    assert not scaffold.default_out("x").resolve().is_relative_to(KIT.resolve())


def test_a_name_that_cannot_name_a_folder_is_a_usage_error():
    done = _run("new_set.py", "../escape", "--model", str(MODEL), "--out", "/tmp/never")
    assert done.returncode == 2 and "a set name is" in done.stderr
