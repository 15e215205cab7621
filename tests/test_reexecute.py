"""Re-executing an attempt's final query and keeping what came back (reference/scoring.md)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading

import duckdb
import pytest
from conftest import KIT_ROOT, node_runtime_missing_reason
from malloy_evals.answer.reexecute import (
    Reexecutions,
    csv_cell,
    final_call,
    open_endpoint,
    prediction_csv,
    reexecute_attempt,
)
from malloy_evals.core.errors import InputError, UnmeasuredError
from malloy_evals.endpoint.mcp_client import McpToolError
from malloy_evals.endpoint.runner import BUSY, INTERRUPTED, server_query_timeout
from malloy_evals.ledger.run import Run

MINI = KIT_ROOT / "tests" / "fixtures" / "mini_pkg"
SCRIPT = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "reexecute.py"


def _attempt(qid: str, final_query: str | None, sample: int | None = None, **extra) -> dict:
    return {"kind": "attempt", "qid": qid, "sample": sample, "phase": "baseline", "submitted": True,
            "final_query": final_query, "answer_text": "an answer", **extra}


@pytest.fixture
def run(tmp_path):
    return Run.create(tmp_path / "run", MINI, "test-answerer")


@pytest.fixture(scope="module")
def endpoint():
    """The kit's endpoint over the mini set's model/ package, started once (stdio)."""
    reason = node_runtime_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so runtime tests must run: {reason}")
        pytest.skip(reason)
    with open_endpoint(MINI, local=True, timeout=60) as ep:
        yield ep


def _read_csv(path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


# ---------- against the endpoint ----------

def test_named_view_attempt_writes_prediction_and_envelope(needs_node, run, endpoint):
    run.append([_attempt("rev_by_region", "run: orders -> by_region", final_query_source="named_view")])
    result = reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    assert result.status == "ok" and result.exit_code == 0
    assert result.call == {"source_name": "orders", "query_name": "by_region", "model_path": "shop.malloy"}
    assert _read_csv(run.resolve(result.prediction_path)) == [
        ["customer_region", "order_count", "total_revenue"],
        ["APAC", "1", "19.99"], ["EU", "2", "34.989999999999995"], ["US", "5", "170.22"]]
    envelope = json.loads(run.resolve(result.envelope_path).read_text())
    assert len(envelope["rows"]) == 3 and envelope["_limit_source"] == "server_default"


def test_adhoc_attempt_rows_match_duckdb_at_full_precision(needs_node, run, endpoint):
    run.append([_attempt("shipped_orders", "run: orders -> { group_by: status; "
                         "aggregate: total_revenue; order_by: status }", sample=2)])
    result = reexecute_attempt(run, MINI, "shipped_orders", 2, endpoint)
    con = duckdb.connect()
    con.execute("SET threads=1")
    expected = con.execute(f"select status, sum(amount) from read_csv('{MINI / 'data' / 'orders.csv'}') "
                           "group by 1 order by 1").fetchall()
    con.close()
    rows = _read_csv(run.resolve(result.prediction_path))[1:]
    assert [(s, float(v)) for s, v in rows] == expected
    assert rows[2][1] == repr(expected[2][1])  # shortest round-trip text, nothing rounded


def test_named_query_dates_are_iso_dates(needs_node, run, endpoint):
    run.append([_attempt("rev_by_region", "run: shipped_by_month", query_name="shipped_by_month")])
    result = reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    rows = _read_csv(run.resolve(result.prediction_path))
    assert [r[0] for r in rows] == ["order_month", "2024-01-01", "2024-02-01", "2024-03-01"]


def test_recorded_givens_are_sent_with_the_named_query(needs_node, run, endpoint):
    run.append([_attempt("rev_by_region", "run: big_orders", query_name="big_orders",
                         givens={"MIN_QTY": 3})])
    result = reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    assert result.call["givens"] == {"MIN_QTY": 3}
    assert _read_csv(run.resolve(result.prediction_path)) == [["order_count"], ["2"]]


def test_second_reexecution_is_write_once(needs_node, run, endpoint):
    run.append([_attempt("rev_by_region", "run: orders -> by_region", final_query_source="named_view")])
    first = reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    second = reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    assert first.prediction_path.endswith("/prediction.csv")
    assert second.prediction_path.endswith("/prediction.2.csv")
    assert second.envelope_path.endswith("/envelope.2.json")


# Regression (hostile input, writes through links): reexecution.json, which scoring reads back to
# skip re-running a query, was written through a link planted in its place.
def test_reexecution_record_is_never_written_through_a_planted_link(needs_node, run, endpoint,
                                                                     tmp_path):
    run.append([_attempt("rev_by_region", "run: orders -> by_region", final_query_source="named_view")])
    folder = run.artifact_dir("rev_by_region", None)
    folder.mkdir(parents=True)
    (folder / "reexecution.json").symlink_to(tmp_path / "stolen.json")
    with pytest.raises(InputError, match="symbolic link"):
        reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    assert not (tmp_path / "stolen.json").exists()


def test_query_error_is_recorded_not_raised(needs_node, run, endpoint):
    run.append([_attempt("rev_by_region", "run: orders -> { group_by: nope }")])
    result = reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    assert result.status == "query_error" and result.exit_code == 0
    assert "'nope' is not defined" in result.error and result.suggestions
    detail = json.loads(run.resolve(result.error_path).read_text())
    assert detail["error"] == result.error and detail["call"]["query"].startswith("run: orders")
    assert result.prediction_path is None
    assert not (run.artifact_dir("rev_by_region", None) / "prediction.csv").exists()


def test_restricted_construct_in_final_query_is_a_recorded_error(needs_node, run, endpoint):
    run.append([_attempt("rev_by_region", "run: duckdb.sql('select 1')")])
    result = reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    assert result.status == "query_error" and "restricted" in result.error


def test_attempt_without_final_query_is_no_query(needs_node, run, endpoint):
    run.append([_attempt("rev_by_region", None)])
    result = reexecute_attempt(run, MINI, "rev_by_region", None, endpoint)
    assert result.status == "no_query" and result.exit_code == 3


def test_missing_attempt_is_input_error(needs_node, run, endpoint):
    with pytest.raises(InputError, match="no live attempt"):
        reexecute_attempt(run, MINI, "rev_by_region", 7, endpoint)


def test_script_local_json_writes_artifacts(needs_node, run):
    run.append([_attempt("rev_by_region", "run: orders -> by_region", final_query_source="named_view")])
    proc = subprocess.run([sys.executable, str(SCRIPT), "--run", str(run.dir), "--set", str(MINI),
                           "--qid", "rev_by_region", "--local", "--json"],
                          check=False, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "ok" and doc["row_count"] == 3
    assert (run.dir / doc["prediction_path"]).is_file()


def test_script_refuses_both_endpoints():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--run", "r", "--set", "s", "--qid", "q",
                           "--local", "--mcp-url", "http://127.0.0.1:1/mcp"],
                          check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2


def test_script_on_folder_without_run_json_exits_3(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--run", str(tmp_path), "--set", str(MINI),
                           "--qid", "rev_by_region", "--local"],
                          check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr


# ---------- pure parts ----------

def test_final_call_prefers_recorded_query_name_and_givens():
    call = final_call(_attempt("q", "run: orders -> by_region", source_name="orders",
                               query_name="by_region", givens={"year": 2024}), "shop.malloy")
    assert call == {"source_name": "orders", "query_name": "by_region", "query": None,
                    "givens": {"year": 2024}, "model_path": "shop.malloy"}


def test_final_call_reads_named_view_text_only_when_source_says_named_view():
    text = "run: `orders` -> `by_region`"
    named = final_call(_attempt("q", text, final_query_source="named_view"), "m.malloy")
    declared = final_call(_attempt("q", text, final_query_source="declared"), "m.malloy")
    assert (named["source_name"], named["query_name"]) == ("orders", "by_region")
    assert declared["query"] == text and declared["query_name"] is None


def test_final_call_uses_attempt_model_path_over_set_default():
    call = final_call(_attempt("q", "run: x -> y", model_path="other.malloy"), "shop.malloy")
    assert call["model_path"] == "other.malloy"


def test_final_call_without_text_is_none():
    assert final_call(_attempt("q", "   "), "m.malloy") is None


@pytest.mark.parametrize(("value", "text"), [
    pytest.param(0.1 + 0.2, "0.30000000000000004", id="float-full-precision"),
    pytest.param(12, "12", id="int"),
    pytest.param(True, "true", id="bool"),
    pytest.param(None, "", id="null"),
    pytest.param([{"a": 1}], '[{"a":1}]', id="nested-json"),
    pytest.param("2024-03-01T10:15:00.000Z", "2024-03-01T10:15:00.000Z", id="timestamp-kept"),
])
def test_csv_cell_renders_values(value, text):
    assert csv_cell(value) == text


def test_csv_cell_date_column_midnight_becomes_plain_date():
    assert csv_cell("2024-03-01T00:00:00.000Z", is_date=True) == "2024-03-01"


def test_prediction_header_follows_schema_order_not_row_key_order():
    envelope = {"rows": [{"b": 2, "a": 1}],
                "_meta": {"schema": {"fields": [{"name": "a", "type": {"kind": "number_type"}},
                                                {"name": "b", "type": {"kind": "number_type"}}]}}}
    assert prediction_csv(envelope) == "a,b\n1,2\n"


def test_prediction_header_falls_back_to_row_keys():
    assert prediction_csv({"rows": [{"x": 1}, {"x": 2, "y": "z"}]}) == "x,y\n1,\n2,z\n"


def test_local_endpoint_knows_the_served_model_sha(needs_node, endpoint):
    from malloy_evals.endpoint.package import package_sha

    assert endpoint.model_sha == package_sha(MINI / "model")
    assert endpoint.served_revision == "local-" + endpoint.model_sha[:12]
    assert (endpoint.environment, endpoint.package, endpoint.model_path) == ("samples", "mini", "shop.malloy")


# ---------- budgets: a query over its budget is the answerer's failure (hostile input) ----------

NEST_BOMB = ("run: orders -> " + "{ group_by: status nest: n is " * 40 + "{ aggregate: order_count }"
             + " }" * 40)


CLIENT_WAIT_S = 20.0


@pytest.fixture(scope="module")
def short_endpoint():
    """The mini endpoint with a client that waits 20 s a call: its queries get a 5 s budget
    (server_query_timeout), a ceiling a loaded machine's honest query stays under, as the bomb
    never does. Opening it waits until both runners of its pool are up (its readiness)."""
    reason = node_runtime_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so runtime tests must run: {reason}")
        pytest.skip(reason)
    with open_endpoint(MINI, local=True, timeout=CLIENT_WAIT_S) as ep:
        yield ep


def test_server_budget_per_query_is_shorter_than_the_clients_wait():
    for client in (1.0, 8.0, 60.0, 120.0, 600.0):
        assert server_query_timeout(client) < client


# Regression: a hung final query made the client give up first (120 s) and the attempt was
# recorded as environment_failure; queries queued behind it failed the same way.
def test_final_query_over_its_budget_is_a_recorded_query_error(needs_node, run, short_endpoint):
    run.append([_attempt("rev_by_region", NEST_BOMB), _attempt("rev_by_region", "run: orders -> "
                "{ group_by: status; aggregate: order_count }", sample=1)])
    results: dict[int | None, object] = {}

    def go(sample: int | None) -> None:
        results[sample] = reexecute_attempt(run, MINI, "rev_by_region", sample, short_endpoint)

    threads = [threading.Thread(target=go, args=(s,)) for s in (None, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bomb, innocent = results[None], results[1]
    assert bomb.status == "query_error" and bomb.exit_code == 0
    assert f"did not finish within {server_query_timeout(CLIENT_WAIT_S):g} s" in bomb.error
    assert any("cheaper" in s for s in bomb.suggestions)
    assert innocent.status == "ok" and innocent.row_count == 3


def test_endpoint_fault_is_unmeasured_not_the_answerers_error(run):
    class BrokenEndpoint:
        model_path, label = "shop.malloy", "local"

        def execute(self, **call):
            raise McpToolError("Error loading package 'samples/mini': the runner is gone",
                               payload={"error": "...", "environmentFault": True})

    run.append([_attempt("rev_by_region", "run: orders -> { aggregate: order_count }")])
    with pytest.raises(UnmeasuredError, match="runner is gone"):
        reexecute_attempt(run, MINI, "rev_by_region", None, BrokenEndpoint())
    assert not run.artifact_dir("rev_by_region", None).exists() or not any(
        run.artifact_dir("rev_by_region", None).iterdir())


# ---------- --model DIR: a candidate package standing in for model/ ----------


def _candidate_copy(tmp_path):
    """A copy of the mini set with `model-candidate/` beside `model/`, one measure added."""
    import shutil

    copy = tmp_path / "mini"
    shutil.copytree(MINI, copy)
    cand = copy / "model-candidate"
    shutil.copytree(copy / "model", cand)
    text = (cand / "shop.malloy").read_text()
    (cand / "shop.malloy").write_text(
        text + "\n#(doc) Lines in the candidate model only.\n"
               "source: order_lines is orders extend { measure: line_total is count() }\n")
    return copy, cand


def test_local_endpoint_with_model_dir_serves_that_package_and_pins_its_sha(needs_node, tmp_path):
    from malloy_evals.endpoint.package import package_sha
    from malloy_evals.sets.eval_set import load_set

    copy, cand = _candidate_copy(tmp_path)
    with open_endpoint(load_set(copy, cand), local=True, timeout=60) as ep:
        envelope = ep.execute(query="run: order_lines -> { aggregate: line_total }")
    assert ep.model_sha == package_sha(cand) != package_sha(copy / "model")
    assert "line_total" in json.dumps(envelope)


def test_model_dir_with_mcp_url_is_a_usage_error(tmp_path):
    from malloy_evals.core.errors import UsageError
    from malloy_evals.sets.eval_set import load_set

    copy, cand = _candidate_copy(tmp_path)
    with pytest.raises(UsageError, match="--model"), \
            open_endpoint(load_set(copy, cand), mcp_url="http://127.0.0.1:1/mcp"):
        pass


@pytest.mark.parametrize("extra", [
    pytest.param(["--mcp-url", "http://127.0.0.1:1/mcp", "--model", "evals/bookshop/model"],
                 id="model_with_mcp_url"),
    pytest.param(["--local", "--model", "no/such/folder"], id="model_folder_missing"),
])
def test_script_model_flag_mistakes_exit_2(extra):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--run", "r", "--set", "s", "--qid", "q",
                           *extra], check=False, capture_output=True, text=True, timeout=600,
                          cwd=KIT_ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "--model" in proc.stderr


# ---------- one re-execution per distinct call in a scoring pass (issue 30) ----------


class _CountingEndpoint:
    """The real endpoint, counting the calls that reach it; `model_sha` None stands for a server
    that cannot say which model it serves."""

    def __init__(self, real, model_sha="known"):
        self.real, self.calls = real, []
        self.model_path, self.label = real.model_path, real.label
        self.model_sha, self.served_revision = (real.model_sha, real.served_revision) \
            if model_sha == "known" else (None, None)

    def execute(self, **call):
        self.calls.append(call)
        return self.real.execute(**call)


def test_a_pass_runs_each_distinct_call_once_and_each_attempt_keeps_its_own_artifacts(
        needs_node, run, endpoint):
    big = "run: big_orders"
    run.append([_attempt("rev_by_region", "run: orders -> { group_by: status; aggregate: "
                         "order_count }", sample=s) for s in (1, 2)]
               + [_attempt("big", big, sample=1), _attempt("big", big, sample=2, givens={"MIN_QTY": 3}),
                  _attempt("big", big, sample=3, givens={"MIN_QTY": 3}),
                  _attempt("bad", "run: orders -> { group_by: nope }", sample=1),
                  _attempt("bad", "run: orders -> { group_by: nope }", sample=2)])
    counting, pass_ = _CountingEndpoint(endpoint), Reexecutions()
    got = {(q, s): reexecute_attempt(run, MINI, q, s, counting, reexecutions=pass_)
           for q, s in [("rev_by_region", 1), ("rev_by_region", 2), ("big", 1), ("big", 2),
                        ("big", 3), ("bad", 1), ("bad", 2)]}
    # Four distinct calls (the givens tell two apart); a refused query is a result, shared too.
    assert len(counting.calls) == 4 and (pass_.executed, pass_.reused) == (4, 3)
    assert [_read_csv(run.resolve(got["big", s].prediction_path))[1] for s in (1, 2, 3)] == [
        ["4"], ["2"], ["2"]]
    for (qid, sample), first in (("rev_by_region", 2), ("rev_by_region", 1)), (("big", 3), ("big", 2)), \
            (("bad", 2), ("bad", 1)):
        twin, origin = got[qid, sample], got[first]
        assert twin.reused and twin.reused_from["sample"] == first[1] and not origin.reused
        provenance = json.loads((run.artifact_dir(qid, sample) / "reexecution.json").read_text())
        assert provenance["result"]["reused_from"]["qid"] == qid
        for name in ("prediction.csv", "envelope.json", "reexecute_error.json"):
            mine, theirs = run.artifact_dir(qid, sample) / name, run.artifact_dir(*first) / name
            assert mine.is_file() == theirs.is_file()
            if mine.is_file():
                assert mine.read_text() == theirs.read_text()
    assert got["bad", 2].status == "query_error" and got["bad", 2].error == got["bad", 1].error


def test_a_server_that_cannot_say_its_model_shares_nothing(needs_node, run, endpoint):
    run.append([_attempt("q", "run: orders -> { aggregate: order_count }", sample=s) for s in (1, 2)])
    anonymous, pass_ = _CountingEndpoint(endpoint, model_sha=None), Reexecutions()
    for sample in (1, 2):
        assert not reexecute_attempt(run, MINI, "q", sample, anonymous, reexecutions=pass_).reused
    assert len(anonymous.calls) == 2 and pass_.reused == 0


def test_a_call_the_endpoint_could_not_run_is_not_kept_for_the_next_attempt(run, endpoint):
    class FlakyEndpoint:
        model_path, label, model_sha, served_revision = "shop.malloy", "local", "m" * 64, "r"
        calls = 0

        def execute(self, **call):
            FlakyEndpoint.calls += 1
            if FlakyEndpoint.calls == 1:
                raise McpToolError("the runner is gone", payload={"environmentFault": True})
            return {"rows": [{"n": 1}]}

    run.append([_attempt("q", "run: orders -> { aggregate: n is count() }", sample=s) for s in (1, 2)])
    pass_ = Reexecutions()
    with pytest.raises(UnmeasuredError):
        reexecute_attempt(run, MINI, "q", 1, FlakyEndpoint(), reexecutions=pass_)
    second = reexecute_attempt(run, MINI, "q", 2, FlakyEndpoint(), reexecutions=pass_)
    assert second.status == "ok" and not second.reused and FlakyEndpoint.calls == 2


@pytest.mark.parametrize("code", [BUSY, INTERRUPTED])
def test_a_busy_or_interrupted_call_is_not_kept_for_the_next_attempt(run, code):
    # The error is about the endpoint's other clients, not the query: asking again may succeed.
    class CrowdedEndpoint:
        model_path, label, model_sha, served_revision = "shop.malloy", "local", "m" * 64, "r"
        calls = 0

        def execute(self, **call):
            CrowdedEndpoint.calls += 1
            if CrowdedEndpoint.calls == 1:
                raise McpToolError("the endpoint is busy", payload={"problems": [{"code": code}]})
            return {"rows": [{"n": 1}]}

    run.append([_attempt("q", "run: orders -> { aggregate: n is count() }", sample=s) for s in (1, 2)])
    pass_ = Reexecutions()
    first = reexecute_attempt(run, MINI, "q", 1, CrowdedEndpoint(), reexecutions=pass_)
    second = reexecute_attempt(run, MINI, "q", 2, CrowdedEndpoint(), reexecutions=pass_)
    assert first.status == "query_error" and second.status == "ok"
    assert not second.reused and CrowdedEndpoint.calls == 2 and pass_.reused == 0
