"""The streaming readers equal the live view's. The summary: `figures.summarize` reads the ledger once,
streaming, and keeps per attempt only its live attempt, its tied verdicts and its tool calls
counted; `figures.summarize_view` is the reading it replaced (every live event in memory, the
tied events folded). The two must give the same document on every sample run, scored or not, and
on a hand-made ledger that exercises each rule the view applies (voids, supersession, the tie
rule, a person's settlement, issues). The comparison's arms and retrieval's rows likewise."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from malloy_evals.answer.retrieval import score_retrieval, score_view
from malloy_evals.core.cli import to_jsonable
from malloy_evals.ledger.run import Run
from malloy_evals.report.arms import arm_from_events, load_arm
from malloy_evals.report.figures import summarize, summarize_view
from malloy_evals.sets.eval_set import load_set
from tie_support import attempt_id, tied

KIT = Path(__file__).resolve().parents[1]
SAMPLE_RUNS = sorted(p.parent for p in (KIT / "evals").glob("*/runs/*/run.json"))


def both_ways(run_dir: Path, set_dir: Path | None) -> tuple[dict, dict]:
    run = Run.open(run_dir)
    eval_set = load_set(set_dir) if set_dir is not None else None
    streamed = to_jsonable(summarize(run, eval_set, run_label="runs/x", set_label="evals/s"))
    viewed = to_jsonable(summarize_view(run, eval_set, run.view(), run_label="runs/x",
                                        set_label="evals/s"))
    return streamed, viewed


def test_there_are_sample_runs():
    assert {p.name for p in SAMPLE_RUNS} >= {"baseline", "candidate", "leaky"}


@pytest.mark.parametrize("run_dir", SAMPLE_RUNS, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_streaming_summary_equals_the_live_views_on_each_recorded_sample_run(run_dir, tmp_path):
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    streamed, viewed = both_ways(copy, run_dir.parents[1])
    assert streamed["attempts"] > 0
    assert streamed == viewed


def test_streaming_summary_equals_the_live_views_on_every_run_the_demo_scored(demo_run, needs_node):
    runs = sorted(p.parent for p in (demo_run.scratch / "runs").glob("*/run.json"))
    assert len(runs) >= 3
    scored = 0
    for run_dir in runs:
        streamed, viewed = both_ways(run_dir, KIT / "evals" / "bookshop")
        assert streamed == viewed, run_dir.name
        scored += streamed["scored"]
        # ... and the summary.json the demo wrote says the same (what outputs.py rendered).
        written = json.loads((run_dir / "summary.json").read_text())
        assert written["verdicts"] == streamed["verdicts"]
        assert written["headline"].split(";")[0] == streamed["headline"].split(";")[0]
    assert scored > 0


def _event(kind: str, qid: str, **fields) -> dict:
    return {"kind": kind, "qid": qid, "sample": None, "phase": "baseline", **fields}


def test_streaming_summary_applies_every_rule_of_the_live_view(tmp_path):
    set_dir = KIT / "evals" / "bookshop"
    eval_set = load_set(set_dir)
    qids = sorted(eval_set.cases)[:6]
    run = Run.create(tmp_path / "run", eval_set, "answerer-x", phase="baseline", run_id="r1")
    q_void, q_untied, q_human, q_redo, q_retr, q_calls = qids
    run.append([_event("attempt", q, submitted=True, answer_text=f"answer {q}",
                       final_query=None, contaminated=False, n_get_context=7, n_execute=2)
                for q in qids])
    calls = []
    for n in range(4):
        calls.append(_event("tool_call", q_calls, call_index=n,
                            tool="get_context" if n % 2 == 0 else "execute_query",
                            ranked_summary={"entity_ids": [f"measure:orders:m{n}", "source:orders"],
                                            "hits": [{"entity_id": "source:orders",
                                                      "relevance": 0.5, "position": 0}]}))
    run.append(calls)
    voided = tied(run.dir, _event("score", q_void, verdict="match", why="first",
                                 event_id=uuid.uuid4().hex))
    run.append([voided])
    run.append([{"kind": "void", "target_event_id": voided["event_id"], "reason": "re-scored"}])
    run.append([tied(run.dir, _event("score", q_void, verdict="no_match", why="again"))])
    # A score naming another attempt than the live one: untied, so the attempt is unscored.
    run.append([tied(run.dir, _event("score", q_untied, verdict="match"),
                     attempt_event_id=uuid.uuid4().hex)])
    # A person's settlement over the judge's verdict.
    run.append([tied(run.dir, _event("score", q_human, verdict="needs_human"))])
    run.append([tied(run.dir, _event("human_verdict", q_human, verdict="match", why="checked",
                                     settled_by="Dana", fixture_id="f1"))])
    # Scored, then answered again: the score judged the superseded attempt and no longer counts.
    run.append([tied(run.dir, _event("score", q_redo, verdict="match"))])
    old = attempt_id(run.dir, q_redo)
    run.append([{"kind": "void", "target_event_id": old, "reason": "re-recorded"},
                _event("attempt", q_redo, submitted=True, answer_text="again",
                       final_query=None, contaminated=False)])
    run.append([tied(run.dir, _event("score", q_retr, verdict="no_match")),
                tied(run.dir, _event("retrieval_score", q_retr, verdict="no_match",
                                     failed=True, coverage="covered", coverage_source="authored",
                                     recall=0.5, precision=1.0, groups=2,
                                     delivery={"measure:orders:revenue": "exact"},
                                     missing=["measure:orders:x"], noise=[],
                                     asked_kinds=["measure"], where_to_fix=None, owner=None,
                                     component=None, why="not attributed"))])
    run.append([{"kind": "issue", "issue_id": f"i{n}", "qids": [q], "primary_code": "WRONG-FIELD",
                 "component": "construction", "owner": "agent-skill", "diagnosis": "d"}
                for n, q in enumerate((q_retr, q_void))]
               + [{"kind": "issue_status", "issue_id": "i1", "status": "fixed"}])
    streamed, viewed = both_ways(run.dir, set_dir)
    assert streamed == viewed
    cases = {c["qid"]: c for c in streamed["cases"]}
    assert cases[q_void]["verdict"] == "no_match"
    assert not cases[q_untied]["scored"] and not cases[q_redo]["scored"]
    assert cases[q_human]["settled_by"] is not None and cases[q_human]["verdict"] == "match"
    assert (cases[q_calls]["n_get_context"], cases[q_calls]["n_execute"],
            cases[q_calls]["entities_delivered"]) == (2, 2, 3)
    assert cases[q_untied]["n_get_context"] == 7  # no calls recorded: the attempt's counters
    assert cases[q_retr]["cascade_rung"] is not None
    assert [i["issue_id"] for i in streamed["open_issues"]] == ["i0"]


# ------------------------------------------------- the comparison's and retrieval's readers


def arms_both_ways(run_dir: Path, set_dir: Path) -> tuple[dict, dict]:
    run = Run.open(run_dir)
    eval_set = load_set(set_dir)
    streamed = load_arm("A", [run_dir], eval_set).to_json()
    viewed = arm_from_events("A", [(run.info, str(run_dir), run.view())], eval_set).to_json()
    return streamed, viewed


def retrieval_both_ways(run_dir: Path, set_dir: Path) -> tuple[list, list]:
    run = Run.open(run_dir)
    eval_set = load_set(set_dir)
    streamed = score_retrieval(run_dir, set_dir).rows
    viewed = score_view(run, eval_set, run.view()).rows
    return [to_jsonable(r) for r in streamed], [to_jsonable(r) for r in viewed]


@pytest.mark.parametrize("run_dir", SAMPLE_RUNS, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_streaming_arm_and_retrieval_equal_the_live_views_on_each_sample_run(run_dir, tmp_path):
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    streamed, viewed = arms_both_ways(copy, run_dir.parents[1])
    assert streamed["attempts"] > 0 and streamed == viewed
    streamed_rows, viewed_rows = retrieval_both_ways(copy, run_dir.parents[1])
    assert streamed_rows and streamed_rows == viewed_rows


def test_streaming_arm_and_retrieval_apply_the_tie_rule(tmp_path):
    # A score that judged another attempt than the live one: the view leaves the attempt
    # unscored; the streaming readers must too (retrieval's streaming reader once counted it).
    set_dir = KIT / "evals" / "bookshop"
    eval_set = load_set(set_dir)
    q_tied, q_untied = sorted(eval_set.cases)[:2]
    run = Run.create(tmp_path / "run", eval_set, "answerer-x", phase="baseline", run_id="r1")
    run.append([_event("attempt", q, submitted=True, answer_text="a", final_query=None,
                       contaminated=False) for q in (q_tied, q_untied)])
    run.append([_event("tool_call", q_tied, call_index=0, tool="get_context",
                       retrieval_mode="lexical",
                       ranked_summary={"entity_ids": ["source:orders"], "hits": []})])
    run.append([tied(run.dir, _event("score", q_tied, verdict="match")),
                tied(run.dir, _event("score", q_untied, verdict="match"),
                     attempt_event_id=uuid.uuid4().hex)])
    streamed, viewed = arms_both_ways(run.dir, set_dir)
    assert streamed == viewed
    assert streamed["scored"] == 1 and streamed["retrieval_modes"] == ["lexical"]
    streamed_rows, viewed_rows = retrieval_both_ways(run.dir, set_dir)
    assert streamed_rows == viewed_rows
    verdicts = {r["qid"]: r["verdict"] for r in streamed_rows}
    assert verdicts == {q_tied: "match", q_untied: None}
