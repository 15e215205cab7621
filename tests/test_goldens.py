"""verify_goldens: comparing re-derived values with tolerance, and the exit decision."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED
from malloy_evals.endpoint.runner import MalloyQueryError, RunnerError
from malloy_evals.sets import goldens as gd

KIT = Path(__file__).resolve().parents[1]
SAMPLE_SET = KIT / "evals" / "bookshop"
SCRIPT = KIT / "skills" / "eval-answer" / "scripts" / "verify_goldens.py"


# --- value comparison -----------------------------------------------------------------------


@pytest.mark.parametrize("expected, actual, round_to, equal", [
    pytest.param(100.0, 100.00005, None, True, id="relative-1e-6-inside"),
    pytest.param(100.0, 100.001, None, False, id="relative-1e-6-outside"),
    pytest.param(12.35, 12.3461, 2, True, id="round-2-half-unit-inside"),
    pytest.param(12.35, 12.3449, 2, False, id="round-2-half-unit-outside"),
    pytest.param("1,234.5", 1234.5, None, True, id="numeric-string-with-comma"),
    pytest.param("2024-03-01", "2024-03-01T00:00:00.000Z", None, True, id="date-as-midnight"),
    pytest.param("Fiction", "fiction", None, False, id="text-is-case-sensitive"),
    pytest.param(None, None, None, True, id="both-null"),
    pytest.param(0, None, None, False, id="zero-is-not-null"),
])
def test_values_equal_applies_the_golden_tolerance(expected, actual, round_to, equal):
    assert gd.values_equal(expected, actual, round_to) is equal


def test_scalar_missing_column_is_named():
    problems = gd.compare_scalar({"revenue": 10}, [{"total_revenue": 10}])
    assert problems == ["column 'revenue' not in the result (columns: total_revenue)"]


def test_scalar_round_ignores_meta_keys():
    assert gd.compare_scalar({"share": 0.33, "round": 2}, [{"share": 1 / 3}]) == []


def test_rows_compare_as_a_multiset_by_default():
    gold = [{"genre": "a", "n": 1}, {"genre": "b", "n": 2}]
    got = [{"genre": "b", "n": 2, "extra": 9}, {"genre": "a", "n": 1, "extra": 8}]
    assert gd.compare_rows(gold, got) == []


def test_rows_duplicate_golden_row_needs_two_derived_rows():
    gold = [{"g": "a"}, {"g": "a"}]
    got = [{"g": "a"}, {"g": "b"}]
    assert gd.compare_rows(gold, got) == ["golden row 2 {'g': 'a'} has no equal derived row"]


def test_rows_ordered_golden_flags_a_swap():
    gold = [{"g": "a"}, {"g": "b"}]
    got = [{"g": "b"}, {"g": "a"}]
    assert len(gd.compare_rows(gold, got, ordered=True)) == 2


def test_rows_count_difference_is_drift():
    assert gd.compare_rows([{"g": "a"}], [{"g": "a"}, {"g": "b"}]) == [
        "golden has 1 rows, derived 2"]


# --- one golden against a fake executor -----------------------------------------------------


def test_check_golden_reports_drift_with_the_derived_value():
    golden = {"kind": "scalar", "value": {"orders": 41}, "canonicalQuery": "run: o -> {}"}
    check = gd.check_golden("q1", golden, lambda q: [{"orders": 42}])
    assert check.status == "drift"
    assert check.problems == ["orders: golden 41, derived 42"]


def test_check_golden_query_error_is_an_error_not_drift():
    def failing(query):
        raise MalloyQueryError("unknown field 'x'")

    golden = {"kind": "rows", "value": [{"a": 1}], "canonicalQuery": "run: o -> {}"}
    check = gd.check_golden("q1", golden, failing)
    assert check.status == "error"
    assert "unknown field 'x'" in check.problems[0]


def test_check_golden_skips_criteria_without_running_anything():
    check = gd.check_golden("q1", {"kind": "criteria", "rubric": "..."}, gd._never)
    assert check.status == "skipped"


def test_report_exit_code_drift_outranks_error():
    checks = [gd.GoldenCheck("a", "scalar", "drift"), gd.GoldenCheck("b", "rows", "error")]
    report = gd.GoldenReport("s", "truth", checks, {})
    assert report.exit_code == EXIT_FINDING
    only_error = gd.GoldenReport("s", "truth", checks[1:], {})
    assert only_error.exit_code == EXIT_UNMEASURED
    assert gd.GoldenReport("s", "truth", [gd.GoldenCheck("c", "rows", "ok")], {}).exit_code == EXIT_OK


# --- the sample set, through the real runtime -----------------------------------------------


def _run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False,
                          capture_output=True, text=True,
                          cwd=KIT, timeout=300)


def test_sample_set_goldens_all_rederive(needs_node):
    proc = _run_script("--set", str(SAMPLE_SET), "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert doc["counts"]["drift"] == 0 and doc["counts"]["error"] == 0
    assert doc["counts"]["ok"] >= 1


def test_drifted_copy_of_a_case_exits_1_naming_it(needs_node, tmp_path):
    copy = tmp_path / "bookshop"
    shutil.copytree(SAMPLE_SET, copy, ignore=shutil.ignore_patterns("runs", "recordings"))
    lines = (copy / "cases.jsonl").read_text().splitlines()
    drifted_qid = None
    for i, line in enumerate(lines):
        case = json.loads(line) if line.strip() else None
        golden = (case or {}).get("golden") or {}
        if golden.get("kind") == "scalar" and golden.get("status", "verified") == "verified":
            column = next(k for k in golden["value"] if k != "round")
            value = golden["value"][column]
            golden["value"][column] = value * 2 + 1 if isinstance(value, (int, float)) else "x"
            lines[i] = json.dumps(case)
            drifted_qid = case["qid"]
            break
    assert drifted_qid is not None, "the sample set needs a verified scalar golden"
    (copy / "cases.jsonl").write_text("\n".join(lines) + "\n")
    proc = _run_script("--set", str(copy))
    assert proc.returncode == EXIT_FINDING, proc.stdout + proc.stderr
    assert f"drift  {drifted_qid}" in proc.stdout


def test_unknown_qid_is_an_input_error(tmp_path):
    proc = _run_script("--set", str(SAMPLE_SET), "--qid", "no_such_case", "--json")
    assert proc.returncode == EXIT_UNMEASURED
    assert "no_such_case" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_golden_settled_as_verified_wrong_is_skipped():
    golden = {"kind": "scalar", "status": "verified_wrong", "value": {"n": 1},
              "canonicalQuery": "run: o -> {}"}
    assert gd.check_golden("q1", golden, gd._never).status == "skipped"


def test_runner_that_cannot_answer_makes_the_set_unchecked_exit_3():
    class DeadRuntime:
        def __init__(self, *args, **kwargs):
            pass

        def execute(self, *args, **kwargs):
            raise RunnerError("the runner died")

        def close(self):
            pass

    report = gd.verify_goldens(SAMPLE_SET, runtime_factory=DeadRuntime)
    assert report.exit_code == EXIT_UNMEASURED
    assert report.counts["error"] >= 1 and report.counts["ok"] == 0
    assert any("the runner died" in p for c in report.checks for p in c.problems)
