"""The evidence gathered for each attempt's section: redacted, capped, in call order, never read
or linked from outside the run folder."""

from __future__ import annotations

import json
import os

import pytest
from malloy_evals.ledger.run import Run
from malloy_evals.report import details as d
from malloy_evals.sets.eval_set import load_set
from report_support import SAMPLE_SET
from tie_support import tied

SECRET = "sk-ant-api03-abcdefghijklmnopqrstu"


@pytest.fixture
def run(tmp_path):
    return Run.create(tmp_path / "run", SAMPLE_SET, "test-answerer", run_id="details-1")


@pytest.fixture(scope="module")
def eval_set():
    return load_set(SAMPLE_SET)


def _attempt(qid="bk_total_revenue", sample=None, **fields):
    event = {"kind": "attempt", "event_id": f"att-{qid}", "qid": qid, "sample": sample,
             "submitted": True,
             "final_query": "run: orders -> {aggregate: n is count()}", "answer_text": "42"}
    event.update(fields)
    return event


def _one(run, eval_set, key=("bk_total_revenue", None)):
    view = run.view()
    return d.attempt_details(run, eval_set, view, [run.key(*key)], d.issues_of(view.events))[0]


def test_a_secret_in_the_answer_query_and_calls_shows_as_redacted(run, eval_set):
    run.append([_attempt(answer_text=f"used {SECRET} to call", final_query=f"-- {SECRET}"),
                {"kind": "tool_call", "qid": "bk_total_revenue", "sample": None,
                 "tool": "get_context", "call_index": 0,
                 "targets": ["any: Bearer abcdefghijklmnop"]}])
    a = _one(run, eval_set)
    assert a.answer.text == "used [REDACTED] to call"
    assert a.final_query.text == "-- [REDACTED]"
    assert a.calls[0].targets == ["any: Bearer [REDACTED]"]


def test_an_environment_secret_in_a_judges_why_is_redacted(run, eval_set, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-1234567890")
    run.append([_attempt(), tied(run.dir, {"kind": "score", "qid": "bk_total_revenue", "sample": None,
                             "verdict": "match", "why": "the header had tok-1234567890"}, "att-bk_total_revenue")])
    assert _one(run, eval_set).judged.why.text == "the header had [REDACTED]"


def test_a_secret_in_the_reexecuted_rows_is_redacted(run, eval_set):
    csv = run.write_artifact("bk_total_revenue", None, "prediction.csv", f"note\n{SECRET}\n")
    run.append([_attempt(), tied(run.dir, {"kind": "score", "qid": "bk_total_revenue", "sample": None,
                             "verdict": "no_match", "prediction_path": run.relpath(csv)}, "att-bk_total_revenue")])
    assert _one(run, eval_set).prediction.rows == [{"note": "[REDACTED]"}]


def test_a_secret_one_attempt_shows_is_blanked_in_the_attempts_after_it(run, eval_set):
    # One redactor serves the whole page: a token learned from where it stands in one attempt
    # (after `Bearer`) is blanked in a later one that quotes it bare.
    token = "zq8Xw2Lm4Np6Rt0Vy3"
    run.append([_attempt("bk_total_revenue", answer_text=f"sent Bearer {token}"),
                _attempt("bk_revenue_2024", answer_text=f"the value was {token}")])
    view = run.view()
    first, second = d.attempt_details(run, eval_set, view, [run.key("bk_total_revenue", None),
                                                             run.key("bk_revenue_2024", None)])
    assert first.answer.text == "sent Bearer [REDACTED]"
    assert second.answer.text == "the value was [REDACTED]"


def test_redacted_returns_a_clean_value_untouched_and_blanks_a_dirty_one():
    clean = {"a": ["x", 1, None]}
    assert d.redacted(clean) is clean
    assert d.redacted({"a": [f"k {SECRET}"], "b": 2}) == {"a": ["k [REDACTED]"], "b": 2}


def test_a_long_answer_is_cut_and_says_how_much(run, eval_set):
    run.append([_attempt(answer_text="x" * (d.ANSWER_CHARS + 123))])
    answer = _one(run, eval_set).answer
    assert (len(answer.text), answer.cut) == (d.ANSWER_CHARS, 123)


def test_rows_are_capped_and_keep_the_full_count_from_the_envelope(run, eval_set):
    csv = run.write_artifact("bk_total_revenue", None, "prediction.csv",
                             "n\n" + "".join(f"{i}\n" for i in range(40)))
    run.write_artifact("bk_total_revenue", None, "envelope.json", {"row_count": 40})
    run.append([_attempt(), tied(run.dir, {"kind": "score", "qid": "bk_total_revenue", "sample": None,
                             "verdict": "match", "prediction_path": run.relpath(csv)}, "att-bk_total_revenue")])
    rows = _one(run, eval_set).prediction
    assert (len(rows.rows), rows.total, rows.path) == (
        d.ROWS_SHOWN, 40, "artifacts/bk_total_revenue/_/prediction.csv")
    assert rows.rows[0] == {"n": 0}


def test_a_reexecution_error_is_read_from_the_scores_own_artifact(run, eval_set):
    err = run.write_artifact("bk_total_revenue", None, "reexecute_error.json",
                             {"error": "Unknown function 'date_diff'"})
    run.append([_attempt(), tied(run.dir, {"kind": "score", "qid": "bk_total_revenue", "sample": None,
                             "verdict": "no_match", "prediction_path": run.relpath(err)}, "att-bk_total_revenue")])
    a = _one(run, eval_set)
    assert (a.prediction, a.prediction_error.text) == (None, "Unknown function 'date_diff'")


def test_tool_calls_come_in_call_order_with_what_was_asked_and_returned(run, eval_set):
    ids = [f"measure:order_items:m{i}" for i in range(15)]
    run.append([_attempt(),
                {"kind": "tool_call", "qid": "bk_total_revenue", "sample": None,
                 "tool": "execute_query", "call_index": 1, "query": "run: x", "error": "boom"},
                {"kind": "tool_call", "qid": "bk_total_revenue", "sample": None,
                 "tool": "get_context", "call_index": 0, "targets": ["measure: revenue"],
                 "ranked_summary": {"entity_ids": ids, "hits": [], "result_count": 15,
                                    "doc_tokens": []}}])
    calls = _one(run, eval_set).calls
    assert [(c.index, c.tool) for c in calls] == [(0, "get_context"), (1, "execute_query")]
    assert calls[0].targets == ["measure: revenue"]
    assert (calls[0].returned, calls[0].returned_total) == (ids[:d.ENTITIES_SHOWN], 15)
    assert (calls[1].query.text, calls[1].error.text) == ("run: x", "boom")


def test_a_call_that_ran_a_named_view_says_which(run, eval_set):
    run.append([_attempt(), {"kind": "tool_call", "qid": "bk_total_revenue", "sample": None,
                             "tool": "execute_query", "call_index": 0, "query": None,
                             "source_name": "order_items", "query_name": "by_genre"}])
    call = _one(run, eval_set).calls[0]
    assert (call.query, call.named) == (None, "order_items -> by_genre")


def test_an_artifact_reached_through_a_link_out_of_the_run_is_neither_read_nor_linked(
        run, eval_set, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "prediction.csv").write_text("secret\n1\n")
    folder = run.artifact_dir("bk_total_revenue", None)
    folder.mkdir(parents=True)
    os.symlink(outside, folder / "link")
    run.append([_attempt(transcript_path="artifacts/bk_total_revenue/_/link/prediction.csv"),
                {"kind": "score", "qid": "bk_total_revenue", "sample": None, "verdict": "match",
                 "prediction_path": "artifacts/bk_total_revenue/_/link/prediction.csv"}])
    a = _one(run, eval_set)
    assert (a.prediction, a.transcript_path) == (None, None)


def test_an_artifact_that_does_not_exist_is_not_linked(run, eval_set):
    run.append([_attempt(transcript_path="artifacts/bk_total_revenue/_/transcript.jsonl")])
    assert _one(run, eval_set).transcript_path is None


def test_golden_rows_come_from_the_sets_file_capped_with_their_count(run, eval_set):
    key = ("bk_monthly_revenue_2025", None)
    run.append([_attempt("bk_monthly_revenue_2025")])
    golden = _one(run, eval_set, key).golden
    assert (golden.kind, golden.status, golden.rows.total) == ("rows", "verified", 6)
    assert golden.rows.path == "goldens/bk_monthly_revenue_2025.csv"
    assert golden.rubric is not None and golden.must_not_use


def test_an_attempt_without_a_set_still_has_its_answer(run):
    run.append([_attempt(answer_text="ninety thousand")])
    a = d.attempt_details(run, None, run.view(), [run.key("bk_total_revenue", None)])[0]
    assert (a.question, a.golden, a.answer.text) == (None, None, "ninety thousand")


def test_issues_carry_their_latest_status_and_name_the_attempts_they_cover(run, eval_set):
    run.append([_attempt(),
                {"kind": "issue", "issue_id": "c1", "qids": ["bk_total_revenue"],
                 "primary_code": "WRONG-FIELD", "component": "construction",
                 "owner": "agent-skill", "diagnosis": "used net revenue"},
                {"kind": "issue_status", "issue_id": "c1", "status": "open"},
                {"kind": "issue_status", "issue_id": "c1", "status": "fixed"}])
    issues = d.issues_of(run.live())
    assert [(i.issue_id, i.owner, i.status) for i in issues] == [("c1", "agent-skill", "fixed")]
    assert _one(run, eval_set).issues == ["c1"]


def test_text_of_keeps_none_as_none_and_says_nothing_was_cut():
    assert d.text_of(None, 10) is None
    assert d.text_of("short", 10) == d.Text("short", 0)
    assert json.loads(d._json_text({"revenue": 1.5}, 100).text) == {"revenue": 1.5}


# Regression (one redaction): the pages used a second redaction of their own, which blanked a
# database password inside its URL but left it standing alone in the next field.
def test_a_secret_seen_anywhere_in_a_value_is_blanked_everywhere_in_it():
    value = {"error": "connect postgres://app:Pw0rdHidden77@db.example/shop failed",
             "why": "the answer printed Pw0rdHidden77", "revenue": 90963.84}
    out = d.redacted(value)
    assert "Pw0rdHidden77" not in json.dumps(out) and out["revenue"] == 90963.84
    assert out["why"] == "the answer printed [REDACTED]"
