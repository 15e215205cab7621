"""The live view of a run: one read per pass, the one void rule, refreshed with what was appended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from malloy_evals.core.errors import InputError
from malloy_evals.ledger import events as ledger_events
from malloy_evals.ledger import live as ledger_live
from malloy_evals.ledger.events import AttemptKey, attempt_key
from malloy_evals.ledger.live import LiveView, live_view, stream_live
from malloy_evals.ledger.run import Run


def make_run(root: Path) -> Run:
    s = root / "set"
    s.mkdir()
    (s / "set.json").write_text(json.dumps({"name": "demo", "datasetVersion": 1,
                                            "targetPackage": "demo", "targetModelPath": "d.malloy"}))
    (s / "cases.jsonl").write_text("".join(json.dumps({"qid": q, "question": "?"}) + "\n"
                                           for q in ("q1", "q2")))
    return Run.create(root / "run", s, "answerer-x", run_id="r1")


def attempt(qid: str = "q1", sample: int | None = None, **kw) -> dict:
    return {"kind": "attempt", "qid": qid, "sample": sample, "submitted": True,
            "final_query": "run: a -> b", "answer_text": "3", **kw}


def call(qid: str = "q1", index: int = 0, sample: int | None = None) -> dict:
    return {"kind": "tool_call", "qid": qid, "sample": sample, "tool": "get_context",
            "call_index": index}


def score(qid: str = "q1", verdict: str = "match", sample: int | None = None, **kw) -> dict:
    return {"kind": "score", "qid": qid, "sample": sample, "verdict": verdict, **kw}


KEY = AttemptKey("q1", None, "baseline")


def test_view_answers_by_attempt_key_without_reading_again(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    run.append([attempt(), call(index=1), call(index=0), score(), attempt("q2", 3)])
    view = run.view()
    for reader in ("iter_blocks", "iter_chunks", "iter_lines"):
        monkeypatch.setattr(ledger_live, reader, lambda *a: pytest.fail("read again"))
    assert view.attempt(KEY)["answer_text"] == "3"
    assert [c["call_index"] for c in view.tool_calls(KEY)] == [0, 1]
    assert view.score(KEY)["verdict"] == "match"
    assert [attempt_key(a) for a in view.attempts()] == [KEY, ("q2", 3, "baseline")]
    assert run.attempt("q2", 3, view)["qid"] == "q2"  # Run's lookups take the pass's view


def test_voided_events_are_not_live_wherever_the_void_stands(tmp_path):
    run = make_run(tmp_path)
    [_, c, s] = run.append([attempt(), call(), score()])
    run.void(c["event_id"], "wrong call")
    run.supersede([s], [score(verdict="no_match")], "re-scored")
    view = run.view()
    assert view.tool_calls(KEY) == [] and view.score(KEY)["verdict"] == "no_match"
    assert {e["kind"] for e in view.events} == {"attempt", "score"}
    assert view.events == live_view(run.read().events)  # the same rule in memory and streamed


def test_refresh_takes_in_only_what_was_appended_including_voids_of_older_events(tmp_path):
    run = make_run(tmp_path)
    [_, s] = run.append([attempt(), score()])
    view = run.view()
    run.supersede([s], [score(verdict="near_match")], "re-scored")  # as another process would
    run.append([attempt("q2")])
    view.refresh()
    assert view.score(KEY)["verdict"] == "near_match"
    assert [a["qid"] for a in view.attempts()] == ["q1", "q2"]
    assert view.events == run.view().events


def test_refresh_after_a_torn_line_is_closed_by_an_append(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    line = json.dumps({**attempt("q2"), "event_id": "e2", "at": "2026-11-30T12:00:00Z",
                       "phase": "baseline"})
    with run.events_path.open("a") as fh:
        fh.write(line)  # no newline: a write cut off, whose content still parses
    view = run.view()
    assert [p.message.split(" (")[0] for p in view.problems] == ["torn line"]
    assert [a["qid"] for a in view.attempts()] == ["q1", "q2"]
    run.append([score()])  # starts with a newline, which closes the torn line
    view.refresh()
    assert [a["qid"] for a in view.attempts()] == ["q1", "q2"] and view.score(KEY) is not None
    assert len(view.problems) == 1


def test_refresh_starts_over_when_the_ledger_was_replaced(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    view = run.view()
    replacement = run.dir / "other.jsonl"
    replacement.write_text(json.dumps({**attempt("q2"), "event_id": "x", "at": "2026-11-30T12:00:00Z",
                                       "phase": "baseline"}) + "\n")
    replacement.replace(run.events_path)
    view.refresh()
    assert [a["qid"] for a in view.attempts()] == ["q2"]


def test_events_without_a_well_formed_key_are_live_but_belong_to_no_attempt():
    view = LiveView.of_events([
        {"kind": "attempt", "event_id": "a", "qid": ["not", "a", "qid"], "sample": None,
         "phase": "baseline"},
        {"kind": "attempt", "event_id": "b", "qid": "q1", "sample": True, "phase": "baseline"},
        {"kind": "issue", "event_id": "i", "qids": ["q1"]}])
    assert view.attempts() == [] and len(view.events) == 3


def test_repeated_ids_are_all_retracted_by_one_void():
    view = LiveView.of_events([{**attempt(), "event_id": "a", "phase": "baseline"},
                               {**attempt(), "event_id": "a", "phase": "baseline"},
                               {"kind": "void", "event_id": "v", "target_event_id": "a"}])
    assert view.events == []


def test_stream_decodes_only_lines_holding_a_needle_and_applies_voids(tmp_path):
    run = make_run(tmp_path)
    [a, c] = run.append([attempt(), call()])
    run.append([{"kind": "tool_call", "qid": "q1", "sample": None, "tool": "execute_query",
                 "call_index": 1, "query": "run: a -> b"}])
    run.void(c["event_id"], "x")
    decoded: list[int] = []

    def decode(line: bytes, number: int, torn: bool):
        decoded.append(number)
        return ledger_events.decode_line(line, number, torn)

    got = list(stream_live(run.events_path, needles=(b'"get_context"', b'"attempt"'),
                           decode=decode))
    assert [e["event_id"] for e in got] == [a["event_id"]]
    assert decoded == [1, 2]  # the execute_query call and the void were never decoded


def test_missing_ledger_is_an_empty_view(tmp_path):
    assert LiveView.read(tmp_path / "events.jsonl").events == []
    assert list(stream_live(tmp_path / "events.jsonl")) == []


def test_hand_written_ids_of_any_type_never_break_the_view():
    view = LiveView.of_events([{"kind": "attempt", "event_id": ["a", "list"], "qid": "q1",
                                "sample": None, "phase": "baseline"},
                               {"kind": "void", "event_id": {"an": "object"}, "target_event_id": 7}])
    assert [e["event_id"] for e in view.attempts()] == [["a", "list"]]


_value = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(["kind", "event_id", "qid", "sample",
                                                         "phase", "target_event_id", "tool"]),
                                        inner, max_size=5),
                      max_leaves=12)
_event = st.fixed_dictionaries(
    {"kind": st.sampled_from(["attempt", "tool_call", "score", "void", "issue"]) | _value},
    optional={"event_id": st.sampled_from(["a", "b"]) | _value, "qid": _value,
              "sample": _value, "phase": _value, "target_event_id": st.sampled_from(["a", "b"])})


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(_event | _value, max_size=8), tail=st.binary(max_size=40))
def test_any_ledger_content_gives_a_view_and_a_stream(tmp_path_factory, lines, tail):
    path = tmp_path_factory.mktemp("r") / "events.jsonl"
    path.write_bytes("".join(json.dumps(x) + "\n" for x in lines).encode() + tail)
    try:
        view = LiveView.read(path)
    except InputError as exc:
        # A line without an event_id is a public-loop line; one that cannot be placed on an
        # attempt stops every reader, naming it, rather than be guessed at.
        assert "public-loop line" in exc.message
        with pytest.raises(InputError) as streamed_exc:
            list(stream_live(path))
        assert str(streamed_exc.value) == str(exc)
        return
    streamed = list(stream_live(path))
    assert view.events == streamed  # one rule, whichever reader
    assert all(a.get("kind") == "attempt" for a in view.attempts())


def test_a_persons_verdict_is_read_through_the_view_and_decides_the_effective_verdict(tmp_path):
    run = make_run(tmp_path)
    [judged_attempt, judged] = run.append([attempt(event_id="att1"),
                                           score(verdict="needs_human", attempt_event_id="att1")])
    human = {"kind": "human_verdict", "qid": "q1", "sample": None, "verdict": "match",
             "why": "rows agree", "settled_by": "Ana", "attempt_event_id": judged_attempt["event_id"]}
    [settled] = run.append([human])
    view = run.view()
    key = run.key("q1", None)
    assert view.human_verdict(key) == settled
    eff = ledger_events.effective_verdict(view.score(key), view.human_verdict(key),
                                          view.attempt(key))
    assert (eff.verdict, eff.settled_by, eff.judge_verdict) == ("match", "Ana", "needs_human")
    # A second live one is refused (one per key, as for scores); re-settling supersedes it.
    with pytest.raises(ledger_events.LedgerError, match="already has a live human_verdict"):
        run.append([{**human, "verdict": "no_match"}])
    run.supersede([settled], [{**human, "verdict": "no_match"}], "re-settled by Ana")
    view.refresh()
    assert view.human_verdict(key)["verdict"] == "no_match"
    assert view.score(key) == judged
