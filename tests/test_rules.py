"""The rules that drifted, each read once (core/vocab.py, core/words.py, core/files.py,
core/jsonl.py) and each run through every caller with one truth table, as test_vocab.py does
for contamination: the head of a null reason, which attempts a pass rate leaves out as cut off,
the attempt label, the signed difference, path containment and the torn-line rule."""

from __future__ import annotations

import json
import os

import pytest
from judge_support import CASES, FakeProvider, make_run, make_set
from malloy_evals.answer.harness.plan import PlannedAttempt
from malloy_evals.answer.scoring import score_attempt
from malloy_evals.answer.transcripts import parse_transcript
from malloy_evals.checks.toollog import read_tool_uses
from malloy_evals.core import files, jsonl, vocab, words
from malloy_evals.core.errors import InputError
from malloy_evals.diagnose.selection import select_cases
from malloy_evals.ledger.events import MECHANICAL_NULL_REASONS, human_verdict_applies
from malloy_evals.report.arms import attempt_outcome
from malloy_evals.report.compare_page import ComparePage
from malloy_evals.report.details import attempt_details
from malloy_evals.report.figures import summarize_events
from malloy_evals.report.markdown import render_markdown
from malloy_evals.sets.eval_set import golden_value, load_set
from malloy_evals.workflow.run_scorer import is_transient

# ---------------------------------------------------------------- the head of a null reason

# (recorded reason, its head). Before one home, diagnose's copy kept the space before a colon
# (` judge_error : x` counted apart from `judge_error`) and a non-text reason crashed two copies.
REASONS = [
    pytest.param("judge_error: timeout", "judge_error", id="with-detail"),
    pytest.param(" judge_error : timeout", "judge_error", id="spaced"),
    pytest.param("judge_error", "judge_error", id="bare"),
    pytest.param("environment_failure: node died", "environment_failure", id="environment"),
    pytest.param(" contaminated ", "contaminated", id="mechanical-spaced"),
    pytest.param("answerer_truncated: turns", "answerer_truncated", id="mechanical-detail"),
    pytest.param("budget_exhausted", "budget_exhausted", id="budget"),
    pytest.param(None, "", id="null"),
    pytest.param("", "", id="empty"),
    pytest.param(7, "7", id="not-text"),
]


@pytest.mark.parametrize(("reason", "head"), REASONS)
def test_truth_table_of_null_reason_head(reason, head):
    assert vocab.null_reason_head(reason) == head


def null_score(reason: object) -> list[dict]:
    key = {"qid": "q1", "sample": None, "phase": "baseline"}
    return [{"kind": "attempt", **key, "event_id": "a1", "contaminated": False},
            {"kind": "score", **key, "verdict": None, "reason": reason,
             "attempt_event_id": "a1"}]


@pytest.mark.parametrize(("reason", "head"), REASONS)
def test_the_summary_counts_a_null_reason_under_its_head(reason, head):
    s = summarize_events({"runId": "r1", "phase": "baseline"}, null_score(reason))
    assert s.null_reasons == {head or "(no reason)": 1}
    environment = s.incomplete is not None and s.incomplete.environment_failures == ["q1"]
    assert environment is (head == "environment_failure")


@pytest.mark.parametrize(("reason", "head"), REASONS)
def test_a_person_cannot_override_exactly_the_mechanical_nulls(reason, head):
    _attempt, score = null_score(reason)
    human = {"kind": "human_verdict", "verdict": "match", "attempt_event_id": "a1"}
    mechanical = head in MECHANICAL_NULL_REASONS
    assert human_verdict_applies(score, human, _attempt) is not mechanical


@pytest.mark.parametrize(("reason", "head"), REASONS)
def test_score_run_retries_exactly_the_transient_nulls(reason, head):
    transient = head in ("judge_error", "environment_failure", "budget_exhausted")
    assert is_transient({"verdict": None, "reason": reason}) is transient
    assert is_transient({"verdict": "match", "reason": reason}) is False


def test_diagnosis_counts_its_exclusions_under_the_same_heads():
    events = [*null_score("judge_error: a"),
              *[{**e, "qid": "q2", "event_id": "a2"} for e in null_score(" judge_error : b")]]
    selection = select_cases(events, {"q1": "dev", "q2": "dev"})
    assert selection.excluded_by_reason() == {"unscored": 2}


# ---------------------------------------------------------------- cut off: out of the pass rate

# (recorded `truncated`, whether the attempt was cut off). The summary read `bool(truncated)`
# ("false" and 1 cut off), the arms and scoring `truncated is True` ("true" not): one rule now,
# read as `contaminated` is (the boolean, or the same word as a legacy string).
TRUNCATED = [
    pytest.param(True, True, id="true"),
    pytest.param("true", True, id="string-true"),
    pytest.param(" TRUE ", True, id="string-TRUE-spaced"),
    pytest.param(False, False, id="false"),
    pytest.param("false", False, id="string-false"),
    pytest.param(None, False, id="null"),
    pytest.param(1, False, id="one-is-not-true"),
    pytest.param("yes", False, id="outside-the-vocabulary"),
]


@pytest.mark.parametrize(("value", "cut"), TRUNCATED)
def test_truth_table_of_is_truncated(value, cut):
    assert vocab.is_truncated(value) is cut
    assert vocab.is_cut_off(value, None) is cut
    assert vocab.is_cut_off(value, "answerer_truncated: max turns") is True


def truncated_attempt(value: object) -> list[dict]:
    key = {"qid": "q1", "sample": None, "phase": "baseline"}
    return [{"kind": "attempt", **key, "contaminated": False, "truncated": value},
            {"kind": "score", **key, "verdict": "match"}]


@pytest.mark.parametrize(("value", "cut"), TRUNCATED)
def test_the_summary_leaves_out_exactly_the_cut_off(value, cut):
    s = summarize_events({"runId": "r1", "phase": "baseline"}, truncated_attempt(value))
    assert (s.incomplete is not None and s.incomplete.truncated == ["q1"]) is cut
    assert (s.pass_rate is not None) is not cut
    [row_line] = [ln for ln in render_markdown(s).splitlines() if ln.startswith("| q1 |")]
    assert ("truncated" in row_line) is cut


@pytest.mark.parametrize(("value", "cut"), TRUNCATED)
def test_a_comparison_leaves_out_exactly_the_cut_off(value, cut):
    assert (attempt_outcome(truncated_attempt(value)).left_out == "truncated") is cut


def legacy_run(tmp_path, value: object):
    """A one-case run whose attempt records `truncated` as given (written by hand: the append
    API would refuse a legacy string)."""
    set_dir = make_set(tmp_path, [c for c in CASES if c["qid"] == "q_salary"])
    run = make_run(tmp_path, set_dir, [])
    with run.events_path.open("a") as fh:
        fh.write(json.dumps({"kind": "attempt", "event_id": "a1", "at": "2026-11-30T12:00:00Z",
                             "qid": "q_salary", "sample": None, "phase": "baseline",
                             "submitted": True, "final_query": None, "contaminated": False,
                             "answer_text": "The model has no staff data.",
                             "truncated": value}) + "\n")
    return set_dir, run


@pytest.mark.parametrize(("value", "cut"), TRUNCATED)
def test_scoring_nulls_exactly_the_cut_off(tmp_path, value, cut):
    set_dir, run = legacy_run(tmp_path, value)
    result = score_attempt(run, load_set(set_dir), "q_salary", None,
                           provider=FakeProvider(), reexecute=False)
    assert (result.reason == "answerer_truncated") is cut


@pytest.mark.parametrize(("value", "cut"), TRUNCATED)
def test_the_run_page_marks_exactly_the_cut_off(tmp_path, value, cut):
    set_dir, run = legacy_run(tmp_path, value)
    view = run.view()
    [key] = [run.key("q_salary", None)]
    [detail] = attempt_details(run, load_set(set_dir), view, [key])
    assert detail.truncated is cut


# ---------------------------------------------------------------- the attempt label

@pytest.mark.parametrize(("qid", "sample", "label"), [
    ("q1", None, "q1"), ("q1", 0, "q1#0"), ("bk_total_revenue", 2, "bk_total_revenue#2")])
def test_one_attempt_label_for_pages_summaries_and_progress_lines(qid, sample, label):
    assert words.attempt_label(qid, sample) == label
    # The harness's progress line said `q1 #2` while every page said `q1#2`.
    assert PlannedAttempt(qid, sample, "?").label == label
    events = [{"kind": "attempt", "qid": qid, "sample": sample, "phase": "baseline",
               "contaminated": False, "truncated": True},
              {"kind": "score", "qid": qid, "sample": sample, "phase": "baseline",
               "verdict": "match"}]
    s = summarize_events({"runId": "r1", "phase": "baseline"}, events)
    assert s.incomplete is not None and s.incomplete.truncated == [label]


# ---------------------------------------------------------------- the signed difference

@pytest.mark.parametrize(("points", "text"), [
    (12.46, "+12.5"), (-3.14, "-3.1"), (0.0, "0.0"), (-0.0, "0.0"), (-0.04, "0.0"),
    (0.04, "0.0"), (0, "0.0"), (5, "+5.0"), (None, "n/a"), ("1", "n/a"), (True, "n/a")])
def test_one_signed_difference_on_compare_md_and_the_compare_page(points, text):
    from malloy_evals.report import compare, compare_page

    assert words.signed(points) == text
    # Both renderings take the document's number through the same function: the page, which
    # never recomputes, showed `-0.0` and `+0.0` where COMPARE.md said `0.0`.
    assert compare.signed is words.signed and compare_page.signed is words.signed


def test_the_compare_page_exit_code_is_the_named_one():
    from malloy_evals.core.errors import EXIT_OK, EXIT_UNMEASURED

    page = ComparePage(path="x", bytes=1, verdict="v", cases=1)
    assert page.exit_code == EXIT_OK
    assert ComparePage(path="x", bytes=1, verdict="v", cases=1,
                       comparable=False).exit_code == EXIT_UNMEASURED


# ---------------------------------------------------------------- path containment

# (a recorded relative path, the words of the refusal or None when it is inside).
PLACES = [
    pytest.param("a/b.csv", None, id="inside"),
    pytest.param("a/../b.csv", None, id="dot-dot-inside"),
    pytest.param("../outside.csv", "is outside", id="climbs-out"),
    pytest.param("/etc/passwd", "must be relative", id="absolute"),
    pytest.param("a\x00b", "NUL byte", id="nul"),
    pytest.param("link/x.csv", "is outside", id="link-out"),
    pytest.param("loop/x", "cannot be resolved", id="link-loop"),
]


def root_with_links(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    os.symlink("loop", root / "loop")
    return root


@pytest.mark.parametrize(("relative", "refused"), PLACES)
def test_truth_table_of_files_inside(tmp_path, relative, refused):
    root = root_with_links(tmp_path)
    if refused is None:
        assert files.inside(root, relative, "the root").is_relative_to(root.resolve())
    else:
        with pytest.raises(InputError, match=refused):
            files.inside(root, relative, "the root")


@pytest.mark.parametrize(("relative", "refused"), PLACES)
def test_a_run_resolves_recorded_paths_by_the_same_rule(tmp_path, relative, refused):
    set_dir = make_set(tmp_path / "s")
    run = make_run(tmp_path / "r", set_dir, [])
    (run.dir / "a").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (run.dir / "link").symlink_to(tmp_path / "elsewhere")
    os.symlink("loop", run.dir / "loop")
    if refused is None:
        assert run.resolve(relative).is_relative_to(run.dir.resolve())
    else:
        with pytest.raises(InputError, match=refused):
            run.resolve(relative)


@pytest.mark.parametrize(("relative", "refused"), PLACES)
def test_a_set_reads_golden_paths_by_the_same_rule(tmp_path, relative, refused):
    root = root_with_links(tmp_path)
    for place in (root / "a" / "b.csv", root / "b.csv", tmp_path / "elsewhere" / "x.csv",
                  tmp_path / "outside.csv"):
        place.write_text("x\n1\n")
    (root / "set.json").write_text(json.dumps({"name": "demo", "datasetVersion": 2,
                                               "targetPackage": "demo",
                                               "targetModelPath": "demo.malloy"}))
    (root / "cases.jsonl").write_text(json.dumps({"qid": "q1", "question": "?", "golden": {
        "kind": "rows", "path": relative}}) + "\n")
    read = lambda: golden_value(load_set(root).case("q1"), root)
    if refused is None:
        assert read() == [{"x": 1}]
    else:
        with pytest.raises(InputError, match=refused):
            read()


# ---------------------------------------------------------------- one reading of a transcript

INIT = {"type": "system", "subtype": "init", "cwd": "/w", "session_id": "s"}
USE = {"type": "assistant", "message": {"id": "m1", "content": [
    {"type": "tool_use", "id": "t1", "name": "mcp__malloy__malloy_getContext", "input": {}}]}}
RESULT = {"type": "result", "subtype": "success", "result": "42", "num_turns": 1}

# (the file's text, the error's words or None, whether a torn-line warning is given). The
# contamination reader and ingestion read the file apart and disagreed: a lone torn line was an
# error to one and a warning to the other.
TORN = [
    pytest.param([INIT, USE, RESULT], "", None, False, id="whole"),
    pytest.param([INIT, USE], '{"type": "res', None, True, id="torn-last-line"),
    pytest.param([INIT, USE], '{"type": "res\n\n', None, True, id="torn-then-blank"),
    pytest.param([], '{"type": "sys', "not JSON", False, id="only-a-torn-line"),
    pytest.param([INIT], '{"type": \n' + json.dumps(USE), "not JSON", False, id="torn-middle"),
]


@pytest.mark.parametrize(("records", "tail", "error", "warned"), TORN)
def test_the_contamination_reader_and_ingestion_read_a_transcript_alike(
        tmp_path, records, tail, error, warned):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    readers = (read_tool_uses, parse_transcript)
    if error is not None:
        for read in readers:
            with pytest.raises(InputError, match=error):
                read(path)
        with pytest.raises(InputError, match=error):
            jsonl.json_lines(path.read_text(), path)
        return
    log, parsed = read_tool_uses(path), parse_transcript(path)
    assert [u.id for u in log.tool_uses] == [u.id for u in parsed.tool_uses] == ["t1"]
    assert log.records == records
    assert any("torn" in w for w in log.warnings) is warned
    assert parsed.warnings == log.warnings
