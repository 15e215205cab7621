"""The ledger: validated, concurrent-safe appends, tolerant reads, voids, one live score, artifacts."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest
from fuzz_support import FUZZ, damaged_bytes, mutated_lines, read_lines, reads_or_refuses
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from malloy_evals.core import schemas
from malloy_evals.core.errors import InputError
from malloy_evals.ledger import events as ledger_events
from malloy_evals.ledger import index as ledger_index
from malloy_evals.ledger import run as ledger_run
from malloy_evals.ledger import validate as ledger_validate
from malloy_evals.ledger.events import (
    LedgerError,
    check_qid,
    effective_verdict,
    parse_ledger,
    sample_segment,
)
from malloy_evals.ledger.live import live_view
from malloy_evals.ledger.run import Run

# ------------------------------------------------------------------------------------------
# builders


def make_set(root: Path, qids: tuple[str, ...] = ("q1", "q2")) -> Path:
    """A minimal valid set folder."""
    s = root / "set"
    s.mkdir()
    (s / "set.json").write_text(json.dumps({"name": "demo", "datasetVersion": 3,
                                            "targetPackage": "demo", "targetModelPath": "demo.malloy"}))
    (s / "cases.jsonl").write_text("".join(
        json.dumps({"qid": q, "question": f"How many {q}?"}) + "\n" for q in qids))
    return s


def make_run(root: Path, phase: str = "baseline") -> Run:
    return Run.create(root / "run", make_set(root), "answerer-x", phase=phase, run_id="demo-run-1")


def attempt(qid: str = "q1", sample: int | None = None, **extra) -> dict:
    return {"kind": "attempt", "qid": qid, "sample": sample, "submitted": True,
            "final_query": "run: orders -> by_month", "answer_text": "42", **extra}


def score(qid: str = "q1", sample: int | None = None, verdict: str | None = "match", **extra) -> dict:
    return {"kind": "score", "qid": qid, "sample": sample, "verdict": verdict, **extra}


def retrieval(qid: str = "q1", sample: int | None = None) -> dict:
    return {"kind": "retrieval_score", "qid": qid, "sample": sample, "verdict": "match",
            "failed": False, "coverage": "covered", "coverage_source": "authored", "recall": 1.0,
            "precision": 0.5, "groups": 1, "delivery": {"measure:orders:revenue": "exact"},
            "missing": [], "noise": ["dimension:orders:id"], "asked_kinds": ["measure"],
            "where_to_fix": None, "owner": None, "component": None, "why": None}


# ------------------------------------------------------------------------------------------
# creating and opening


def test_create_writes_valid_run_json_and_empty_ledger(tmp_path):
    run = make_run(tmp_path)
    info = json.loads((run.dir / "run.json").read_text())
    assert schemas.validate("run", info) == []
    assert info["runId"] == "demo-run-1" and info["phase"] == "baseline"
    assert info["setName"] == "demo" and info["datasetVersion"] == 3 and info["schemaVersion"] == 1
    assert (run.dir / "events.jsonl").read_bytes() == b""


def test_create_over_existing_run_is_refused(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(InputError, match="already exists"):
        Run.create(run.dir, tmp_path / "set", "answerer-x")


def test_create_with_unknown_phase_is_refused(tmp_path):
    with pytest.raises(InputError, match="phase"):
        Run.create(tmp_path / "run", make_set(tmp_path), "m", phase="warmup")


def test_open_without_run_json_raises_input_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="run.json: missing") as info:
        Run.open(tmp_path / "empty")
    assert info.value.exit_code == 3


def test_open_reads_phase_and_run_id(tmp_path):
    make_run(tmp_path, phase="loop")
    run = Run.open(tmp_path / "run")
    assert (run.phase, run.run_id) == ("loop", "demo-run-1")


# ------------------------------------------------------------------------------------------
# appending


def test_append_assigns_event_id_time_and_phase(tmp_path):
    run = make_run(tmp_path)
    [written] = run.append([attempt()])
    assert written["phase"] == "baseline"
    assert len(written["event_id"]) == 32
    assert written["at"].endswith("Z") and written["at"][:4].isdigit()
    [line] = (run.dir / "events.jsonl").read_text().splitlines()
    assert json.loads(line) == written


def test_unknown_field_raises_naming_the_field(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(schemas.SchemaViolation, match="answr_text: unknown field"):
        run.append([attempt(answr_text="typo")])
    assert (run.dir / "events.jsonl").read_bytes() == b""


def test_wrong_type_raises_naming_the_field(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(schemas.SchemaViolation, match="submitted: 'yes' is not of type"):
        run.append([attempt(submitted="yes")])


def test_missing_sample_key_raises_naming_sample(tmp_path):
    run = make_run(tmp_path)
    event = attempt()
    del event["sample"]
    with pytest.raises(schemas.SchemaViolation, match="sample"):
        run.append([event])


def test_unknown_kind_is_refused(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(schemas.SchemaViolation, match="kind"):
        run.append([{"kind": "gate", "decision": "accepted"}])


def test_bad_event_in_batch_writes_nothing(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(schemas.SchemaViolation):
        run.append([attempt(), score(verdict="great")])
    assert run.read().events == []


def test_phase_mismatch_is_refused(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(LedgerError, match="a run has one phase"):
        run.append([attempt(phase="final")])


def test_null_verdict_without_reason_is_refused(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(schemas.SchemaViolation, match="reason"):
        run.append([score(verdict=None)])


@pytest.mark.parametrize("reason", ["judge_error: 529 overloaded", "golden_provisional",
                                    "environment_failure: server down"])
def test_null_verdict_with_documented_reason_is_accepted(tmp_path, reason):
    run = make_run(tmp_path)
    run.append([score(verdict=None, reason=reason)])
    assert run.score("q1", None)["reason"] == reason


def test_second_live_score_is_refused(tmp_path):
    run = make_run(tmp_path)
    run.append([score()])
    with pytest.raises(LedgerError, match="already has a live score"):
        run.append([score(verdict="no_match")])


def test_second_live_human_verdict_is_refused_until_the_first_is_voided(tmp_path):
    run = make_run(tmp_path)
    settle = {"kind": "human_verdict", "qid": "q1", "sample": None, "verdict": "match",
              "why": "rows agree", "settled_by": "Ana"}
    first = run.append_event(settle)
    with pytest.raises(LedgerError, match="already has a live human_verdict"):
        run.append_event({**settle, "verdict": "no_match"})
    run.append([{"kind": "void", "target_event_id": first["event_id"], "reason": "re-settled"},
                {**settle, "verdict": "no_match"}])
    assert [e["verdict"] for e in run.live() if e["kind"] == "human_verdict"] == ["no_match"]


def test_two_scores_for_one_attempt_in_one_batch_are_refused(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(LedgerError, match="already has a live score"):
        run.append([score(), score(verdict="no_match")])
    assert run.read().events == []


def test_scores_of_different_samples_are_independent(tmp_path):
    run = make_run(tmp_path)
    run.append([score(sample=0), score(sample=1), score(sample=None)])
    assert len(run.live()) == 3


def test_void_then_rescore_in_one_batch_is_allowed(tmp_path):
    run = make_run(tmp_path)
    [old] = run.append([score()])
    run.append([{"kind": "void", "target_event_id": old["event_id"], "reason": "stale pin"},
                score(verdict="no_match")])
    assert run.score("q1", None)["verdict"] == "no_match"


def test_rescore_after_earlier_void_is_allowed_from_a_fresh_process_view(tmp_path):
    run = make_run(tmp_path)
    [old] = run.append([score()])
    run.void(old["event_id"], "re-judge")
    # A second Run object has not indexed anything yet: it must read the void from the file.
    Run.open(run.dir).append([score(verdict="near_match")])
    assert run.score("q1", None)["verdict"] == "near_match"


def test_rescore_before_void_is_refused_from_another_run_object(tmp_path):
    run = make_run(tmp_path)
    other = Run.open(run.dir)
    other.append([score()])  # written by someone else after `run` was opened
    with pytest.raises(LedgerError, match="already has a live score"):
        run.append([score(verdict="no_match")])


def test_second_live_retrieval_score_is_refused(tmp_path):
    run = make_run(tmp_path)
    [first] = run.append([retrieval()])
    with pytest.raises(LedgerError, match="retrieval_score"):
        run.append([retrieval()])
    run.append([{"kind": "void", "target_event_id": first["event_id"], "reason": "re-scored"},
                retrieval()])
    assert run.retrieval_score("q1", None)["event_id"] != first["event_id"]


def test_void_of_unknown_event_is_refused(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(LedgerError, match="not an event of this ledger"):
        run.void("0" * 32, "typo")


def test_void_of_a_void_is_refused(tmp_path):
    run = make_run(tmp_path)
    [a] = run.append([attempt()])
    v = run.void(a["event_id"], "wrong transcript")
    with pytest.raises(LedgerError, match="itself a void"):
        run.void(v["event_id"], "undo")


def test_repeated_event_id_is_refused(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt(event_id="fixed-id")])
    with pytest.raises(LedgerError, match="already in the ledger"):
        run.append([attempt(qid="q2", event_id="fixed-id")])


def test_nan_is_refused_rather_than_written_as_invalid_json(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(LedgerError, match="not valid JSON"):
        run.append([attempt(wall_seconds=float("nan"))])


def test_live_view_drops_voided_events_and_voids(tmp_path):
    run = make_run(tmp_path)
    a, b = run.append([attempt(), attempt(qid="q2")])
    run.void(a["event_id"], "re-recorded")
    assert [e["event_id"] for e in run.live()] == [b["event_id"]]
    assert live_view(run.read().events) == run.live()


def test_attempt_and_tool_call_helpers_find_live_events_by_key(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt(sample=0),
                {"kind": "tool_call", "qid": "q1", "sample": 0, "tool": "execute_query",
                 "call_index": 1, "query": "run: orders -> by_month"},
                {"kind": "tool_call", "qid": "q1", "sample": 0, "tool": "get_context",
                 "call_index": 0, "targets": ["measure: revenue"]},
                {"kind": "tool_call", "qid": "q1", "sample": 1, "tool": "get_context", "call_index": 0}])
    assert run.attempt("q1", 0)["answer_text"] == "42"
    assert run.attempt("q1", 1) is None
    assert [c["call_index"] for c in run.tool_calls("q1", 0)] == [0, 1]
    assert ledger_events.attempt_key(run.attempt("q1", 0)) == ("q1", 0, "baseline")


# ------------------------------------------------------------------------------------------
# concurrency (appends never interleave)

WRITERS = 8
PER_WRITER = 2000


def _writer(run_dir: str, writer: int) -> None:
    run = Run.open(run_dir)
    # Lines well above PIPE_BUF (4 KiB) so unlocked writers would interleave; batches of 1-9 events.
    padding = "x" * (5000 + writer)
    seq = 0
    size = 1
    while seq < PER_WRITER:
        batch = []
        for _ in range(min(size, PER_WRITER - seq)):
            batch.append({"kind": "tool_call", "qid": "q1", "sample": writer, "tool": "execute_query",
                          "call_index": seq, "query": padding})
            seq += 1
        run.append(batch)
        size = size % 9 + 1


def test_eight_processes_appending_2000_each_write_16000_whole_lines(tmp_path):
    run = make_run(tmp_path)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(run.dir), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * WRITERS

    data = (run.dir / "events.jsonl").read_bytes()
    assert data.endswith(b"\n")
    lines = data.split(b"\n")[:-1]
    assert len(lines) == WRITERS * PER_WRITER
    read = parse_ledger(data)
    assert read.problems == []
    seen: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
    for event in read.events:
        assert schemas.validate_event(event) == []
        assert event["query"] == "x" * (5000 + event["sample"])  # no bytes from another writer
        seen[event["sample"]].append(event["call_index"])
    # Each writer's events are all there, once, in the order it wrote them.
    assert all(seen[w] == list(range(PER_WRITER)) for w in range(WRITERS))
    assert rule_errors(run.dir) == []


# ------------------------------------------------------------------------------------------
# tolerant reading (a torn last line)


def test_torn_last_line_reader_returns_whole_events_and_names_it(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt(), attempt(qid="q2"), score()])
    path = run.dir / "events.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 25])  # a crash mid-write of the third line
    read = run.read()
    assert [e["kind"] for e in read.events] == ["attempt", "attempt"]
    assert [str(p) for p in read.problems] == [
        "events.jsonl:3: torn line (the last line has no newline; a write was cut off)"]
    assert read.torn


def test_append_after_torn_line_starts_a_fresh_line(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    path = run.dir / "events.jsonl"
    with path.open("ab") as fh:
        fh.write(b'{"kind": "attempt", "qid": "q')
    run.append([attempt(qid="q2")])
    read = run.read()
    assert [e["qid"] for e in read.events] == ["q1", "q2"]
    assert [str(p) for p in read.problems] == ["events.jsonl:2: not valid JSON"]


def test_bad_middle_lines_are_reported_with_their_numbers(tmp_path):
    data = b'{"kind":"void"}\nnot json\n[1,2]\n\n{"kind":"issue"}\n\xff\xfe\n'
    read = parse_ledger(data)
    assert [str(p) for p in read.problems] == ["events.jsonl:2: not valid JSON",
                                               "events.jsonl:3: not a JSON object",
                                               "events.jsonl:4: empty line",
                                               "events.jsonl:6: not valid JSON"]
    assert read.line_numbers == [1, 5]


def test_missing_ledger_reads_as_a_problem_not_an_exception(tmp_path):
    read = ledger_events.read_ledger(tmp_path / "events.jsonl")
    assert read.events == [] and [str(p) for p in read.problems] == ["events.jsonl: missing"]


def test_unreadable_ledger_raises_input_error_naming_it(tmp_path):
    (tmp_path / "events.jsonl").mkdir()  # present, but not a file that can be read
    with pytest.raises(InputError, match=r"events\.jsonl: cannot be read") as info:
        ledger_events.read_ledger(tmp_path / "events.jsonl")
    assert info.value.exit_code == 3


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_read_as_events_or_problems(data):
    read = parse_ledger(data)
    assert all(isinstance(e, dict) for e in read.events)
    assert len(read.events) == len(read.line_numbers)
    assert all(p.line is None or p.line >= 1 for p in read.problems)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_json, max_size=8))
def test_arbitrary_json_lines_read_as_events_or_problems(values):
    data = b"".join(json.dumps(v).encode() + b"\n" for v in values)
    read = parse_ledger(data)
    by_line = dict(zip(read.line_numbers, read.events, strict=True))
    problem_lines = {p.line for p in read.problems}
    assert set(by_line) <= {n for n, v in enumerate(values, 1) if isinstance(v, dict)}
    for n, v in enumerate(values, start=1):
        if not isinstance(v, dict):
            continue
        if "event_id" in v:  # a kit line is kept exactly as written
            assert by_line[n] == v
        else:  # a public-loop line: an event `line-N`, or a problem naming its line
            assert (n in by_line and by_line[n]["event_id"] == f"line-{n}") != (n in problem_lines)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(event=st.dictionaries(st.sampled_from(["kind", "qid", "sample", "verdict", "reason", "x"]),
                             _json, max_size=6)
       | st.fixed_dictionaries({"kind": st.sampled_from(["score", "attempt", "void"])}, optional={
           "qid": _json, "sample": _json, "verdict": _json, "target_event_id": _json}))
def test_arbitrary_events_are_appended_or_refused_with_input_error(tmp_path_factory, event):
    run = make_run(tmp_path_factory.mktemp("h"))
    try:
        run.append([event])
    except InputError:
        assert run.read().events == []
    else:
        assert len(run.read().events) == 1


# ------------------------------------------------------------------------------------------
# run.json updates


def test_update_info_sets_pins_and_leaves_no_temp_file(tmp_path):
    run = make_run(tmp_path)
    run.update_info(judgeModel="claude-x", judgeVersion=3, status="complete")
    info = json.loads((run.dir / "run.json").read_text())
    assert (info["judgeModel"], info["judgeVersion"], info["status"]) == ("claude-x", 3, "complete")
    assert sorted(p.name for p in run.dir.iterdir()) == ["events.jsonl", "run.json"]


def test_update_info_refuses_unknown_keys(tmp_path):
    run = make_run(tmp_path)
    before = (run.dir / "run.json").read_bytes()
    with pytest.raises(InputError, match="judgeModle: unknown run.json key"):
        run.update_info(judgeModle="claude-x")
    assert (run.dir / "run.json").read_bytes() == before


def test_update_info_refuses_changing_the_phase(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(InputError, match="phase: part of the run's identity"):
        run.update_info(phase="final")


def test_update_info_refuses_a_bad_value(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(schemas.SchemaViolation, match="status"):
        run.update_info(status="done")


# ------------------------------------------------------------------------------------------
# artifacts (paths only from a validated qid and sample)


@pytest.mark.parametrize("qid", ["../../x", "a/b", ".hidden", "", "..", "q1\n", "a\\b", None, 7])
def test_unsafe_qid_is_refused_before_any_path_is_built(tmp_path, monkeypatch, qid):
    run = make_run(tmp_path)
    built = []
    monkeypatch.setattr(ledger_run, "sample_segment", lambda s: built.append(s) or "_")
    with pytest.raises(InputError, match="not a safe id"):
        run.artifact_dir(qid, None)
    with pytest.raises(InputError, match="not a safe id"):
        run.write_artifact(qid, None, "prediction.csv", "a\n")
    with pytest.raises(InputError, match="not a safe id"):
        check_qid(qid)
    assert built == []  # refused before the sample segment (or any path) was computed
    assert not (run.dir / "artifacts").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "set"]


@pytest.mark.parametrize("name", ["../x.csv", "/etc/passwd", "a/../../b", ".env", ""])
def test_unsafe_artifact_name_is_refused(tmp_path, name):
    run = make_run(tmp_path)
    with pytest.raises(InputError, match="artifact name"):
        run.write_artifact("q1", None, name, "x")


@pytest.mark.parametrize("sample", [-1, True, "1", 1.5])
def test_bad_sample_is_refused(tmp_path, sample):
    run = make_run(tmp_path)
    with pytest.raises(InputError, match="sample"):
        run.artifact_dir("q1", sample)


def test_null_sample_folder_is_underscore(tmp_path):
    run = make_run(tmp_path)
    assert sample_segment(None) == "_" and sample_segment(2) == "2"
    assert run.artifact_dir("q1", None) == run.dir / "artifacts" / "q1" / "_"


def test_write_artifact_is_write_once_with_numbered_copies(tmp_path):
    run = make_run(tmp_path)
    paths = [run.write_artifact("q1", 0, "prediction.csv", f"n\n{i}\n") for i in range(3)]
    assert [p.name for p in paths] == ["prediction.csv", "prediction.2.csv", "prediction.3.csv"]
    assert [p.read_text() for p in paths] == ["n\n0\n", "n\n1\n", "n\n2\n"]
    assert run.relpath(paths[1]) == "artifacts/q1/0/prediction.2.csv"


def test_write_artifact_serialises_dicts_as_json(tmp_path):
    run = make_run(tmp_path)
    p = run.write_artifact("q1", None, "envelope.json", {"rows": [1]})
    assert json.loads(p.read_text()) == {"rows": [1]}


def test_new_artifact_dir_never_reuses_a_folder(tmp_path):
    run = make_run(tmp_path)
    first = run.new_artifact_dir("q1", None, "judge")
    (first / "request.json").write_text("{}")
    second = run.new_artifact_dir("q1", None, "judge")
    assert (first.name, second.name) == ("judge", "judge.2")
    assert run.relpath(second) == "artifacts/q1/_/judge.2"


def test_resolve_refuses_a_recorded_path_outside_the_run(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(InputError, match="outside the run"):
        run.resolve("../set/cases.jsonl")


def test_event_lines_are_single_lines_even_with_newlines_in_text(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt(answer_text="line one\nline two\u2028three")])
    assert len((run.dir / "events.jsonl").read_bytes().split(b"\n")) == 2
    assert run.read().events[0]["answer_text"] == "line one\nline two\u2028three"


def test_ledger_file_is_only_ever_appended(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    first = (run.dir / "events.jsonl").read_bytes()
    [s] = run.append([score()])
    run.void(s["event_id"], "x")
    assert (run.dir / "events.jsonl").read_bytes().startswith(first)
    assert os.path.getsize(run.dir / "events.jsonl") > len(first)


def test_value_json_cannot_hold_is_refused_with_input_error(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(LedgerError, match="not valid JSON"):
        run.append([attempt(givens={"path": Path("/tmp")})])
    assert run.read().events == []


# ------------------------------------------------------------------------------------------
# the appender's incremental index (rules 5 and void targets across processes)


def _in_another_process(fn, *args) -> None:
    """Run `fn(*args)` in a forked process (a separate Run object and index) and wait for it."""
    proc = multiprocessing.get_context("fork").Process(target=fn, args=args)
    proc.start()
    proc.join()
    assert proc.exitcode == 0


def _append_score(run_dir: str, verdict: str) -> None:
    Run.open(run_dir).append([score(verdict=verdict)])


def _void_live_score(run_dir: str) -> None:
    run = Run.open(run_dir)
    run.void(run.score("q1", None)["event_id"], "re-judge")


def _append_attempt_with_id(run_dir: str, event_id: str) -> None:
    Run.open(run_dir).append([attempt(qid="q2", event_id=event_id)])


def _append_tool_calls(run_dir: str, n: int) -> None:
    Run.open(run_dir).append([{"kind": "tool_call", "qid": "q2", "sample": None, "tool": "get_context",
                               "call_index": i, "targets": ["measure: revenue"]} for i in range(n)])


def test_second_live_score_written_by_another_process_between_appends_is_refused(tmp_path):
    run = make_run(tmp_path)
    run.append([score(qid="q2")])  # this process has now indexed the ledger
    _in_another_process(_append_score, str(run.dir), "match")
    with pytest.raises(LedgerError, match="already has a live score"):
        run.append([score(verdict="no_match")])
    assert rule_errors(run.dir) == []


def rule_errors(run_dir) -> list[str]:
    """validate.py's errors about the ledger's own rules (lines, ids, voids, one live score),
    leaving out the tie rule's (these ledgers hold scores of attempts they never recorded)."""
    return [e for e in ledger_validate.validate_run(run_dir).errors if "not tied" not in e]


def test_void_written_by_another_process_frees_the_slot(tmp_path):
    run = make_run(tmp_path)
    run.append([score()])
    _in_another_process(_void_live_score, str(run.dir))
    run.append([score(verdict="near_match")])
    assert run.score("q1", None)["verdict"] == "near_match"
    assert rule_errors(run.dir) == []


def test_void_of_an_event_another_process_wrote_is_accepted_and_a_second_refused(tmp_path):
    run = make_run(tmp_path)
    run.append([score()])
    _in_another_process(_append_tool_calls, str(run.dir), 3)
    target = run.read().events[-1]["event_id"]
    run.void(target, "re-recorded")
    with pytest.raises(LedgerError, match="already voided"):
        run.void(target, "again")


def test_id_another_process_chose_cannot_be_reused(tmp_path):
    run = make_run(tmp_path)
    run.append([score()])
    _in_another_process(_append_attempt_with_id, str(run.dir), "chosen-id")
    with pytest.raises(LedgerError, match="already in the ledger"):
        run.append([attempt(event_id="chosen-id")])


def test_second_append_reads_only_the_lines_written_since_the_first(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    run.append([attempt(), score()])
    indexed_to = (run.dir / "events.jsonl").stat().st_size
    _in_another_process(_append_tool_calls, str(run.dir), 5)
    starts: list[int] = []
    take = ledger_index.Index._take_block

    def spy(self, block, start):
        starts.append(start)
        return take(self, block, start)

    monkeypatch.setattr(ledger_index.Index, "_take_block", spy)
    run.append([score(qid="q2")])
    assert starts == [indexed_to]  # one block, from where the first append stopped
    assert run._index.offset == (run.dir / "events.jsonl").stat().st_size


def test_plain_batches_do_not_read_the_ledger(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    monkeypatch.setattr(ledger_index.Index, "refresh", lambda self, fd: pytest.fail("ledger was read"))
    run.append([attempt(), {"kind": "tool_call", "qid": "q1", "sample": None,
                            "tool": "get_context", "call_index": 0}])
    assert len(run.read().events) == 2


def test_replaced_ledger_file_is_indexed_again(tmp_path):
    run = make_run(tmp_path)
    path = run.dir / "events.jsonl"
    run.append([attempt()])
    earlier = path.read_bytes()
    [s] = run.append([score()])
    # An earlier copy restored over the ledger (a new inode, the score not in it, the same size
    # or not): the index built from the old file must not be trusted.
    copy = run.dir / "restored.jsonl"
    copy.write_bytes(earlier + b"\n" * (len(path.read_bytes()) - len(earlier)))
    os.replace(copy, path)
    run.append([score(verdict="no_match")])
    with pytest.raises(LedgerError, match="not an event of this ledger"):
        run.void(s["event_id"], "it is gone")


def test_truncated_ledger_is_indexed_again(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    [s] = run.append([score()])
    path = run.dir / "events.jsonl"
    first_line = path.read_bytes().split(b"\n")[0] + b"\n"
    with path.open("r+b") as fh:  # same inode, shorter than what was indexed
        fh.truncate(len(first_line))
    run.append([score(verdict="no_match")])
    assert [e["kind"] for e in run.read().events] == ["attempt", "score"]
    assert run.score("q1", None)["event_id"] != s["event_id"]


def test_hand_written_score_without_final_newline_counts(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    with (run.dir / "events.jsonl").open("ab") as fh:
        fh.write(b'{"kind": "score", "event_id": "by-hand", "at": "2026-11-30T12:00:00Z", '
                 b'"qid": "q1", "sample": null, "phase": "baseline", "verdict": "match"}')
    with pytest.raises(LedgerError, match="already has a live score"):
        run.append([score(verdict="no_match")])
    # The refused batch wrote nothing; voiding the hand-written score then re-scoring works.
    run.append([{"kind": "void", "target_event_id": "by-hand", "reason": "typed by hand"},
                score(verdict="no_match")])
    assert run.score("q1", None)["verdict"] == "no_match"
    assert rule_errors(run.dir) == []


def test_repeated_kind_key_is_decoded_as_json_would(tmp_path):
    run = make_run(tmp_path)
    # The kit's prefix, but a later "kind" wins in json.loads: the line is a score.
    line = ('{"kind":"attempt","event_id":"dup-kind","at":"2026-11-30T12:00:00Z","qid":"q1",'
            '"sample":null,"phase":"baseline","kind":"score","verdict":"match"}\n')
    with (run.dir / "events.jsonl").open("a") as fh:
        fh.write(line)
    with pytest.raises(LedgerError, match="already has a live score"):
        run.append([score()])


def test_id_hash_collision_is_read_back_not_trusted(tmp_path):
    run = make_run(tmp_path)
    [a] = run.append([attempt(), score()])[:1]
    index = run._index
    # Pretend "ghost" hashes like the attempt's line: only reading the line back can tell.
    index.ids.add(ledger_index._id_hash("ghost"), 0)
    with pytest.raises(LedgerError, match="not an event of this ledger"):
        run.void("ghost", "no such event")
    run.void(a["event_id"], "still found")


def test_index_keeps_ids_not_events(tmp_path):
    run = make_run(tmp_path)
    _append_tool_calls(str(run.dir), 500)
    [s] = run.append([score()])
    index = run._index
    assert len(index.ids) == 501
    assert index.rules.live_unique == {("score", ("q1", None, "baseline")): s["event_id"]}
    assert index.rules.void_ids == set() and index.rules.voided == {}


# ------------------------------------------------------------------------------------------
# Regression: planted links turned the kit's writes under a run into writes outside it.

def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir(exist_ok=True)
    return out


def test_append_through_a_linked_ledger_is_refused_and_the_target_untouched(tmp_path):
    run = make_run(tmp_path)
    target = _outside(tmp_path) / "events.jsonl"
    target.write_text("")
    run.events_path.unlink()
    run.events_path.symlink_to(target)
    with pytest.raises(InputError, match="symbolic link"):
        run.append([attempt()])
    assert target.read_text() == ""


def test_run_json_rewrite_replaces_a_planted_link(tmp_path):
    run = make_run(tmp_path)
    target = _outside(tmp_path) / "run.json"
    target.write_text(run.info_path.read_text())
    run.info_path.unlink()
    run.info_path.symlink_to(target)
    run.update_info(status="complete")
    assert not run.info_path.is_symlink() and json.loads(run.info_path.read_text())["status"] == "complete"
    assert "status" not in json.loads(target.read_text())


def test_artifact_under_a_linked_artifacts_folder_is_refused(tmp_path):
    run = make_run(tmp_path)
    outside = _outside(tmp_path)
    (run.dir / "artifacts").symlink_to(outside)
    with pytest.raises(InputError, match="symbolic link|outside the run folder"):
        run.write_artifact("q1", None, "prediction.csv", "a\n1\n")
    assert list(outside.iterdir()) == []


def test_artifact_over_a_dangling_link_is_refused(tmp_path):
    run = make_run(tmp_path)
    folder = run.artifact_dir("q1", None)
    folder.mkdir(parents=True)
    (folder / "prediction.csv").symlink_to(_outside(tmp_path) / "stolen.csv")
    with pytest.raises(InputError, match="symbolic link"):
        run.write_artifact("q1", None, "prediction.csv", "a\n1\n")
    assert not (tmp_path / "outside" / "stolen.csv").exists()


def test_new_artifact_folder_never_enters_a_linked_one(tmp_path):
    run = make_run(tmp_path)
    outside = _outside(tmp_path)
    folder = run.artifact_dir("q1", None)
    folder.mkdir(parents=True)
    (folder / "judge").symlink_to(outside)
    made = run.new_artifact_dir("q1", None, "judge")
    assert made.name == "judge.2" and not made.is_symlink()
    assert run.write_once(made, "verdict.json", {"verdict": "match"}) == made / "verdict.json"
    assert list(outside.iterdir()) == []


def test_set_mcp_url_credentials_are_not_copied_into_run_json(tmp_path):
    set_dir = make_set(tmp_path)
    config = json.loads((set_dir / "set.json").read_text())
    config["mcpUrl"] = "https://ana:Sup3rSecretPw@publisher.example/mcp"
    (set_dir / "set.json").write_text(json.dumps(config))
    run = Run.create(tmp_path / "run", set_dir, "answerer-x", run_id="demo-run-1")
    assert "Sup3rSecretPw" not in run.info_path.read_text()
    assert run.info["mcpUrl"] == "https://ana:[REDACTED]@publisher.example/mcp"



# The tolerant reader never raises on a damaged ledger: every whole line it can use, and the
# lines it cannot, each named (hostile input).
BASELINE_EVENTS = Path(__file__).resolve().parents[1] / "evals" / "bookshop" / "runs" / "baseline" / "events.jsonl"


@FUZZ
@given(data=st.data())
def test_damaged_ledger_is_read_tolerantly(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("l") / "events.jsonl"
    text = data.draw(mutated_lines(read_lines(BASELINE_EVENTS)))
    path.write_bytes(data.draw(damaged_bytes(text.encode("utf-8", "backslashreplace"))))
    # A line without an event_id is read as the public loop's; one that cannot be placed as
    # either stops the reader with one line naming the file (exit 3), never a traceback.
    read = reads_or_refuses(lambda: ledger_events.read_ledger(path), path)
    if read is not None:
        assert all(isinstance(e, dict) for e in read.events)
        assert all(p.line is None or p.line >= 1 for p in read.problems)


# ------------------------------------------------------------------------------------------
# effective_verdict: the judge's verdict, or a person's


def _score(verdict, **kw):
    return {"kind": "score", "event_id": "s1", "qid": "q1", "sample": None, "phase": "loop",
            "verdict": verdict, **kw}


def _human(verdict, **kw):
    return {"kind": "human_verdict", "event_id": "h1", "qid": "q1", "sample": None,
            "phase": "loop", "verdict": verdict, "why": "w", "settled_by": "Ana", **kw}


def test_effective_verdict_without_a_person_is_the_judges():
    eff = effective_verdict(_score("near_match", gold_status="suspect"))
    assert (eff.verdict, eff.gold_status, eff.settled_by, eff.judge_verdict) == (
        "near_match", "suspect", None, "near_match")


def test_effective_verdict_of_a_settled_attempt_is_the_persons_keeping_the_judges_read():
    eff = effective_verdict(_score("needs_human", gold_status="suspect"),
                            _human("no_match", gold_status="verified"))
    assert (eff.verdict, eff.reason, eff.gold_status, eff.settled_by, eff.judge_verdict) == (
        "no_match", None, "verified", "Ana", "needs_human")


@pytest.mark.parametrize("reason", ["contaminated", "answerer_truncated", "not_submitted",
                                    "golden_provisional", "environment_failure: no runtime"])
def test_a_person_never_settles_over_a_mechanical_null(reason):
    eff = effective_verdict(_score(None, reason=reason), _human("match"))
    assert (eff.verdict, eff.reason, eff.settled_by) == (None, reason, None)


def test_a_person_may_settle_what_the_judge_could_not_parse():
    eff = effective_verdict(_score(None, reason="judge_unparseable"), _human("match"))
    assert (eff.verdict, eff.settled_by) == ("match", "Ana")


def test_a_persons_verdict_covers_only_the_attempt_it_judged():
    human = _human("match", attempt_event_id="a1")
    assert effective_verdict(_score("no_match", attempt_event_id="a1"), human,
                             {"event_id": "a1"}).verdict == "match"
    assert effective_verdict(_score("no_match", attempt_event_id="a2"), human,
                             {"event_id": "a2"}).verdict == "no_match"


def test_no_score_means_no_verdict_whoever_settled():
    assert effective_verdict(None, _human("match")).verdict is None


def test_supersede_voids_first_with_each_named_reason_then_appends_in_one_batch(tmp_path):
    run = make_run(tmp_path)
    [s, r] = run.append([score(), retrieval()])
    done = run.supersede([s, r], [score(verdict="no_match"), retrieval()], "re-scored",
                         reasons={r["event_id"]: "attribution re-decided"})
    assert [(v["target_event_id"], v["reason"]) for v in done.voids] == [
        (s["event_id"], "re-scored"), (r["event_id"], "attribution re-decided")]
    assert [e["kind"] for e in done.events] == ["score", "retrieval_score"]
    assert run.score("q1", None)["verdict"] == "no_match"
    # Refused whole: a second supersede of the same old score writes nothing at all.
    lines = run.events_path.read_bytes()
    with pytest.raises(LedgerError, match="already voided"):
        run.supersede([s], [score(verdict="match")], "again")
    assert run.events_path.read_bytes() == lines
