"""Judge calibration (eight canned answers, samples, integrity) and regression fixtures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from judge_support import make_set, verdict
from malloy_evals.answer import authoring as C_authoring
from malloy_evals.core import paths
from malloy_evals.judge import calibration as C_calibration
from malloy_evals.judge import doctrine as J_doctrine
from malloy_evals.llm.base import LlmReply, OneShot, RecordingMissing
from malloy_evals.sets.eval_set import load_set

ENTRY = {
    "qid": "q_rev",
    "known_right": {"answer_text": "Total revenue is $1,234.50.",
                    "final_query": "run: order_items -> { aggregate: revenue }",
                    "rows": [{"revenue": 1234.5}]},
    "known_wrong": {"answer_text": "Total revenue is $1,500.00 at list price.",
                    "final_query": "run: order_items -> { aggregate: list_value }",
                    "rows": [{"list_value": 1500.0}]},
    "vague": "Revenue is the money customers paid; sum it over the order lines.",
    "subtle_wrong": "Revenue came to roughly $1,300, counting every order line.",
    "commits": "WRONG: 1,500.00 priced at list price",
}


class ByAnswer(OneShot):
    """A judge whose reply depends on which canned answer it is asked about."""

    spec = "by-answer"
    model = "keyed"

    def __init__(self, decide=None):
        self.decide = decide or (lambda answer, k: "match" if answer == "known_right"
                                 else "no_match")
        self.keys: list[str] = []

    def complete(self, request):
        self.keys.append(request.key)
        answer = request.key.split(".")[-1]
        v = self.decide(answer, self.keys.count(request.key))
        obj = verdict(v, 9, "compared the revenue figure with the golden")
        return LlmReply(text=json.dumps(obj), data=obj, source=self.model,
                        request_digest=request.digest(model=self.model))


def calib_set(tmp_path, entries=(ENTRY,)):
    set_dir = make_set(tmp_path)
    (set_dir / "judge-calibration.jsonl").write_text(
        "\n".join(json.dumps(e) for e in entries) + "\n")
    return load_set(set_dir)


def statuses(report):
    return {a.answer: a.status for e in report.entries for a in e.answers}


def test_a_judge_that_fails_every_wrong_answer_passes_calibration(tmp_path):
    provider = ByAnswer()
    report = C_calibration.calibrate(calib_set(tmp_path), provider, samples=3)
    assert report.exit_code == 0, C_calibration.render_calibration(report)
    assert set(statuses(report).values()) == {"ok"}
    assert len(provider.keys) == 7 * 3                       # empty never reaches the judge
    assert "calib.q_rev.empty" not in provider.keys


def test_empty_ends_null_not_submitted(tmp_path):
    report = C_calibration.calibrate(calib_set(tmp_path), ByAnswer(), samples=1)
    empty = next(a for a in report.entries[0].answers if a.answer == "empty")
    assert (empty.got, empty.reasons, empty.provider_calls) == ([None], ["not_submitted"], 0)


def test_a_judge_that_passes_the_vague_answer_is_a_mismatch(tmp_path):
    lenient = ByAnswer(lambda answer, k: "match" if answer in ("known_right", "vague")
                       else "no_match")
    report = C_calibration.calibrate(calib_set(tmp_path), lenient, samples=1)
    assert statuses(report)["vague"] == "MISMATCH" and report.exit_code == 1


def test_a_judge_that_obeys_the_injection_is_a_mismatch(tmp_path):
    obedient = ByAnswer(lambda answer, k: "match" if answer in ("known_right", "injection")
                        else "no_match")
    # known_wrong as prose only, so no mechanical veto hides the judge's obedience
    entry = {**ENTRY, "known_wrong": "Total revenue is $1,500.00 at list price."}
    report = C_calibration.calibrate(calib_set(tmp_path, [entry]), obedient, samples=1)
    assert statuses(report)["injection"] == "MISMATCH"


def test_samples_must_agree_unanimously(tmp_path):
    wobbly = ByAnswer(lambda answer, k: "match" if answer == "known_right" or
                      (answer == "echo" and k == 2) else "no_match")
    report = C_calibration.calibrate(calib_set(tmp_path), wobbly, samples=3)
    assert statuses(report)["echo"] == "MISMATCH" and report.exit_code == 1


def test_known_wrong_using_a_vetoed_field_ends_no_match_even_if_the_judge_says_match(tmp_path):
    fooled = ByAnswer(lambda answer, k: "match")
    report = C_calibration.calibrate(calib_set(tmp_path), fooled, samples=1)
    s = statuses(report)
    # list_value is a mustNotUse entry: the veto holds for every answer built on known_wrong
    assert (s["known_wrong"], s["injection"], s["stuffed"]) == ("ok", "ok", "ok")
    assert s["vague"] == "MISMATCH"


def test_canned_answers_are_built_as_the_spec_says(tmp_path):
    es = calib_set(tmp_path)
    case = es.case("q_rev")
    canned = C_calibration.canned_answers(ENTRY, case, '{"revenue": 1234.5}')
    assert list(canned) == list(C_calibration.CANNED)
    assert canned["echo"]["answer_text"] == "Sure. You asked: What is total revenue?"
    assert canned["injection"]["answer_text"].startswith(ENTRY["known_wrong"]["answer_text"])
    assert "output exactly" in canned["injection"]["answer_text"]
    assert case.rubric in canned["stuffed"]["answer_text"]
    assert '{"revenue": 1234.5}' in canned["stuffed"]["answer_text"]
    assert canned["stuffed"]["final_query"] == ENTRY["known_wrong"]["final_query"]


@pytest.mark.parametrize(("change", "problem"), [
    pytest.param({"vague": ""}, "vague is missing or empty", id="empty-answer"),
    pytest.param({"subtle_wrong": ENTRY["vague"]}, "same text", id="duplicate"),
    pytest.param({"commits": "WRONG: a clause nobody wrote"}, "not a WRONG clause",
                 id="commit-not-in-rubric"),
    pytest.param({"commits": "mustNotUse: ship_date"}, "not an entry", id="commit-not-in-mnu"),
    pytest.param({"qid": "q_prov"}, "gated", id="provisional-golden"),
    pytest.param({"qid": "nope"}, "not a case", id="unknown-qid"),
])
def test_integrity_failures_are_found_offline_without_calling_the_judge(tmp_path, change,
                                                                        problem):
    provider = ByAnswer()
    report = C_calibration.calibrate(calib_set(tmp_path, [{**ENTRY, **change}]), provider)
    assert report.exit_code == 1
    assert any(problem in p for p in report.entries[0].integrity)
    assert provider.keys == []


def test_mustnotuse_commit_found_in_the_entries_passes_integrity(tmp_path):
    es = calib_set(tmp_path)
    assert C_calibration.integrity_problems({**ENTRY, "commits": "mustNotUse: list_value"},
                                es.case("q_rev")) == []


def test_missing_recordings_fail_closed_with_exit_3(tmp_path):
    es = calib_set(tmp_path)

    class Empty(OneShot):
        spec, model = "replay", None

        def complete(self, request):
            raise RecordingMissing(f"no recording for {request.key}")
    report = C_calibration.calibrate(es, Empty(), samples=1)
    assert report.exit_code == 3 and report.errors == 7


# ---------------------------------------------------------------- regressions

def fixture(fid, qid="q_rev", want="match", rev=2, **over):
    return {"fixtureId": fid, "qid": qid, "goldenRevision": rev, "verdict": want,
            "why": "settled", "protects": "near_match_boundary", "settledAt": "2026-11-01",
            "prediction": {"answer_text": "Revenue is $1,234.50.",
                           "final_query": "run: order_items -> { aggregate: revenue }",
                           "rows": [{"revenue": 1234.5}]}, **over}


class Scripted(OneShot):
    spec, model = "scripted", "scripted"

    def __init__(self, by_key):
        self.by_key = {k: list(v) for k, v in by_key.items()}
        self.keys: list[str] = []

    def complete(self, request):
        self.keys.append(request.key)
        v = self.by_key[request.key].pop(0)
        obj = verdict(v, 9)
        return LlmReply(text=json.dumps(obj), data=obj, source="scripted",
                        request_digest=request.digest(model="scripted"))


def regress_set(tmp_path, fixtures):
    set_dir = make_set(tmp_path)
    (set_dir / "judge-regressions.jsonl").write_text(
        "\n".join(json.dumps(f) for f in fixtures) + "\n")
    return load_set(set_dir)


def test_regressions_report_ok_fail_flaky_stale_unpinned_and_unresolved(tmp_path):
    es = regress_set(tmp_path, [
        fixture("f_ok"), fixture("f_fail"), fixture("f_flaky"), fixture("f_stale", rev=1),
        fixture("f_unpinned", rev=None), fixture("f_ghost", qid="ghost")])
    provider = Scripted({"regress.f_ok": ["match"] * 2, "regress.f_fail": ["no_match"] * 2,
                         "regress.f_flaky": ["match", "no_match"],
                         "regress.f_unpinned": ["match"] * 2})
    report = C_calibration.check_regressions(es, provider, repeat=2)
    got = {r.fixture_id: r.status for r in report.rows}
    assert got == {"f_ok": "ok", "f_fail": "FAIL", "f_flaky": "FLAKY", "f_stale": "stale",
                   "f_unpinned": "unpinned", "f_ghost": "unresolved"}
    assert "regress.f_stale" not in provider.keys
    assert report.exit_code == 1 and report.judged == 4


def test_all_fixtures_stale_is_exit_3_not_green(tmp_path):
    es = regress_set(tmp_path, [fixture("f1", rev=1)])
    report = C_calibration.check_regressions(es, Scripted({}))
    assert (report.judged, report.exit_code) == (0, 3)


def test_agreeing_fixtures_exit_0_and_name_the_missing_decision_classes(tmp_path):
    es = regress_set(tmp_path, [fixture("f1")])
    report = C_calibration.check_regressions(es, Scripted({"regress.f1": ["match"]}))
    assert report.exit_code == 0
    assert "refusal_correct" in report.classes_missing


def test_no_fixture_file_is_exit_0(tmp_path):
    report = C_calibration.check_regressions(load_set(make_set(tmp_path)), Scripted({}))
    assert report.exit_code == 0 and report.rows == []


def test_a_fixture_settled_as_needs_human_agrees_with_a_low_confidence_read(tmp_path):
    es = regress_set(tmp_path, [fixture("f1", want="needs_human")])

    class Unsure(Scripted):
        def complete(self, request):
            obj = verdict("match", 4)
            return LlmReply(text=json.dumps(obj), data=obj, source="s",
                            request_digest=request.digest(model="s"))
    assert C_calibration.check_regressions(es, Unsure({})).rows[0].status == "ok"


# ---------------------------------------------------------------- the sample set, offline

BOOKSHOP = paths.EVALS_DIR / "bookshop"


def run_script(name, *args):
    return subprocess.run([sys.executable, str(paths.skill_script(name)), *args, "--json"],
                          check=False, capture_output=True, text=True, timeout=300)


def test_bookshop_calibration_passes_in_replay():
    out = run_script("calibrate_judge", "--set", str(BOOKSHOP), "--judge", "replay")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert len(doc["entries"]) >= 3 and doc["mismatches"] == 0


def test_bookshop_regressions_pass_in_replay():
    out = run_script("check_judge", "--set", str(BOOKSHOP), "--judge", "replay")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert json.loads(out.stdout)["judged"] >= 5


def test_bookshop_fixtures_hold_clarifying_questions_both_ways_and_pass_in_replay():
    # A case that allows a clarifying question passes one naming the open choice and fails a
    # vague one; a case that allows none fails a question asked instead of an answer.
    out = run_script("check_judge", "--set", str(BOOKSHOP), "--judge", "replay",
                     "--only", "bk_busiest_month,bk_total_revenue.asks-instead")
    rows = {r["fixture_id"]: r for r in json.loads(out.stdout)["rows"]}
    assert {k: (r["want"], r["status"]) for k, r in rows.items()} == {
        "bk_busiest_month.names-the-measure": ("match", "ok"),
        "bk_busiest_month.vague-clarify": ("no_match", "ok"),
        "bk_total_revenue.asks-instead": ("no_match", "ok")}
    assert load_set(BOOKSHOP).case("bk_busiest_month").clarify_ok


@pytest.mark.parametrize("script", ["calibrate_judge", "check_judge"])
def test_reports_pin_judge_version_as_the_scores_do(script):
    # Regression: the reports said "2" where every score event pins 2.
    out = run_script(script, "--set", str(BOOKSHOP), "--judge", "replay")
    assert json.loads(out.stdout)["judge_version"] == J_doctrine.current_pins()["judge_version"]
    assert isinstance(json.loads(out.stdout)["judge_version"], int)


def test_a_broken_bookshop_recording_fails_closed_naming_the_fix(tmp_path):
    copy = tmp_path / "bookshop"
    shutil.copytree(BOOKSHOP, copy, ignore=shutil.ignore_patterns("runs", "data"))
    victim = min((copy / "recordings" / "judge").glob("calib.*.known_right.json"))
    rec = json.loads(victim.read_text())
    rec["request_digest"] = "f" * 64
    victim.write_text(json.dumps(rec))
    out = run_script("calibrate_judge", "--set", str(copy), "--judge", "replay")
    assert out.returncode == 3
    assert "calibrate_judge.py --set" in out.stdout and "--record" in out.stdout


def test_author_tool_writes_recordings_that_replay_passes(tmp_path):
    from malloy_evals.llm.select import make_provider

    es = calib_set(tmp_path)
    replies = tmp_path / "replies.jsonl"
    lines = [{"key": f"calib.q_rev.{name}",
              "replies": [verdict("match" if name == "known_right" else "no_match", 9,
                                  "compared the revenue figure")]}
             for name in C_calibration.CANNED if name != "empty"]
    replies.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "rec"
    report = C_authoring.author_judge_recordings(es, replies, out_dir=out, samples=2)
    assert report.exit_code == 0 and len(report.written) == 7
    rec = json.loads((out / "calib.q_rev.echo.json").read_text())
    assert rec["source"] == "hand-authored" and len(rec["samples"]) == 2
    replayed = C_calibration.calibrate(es, make_provider(f"replay:{out}", role="judge", set_dir=None),
                           samples=2)
    assert replayed.exit_code == 0


def test_author_tool_reports_a_reply_that_ends_wrong(tmp_path):
    es = calib_set(tmp_path)
    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"key": "calib.q_rev.known_right",
                                   "replies": [verdict("no_match", 9, "wrong on purpose")]}) + "\n")
    report = C_authoring.author_judge_recordings(es, replies, out_dir=tmp_path / "rec", samples=1)
    assert report.exit_code == 1     # and every other canned answer had no authored reply


class DoubtsTheKeyOn(ByAnswer):
    """Says no_match everywhere it should, but marks the golden verified_wrong for some answers."""

    def __init__(self, doubted: str):
        super().__init__()
        self.doubted = doubted

    def complete(self, request):
        answer = request.key.split(".")[-1]
        v = "match" if answer == "known_right" else "no_match"
        status = "verified_wrong" if answer == self.doubted else "verified"
        obj = verdict(v, 9, "compared the revenue figure with the golden", gold_status=status,
                      gold_note="the answer says the key double counts" if status != "verified"
                      else None)
        return LlmReply(text=json.dumps(obj), data=obj, source=self.model,
                        request_digest=request.digest(model=self.model))


def test_a_wrong_answer_that_talks_the_judge_into_doubting_the_key_is_a_mismatch(tmp_path):
    # Review finding: the summary takes a judge's verified_wrong out of every aggregate, so a no_match
    # that comes with it escapes; calibration must catch a judge that lets an answer do that.
    report = C_calibration.calibrate(calib_set(tmp_path), DoubtsTheKeyOn("stuffed"), samples=1)
    st = statuses(report)
    assert st["stuffed"] == "MISMATCH" and report.exit_code == 1
    assert st["known_wrong"] == "ok"
    msg = next(a.message for e in report.entries for a in e.answers if a.answer == "stuffed")
    assert "verified_wrong" in msg
