"""The one LLM layer: the anthropic provider against a loopback Messages API, replay, record,
host and hand-authored replies, prices and budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzz_support import FUZZ, damaged_bytes, mutated, mutated_lines, read_lines, reads_or_refuses
from hypothesis import given
from hypothesis import strategies as st
from judge_support import error_body, message_body, messages_server, verdict
from malloy_evals.core import cli, paths
from malloy_evals.core.errors import UsageError
from malloy_evals.llm.base import (
    BudgetExhausted,
    DryRun,
    HostReplyPending,
    LlmRequest,
    ProviderError,
    RecordingMissing,
    RecordingStale,
)
from malloy_evals.llm.prices import cost_usd, price_for
from malloy_evals.llm.select import add_provider_arguments, make_provider

SCHEMA = {"type": "object", "properties": {"verdict": {"type": "string"}},
          "required": ["verdict"], "additionalProperties": False}


def request(key: str = "r1.q1._", *, version: str = "1:aaa:bbb", text: str = "judge this"
            ) -> LlmRequest:
    return LlmRequest(role="judge", key=key, system="the doctrine",
                      messages=[{"role": "user", "content": text}], output_schema=SCHEMA,
                      prompt_version=version)


def live(**options):
    return make_provider("anthropic:claude-haiku-4-5", role="judge", set_dir=None,
                         backoff_seconds=0.0, **options)


# ---------------------------------------------------------------- anthropic over loopback

def test_anthropic_structured_reply_is_parsed_with_cached_system_and_schema(monkeypatch):
    with messages_server([(200, message_body(json.dumps(verdict())))], monkeypatch) as srv:
        reply = live().complete(request())
    sent = srv.requests[0]
    assert reply.data["verdict"] == "match"
    assert reply.source == "claude-haiku-4-5-20251001"
    assert sent["system"] == [{"type": "text", "text": "the doctrine",
                               "cache_control": {"type": "ephemeral"}}]
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert "temperature" not in sent


def test_anthropic_usage_becomes_dollars_from_the_price_table(monkeypatch):
    body = message_body("{}", input_tokens=1000, output_tokens=200, cache_read=4000,
                        cache_write=2000)
    with messages_server([(200, body)], monkeypatch):
        reply = live().complete(request())
    # haiku 4.5: 1 in, 5 out, 1.25 cache write, 0.10 cache read per million tokens
    assert reply.cost_usd == pytest.approx((1000 * 1 + 200 * 5 + 2000 * 1.25 + 4000 * 0.10) / 1e6)
    assert (reply.input_tokens, reply.output_tokens) == (1000, 200)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (4000, 2000)


def test_anthropic_429_then_success_is_retried_once(monkeypatch):
    script = [(429, error_body("rate_limit_error", "slow down")),
              (200, message_body(json.dumps(verdict())))]
    with messages_server(script, monkeypatch) as srv:
        reply = live().complete(request())
    assert srv.calls == 2
    assert reply.data["verdict"] == "match"


def test_anthropic_overloaded_every_time_gives_up_after_bounded_retries(monkeypatch):
    with (messages_server([(529, error_body("overloaded_error", "Overloaded"))],
                          monkeypatch) as srv,
          pytest.raises(ProviderError, match="overloaded_error")):
        live(retries=2).complete(request())
    assert srv.calls == 3


def test_anthropic_bad_request_is_not_retried(monkeypatch):
    with messages_server([(400, error_body("invalid_request_error", "bad field"))],
                         monkeypatch) as srv, pytest.raises(ProviderError, match="refused"):
        live().complete(request())
    assert srv.calls == 1


def test_anthropic_model_without_schema_output_falls_back_to_a_forced_tool(monkeypatch):
    tool_reply = message_body("")
    tool_reply["content"] = [{"type": "tool_use", "id": "tu_1", "name": "submit_result",
                              "input": verdict("no_match")}]
    script = [(400, error_body("invalid_request_error", "output_config.format: not supported")),
              (200, tool_reply)]
    with messages_server(script, monkeypatch) as srv:
        reply = live().complete(request())
    assert reply.data["verdict"] == "no_match"
    assert srv.requests[1]["tool_choice"] == {"type": "tool", "name": "submit_result"}
    assert "output_config" not in srv.requests[1]


def test_max_cost_spent_refuses_the_next_call_without_sending_it(monkeypatch):
    with messages_server([(200, message_body("{}", input_tokens=1000, output_tokens=200))],
                         monkeypatch) as srv:
        provider = live(max_cost_usd=0.0015)
        provider.complete(request())          # costs 0.002: the cap is now spent
        with pytest.raises(BudgetExhausted):
            provider.complete(request("r1.q2._"))
    assert srv.calls == 1


def test_max_cost_with_an_unpriced_model_is_refused():
    with pytest.raises(UsageError, match="priced model"):
        make_provider("anthropic:some-new-model", role="judge", set_dir=None, max_cost_usd=1.0)


def test_dry_run_counts_calls_and_tokens_and_sends_nothing(monkeypatch):
    with messages_server([(200, message_body("{}"))], monkeypatch) as srv:
        provider = live(dry_run=True)
        with pytest.raises(DryRun):
            provider.complete(request())
    assert srv.calls == 0
    assert provider.stats.calls == 1 and provider.stats.estimated_input_tokens > 0


def test_unknown_model_costs_none_never_zero():
    assert price_for("claude-opus-4-7") is None
    assert cost_usd("claude-opus-4-7", input_tokens=10, output_tokens=10) is None
    assert price_for("claude-haiku-4-5-20251001").input == 1.0


# ---------------------------------------------------------------- replay and record

def write_recording(folder: Path, req: LlmRequest, samples: list, **over) -> Path:
    """A recording as --record writes it: digested with the model named as its source."""
    folder.mkdir(parents=True, exist_ok=True)
    source = over.pop("source", "hand-authored")
    rec = {"request_digest": req.digest(model=source), "prompt_version": req.prompt_version,
           "source": source, "samples": samples, **over}
    path = folder / f"{req.key}.json"
    path.write_text(json.dumps(rec))
    return path


def test_replay_hit_reads_the_kth_sample_for_the_kth_identical_call(tmp_path):
    req = request()
    write_recording(tmp_path, req, [verdict("match"), verdict("no_match")])
    provider = make_provider(f"replay:{tmp_path}", role="judge", set_dir=None)
    assert provider.complete(req).data["verdict"] == "match"
    assert provider.complete(req).data["verdict"] == "no_match"
    with pytest.raises(RecordingMissing, match="only 2 sample"):
        provider.complete(req)
    assert provider.model == "hand-authored"


def test_replay_pin_for_a_key_without_recording_is_the_folders_source_before_any_call(tmp_path):
    # Regression: a score decided before any judge call (truncated, golden gate) pinned
    # judge_model None, or the source of whichever call happened to run first.
    write_recording(tmp_path, request("r1.q1._"), [verdict()], source="claude-opus-4-1")
    write_recording(tmp_path, request("r1.q2._"), [verdict()], source="claude-opus-4-1")
    provider = make_provider(f"replay:{tmp_path}", role="judge", set_dir=None)
    assert provider.pinned_model("r1.q9._") == "claude-opus-4-1"


def test_replay_pin_over_a_mixed_folder_is_replay_not_null(tmp_path):
    write_recording(tmp_path, request("r1.q1._"), [verdict()], source="claude-opus-4-1")
    write_recording(tmp_path, request("r1.q2._"), [verdict()])
    provider = make_provider(f"replay:{tmp_path}", role="judge", set_dir=None)
    provider.complete(request("r1.q2._"))
    assert provider.pinned_model("r1.q9._") == "replay"
    assert provider.pinned_model("r1.q1._") == "claude-opus-4-1"


def test_replay_miss_fails_closed_naming_the_rerecord_command(tmp_path):
    provider = make_provider("replay", role="judge", set_dir=tmp_path)
    with pytest.raises(RecordingMissing, match="calibrate_judge.py --set .* --record"):
        provider.complete(request("calib.q1.echo"))


def test_replay_recording_under_another_prompt_version_fails_closed(tmp_path):
    req = request()
    write_recording(tmp_path, req, [verdict()], prompt_version="0:old:old")
    provider = make_provider(f"replay:{tmp_path}", role="judge", set_dir=None)
    with pytest.raises(RecordingStale, match="prompt version"):
        provider.complete(req)


def test_replay_recording_of_another_packet_fails_closed(tmp_path):
    write_recording(tmp_path, request(text="an older packet"), [verdict()])
    provider = make_provider(f"replay:{tmp_path}", role="judge", set_dir=None)
    with pytest.raises(RecordingStale, match="digest"):
        provider.complete(request(text="the packet now"))


def test_digest_is_stable_and_covers_the_messages():
    assert request().digest(model="m") == request().digest(model="m")
    assert request(text="a").digest(model="m") != request(text="b").digest(model="m")


def test_same_request_under_two_model_ids_has_two_digests():
    # The model is part of the digest (reference/providers.md); null (host) is a third value.
    digests = {request().digest(model="claude-opus-4-1"),
               request().digest(model="claude-haiku-4-5-20251001"), request().digest(model=None)}
    assert len(digests) == 3


def test_replay_of_a_correct_recording_hits_and_pins_its_source(tmp_path):
    write_recording(tmp_path, request(), [verdict("no_match")], source="claude-opus-4-1")
    provider = make_provider(f"replay:{tmp_path}", role="judge", set_dir=None)
    reply = provider.complete(request())
    assert reply.data["verdict"] == "no_match" and reply.source == "claude-opus-4-1"
    assert reply.request_digest == request().digest(model="claude-opus-4-1")
    assert provider.model == "claude-opus-4-1"


def test_replay_recording_whose_source_was_edited_fails_closed_naming_the_rerecord(tmp_path):
    # A recording made by one model cannot be passed off as another's: the digest no longer
    # matches, so replay refuses it like a changed packet.
    path = write_recording(tmp_path, request("calib.q1.known_right"), [verdict()],
                           source="claude-haiku-4-5-20251001")
    rec = json.loads(path.read_text())
    rec["source"] = "claude-opus-4-1"
    path.write_text(json.dumps(rec))
    provider = make_provider(f"replay:{tmp_path}", role="judge", set_dir=tmp_path)
    with pytest.raises(RecordingStale, match="digest") as err:
        provider.complete(request("calib.q1.known_right"))
    assert "claude-opus-4-1" in str(err.value)
    assert "calibrate_judge.py --set" in str(err.value) and "--record" in str(err.value)


def test_record_wraps_a_live_provider_and_replay_reads_it_back(tmp_path, monkeypatch):
    with messages_server([(200, message_body(json.dumps(verdict("near_match", 7))))],
                         monkeypatch):
        recorder = make_provider("anthropic:claude-haiku-4-5", role="judge", set_dir=None,
                                 record_dir=tmp_path, backoff_seconds=0.0)
        recorder.complete(request())
        recorder.complete(request())
    rec = json.loads((tmp_path / "r1.q1._.json").read_text())
    assert rec["source"] == "claude-haiku-4-5-20251001" and len(rec["samples"]) == 2
    replay = make_provider(f"replay:{tmp_path}", role="judge", set_dir=None)
    assert replay.complete(request()).data["verdict"] == "near_match"


def test_anthropic_recorded_digest_is_taken_with_the_answering_model_id(tmp_path, monkeypatch):
    # The API reports the dated id; that id is the source, and the digest is taken with it.
    with messages_server([(200, message_body(json.dumps(verdict()),
                                             model="claude-haiku-4-5-20251001"))], monkeypatch):
        recorder = make_provider("anthropic:claude-haiku-4-5", role="judge", set_dir=None,
                                 record_dir=tmp_path, backoff_seconds=0.0)
        reply = recorder.complete(request())
    rec = json.loads((tmp_path / "r1.q1._.json").read_text())
    assert rec["request_digest"] == request().digest(model="claude-haiku-4-5-20251001")
    assert reply.request_digest == rec["request_digest"]
    assert rec["request_digest"] != request().digest(model=None)


def test_hand_record_digests_with_hand_authored_and_replays(tmp_path):
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"key": "r1.q1._", "replies": [verdict("no_match")]}) + "\n")
    out = tmp_path / "rec"
    make_provider(f"hand:{replies}", role="judge", set_dir=None,
                  record_dir=out).complete(request())
    rec = json.loads((out / "r1.q1._.json").read_text())
    assert rec["source"] == "hand-authored"
    assert rec["request_digest"] == request().digest(model="hand-authored")
    replay = make_provider(f"replay:{out}", role="judge", set_dir=None)
    assert replay.complete(request()).data["verdict"] == "no_match"


def test_hand_replies_repeat_their_last_reply_and_say_hand_authored(tmp_path):
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"key": "r1.q1._", "replies": [verdict("no_match")]}) + "\n")
    provider = make_provider(f"hand:{replies}", role="judge", set_dir=None)
    first, second = provider.complete(request()), provider.complete(request())
    assert first.data == second.data and first.source == "hand-authored"
    with pytest.raises(RecordingMissing):
        provider.complete(request("other.key"))


# ---------------------------------------------------------------- host

def test_host_emit_writes_the_request_and_ingest_reads_the_reply(tmp_path):
    emit = make_provider("host", role="judge", set_dir=None, host_mode="emit", host_dir=tmp_path)
    with pytest.raises(HostReplyPending):
        emit.complete(request())
    req_path = tmp_path / "host" / "judge" / "r1.q1._.request.json"
    emitted = json.loads(req_path.read_text())
    assert emitted["system"] == "the doctrine"
    # The host's model is unknown: the emitted request is digested with model null.
    assert emitted["request_digest"] == request().digest(model=None)
    assert emitted["digest_model"] is None
    ingest = make_provider("host", role="judge", set_dir=None, host_mode="ingest",
                           host_dir=tmp_path)
    with pytest.raises(HostReplyPending):
        ingest.complete(request())
    Path(emitted["reply_path"]).write_text(json.dumps(verdict("no_match")))
    reply = ingest.complete(request())
    assert reply.data["verdict"] == "no_match" and reply.source == "host"


def test_host_ingest_of_a_changed_request_fails_closed(tmp_path):
    emit = make_provider("host", role="judge", set_dir=None, host_mode="emit", host_dir=tmp_path)
    with pytest.raises(HostReplyPending):
        emit.complete(request(text="before"))
    (tmp_path / "host" / "judge" / "r1.q1._.reply.json").write_text(json.dumps(verdict()))
    ingest = make_provider("host", role="judge", set_dir=None, host_mode="ingest",
                           host_dir=tmp_path)
    with pytest.raises(RecordingStale):
        ingest.complete(request(text="after"))


def test_unknown_provider_spec_is_a_usage_error():
    with pytest.raises(UsageError):
        make_provider("openai:gpt", role="judge", set_dir=None)


# ---------------------------------------------------------------- batches

def test_batch_mode_sends_one_message_batch_and_returns_each_result(monkeypatch):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: dict = {"created": [], "gets": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, payload, ctype="application/json"):
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def batch(self, status):
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            return {"id": "msgbatch_1", "type": "message_batch", "processing_status": status,
                    "request_counts": {"processing": 0, "succeeded": 2, "errored": 0,
                                       "canceled": 0, "expired": 0},
                    "created_at": "2026-11-30T00:00:00Z", "expires_at": "2026-12-01T00:00:00Z",
                    "ended_at": None, "archived_at": None, "cancel_initiated_at": None,
                    "results_url": f"{base}/v1/messages/batches/msgbatch_1/results"}

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen["created"].append(body)
            self._send(self.batch("in_progress"))

        def do_GET(self):
            seen["gets"].append(self.path)
            if self.path.endswith("/results"):
                lines = [json.dumps({"custom_id": r["custom_id"], "result": {
                    "type": "succeeded", "message": message_body(json.dumps(
                        verdict("match" if "q1" in r["params"]["messages"][0]["content"]
                                else "no_match")))}})
                    for r in seen["created"][0]["requests"]]
                self._send("\n".join(lines) + "\n", "application/binary")
            else:
                self._send(self.batch("ended"))

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
    try:
        provider = live(batch=True, batch_poll_seconds=0.01, batch_window_seconds=0.3)
        out: dict = {}

        def ask(key, text):
            out[key] = provider.complete(request(key, text=text))
        threads = [threading.Thread(target=ask, args=(k, t))
                   for k, t in (("r1.q1._", "about q1"), ("r1.q2._", "about q2"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(seen["created"]) == 1 and len(seen["created"][0]["requests"]) == 2
    assert out["r1.q1._"].data["verdict"] == "match"
    assert out["r1.q2._"].data["verdict"] == "no_match"
    # batches are billed at half price
    assert out["r1.q1._"].cost_usd == pytest.approx((1000 * 1 + 200 * 5) / 1e6 / 2)


def test_script_without_host_flags_neither_offers_host_nor_asks_for_flags_it_lacks(capsys):
    # calibrate_judge / check_judge have no --emit / --ingest: their help must not list `host`,
    # and choosing it must not ask for flags the script does not accept.
    from malloy_evals.core import cli
    from malloy_evals.llm.select import add_provider_arguments

    p = cli.parser(None)
    add_provider_arguments(p, "--judge", host=False)
    assert "| host |" not in p.format_help()
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["--judge", "host"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "--emit or --ingest" not in err and "does not take --judge host" in err


def test_anthropic_without_a_key_is_unmeasured_naming_the_variable_not_a_traceback(monkeypatch):
    # The SDK raises a bare TypeError deep in the request when no credential is set.
    from malloy_evals.core.errors import UnmeasuredError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    provider = make_provider("anthropic:claude-haiku-4-5", role="judge", set_dir=None)
    with pytest.raises(UnmeasuredError, match="needs ANTHROPIC_API_KEY in the environment"):
        provider.complete(request())


# ---------------------------------------------------------------- reading free-text replies

def test_last_json_object_skips_malloy_braces_and_finds_a_wrapped_key():
    from malloy_evals.llm.base import json_objects, last_json_object

    text = ('I checked `run: orders -> { group_by: status }` first.\n'
            '{"note": "draft", "inner": {"verdict": "no_match"}}\n'
            'Final: {"verdict": "match", "why": "equal"} and a trailing {"x": 1}')
    assert last_json_object(text, "verdict") == {"verdict": "match", "why": "equal"}
    assert [o["verdict"] for o in json_objects(text, "verdict")] == ["no_match", "match"]
    assert last_json_object(text) == {"x": 1}
    assert last_json_object("no object here", "verdict") is None


def test_json_objects_survive_a_reply_nested_without_end():
    from malloy_evals.llm.base import json_objects

    hostile = '{"a": ' * 5000 + '1' + '}' * 5000 + ' {"verdict": "no_match"}'
    assert json_objects(hostile, "verdict")[-1] == {"verdict": "no_match"}


# Regression (hostile input): a recording or an emitted host request planted as a link.
def test_recording_over_a_planted_link_replaces_the_link(tmp_path, monkeypatch):
    target = tmp_path / "elsewhere.json"
    target.write_text("theirs")
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "r1.q1._.json").symlink_to(target)
    with messages_server([(200, message_body(json.dumps(verdict())))], monkeypatch):
        recorder = make_provider("anthropic:claude-haiku-4-5", role="judge", set_dir=None,
                                 record_dir=tmp_path / "rec", backoff_seconds=0.0)
        recorder.complete(request())
    assert not (tmp_path / "rec" / "r1.q1._.json").is_symlink() and target.read_text() == "theirs"


def test_host_emit_over_a_planted_link_replaces_the_link(tmp_path):
    emitter = make_provider("host", role="judge", set_dir=None, host_mode="emit",
                            host_dir=tmp_path / "out")
    req_path, _ = emitter.files_for("r1.q1._")
    req_path.parent.mkdir(parents=True)
    target = tmp_path / "elsewhere.json"
    target.write_text("theirs")
    req_path.symlink_to(target)
    with pytest.raises(HostReplyPending):
        emitter.complete(request())
    assert not req_path.is_symlink() and target.read_text() == "theirs"



# ---------------------------------------------------------------- hostile input (fuzzed)
# Recordings, host replies and authored reply files, mutated: a reply, or one refusal line.

JUDGE_RECORDINGS = Path(__file__).resolve().parents[1] / "evals" / "bookshop" / "recordings" / "judge"


@FUZZ
@given(data=st.data())
def test_mutated_recording_replays_or_is_refused_in_one_line(tmp_path_factory, data):
    source = data.draw(st.sampled_from(sorted(JUDGE_RECORDINGS.glob("calib.*.json"))))
    d = tmp_path_factory.mktemp("rec")
    raw = json.dumps(data.draw(mutated(json.loads(source.read_text())))).encode()
    (d / "r1.q1._.json").write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    replay = make_provider(f"replay:{d}", role="judge", set_dir=None)
    reads_or_refuses(lambda: replay.complete(request()), d / "r1.q1._.json")


@FUZZ
@given(data=st.data())
def test_mutated_host_reply_is_ingested_or_refused_in_one_line(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("host")
    emitter = make_provider("host", role="judge", set_dir=None, host_mode="emit", host_dir=d)
    with pytest.raises(HostReplyPending):
        emitter.complete(request())
    _req, reply_path = emitter.files_for("r1.q1._")
    raw = json.dumps(data.draw(mutated(verdict("match", 9)))).encode()
    reply_path.write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    ingest = make_provider("host", role="judge", set_dir=None, host_mode="ingest", host_dir=d)
    reads_or_refuses(lambda: ingest.complete(request()), reply_path)


@FUZZ
@given(data=st.data())
def test_mutated_authored_replies_file_is_read_or_refused_in_one_line(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("hand") / "replies.jsonl"
    lines = read_lines(JUDGE_RECORDINGS / "_authored.jsonl")[:6]
    raw = data.draw(mutated_lines(lines)).encode("utf-8", "backslashreplace")
    path.write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    reads_or_refuses(lambda: make_provider(f"hand:{path}", role="judge", set_dir=None), path)


# ---------------------------------------------------------------- hand:FILE, described once

_HAND_SENTENCE = ('`hand:FILE` answers with replies a person wrote: JSON lines `{"key": "<recording '
                  'key>", "replies": [<reply>, ...]}`, one line per call, looked up by key (keys and '
                  'reply shapes for the judge, the coverage reader and the diagnoser: '
                  '`{path}`). It scores, reads and diagnoses new runs like any '
                  'other provider, and with `--record` it authors recordings.')


@pytest.mark.parametrize("where", ["README.md", "skills/eval-answer/SKILL.md",
                                   "skills/eval-judge/SKILL.md", "skills/eval-diagnose/SKILL.md"])
def test_hand_provider_is_described_the_same_way_wherever_a_user_meets_it(where):
    # Issue 16 item 13: eval-judge said `hand:` was "only to author recordings" while the README
    # offered it for scoring new runs, and the diagnoser's key format was written nowhere.
    # Each names the reference as a path from its own folder (a skill's, once installed
    # elsewhere as a plugin, is not the kit's root).
    path = "reference/hand-replies.md" if where == "README.md" else "../../reference/hand-replies.md"
    text = " ".join((paths.KIT_ROOT / where).read_text().split())
    assert _HAND_SENTENCE.replace("{path}", path) in text
    assert "only to author recordings" not in text


def test_hand_replies_reference_lists_the_key_of_every_role():
    text = (paths.REFERENCE_DIR / "hand-replies.md").read_text()
    for key in ("`<runId>.<qid>.<sample>`", "`calib.<qid>.<answer>`", "`regress.<fixtureId>`",
                "`cov.<qid>`", "`diag.<runId>.<qid>`", "`diag.<runId>.clusters`"):
        assert key in text, key


def test_provider_flag_help_points_at_the_hand_reference():
    p = cli.parser(None)
    add_provider_arguments(p, "--judge")
    assert "reference/hand-replies.md" in p.format_help()


def test_a_cost_cap_on_an_unpriced_model_is_refused_with_the_command_line(capsys):
    # Decided when the flags are read (exit 2), before any run, set or key is looked at.
    p = cli.parser(None)
    add_provider_arguments(p, "--judge")
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["--judge", "anthropic:some-new-model", "--max-cost-usd", "1"])
    assert exc.value.code == 2 and "--max-cost-usd needs a priced model" in capsys.readouterr().err
    assert p.parse_args(["--judge", "anthropic:some-new-model", "--max-cost-usd", "1",
                         "--dry-run"]).dry_run
