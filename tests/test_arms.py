"""Arms: attempts read as outcomes, cases over k samples, refusal of incomparable arms, the flip
table (flips kept apart from moves into and out of neither and null)."""

from __future__ import annotations

import pytest
from arms_support import PINS, make_run, make_set
from malloy_evals.report.arms import (
    AttemptOutcome,
    arm_from_events,
    attempt_outcome,
    case_outcome,
    change_of,
    flip_table,
    flips,
    load_arm,
    pair_arms,
)
from malloy_evals.sets.eval_set import load_set

# ------------------------------------------------------------------------ one attempt


def _events(verdict=None, reason=None, scored=True, **attempt):
    events = [{"kind": "attempt", "event_id": "a1", "qid": "q", "sample": None, **attempt}]
    if scored:
        events.append({"kind": "score", "qid": "q", "sample": None, "verdict": verdict,
                       "reason": reason, "attempt_event_id": "a1"})
    return events


def test_a_score_that_judged_another_attempt_is_no_verdict_on_this_one():
    events = _events("match")
    events[1]["attempt_event_id"] = "a0"  # the attempt before a re-recording
    assert attempt_outcome(events) == AttemptOutcome("null", None, "unscored", None)
    del events[1]["attempt_event_id"]    # or one appended by hand, naming no attempt
    assert attempt_outcome(events).outcome == "null"


@pytest.mark.parametrize("verdict, outcome", [
    ("match", "pass"), ("no_match", "fail"), ("near_match", "neither"),
    ("needs_human", "neither")])
def test_verdict_maps_to_outcome(verdict, outcome):
    assert attempt_outcome(_events(verdict)) == AttemptOutcome(outcome, verdict, None, None)


def test_null_verdict_keeps_its_reason():
    assert attempt_outcome(_events(None, "not_submitted")) == AttemptOutcome(
        "null", None, "not_submitted", None)


def test_attempt_nobody_scored_is_null_unscored():
    assert attempt_outcome(_events(scored=False)) == AttemptOutcome("null", None, "unscored", None)


@pytest.mark.parametrize("attempt, score, left_out", [
    pytest.param({"truncated": True}, {"verdict": None, "reason": "answerer_truncated"},
                 "truncated", id="truncated"),
    pytest.param({"contaminated": "unknown"}, {"verdict": "match"}, "contaminated",
                 id="contamination_unknown_counts"),
    pytest.param({}, {"verdict": None, "reason": "contaminated"}, "contaminated",
                 id="null_contaminated"),
    pytest.param({}, {"verdict": "no_match", "gold_status": "verified_wrong"}, "verified_wrong",
                 id="judge_declared_golden_wrong"),
])
def test_attempts_the_summary_keeps_out_are_left_out(attempt, score, left_out):
    events = [{"kind": "attempt", "event_id": "a1", **attempt},
              {"kind": "score", "attempt_event_id": "a1", **score}]
    assert attempt_outcome(events).left_out == left_out


def test_set_declared_verified_wrong_golden_leaves_the_attempt_out():
    assert attempt_outcome(_events("match"), "verified_wrong").left_out == "verified_wrong"


def test_latest_score_in_the_live_events_decides():
    events = _events("no_match") + [{"kind": "score", "verdict": "match",
                                     "attempt_event_id": "a1"}]
    assert attempt_outcome(events).outcome == "pass"


# ------------------------------------------------------------------------ one case, k samples


def _o(outcome, verdict=None, reason=None, left_out=None):
    return AttemptOutcome(outcome, verdict, reason, left_out)


P, F = _o("pass", "match"), _o("fail", "no_match")


@pytest.mark.parametrize("attempts, outcome, fraction, text", [
    pytest.param([P], "pass", 1.0, "pass", id="one_pass"),
    pytest.param([F], "fail", 0.0, "fail", id="one_fail"),
    pytest.param([P, P, F], "pass", 2 / 3, "pass 2/3", id="majority_pass"),
    pytest.param([P, F, F], "fail", 1 / 3, "fail 1/3", id="majority_fail"),
    pytest.param([P, F], "split", 1 / 2, "split 1/2", id="exact_half_is_split"),
    pytest.param([P, _o("neither", "near_match"), F, F], "fail", 1 / 3, "fail 1/3",
                 id="neither_attempt_outside_the_fraction"),
])
def test_case_over_samples_takes_the_majority_of_decided_attempts(attempts, outcome, fraction,
                                                                  text):
    case = case_outcome("q", attempts)
    assert (case.outcome, case.pass_fraction, case.text) == (outcome, fraction, text)


def test_case_with_nothing_decided_is_neither_or_null_with_reasons():
    neither = case_outcome("q", [_o("neither", "needs_human"), _o("null", None, "not_submitted")])
    assert (neither.outcome, neither.reasons, neither.decided) == ("neither", ["needs_human"], 0)
    null = case_outcome("q", [_o("null", None, "not_submitted")])
    assert (null.outcome, null.text) == ("null", "null (not_submitted)")


def test_case_whose_every_attempt_was_left_out_is_null_saying_why():
    case = case_outcome("q", [_o("pass", "match", None, "contaminated")])
    assert (case.outcome, case.attempts, case.left_out) == ("null", 0, {"contaminated": 1})
    assert case.text == "null (left out: contaminated)"


# ------------------------------------------------------------------------ flips and moves


@pytest.mark.parametrize("base, cand, change", [
    pytest.param([F], [P], "fixed", id="fail_to_pass_is_fixed"),
    pytest.param([P], [F], "broken", id="pass_to_fail_is_broken"),
    pytest.param([_o("neither", "near_match")], [P], "moved", id="neither_to_pass_is_not_a_flip"),
    pytest.param([P], [_o("neither", "needs_human")], "moved", id="pass_to_neither_is_not_a_flip"),
    pytest.param([_o("null", None, "not_submitted")], [F], "moved", id="null_to_fail_is_not_a_flip"),
    pytest.param([F], [_o("null", None, "judge_unparseable")], "moved", id="fail_to_null"),
    pytest.param([P, F], [P, P], "moved", id="split_to_pass_is_not_a_flip"),
    pytest.param([P, P, F], [P, P, P], "moved", id="fraction_moved_within_pass"),
    pytest.param([P, F, F], [P, P, F], "fixed", id="majority_crossed_is_fixed"),
    pytest.param([P], [P], "unchanged", id="same"),
    pytest.param([_o("null", None, "not_submitted")], [_o("null", None, "golden_provisional")],
                 "moved", id="null_reason_changed"),
])
def test_change_between_arms(base, cand, change):
    assert change_of(case_outcome("q", base), case_outcome("q", cand)) == change


# ------------------------------------------------------------------------ arms from ledgers


def test_arm_reads_live_events_with_voids_applied(tmp_path):
    s = make_set(tmp_path, ["a", "b", "c"])
    run = make_run(tmp_path, s, "r1", {"a": "match", "b": "no_match", "c": "match"},
                   void_first=("a", "b"), voided=("c",))
    arm = load_arm("base", [run], load_set(s))
    assert {q: c.text for q, c in arm.cases.items()} == {
        "a": "pass", "b": "fail", "c": "null (unscored)"}
    assert arm.pins == {k: [v] for k, v in PINS.items()}
    assert (arm.attempts, arm.scored) == (3, 2)


def test_arm_of_two_runs_pools_their_attempts_per_case(tmp_path):
    s = make_set(tmp_path, ["a"])
    r1 = make_run(tmp_path, s, "r1", {"a": "match"})
    r2 = make_run(tmp_path, s, "r2", {"a": ["no_match", "no_match"]})
    case = load_arm("base", [r1, r2], load_set(s)).cases["a"]
    assert (case.passed, case.decided, case.outcome) == (1, 3, "fail")


def test_incomplete_arm_counts_what_it_left_out_and_why(tmp_path):
    s = make_set(tmp_path, ["a", "b", "c"])
    run = make_run(tmp_path, s, "r1", {"a": "match", "b": "match", "c": ("null", "answerer_truncated")},
                   contaminated=("b",), truncated=("c",))
    arm = load_arm("base", [run], load_set(s))
    assert arm.left_out == {"contaminated": 1, "truncated": 1}
    assert arm.left_out_labels == {"contaminated": ["b"], "truncated": ["c"]}
    assert arm.cases["a"].outcome == "pass" and arm.cases["b"].outcome == "null"


def test_arm_events_without_an_attempt_are_not_attempts():
    events = [{"kind": "score", "qid": "ghost", "sample": None, "verdict": "match"}]
    arm = arm_from_events("base", [({"runId": "r"}, "r", events)])
    assert arm.cases == {} and arm.attempts == 0


# ------------------------------------------------------------------------ refusal, per kind


@pytest.fixture
def shop(tmp_path):
    return make_set(tmp_path, ["a", "b", "c"])


def _pair(tmp_path, shop, base_kw=None, cand_kw=None, base=None, cand=None, **flags):
    outcomes = {"a": "match", "b": "no_match", "c": "match"}
    b = make_run(tmp_path, shop, "base", base or outcomes, **(base_kw or {}))
    c = make_run(tmp_path, shop, "cand", cand or outcomes, **(cand_kw or {}))
    es = load_set(shop)
    return pair_arms(load_arm("base", [b], es), load_arm("candidate", [c], es), "shop", **flags)


def test_identical_arms_are_comparable(tmp_path, shop):
    pairing = _pair(tmp_path, shop)
    assert (pairing.refused, pairing.differences, pairing.qids) == (False, [], ["a", "b", "c"])


@pytest.mark.parametrize("cand_kw, text, flag", [
    pytest.param({"pins": {**PINS, "judge_model": "claude-x"}},
                 "judge_model: hand-authored vs claude-x", "allow_different_judge", id="judge_model"),
    pytest.param({"pins": {**PINS, "judge_version": 3}}, "judge_version: 2 vs 3",
                 "allow_different_judge", id="judge_version"),
    pytest.param({"pins": {**PINS, "rubric_sha": "c" * 64}}, "rubric_sha: ",
                 "allow_different_judge", id="rubric_sha"),
    pytest.param({"pins": {**PINS, "judge_prompt_sha": "d" * 64}}, "judge_prompt_sha: ",
                 "allow_different_judge", id="judge_prompt_sha"),
    pytest.param({"revisions": {"b": 2}}, "b: goldenRevision 1 vs 2", "only_common_cases",
                 id="golden_revision"),
    pytest.param({"questions": {"c": "f" * 16}}, "c: question sha ", "only_common_cases",
                 id="question"),
])
def test_each_kind_of_difference_is_named_and_refused_without_its_flag(tmp_path, shop, cand_kw,
                                                                       text, flag):
    refused = _pair(tmp_path / "1", shop, cand_kw=cand_kw)
    assert refused.refused
    assert any(d.text.startswith(text) for d in refused.differences), refused.differences
    allowed = _pair(tmp_path / "2", shop, cand_kw=cand_kw, **{flag: True})
    assert not allowed.refused and allowed.allowed == ["--" + flag.replace("_", "-")]


def test_common_cases_flag_drops_the_case_whose_golden_changed(tmp_path, shop):
    pairing = _pair(tmp_path, shop, cand_kw={"revisions": {"b": 2}}, only_common_cases=True)
    assert pairing.qids == ["a", "c"] and list(pairing.dropped) == ["b"]


def test_different_case_sets_are_refused_then_compared_over_the_common_ones(tmp_path, shop):
    cand = {"a": "match", "b": "no_match"}
    refused = _pair(tmp_path / "1", shop, cand=cand)
    assert refused.refused
    assert [d.text for d in refused.differences] == ["case set: 1 case(s) only in base (c)"]
    allowed = _pair(tmp_path / "2", shop, cand=cand, only_common_cases=True)
    assert allowed.qids == ["a", "b"]


def test_another_set_is_refused_whatever_the_flags(tmp_path, shop):
    other = make_set(tmp_path, ["a", "b", "c"], name="other")
    b = make_run(tmp_path, shop, "base", {"a": "match"})
    c = make_run(tmp_path, other, "cand", {"a": "match"})
    pairing = pair_arms(load_arm("base", [b]), load_arm("candidate", [c]), "shop",
                        only_common_cases=True, allow_different_judge=True)
    assert pairing.refused
    # Another set's files are other files too: the datasetSha difference is named after it.
    assert [d.kind for d in pairing.differences] == ["set", "dataset"]
    assert pairing.differences[0].text == "candidate: run cand is over set other, not shop"


def test_an_arm_with_no_live_score_is_refused(tmp_path, shop):
    pairing = _pair(tmp_path, shop, cand_kw={"unscored": ("a", "b", "c")},
                    only_common_cases=True, allow_different_judge=True)
    assert pairing.refused
    assert pairing.differences[0].text.startswith("candidate: no attempt has a score counted")


def test_judge_pins_that_vary_inside_one_arm_are_a_difference(tmp_path, shop):
    b1 = make_run(tmp_path, shop, "b1", {"a": "match"})
    b2 = make_run(tmp_path, shop, "b2", {"a": "match"}, pins={**PINS, "judge_version": 3})
    c = make_run(tmp_path, shop, "c", {"a": "match"})
    pairing = pair_arms(load_arm("base", [b1, b2]), load_arm("candidate", [c]), "shop")
    assert "base: judge_version varies across its scores (2, 3)" in [
        d.text for d in pairing.differences]


# ------------------------------------------------------------------------ the flip table


def test_flip_table_orders_fixed_broken_moved_unchanged(tmp_path):
    s = make_set(tmp_path, ["a", "b", "c", "d", "e"])
    es = load_set(s)
    base = load_arm("base", [make_run(tmp_path, s, "b", {
        "a": "match", "b": "no_match", "c": "near_match", "d": "match", "e": "no_match"})], es)
    cand = load_arm("candidate", [make_run(tmp_path, s, "c", {
        "a": "match", "b": "match", "c": "match", "d": "no_match", "e": ("null", "judge_unparseable")})], es)
    rows = flip_table(base, cand, ["a", "b", "c", "d", "e"], targets=["b"])
    assert [(r.qid, r.change) for r in rows] == [
        ("b", "fixed"), ("d", "broken"), ("c", "moved"), ("e", "moved"), ("a", "unchanged")]
    assert flips(rows) == (["b"], ["d"])
    assert [r.qid for r in rows if r.target] == ["b"]
    assert [r.qid for r in rows if r.decided_in_both] == ["b", "d", "a"]
