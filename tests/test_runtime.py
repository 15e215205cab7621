"""The Node Malloy runner driven from Python: real Malloy, real DuckDB, recovery (SPEC 6)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from conftest import KIT_ROOT, node_runtime_missing_reason
from duck_support import duck_rows
from malloy_evals.core import paths
from malloy_evals.core.errors import UnmeasuredError
from malloy_evals.endpoint import runner as runtime_mod
from malloy_evals.endpoint.runner import MalloyQueryError, MalloyRuntime, RunnerError, default_allow

MINI = KIT_ROOT / "tests" / "fixtures" / "mini_pkg"
MINI_MODEL = MINI / "model"
MINI_DATA = MINI / "data"
BOOKSHOP_MODEL = KIT_ROOT / "evals" / "bookshop" / "model"


def duck(sql: str, data_dir: Path = MINI_DATA) -> list[dict]:
    """Rows DuckDB itself gives for `sql` over the CSVs (one thread, like the runner)."""
    return duck_rows(sql, data_dir)


@pytest.fixture(scope="module")
def rt():
    """One runner for the module: the suite stays fast by compiling the package once."""
    reason = node_runtime_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so runtime tests must run: {reason}")
        pytest.skip(reason)
    runtime = MalloyRuntime(MINI_MODEL, allow=default_allow(MINI_MODEL))
    yield runtime
    runtime.close()


def test_adhoc_aggregation_returns_exactly_duckdbs_rows(needs_node, rt):
    result = rt.execute("run: orders -> { group_by: status; aggregate: order_count, total_revenue; "
                        "order_by: status }")
    expected = duck("select status, count(*) as order_count, sum(amount) as total_revenue "
                    "from read_csv('orders.csv') group by status order by status")
    assert result["rows"] == expected


def test_named_view_through_join_matches_duckdb(needs_node, rt):
    result = rt.execute(source_name="orders", query_name="by_region")
    expected = duck("select c.region as customer_region, count(*) as order_count, "
                    "sum(o.amount) as total_revenue from read_csv('orders.csv') o "
                    "left join read_csv('customers.csv') c using (customer_id) "
                    "group by 1 order by 1")
    assert result["rows"] == expected
    assert result["_limit_source"] == "server_default"


def test_named_query_returns_dates_as_iso_text(needs_node, rt):
    result = rt.execute(query_name="shipped_by_month")
    months = [r["order_month"] for r in result["rows"]]
    assert months == ["2024-01-01T00:00:00.000Z", "2024-02-01T00:00:00.000Z", "2024-03-01T00:00:00.000Z"]
    assert [r["order_count"] for r in result["rows"]] == [2, 1, 2]


def test_givens_override_the_declared_default(needs_node, rt):
    assert rt.execute(query_name="big_orders")["rows"] == [{"order_count": 4}]  # MIN_QTY 2
    assert rt.execute(query_name="big_orders", givens={"MIN_QTY": 3})["rows"] == [{"order_count": 2}]


def test_view_with_own_limit_uses_query_limit(needs_node, rt):
    result = rt.execute(source_name="orders", query_name="top_categories")
    assert (result["_limit_source"], result["_query_row_limit"], len(result["rows"])) == ("query", 2, 2)
    assert result["_limit_hit"] is False


def test_server_cap_reached_sets_limit_hit_and_warning(needs_node, rt):
    result = rt.execute("run: orders -> { select: order_id }", row_limit=3)
    assert len(result["rows"]) == 3
    assert result["_limit_hit"] is True
    assert "3 rows" in result["warning"]


def test_default_cap_is_1000(needs_node, rt):
    result = rt.execute("run: orders -> { select: order_id }")
    assert result["_query_row_limit"] == 1000
    assert result["_limit_hit"] is False
    assert "warning" not in result


def test_bad_field_raises_query_error_with_problem_code(needs_node, rt):
    with pytest.raises(MalloyQueryError) as err:
        rt.execute("run: orders -> { group_by: nope }")
    assert "nope" in err.value.message
    assert err.value.problems[0]["code"] == "field-not-found"


@pytest.mark.parametrize("query", [
    pytest.param("run: duckdb.sql('select 1 as x')", id="raw-sql"),
    pytest.param("run: duckdb.table('../data/orders.csv') -> { aggregate: c is count() }", id="table"),
])
def test_restricted_mode_refuses_raw_sql_and_table(needs_node, rt, query):
    with pytest.raises(MalloyQueryError) as err:
        rt.execute(query)
    assert err.value.problems[0]["code"] == "restricted-construct-forbidden"


def test_trusted_mode_allows_table(needs_node, rt):
    result = rt.execute("run: duckdb.table('../data/orders.csv') -> { aggregate: c is count() }",
                        trusted=True)
    assert result["rows"] == [{"c": 8}]


def test_sandbox_refuses_files_outside_allowed_folders(needs_node, rt, tmp_path):
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    with pytest.raises(MalloyQueryError, match="Permission Error"):
        rt.execute(f"run: duckdb.table('{outside}') -> {{ aggregate: c is count() }}", trusted=True)


def test_describe_lists_sources_fields_views_joins_and_queries(needs_node, rt):
    surface = rt.describe()
    assert surface["errors"] == []
    (model,) = surface["models"]
    orders = next(s for s in model["sources"] if s["name"] == "orders")
    assert orders["doc"].startswith("One row per order line")
    assert {"name": "total_revenue", "type": "number",
            "doc": "Total money collected, in dollars, over all statuses."} in orders["measures"]
    assert [v["name"] for v in orders["views"]] == ["by_region", "top_categories"]
    assert {"name": "customers", "relationship": "one",
            "doc": "The customer who placed the order."} in orders["joins"]
    assert model["queries"][0] == {"name": "shipped_by_month", "source": "orders",
                                   "doc": "Shipped orders only, counted per status month."}
    assert [q["name"] for q in model["queries"]] == ["shipped_by_month", "big_orders"]


def test_search_ranks_the_field_whose_name_matches_first(needs_node, rt):
    hits = rt.search("units_sold", 5)
    assert (hits[0]["kind"], hits[0]["source"], hits[0]["name"]) == ("measure", "orders", "units_sold")


def test_search_kind_filter_is_hard(needs_node, rt):
    hits = rt.search("region", 0, kinds=["view"])
    assert hits and all(h["kind"] == "view" for h in hits)


def test_killed_runner_is_replaced_and_next_query_succeeds(needs_node, rt):
    rt.execute(query_name="shipped_by_month")
    before = rt.restarts
    os.kill(rt.pid, signal.SIGKILL)
    result = rt.execute(source_name="orders", query_name="by_region")
    assert len(result["rows"]) == 3
    assert rt.restarts == before + 1


def test_timed_out_request_reports_error_then_next_succeeds(needs_node, rt):
    rt.execute(query_name="shipped_by_month")  # warm, so only the query is timed
    rt.timeout = 0.0001
    try:
        with pytest.raises(RunnerError, match="timed out"):
            rt.execute("run: orders -> { group_by: status }")
    finally:
        rt.timeout = runtime_mod.DEFAULT_TIMEOUT_S
    assert len(rt.execute("run: orders -> { group_by: status }")["rows"]) == 3


def test_reload_recompiles_in_place(needs_node, rt):
    summary = rt.reload()
    assert summary["models"] == ["shop.malloy"] and summary["errors"] == []


def test_missing_node_modules_is_unmeasured_and_names_make(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "RUNTIME_DIR", tmp_path)
    monkeypatch.setattr(runtime_mod.shutil, "which", lambda name: "/usr/bin/node")
    with pytest.raises(UnmeasuredError, match="make test"):
        MalloyRuntime(MINI_MODEL).describe()


def test_missing_node_is_unmeasured(monkeypatch):
    monkeypatch.setattr(runtime_mod.shutil, "which", lambda name: None)
    with pytest.raises(UnmeasuredError, match="node is not on PATH"):
        MalloyRuntime(MINI_MODEL).describe()


def test_bookshop_package_compiles_and_counts_match_duckdb(needs_node):
    if not (BOOKSHOP_MODEL / "bookshop.malloy").is_file():
        pytest.fail("evals/bookshop/model/bookshop.malloy is part of the kit")
    data = BOOKSHOP_MODEL.parent / "data"
    with MalloyRuntime(BOOKSHOP_MODEL, allow=default_allow(BOOKSHOP_MODEL)) as bookshop:
        surface = bookshop.describe()
        assert surface["errors"] == []
        names = {s["name"] for m in surface["models"] for s in m["sources"]}
        assert {"customers", "books", "orders", "order_items"} <= names
        result = bookshop.execute("run: orders -> { group_by: status; aggregate: n is count(); "
                                  "order_by: status }")
    expected = duck("select status, count(*) as n from read_csv('orders.csv') "
                    "group by status order by status", data)
    assert result["rows"] == expected
