"""The kit's vocabularies read once: what counts as contaminated, decided alike by every caller."""

from __future__ import annotations

import json

import pytest
from judge_support import CASES, FakeProvider, make_run, make_set, verdict
from malloy_evals.answer.harness.harness import AttemptOutcome as HarnessOutcome
from malloy_evals.answer.harness.harness import outcome_words
from malloy_evals.answer.scoring import score_attempt
from malloy_evals.checks.contamination.rules import ContaminationResult
from malloy_evals.core import vocab
from malloy_evals.diagnose.selection import R_CONTAMINATED, select_cases
from malloy_evals.judge.decision import evaluate
from malloy_evals.judge.packet import Submission
from malloy_evals.judge.verdict import check_verdict_object, post_process
from malloy_evals.ledger import public_loop
from malloy_evals.report.arms import attempt_outcome
from malloy_evals.report.figures import summarize_events
from malloy_evals.report.markdown import render_markdown
from malloy_evals.sets.eval_set import load_set

# The one truth table: every recorded `contaminated` value, and whether it voids the attempt.
# The copies in the judge, scoring, the summary and diagnose disagreed on "true" (a legacy string
# the summary and the judge read as clean) before they shared vocab.is_contaminated.
TABLE = [
    pytest.param(True, True, id="true"),
    pytest.param("true", True, id="string-true"),
    pytest.param("TRUE", True, id="string-TRUE"),
    pytest.param("unknown", True, id="unknown"),
    pytest.param(" Unknown ", True, id="unknown-spaced"),
    pytest.param(False, False, id="false"),
    pytest.param("false", False, id="string-false"),
    pytest.param(None, False, id="null"),
    pytest.param("maybe", False, id="outside-the-vocabulary"),
    pytest.param(1, False, id="one-is-not-true"),
]


@pytest.mark.parametrize(("value", "contaminated"), TABLE)
def test_truth_table_of_is_contaminated(value, contaminated):
    assert vocab.is_contaminated(value) is contaminated


@pytest.mark.parametrize(("value", "read"), [
    (True, True), ("true", True), (False, False), ("False", False), ("unknown", "unknown"),
    (None, None), ("maybe", None), (0, None)])
def test_contamination_value_reads_legacy_strings_as_the_booleans(value, read):
    assert vocab.contamination_value(value) == read


@pytest.mark.parametrize(("value", "contaminated"), [
    pytest.param(True, True, id="true"), pytest.param("unknown", True, id="unknown"),
    pytest.param(False, False, id="false")])
def test_check_contamination_exits_1_on_exactly_the_contaminated(value, contaminated):
    # The check itself only ever says true, false or "unknown".
    result = ContaminationResult(contaminated=value, reasons=[], host_tool_uses=0,
                                 reported_calls=None)
    assert (result.exit_code == 1) is contaminated


@pytest.mark.parametrize(("value", "contaminated"), TABLE)
def test_judge_post_processing_voids_exactly_the_contaminated(value, contaminated):
    parsed, _ = check_verdict_object(verdict("match"))
    final = post_process(parsed, contaminated=value, phrases=([], []))
    assert (final.verdict is None and final.reason == "contaminated") is contaminated
    assert (final.verdict == "match") is not contaminated


@pytest.mark.parametrize(("value", "contaminated"), TABLE)
def test_judge_decision_records_contaminated_over_an_unparseable_reply(tmp_path, value,
                                                                       contaminated):
    es = load_set(make_set(tmp_path))
    case = es.case("q_rev")
    decision = evaluate(es, case, Submission(answer_text="1234.5", final_query=None),
                        provider=FakeProvider(["no verdict here"]), key="k", contaminated=value,
                        judge_retries=0, phrases=([], []))
    assert decision.reason == ("contaminated" if contaminated else "judge_unparseable")


@pytest.mark.parametrize(("value", "contaminated"), TABLE)
def test_scoring_voids_exactly_the_contaminated_and_records_the_vocabulary(tmp_path, value,
                                                                           contaminated):
    set_dir = make_set(tmp_path, [c for c in CASES if c["qid"] == "q_salary"])
    run = make_run(tmp_path, set_dir, [])
    # Written by hand: a legacy ledger may hold "true"; the append API would refuse it.
    with run.events_path.open("a") as fh:
        fh.write(json.dumps({"kind": "attempt", "event_id": "a1", "at": "2026-11-30T12:00:00Z",
                             "qid": "q_salary", "sample": None, "phase": "baseline",
                             "submitted": True, "final_query": None,
                             "answer_text": "The model has no staff data.",
                             "contaminated": value}) + "\n")
    result = score_attempt(run, load_set(set_dir), "q_salary", None, provider=FakeProvider(),
                           reexecute=False)
    recorded = vocab.contamination_value(value)
    # Nothing usable recorded and no transcript to check: "unknown", which counts as contaminated.
    assert result.event["contaminated"] == ("unknown" if recorded is None else recorded)
    assert (result.reason == "contaminated") is (contaminated or recorded is None)


def scored_attempt(contaminated: object, verdict: str) -> list[dict]:
    """One attempt of q1 recording `contaminated`, and its score."""
    key = {"qid": "q1", "sample": None, "phase": "baseline"}
    return [{"kind": "attempt", "event_id": "a1", **key, "contaminated": contaminated},
            {"kind": "score", **key, "verdict": verdict, "attempt_event_id": "a1"}]


@pytest.mark.parametrize(("value", "contaminated"), TABLE)
def test_diagnose_selection_excludes_exactly_the_contaminated(value, contaminated):
    selection = select_cases(scored_attempt(value, "no_match"), {"q1": "dev"})
    assert ([b.reason for b in selection.excluded] == [R_CONTAMINATED]) is contaminated
    assert (len(selection.failed) == 1) is not contaminated


@pytest.mark.parametrize(("value", "contaminated"), TABLE)
def test_summary_counts_exactly_the_contaminated_and_says_so_per_case(value, contaminated):
    s = summarize_events({"runId": "r1", "phase": "baseline"}, scored_attempt(value, "match"))
    assert (s.incomplete is not None and s.incomplete.contaminated == ["q1"]) is contaminated
    assert (s.pass_rate is not None) is not contaminated
    [row_line] = [ln for ln in render_markdown(s).splitlines() if ln.startswith("| q1 |")]
    assert ("contaminated" in row_line) is contaminated


@pytest.mark.parametrize(("value", "contaminated"), TABLE)
def test_a_comparison_leaves_out_exactly_the_contaminated(value, contaminated):
    outcome = attempt_outcome(scored_attempt(value, "match"))
    assert (outcome.left_out == "contaminated") is contaminated


@pytest.mark.parametrize(("value", "contaminated"), TABLE)
def test_the_answer_harness_calls_exactly_the_contaminated_so(value, contaminated):
    recorded = HarnessOutcome("q1", None, "recorded", 1, submitted=True, contaminated=value)
    assert ("contaminated" in outcome_words(recorded)) is contaminated


@pytest.mark.parametrize(("value", "read"), [
    ("true", True), ("FALSE", False), ("unknown", "unknown"), ("maybe", "unknown"), (True, True)])
def test_a_public_loop_line_reads_the_kits_words_and_an_unsettled_string_as_unknown(value, read):
    # The public loop counts a string it could not settle as contaminated; the kit's own words
    # ("true", "false", "unknown") are read by vocab, as everywhere.
    assert public_loop.contaminated_value(value) == read
