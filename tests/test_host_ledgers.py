"""Ledgers a host agent writes by hand, by the shapes of reference/ledger-schema.md, still
validate, score, retrieve and compare as that page says (issue 36).

Every event here is a JSON line typed out from the page's tables: no library writer (`Run`,
`record_attempt`, the tie helpers of the other tests) makes them, so a rule a writer follows and
the page does not say cannot pass for one the reader applies. Each kind the page documents is
written this way: attempt, tool_call, score, retrieval_score, human_verdict, issue, issue_status
and void. The runs sit on the sample set (its cases, goldens and expected entities).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from malloy_evals.answer.retrieval import score_retrieval
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.validate import validate_run
from malloy_evals.report.compare import compare_runs
from malloy_evals.report.figures import summarize
from malloy_evals.sets.eval_set import load_set
from script_support import run_outcome

KIT = Path(__file__).resolve().parents[1]
BOOKSHOP = KIT / "evals" / "bookshop"
SCRIPTS = KIT / "skills" / "eval-answer" / "scripts"
AT = "2026-12-02T09:00:00Z"


def run_json(run_id: str) -> dict[str, Any]:
    """run.json with the page's required fields only."""
    return {"runId": run_id, "phase": "baseline", "started": AT, "answererModel": "host-agent",
            "setName": "bookshop", "datasetVersion": 1, "schemaVersion": 1}


def write_run(root: Path, run_id: str, events: list[dict[str, Any]], tail: str = "") -> Path:
    d = root / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(run_json(run_id)))
    text = "".join(json.dumps(e) + "\n" for e in events) + tail
    (d / "events.jsonl").write_text(text)
    return d


def attempt(eid: str, qid: str, *, sample: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"kind": "attempt", "event_id": eid, "at": AT, "qid": qid, "sample": sample,
            "phase": "baseline", "submitted": True, "final_query": "run: order_items -> "
            "{ aggregate: revenue }", "answer_text": "Revenue is 90,963.84.", **extra}


def get_context(eid: str, qid: str, index: int, delivered: list[str]) -> dict[str, Any]:
    return {"kind": "tool_call", "event_id": eid, "at": AT, "qid": qid, "sample": None,
            "phase": "baseline", "tool": "get_context", "call_index": index,
            "targets": ["any: revenue"], "target_shapes": [{"type": "any", "has_text": True}],
            "ranked_summary": {"entity_ids": delivered, "result_count": len(delivered),
                               "hits": [{"entity_id": e, "relevance": 1.0, "position": i}
                                        for i, e in enumerate(delivered)],
                               "doc_tokens": []}}


def score(eid: str, qid: str, verdict: str | None, *, sample: int | None = None,
          **extra: Any) -> dict[str, Any]:
    return {"kind": "score", "event_id": eid, "at": AT, "qid": qid, "sample": sample,
            "phase": "baseline", "verdict": verdict, "why": "decided by the host's judge",
            "confidence": 8, **extra}


def void(eid: str, target: str) -> dict[str, Any]:
    return {"kind": "void", "event_id": eid, "at": AT, "target_event_id": target,
            "reason": "the host judged it again"}


# Four cases of the sample set: the base arm passes two, the candidate fixes one and breaks one.
BASE = {"bk_total_revenue": "match", "bk_revenue_2024": "no_match",
        "bk_member_count": "no_match", "bk_avg_list_price": "match"}
CANDIDATE = {**BASE, "bk_revenue_2024": "match", "bk_avg_list_price": "no_match"}
DELIVERED = {"bk_total_revenue": ["measure:order_items:revenue"],
             "bk_revenue_2024": ["measure:order_items:revenue"],  # order_date never delivered
             "bk_avg_list_price": ["measure:books:avg_list_price"]}


def arm_events(verdicts: dict[str, str], prefix: str) -> list[dict[str, Any]]:
    """For each case: its attempt, its get_context call (none for bk_member_count) and the
    host's score, written after them and naming no attempt (the page: it judged the one before)."""
    out: list[dict[str, Any]] = []
    for i, (qid, verdict) in enumerate(verdicts.items()):
        out.append(attempt(f"{prefix}-a{i}", qid))
        if qid in DELIVERED:
            out.append(get_context(f"{prefix}-c{i}", qid, 0, DELIVERED[qid]))
    out += [score(f"{prefix}-s{i}", qid, v) for i, (qid, v) in enumerate(verdicts.items())]
    return out


@pytest.fixture(scope="module")
def bookshop():
    return load_set(BOOKSHOP)


# ------------------------------------------------------------------ validate

def test_a_host_written_ledger_of_every_kind_validates_with_one_warning(tmp_path):
    events = [*arm_events(BASE, "b"),
              void("b-v1", "b-s1"), score("b-s1b", "bk_revenue_2024", "no_match"),
              {"kind": "human_verdict", "event_id": "b-h", "at": AT, "qid": "bk_member_count",
               "sample": None, "phase": "baseline", "verdict": "match",
               "why": "the answer names the members", "settled_by": "Ada"},
              {"kind": "retrieval_score", "event_id": "b-r", "at": AT, "qid": "bk_total_revenue",
               "sample": None, "phase": "baseline", "verdict": "match", "failed": False,
               "coverage": "covered", "coverage_source": "authored", "recall": 1.0,
               "precision": 1.0, "groups": 1, "delivery": {"measure:order_items:revenue": "exact"},
               "missing": [], "noise": [], "asked_kinds": ["any"], "where_to_fix": None,
               "owner": None, "component": None, "why": None},
              {"kind": "issue", "event_id": "b-i", "at": AT, "issue_id": "revenue-2024-date",
               "qids": ["bk_revenue_2024"], "primary_code": "RULE_UNWRITTEN",
               "component": "model-definition", "owner": "model",
               "diagnosis": "which date a year filters on is not written"},
              {"kind": "issue_status", "event_id": "b-is", "at": AT,
               "issue_id": "revenue-2024-date", "status": "open"}]
    report = validate_run(write_run(tmp_path, "hosted", events))
    assert report.errors == [] and report.exit_code == 0
    [warning] = report.warnings
    # Seven verdicts name no attempt: the four scores, the rescore, the person's verdict and
    # the row (the voided score among them: it was placed when read).
    assert "7 verdict(s) name no attempt they judged" in warning


@pytest.mark.parametrize("damage, words", [
    pytest.param(lambda e: e.append(score("x", "bk_total_revenue", "match")),
                 "already has a live score (line 8, not voided)", id="second-live-score"),
    pytest.param(lambda e: e.append(void("v", "nowhere")), "is not an event of this ledger",
                 id="void-of-nothing"),
    pytest.param(lambda e: e.append({**score("x", "bk_member_count", "match"),
                                     "phase": "loop"}), "differs from run.json", id="phase"),
    pytest.param(lambda e: e.append({**attempt("late", "bk_total_revenue")}),
                 "not tied to its attempt: judged attempt b-a0, not the live one late",
                 id="score-then-a-new-attempt"),
    pytest.param(lambda e: e.insert(0, score("early", "bk_signups_2024", "match")),
                 "its case has no live attempt", id="score-of-no-attempt"),
    pytest.param(lambda e: e.append({**score("x", "bk_member_count", "match"),
                                     "attempt_event_id": "b-a0"}),
                 "judged attempt b-a0, not the live one b-a2", id="names-another-attempt"),
])
def test_a_host_ledger_that_breaks_a_rule_of_the_page_is_invalid(tmp_path, damage, words):
    events = arm_events(BASE, "b")
    damage(events)
    report = validate_run(write_run(tmp_path, "hosted", events))
    assert report.exit_code == 1 and any(words in e for e in report.errors), report.errors


def test_unknown_fields_and_a_torn_line_are_what_the_page_says(tmp_path):
    events = arm_events(BASE, "b")
    events[0]["host_note"] = "kept"
    report = validate_run(write_run(tmp_path, "hosted", events, tail='{"kind": "sco'))
    assert any("host_note: unknown field" in w for w in report.warnings)
    assert [e for e in report.errors if "torn line" in e] and report.exit_code == 1


# ------------------------------------------------------------------ the summary

def test_the_summary_counts_host_scores_on_the_attempts_before_them(tmp_path, bookshop):
    run = Run.open(write_run(tmp_path, "hosted", arm_events(BASE, "b")))
    s = summarize(run, bookshop)
    assert s.verdicts["match"] == 2 and s.verdicts["no_match"] == 2
    assert s.pass_rate is not None and s.pass_rate.text.startswith("pass rate 50.0% (2/4;")
    assert s.placed == 4 and s.ignored == [] and s.status == "complete"


def test_a_host_void_and_rescore_and_a_persons_verdict_count_as_the_page_says(tmp_path,
                                                                              bookshop):
    events = [*arm_events(BASE, "b"), void("b-v", "b-s1"),
              score("b-s1b", "bk_revenue_2024", "match"),
              {"kind": "human_verdict", "event_id": "b-h", "at": AT, "qid": "bk_member_count",
               "sample": None, "phase": "baseline", "verdict": "match",
               "why": "the answer names the members", "settled_by": "Ada"}]
    s = summarize(Run.open(write_run(tmp_path, "hosted", events)), bookshop)
    verdicts = {r.qid: r.verdict for r in s.cases}
    assert verdicts["bk_revenue_2024"] == "match" and verdicts["bk_member_count"] == "match"
    assert s.settled_by_person == 1 and s.verdicts["match"] == 4


def test_a_score_of_an_older_kit_counts_while_its_judge_folder_is_there(tmp_path, bookshop):
    # As the kit wrote scores before verdicts were bound: a judge folder and pins, no digests,
    # no attempt id, no case digest.
    older = {"judge_artifact": "artifacts/bk_total_revenue/_/judge", "golden_revision": 1,
             "judge_version": 3, "prediction_path": "artifacts/bk_total_revenue/_/prediction.csv"}
    events = [attempt("a1", "bk_total_revenue"), score("s1", "bk_total_revenue", "match", **older)]
    d = write_run(tmp_path, "older", events)
    assert summarize(Run.open(d), bookshop).verdicts["match"] == 0  # its folder is not there
    [ignored] = summarize(Run.open(d), bookshop).ignored
    assert (ignored.line, ignored.cause) == (2, "missing artifact")
    (d / "artifacts" / "bk_total_revenue" / "_" / "judge").mkdir(parents=True)
    s = summarize(Run.open(d), bookshop)
    assert s.verdicts["match"] == 1 and s.ignored == []


def test_a_score_pinned_to_an_older_golden_revision_is_ignored_as_stale(tmp_path, bookshop):
    events = [attempt("a1", "bk_total_revenue"),
              score("s1", "bk_total_revenue", "match", golden_revision=0)]
    s = summarize(Run.open(write_run(tmp_path, "hosted", events)), bookshop)
    [ignored] = s.ignored
    assert ignored.cause == "stale" and "golden_revision 0 (now 1)" in ignored.why
    assert s.status == "partial" and s.verdicts["match"] == 0


# ------------------------------------------------------------------ retrieval rows

def test_retrieval_attributes_the_host_scored_failures(tmp_path, bookshop):
    d = write_run(tmp_path, "hosted", arm_events(BASE, "b"))
    rows = {r.qid: r for r in score_retrieval(d, BOOKSHOP).rows}
    assert rows["bk_total_revenue"].recall == 1.0 and rows["bk_total_revenue"].where_to_fix is None
    assert rows["bk_revenue_2024"].recall == 1 / 2
    assert rows["bk_revenue_2024"].where_to_fix == "not retrieved"
    assert rows["bk_member_count"].where_to_fix == "never asked"
    summary = score_retrieval(d, BOOKSHOP).summary
    assert summary["failures"] == summary["attributed"] == 2


def test_score_retrieval_says_which_line_it_ignored_and_why(tmp_path):
    events = [*arm_events(BASE, "b"), attempt("b-a1-again", "bk_revenue_2024")]
    d = write_run(tmp_path, "hosted", events)
    out = run_outcome(SCRIPTS / "score_retrieval.py", ["--run", str(d), "--set", str(BOOKSHOP),
                                                       "--json"])
    assert out.code == 0
    line = next(n for n, e in enumerate(events, 1) if e["event_id"] == "b-s1")
    assert (f"{d / 'events.jsonl'}:{line}: score bk_revenue_2024 (sample _) ignored, untied: "
            "judged attempt b-a1, not the live one b-a1-again") in out.err
    assert "1 event(s) ignored: 1 untied" in out.err
    assert [i["line"] for i in json.loads(out.out)["ignored"]] == [line]


# ------------------------------------------------------------------ comparing two arms

def test_two_host_written_arms_compare_case_by_case(tmp_path, bookshop):
    base = write_run(tmp_path, "base", arm_events(BASE, "b"))
    cand = write_run(tmp_path, "cand", arm_events(CANDIDATE, "c"))
    c = compare_runs([base], [cand], BOOKSHOP)
    assert c.comparable, c.differences
    assert c.fixed == ["bk_revenue_2024"] and c.broken == ["bk_avg_list_price"]
    assert c.base_pass_rate == 2 / 4 and c.candidate_pass_rate == 2 / 4


def test_generated_arms_in_the_documented_shapes_compare(tmp_path):
    # Many cases, every event written by hand: the arms compare, with the figures by arithmetic.
    from arms_support import make_set
    qids = [f"q{i:04d}" for i in range(600)]
    set_dir = make_set(tmp_path, qids, name="bookshop")

    def arm(name: str, passing: int) -> Path:
        events = [attempt(f"{name}-a{i}", q) for i, q in enumerate(qids)]
        events += [score(f"{name}-s{i}", q, "match" if i < passing else "no_match")
                   for i, q in enumerate(qids)]
        return write_run(tmp_path, name, events)

    c = compare_runs([arm("base", 300)], [arm("cand", 450)], set_dir)
    assert c.comparable, c.differences
    assert c.base_pass_rate == 300 / 600 and c.candidate_pass_rate == 450 / 600
    assert len(c.fixed) == 150 and c.broken == [] and c.base.placed == 600


def test_compare_runs_refuses_an_arm_whose_scores_are_all_ignored_and_says_why(tmp_path):
    base = write_run(tmp_path, "base", arm_events(BASE, "b"))
    # Each attempt recorded again after the host's scores: no score judged a live attempt.
    stale = arm_events(CANDIDATE, "c") + [attempt(f"c-again{i}", q) for i, q in enumerate(CANDIDATE)]
    cand = write_run(tmp_path, "cand", stale)
    out = run_outcome(SCRIPTS / "compare_runs.py", ["--base", str(base), "--candidate", str(cand),
                                                    "--set", str(BOOKSHOP)])
    assert out.code == 3
    assert "candidate: no attempt has a score counted (4 event(s) ignored: 4 untied" in out.out
    assert out.err.count("ignored, untied: judged attempt c-a") == 4
