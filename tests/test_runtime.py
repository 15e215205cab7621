"""The Node Malloy runner driven from Python: real Malloy, real DuckDB, recovery."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from pathlib import Path

import pytest
from conftest import KIT_ROOT, node_runtime_missing_reason
from duck_support import duck_rows
from malloy_evals.core import paths
from malloy_evals.core.errors import UnmeasuredError
from malloy_evals.endpoint import runner as runtime_mod
from malloy_evals.endpoint.runner import (
    MalloyQueryError,
    MalloyRuntime,
    QueryBudgetError,
    RunnerError,
    default_allow,
)

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


# Regression: a submitted query's own `limit: 100000000` raised the 1,000-row cap, and every row
# was materialised before the cap was applied.
def test_submitted_querys_own_limit_cannot_raise_the_row_cap(needs_node, rt):
    result = rt.execute("run: orders -> { select: order_id; limit: 6 }", row_limit=3)
    assert len(result["rows"]) == 3
    assert (result["_query_row_limit"], result["_limit_source"], result["_limit_hit"]) == (
        3, "server_default", True)
    assert "3 rows" in result["warning"]


def test_submitted_querys_own_limit_below_the_cap_is_kept(needs_node, rt):
    result = rt.execute("run: orders -> { select: order_id; limit: 2 }", row_limit=3)
    assert (len(result["rows"]), result["_limit_source"], result["_limit_hit"]) == (2, "query", False)


def test_trusted_query_keeps_its_own_limit_above_the_cap(needs_node, rt):
    result = rt.execute("run: orders -> { select: order_id; limit: 6 }", row_limit=3, trusted=True)
    assert (len(result["rows"]), result["_limit_source"]) == (6, "query")


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
    rt.execute(query_name="shipped_by_month")
    hung = rt.pid
    os.kill(hung, signal.SIGSTOP)  # a runner that stops answering
    rt.timeout = 0.5
    try:
        with pytest.raises(RunnerError, match="timed out"):
            rt.describe()
    finally:
        rt.timeout = runtime_mod.DEFAULT_TIMEOUT_S
    assert len(rt.execute("run: orders -> { group_by: status }")["rows"]) == 3
    assert hung not in rt.pids


def test_reload_recompiles_in_place(needs_node, rt):
    summary = rt.reload()
    assert summary["models"] == ["shop.malloy"] and summary["errors"] == []


def test_missing_node_modules_is_unmeasured_and_names_make(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "RUNTIME_DIR", tmp_path)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/node")
    with pytest.raises(UnmeasuredError, match="make test"):
        MalloyRuntime(MINI_MODEL).describe()


def test_missing_node_is_unmeasured(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
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


# ---------- CSV tables read with types detected once (issue: 75% of a warm query was sniffing) ----------

BOOKSHOP = KIT_ROOT / "evals" / "bookshop"


def _sample_queries() -> tuple[list[dict], list[dict]]:
    """(model queries, truth queries) of the sample set: every table whole, every named view and
    query, every query the sample transcripts ran, every canonical query."""
    from malloy_evals.answer.transcripts import execute_call, parse_transcript, publisher_tool
    from malloy_evals.sets.eval_set import load_set

    es = load_set(BOOKSHOP)
    tables = sorted(p.name for p in (BOOKSHOP / "data").glob("*.csv"))
    truth = [{"query": f"run: duckdb.table('../data/{t}') -> {{ select: *; limit: 1000000 }}"}
             for t in tables]
    truth += [{"query": c.canonical_query} for c in es.cases.values() if c.canonical_query]
    model: list[dict] = []
    for path in sorted((BOOKSHOP / "transcripts").rglob("*.jsonl")):
        for use in parse_transcript(path).tool_uses:
            if publisher_tool(use.name) == "execute_query":
                call = execute_call(use)
                model.append({"query": call.query, "source_name": call.source_name,
                              "query_name": call.query_name, "givens": call.givens})

    def final_queries(value: object) -> list[str]:
        if isinstance(value, dict):
            found = [value["final_query"]] if isinstance(value.get("final_query"), str) else []
            return found + [q for v in value.values() for q in final_queries(v)]
        return [q for v in value for q in final_queries(v)] if isinstance(value, list) else []

    for name in ("judge-calibration.jsonl", "judge-regressions.jsonl"):
        for line in (BOOKSHOP / name).read_text().splitlines():
            model += [{"query": q} for q in final_queries(json.loads(line))]
    return model, truth


def _both_paths(package: Path, queries: list[dict], trusted: bool) -> list[tuple[str, str]]:
    """Each query's result (rows, schema and limits as JSON text, or the error) read today's way
    and with the detected column types."""
    out: dict[bool, list[str]] = {}
    for views in (False, True):
        with MalloyRuntime(package, allow=default_allow(package), csv_types=views,
                           pool_size=1) as runtime:
            named: list[dict] = []
            if not trusted:
                for model in runtime.describe()["models"]:
                    named += [{"source_name": s["name"], "query_name": v["name"]}
                              for s in model["sources"] for v in s["views"]]
                    named += [{"query_name": q["name"]} for q in model["queries"]]
            results = []
            for q in queries + named:
                try:
                    r = runtime.execute(q.get("query"), source_name=q.get("source_name"),
                                        query_name=q.get("query_name"), givens=q.get("givens"),
                                        trusted=trusted)
                    # Field annotations carry a fresh reference id per compile: compare names
                    # and types of the result fields, and every row exactly.
                    fields = [(f["name"], f.get("type")) for f in r["schema"]["fields"]]
                    results.append(json.dumps({"rows": r["rows"], "fields": fields,
                                               "limit": [r["_limit_hit"], r["_query_row_limit"]]}))
                except MalloyQueryError as exc:
                    results.append("error: " + exc.message)
            out[views] = results
            declared = [t["declared"] for t in runtime.csv_tables()]
            assert declared == ([True] * 4 if views else [])
    return list(zip(out[False], out[True], strict=True))


def test_declared_csv_reads_give_identical_rows_for_every_sample_table_and_query(needs_node):
    model_queries, truth_queries = _sample_queries()
    assert len(model_queries) > 20 and len(truth_queries) > 20
    pairs = _both_paths(BOOKSHOP / "model", model_queries, trusted=False)
    pairs += _both_paths(BOOKSHOP / "truth", truth_queries, trusted=True)
    assert sum(1 for today, _ in pairs if not today.startswith("error")) > 40
    for today, declared in pairs:
        assert declared == today


def test_changed_csv_file_is_detected_again_before_the_next_query(needs_node, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(MINI, pkg)
    model = pkg / "model"
    with MalloyRuntime(model, allow=default_allow(model), pool_size=1) as runtime:
        runtime.execute("run: orders -> { aggregate: order_count }")
        before = runtime.execute("run: orders -> { aggregate: order_count }")["rows"]
        assert {"path": "../data/orders.csv", "uses": 2, "declared": True} in runtime.csv_tables()
        lines = (pkg / "data" / "orders.csv").read_text().splitlines(keepends=True)
        (pkg / "data" / "orders.csv").write_text("".join(lines[:-1]))  # one order fewer
        after = runtime.execute("run: orders -> { aggregate: order_count }")["rows"]
    assert after[0]["order_count"] == before[0]["order_count"] - 1


def test_csv_file_the_declared_read_cannot_match_keeps_todays_read(needs_node, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(MINI, pkg)
    model = pkg / "model"
    # Past the sniffer's sample, a value that breaks the detected type: the declared read would
    # fail where today's read fails too, so no view is made and DuckDB's own read stands.
    orders = pkg / "data" / "orders.csv"
    head, *rows = orders.read_text().splitlines()
    filler = [rows[0]] * 30000
    orders.write_text("\n".join([head, *rows, *filler, rows[0].replace(rows[0].split(",")[0], "x", 1)]) + "\n")
    with MalloyRuntime(model, allow=default_allow(model), pool_size=1) as runtime:
        for query in ["run: orders -> { aggregate: order_count }",
                      "run: customers -> { aggregate: c is count() }"] * 2:
            runtime.execute(query, trusted=True)
        declared = {t["path"]: t["declared"] for t in runtime.csv_tables()}
    assert declared == {"../data/orders.csv": False, "../data/customers.csv": True,
                        "../data/products.csv": None}


# ---------- budgets: one query must never cost another its answer (hostile input) ----------

CROSS_JOIN = ("run: order_items extend { join_cross: a is order_items on true "
              "join_cross: b is order_items on true } -> "
              "{ aggregate: n is count(), s is a.quantity.sum() + b.quantity.sum() }")
NEST_BOMB = "run: orders -> " + "{ group_by: status nest: n is " * 40 + "{ aggregate: order_count }" + " }" * 40


@pytest.fixture
def bookshop(monkeypatch):
    """A bookshop runtime with a short query budget, so a runaway query is stopped quickly."""
    monkeypatch.setattr(runtime_mod, "KILL_GRACE_S", 1.0)
    runtime = MalloyRuntime(BOOKSHOP_MODEL, allow=default_allow(BOOKSHOP_MODEL), query_timeout=1.5)
    yield runtime
    runtime.close()


def test_runaway_sql_is_interrupted_as_the_querys_failure_and_the_runner_kept(needs_node, bookshop):
    bookshop.execute("run: orders -> { aggregate: order_count }")
    pids = bookshop.pids
    with pytest.raises(QueryBudgetError, match="did not finish within 1.5 s") as err:
        bookshop.execute(CROSS_JOIN)
    assert err.value.code == "query-timeout" and isinstance(err.value, MalloyQueryError)
    assert bookshop.pids == pids and bookshop.restarts == 0


def test_query_stuck_in_the_compiler_kills_its_runner_and_the_next_query_succeeds(needs_node, bookshop):
    # The bomb compiles in under a second, then holds DuckDB in a phase no interrupt reaches
    # (for minutes); an interrupt sent in its first second or so still lands, so the budget
    # here is past that (measured in benchmarks/README.md's flood section).
    bookshop.query_timeout = 4.0
    bookshop.execute("run: orders -> { aggregate: order_count }")
    pids = bookshop.pids
    with pytest.raises(QueryBudgetError, match="did not finish within 4 s"):
        bookshop.execute(NEST_BOMB)
    assert not set(pids) & set(bookshop.pids) and bookshop.restarts == 1
    assert bookshop.execute("run: orders -> { aggregate: order_count }")["rows"] == [{"order_count": 2500}]


def test_hung_query_does_not_hold_up_the_query_beside_it(needs_node, bookshop):
    assert len(bookshop.warm()) == 2
    outcome: list[str] = []

    def bomb() -> None:
        try:
            bookshop.execute(NEST_BOMB)
        except QueryBudgetError:
            outcome.append("bomb stopped")

    thread = threading.Thread(target=bomb)
    thread.start()
    rows = bookshop.execute("run: orders -> { aggregate: order_count }")["rows"]
    outcome.append("innocent answered")
    thread.join()
    assert rows == [{"order_count": 2500}]
    assert outcome == ["innocent answered", "bomb stopped"]


def test_overlong_query_is_refused_before_any_runner_starts(tmp_path):
    runtime = MalloyRuntime(tmp_path / "no-such-package")
    with pytest.raises(QueryBudgetError, match="characters long") as err:
        runtime.execute("run: orders -> { aggregate: x is " + "+".join(["1"] * 60_000) + " }")
    assert err.value.code == "query-too-long" and runtime.pids == []


def test_result_over_the_byte_cap_is_the_querys_failure(needs_node, rt, monkeypatch):
    monkeypatch.setattr(runtime_mod, "RESULT_BYTE_CAP", 100)
    with pytest.raises(QueryBudgetError, match="exceeded 100 bytes") as err:
        rt.execute("run: orders -> { select: * }")
    assert err.value.code == "query-too-large"
    monkeypatch.undo()
    assert len(rt.execute("run: orders -> { select: * }")["rows"]) == 8


# ---------- compiled once: the model cache and the compiled queries (issue 30) ----------


def _results(runtime: MalloyRuntime, queries: list[dict], trusted: bool) -> list[str]:
    """Each query's rows, result fields and limits as JSON text, or its error."""
    out = []
    for q in queries:
        try:
            r = runtime.execute(q.get("query"), source_name=q.get("source_name"),
                                query_name=q.get("query_name"), givens=q.get("givens"),
                                trusted=trusted)
            fields = [(f["name"], f.get("type")) for f in r["schema"]["fields"]]
            out.append(json.dumps({"rows": r["rows"], "fields": fields, "sql": r["sql"],
                                   "limit": [r["_limit_hit"], r["_query_row_limit"]]}))
        except MalloyQueryError as exc:
            out.append("error: " + exc.message)
    return out


def test_a_second_runner_reads_the_compiled_model_and_answers_exactly_as_a_compile(needs_node,
                                                                                   tmp_path):
    model_queries, truth_queries = _sample_queries()
    cache = tmp_path / "cache"
    for package, queries, trusted in ((BOOKSHOP / "model", model_queries, False),
                                      (BOOKSHOP / "truth", truth_queries, True)):
        with MalloyRuntime(package, allow=default_allow(package), model_cache=None,
                           pool_size=1) as fresh:
            assert fresh.describe()["errors"] == [] and fresh.load_summary["model_cache"] == "off"
            expected = (fresh.describe(), fresh.definitions(), fresh.entities(),
                        _results(fresh, queries, trusted))
        with MalloyRuntime(package, allow=default_allow(package), model_cache=cache) as pool:
            pool.describe()
            assert pool.load_summary["model_cache"] == "compiled"
            pool.warm()  # the second runner of the pool
            assert pool.load_summary["model_cache"] == "read" and len(pool.pids) == 2
        with MalloyRuntime(package, allow=default_allow(package), model_cache=cache,
                           pool_size=1) as reader:
            surface = reader.describe()
            assert reader.load_summary["model_cache"] == "read"
            # Asked twice: the second time every query comes from the runner's compiled queries.
            got = [(surface, reader.definitions(), reader.entities(),
                    _results(reader, queries, trusted)) for _ in range(2)]
        assert sum(1 for r in expected[3] if not r.startswith("error")) > 20
        assert got[0] == expected and got[1] == expected


def test_a_changed_model_or_table_is_compiled_again_never_read_stale(needs_node, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(MINI, pkg)
    model, cache = pkg / "model", tmp_path / "cache"

    def load() -> tuple[str, MalloyRuntime]:
        runtime = MalloyRuntime(model, allow=default_allow(model), model_cache=cache, pool_size=1)
        runtime.describe()
        return runtime.load_summary["model_cache"], runtime

    state, runtime = load()
    runtime.close()
    assert state == "compiled" and load()[0] == "read"
    shop = model / "shop.malloy"
    shop.write_text(shop.read_text().replace("source: orders is", "source: orders2 is "
                                             "duckdb.table('../data/orders.csv')\nsource: orders is", 1))
    state, runtime = load()
    with runtime:
        assert state == "compiled"
        assert runtime.execute("run: orders2 -> { aggregate: n is count() }")["rows"][0]["n"] > 0
    # A column added to a table changes the schema the compile read: compiled again.
    orders = pkg / "data" / "orders.csv"
    head, *rows = orders.read_text().splitlines()
    orders.write_text("\n".join([head + ",note", *(r + ",x" for r in rows)]) + "\n")
    state, runtime = load()
    with runtime:
        assert state == "compiled"
        assert runtime.execute("run: orders -> { group_by: note }")["rows"] == [{"note": "x"}]


def test_a_cache_folder_others_may_write_or_a_planted_file_is_never_read(needs_node, tmp_path):
    cache = tmp_path / "cache"
    with MalloyRuntime(MINI_MODEL, allow=default_allow(MINI_MODEL), model_cache=cache,
                       pool_size=1) as first:
        first.describe()
    kept = [p for p in cache.iterdir() if p.suffix == ".json"]
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o077 == 0
    # A file that is not what the runner wrote (here: unreadable JSON) is a miss, compiled again.
    kept[0].write_text("{not json")
    with MalloyRuntime(MINI_MODEL, allow=default_allow(MINI_MODEL), model_cache=cache,
                       pool_size=1) as second:
        assert len(second.execute("run: orders -> { group_by: status }")["rows"]) == 3
        assert second.load_summary["model_cache"] == "compiled"
    # A folder others may write is not used at all.
    cache.chmod(0o777)
    with MalloyRuntime(MINI_MODEL, allow=default_allow(MINI_MODEL), model_cache=cache,
                       pool_size=1) as third:
        third.describe()
        assert third.load_summary["model_cache"] == "off"
    # Nor is a file others may write, even one the runner wrote itself.
    cache.chmod(0o700)
    with MalloyRuntime(MINI_MODEL, allow=default_allow(MINI_MODEL), model_cache=cache,
                       pool_size=1) as fourth:
        fourth.describe()
    kept[0].chmod(0o666)
    with MalloyRuntime(MINI_MODEL, allow=default_allow(MINI_MODEL), model_cache=cache,
                       pool_size=1) as fifth:
        fifth.describe()
        assert fifth.load_summary["model_cache"] == "compiled"


def test_a_compiled_query_is_kept_apart_by_its_givens_and_its_mode(needs_node, rt):
    # The runner's compiled queries are keyed by text, givens and mode: the same text with other
    # givens, or a trusted compile of it, never answers for a restricted one.
    for _ in range(2):
        assert rt.execute(query_name="big_orders")["rows"] == [{"order_count": 4}]
        assert rt.execute(query_name="big_orders", givens={"MIN_QTY": 3})["rows"] == [
            {"order_count": 2}]
    table = "run: duckdb.table('../data/orders.csv') -> { aggregate: n is count() }"
    assert rt.execute(table, trusted=True)["rows"][0]["n"] > 0
    for _ in range(2):
        with pytest.raises(MalloyQueryError):
            rt.execute(table)


def test_the_model_cache_folder_is_chosen_by_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("MALLOY_EVALS_MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert runtime_mod.default_model_cache() == tmp_path / "xdg" / "malloy-evals" / "models"
    monkeypatch.setenv("MALLOY_EVALS_MODEL_CACHE", str(tmp_path / "mine"))
    assert runtime_mod.default_model_cache() == tmp_path / "mine"
    monkeypatch.setenv("MALLOY_EVALS_MODEL_CACHE", " OFF ")
    assert runtime_mod.default_model_cache() is None
    # A runtime built while it is off keeps no compiled package for the next runner.
    assert runtime_mod.MalloyRuntime(KIT_ROOT / "evals" / "bookshop" / "model").model_cache is None
