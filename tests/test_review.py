"""review.py: the queue a person settles, settling (ledger, fixture, results), voiding, the walk."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fuzz_support import FUZZ, damaged_bytes, mutated, mutated_lines, reads_or_refuses
from hypothesis import given
from hypothesis import strategies as st
from judge_support import make_run, make_set, verdict, write_prediction
from malloy_evals.core.errors import InputError
from malloy_evals.judge.calibration import check_regressions
from malloy_evals.ledger.run import Run
from malloy_evals.llm.hand import HandProvider
from malloy_evals.report.figures import summarize
from malloy_evals.sets.eval_set import load_set
from malloy_evals.sets.importer import import_set
from malloy_evals.workflow import review
from malloy_evals.workflow.outputs import RunOutputs
from tie_support import tied


def outs(run_dir, set_dir):
    """The run as its outputs' owner loads it (as review.py does)."""
    return RunOutputs.load(Path(run_dir), Path(set_dir))


KIT = Path(__file__).resolve().parents[1]
SCRIPT = KIT / "skills" / "eval-judge" / "scripts" / "review.py"
PUBLIC_RUN = KIT / "tests" / "fixtures" / "public_loop" / "run"


def score(qid, verdict_, **kw):
    return {"kind": "score", "qid": qid, "sample": None, "verdict": verdict_, "judge_version": 2,
            "why": f"the judge on {qid}", "confidence": 8, **kw}


@pytest.fixture
def scored(tmp_path):
    """A run of the tiny set: q_rev needs_human, q_genre near_match, q_salary a doubted match,
    q_prov null golden_provisional; q_rev has a re-executed prediction."""
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [
        {"qid": "q_rev", "answer_text": "Revenue is $1,234.50 (shipped only).",
         "final_query": "run: order_items -> { aggregate: revenue }"},
        {"qid": "q_genre", "answer_text": "Fiction 700, History 534.50, by list price."},
        {"qid": "q_salary", "answer_text": "There is no staff data in the model."},
        {"qid": "q_prov", "answer_text": "1"}])
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    run.append([tied(run.dir, e) for e in [  # each bound to its attempt, as the kit writes it
                score("q_rev", "needs_human", judge_verdict="no_match", confidence=4,
                      prediction_path="artifacts/q_rev/_/prediction.csv"),
                score("q_genre", "near_match"),
                score("q_salary", "match", gold_status="suspect", gold_note="rubric vs model"),
                {"kind": "score", "qid": "q_prov", "sample": None, "verdict": None,
                 "reason": "golden_provisional"},
                {"kind": "retrieval_score", "qid": "q_rev", "sample": None, "verdict": "needs_human",
                 "failed": False, "coverage": "covered", "coverage_source": "authored",
                 "recall": 1.0, "precision": 1.0, "groups": 1,
                 "delivery": {"measure:order_items:revenue": "exact"}, "missing": [], "noise": [],
                 "asked_kinds": ["measure"], "where_to_fix": None, "owner": None,
                 "component": None, "why": "not attributed"}]])
    return SimpleNamespace(set_dir=set_dir, run=run, run_dir=run.dir)


# --------------------------------------------------------------------------- the queue


def test_queue_holds_needs_human_near_match_and_doubted_goldens_only(scored):
    queue = review.review_queue(outs(scored.run_dir, scored.set_dir))
    assert [(i.label, i.reasons) for i in queue.items] == [
        ("q_genre", ["near_match"]), ("q_rev", ["needs_human"]), ("q_salary", ["doubted golden"])]
    rev = next(i for i in queue.items if i.qid == "q_rev")
    assert rev.rows == [{"revenue": 1234.5}] and rev.golden["value"] == {"revenue": 1234.5, "round": 2}
    assert (rev.judge_verdict, rev.confidence, rev.protects) == ("no_match", 4, "required_disclosure")
    assert "the judge on q_rev" in review.render_queue(queue)


@pytest.mark.parametrize("kind, tags, judge, gold, settled, expected", [
    pytest.param("unanswerable", [], "needs_human", None, "match", "refusal_correct", id="refusal-right"),
    pytest.param("scalar", ["answerable-sounds-unanswerable"], "match", None, "no_match",
                 "refusal_wrong", id="refusal-wrong"),
    pytest.param("scalar", [], "near_match", None, "match", "near_match_boundary", id="near-match"),
    pytest.param("scalar", [], "match", "suspect", "match", "gold_status", id="doubted-golden"),
    pytest.param("rows", [], "needs_human", None, "no_match", "required_disclosure", id="else"),
])
def test_the_protected_class_defaults_from_the_case(kind, tags, judge, gold, settled, expected):
    case = SimpleNamespace(golden_kind=kind, tags=tags)
    assert review.default_protects(case, judge, gold, settled) == expected


def test_include_disagreements_lists_a_prediction_a_person_settled_otherwise(scored):
    sub_sha = review.prediction_sha("Fiction 700, History 534.50, by list price.", None)
    (scored.set_dir / "judge-regressions.jsonl").write_text(json.dumps({
        "fixtureId": f"q_genre.{sub_sha[:8]}", "qid": "q_genre", "predictionSha": sub_sha,
        "prediction": {"answer_text": "x", "final_query": None}, "verdict": "no_match"}) + "\n")
    plain = review.review_queue(outs(scored.run_dir, scored.set_dir))
    wide = review.review_queue(outs(scored.run_dir, scored.set_dir), include_disagreements=True)
    genre = next(i for i in wide.items if i.qid == "q_genre")
    assert genre.reasons == ["near_match", "overruled elsewhere"]
    assert genre.settled_elsewhere[0]["verdict"] == "no_match"
    assert all(i.settled_elsewhere == [] for i in plain.items)


def test_text_table_caps_rows_and_cells():
    rows = [{"name": "x" * 50, "n": i} for i in range(12)]
    text = review.text_table(rows, cap=3, width=10)
    assert text.splitlines()[2].startswith("xxxxxxxxx…") and text.endswith("... 9 more row(s)")


# --------------------------------------------------------------------------- settling


def test_settling_changes_the_summary_writes_the_fixture_and_check_judge_proves_it(scored, tmp_path):
    before = summarize(Run.open(scored.run_dir), load_set(scored.set_dir))
    assert before.verdicts["needs_human"] == 1 and before.pass_rate.decided == 1
    result = review.settle(outs(scored.run_dir, scored.set_dir), "q_rev", verdict="match",
                           why="the rows hold 1,234.50; shipped-only is the same here",
                           by="Dana Reyes")
    after = summarize(Run.open(scored.run_dir), load_set(scored.set_dir))
    assert after.verdicts["needs_human"] == 0 and (after.pass_rate.passed, after.pass_rate.decided) == (2, 2)
    assert after.settled_by_person == 1 and result.settled_by_person == 1
    # the run's results were rewritten at once
    md = (scored.run_dir / "RESULTS.md").read_text()
    assert after.headline in md and "1 verdict(s) settled by a person" in md
    assert json.loads((scored.run_dir / "summary.json").read_text())["settled_by_person"] == 1
    # the fixture: the settled prediction with its rows, protects, settledAt and settledBy
    [fx] = [json.loads(line) for line in (scored.set_dir / "judge-regressions.jsonl").read_text().splitlines()]
    assert fx["fixtureId"] == result.fixture_id and fx["verdict"] == "match"
    assert fx["prediction"]["rows"] == [{"revenue": 1234.5}]
    assert (fx["protects"], fx["settledBy"], fx["goldenRevision"]) == ("required_disclosure",
                                                                       "Dana Reyes", 2)
    assert fx["provenance"] == {"run": "r1", "sample": None, "judgeVerdict": "needs_human",
                                "judgeVersionObserved": 2}
    # the retrieval row now carries the person's verdict
    assert Run.open(scored.run_dir).retrieval_score("q_rev", None)["verdict"] == "match"
    # check_judge proves the judge on it: agreeing is ok, a judge still unsure is a FAIL
    replies = tmp_path / "replies.jsonl"
    for reply, status in ((verdict("match", 9), "ok"), (verdict("no_match", 4), "FAIL")):
        replies.write_text(json.dumps({"key": f"regress.{result.fixture_id}", "replies": [reply]}) + "\n")
        report = check_regressions(load_set(scored.set_dir), HandProvider(replies))
        assert [r.status for r in report.rows] == [status]


def test_voiding_a_human_verdict_restores_the_judges(scored):
    review.settle(outs(scored.run_dir, scored.set_dir), "q_genre", verdict="no_match",
                  why="list price is the WRONG reading", by="Dana")
    assert summarize(Run.open(scored.run_dir), None).verdicts["no_match"] == 1
    undone = review.unsettle(outs(scored.run_dir, scored.set_dir), "q_genre", why="settled the wrong case")
    s = summarize(Run.open(scored.run_dir), None)
    assert (s.verdicts["no_match"], s.verdicts["near_match"], s.settled_by_person) == (0, 1, 0)
    assert undone.fixture_removed and (scored.set_dir / "judge-regressions.jsonl").read_text() == ""
    assert "near_match" in (scored.run_dir / "RESULTS.md").read_text()


def test_settling_again_replaces_the_first_settlement_and_its_fixture_line(scored):
    (scored.set_dir / "judge-regressions.jsonl").write_text('{"fixtureId": "other.1", "qid": "q_rev", '
                                                            '"prediction": {"answer_text": "a", '
                                                            '"final_query": null}, "verdict": "match"}\n')
    first = review.settle(outs(scored.run_dir, scored.set_dir), "q_genre", verdict="match", why="a", by="A")
    second = review.settle(outs(scored.run_dir, scored.set_dir), "q_genre", verdict="no_match", why="b",
                           by="B")
    assert second.voided == first.event_id and second.fixture_action == "replaced"
    humans = [e for e in Run.open(scored.run_dir).live() if e["kind"] == "human_verdict"]
    assert [(h["verdict"], h["settled_by"]) for h in humans] == [("no_match", "B")]
    lines = (scored.set_dir / "judge-regressions.jsonl").read_text().splitlines()
    assert lines[0].startswith('{"fixtureId": "other.1"') and len(lines) == 2  # untouched
    assert json.loads(lines[1])["verdict"] == "no_match"


def test_a_fixture_file_written_by_hand_with_a_bom_and_crlf_is_read_as_validate_set_reads_it(scored):
    # The file people write (an editor's byte-order mark, CRLF endings): validate_set reads its
    # first line, so settling must too, not stop at it as "not valid JSON".
    path = scored.set_dir / "judge-regressions.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"fixtureId": "other.1", "qid": "q_rev", "prediction": '
                     b'{"answer_text": "a", "final_query": null}, "verdict": "match"}\r\n')
    settled = review.settle(outs(scored.run_dir, scored.set_dir), "q_genre", verdict="match",
                            why="a", by="A")
    assert settled.fixture_action == "appended"
    assert path.read_bytes().startswith(b'\xef\xbb\xbf{"fixtureId": "other.1"')  # untouched
    assert [json.loads(line)["fixtureId"].split(".")[0] for line in
            path.read_text(encoding="utf-8-sig").splitlines()] == ["other", "q_genre"]


def test_a_settled_attempt_leaves_the_queue(scored):
    review.settle(outs(scored.run_dir, scored.set_dir), "q_rev", verdict="no_match", why="w", by="A")
    queue = review.review_queue(outs(scored.run_dir, scored.set_dir))
    assert "q_rev" not in [i.qid for i in queue.items] and queue.settled == 1


def test_a_mechanical_null_cannot_be_settled(scored):
    with pytest.raises(InputError, match="null golden_provisional: that is decided by a rule"):
        review.settle(outs(scored.run_dir, scored.set_dir), "q_prov", verdict="match", why="w", by="A")
    assert not any(e["kind"] == "human_verdict" for e in Run.open(scored.run_dir).live())


def test_an_attempt_with_no_score_cannot_be_settled(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "x"}])
    with pytest.raises(InputError, match="has no live score: score it first"):
        review.settle(outs(run.dir, set_dir), "q_rev", verdict="match", why="w", by="A")


# Regression (hostile input, writes through links): RESULTS.md, summary.json and
# judge-regressions.jsonl planted as links to files elsewhere were written through by settling.
def test_settling_replaces_links_planted_in_place_of_what_it_rewrites(scored, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = {scored.run_dir / "RESULTS.md", scored.run_dir / "summary.json",
               scored.set_dir / "judge-regressions.jsonl"}
    for path in planted:  # what the set's fixture file links to is read as fixtures: none
        (outside / path.name).write_text("" if path.suffix == ".jsonl" else "theirs")
        path.symlink_to(outside / path.name)
    review.settle(outs(scored.run_dir, scored.set_dir), "q_rev", verdict="match", why="w", by="Dana")
    assert not any(p.is_symlink() for p in planted)
    assert "1 verdict(s) settled by a person" in (scored.run_dir / "RESULTS.md").read_text()
    assert json.loads((scored.set_dir / "judge-regressions.jsonl").read_text())["qid"] == "q_rev"
    assert {p.name: p.read_text() for p in outside.iterdir()} == {
        "RESULTS.md": "theirs", "summary.json": "theirs", "judge-regressions.jsonl": ""}


# Regression (one redaction): the review card printed secrets that reached the run by another
# road than a recorded transcript (rows the query returned, a judge quoting them); a secret seen
# in one field is blanked in every field, as core/redact.py blanks it everywhere else.
def test_review_cards_blank_secrets_in_every_field(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
                                        "final_query": "run: order_items -> { aggregate: revenue }"}])
    write_prediction(run, "q_rev", None,
                     "revenue,dsn\n1234.5,postgres://app:Pw0rdHidden77@db.example/shop\n")
    run.append([tied(run.dir, score("q_rev", "needs_human", why="the rows carry Pw0rdHidden77 "
                                    "and sk-ant-api03-abcdefghijklmnopqrstu", confidence=4,
                                    prediction_path="artifacts/q_rev/_/prediction.csv"))])
    queue = review.review_queue(outs(run.dir, set_dir))
    text = review.render_queue(queue) + json.dumps(queue.to_json(), default=str)
    assert "Pw0rdHidden77" not in text and "sk-ant-api03-abcdefghijklmnopqrstu" not in text
    assert "[REDACTED]" in review.render_item(queue.items[0])
    assert "1234.5" in review.render_item(queue.items[0])  # ordinary figures stay



def test_review_cards_share_one_redactor_so_a_secret_seen_on_one_card_is_blanked_on_all(tmp_path):
    # q_rev's rows show a password in its place (a URL); q_genre's answer repeats the bare
    # value, which no shape would catch on its own card: one redactor for the queue blanks both.
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [
        {"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
         "final_query": "run: order_items -> { aggregate: revenue }"},
        {"qid": "q_genre", "answer_text": "Fiction 700; the note said Zq8rTokenWord55 too."}])
    write_prediction(run, "q_rev", None,
                     "revenue,dsn\n1234.5,postgres://app:Zq8rTokenWord55@db.example/shop\n")
    run.append([tied(run.dir, e) for e in [
        score("q_rev", "needs_human", prediction_path="artifacts/q_rev/_/prediction.csv"),
        score("q_genre", "near_match")]])
    queue = review.review_queue(outs(run.dir, set_dir))
    cards = {item.qid: review.render_item(item) for item in queue.items}
    assert set(cards) == {"q_rev", "q_genre"}
    assert all("Zq8rTokenWord55" not in card for card in cards.values())
    assert "[REDACTED]" in cards["q_genre"] and "Fiction 700" in cards["q_genre"]

# ---------------------------------------------------------------- hostile input (fuzzed)
# review.py reads files it did not write: the set's judge-regressions.jsonl, the run's
# summary.json, the prediction CSV. Mutated, each is read or refused in one line naming it.

def _scored_copy(root: Path) -> SimpleNamespace:
    set_dir = make_set(root)
    run = make_run(root, set_dir, [{"qid": "q_rev", "answer_text": "Revenue is $1,234.50.",
                                    "final_query": "run: order_items -> { aggregate: revenue }"}])
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    run.append([tied(run.dir, score("q_rev", "needs_human",
                                    prediction_path="artifacts/q_rev/_/prediction.csv"))])
    return SimpleNamespace(set_dir=set_dir, run_dir=run.dir)


FIXTURE_LINES = [{"fixtureId": "q_rev.1", "qid": "q_rev", "goldenRevision": 2,
                  "predictionSha": "0" * 16, "verdict": "match", "settledBy": "Dana",
                  "prediction": {"answer_text": "a", "final_query": None}}]


@FUZZ
@given(data=st.data())
def test_mutated_review_inputs_are_read_or_refused_in_one_line(tmp_path_factory, data):
    w = _scored_copy(tmp_path_factory.mktemp("review"))
    regressions = w.set_dir / "judge-regressions.jsonl"
    summary = w.run_dir / "summary.json"
    prediction = w.run_dir / "artifacts" / "q_rev" / "_" / "prediction.csv"
    which = data.draw(st.sampled_from(["regressions", "summary", "prediction"]))
    if which == "regressions":
        path, raw = regressions, data.draw(mutated_lines(FIXTURE_LINES)).encode("utf-8", "backslashreplace")
    elif which == "summary":
        path, raw = summary, json.dumps(data.draw(mutated({"coverage": {"decided": 1}}))).encode(
            "utf-8", "backslashreplace")
    else:
        path, raw = prediction, b"revenue\n1234.5\n"
    path.write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    queue = reads_or_refuses(lambda: review.review_queue(outs(w.run_dir, w.set_dir),
                                                         include_disagreements=True), path)
    if queue is not None:
        review.render_queue(queue)
    reads_or_refuses(lambda: review.settle(outs(w.run_dir, w.set_dir), "q_rev", verdict="match",
                                           why="w", by="Dana"), path)


@pytest.mark.parametrize("text, parsed", [("q07", ("q07", None)), ("q07#2", ("q07", 2))])
def test_targets_name_a_qid_and_an_optional_sample(text, parsed):
    assert review.parse_target(text) == parsed


@pytest.mark.parametrize("text", ["q07#", "q07#two", "#3", ""])
def test_malformed_targets_are_refused(text):
    with pytest.raises(ValueError):
        review.parse_target(text)


# --------------------------------------------------------------------------- the script


def run_script(*args, **kw):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, cwd=KIT, stdin=subprocess.DEVNULL, check=False, **kw)


def test_without_a_terminal_the_script_only_lists(scored):
    before = (scored.run_dir / "events.jsonl").read_bytes()
    done = run_script("--run", scored.run_dir, "--set", scored.set_dir)
    assert done.returncode == 0, done.stderr
    assert "3 to review in r1; 0 already settled by a person." in done.stdout
    assert (scored.run_dir / "events.jsonl").read_bytes() == before


def test_json_listing_is_one_document(scored):
    done = run_script("--run", scored.run_dir, "--set", scored.set_dir, "--json")
    doc = json.loads(done.stdout)
    assert doc["to_review"] == 3 and doc["items"][0]["label"] == "q_genre"


@pytest.mark.parametrize("args, message", [
    (["--verdict", "match"], "--verdict needs --settle QID"),
    (["--settle", "q_rev", "--verdict", "match", "--why", "w"], "--settle needs --by"),
    (["--settle", "q_rev#x", "--verdict", "match", "--why", "w", "--by", "A"], "whole number"),
    (["--unsettle", "q_rev"], "--unsettle needs --why"),
])
def test_wrong_command_lines_exit_2(scored, args, message):
    done = run_script("--run", scored.run_dir, "--set", scored.set_dir, *args)
    assert done.returncode == 2 and message in done.stderr


def test_settling_through_the_script_prints_what_it_wrote(scored):
    done = run_script("--run", scored.run_dir, "--set", scored.set_dir, "--settle", "q_rev",
                      "--verdict", "no_match", "--why", "shipped only", "--by", "Dana", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["verdict"], doc["judge_verdict"], doc["fixture_action"]) == ("no_match",
                                                                             "needs_human", "appended")


def test_a_public_loop_run_is_listed_and_refuses_settling_without_a_traceback(tmp_path):
    set_copy = tmp_path / "set"
    import_set(KIT / "tests" / "fixtures" / "public_loop" / "set", set_copy)
    listed = run_script("--run", PUBLIC_RUN, "--set", set_copy)
    assert listed.returncode == 0, listed.stderr
    assert "nur_top_categories  [needs_human, doubted golden]" in listed.stdout
    refused = run_script("--run", PUBLIC_RUN, "--set", set_copy, "--settle", "nur_top_categories",
                         "--verdict", "match", "--why", "w", "--by", "A")
    assert refused.returncode == 3 and "Traceback" not in refused.stderr
    assert "events.jsonl:1: no event_id: this ledger was written by the public eval loop" in refused.stderr


# --------------------------------------------------------------------------- the walk, in a pty


class Terminal:
    """The script on a pseudo-terminal: read what it prints, type keys when a prompt shows."""

    def __init__(self, *args: object):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), *map(str, args)], cwd=KIT,
                                     stdin=slave, stdout=slave, stderr=slave, close_fds=True)
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 300) -> None:
        end = time.monotonic() + timeout
        while text not in self.seen:
            left = end - time.monotonic()
            assert left > 0, f"never saw {text!r}; got:\n{self.seen[-2000:]}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                assert chunk, f"the script ended before {text!r}; got:\n{self.seen[-2000:]}"
                self.seen += chunk.decode("utf-8", "replace")
        self.seen = self.seen[self.seen.index(text) + len(text):]

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def finish(self) -> int:
        try:
            while True:
                ready, _, _ = select.select([self.master], [], [], 120)
                if not ready or not os.read(self.master, 4096):
                    break
        except OSError:
            pass
        os.close(self.master)
        return self.proc.wait(timeout=120)


def test_the_walk_settles_with_one_key_skips_and_quits_on_a_terminal(scored):
    term = Terminal("--run", scored.run_dir, "--set", scored.set_dir, "--by", "Dana Reyes")
    term.expect("[1/3] q_genre")
    term.expect("verdict? ")
    term.type("x")                      # one key, no Enter: no_match
    term.expect("why (one line): ")
    term.type("list price is the WRONG reading\n")
    term.expect("settled q_genre: no_match by Dana Reyes")
    term.expect("[2/3] q_rev")
    term.expect("verdict? ")
    term.type("s")                      # skip
    term.expect("[3/3] q_salary")
    term.expect("verdict? ")
    term.type("q")                      # quit
    term.expect("stopped (q): 1 settled, 1 skipped, 3 in the queue")
    assert term.finish() == 0
    humans = [e for e in Run.open(scored.run_dir).live() if e["kind"] == "human_verdict"]
    assert [(h["qid"], h["verdict"], h["why"]) for h in humans] == [
        ("q_genre", "no_match", "list price is the WRONG reading")]
    assert "1 verdict(s) settled by a person" in (scored.run_dir / "RESULTS.md").read_text()
