"""Reading an attempt's re-executed prediction back from its artifacts (ledger/artifacts.py)."""

from __future__ import annotations

from malloy_evals.ledger.artifacts import read_csv_rows


def test_prediction_cells_read_numbers_as_numbers_and_keep_text():
    rows = read_csv_rows("n,x,s,e\n12,1.5e3,fiction,\n")
    assert rows == [{"n": 12, "x": 1500.0, "s": "fiction", "e": None}]


# Regressions (hostile input): a re-executed cell longer than the csv module's 128 KiB field
# limit, or a string of 5,000 digits (past Python's int conversion limit), made reading the
# prediction back raise, and scoring died on an answerer's query.
def test_a_cell_longer_than_the_csv_modules_default_limit_is_read_back():
    [row] = read_csv_rows("a\n" + "x" * 200_000 + "\n")
    assert len(row["a"]) == 200_000


def test_a_run_of_digits_longer_than_any_number_stays_text():
    [row] = read_csv_rows("a,b\n" + "1" * 5000 + ",7\n")
    assert row == {"a": "1" * 5000, "b": 7}
