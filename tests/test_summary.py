"""The run summary: pass rate and its Wilson interval, denominators, INCOMPLETE, cost."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from malloy_evals.ledger.run import Run
from malloy_evals.report import figures as sm_figures
from malloy_evals.report import markdown as sm_markdown
from malloy_evals.report import stats as sm_stats
from tie_support import tied

KIT = Path(__file__).resolve().parents[1]

INFO = {"runId": "r1", "setName": "bookshop", "phase": "baseline"}


def attempt(qid, sample=None, **kw):
    return {"kind": "attempt", "event_id": f"att-{qid}-{sample}", "qid": qid, "sample": sample,
            "phase": "baseline", "submitted": True, "final_query": "run: x -> y",
            "answer_text": "a", **kw}


def score(qid, verdict, sample=None, **kw):
    # Bound to the attempt `attempt(qid, sample)` makes (ledger/ties.py)
    return {"kind": "score", "qid": qid, "sample": sample, "phase": "baseline",
            "verdict": verdict, "attempt_event_id": f"att-{qid}-{sample}", **kw}


def ctx_call(qid, ids, sample=None):
    return {"kind": "tool_call", "qid": qid, "sample": sample, "phase": "baseline",
            "tool": "get_context", "call_index": 0, "ranked_summary": {"entity_ids": ids}}


def exec_call(qid, sample=None):
    return {"kind": "tool_call", "qid": qid, "sample": sample, "phase": "baseline",
            "tool": "execute_query", "call_index": 1, "query": "run: x -> y"}


def retrieval_row(qid, verdict, recall, sample=None, **kw):
    return {"kind": "retrieval_score", "qid": qid, "sample": sample, "phase": "baseline",
            "verdict": verdict, "failed": verdict == "no_match", "recall": recall,
            "precision": 1.0, "coverage": "covered", "where_to_fix": None, **kw}


class FakeSet:
    """Only what the summary reads: each case's golden."""

    def __init__(self, statuses: dict[str, str | None]):
        self.statuses = statuses

    def case(self, qid):
        if qid not in self.statuses:
            raise KeyError(qid)
        golden = {"kind": "scalar"}
        if self.statuses[qid] is not None:
            golden["status"] = self.statuses[qid]
        return SimpleNamespace(qid=qid, golden=golden)


# --- Wilson interval, checked by hand -------------------------------------------------------


def test_ten_of_sixteen_prints_the_spec_example():
    # p = 0.625, z^2 = 3.841459, z^2/n = 0.240091, denominator 1.240091
    # centre = (0.625 + 0.120046) / 1.240091 = 0.600801
    # half   = (1.959964 / 1.240091) * sqrt(0.625*0.375/16 + 3.841459/1024)
    #        = 1.580502 * sqrt(0.014648 + 0.003751) = 1.580502 * 0.135646 = 0.214390
    # interval 0.386410 .. 0.815188
    rate = sm_figures.pass_rate(10, 16)
    assert rate.text == "pass rate 62.5% (10/16; 95% CI 38.6-81.5%)"
    assert rate.ci_low == pytest.approx(0.386410, abs=1e-6)
    assert rate.ci_high == pytest.approx(0.815188, abs=1e-6)


def test_three_of_four_interval_matches_hand_arithmetic():
    # p = 0.75, z^2/n = 0.960365, denominator 1.960365
    # centre = (0.75 + 0.480183) / 1.960365 = 0.627527
    # half   = (1.959964 / 1.960365) * sqrt(0.1875/4 + 3.841459/64) = 0.999795 * 0.326953 = 0.326886
    low, high = sm_stats.wilson_interval(3, 4)
    assert low == pytest.approx(0.627527 - 0.326886, abs=2e-6)
    assert high == pytest.approx(0.627527 + 0.326886, abs=2e-6)
    assert sm_figures.pass_rate(3, 4).text == "pass rate 75.0% (3/4; 95% CI 30.1-95.4%)"


def test_zero_of_four_has_a_zero_lower_bound_and_a_nonzero_upper_bound():
    # p = 0: centre = (3.841459/8) / 1.960365 = 0.244945 = half, so the interval is 0 .. 0.489891
    rate = sm_figures.pass_rate(0, 4)
    assert rate.text == "pass rate 0.0% (0/4; 95% CI 0.0-49.0%)"


def test_nothing_decided_has_no_rate():
    rate = sm_figures.pass_rate(0, 0)
    assert rate.rate is None and rate.ci_low is None
    assert sm_stats.wilson_interval(0, 0) is None


# --- denominators ---------------------------------------------------------------------------


def test_near_match_needs_human_and_null_are_counted_outside_the_denominator():
    events = [
        attempt("q1"), score("q1", "match"),
        attempt("q2"), score("q2", "match"),
        attempt("q3"), score("q3", "match"),
        attempt("q4"), score("q4", "no_match"),
        attempt("q5"), score("q5", "near_match"),
        attempt("q6"), score("q6", "needs_human", confidence=4),
        attempt("q7"), score("q7", None, reason="not_submitted"),
        attempt("q8"), score("q8", None, reason="judge_error: timed out"),
        attempt("q9"), score("q9", None, reason="judge_error: 500"),
    ]
    s = sm_figures.summarize_events(INFO, events)
    assert s.verdicts == {"match": 3, "no_match": 1, "near_match": 1, "needs_human": 1, "null": 3}
    assert s.null_reasons == {"judge_error": 2, "not_submitted": 1}
    assert (s.pass_rate.passed, s.pass_rate.decided) == (3, 4)
    assert s.headline == s.pass_rate.text
    assert s.status == "complete"
    assert [r.qid for r in s.cases if r.counted] == ["q1", "q2", "q3", "q4"]


def test_golden_verified_wrong_in_the_set_is_out_of_everything_and_listed():
    events = [attempt("q1"), score("q1", "match"),
              attempt("q2"), score("q2", None, reason="golden_verified_wrong")]
    s = sm_figures.summarize_events(INFO, events, FakeSet({"q1": None, "q2": "verified_wrong"}))
    assert s.verdicts["null"] == 0
    assert s.null_reasons == {}
    assert s.excluded_verified_wrong == 1
    assert [(d["qid"], d["declared_by"]) for d in s.doubted_goldens] == [("q2", "set")]
    assert (s.pass_rate.passed, s.pass_rate.decided) == (1, 1)


def test_judge_declaring_the_golden_verified_wrong_removes_a_no_match_from_the_rate():
    events = [attempt("q1"), score("q1", "match"),
              attempt("q2"), score("q2", "no_match", gold_status="verified_wrong",
                                   gold_note="the key counts cancelled orders")]
    s = sm_figures.summarize_events(INFO, events, FakeSet({"q1": "verified", "q2": "verified"}))
    assert (s.pass_rate.passed, s.pass_rate.decided) == (1, 1)
    assert s.verdicts["no_match"] == 0
    assert s.doubted_goldens[0]["declared_by"] == "judge"
    assert s.doubted_goldens[0]["gold_note"] == "the key counts cancelled orders"
    row = next(r for r in s.cases if r.qid == "q2")
    assert row.excluded == "verified_wrong" and not row.counted


def test_suspect_golden_is_listed_but_still_counted():
    events = [attempt("q1"), score("q1", "no_match", gold_status="suspect")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.pass_rate.decided == 1
    assert s.doubted_goldens[0]["excluded"] is False


def test_verified_wrong_attempt_is_left_out_of_the_cascade():
    events = [attempt("q1"), score("q1", "match"), retrieval_row("q1", "match", 1.0, groups=1),
              attempt("q2"), score("q2", "match", gold_status="verified_wrong"),
              retrieval_row("q2", "match", 0.5, groups=2)]
    s = sm_figures.summarize_events(INFO, events)
    assert s.cascade["total"] == 1
    assert s.cascade["rungs"]["delivered, right"] == 1
    assert s.retrieval["mean_recall"] == 1.0
    assert [r.cascade_rung for r in s.cases] == ["delivered, right", None]
    assert s.warnings == []


def test_cascade_overlay_counts_a_match_that_stopped_on_not_retrieved():
    events = [attempt("q1"), score("q1", "match"), retrieval_row("q1", "match", 0.5, groups=2),
              attempt("q2"), score("q2", "no_match"),
              retrieval_row("q2", "no_match", 1.0, groups=1, where_to_fix="delivered, wrong"),
              attempt("q3"), score("q3", "needs_human"),
              retrieval_row("q3", "needs_human", 1.0, groups=1)]
    cas = sm_figures.summarize_events(INFO, events).cascade
    assert cas["rungs"]["not retrieved"] == 1
    assert cas["overlays"]["not retrieved"] == 1
    assert cas["rungs"]["delivered, wrong"] == 1
    assert cas["rungs"]["not scored"] == 1
    assert cas["passes"] == 1


def test_attempt_without_a_retrieval_row_is_warned_about():
    events = [attempt("q1"), score("q1", "match")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.cascade is None
    assert "q1" in s.warnings[0]


# --- INCOMPLETE -----------------------------------------------------------------------------


def test_truncated_attempt_makes_the_run_incomplete_with_no_rate_and_repair_commands():
    events = [attempt("q1"), score("q1", "match"),
              attempt("q2", truncated=True), score("q2", None, reason="answerer_truncated")]
    s = sm_figures.summarize_events(INFO, events, run_dir="runs/r1", set_dir="evals/bookshop",
                            judge_spec="replay", endpoint_flag="--local")
    assert s.status == "incomplete"
    assert s.pass_rate is None
    assert s.headline == "INCOMPLETE: 1 truncated (q2), 0 contaminated; no pass rate"
    assert s.incomplete.truncated == ["q2"] and s.incomplete.qids == ["q2"]
    assert s.incomplete.commands[0].endswith(
        "record_attempt.py --run runs/r1 --set evals/bookshop --qid q2 "
        "--transcript <new-transcript.jsonl>")
    assert s.incomplete.commands[-1].endswith(
        "score_run.py --run runs/r1 --set evals/bookshop --judge replay --local "
        "--only q2 --rescore")
    assert re.search(r"pass rate \d", sm_markdown.render_markdown(s)) is None


def test_incomplete_headline_lists_each_counts_own_qids():
    # One shared list after "1 contaminated" read as if every listed qid were contaminated.
    events = [attempt("q1", truncated=True), score("q1", None, reason="answerer_truncated"),
              attempt("q2", contaminated=True), score("q2", None, reason="contaminated"),
              attempt("q3", contaminated=True), score("q3", None, reason="contaminated")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.headline == "INCOMPLETE: 1 truncated (q1), 2 contaminated (q2, q3); no pass rate"


def test_repair_command_for_a_host_judged_run_starts_with_emit():
    # `--judge host` alone is refused by score_run: the printed command must be runnable.
    events = [attempt("q1", truncated=True), score("q1", None, reason="answerer_truncated")]
    s = sm_figures.summarize_events(INFO, events, run_dir="runs/r1", set_dir="evals/bookshop",
                            judge_spec="host", endpoint_flag="--local")
    assert s.incomplete.commands[-1].endswith(
        "score_run.py --run runs/r1 --set evals/bookshop --judge host --emit --local "
        "--only q1 --rescore")


def test_contamination_unknown_counts_as_contaminated():
    events = [attempt("q1", contaminated="unknown"), score("q1", None, reason="contaminated"),
              attempt("q2", contaminated=False), score("q2", "match")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.status == "incomplete"
    assert s.incomplete.contaminated == ["q1"]


def test_contamination_known_only_to_the_score_still_counts():
    events = [attempt("q1"), score("q1", None, reason="contaminated", contaminated=True)]
    s = sm_figures.summarize_events(INFO, events)
    assert s.incomplete.contaminated == ["q1"]


def test_clean_run_with_contaminated_false_keeps_its_rate():
    events = [attempt("q1", contaminated=False, truncated=False), score("q1", "match")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.status == "complete" and s.incomplete is None
    assert s.pass_rate.text == "pass rate 100.0% (1/1; 95% CI 20.7-100.0%)"


def test_incomplete_command_lists_each_sample_and_one_rescore_over_sorted_qids():
    events = [attempt("q9", sample=1, truncated=True), attempt("q3", contaminated=True)]
    s = sm_figures.summarize_events(INFO, events)
    assert s.incomplete.qids == ["q3", "q9"]
    assert any("--qid q9 --sample 1" in c for c in s.incomplete.commands)
    assert "--only q3,q9 --rescore" in s.incomplete.commands[-1]


# Regression: environment_failure nulls left a run "complete", its rate over what happened to
# be measured (0/2 instead of 0/4).
def test_environment_failure_makes_the_run_incomplete_with_a_rescore_command():
    events = [attempt("q1"), score("q1", "no_match"),
              attempt("q2"), score("q2", None, reason="environment_failure: endpoint down")]
    s = sm_figures.summarize_events(INFO, events, run_dir="runs/r1", set_dir="evals/bookshop",
                                    judge_spec="replay", endpoint_flag="--local")
    assert s.status == "incomplete" and s.pass_rate is None
    assert s.headline == ("INCOMPLETE: 0 truncated, 0 contaminated, 1 environment failure (q2); "
                          "no pass rate")
    assert s.incomplete.environment_failures == ["q2"] and s.incomplete.qids == ["q2"]
    assert s.incomplete.commands == [
        (".venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/r1 "
         "--set evals/bookshop --judge replay --local --only q2 --rescore")]
    assert "environment failures (nothing measured; the re-score retries them): 1 (q2)" in (
        sm_markdown.render_markdown(s))


def test_environment_failure_beside_a_truncated_attempt_is_in_the_one_rescore():
    events = [attempt("q1", truncated=True), score("q1", None, reason="answerer_truncated"),
              attempt("q2"), score("q2", None, reason="environment_failure: endpoint down")]
    s = sm_figures.summarize_events(INFO, events)
    recorded = [c for c in s.incomplete.commands if "record_attempt.py" in c]
    assert len(recorded) == 1 and "--qid q1" in recorded[0]
    assert not any("record_attempt.py" in c and "q2" in c for c in s.incomplete.commands)
    assert "--only q1,q2 --rescore" in s.incomplete.commands[-1]


def test_other_null_reasons_leave_the_run_complete():
    events = [attempt("q1"), score("q1", "match"),
              attempt("q2"), score("q2", None, reason="judge_unparseable")]
    assert sm_figures.summarize_events(INFO, events).status == "complete"


# --- cost, unscored, rendering --------------------------------------------------------------


def test_cost_sums_dollars_turns_calls_and_entities_per_answer():
    events = [
        attempt("q1", cost_usd=0.10, num_turns=4), score("q1", "match", judge_cost_usd=0.01),
        ctx_call("q1", ["measure:orders:revenue", "dimension:orders:status"]),
        ctx_call("q1", ["measure:orders:revenue"]), exec_call("q1"),
        attempt("q2", cost_usd=None, num_turns=2), score("q2", "no_match", judge_cost_usd=0.02),
        exec_call("q2"), exec_call("q2"),
    ]
    cost = sm_figures.summarize_events(INFO, events).cost
    assert cost["answerer_usd"] == pytest.approx(0.10)
    assert cost["answerer_unknown"] == 1
    assert cost["judge_usd"] == pytest.approx(0.03)
    assert cost["turns"] == 6
    assert cost["get_context_calls"] == 2
    assert cost["execute_query_calls"] == 3
    # q1 delivered 2 distinct entities, q2 none: (2 + 0) / 2
    assert cost["entities_delivered_per_answer"] == 1.0


def test_open_issues_are_listed_until_marked_fixed():
    issue = {"kind": "issue", "issue_id": "r1:x", "qids": ["q1"], "primary_code": "WRONG-FIELD",
             "owner": "agent-skill", "component": "construction", "diagnosis": "d"}
    events = [attempt("q1"), score("q1", "match"), issue,
              {"kind": "issue_status", "issue_id": "r1:x", "status": "open"}]
    listed = sm_figures.summarize_events(INFO, events)
    assert [i["issue_id"] for i in listed.open_issues] == ["r1:x"]
    assert "- r1:x [open] WRONG-FIELD -> agent-skill: q1" in sm_markdown.render_markdown(listed)
    fixed = sm_figures.summarize_events(INFO, [*events, {"kind": "issue_status", "issue_id": "r1:x",
                                                         "status": "fixed"}])
    assert fixed.open_issues == [] and "Open issues" not in sm_markdown.render_markdown(fixed)


def test_a_run_with_no_attempts_says_n_a_for_entities_per_answer_never_none():
    # Issue 16 item 12: text output printed `entities delivered per answer: None`.
    text = sm_markdown.render_markdown(sm_figures.summarize_events(INFO, []))
    assert "entities delivered per answer: n/a" in text
    assert "None" not in text


def test_attempt_without_a_score_is_listed_as_unscored_not_counted():
    events = [attempt("q1"), attempt("q2"), score("q2", "match")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.unscored == ["q1"]
    assert s.scored == 1 and s.attempts == 2
    # Issue 25: a run with an unscored attempt is partial; its rate is named as over the scored.
    assert (s.status, s.pass_rate, s.exit_code) == ("partial", None, 3)
    assert s.headline == ("PARTIAL: 1 unscored, 0 stale; no pass rate (over the 1 attempt(s) "
                          "scored under current pins only: 100.0% (1/1; 95% CI 20.7-100.0%))")


def test_results_files_carry_the_same_headline(tmp_path):
    events = [attempt("q1"), score("q1", "match", must_not_use_hits=[]),
              attempt("q2"), score("q2", "no_match", must_not_use_hits=["orders.list_price"],
                                   judge_verdict="match")]
    s = sm_figures.summarize_events(INFO, events)
    md, js = sm_markdown.write_results(tmp_path, s)
    doc = json.loads(js.read_text())
    text = md.read_text()
    assert doc["pass_rate"]["text"] in text
    assert doc["headline"] == "pass rate 50.0% (1/2; 95% CI 9.5-90.5%)"
    assert doc["vetoes"] == [{"qid": "q2", "sample": None, "label": "q2",
                              "hits": ["orders.list_price"], "judge_verdict": "match"}]
    assert "orders.list_price" in text
    assert len(doc["cases"]) == 2


# --- the README's DuckDB queries agree with the summary -------------------------------------


def _readme_sql_blocks() -> list[str]:
    text = (KIT / "README.md").read_text(encoding="utf-8")
    return [m.strip() for m in re.findall(r"```sql\n(.*?)```", text, re.DOTALL)]


def test_readme_duckdb_queries_count_the_verdicts_of_a_ledger(tmp_path, monkeypatch):
    duckdb = pytest.importorskip("duckdb", reason="duckdb is in the dev extra")
    set_dir = tmp_path / "s"
    set_dir.mkdir()
    (set_dir / "set.json").write_text(json.dumps({
        "name": "s", "datasetVersion": 1, "targetPackage": "p", "targetModelPath": "m.malloy"}))
    (set_dir / "cases.jsonl").write_text(
        "".join(json.dumps({"qid": q, "question": q}) + "\n" for q in ("q1", "q2", "q3")))
    run = Run.create(tmp_path / "runs" / "r1", set_dir, "m", run_id="r1")
    run.append([attempt(q) for q in ("q1", "q2", "q3")])
    first = run.append_event(tied(run.dir, score("q1", "no_match")))
    run.append([{"kind": "void", "target_event_id": first["event_id"], "reason": "re-scored"},
                tied(run.dir, score("q1", "match")), tied(run.dir, score("q2", "match")),
                score("q3", None, reason="not_submitted")])
    all_scores, live_scores = _readme_sql_blocks()
    monkeypatch.chdir(tmp_path)
    counted = dict(duckdb.sql(all_scores).fetchall())
    live = dict(duckdb.sql(live_scores).fetchall())
    assert counted == {"match": 2, "no_match": 1, None: 1}
    s = sm_figures.summarize(run, None)
    assert live == {"match": s.verdicts["match"], None: s.verdicts["null"]} == {"match": 2, None: 1}


def test_coverage_section_of_a_subset_report_does_not_claim_the_whole_set():
    # A check_coverage --only report covers 2 cases; the summary must not call it the whole set.
    report = {"cases": 2, "decided": 2, "modelled": 1, "coverage": 0.5,
              "by_verdict": {"MODELLED": 1, "MISSING": 1}, "compiledSurface": "read"}
    s = sm_figures.summarize_events(INFO, [attempt("q1"), score("q1", "match")], coverage_report=report)
    text = sm_markdown.render_markdown(s)
    assert "the whole set" not in text
    assert "over the report's own 2 cases" in text and "1 of 2 decided cases modelled" in text


def test_repair_commands_reach_a_run_typed_relative_to_another_folder(tmp_path, monkeypatch):
    # The printed commands run from the kit's root; `runs/r1` typed in /tmp/x must not stay
    # relative there. Paths that already work from the kit's root are printed as typed.
    set_dir = tmp_path / "s"
    set_dir.mkdir()
    (set_dir / "set.json").write_text(json.dumps({
        "name": "s", "datasetVersion": 1, "targetPackage": "p", "targetModelPath": "m.malloy"}))
    (set_dir / "cases.jsonl").write_text("")
    run = Run.create(tmp_path / "runs" / "r1", set_dir, "m", run_id="r1")
    run.append([attempt("q1", truncated=True), score("q1", None, reason="answerer_truncated")])
    (tmp_path / "replies.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    s = sm_figures.summarize(run, None, run_label="runs/r1", set_label=str(KIT / "evals" / "bookshop"),
                     judge_spec="hand:replies.jsonl", endpoint_flag="--local")
    record, rescore = s.incomplete.commands
    assert f"--run {tmp_path / 'runs' / 'r1'} --set {KIT / 'evals' / 'bookshop'} " in record
    assert f"--judge hand:{tmp_path / 'replies.jsonl'} --local" in rescore
    monkeypatch.chdir(KIT)
    assert sm_figures.from_kit_root("evals/bookshop") == "evals/bookshop"


def test_repair_command_for_an_attempt_recorded_from_a_host_log_asks_for_a_host_log():
    events = [attempt("q1", contaminated=True,
                      transcript_path="artifacts/q1/_/host-log.json"),
              score("q1", None, reason="contaminated"),
              attempt("q2", truncated=True, transcript_path="artifacts/q2/_/transcript.jsonl"),
              score("q2", None, reason="answerer_truncated")]
    s = sm_figures.summarize_events(INFO, events, run_dir="runs/r1", set_dir="evals/bookshop",
                            judge_spec="replay", endpoint_flag="--local")
    assert s.incomplete.commands[0].endswith(
        "--qid q1 --host-log <new-host-log.json> --answer-file <new-answer.md>")
    assert s.incomplete.commands[1].endswith("--qid q2 --transcript <new-transcript.jsonl>")


# Regression (hostile input): RESULTS.md and summary.json planted as links were written through.
def test_results_files_replace_planted_links(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("RESULTS.md", "summary.json"):
        (outside / name).write_text("theirs")
        (run_dir / name).symlink_to(outside / name)
    s = sm_figures.summarize_events(INFO, [attempt("q1"), score("q1", "match")])
    md, js = sm_markdown.write_results(run_dir, s)
    assert not md.is_symlink() and not js.is_symlink()
    assert md.read_text().startswith("#") and json.loads(js.read_text())["status"] == "complete"
    assert {p.read_text() for p in outside.iterdir()} == {"theirs"}



# --- a person's verdict (human_verdict) and golden drift ------------------------------------


def human(qid, verdict, sample=None, **kw):
    return {"kind": "human_verdict", "qid": qid, "sample": sample, "phase": "baseline",
            "verdict": verdict, "why": "read the rows", "settled_by": "Dana",
            "attempt_event_id": f"att-{qid}-{sample}", **kw}


def test_live_human_verdict_replaces_the_judges_and_is_counted():
    events = [attempt("q1"), score("q1", "match"),
              attempt("q2"), score("q2", "needs_human", confidence=4, why="unsure"),
              attempt("q3"), score("q3", "near_match"),
              human("q2", "match"), human("q3", "near_match")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.verdicts == {"match": 2, "no_match": 0, "near_match": 1, "needs_human": 0, "null": 0}
    assert (s.pass_rate.passed, s.pass_rate.decided) == (2, 2)
    assert (s.settled_by_person, s.overruled_by_person) == (2, 1)
    row = next(r for r in s.cases if r.qid == "q2")
    assert (row.verdict, row.settled_by, row.judge_verdict, row.why) == ("match", "Dana",
                                                                         "needs_human", "read the rows")
    text = sm_markdown.render_markdown(s)
    assert "2 verdict(s) settled by a person (review.py)" in text and "1 of them overrule it" in text
    assert "settled by Dana (judge said needs_human)" in text


def test_human_verdict_never_replaces_a_contaminated_null():
    events = [attempt("q1", contaminated=True), score("q1", None, reason="contaminated"),
              human("q1", "match")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.status == "incomplete" and s.settled_by_person == 0
    assert s.verdicts["null"] == 1


def test_human_verdict_for_an_earlier_recording_of_the_attempt_does_not_apply():
    events = [attempt("q1", event_id="a2"), score("q1", "no_match", attempt_event_id="a2"),
              human("q1", "match", attempt_event_id="a1")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.verdicts["no_match"] == 1 and s.settled_by_person == 0


def test_person_vouching_for_a_doubted_golden_brings_the_attempt_back_into_the_rate():
    events = [attempt("q1"), score("q1", "no_match", gold_status="verified_wrong", gold_note="x"),
              human("q1", "no_match", gold_status="verified")]
    s = sm_figures.summarize_events(INFO, events)
    assert s.excluded_verified_wrong == 0 and s.doubted_goldens == []
    assert (s.pass_rate.passed, s.pass_rate.decided) == (0, 1)


def test_golden_drift_pinned_on_the_run_is_in_the_headline_and_its_own_section():
    events = [attempt("q1"), score("q1", "match")]
    s = sm_figures.summarize_events({**INFO, "goldenDrift": ["q1"]}, events)
    assert s.headline.startswith(s.pass_rate.text)
    assert "GOLDEN DRIFT in 1 case(s) (q1)" in s.headline
    assert "## Golden drift" in sm_markdown.render_markdown(s)


def test_a_ledger_written_by_the_public_loop_is_summarised_in_the_kits_terms():
    run = Run.open(KIT / "tests" / "fixtures" / "public_loop" / "run")
    s = sm_figures.summarize(run, None)
    # contaminated "true" counts (INCOMPLETE); "false" does not; no_saved_verdict is a judge_error
    assert s.status == "incomplete" and s.incomplete.contaminated == ["nur_avg_line"]
    by_qid = {r.qid: r for r in s.cases}
    assert by_qid["nur_revenue_h1_2024"].contaminated is False
    assert by_qid["nur_revenue_h1_2024"].n_get_context == 1
    assert by_qid["nur_revenue_h1_2024"].entities_delivered == 2
    assert s.null_reasons == {"contaminated": 1, "judge_error": 1}
