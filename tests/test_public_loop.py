"""Ledgers written by the public eval loop: read as kit events, or stopped on with the line named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fuzz_support import FUZZ, damaged_bytes, mutated_lines, read_lines, reads_or_refuses
from hypothesis import given
from hypothesis import strategies as st
from malloy_evals.core.errors import InputError
from malloy_evals.ledger import public_loop
from malloy_evals.ledger.events import LedgerError, parse_ledger, read_ledger
from malloy_evals.ledger.live import LiveView, live_view, stream_live
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.validate import validate_run
from malloy_evals.report.figures import summarize

PUBLIC_RUN = Path(__file__).resolve().parent / "fixtures" / "public_loop" / "run"


def lines(*events: dict) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def test_public_attempt_reads_with_snake_case_fields_an_id_and_boolean_contamination():
    read = parse_ledger(lines({"kind": "attempt", "qid": "q1", "sample": None, "phase": "baseline",
                               "submitted": True, "final_query": None, "answer_text": "x",
                               "transcriptPath": "t.jsonl", "servedRevision": "r1",
                               "contaminated": "false"}))
    [event] = read.events
    assert event["event_id"] == "line-1" and read.public_lines == [1]
    assert (event["transcript_path"], event["served_revision"]) == ("t.jsonl", "r1")
    assert "transcriptPath" not in event
    assert event["contaminated"] is False


@pytest.mark.parametrize("value, kit", [("true", True), ("TRUE", True), ("false", False),
                                        ("unknown", "unknown"), ("maybe", "unknown"), (True, True)])
def test_contaminated_strings_take_the_kits_form(value, kit):
    assert public_loop.contaminated_value(value) == kit


def test_public_tool_calls_get_their_place_among_their_attempts_calls_and_a_ranked_summary():
    call = {"kind": "tool_call", "sample": None, "phase": "baseline", "tool": "get_context",
            "rankedSummary": {"entityIds": ["measure:a:b"], "resultCount": 1, "docTokens": ["x_y"]}}
    read = parse_ledger(lines({**call, "qid": "q1"}, {**call, "qid": "q2"}, {**call, "qid": "q1"}))
    assert [(e["qid"], e["call_index"]) for e in read.events] == [("q1", 0), ("q2", 0), ("q1", 1)]
    assert read.events[0]["ranked_summary"] == {"entity_ids": ["measure:a:b"], "result_count": 1,
                                                "doc_tokens": ["x_y"]}


def test_public_only_kinds_and_spellings_are_renamed_not_mistaken_for_kit_ones():
    read = parse_ledger(lines(
        {"kind": "retrieval_score", "intentId": "i1", "term": "revenue"},
        {"kind": "gate", "decision": "accepted"},
        {"kind": "issue", "issue_id": "x", "qids": ["q1"], "primary_code": "COVERAGE",
         "contributing_codes": ["NO-DISAMBIG"], "component": None, "owner": None, "diagnosis": "d"},
        {"kind": "score", "qid": "q1", "sample": None, "phase": "loop", "verdict": None,
         "reason": "no_saved_verdict"}))
    kinds = [e["kind"] for e in read.events]
    assert kinds == ["retrieval_term", "acceptance_check", "issue", "score"]
    assert (read.events[2]["primary_code"], read.events[2]["contributing_codes"]) == ("MISSING",
                                                                                    ["AMBIGUOUS"])
    assert read.events[3]["reason"] == "judge_error: no saved verdict (public loop)"


def test_kit_lines_in_the_same_file_pass_untouched():
    kit = {"kind": "void", "event_id": "e9", "at": "2026-01-01T00:00:00Z", "target_event_id": "line-1",
           "reason": "x"}
    read = parse_ledger(lines({"kind": "issue_status", "issue_id": "x", "status": "open"}, kit))
    assert read.events[1] == kit and read.public_lines == [1]


def test_a_public_line_with_no_qid_stops_every_reader_naming_file_line_and_what_is_missing(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(lines({"kind": "issue_status", "issue_id": "x", "status": "open"},
                           {"kind": "score", "phase": "baseline", "verdict": "match"}))
    with pytest.raises(InputError) as info:
        read_ledger(path)
    assert info.value.exit_code == 3
    assert str(info.value) == (f"{path}:2: public-loop line: score has no `qid`: a case-scoped "
                               "event needs qid, sample and phase to be placed on an attempt")


def test_validate_reports_an_unplaceable_public_line_as_an_error_and_the_rest_as_warnings(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(PUBLIC_RUN, run)
    check = validate_run(run)
    assert check.errors == [] and check.status == "ok"
    assert any("written by the public eval loop" in w for w in check.warnings)
    with (run / "events.jsonl").open("a") as fh:
        fh.write(json.dumps({"kind": "attempt", "sample": None, "submitted": True}) + "\n")
    check = validate_run(run)
    assert check.errors == [("events.jsonl:16: public-loop line: attempt has no `qid` or `phase`: "
                             "a case-scoped event needs qid, sample and phase to be placed on an "
                             "attempt")]


def test_the_kit_never_appends_to_a_public_ledger(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(PUBLIC_RUN, run_dir)
    before = (run_dir / "events.jsonl").read_bytes()
    run = Run.open(run_dir)
    with pytest.raises(LedgerError, match=r"events.jsonl:1: no event_id: this ledger was written by "
                                          r"the public eval loop; appending to it works on the kit's"):
        run.append_event({"kind": "issue_status", "issue_id": "x", "status": "fixed"})
    assert (run_dir / "events.jsonl").read_bytes() == before


def test_a_long_first_line_without_an_id_is_still_recognised(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(lines({"kind": "attempt", "answer_text": "x" * 5000, "qid": "q", "phase": "loop"}))
    assert public_loop.ledger_is_public(path)
    path.write_bytes(lines({"kind": "attempt", "answer_text": "x" * 5000, "event_id": "e1"}))
    assert not public_loop.ledger_is_public(path)
    assert not public_loop.ledger_is_public(tmp_path / "absent.jsonl")


def test_every_reader_of_the_ledger_reads_a_public_ledger_as_the_same_kit_events():
    path = PUBLIC_RUN / "events.jsonl"
    read = read_ledger(path)
    view = LiveView.read(path)
    assert read.public_lines and all(e["event_id"].startswith(public_loop.ID_PREFIX)
                                     for e in read.events)
    # The whole-file reader, the live view and the streaming reader decode line by line through
    # one LineDecoder: the same events, call places and ids, whichever reads.
    assert view.events == list(stream_live(path)) == live_view(read.events)
    assert view.attempts() == Run.open(PUBLIC_RUN).attempts()
    [key, *_] = view.latest("attempt")
    assert [c["call_index"] for c in view.tool_calls(key)] == list(range(len(view.tool_calls(key))))


def test_a_kit_void_of_a_public_line_is_applied_by_the_live_view(tmp_path):
    path = tmp_path / "events.jsonl"
    attempt = {"kind": "attempt", "qid": "q1", "sample": None, "phase": "loop", "submitted": True}
    void = {"kind": "void", "event_id": "v1", "at": "2026-01-01T00:00:00Z",
            "target_event_id": "line-1", "reason": "x"}
    path.write_bytes(lines(attempt, {**attempt, "qid": "q2"}, void))
    assert [a["qid"] for a in LiveView.read(path).attempts()] == ["q2"]
    assert [a["qid"] for a in stream_live(path) if a["kind"] == "attempt"] == ["q2"]


def test_an_unplaceable_public_line_stops_the_live_view_and_the_stream_naming_it(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(lines({"kind": "tool_call", "qid": "q1", "tool": "get_context"}))
    for reader in (LiveView.read, lambda p: list(stream_live(p))):
        with pytest.raises(InputError, match=r"events.jsonl:1: public-loop line: tool_call has no "
                                             r"`phase`"):
            reader(path)


# ---------------------------------------------------------------- hostile input (fuzzed)
# A public-loop ledger is written by another program: mutated, every reader reads it or refuses
# it in one line naming the file and line, and validate.py reports on it, never a traceback.

@FUZZ
@given(data=st.data())
def test_a_mutated_public_ledger_is_read_by_every_reader_or_refused_in_one_line(tmp_path_factory,
                                                                             data):
    d = tmp_path_factory.mktemp("pub")
    (d / "run.json").write_bytes((PUBLIC_RUN / "run.json").read_bytes())
    raw = data.draw(mutated_lines(read_lines(PUBLIC_RUN / "events.jsonl"))).encode(
        "utf-8", "backslashreplace")
    path = d / "events.jsonl"
    path.write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    view = reads_or_refuses(lambda: LiveView.read(path), path)
    streamed = reads_or_refuses(lambda: list(stream_live(path)), path)
    if view is not None and streamed is not None:
        assert view.events == streamed
    reads_or_refuses(lambda: summarize(Run.open(d), None), path)
    check = validate_run(d)
    assert check.exit_code in (0, 1) and all("\n" not in str(p) for p in check.errors)
