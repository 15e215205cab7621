"""score_attempt: the order of the gates, the judge through every provider, the
mechanical overrides, and exactly one score event carrying every pin."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from judge_support import (
    FakeProvider,
    error_body,
    make_run,
    make_set,
    message_body,
    messages_server,
    verdict,
    write_prediction,
)
from malloy_evals.answer.reexecute import reexecute_attempt
from malloy_evals.answer.scoring import judge_recording_key, score_attempt
from malloy_evals.core import paths
from malloy_evals.core.errors import InputError, UnmeasuredError
from malloy_evals.judge import doctrine as J_doctrine
from malloy_evals.ledger import artifacts as J_artifacts
from malloy_evals.llm.base import BudgetExhausted, RecordingMissing, RecordingStale
from malloy_evals.llm.select import make_provider
from malloy_evals.sets.eval_set import load_set

GOOD_SQL = "run: order_items -> { aggregate: revenue }"
PINS = ("judge_model", "judge_version", "rubric_sha", "judge_prompt_sha", "golden_revision",
        "prediction_path", "judge_artifact")


@pytest.fixture
def world(tmp_path):
    """A set, and a run whose q_rev attempt has a re-executed prediction on disk."""
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [
        {"qid": "q_rev", "final_query": GOOD_SQL, "answer_text": "Revenue is $1,234.50."}])
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    return run, load_set(set_dir)


def scores(run):
    return [e for e in run.read().events if e["kind"] == "score"]


def anthropic(**kw):
    return make_provider("anthropic:claude-haiku-4-5", role="judge", set_dir=None,
                         backoff_seconds=0.0, **kw)


def score(run, es, qid="q_rev", provider=None, **kw):
    return score_attempt(run, es, qid, None, provider=provider, reexecute=False, **kw)


# ---------------------------------------------------------------- anthropic end to end

def test_clean_structured_verdict_appends_one_score_with_every_pin(world, monkeypatch):
    run, es = world
    with messages_server([(200, message_body(json.dumps(verdict())))], monkeypatch):
        result = score(run, es, provider=anthropic())
    [event] = scores(run)
    assert result.verdict == event["verdict"] == "match"
    for pin in PINS:
        assert event[pin] is not None, pin
    doctrine = J_doctrine.load_doctrine()
    assert event["rubric_sha"] == doctrine.sha and event["judge_version"] == int(doctrine.version)
    assert event["judge_prompt_sha"] == J_doctrine.judge_prompt_sha() and event["golden_revision"] == 2
    assert event["judge_model"] == "claude-haiku-4-5-20251001"
    assert event["judge_cost_usd"] == pytest.approx((1000 * 1 + 200 * 5) / 1e6)
    assert (event["judge_input_tokens"], event["judge_output_tokens"]) == (1000, 200)
    assert event["prediction_path"] == "artifacts/q_rev/_/prediction.csv"
    folder = run.resolve(event["judge_artifact"])
    assert {p.name for p in folder.iterdir()} == {"request.json", "replies.json", "verdict.json"}


def test_429_then_success_is_retried_and_scored_once(world, monkeypatch):
    run, es = world
    script = [(429, error_body("rate_limit_error", "slow down")),
              (200, message_body(json.dumps(verdict())))]
    with messages_server(script, monkeypatch) as srv:
        score(run, es, provider=anthropic())
    assert srv.calls == 2
    assert [e["verdict"] for e in scores(run)] == ["match"]


def test_overloaded_every_time_is_null_judge_error_and_nothing_else(world, monkeypatch):
    run, es = world
    before = len(run.read().events)
    with messages_server([(529, error_body("overloaded_error", "Overloaded"))], monkeypatch):
        result = score(run, es, provider=anthropic(retries=2))
    events = run.read().events
    assert len(events) == before + 1
    assert result.verdict is None and result.reason.startswith("judge_error: ")
    assert "overloaded" in result.reason


# Regression (hostile input): a provider that echoes the API key in its error put the key in
# score.reason, in judge/error.json and on the terminal.
def test_provider_error_echoing_the_api_key_is_redacted_everywhere(world, monkeypatch):
    run, es = world
    with messages_server([(401, error_body("authentication_error",
                                           "invalid x-api-key test-key-not-real"))], monkeypatch):
        result = score(run, es, provider=anthropic())
    [event] = scores(run)
    assert result.reason.startswith("judge_error:") and "[REDACTED]" in result.reason
    on_disk = [p.read_text() for p in run.dir.rglob("*") if p.is_file()]
    assert not any("test-key-not-real" in text for text in on_disk)
    assert "test-key-not-real" not in event["reason"]


def test_no_usable_verdict_twice_is_null_judge_unparseable_with_raw_replies_kept(world,
                                                                                 monkeypatch):
    run, es = world
    with messages_server([(200, message_body("I think it is fine { group_by: x }"))],
                         monkeypatch) as srv:
        result = score(run, es, provider=anthropic())
    assert srv.calls == 2                       # the reply and one retry (--judge-retries 1)
    assert (result.verdict, result.reason) == (None, "judge_unparseable")
    [event] = scores(run)
    replies = json.loads((run.resolve(event["judge_artifact"]) / "replies.json").read_text())
    assert [r["text"] for r in replies] == ["I think it is fine { group_by: x }"] * 2


def test_an_unusable_reply_then_a_good_one_is_scored(world):
    run, es = world
    provider = FakeProvider(["no verdict here", verdict("no_match", 8, "1,500 is the trap")])
    assert score(run, es, provider=provider).verdict == "no_match"
    assert len(provider.requests) == 2


# ---------------------------------------------------------------- replay and host

def test_replay_hit_scores_and_pins_the_recordings_source(world, tmp_path):
    run, es = world
    rec_dir = tmp_path / "recordings"
    (tmp_path / "r.jsonl").write_text(json.dumps(
        {"key": judge_recording_key(run, "q_rev", None), "replies": [verdict()]}) + "\n")
    recorder = make_provider(f"hand:{tmp_path / 'r.jsonl'}", role="judge", set_dir=None,
                             record_dir=rec_dir)
    score(run, es, provider=recorder, append=False)
    replay = make_provider(f"replay:{rec_dir}", role="judge", set_dir=None)
    result = score(run, es, provider=replay)
    assert result.verdict == "match"
    assert scores(run)[0]["judge_model"] == "hand-authored"


def test_replay_of_a_stale_recording_fails_closed_and_writes_no_score(world, tmp_path):
    run, es = world
    rec_dir = tmp_path / "recordings"
    rec_dir.mkdir()
    (rec_dir / f"{judge_recording_key(run, 'q_rev', None)}.json").write_text(json.dumps(
        {"request_digest": "0" * 64, "prompt_version": J_doctrine.prompt_version(J_doctrine.load_doctrine()),
         "source": "hand-authored", "samples": [verdict()]}))
    with pytest.raises(RecordingStale):
        score(run, es, provider=make_provider(f"replay:{rec_dir}", role="judge", set_dir=None))
    assert scores(run) == []


def test_host_emit_then_reply_then_ingest_appends_one_score(world):
    run, es = world
    emit = make_provider("host", role="judge", set_dir=None, host_mode="emit", host_dir=run.dir)
    first = score(run, es, provider=emit)
    assert first.status == "emitted" and scores(run) == []
    request_path = run.artifact_dir("q_rev", None) / "judge" / "request.json"
    request = json.loads(request_path.read_text())
    assert request["system"] == J_doctrine.load_doctrine().text
    (request_path.parent / "reply.json").write_text(json.dumps(verdict("no_match", 8, "1,500")))
    ingest = make_provider("host", role="judge", set_dir=None, host_mode="ingest",
                           host_dir=run.dir)
    result = score(run, es, provider=ingest)
    [event] = scores(run)
    assert result.verdict == event["verdict"] == "no_match"
    assert event["judge_model"] == "host" and event["judge_artifact"] == "artifacts/q_rev/_/judge"


# Regression: with --judge host --ingest, links planted in the attempt's judge/ folder were
# followed and replies.json / verdict.json written outside the run; a linked judge.9/ folder was
# taken as the pending one and the script died with a ValueError traceback.
def _emit_and_reply(run, es):
    emit = make_provider("host", role="judge", set_dir=None, host_mode="emit", host_dir=run.dir)
    score(run, es, provider=emit)
    folder = run.artifact_dir("q_rev", None) / "judge"
    (folder / "reply.json").write_text(json.dumps(verdict("no_match", 8, "1,500")))
    return folder, make_provider("host", role="judge", set_dir=None, host_mode="ingest",
                                 host_dir=run.dir)


def test_host_ingest_never_writes_through_a_link_planted_in_the_judge_folder(world, tmp_path):
    run, es = world
    folder, ingest = _emit_and_reply(run, es)
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / "replies.json").symlink_to(outside / "replies.json")
    with pytest.raises(InputError, match="symbolic link"):
        score(run, es, provider=ingest)
    assert list(outside.iterdir()) == [] and scores(run) == []


def test_host_ingest_ignores_a_linked_judge_folder(world, tmp_path):
    run, es = world
    folder, ingest = _emit_and_reply(run, es)
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "request.json").write_text((folder / "request.json").read_text())
    (folder.parent / "judge.9").symlink_to(planted)
    result = score(run, es, provider=ingest)
    assert result.verdict == "no_match" and scores(run)[0]["judge_artifact"] == "artifacts/q_rev/_/judge"
    assert sorted(p.name for p in planted.iterdir()) == ["request.json"]


def _script(name, run, es, *args):
    return subprocess.run([sys.executable, str(paths.skill_script(name)), "--run", str(run.dir),
                           "--set", str(es.dir), "--qid", "q_rev", *args],
                          check=False, capture_output=True, text=True, timeout=600)


def test_host_ingest_before_any_emit_exits_3_and_appends_nothing(tmp_path):
    # Issue 16 item 6: --ingest before --emit appended a null environment_failure score and
    # exited 0; afterwards both --emit and --ingest refused because a live score existed.
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "final_query": GOOD_SQL,
                                        "answer_text": "Revenue is $1,234.50."}])
    es = load_set(set_dir)
    out = _script("score_attempt", run, es, "--judge", "host", "--ingest", "--json")
    assert out.returncode == 3, out.stderr
    assert "--emit first" in out.stderr and "Traceback" not in out.stderr
    assert scores(run) == []


def test_host_ingest_before_emit_with_a_prediction_on_disk_still_says_emit_first(world):
    run, es = world
    out = _script("score_attempt", run, es, "--judge", "host", "--ingest")
    assert out.returncode == 3 and "--emit first" in out.stderr
    assert scores(run) == []


def test_host_ingest_with_the_reply_not_written_yet_exits_3_naming_the_reply_path(world):
    run, es = world
    emit = make_provider("host", role="judge", set_dir=None, host_mode="emit", host_dir=run.dir)
    assert score(run, es, provider=emit).exit_code == 0
    out = _script("score_attempt", run, es, "--judge", "host", "--ingest")
    assert out.returncode == 3
    assert str(run.artifact_dir("q_rev", None) / "judge") in out.stderr
    assert "reply.json" in out.stderr
    assert scores(run) == []


def test_judge_script_before_reexecute_exits_3_naming_the_missing_step(tmp_path):
    # Issue 16 item 6: judge.py run before reexecute.py printed a null environment_failure
    # verdict and exited 0, although its help says 3.
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "final_query": GOOD_SQL,
                                        "answer_text": "Revenue is $1,234.50."}])
    es = load_set(set_dir)
    rec = _recorded_replies(run, tmp_path)
    out = _script("judge", run, es, "--judge", f"hand:{rec}", "--json")
    assert out.returncode == 3, out.stdout
    assert "reexecute.py" in out.stderr and out.stdout == ""


def _recorded_replies(run, tmp_path):
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"key": judge_recording_key(run, "q_rev", None),
                                   "replies": [verdict()]}) + "\n")
    return replies


# ---------------------------------------------------------------- overrides

def test_confidence_five_is_needs_human_with_the_judge_verdict_kept(world):
    run, es = world
    score(run, es, provider=FakeProvider([verdict("match", 5)]))
    [event] = scores(run)
    assert (event["verdict"], event["judge_verdict"], event["confidence"]) == (
        "needs_human", "match", 5)


def test_veto_over_a_judge_match_is_no_match_with_judge_verdict_match(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
                                        "final_query": "run: order_items -> { aggregate: list_value }"}])
    write_prediction(run, "q_rev", None, "list_value\n1234.5\n")
    score(run, load_set(set_dir), provider=FakeProvider([verdict("match", 9)]))
    [event] = scores(run)
    assert (event["verdict"], event["judge_verdict"]) == ("no_match", "match")
    assert event["must_not_use_hits"] == ["list_value"]


def test_prose_must_not_use_entries_reach_the_judge_as_a_note(world):
    run, es = world
    provider = FakeProvider([verdict()])
    score(run, es, provider=provider)
    message = provider.requests[0].messages[0]["content"]
    assert "MUST NOT USE" in message and "revenue as a sum of list price" in message


def test_contaminated_attempt_is_null_with_the_judges_read_kept(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
                                        "final_query": GOOD_SQL, "contaminated": True}])
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    score(run, load_set(set_dir), provider=FakeProvider([verdict("match", 9)]))
    [event] = scores(run)
    assert (event["verdict"], event["reason"], event["judge_verdict"]) == (
        None, "contaminated", "match")
    assert event["why"] == "figures agree" and event["contaminated"] is True


def test_hand_judge_needs_no_reply_for_a_contaminated_attempt(tmp_path):
    # Issue 16 item 7: `hand:` demanded a reply for a contaminated attempt (`no authored reply for
    # key ...`) and left it unscored; the reply would have been discarded anyway.
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
                                        "final_query": GOOD_SQL, "contaminated": "unknown"}])
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"key": "someone.else._", "replies": [verdict()]}) + "\n")
    provider = make_provider(f"hand:{replies}", role="judge", set_dir=None)
    result = score(run, load_set(set_dir), provider=provider)
    [event] = scores(run)
    assert (result.verdict, event["verdict"], event["reason"]) == (None, None, "contaminated")
    assert event["judge_verdict"] is None and event["contaminated"] == "unknown"


def test_hand_judge_still_needs_a_reply_for_a_clean_attempt(world, tmp_path):
    run, es = world
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"key": "someone.else._", "replies": [verdict()]}) + "\n")
    with pytest.raises(RecordingMissing):
        score(run, es, provider=make_provider(f"hand:{replies}", role="judge", set_dir=None))
    assert scores(run) == []


def test_host_ingest_of_a_contaminated_attempt_needs_no_reply(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
                                        "final_query": GOOD_SQL, "contaminated": True}])
    ingest = make_provider("host", role="judge", set_dir=None, host_mode="ingest",
                           host_dir=run.dir)
    score(run, load_set(set_dir), provider=ingest)
    [event] = scores(run)
    assert (event["verdict"], event["reason"]) == (None, "contaminated")


def test_budget_exhausted_is_null_budget_exhausted(world):
    run, es = world
    score(run, es, provider=FakeProvider([BudgetExhausted("spent")]))
    [event] = scores(run)
    assert (event["verdict"], event["reason"]) == (None, "budget_exhausted")


# ---------------------------------------------------------------- gates before any call

@pytest.mark.parametrize(("qid", "reason"), [
    pytest.param("q_prov", "golden_provisional", id="provisional"),
    pytest.param("q_wrongkey", "golden_verified_wrong", id="verified-wrong"),
    pytest.param("q_nogold", "golden_missing", id="missing"),
])
def test_golden_gates_decide_before_any_provider_call(tmp_path, qid, reason):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": qid, "answer_text": "42", "final_query": GOOD_SQL}])
    provider = FakeProvider()
    result = score_attempt(run, load_set(set_dir), qid, None, provider=provider,
                           reexecutor=lambda *a: pytest.fail("re-executed before the gate"))
    assert (result.verdict, result.reason) == (None, reason)
    assert provider.requests == []
    [event] = scores(run)
    assert event["rubric_sha"] == J_doctrine.load_doctrine().sha and event["judge_model"] == "fake-model"


def test_truncated_attempt_is_answerer_truncated_even_with_a_gated_golden(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_prov", "answer_text": "", "truncated": True}])
    provider = FakeProvider()
    assert score(run, load_set(set_dir), "q_prov", provider).reason == "answerer_truncated"
    assert provider.requests == []


def test_no_query_and_no_text_is_not_submitted_without_a_call(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "  ", "submitted": False}])
    provider = FakeProvider()
    assert score(run, load_set(set_dir), provider=provider).reason == "not_submitted"
    assert provider.requests == []


def test_prose_without_a_query_is_judged(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_salary",
                                        "answer_text": "The model has no salary data."}])
    provider = FakeProvider([verdict("match", 8, "names the missing data")])
    assert score(run, load_set(set_dir), "q_salary", provider).verdict == "match"
    assert "PREDICTION: (none" in provider.requests[0].messages[0]["content"]


def test_unreachable_endpoint_during_reexecution_is_environment_failure(world):
    run, es = world

    def down(*_args):
        raise UnmeasuredError("connection refused")
    provider = FakeProvider()
    result = score_attempt(run, es, "q_rev", None, provider=provider, reexecutor=down)
    assert result.reason == "environment_failure: connection refused"
    assert provider.requests == []


def test_reexecuted_rows_not_the_answer_text_reach_the_judge(world):
    run, es = world

    def rerun(run_, es_, qid, sample):
        return J_artifacts.PredictionView(rows=[{"revenue": 999.0}], row_count=1, path="artifacts/x.csv")
    provider = FakeProvider([verdict("no_match", 9, "rows say 999")])
    score_attempt(run, es, "q_rev", None, provider=provider, reexecutor=rerun)
    assert '{"revenue": 999.0}' in provider.requests[0].messages[0]["content"]
    assert scores(run)[0]["prediction_path"] == "artifacts/x.csv"


class CountingEndpoint:
    """An endpoint of the QueryEndpoint shape that counts the queries it runs (no Node)."""

    label, model_path = "local", "tiny.malloy"

    def __init__(self, model_sha="c" * 64, served_revision="local-cccc"):
        self.model_sha, self.served_revision, self.calls = model_sha, served_revision, 0

    def execute(self, **_call):
        self.calls += 1
        return {"rows": [{"revenue": 1234.5}]}


def _reexecuted_world(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "final_query": GOOD_SQL,
                                        "answer_text": "Revenue is $1,234.50."}])
    return run, load_set(set_dir)


def test_scoring_after_reexecute_reuses_its_fresh_reexecution(tmp_path):
    # Issue 16 item 15: following eval-answer's steps ran the final query twice (step 2, then
    # step 4 again), leaving prediction.2.csv.
    run, es = _reexecuted_world(tmp_path)
    endpoint = CountingEndpoint()
    reexecute_attempt(run, es, "q_rev", None, endpoint)
    score_attempt(run, es, "q_rev", None, provider=FakeProvider(), endpoint=endpoint)
    assert endpoint.calls == 1
    assert scores(run)[0]["prediction_path"] == "artifacts/q_rev/_/prediction.csv"
    assert not (run.artifact_dir("q_rev", None) / "prediction.2.csv").exists()


@pytest.mark.parametrize("later", [
    pytest.param({"model_sha": "d" * 64}, id="model-changed"),
    pytest.param({"model_sha": None, "served_revision": None}, id="model-unknown"),
])
def test_scoring_runs_the_query_again_when_the_served_model_may_differ(tmp_path, later):
    run, es = _reexecuted_world(tmp_path)
    reexecute_attempt(run, es, "q_rev", None, CountingEndpoint())
    endpoint = CountingEndpoint(**{"model_sha": "c" * 64, "served_revision": "local-cccc", **later})
    score_attempt(run, es, "q_rev", None, provider=FakeProvider(), endpoint=endpoint)
    assert endpoint.calls == 1
    assert scores(run)[0]["prediction_path"] == "artifacts/q_rev/_/prediction.2.csv"


def test_a_rerecorded_attempt_is_reexecuted_even_with_the_same_query(tmp_path):
    run, es = _reexecuted_world(tmp_path)
    reexecute_attempt(run, es, "q_rev", None, CountingEndpoint())
    old = run.attempt("q_rev", None)
    run.append([{"kind": "void", "target_event_id": old["event_id"], "reason": "re-recorded"},
                {**{k: v for k, v in old.items() if k not in ("event_id", "at")}}])
    endpoint = CountingEndpoint()
    score_attempt(run, es, "q_rev", None, provider=FakeProvider(), endpoint=endpoint)
    assert endpoint.calls == 1


def _recorded(run, es, tmp_path):
    """A hand-authored recording for q_rev, written through the same request path."""
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"key": judge_recording_key(run, "q_rev", None),
                                   "replies": [verdict()]}) + "\n")
    rec = tmp_path / "rec"
    score(run, es, provider=make_provider(f"hand:{replies}", role="judge", set_dir=None,
                                          record_dir=rec), append=False)
    return rec


def test_judge_script_prints_the_verdict_and_writes_no_event(world, tmp_path):
    run, es = world
    rec = _recorded(run, es, tmp_path)
    out = subprocess.run([sys.executable, str(paths.skill_script("judge")), "--run",
                          str(run.dir), "--set", str(es.dir), "--qid", "q_rev", "--judge",
                          f"replay:{rec}", "--json"], check=False, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["verdict"] == "match" and doc["rubric_sha"] == J_doctrine.load_doctrine().sha
    assert scores(run) == []


def test_score_attempt_script_with_an_unreachable_endpoint_exits_3_without_traceback(world,
                                                                                    tmp_path):
    run, es = world
    rec = _recorded(run, es, tmp_path)
    out = subprocess.run([sys.executable, str(paths.skill_script("score_attempt")), "--run",
                          str(run.dir), "--set", str(es.dir), "--qid", "q_rev", "--judge",
                          f"replay:{rec}", "--mcp-url", "http://127.0.0.1:9/mcp", "--json"],
                         check=False, capture_output=True, text=True, timeout=600)
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert scores(run) == []


def test_local_reexecution_puts_the_kits_own_rows_in_the_packet(tmp_path, needs_node):
    from malloy_evals.answer.reexecute import open_endpoint
    from malloy_evals.ledger.run import Run

    es = load_set(paths.EVALS_DIR / "bookshop")
    run = Run.create(tmp_path / "run", es, "answerer-x", phase="baseline", run_id="live")
    run.append([{"kind": "attempt", "qid": "bk_total_revenue", "sample": None,
                 "phase": "baseline", "submitted": True, "contaminated": False,
                 "final_query": "run: order_items -> { aggregate: revenue }",
                 "answer_text": "Revenue is $12.00."}])      # the prose lies; the rows do not
    provider = FakeProvider([verdict("no_match", 9, "text says 12; rows say 90963.84")])
    with open_endpoint(es, local=True) as endpoint:
        result = score_attempt(run, es, "bk_total_revenue", None, provider=provider,
                               endpoint=endpoint)
    packet = provider.requests[0].messages[0]["content"]
    assert "90963.84" in packet.split("PREDICTION")[1]
    assert "source: order_items" in packet.split("MODEL SOURCES")[1]
    [event] = scores(run)
    assert event["prediction_path"].startswith("artifacts/bk_total_revenue/_/prediction")
    assert result.verdict == "no_match"


def test_attempt_without_a_recorded_contamination_verdict_is_checked_on_its_transcript(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
                                        "final_query": GOOD_SQL, "contaminated": None,
                                        "transcript_path": "artifacts/q_rev/_/hostlog.json"}])
    run.write_artifact("q_rev", None, "hostlog.json", {
        "toolUses": [{"name": "Read", "input": {"file_path": f"{set_dir}/cases.jsonl"}}],
        "reportedCalls": 0, "cwd": str(tmp_path)})
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    score(run, load_set(set_dir), provider=FakeProvider([verdict()]))
    [event] = scores(run)
    assert (event["verdict"], event["reason"], event["contaminated"]) == (
        None, "contaminated", True)


def test_attempt_with_no_contamination_evidence_at_all_is_unknown_and_null(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
                                        "final_query": GOOD_SQL, "contaminated": None}])
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    score(run, load_set(set_dir), provider=FakeProvider([verdict()]))
    [event] = scores(run)
    assert (event["reason"], event["contaminated"]) == ("contaminated", "unknown")


def test_messages_about_an_attempt_without_a_sample_say_no_sample(world):
    # Issue 16 item 12: "sample None" in messages; the ledger writes null, a person reads
    # "no sample".
    run, es = world
    with pytest.raises(InputError, match=r"q_missing', no sample, in phase") as exc:
        score(run, es, qid="q_missing", provider=FakeProvider())
    assert "None" not in str(exc.value)


def test_an_attempt_with_a_live_score_is_refused_before_any_judge_call(world):
    from malloy_evals.core.errors import InputError

    run, es = world
    score(run, es, provider=FakeProvider([verdict()]))
    again = FakeProvider()
    with pytest.raises(InputError, match="already has a live score"):
        score(run, es, provider=again)
    assert again.requests == [] and len(scores(run)) == 1
