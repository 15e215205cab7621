"""score_retrieval and the cascade: routes, groups, coverage, attribution."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import FUZZ, mutated_report, reads_or_refuses
from hypothesis import given
from hypothesis import strategies as st
from malloy_evals.answer.retrieval import (
    Delivered,
    RetrievalRow,
    asked_kinds,
    cascade,
    cascade_rung,
    coverage_class,
    effective_coverage,
    load_coverage_report,
    score_retrieval,
    score_row,
    summarize,
)
from malloy_evals.core import schemas
from malloy_evals.core.errors import InputError
from malloy_evals.ledger.run import Run
from tie_support import tied

KIT_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "score_retrieval.py"

STATUS = "dimension:orders:status"
REVENUE = "measure:orders:revenue"
TOTAL = "measure:orders:total_sales"


def delivered(returned: list[str] = (), tokens: list[str] = (), asked: list[str] = ()) -> Delivered:
    d = Delivered()
    d.add_call({"ranked_summary": {"entity_ids": list(returned), "doc_tokens": list(tokens)},
                "target_shapes": [{"type": t, "has_text": True} for t in asked]})
    return d


def row(*, verdict: str | None = "no_match", required: list[str] = (), any_of: list[list[str]] = (),
        acceptable: list[str] = (), coverage: str | None = "covered", source: str = "authored",
        got: Delivered | None = None, in_model: dict[str, bool] | None = None) -> RetrievalRow:
    return score_row(qid="q1", sample=None, phase="baseline", verdict=verdict,
                     expected={"required": list(required), "requiredAnyOf": [list(g) for g in any_of],
                               "acceptable": list(acceptable)},
                     coverage=coverage, coverage_source=source,  # type: ignore[arg-type]
                     delivered=got or delivered(), in_model=in_model)


# ---------------------------------------------------------------- routes


def test_returned_under_its_id_is_exact():
    r = row(required=[TOTAL], got=delivered([TOTAL], asked=["measure"]))
    assert r.delivery == {TOTAL: "exact"} and r.recall == 1.0


def test_same_kind_and_name_on_a_sibling_source_is_alias():
    r = row(required=["measure:order_items:total_sales"], got=delivered([TOTAL]))
    assert r.delivery == {"measure:order_items:total_sales": "alias"} and r.recall == 1.0


def test_name_found_in_returned_docs_is_in_docs():
    r = row(required=[TOTAL], got=delivered([STATUS], tokens=["total_sales", "ship_date"]))
    assert r.delivery == {TOTAL: "in_docs"} and r.recall == 1.0


def test_one_word_name_listed_as_a_doc_token_is_missing():
    r = row(required=[REVENUE], got=delivered([STATUS], tokens=["revenue"], asked=["measure"]))
    assert r.delivery == {REVENUE: "missing"} and r.recall == 0.0
    assert r.where_to_fix == "not retrieved"


def test_same_name_under_another_kind_is_missing():
    r = row(required=[TOTAL], got=delivered(["dimension:orders:total_sales"], asked=["measure"]))
    assert r.delivery == {TOTAL: "missing"} and r.recall == 0.0
    assert r.missing == [TOTAL]


def test_exact_route_beats_alias_and_docs():
    r = row(required=[TOTAL], got=delivered(["measure:other:total_sales", TOTAL], tokens=["total_sales"]))
    assert r.delivery[TOTAL] == "exact"


# ---------------------------------------------------------------- groups, recall, precision


def test_any_member_satisfies_a_required_any_of_group():
    r = row(required=[STATUS], any_of=[[TOTAL, REVENUE]], got=delivered([STATUS, REVENUE]))
    assert (r.groups, r.recall, r.missing) == (2, 1.0, [])


def test_unmet_any_of_group_is_one_missing_entry_joined_by_bar():
    r = row(required=[STATUS], any_of=[[TOTAL, REVENUE]], got=delivered([STATUS], asked=["dimension", "measure"]))
    assert r.recall == 1 / 2
    assert r.missing == [f"{TOTAL} | {REVENUE}"]


def test_no_groups_leaves_recall_none():
    r = row(verdict="match", got=delivered([STATUS]))
    assert (r.groups, r.recall) == (0, None)


def test_absent_coverage_leaves_recall_none():
    r = row(verdict="match", required=[TOTAL], coverage="absent")
    assert r.recall is None


def test_acceptable_alternate_is_not_noise():
    r = row(required=[TOTAL], acceptable=[REVENUE], got=delivered([TOTAL, REVENUE]))
    assert (r.precision, r.noise) == (1.0, [])


def test_unrelated_returned_entity_is_noise():
    r = row(required=[TOTAL], got=delivered([TOTAL, "view:orders:by_month"]))
    assert r.precision == 1 / 2
    assert r.noise == ["view:orders:by_month"]


def test_nothing_returned_leaves_precision_none_and_recall_zero():
    r = row(required=[TOTAL])
    assert (r.precision, r.recall) == (None, 0.0)


def test_entities_pool_across_calls():
    d = Delivered()
    d.add_call({"ranked_summary": {"entity_ids": [STATUS], "doc_tokens": []}, "targets": ["dimension: status"]})
    d.add_call({"ranked_summary": {"entity_ids": [TOTAL], "doc_tokens": []}, "targets": ["measure: sales"]})
    r = row(required=[STATUS, TOTAL], got=d)
    assert r.recall == 1.0 and r.asked_kinds == ["dimension", "measure"]


# ---------------------------------------------------------------- asked kinds


def test_view_target_also_asks_for_named_queries():
    assert asked_kinds(["view"]) == {"view", "query"}


def test_any_target_asks_every_kind():
    assert asked_kinds(["any"]) == {"source", "dimension", "measure", "view", "query", "join"}


def test_target_shapes_win_over_targets_and_keep_bare_targets():
    d = Delivered()
    d.add_call({"targets": ["dimension: region"],
                "target_shapes": [{"type": "dimension", "has_text": True}, {"type": "measure", "has_text": False}]})
    assert d.asked == {"dimension", "measure"}


def test_targets_prefix_is_read_when_no_shapes_were_recorded():
    d = Delivered()
    d.add_call({"targets": ["measure: total sales", "dimension: status"]})
    assert d.asked == {"measure", "dimension"}


# ---------------------------------------------------------------- coverage


@pytest.mark.parametrize(("value", "cls"), [
    pytest.param("covered", "covered", id="covered"), pytest.param("MODELLED", "covered", id="MODELLED"),
    pytest.param("derivable", "gap", id="derivable"), pytest.param("MISSING", "gap", id="MISSING"),
    pytest.param("AMBIGUOUS", "gap", id="AMBIGUOUS"), pytest.param("RULE_UNWRITTEN", "gap", id="RULE_UNWRITTEN"),
    pytest.param("absent", "absent", id="absent"), pytest.param("UNDERSPECIFIED", "unclear", id="UNDERSPECIFIED"),
    pytest.param(None, "unknown", id="none"), pytest.param("ok", "unknown", id="retired-ok"),
    pytest.param("COVERAGE", "unknown", id="retired-COVERAGE"),
])
def test_coverage_classes(value, cls):
    assert coverage_class(value) == cls


def test_measured_verdict_beats_authored_coverage():
    assert effective_coverage("q1", "derivable", {"q1": "MODELLED"}) == ("MODELLED", "measured")


def test_undecided_measured_verdict_falls_back_to_authored():
    assert effective_coverage("q1", "covered", {"q1": None}) == ("covered", "authored")


def test_no_report_and_no_label_is_coverage_source_none():
    assert effective_coverage("q1", None, {}) == (None, "none")


# ---------------------------------------------------------------- attribution: one test per table row


def test_failed_on_absent_coverage_is_refusal_behaviour():
    r = row(required=[TOTAL], coverage="absent")
    assert (r.where_to_fix, r.component, r.owner) == ("refusal behaviour", "construction", "agent-skill")


def test_failed_on_underspecified_question_is_question_unclear():
    r = row(required=[TOTAL], coverage="UNDERSPECIFIED", source="measured")
    assert (r.where_to_fix, r.component, r.owner) == ("question unclear", "dataset", "dataset")


def test_failed_with_no_groups_is_retrieval_not_measured():
    r = row(coverage="covered", got=delivered([TOTAL]))
    assert (r.where_to_fix, r.component, r.owner) == ("retrieval not measured", None, None)


def test_failed_with_full_recall_is_delivered_wrong_with_no_owner():
    r = row(required=[TOTAL], coverage="derivable", got=delivered([TOTAL]))
    assert (r.where_to_fix, r.component, r.owner) == ("delivered, wrong", "construction", None)


def test_failed_on_a_coverage_gap_is_model_coverage():
    r = row(required=[TOTAL], coverage="MISSING", source="measured")
    assert (r.where_to_fix, r.component, r.owner) == ("model coverage", "get_context/model", "model")


USERS = "source:users:users"


def test_gap_never_blames_the_model_for_an_entity_the_compiled_model_has():
    # Issue 16 item 3: a refusal was attributed to "model coverage: the model has nothing to
    # surface for source:users:users" although the compiled model has that source.
    r = row(required=[USERS], coverage="RULE_UNWRITTEN", source="measured",
            got=delivered([REVENUE], asked=["measure"]), in_model={USERS: True})
    assert (r.where_to_fix, r.component, r.owner) == ("never asked", "agent-call", "agent-skill")
    assert "the compiled model has source:users:users" in r.why
    assert "nothing to surface" not in r.why


def test_gap_with_the_held_entity_asked_for_goes_to_retrieval():
    r = row(required=[USERS], coverage="MISSING", source="measured",
            got=delivered([REVENUE], asked=["source"]), in_model={USERS: True})
    assert (r.where_to_fix, r.component, r.owner) == ("not retrieved", "get_context/model", "model")
    assert "NOT-RETURNED" in r.why and "the compiled model has source:users:users" in r.why


def test_gap_for_an_entity_the_compiled_model_lacks_names_what_is_missing():
    r = row(required=[TOTAL], coverage="RULE_UNWRITTEN", source="measured", in_model={TOTAL: False})
    assert r.where_to_fix == "model coverage"
    assert "the compiled model has no measure:orders:total_sales" in r.why
    assert "the rule for combining or filtering the parts is not written" in r.why


def test_authored_derivable_without_a_measurement_stays_a_model_gap_and_says_why():
    # The contract's authored-label rule holds where nothing was measured; the why names the
    # label as its source rather than claiming what the model lacks.
    r = row(required=[USERS], coverage="derivable", source="authored")
    assert r.where_to_fix == "model coverage"
    assert "built from parts (the authored label)" in r.why and "nothing to surface" not in r.why


def test_score_retrieval_reads_which_expected_entities_the_report_found(run_env, tmp_path):
    set_dir, run_dir = run_env
    report = tmp_path / "coverage.json"
    report.write_text(json.dumps(coverage_doc([
        {"qid": "b", "verdict": "RULE_UNWRITTEN", "expected_in_model": {REVENUE: True}}])))
    result = score_retrieval(run_dir, set_dir, coverage=load_coverage_report(report))
    b = next(r for r in result.rows if r.qid == "b")
    assert b.where_to_fix == "not retrieved" and "the compiled model has measure:orders:revenue" in b.why


def test_failed_covered_with_a_missing_kind_never_asked_is_never_asked():
    r = row(required=[TOTAL], got=delivered([STATUS], asked=["dimension", "source"]))
    assert (r.where_to_fix, r.component, r.owner) == ("never asked", "agent-call", "agent-skill")
    assert "measure" in (r.why or "")


def test_failed_covered_and_asked_is_not_retrieved_owned_by_model():
    r = row(required=[TOTAL], coverage="MODELLED", source="measured", got=delivered([], asked=["measure"]))
    assert (r.where_to_fix, r.component, r.owner) == ("not retrieved", "get_context/model", "model")
    assert "NOT-RETURNED" in (r.why or "")


def test_failed_with_unknown_coverage_is_coverage_not_measured():
    r = row(required=[TOTAL], coverage=None, source="none", got=delivered([], asked=["measure"]))
    assert (r.where_to_fix, r.component, r.owner) == ("coverage not measured", None, None)


def test_satisfied_group_unused_route_never_makes_a_kind_unasked():
    # The join route of a satisfied group is not a missing kind (a phantom "never asked" once).
    r = row(required=[STATUS], any_of=[[TOTAL, "join:orders:items"]],
            got=delivered([TOTAL], asked=["dimension", "measure"]))
    assert r.missing == [STATUS]
    assert r.where_to_fix == "not retrieved"
    assert "join" not in (r.why or "")


# ---------------------------------------------------------------- verdicts that are not failures


def test_near_match_is_neither_failed_nor_a_pass():
    r = row(verdict="near_match", required=[TOTAL])
    assert r.failed is False and r.where_to_fix is None
    assert summarize([r])["passed_not_fully_delivered"] == 0


@pytest.mark.parametrize("verdict", ["needs_human", None])
def test_unscored_attempts_are_never_attributed(verdict):
    r = row(verdict=verdict, required=[TOTAL])
    assert (r.failed, r.where_to_fix, r.owner) == (False, None, None)


def test_match_with_recall_short_is_passed_not_fully_delivered_and_unattributed():
    r = row(verdict="match", required=[TOTAL, STATUS], got=delivered([TOTAL]))
    assert r.where_to_fix is None
    s = summarize([r])
    assert (s["failures"], s["attributed"], s["passed_not_fully_delivered"]) == (0, 0, 1)


# ---------------------------------------------------------------- summary and cascade


def mixed_rows() -> list[RetrievalRow]:
    return [
        row(verdict="no_match", required=[TOTAL], coverage="derivable"),                     # model coverage
        row(verdict="no_match", required=[TOTAL], coverage=None, source="none"),             # coverage not measured
        row(verdict="no_match", required=[TOTAL], got=delivered([], asked=["measure"])),     # not retrieved
        row(verdict="no_match", required=[TOTAL], got=delivered([TOTAL])),                   # delivered, wrong
        row(verdict="match", required=[TOTAL], got=delivered([TOTAL])),                      # delivered, right
        row(verdict="needs_human", required=[TOTAL], got=delivered([TOTAL])),                # not scored
        row(verdict="no_match", coverage="absent"),                                          # refusal behaviour
        row(verdict="match", required=[TOTAL], coverage="absent"),                           # pass, not covered
        row(verdict="match", required=[TOTAL, STATUS], got=delivered([TOTAL])),              # pass, not retrieved
        row(verdict="near_match", required=[TOTAL], got=delivered([TOTAL])),                 # not scored
    ]


def test_attributed_equals_failures_on_a_mixed_run():
    s = summarize(mixed_rows())
    assert s["failures"] == 5 and s["attributed"] == 5
    assert s["failures_by_where_to_fix"] == {"coverage not measured": 1, "delivered, wrong": 1,
                                             "model coverage": 1, "not retrieved": 1, "refusal behaviour": 1}


def test_summary_means_and_complete_retrievals():
    s = summarize(mixed_rows())
    # recall over rows not absent with groups: 0, 0, 0, 1, 1, 1, 0.5, 1 (the two absent rows are None).
    assert s["mean_recall"] == pytest.approx((0 + 0 + 0 + 1 + 1 + 1 + 0.5 + 1) / 8)
    assert s["complete_retrievals"] == 4
    assert s["mean_precision"] == 1.0  # every returned id was expected


def test_summary_of_nothing_returned_has_mean_precision_none():
    s = summarize([row(required=[TOTAL])])
    assert s["mean_precision"] is None


def test_cascade_puts_each_attempt_on_exactly_one_rung():
    c = cascade(mixed_rows())
    assert c["rungs"] == {"not covered": 3, "coverage unmeasured": 1, "no entities named": 0,
                          "not retrieved": 2, "not scored": 2, "delivered, wrong": 1, "delivered, right": 1}
    assert sum(c["rungs"].values()) == c["total"] == 10


def test_cascade_overlays_count_passes_stopped_earlier():
    c = cascade(mixed_rows())
    assert c["overlays"] == {"not covered": 1, "coverage unmeasured": 0, "no entities named": 0,
                             "not retrieved": 1}
    assert c["passes"] == c["rungs"]["delivered, right"] + sum(c["overlays"].values()) == 3


def test_cascade_reads_retrieval_score_event_dicts():
    event = {"coverage": "covered", "groups": 0, "recall": None, "verdict": "match"}
    assert cascade_rung(event) == "no entities named"


# ---------------------------------------------------------------- the ledger


def make_set(root: Path) -> Path:
    d = root / "set"
    d.mkdir()
    (d / "set.json").write_text(json.dumps({"name": "mini", "datasetVersion": 1, "targetPackage": "p",
                                            "targetModelPath": "m.malloy"}))
    cases = [
        {"qid": "a", "question": "A?", "coverage": "covered", "expectedEntities": {"required": [TOTAL]}},
        {"qid": "b", "question": "B?", "coverage": "derivable", "expectedEntities": {"required": [REVENUE]}},
        {"qid": "c", "question": "C?", "expectedEntities": {"required": [STATUS]}},
    ]
    (d / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return d


def tie_run_scores(run_dir: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with each score's judge artifacts written into the run (tie_support.tied)."""
    return [tied(run_dir, e) if e["kind"] == "score" else e for e in events]


def attempt_events(qid: str, sample: int | None, verdict: str | None, returned: list[str]) -> list[dict[str, Any]]:
    key = {"qid": qid, "sample": sample}
    return [
        {"kind": "attempt", "event_id": f"att-{qid}-{sample}", **key, "submitted": True,
         "final_query": "run: x", "answer_text": "x"},
        {"kind": "tool_call", **key, "tool": "get_context", "call_index": 0, "targets": ["measure: sales"],
         "target_shapes": [{"type": "measure", "has_text": True}],
         "ranked_summary": {"entity_ids": returned, "hits": [], "result_count": len(returned), "doc_tokens": []}},
        # execute_query never delivers, whatever it carries
        {"kind": "tool_call", **key, "tool": "execute_query", "call_index": 1, "query": "run: x"},
        # Tied to its attempt; `tie_run_scores` writes the judge artifacts once the run exists.
        {"kind": "score", **key, "verdict": verdict, "attempt_event_id": f"att-{qid}-{sample}",
         **({"reason": "not_submitted"} if verdict is None else {})},
    ]


@pytest.fixture
def run_env(tmp_path: Path) -> tuple[Path, Path]:
    set_dir = make_set(tmp_path)
    run_dir = tmp_path / "run"
    run = Run.create(run_dir, set_dir, answerer_model="m", run_id="r")
    run.append(tie_run_scores(run.dir, attempt_events("a", None, "no_match", [TOTAL])
                              + attempt_events("b", None, "no_match", [])
                              + attempt_events("c", 0, "match", [])
                              + attempt_events("c", 1, "no_match", [STATUS])))
    return set_dir, run_dir


def test_run_rows_one_per_attempt_with_attribution(run_env):
    set_dir, run_dir = run_env
    result = score_retrieval(run_dir, set_dir)
    by_key = {(r.qid, r.sample): r for r in result.rows}
    assert list(by_key) == [("a", None), ("b", None), ("c", 0), ("c", 1)]
    assert by_key[("a", None)].where_to_fix == "delivered, wrong"
    assert by_key[("b", None)].where_to_fix == "model coverage"
    assert by_key[("c", 0)].where_to_fix is None                   # a match: never attributed
    assert by_key[("c", 1)].where_to_fix == "delivered, wrong"     # another sample's calls do not leak
    assert result.summary["attributed"] == result.summary["failures"] == 3


def test_voided_tool_call_delivers_nothing(run_env):
    set_dir, run_dir = run_env
    run = Run.open(run_dir)
    [call] = [e for e in run.live() if e["kind"] == "tool_call" and e["qid"] == "a" and e["tool"] == "get_context"]
    run.void(call["event_id"], "wrong attempt")
    [a] = [r for r in score_retrieval(run_dir, set_dir).rows if r.qid == "a"]
    assert a.recall == 0.0


def coverage_doc(detail: list[dict]) -> dict:
    """A whole check_coverage report (its schema's figures) around the per-case detail."""
    return {"version": None, "modelSha256": None, "compiledSurface": "read", "reader": None,
            "cases": len(detail), "decided": len(detail), "modelled": 0, "coverage": None,
            "by_verdict": {}, "cases_detail": detail}


def test_measured_coverage_report_replaces_authored_label(run_env, tmp_path):
    set_dir, run_dir = run_env
    report = tmp_path / "cov.json"
    report.write_text(json.dumps(coverage_doc([{"qid": "b", "verdict": "MODELLED"}])))
    [b] = [r for r in score_retrieval(run_dir, set_dir,
                                  coverage=load_coverage_report(report)).rows if r.qid == "b"]
    assert (b.coverage, b.coverage_source, b.where_to_fix) == ("MODELLED", "measured", "not retrieved")


def test_append_writes_one_valid_retrieval_score_per_attempt(run_env):
    set_dir, run_dir = run_env
    result = score_retrieval(run_dir, set_dir, append=True)
    events = [e for e in Run.open(run_dir).live() if e["kind"] == "retrieval_score"]
    assert result.appended == 4 and len(events) == 4
    for e in events:
        assert schemas.validate_event(e) == []


def test_second_append_voids_the_earlier_retrieval_score(run_env):
    set_dir, run_dir = run_env
    score_retrieval(run_dir, set_dir, append=True)
    first_ids = {e["event_id"] for e in Run.open(run_dir).live() if e["kind"] == "retrieval_score"}
    second = score_retrieval(run_dir, set_dir, append=True)
    live = Run.open(run_dir).live()
    now_ids = {e["event_id"] for e in live if e["kind"] == "retrieval_score"}
    assert second.voided == 4 and len(now_ids) == 4 and not (first_ids & now_ids)


def test_folder_without_run_json_is_refused(tmp_path):
    with pytest.raises(InputError, match="run.json"):
        score_retrieval(tmp_path, make_set(tmp_path))


def test_torn_last_ledger_line_is_a_warning(run_env):
    set_dir, run_dir = run_env
    with (run_dir / "events.jsonl").open("a") as fh:
        fh.write('{"kind": "tool_call", "qid": "a", "tool": "get_cont')
    result = score_retrieval(run_dir, set_dir)
    assert any("torn line" in w for w in result.warnings) and len(result.rows) == 4


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], check=False, capture_output=True,
                          text=True, cwd=KIT_ROOT, timeout=600)


def test_cli_json_prints_rows_and_summary_with_spec_keys(run_env):
    set_dir, run_dir = run_env
    proc = run_cli("--run", run_dir, "--set", set_dir, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) == {"rows", "summary", "ignored"} and doc["ignored"] == []
    assert set(doc["rows"][0]) == {"qid", "sample", "phase", "verdict", "failed", "coverage", "coverage_source",
                                   "recall", "precision", "groups", "delivery", "missing", "noise",
                                   "asked_kinds", "where_to_fix", "owner", "component", "why"}
    assert {"attempts", "failures", "attributed", "mean_recall", "mean_precision", "complete_retrievals",
            "passed_not_fully_delivered", "failures_by_where_to_fix", "cascade"} <= set(doc["summary"])


def test_cli_prints_n_a_for_missing_precision(tmp_path):
    set_dir = make_set(tmp_path)
    run_dir = tmp_path / "run"
    Run.create(run_dir, set_dir, answerer_model="m", run_id="r").append(
        tie_run_scores(run_dir, attempt_events("b", None, "no_match", [])))
    proc = run_cli("--run", run_dir, "--set", set_dir)
    assert proc.returncode == 0 and "mean precision n/a" in proc.stdout


def test_unreadable_ledger_is_an_input_error_naming_it(run_env):
    set_dir, run_dir = run_env
    events = run_dir / "events.jsonl"
    events.unlink()
    events.mkdir()  # present, but not a file that can be read
    with pytest.raises(InputError, match="events.jsonl: cannot be read"):
        score_retrieval(run_dir, set_dir)


def test_cli_without_run_json_exits_3(tmp_path):
    proc = run_cli("--run", tmp_path, "--set", make_set(tmp_path), "--json")
    assert proc.returncode == 3 and "run.json" in proc.stderr and proc.stdout == ""


def test_cli_unreadable_coverage_report_exits_3_naming_it(run_env, tmp_path):
    set_dir, run_dir = run_env
    bad = tmp_path / "cov.json"
    bad.write_text("{not json")
    proc = run_cli("--run", run_dir, "--set", set_dir, "--coverage", bad)
    assert proc.returncode == 3 and "cov.json" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_missing_required_flag_is_usage_exit_2(tmp_path):
    assert run_cli("--json").returncode == 2


def test_attempt_of_a_qid_missing_from_the_set_is_skipped_with_a_warning(run_env):
    set_dir, run_dir = run_env
    lines = (set_dir / "cases.jsonl").read_text().splitlines()
    (set_dir / "cases.jsonl").write_text("\n".join(line for line in lines if '"qid": "a"' not in line) + "\n")
    result = score_retrieval(run_dir, set_dir)
    assert [r.qid for r in result.rows] == ["b", "c", "c"]
    assert any(w.startswith("a: no such case") for w in result.warnings)



# A check_coverage report, mutated (hostile input): read, or refused in one line naming it.
@FUZZ
@given(data=st.data())
def test_mutated_coverage_report_is_read_or_refused_in_one_line(tmp_path_factory, data):
    from malloy_evals.answer.retrieval import load_coverage_report

    path = mutated_report(data, tmp_path_factory.mktemp("cov"))
    reads_or_refuses(lambda: load_coverage_report(path), path)
