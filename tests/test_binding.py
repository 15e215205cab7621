"""append_events: what a host writes is bound as the kit's writers bind theirs, or refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from malloy_evals.core.errors import InputError
from malloy_evals.ledger.binding import append_events
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.validate import validate_run
from malloy_evals.report.figures import summarize
from malloy_evals.sets.eval_set import load_set
from script_support import run_outcome
from set_support import bookshop_copy

KIT = Path(__file__).resolve().parents[1]
APPEND = KIT / "skills" / "eval-answer" / "scripts" / "append_events.py"
ATTEMPT = {"kind": "attempt", "qid": "bk_total_revenue", "submitted": True,
           "final_query": "run: order_items -> { aggregate: revenue }",
           "answer_text": "Revenue is 90,963.84."}


@pytest.fixture
def hosted(tmp_path):
    """A copy of the sample set and an empty run on it."""
    set_dir = bookshop_copy(tmp_path / "bookshop")
    es = load_set(set_dir)
    return Run.create(tmp_path / "run", es, "host-agent", run_id="hosted"), es


def host_file(tmp_path: Path, *events: dict) -> Path:
    path = tmp_path / "host-events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def judge_folder(run: Run) -> str:
    """A judge request and reply a host's subagent wrote into the attempt's artifacts."""
    folder = run.dir / "artifacts" / "bk_total_revenue" / "_" / "judge"
    folder.mkdir(parents=True)
    (folder / "request.json").write_text('{"question": "..."}\n')
    (folder / "reply.json").write_text('{"verdict": "match", "why": "equal at cents"}\n')
    return folder.relative_to(run.dir).as_posix()


def test_a_host_file_is_bound_and_appended_as_one_batch(hosted, tmp_path):
    run, es = hosted
    folder = judge_folder(run)
    src = host_file(tmp_path, ATTEMPT,
                    {"kind": "tool_call", "qid": "bk_total_revenue", "tool": "execute_query",
                     "call_index": 0, "query": ATTEMPT["final_query"]},
                    {"kind": "score", "qid": "bk_total_revenue", "verdict": "match",
                     "judge_artifact": folder, "reply_artifact": f"{folder}/reply.json"})
    result = append_events(run.dir, src, eval_set=es)
    attempt, _, bound = result.events
    assert bound.attempt_event_id == attempt.event_id  # the attempt earlier in the same file
    assert sorted(bound.filled) == ["case_sha", "golden_revision", "reply_sha", "request_sha"]
    live = run.view().tied_score(run.key("bk_total_revenue", None))
    assert live is not None and live["event_id"] == bound.event_id
    assert validate_run(run.dir).errors == [] and run.view().placed == 0
    assert summarize(run, es).verdicts["match"] == 1
    # What it names stays held to it: the reply edited afterwards unties the score.
    (run.dir / folder / "reply.json").write_text('{"verdict": "no_match"}\n')
    [ignored] = summarize(run, es).ignored
    assert ignored.cause == "altered artifact" and "reply.json differs" in ignored.why


def test_a_case_edited_after_a_bound_host_score_makes_it_stale(hosted, tmp_path):
    run, es = hosted
    append_events(run.dir, host_file(tmp_path, ATTEMPT), eval_set=es)
    append_events(run.dir, host_file(tmp_path, {"kind": "score", "qid": "bk_total_revenue",
                                                "verdict": "match"}), eval_set=es)
    cases = es.dir / "cases.jsonl"
    cases.write_text(cases.read_text().replace("What is the shop's total revenue",
                                               "What is the total revenue"))
    [ignored] = summarize(run, load_set(es.dir)).ignored
    assert ignored.cause == "stale" and "case_sha" in ignored.why


@pytest.mark.parametrize("events, words", [
    pytest.param([{"kind": "score", "qid": "bk_total_revenue", "verdict": "match"}],
                 ":1: score bk_total_revenue: its case has no live attempt", id="no-attempt"),
    pytest.param([ATTEMPT, {"kind": "score", "qid": "bk_total_revenue", "verdict": "match",
                            "attempt_event_id": "someone-else"}],
                 ":2: attempt_event_id: 'someone-else' is not the live attempt", id="wrong-id"),
    pytest.param([ATTEMPT, {"kind": "score", "qid": "bk_total_revenue", "verdict": "match",
                            "reply_artifact": "../../etc/passwd"}],
                 ":2: reply_artifact: ../../etc/passwd leaves the run folder", id="outside"),
    pytest.param([ATTEMPT, {"kind": "score", "qid": "bk_total_revenue", "verdict": "match",
                            "reply_artifact": "artifacts/x/_/judge/reply.json"}],
                 ":2: reply_artifact: artifacts/x/_/judge/reply.json is not in the run",
                 id="missing-artifact"),
    pytest.param([ATTEMPT, {"kind": "score", "qid": "bk_total_revenue", "verdict": "great"}],
                 ":2: score: verdict", id="schema"),
    pytest.param([ATTEMPT, {"kind": "score", "qid": "bk_total_revenue", "verdict": "match",
                            "judge_mood": "sure"}], ":2: score: judge_mood: unknown field",
                 id="unknown-field"),
    pytest.param([ATTEMPT, {**ATTEMPT, "kind": "verdict"}], ":2: kind: 'verdict' is not",
                 id="kind"),
    pytest.param([ATTEMPT, {"kind": "score", "qid": "bk_total_revenue", "verdict": "match"},
                  {"kind": "score", "qid": "bk_total_revenue", "verdict": "no_match"}],
                 ":3: a second score for bk_total_revenue in this file", id="two-in-one-file"),
])
def test_a_refused_event_names_its_line_and_nothing_is_written(hosted, tmp_path, events, words):
    run, es = hosted
    before = run.events_path.read_bytes()
    with pytest.raises(InputError) as caught:
        append_events(run.dir, host_file(tmp_path, *events), eval_set=es)
    assert words in str(caught.value)
    assert run.events_path.read_bytes() == before


def test_a_second_verdict_needs_replace_and_then_voids_the_first_in_the_batch(hosted, tmp_path):
    run, es = hosted
    append_events(run.dir, host_file(tmp_path, ATTEMPT,
                                     {"kind": "score", "qid": "bk_total_revenue",
                                      "verdict": "no_match"}))
    again = host_file(tmp_path, {"kind": "score", "qid": "bk_total_revenue", "verdict": "match"})
    out = run_outcome(APPEND, ["--run", str(run.dir), "--events", str(again)])
    assert out.code == 3 and "give --replace" in out.err and f"{again}:1:" in out.err
    out = run_outcome(APPEND, ["--run", str(run.dir), "--events", str(again), "--replace",
                               "--json"])
    assert out.code == 0, out.err
    doc = json.loads(out.out)
    assert len(doc["voided"]) == 1 and doc["events"][0]["kind"] == "score"
    verdicts = summarize(run, es).verdicts
    assert (verdicts["match"], verdicts["no_match"]) == (1, 0)
