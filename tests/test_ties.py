"""A verdict is bound to the attempt it judged: forged, misplaced and stale verdicts are caught.

Each test is a reproducer of one way a verdict could count where it should not: a score or a
person's verdict appended by hand, a voided verdict replaced by one no judge gave, a reply artifact
removed or edited, a re-recording while its case was being judged, a case edited without a revision
bump, two scorers at once, a promotion racing an edit, a golden derived from no table, a settlement
whose fixture cannot be written, a junk ledger line before any money is spent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arms_support import make_run, make_set
from malloy_evals.answer.transcripts import record_attempt
from malloy_evals.core.errors import InputError, UnmeasuredError
from malloy_evals.endpoint import runner as rt
from malloy_evals.ledger import ties
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.validate import check_before_append, validate_run
from malloy_evals.report.compare import compare_runs
from malloy_evals.report.figures import summarize
from malloy_evals.report.markdown import render_markdown
from malloy_evals.sets import promote
from malloy_evals.sets.eval_set import case_content_sha, load_set
from malloy_evals.sets.goldens import tables_read
from malloy_evals.sets.promote import promote_golden
from malloy_evals.workflow import run_scorer as rs
from malloy_evals.workflow.outputs import RunOutputs
from malloy_evals.workflow.review import settle
from script_support import run_outcome
from set_support import bookshop_copy, case_line
from tie_support import tied, two_case_run

KIT = Path(__file__).resolve().parents[1]
BOOKSHOP = KIT / "evals" / "bookshop"
TRANSCRIPTS = BOOKSHOP / "transcripts" / "baseline"
SCORE_RUN = KIT / "skills" / "eval-answer" / "scripts" / "score_run.py"
RUN_ANSWERS = KIT / "skills" / "eval-answer" / "scripts" / "run_answers.py"
VALIDATE = KIT / "skills" / "eval-answer" / "scripts" / "validate.py"
PINS = {"judge_version": 3, "rubric_sha": "a" * 64, "judge_prompt_sha": "b" * 64}


@pytest.fixture
def tiny(tmp_path):
    """A two-case set and a run holding one attempt per case."""
    return two_case_run(tmp_path)


class Judge:
    """score_run's per-attempt step as score_attempt(append=False) returns it: a score tied to
    the attempt live when judging began, with its request and reply written into the run. `during`
    runs while the attempt is being judged (the deterministic point a race would hit)."""

    def __init__(self, verdict="no_match", during=None):
        self.verdict, self.during, self.calls = verdict, during, []

    def __call__(self, run, eval_set, qid, sample):
        judged = run.attempt(qid, sample)["event_id"]  # read before the judge is called
        self.calls.append(qid)
        if self.during is not None:
            self.during(qid)
        case = eval_set.case(qid)
        return tied(run.dir, {"kind": "score", "qid": qid, "sample": sample,
                              "verdict": self.verdict, "golden_revision": case.golden_revision,
                              "case_sha": case_content_sha(case, eval_set.dir), **PINS}, judged)


def raw_line(run: Run, obj: dict) -> int:
    """Append a line by hand, as a person or a stray process would; returns its line number."""
    with run.events_path.open("a") as fh:
        fh.write(json.dumps({"at": "2026-12-01T10:00:00Z", "phase": run.phase, **obj}) + "\n")
    return len(run.events_path.read_bytes().splitlines())


def tie_errors(run: Run) -> list[str]:
    return [e for e in validate_run(run.dir).errors if "not tied" in e]


def verdict_of(run: Run, eval_set, qid: str) -> str | None:
    row = next(r for r in summarize(run, eval_set).cases if r.qid == qid)
    return row.verdict


# ------------------------------------------------------------------ hand-written and misplaced verdicts
# A verdict is held to what it names (issue 36): a line written by hand with no attempt id is
# counted on the attempt before it and said so; one that names another attempt, an artifact
# that is not there, or an altered one is ignored, on its line, and judged again.

def placed_warnings(run: Run) -> list[str]:
    return [w for w in validate_run(run.dir).warnings if "name no attempt they judged" in w]


def test_a_hand_appended_score_naming_no_attempt_counts_on_the_attempt_before_it(tiny):
    run, es = tiny
    line = raw_line(run, {"kind": "score", "event_id": "by-hand", "qid": "q1", "sample": None,
                          "verdict": "match"})
    attempt = run.attempt("q1", None)
    assert run.view().tied_score(run.key("q1", None))["attempt_event_id"] == attempt["event_id"]
    report = validate_run(run.dir)
    assert tie_errors(run) == [] and report.exit_code == 0
    [warning] = placed_warnings(run)
    assert warning.startswith(f"events.jsonl:{line}: 1 verdict(s)") and f"line {line} on" in warning
    s = summarize(run, es)
    assert s.verdicts["match"] == 1 and s.placed == 1 and s.ignored == []
    assert "1 verdict(s) name no attempt" in render_markdown(s)
    judge = Judge("no_match")
    rs.score_attempts(run, es, judge, PINS, progress=lambda _: None)
    assert judge.calls == ["q2"]  # q1's hand-written verdict stands: nothing to judge again


def test_a_hand_appended_score_before_its_attempt_was_recorded_again_is_ignored_and_judged(tiny):
    run, es = tiny
    line = raw_line(run, {"kind": "score", "event_id": "by-hand", "qid": "q1", "sample": None,
                          "verdict": "match"})
    old = run.attempt("q1", None)["event_id"]
    # The host answers q1 again and writes the new attempt by hand, voiding nothing.
    raw_line(run, {"kind": "attempt", "event_id": "again", "qid": "q1", "sample": None,
                   "submitted": True, "final_query": None, "answer_text": "about 12"})
    new = "again"
    [error] = tie_errors(run)
    assert error.startswith(f"events.jsonl:{line}: score q1")
    assert f"judged attempt {old}, not the live one {new}" in error
    s = summarize(run, es)
    [ignored] = s.ignored
    assert (ignored.line, ignored.cause, ignored.qid) == (line, "untied", "q1")
    assert str(ignored).startswith(f"{run.events_path}:{line}: score q1 (sample _) ignored, untied")
    assert "q1" in s.unscored and "1 event(s) ignored: 1 untied" in render_markdown(s)
    lines: list[str] = []
    outcomes = rs.score_attempts(run, es, Judge("no_match"), PINS, progress=lines.append)
    assert {o.qid: o.action for o in outcomes}["q1"] == rs.ACTION_UNTIED
    assert str(ignored) in lines and "1 event(s) ignored: 1 untied" in lines
    assert tie_errors(run) == [] and verdict_of(run, es, "q1") == "no_match"


def test_a_hand_appended_score_with_no_attempt_before_it_is_ignored(tiny):
    run, es = tiny
    record = run.events_path.read_text().splitlines()
    # The score comes first, then the ledger's attempts: it judged nothing recorded.
    first = json.dumps({"kind": "score", "event_id": "early", "at": "2026-12-01T10:00:00Z",
                        "phase": run.phase, "qid": "q1", "sample": None, "verdict": "match"})
    run.events_path.write_text("\n".join([first, *record]) + "\n")
    [error] = tie_errors(run)
    assert error.startswith("events.jsonl:1: score q1")
    assert "no attempt of its case comes before it" in error
    assert verdict_of(run, es, "q1") is None


def test_a_score_of_another_attempt_is_named_with_both_ids(tiny):
    run, es = tiny
    live = run.attempt("q1", None)["event_id"]
    raw_line(run, tied(run.dir, {"kind": "score", "event_id": "misplaced", "qid": "q1",
                                 "sample": None, "verdict": "match"}, "an-older-attempt"))
    [error] = tie_errors(run)
    assert f"judged attempt an-older-attempt, not the live one {live}" in error
    assert verdict_of(run, es, "q1") is None


def test_a_void_and_rescore_by_hand_counts_what_it_names_and_no_more(tiny):
    run, es = tiny
    rs.score_attempts(run, es, Judge("no_match"), PINS, progress=lambda _: None)
    old = run.score("q1", None)
    attempt_id = run.attempt("q1", None)["event_id"]
    # A person voids the judge's no_match and writes a match naming the attempt and no reply:
    # a verdict by hand, counted as such (a person's settled verdict goes through review.py).
    raw_line(run, {"kind": "void", "event_id": "v1", "target_event_id": old["event_id"],
                   "reason": "I disagree"})
    raw_line(run, {"kind": "score", "event_id": "rescored", "qid": "q1", "sample": None,
                   "verdict": "match", "attempt_event_id": attempt_id})
    assert tie_errors(run) == [] and verdict_of(run, es, "q1") == "match"
    # Naming a judge reply that is not in the run is a claim the run cannot back: ignored.
    raw_line(run, {"kind": "void", "event_id": "v2", "target_event_id": "rescored",
                   "reason": "with its reply"})
    line = raw_line(run, {"kind": "score", "event_id": "claims", "qid": "q1", "sample": None,
                          "verdict": "match", "attempt_event_id": attempt_id,
                          "reply_artifact": "artifacts/q1/_/judge.9/replies.json",
                          "reply_sha": "c" * 64})
    [error] = tie_errors(run)
    assert error.startswith(f"events.jsonl:{line}:") and "judge.9/replies.json is missing" in error
    [ignored] = summarize(run, es).ignored
    assert ignored.cause == "missing artifact" and verdict_of(run, es, "q1") is None


def test_a_human_verdict_naming_a_fixture_that_is_not_there_changes_nothing(tiny):
    run, es = tiny
    rs.score_attempts(run, es, Judge("no_match"), PINS, progress=lambda _: None)
    attempt_id = run.attempt("q1", None)["event_id"]
    line = raw_line(run, {"kind": "human_verdict", "event_id": "h1", "qid": "q1",
                          "sample": None, "verdict": "match", "why": "trust me",
                          "settled_by": "Mallory", "attempt_event_id": attempt_id,
                          "fixture_path": "artifacts/q1/_/human/fixture.json",
                          "fixture_sha": "d" * 64})
    [error] = tie_errors(run)
    assert error.startswith(f"events.jsonl:{line}: human_verdict q1")
    assert "regression fixture artifacts/q1/_/human/fixture.json is missing" in error
    s = summarize(run, es)
    assert verdict_of(run, es, "q1") == "no_match" and s.settled_by_person == 0
    assert [(i.kind, i.cause) for i in s.ignored] == [("human_verdict", "missing artifact")]


@pytest.mark.parametrize("damage, words", [("remove", "is missing"), ("edit", "differs")])
def test_a_score_whose_reply_artifact_is_missing_or_altered_is_untied(tiny, damage, words):
    run, es = tiny
    rs.score_attempts(run, es, Judge("match"), PINS, progress=lambda _: None)
    score = run.score("q1", None)
    reply = run.dir / score["reply_artifact"]
    if damage == "remove":
        reply.unlink()
    else:
        reply.write_text(reply.read_text().replace("match", "no_match"))
    [error] = tie_errors(run)
    assert f"its judge reply {score['reply_artifact']} {words}" in error
    assert verdict_of(run, es, "q1") is None and verdict_of(run, es, "q2") == "match"
    assert run.view().tied_score(run.key("q1", None)) is None


# ------------------------------------------------------------------ the re-record race

def test_a_re_recording_while_its_case_is_judged_leaves_the_verdict_on_the_attempt_it_judged(
        tmp_path):
    run = Run.create(tmp_path / "run", BOOKSHOP, "test-answerer", run_id="race-1")
    es = load_set(BOOKSHOP)
    qid = "bk_total_revenue"
    first = record_attempt(run.dir, BOOKSHOP, qid, transcript=TRANSCRIPTS / f"{qid}.jsonl")

    def re_record(judged_qid):  # the hook: runs while the judge has the old attempt in hand
        record_attempt(run.dir, BOOKSHOP, judged_qid,
                       transcript=TRANSCRIPTS / "bk_refunded_amount.jsonl")

    lines: list[str] = []
    rs.score_attempts(run, es, Judge("match", during=re_record), PINS, progress=lines.append)
    view = run.view()
    key = run.key(qid, None)
    new_attempt = view.attempt(key)
    assert new_attempt["event_id"] != first.attempt_event_id
    assert view.score(key)["attempt_event_id"] == first.attempt_event_id  # where it landed
    assert view.tied_score(key) is None  # never the new answer's verdict
    assert any("re-recorded while it was judged" in text for text in lines)
    assert verdict_of(run, es, qid) is None
    # The next pass judges the new attempt: its verdict names it.
    again = rs.score_attempts(run, es, Judge("no_match"), PINS, progress=lambda _: None)
    assert [o.action for o in again] == [rs.ACTION_UNTIED]
    assert run.view().tied_score(key)["attempt_event_id"] == new_attempt["event_id"]


# ------------------------------------------------------------------ stale by content

def test_a_case_edited_without_a_revision_bump_makes_its_score_stale(tiny):
    run, es = tiny
    rs.score_attempts(run, es, Judge("match"), PINS, progress=lambda _: None)
    cases = (es.dir / "cases.jsonl").read_text().splitlines()
    q1 = json.loads(cases[0])
    q1["golden"]["value"] = {"n": 4}  # a new golden, goldenRevision left as it was
    cases[0] = json.dumps(q1)
    (es.dir / "cases.jsonl").write_text("\n".join(cases) + "\n")
    edited = load_set(es.dir)
    score = run.score("q1", None)
    assert ties.stale_pins(score, rs.current_pins(edited, "q1", PINS)) == ["case_sha"]
    judge = Judge("no_match")
    outcomes = rs.score_attempts(run, edited, judge, PINS, progress=lambda _: None)
    assert judge.calls == ["q1"]
    assert {o.qid: (o.action, o.stale_pins) for o in outcomes} == {
        "q1": (rs.ACTION_STALE, ["case_sha"]), "q2": (rs.ACTION_SKIP, [])}


def test_the_content_digest_follows_what_the_judge_reads_not_bookkeeping(tiny):
    _, es = tiny
    case = es.case("q1")
    before = case_content_sha(case, es.dir)
    case.raw["golden"]["verifiedBy"] = "someone"
    case.raw["goldenRevision"] = 7
    assert case_content_sha(case, es.dir) == before
    case.raw["golden"]["rubric"] = "ACCEPT: any count"
    assert case_content_sha(case, es.dir) != before


# ------------------------------------------------------------------ one scorer per run

def test_a_second_score_run_exits_3_at_once_naming_the_holder(tiny, tmp_path):
    run, _ = tiny
    broken = tmp_path / "broken-set"
    broken.mkdir()
    (broken / "set.json").write_text("{")  # would fail to load: the lock must come first
    with run.holding(rs.SCORE_LOCK, "score_run.py"):
        out = run_outcome(SCORE_RUN, ["--run", str(run.dir), "--set", str(broken), "--judge",
                                      "replay", "--local"], KIT)
    assert out.code == 3
    assert "another score_run.py holds .score.lock (score_run.py: pid" in out.err
    assert "set.json" not in out.err


def test_score_run_holds_the_lock_while_it_works(tiny):
    run, es = tiny
    seen: list[str] = []

    def second_scorer(_qid):
        try:
            with Run.open(run.dir).holding(rs.SCORE_LOCK, "score_run.py"):
                seen.append("taken")
        except UnmeasuredError as exc:
            seen.append(str(exc))

    with run.holding(rs.SCORE_LOCK, "score_run.py"):
        Judge(during=second_scorer)(run, es, "q1", None)
    assert len(seen) == 1 and "another score_run.py holds" in seen[0]


# ------------------------------------------------------------------ the ledger before money

def test_a_junk_ledger_line_stops_run_answers_and_score_run_before_any_call(tiny):
    run, es = tiny
    with run.events_path.open("a") as fh:
        fh.write("this is not an event\n")
    answers = run_outcome(RUN_ANSWERS, ["--run", str(run.dir), "--set", str(es.dir), "--local",
                                        "--answerer-cmd", "false {question_file}"], KIT)
    assert answers.code == 3
    assert f"{run.events_path}:3: the ledger has a bad line, run_answers.py appends nothing to " \
           "it: not valid JSON" in answers.err
    assert answers.err.count("\n") == 1
    scored = run_outcome(SCORE_RUN, ["--run", str(run.dir), "--set", str(es.dir), "--judge",
                                     "replay", "--local"], KIT)
    assert scored.code == 3 and "events.jsonl:3: the ledger has a bad line" in scored.err


def test_an_untied_score_is_not_a_bad_line_for_the_check_before_appending(tiny):
    run, _ = tiny
    raw_line(run, {"kind": "score", "event_id": "old", "qid": "q1", "sample": None,
                   "verdict": "match"})
    check_before_append(run.dir, "score_run.py")  # older ledgers have such scores: no refusal


# ------------------------------------------------------------------ settling is all or nothing

def test_a_settlement_whose_fixture_cannot_be_written_writes_nothing(tiny):
    run, es = tiny
    rs.score_attempts(run, es, Judge("no_match"), PINS, progress=lambda _: None)
    (es.dir / "judge-regressions.jsonl").mkdir()  # a folder where the fixture file goes
    before = run.events_path.read_bytes()
    with pytest.raises(InputError) as caught:
        settle(RunOutputs.load(run.dir, es.dir), "q1", verdict="match", why="rows agree",
               by="Dana")
    assert "judge-regressions.jsonl" in str(caught.value) and "\n" not in str(caught.value)
    assert "nothing was written" in str(caught.value)
    assert run.events_path.read_bytes() == before
    assert not (run.dir / "RESULTS.md").exists()


def test_a_settled_verdict_is_tied_to_its_fixture_copy(tiny):
    run, es = tiny
    rs.score_attempts(run, es, Judge("no_match"), PINS, progress=lambda _: None)
    result = settle(RunOutputs.load(run.dir, es.dir), "q1", verdict="match", why="rows agree",
                    by="Dana")
    human = run.view().human_verdict(run.key("q1", None))
    assert human["event_id"] == result.event_id and human["fixture_sha"]
    assert verdict_of(run, es, "q1") == "match" and tie_errors(run) == []
    (run.dir / human["fixture_path"]).write_text("{}\n")  # the copy edited afterwards
    assert verdict_of(run, es, "q1") == "no_match"
    assert "regression fixture" in tie_errors(run)[0]


# ------------------------------------------------------------------ goldens change safely

PROVISIONAL = "bk_member_revenue_share"


@pytest.fixture
def bookshop(tmp_path):
    return bookshop_copy(tmp_path / "bookshop")


def test_a_promotion_racing_a_line_edit_exits_3_and_keeps_the_edit(bookshop, needs_node):
    n, _ = case_line(bookshop, PROVISIONAL)

    def edit_then_derive(*args, **kwargs):  # the hook: the edit lands while goldens re-derive
        lines = (bookshop / "cases.jsonl").read_text().splitlines()
        obj = json.loads(lines[n - 1])
        obj["question"] += " (edited)"
        lines[n - 1] = json.dumps(obj)
        (bookshop / "cases.jsonl").write_text("\n".join(lines) + "\n")
        return rt.MalloyRuntime(*args, **kwargs)

    qids_before = [json.loads(x)["qid"] for x in (bookshop / "cases.jsonl").read_text().splitlines()]
    with pytest.raises(InputError) as caught:
        promote_golden(bookshop, [PROVISIONAL], runtime_factory=edit_then_derive)
    assert caught.value.exit_code == 3
    assert f"{PROVISIONAL}: its line changed while promote_golden.py worked" in str(caught.value)
    _, now = case_line(bookshop, PROVISIONAL)
    assert now["question"].endswith(" (edited)") and now["golden"]["status"] == "provisional"
    assert [json.loads(x)["qid"] for x in (bookshop / "cases.jsonl").read_text().splitlines()] \
        == qids_before  # no case lost, none duplicated
    load_set(bookshop)


def test_a_second_promotion_exits_3_naming_the_first(bookshop):
    with promote._set_lock(bookshop), pytest.raises(UnmeasuredError, match="another promote_golden"):
        promote_golden(bookshop, [PROVISIONAL])


def test_a_constant_canonical_query_is_not_derived_unless_a_person_attests_it(bookshop,
                                                                              needs_node):
    n, obj = case_line(bookshop, PROVISIONAL)
    obj["golden"]["canonicalQuery"] = 'run: duckdb.sql("select 12345.67 as revenue") -> {select: *}'
    obj["golden"]["value"] = {"revenue": 12345.67}
    lines = (bookshop / "cases.jsonl").read_text().splitlines()
    lines[n - 1] = json.dumps(obj)
    (bookshop / "cases.jsonl").write_text("\n".join(lines) + "\n")
    before = (bookshop / "cases.jsonl").read_bytes()
    report = promote_golden(bookshop, [PROVISIONAL])
    [p] = report.promotions
    assert (p.outcome, report.exit_code) == ("not derived", 3)
    assert "reads no table" in p.detail
    assert (bookshop / "cases.jsonl").read_bytes() == before
    attested = promote_golden(bookshop, [PROVISIONAL], attest=True, by="Dana Reyes")
    assert attested.promoted == [PROVISIONAL]
    assert case_line(bookshop, PROVISIONAL)[1]["golden"]["verifiedBy"].startswith(
        "attested by Dana Reyes")


def test_a_real_canonical_query_names_the_tables_it_reads():
    sql = "SELECT 1 FROM '../data/orders.csv' as base JOIN read_csv('../data/books.csv') b ON 1"
    roots = [BOOKSHOP / "truth", BOOKSHOP / "data"]
    reads = tables_read(sql, BOOKSHOP / "truth", roots, BOOKSHOP)
    assert reads == ["data/orders.csv", "data/books.csv"]
    # A path that is only a value, not a table read, derives nothing.
    constant = ("SELECT base.\"revenue\" FROM (select 12345.67 as revenue, "
                "'../data/orders.csv' as x) as base")
    assert tables_read(constant, BOOKSHOP / "truth", roots, BOOKSHOP) == []


# ------------------------------------------------------------------ arms over other set files

def test_arms_over_other_versions_of_the_set_are_refused_unless_allowed_and_then_named(tmp_path):
    s = make_set(tmp_path, ["q1", "q2"])
    base = make_run(tmp_path, s, "base", {"q1": "match", "q2": "no_match"})
    cand = make_run(tmp_path, s, "cand", {"q1": "match", "q2": "match"})
    Run.open(cand).update_info(datasetSha="0" * 64)  # made before the set's files changed
    refused = compare_runs([base], [cand], s)
    assert not refused.comparable and "datasetSha" in refused.verdict
    assert any("--allow-different-set" in line for line in refused.headline)
    allowed = compare_runs([base], [cand], s, allow_different_set=True)
    assert allowed.comparable and allowed.allowed == ["--allow-different-set"]
    assert any(line.startswith("compared despite (allowed by --allow-different-set): datasetSha")
               for line in allowed.headline)
