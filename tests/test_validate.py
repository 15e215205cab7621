"""validate.py, validate_set.py and new_run.py, run as a user runs them: exit codes and messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_support import FUZZ, damaged_bytes, mutated_lines, read_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.validate import validate_run, validate_runs
from malloy_evals.sets.eval_set import check_set
from tie_support import tied

KIT = Path(__file__).resolve().parents[1]
SCRIPTS = KIT / "skills" / "eval-answer" / "scripts"


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / f"{name}.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=KIT, timeout=600, check=False)


def make_set(root: Path, cases: list[dict] | None = None, config: dict | None = None) -> Path:
    d = root / "set"
    d.mkdir(exist_ok=True)
    (d / "set.json").write_text(json.dumps(config or {
        "name": "demo", "datasetVersion": 1, "targetPackage": "demo", "targetModelPath": "demo.malloy"}))
    cases = cases if cases is not None else [{"qid": "q1", "question": "How many?"}]
    (d / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return d


def make_run(root: Path) -> Run:
    return Run.create(root / "run", make_set(root), "answerer-x", run_id="r1")


def attempt(**extra) -> dict:
    return {"kind": "attempt", "qid": "q1", "sample": None, "submitted": True,
            "final_query": "run: a -> b", "answer_text": "3", **extra}


def raw_line(run: Run, obj: dict) -> None:
    """Append a line by hand, bypassing the library (as a broken writer elsewhere would)."""
    with (run.dir / "events.jsonl").open("a") as fh:
        fh.write(json.dumps(obj) + "\n")


def written(run: Run, event: dict) -> dict:
    """An event as the library would write it, for hand-made ledgers."""
    return {"event_id": f"e{abs(hash(json.dumps(event, sort_keys=True))) % 10**9}",
            "at": "2026-11-30T12:00:00Z", "phase": run.phase, **event}


# ------------------------------------------------------------------------------------------
# new_run.py


def test_new_run_creates_a_run_that_validates(tmp_path):
    s = make_set(tmp_path)
    out = script("new_run", "--set", s, "--out", tmp_path / "r", "--answerer-model", "m",
                 "--phase", "loop", "--run-id", "demo-loop-1", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["run_id"] == "demo-loop-1" and doc["phase"] == "loop"
    assert script("validate", tmp_path / "r").returncode == 0


def test_new_run_over_existing_run_exits_3_without_traceback(tmp_path):
    s = make_set(tmp_path)
    script("new_run", "--set", s, "--out", tmp_path / "r", "--answerer-model", "m")
    out = script("new_run", "--set", s, "--out", tmp_path / "r", "--answerer-model", "m")
    assert out.returncode == 3
    assert "run.json: already exists" in out.stderr and "Traceback" not in out.stderr


def test_new_run_with_broken_set_exits_3_naming_file_and_line(tmp_path):
    s = make_set(tmp_path, cases=[{"qid": "q1", "question": "x"}, {"qid": "q2", "question": 5}])
    out = script("new_run", "--set", s, "--out", tmp_path / "r", "--answerer-model", "m")
    assert out.returncode == 3
    assert f"{s / 'cases.jsonl'}:2: question: 5 is not of type 'string'" in out.stderr


def test_new_run_help_shows_real_command_lines():
    out = script("new_run", "--help")
    assert out.returncode == 0 and "skills/eval-answer/scripts/new_run.py --set evals/bookshop" in out.stdout


# ------------------------------------------------------------------------------------------
# validate.py


def test_clean_run_exits_0_with_one_line(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    run.append([tied(run.dir, {"kind": "score", "qid": "q1", "sample": None, "verdict": "match"})])
    out = script("validate", run.dir)
    assert out.returncode == 0
    assert out.stdout.splitlines() == [f"{run.dir}: ok (2 events; 0 error(s), 0 warning(s))"]


def test_missing_run_json_exits_1(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "events.jsonl").write_text("")
    out = script("validate", tmp_path / "r")
    assert out.returncode == 1
    assert "error: run.json: missing" in out.stdout


def test_folder_that_does_not_exist_is_a_usage_error(tmp_path):
    # Drift fixed: a path argument that is not there is exit 2 in every script (it was 3 here).
    out = script("validate", tmp_path / "absent")
    assert out.returncode == 2 and "absent: no such folder" in out.stderr and out.stdout == ""


def test_unreadable_folder_is_reported_unreadable_with_exit_3(tmp_path):
    report = validate_runs([tmp_path / "absent"])
    assert report.exit_code == 3 and [r.status for r in report.runs] == ["unreadable"]


def test_torn_line_exits_1_and_names_it(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt(), attempt(qid="q2")])
    data = (run.dir / "events.jsonl").read_bytes()
    (run.dir / "events.jsonl").write_bytes(data[:-30])
    out = script("validate", run.dir)
    assert out.returncode == 1
    assert "error: events.jsonl:2: torn line" in out.stdout


def test_second_live_score_exits_1_naming_both_lines(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    raw_line(run, written(run, tied(run.dir, {"kind": "score", "qid": "q1", "sample": None,
                                              "verdict": "match"})))
    raw_line(run, written(run, tied(run.dir, {"kind": "score", "qid": "q1", "sample": None,
                                              "verdict": "no_match"})))
    check = validate_run(run.dir)
    # The append API's rule and words (LedgerRules), with the line of the score still live.
    assert check.errors == [("events.jsonl:3: score: attempt (q1, no sample, baseline) already "
                             "has a live score (line 2, not voided)")]


def test_voided_score_then_rescore_is_clean(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt()])
    [s] = run.append([tied(run.dir, {"kind": "score", "qid": "q1", "sample": None,
                                     "verdict": "match"})])
    run.append([{"kind": "void", "target_event_id": s["event_id"], "reason": "stale"},
                tied(run.dir, {"kind": "score", "qid": "q1", "sample": None,
                               "verdict": "no_match"})])
    assert validate_run(run.dir).errors == []


def test_void_pointing_nowhere_is_an_error(tmp_path):
    run = make_run(tmp_path)
    raw_line(run, {"kind": "void", "event_id": "v1", "at": "2026-11-30T12:00:00Z",
                   "target_event_id": "nothing", "reason": "x"})
    assert validate_run(run.dir).errors == [
        "events.jsonl:1: void: target_event_id 'nothing' is not an event of this ledger"]


def test_event_of_another_phase_is_an_error(tmp_path):
    run = make_run(tmp_path)
    raw_line(run, {**written(run, attempt()), "phase": "final"})
    assert validate_run(run.dir).errors == [
        "events.jsonl:1: attempt: phase 'final' differs from run.json's 'baseline'"]


def test_repeated_event_id_is_an_error(tmp_path):
    run = make_run(tmp_path)
    e = written(run, attempt())
    raw_line(run, e)
    raw_line(run, e)
    assert validate_run(run.dir).errors == [f"events.jsonl:2: event_id '{e['event_id']}' repeats line 1"]


def test_bad_value_is_an_error_naming_line_and_field(tmp_path):
    run = make_run(tmp_path)
    raw_line(run, written(run, {"kind": "score", "qid": "q1", "sample": None, "verdict": "great"}))
    out = script("validate", run.dir, "--json")
    assert out.returncode == 1
    [r] = json.loads(out.stdout)["runs"]
    assert r["errors"][0].startswith("events.jsonl:1: score: verdict: 'great' is not one of")


def test_unknown_fields_are_warnings_with_exit_0(tmp_path):
    run = make_run(tmp_path)
    raw_line(run, {**written(run, attempt()), "skills_invoked": []})
    info = json.loads((run.dir / "run.json").read_text())
    (run.dir / "run.json").write_text(json.dumps({**info, "label": "x"}))
    out = script("validate", run.dir)
    assert out.returncode == 0
    assert "  warning: run.json: label: unknown field" in out.stdout.splitlines()
    assert "  warning: events.jsonl:1: attempt: skills_invoked: unknown field" in out.stdout.splitlines()


def test_reported_calls_above_host_tool_uses_is_a_warning_with_exit_0(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt(reported_calls=5, host_tool_uses=2)])
    check = validate_run(run.dir)
    assert check.exit_code == 0 and check.errors == []
    assert check.warnings[0].startswith("events.jsonl:1: attempt q1: reported_calls 5 > host_tool_uses 2")


def test_several_folders_one_line_each_and_worst_exit(tmp_path):
    good = make_run(tmp_path)
    (tmp_path / "bad").mkdir()
    out = script("validate", good.dir, tmp_path / "bad", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1
    assert [r["status"] for r in doc["runs"]] == ["ok", "invalid"]
    report = validate_runs([good.dir, tmp_path / "absent"])
    assert report.exit_code == 3 and [r.status for r in report.runs] == ["ok", "unreadable"]


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(run_json=st.binary(max_size=300), events=st.binary(max_size=800))
def test_arbitrary_bytes_in_a_run_folder_give_a_result(tmp_path_factory, run_json, events):
    d = tmp_path_factory.mktemp("r")
    (d / "run.json").write_bytes(run_json)
    (d / "events.jsonl").write_bytes(events)
    check = validate_run(d)
    assert check.exit_code in (0, 1)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(["kind", "event_id", "qid", "sample", "phase",
                                                        "verdict", "target_event_id", "reported_calls",
                                                        "host_tool_uses"]), inner, max_size=5),
                     max_leaves=15)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(info=_json, events=st.lists(_json | st.fixed_dictionaries(
    {"kind": st.sampled_from(["void", "score", "attempt"]), "event_id": st.sampled_from(["a", "b"])},
    optional={"target_event_id": st.sampled_from(["a", "b", "c"]), "qid": _json, "sample": _json}),
    max_size=6))
def test_arbitrary_json_in_a_run_folder_gives_a_result(tmp_path_factory, info, events):
    d = tmp_path_factory.mktemp("r")
    (d / "run.json").write_text(json.dumps(info))
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    check = validate_run(d)
    assert check.exit_code in (0, 1)
    assert all(isinstance(e, str) for e in check.errors + check.warnings)


# ------------------------------------------------------------------------------------------
# validate_set.py


def test_set_with_unknown_field_is_a_warning_only(tmp_path):
    s = make_set(tmp_path, cases=[{"qid": "q1", "question": "How many?", "shapes": ["A9"]}])
    out = script("validate_set", s)
    assert out.returncode == 0
    assert out.stdout.splitlines() == [f"{s}: ok (1 cases; 0 error(s), 1 warning(s))",
                                       "  warning: cases.jsonl:1: shapes: unknown field"]


def test_set_with_bad_golden_kind_exits_1_naming_file_line_and_field(tmp_path):
    s = make_set(tmp_path, cases=[{"qid": "q1", "question": "a"},
                                  {"qid": "q2", "question": "b", "golden": {"kind": "scalr"}}])
    out = script("validate_set", s)
    assert out.returncode == 1
    assert "  error: cases.jsonl:2: golden.kind: 'scalr' is not one of" in out.stdout


def test_set_folder_that_does_not_exist_is_a_usage_error(tmp_path):
    # Drift fixed: a path argument that is not there is exit 2 in every script (it was 3 here).
    out = script("validate_set", tmp_path / "absent", "--json")
    assert out.returncode == 2 and "absent: no such folder" in out.stderr and out.stdout == ""


def test_unreadable_set_folder_is_reported_unreadable_with_exit_3(tmp_path):
    report = check_set(tmp_path / "absent")
    assert report.exit_code == 3 and report.status == "unreadable"


@pytest.mark.parametrize("name", ["validate", "validate_set", "new_run"])
def test_script_without_arguments_is_a_usage_error(name):
    assert script(name).returncode == 2


def test_issue_naming_a_code_outside_the_diagnose_table_is_an_error(tmp_path):
    # The schema checks only a code's spelling; membership comes from eval-diagnose's table.
    run = make_run(tmp_path)
    issue = {"kind": "issue", "event_id": "i1", "at": "2026-11-30T12:00:00Z", "issue_id": "x",
             "qids": ["q1"], "component": "construction", "owner": "agent-skill",
             "diagnosis": "d"}
    raw_line(run, {**issue, "primary_code": "MISSING", "contributing_codes": ["AMBIGUOUS"]})
    assert validate_run(run.dir).errors == []
    raw_line(run, {**issue, "event_id": "i2", "primary_code": "MADE_UP",
                   "contributing_codes": ["MISSING", "ALSO_MADE_UP"]})
    assert validate_run(run.dir).errors == [
        "events.jsonl:2: issue 'x': cause code 'MADE_UP' is not a row of the eval-diagnose table",
        ("events.jsonl:2: issue 'x': cause code 'ALSO_MADE_UP' is not a row of the "
         "eval-diagnose table")]



# ---------------------------------------------------------------- hostile input (fuzzed)

BASELINE = KIT / "evals" / "bookshop" / "runs" / "baseline"


@FUZZ
@given(data=st.data())
def test_mutated_sample_ledger_gives_findings_naming_file_and_line(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("r")
    (d / "run.json").write_bytes((BASELINE / "run.json").read_bytes())
    text = data.draw(mutated_lines(read_lines(BASELINE / "events.jsonl")))
    raw = text.encode("utf-8", "backslashreplace")
    (d / "events.jsonl").write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    check = validate_run(d)
    assert check.exit_code in (0, 1)
    for problem in [*check.errors, *check.warnings]:
        assert "\n" not in str(problem)


# Regression: a lone surrogate escape (`\ud800`) in a ledger line crashed validate.py.
def test_validate_script_survives_a_lone_surrogate_in_a_ledger_line(tmp_path):
    run = make_run(tmp_path)
    run.append([attempt(answer_text="fine")])
    line = run.events_path.read_text().replace('"fine"', '"\\ud800 fine"')
    run.events_path.write_text(line)
    for args in ([run.dir], [run.dir, "--json"]):
        out = script("validate", *args)
        assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stderr
    assert json.loads(script("validate", run.dir, "--json").stdout)["runs"][0]["status"] == "ok"


# ------------------------------------------------------------------------------------------
# validate.py and the append API apply one rule set (LedgerRules), under one lock discipline


def test_second_void_of_a_voided_event_is_refused_by_append_and_by_validate(tmp_path):
    # validate.py used to accept what Run.append refuses: a second void of a voided event.
    run = make_run(tmp_path)
    [s] = run.append([{"kind": "score", "qid": "q1", "sample": None, "verdict": "match"}])
    [first] = run.append([{"kind": "void", "target_event_id": s["event_id"], "reason": "stale"}])
    with pytest.raises(Exception, match="already voided"):
        run.void(s["event_id"], "again")
    raw_line(run, {"kind": "void", "event_id": "v2", "at": "2026-11-30T12:00:00Z",
                   "target_event_id": s["event_id"], "reason": "again, by hand"})
    assert validate_run(run.dir).errors == [
        f"events.jsonl:3: void: {s['event_id']!r} is already voided (line 2)"]
    assert first["event_id"] != "v2"


def test_void_of_a_void_is_refused_by_both(tmp_path):
    run = make_run(tmp_path)
    [a] = run.append([attempt()])
    v = run.void(a["event_id"], "re-recorded")
    with pytest.raises(Exception, match="itself a void"):
        run.void(v["event_id"], "undo")
    raw_line(run, {"kind": "void", "event_id": "v2", "at": "2026-11-30T12:00:00Z",
                   "target_event_id": v["event_id"], "reason": "undo, by hand"})
    [error] = validate_run(run.dir).errors
    assert error.startswith(f"events.jsonl:3: void: {v['event_id']!r} is itself a void")
    assert error.endswith("(line 2)")


def test_void_before_its_target_names_the_later_line(tmp_path):
    run = make_run(tmp_path)
    raw_line(run, {"kind": "void", "event_id": "v1", "at": "2026-11-30T12:00:00Z",
                   "target_event_id": "a-later", "reason": "x"})
    raw_line(run, {**written(run, attempt()), "event_id": "a-later"})
    assert validate_run(run.dir).errors == [
        "events.jsonl:1: void: target 'a-later' comes later (line 2)"]


def test_validate_waits_for_an_append_in_progress_instead_of_calling_it_torn(tmp_path):
    # validate.py read without the writers' lock and reported the half-written batch of a
    # concurrent append as a torn line.
    import fcntl
    import threading

    run = make_run(tmp_path)
    run.append([attempt()])
    line = json.dumps(written(run, attempt(qid="q2"))).encode() + b"\n"
    fd = os.open(run.events_path, os.O_WRONLY | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)            # an appender, mid-write
        os.write(fd, line[:40])
        results: list = []
        reader = threading.Thread(target=lambda: results.append(validate_run(run.dir)))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive()                   # it waits for the lock ...
        os.write(fd, line[40:])
        fcntl.flock(fd, fcntl.LOCK_UN)
        reader.join(10)
    finally:
        os.close(fd)
    [check] = results                              # ... and then sees the whole line
    assert check.errors == [] and check.count == 2


def test_validate_and_validate_set_print_one_report_shape(tmp_path):
    run = make_run(tmp_path)
    runs = json.loads(script("validate", run.dir, "--json").stdout)["runs"]
    one_set = json.loads(script("validate_set", tmp_path / "set", "--json").stdout)
    assert set(runs[0]) == {"dir", "status", "exit_code", "events", "errors", "warnings"}
    assert set(one_set) == {"dir", "status", "exit_code", "cases", "errors", "warnings"}
    assert (runs[0]["status"], one_set["status"]) == ("ok", "ok")


def test_kind_spelled_with_escapes_is_an_error(tmp_path):
    # Readers find voids (and the kinds they read) by their plain spelling before decoding.
    run = make_run(tmp_path)
    [a] = run.append([attempt()])
    with run.events_path.open("a") as fh:
        fh.write('{"kind": "\\u0076oid", "event_id": "v1", "at": "2026-11-30T12:00:00Z", '
                 f'"target_event_id": "{a["event_id"]}", "reason": "x"}}\n')
    assert validate_run(run.dir).errors == [
        ("events.jsonl:2: kind: 'void' is written with JSON escapes; write it plainly (readers "
         "find it by its spelling)")]
