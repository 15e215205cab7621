"""eval-improve: the gate's decision rule at its edges, the checks on a change (a golden figure, the
set touched), start / accept / rollback on copies of the sample set (git and non-git models),
rollback byte for byte, resuming after an interrupt, and the loop the demo ran end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from malloy_evals.core.errors import InputError
from malloy_evals.improve import checks, steps
from malloy_evals.improve.gate import ACCEPT, REJECT, decide, guard_sample
from malloy_evals.improve.journal import Journal
from malloy_evals.improve.model import folder_digest
from malloy_evals.ledger.run import Run
from malloy_evals.report.arms import Arm, CaseOutcome, CaseRow, case_outcome, change_of
from malloy_evals.report.arms import AttemptOutcome as Outcome
from malloy_evals.report.noise import NoiseBand, PairFlips
from malloy_evals.sets.eval_set import load_set
from script_support import run_outcome

KIT = Path(__file__).resolve().parents[1]
SET = KIT / "evals" / "bookshop"
IMPROVE = KIT / "skills" / "eval-improve" / "scripts" / "improve.py"
ISSUE = "baseline:refund-rule-unwritten-for-returned-orders"
REFUNDS = ("    refunded_amount is sum(line_amount) { where: orders.status = 'returned' }\n")
ANCHOR = "    #(doc) Copies sold on orders that count as a sale (shipped or pending).\n"


# ------------------------------------------------------------------------------------------
# The decision rule, pure


def _case(qid: str, *verdicts: str) -> CaseOutcome:
    kinds = {"match": "pass", "no_match": "fail", "near_match": "neither", None: "null"}
    return case_outcome(qid, [Outcome(kinds[v], v, None if v else "not_submitted", None)
                              for v in verdicts])


def _row(qid: str, base: str, cand: str | None) -> CaseRow:
    b, c = _case(qid, base), _case(qid, cand)
    return CaseRow(qid, change_of(b, c), b, c)


def _band(max_flips: int, flipped: list[str]) -> NoiseBand:
    return NoiseBand("bookshop", "2026-01-01T00:00:00Z", [], [PairFlips(["a", "b"], max_flips,
                                                                         flipped, 14)],
                     max_flips, float(max_flips), 14, {})


def test_target_fixed_and_nothing_broken_is_accepted():
    rows = [_row("t", "no_match", "match"), _row("g1", "match", "match")]
    d = decide(rows, ["t"], _band(3, ["x", "y", "z"]))
    assert (d.decision, d.reasons, d.targets) == (ACCEPT, [], {"t": "fixed beyond the band"})


def test_target_fixed_within_the_band_is_rejected():
    # The target is one of the cases two runs of the unchanged arm already disagree on.
    rows = [_row("t", "no_match", "match"), _row("g1", "match", "match")]
    d = decide(rows, ["t"], _band(1, ["t"]))
    assert d.decision == REJECT
    assert d.targets == {"t": "fixed within the band"}
    assert "cannot be told from noise" in d.reasons[0]


def test_a_guard_case_broken_beyond_the_band_is_rejected_even_with_the_target_fixed():
    rows = [_row("t", "no_match", "match"), _row("g1", "match", "no_match")]
    d = decide(rows, ["t"], _band(3, ["x", "y", "z"]))
    assert d.decision == REJECT and d.broken_beyond == ["g1"]
    assert d.reasons == [("broke g1: pass in the baseline, fail on the candidate, and the A/A "
                         "runs never saw it flip: beyond the band")]


def test_a_noisy_guard_case_broken_within_the_band_is_accepted():
    rows = [_row("t", "no_match", "match"), _row("g1", "match", "no_match")]
    d = decide(rows, ["t"], _band(1, ["g1"]))
    assert d.decision == ACCEPT and d.broken_within == ["g1"] and d.broken_beyond == []


def test_more_noisy_breaks_than_the_band_is_beyond_it():
    rows = [_row("t", "no_match", "match"), _row("g1", "match", "no_match"),
            _row("g2", "match", "no_match")]
    d = decide(rows, ["t"], _band(1, ["g1", "g2"]))
    assert d.decision == REJECT
    assert d.reasons == ["broke 2 case(s) the A/A runs saw flip (g1, g2), more than the band's 1"]


def test_a_guard_case_that_stops_submitting_counts_as_broken():
    rows = [_row("t", "no_match", "match"), _row("g1", "match", None)]
    d = decide(rows, ["t"], _band(3, ["x"]))
    assert d.decision == REJECT and d.broken_beyond == ["g1"]


def test_a_target_not_fixed_is_rejected_with_both_outcomes():
    d = decide([_row("t", "no_match", "no_match")], ["t"], _band(0, []))
    assert d.reasons == ["target t is not fixed: fail in the baseline, fail on the candidate"]


def test_guard_sample_is_seeded_and_only_from_passing_non_targets():
    cases = {q: _case(q, v) for q, v in [("a", "match"), ("b", "match"), ("c", "no_match"),
                                         ("d", "match"), ("t", "match")]}
    arm = Arm("base", [], cases, {}, 5, 5, {})
    first = guard_sample(arm, ["t"], 2, 7)
    assert first == guard_sample(arm, ["t"], 2, 7)
    assert len(first) == 2 and set(first) <= {"a", "b", "d"}
    assert guard_sample(arm, ["t"], 10, 0) == ["a", "b", "d"]


# ------------------------------------------------------------------------------------------
# The golden-figure check, pure


@pytest.mark.parametrize("line, hit", [
    pytest.param("refunded is 7845.21", True, id="the-figure"),
    pytest.param("#(doc) Refunds came to 7,845.21 dollars.", True, id="with-a-thousands-comma"),
    pytest.param("x is 7845.209", True, id="equal-at-the-golden-precision"),
    pytest.param("x is 7845.2", False, id="another-figure-at-that-precision"),
    pytest.param("x is 0.0588", False, id="three-significant-digits-are-allowed"),
    pytest.param("where: genre = 'Mystery'", True, id="a-golden-text-cell"),
    pytest.param("where: orders.status = 'returned'", False, id="a-value-no-golden-holds"),
])
def test_a_line_writing_a_golden_figure_is_found(line, hit):
    cells = checks.golden_cells(load_set(SET))
    assert bool(checks.golden_figures_written([line], cells)) is hit


def test_significant_digits_as_written():
    assert [checks.significant_digits(x) for x in ("7845.21", "0.0588", "1200", "-12.50")] \
        == [6, 3, 2, 4]


# ------------------------------------------------------------------------------------------
# start / accept / rollback on copies of the sample set


def _set_copy(tmp_path: Path, *, git: bool, recordings: bool = False) -> tuple[Path, Path]:
    """A copy of the sample set with its recorded baseline run, the refunds issue filed open."""
    copy = tmp_path / "bookshop"
    skip = ("transcripts",) if recordings else ("transcripts", "recordings")
    shutil.copytree(SET, copy, ignore=shutil.ignore_patterns(*skip))
    run = copy / "runs" / "baseline"
    Run.open(run).append([
        {"kind": "issue", "issue_id": ISSUE, "qids": ["bk_refunded_amount"],
         "primary_code": "RULE_UNWRITTEN", "component": "get_context/model", "owner": "model",
         "diagnosis": "The refund rule is not written (7,845.21 is what it should say)."},
        {"kind": "issue_status", "issue_id": ISSUE, "status": "open"}])
    if git:
        for argv in (["init", "-q"], ["add", "-A"],
                     ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "set"]):
            subprocess.run(["git", "-C", str(copy), *argv], check=True, capture_output=True)
    return copy, run


def _gated(journal: Path, candidate: Path, decision: str) -> None:
    """A gate decision written as the gate writes it (the gate itself runs in the demo)."""
    j = Journal.open(journal)
    proposed = j.append({"kind": "change_proposed", "candidate": str(candidate.resolve()),
                         "digest": folder_digest(candidate), "diff": "+x", "check_reasons": []})
    j.append({"kind": "gate_decided", "change_id": proposed["event_id"],
              "digest": proposed["digest"], "decision": decision,
              "reasons": [] if decision == ACCEPT else ["broke bk_total_revenue"],
              "summary": "s", "passing_attempt_ids": ["a1"]})


def _candidate(copy: Path, name: str = "model-fix") -> Path:
    cand = copy / name
    shutil.copytree(copy / "model", cand)
    f = cand / "bookshop.malloy"
    f.write_text(f.read_text().replace(ANCHOR, REFUNDS + ANCHOR))
    return cand


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_start_writes_blind_evidence_and_refuses_an_issue_not_owned_by_the_model(tmp_path):
    copy, run = _set_copy(tmp_path, git=False)
    result = steps.start(copy, run, ISSUE, tmp_path / "j")
    assert result.done and result.details["checkpoint"]["git_commit"] is None
    evidence = (tmp_path / "j" / "evidence.json").read_text()
    assert "7,845.21" not in evidence and steps.WITHHELD in evidence  # the golden withheld
    assert "PREFERRED" not in evidence and '"golden"' not in evidence  # no rubric, no golden block
    Run.open(run).append([{"kind": "issue", "issue_id": "baseline:x", "qids": ["bk_channel_mix"],
                           "primary_code": "NO-QUERY-RUN", "component": "construction",
                           "owner": "agent-skill", "diagnosis": "d"}])
    with pytest.raises(InputError, match="owned by agent-skill"):
        steps.start(copy, run, "baseline:x", tmp_path / "j2")


def test_accept_then_rollback_in_a_git_model_commits_both_and_restores_byte_for_byte(tmp_path):
    copy, run = _set_copy(tmp_path, git=True)
    before = _files(copy / "model")
    started = steps.start(copy, run, ISSUE, tmp_path / "j")
    assert started.details["checkpoint"]["git_commit"]
    cand = _candidate(copy)
    _gated(tmp_path / "j", cand, ACCEPT)
    accepted = steps.accept(tmp_path / "j")
    assert accepted.done and accepted.details["git_commit"] != started.details["checkpoint"]["git_commit"]
    assert _files(copy / "model") == _files(cand)
    status = [e for e in Run.open(run).view().events if e["kind"] == "issue_status"][-1]
    assert (status["status"], status["passing_attempt_ids"]) == ("fixed", ["a1"])
    log = subprocess.run(["git", "-C", str(copy), "log", "--format=%s"], capture_output=True,
                         text=True, check=True).stdout
    assert f"eval-improve: {ISSUE} fixed" in log
    rolled = steps.rollback(tmp_path / "j")
    assert rolled.done and _files(copy / "model") == before
    clean = subprocess.run(["git", "-C", str(copy), "status", "--porcelain", "--", "model"],
                           capture_output=True, text=True, check=True).stdout
    assert clean == ""  # the restore is committed too


def test_rollback_of_a_rejected_in_place_edit_restores_byte_for_byte(tmp_path):
    copy, run = _set_copy(tmp_path, git=False)
    before = _files(copy / "model")
    steps.start(copy, run, ISSUE, tmp_path / "j")
    model = copy / "model" / "bookshop.malloy"
    model.write_text(model.read_text().replace(ANCHOR, REFUNDS + ANCHOR))
    (copy / "model" / "extra.malloy").write_text("// a file the change added\n")
    _gated(tmp_path / "j", copy / "model", REJECT)
    assert not steps.accept(tmp_path / "j").done  # the gate rejected it
    rolled = steps.rollback(tmp_path / "j")
    assert rolled.done and rolled.details["reasons"] == ["broke bk_total_revenue"]
    assert _files(copy / "model") == before


def test_accept_and_rollback_refuse_a_model_changed_since_the_gate(tmp_path):
    copy, run = _set_copy(tmp_path, git=False)
    steps.start(copy, run, ISSUE, tmp_path / "j")
    cand = _candidate(copy)
    _gated(tmp_path / "j", cand, ACCEPT)
    (cand / "bookshop.malloy").write_text((cand / "bookshop.malloy").read_text() + "// later\n")
    refused = steps.accept(tmp_path / "j")
    assert not refused.done and "changed since the gate" in refused.reasons[0]
    (copy / "model" / "bookshop.malloy").write_text("// someone's unsaved work\n")
    refused = steps.rollback(tmp_path / "j")
    assert not refused.done and "restoring would lose that work" in refused.reasons[0]
    assert (copy / "model" / "bookshop.malloy").read_text() == "// someone's unsaved work\n"


def test_an_accept_interrupted_after_marking_the_issue_resumes_without_marking_twice(
        tmp_path, monkeypatch):
    copy, run = _set_copy(tmp_path, git=False)
    steps.start(copy, run, ISSUE, tmp_path / "j")
    cand = _candidate(copy)
    _gated(tmp_path / "j", cand, ACCEPT)
    real = Journal.append

    def interrupted(self, event):
        if event["kind"] == "accepted":
            raise KeyboardInterrupt
        return real(self, event)
    monkeypatch.setattr(Journal, "append", interrupted)
    with pytest.raises(KeyboardInterrupt):
        steps.accept(tmp_path / "j")
    monkeypatch.setattr(Journal, "append", real)
    assert Journal.open(tmp_path / "j").stage() == "gated"  # the journal says where it stopped
    resumed = steps.accept(tmp_path / "j")
    assert resumed.done and Journal.open(tmp_path / "j").stage() == "accepted"
    fixed = [e for e in Run.open(run).view().events
             if e["kind"] == "issue_status" and e["status"] == "fixed"]
    assert len(fixed) == 1 and resumed.details["issue_status_event_id"] == fixed[0]["event_id"]
    again = steps.accept(tmp_path / "j")
    assert again.resumed and again.done


def test_start_again_keeps_the_first_checkpoint(tmp_path):
    copy, run = _set_copy(tmp_path, git=False)
    first = steps.start(copy, run, ISSUE, tmp_path / "j")
    (copy / "model" / "bookshop.malloy").write_text("// edited after start\n")
    again = steps.start(copy, run, ISSUE, tmp_path / "j")
    assert again.resumed and again.details["checkpoint"] == first.details["checkpoint"]


def test_check_refuses_a_golden_figure_and_an_edited_set_listing_every_reason(tmp_path, needs_node):
    copy, run = _set_copy(tmp_path, git=False)
    steps.start(copy, run, ISSUE, tmp_path / "j")
    cand = _candidate(copy, "model-cheat")
    f = cand / "bookshop.malloy"
    f.write_text(f.read_text().replace(ANCHOR, "    #(doc) Refunds total 7845.21.\n" + ANCHOR))
    with (copy / "cases.jsonl").open("a") as fh:
        fh.write("\n")
    out = run_outcome(IMPROVE, ["check", "--set", str(copy), "--candidate-model", str(cand),
                                "--journal", str(tmp_path / "j"), "--json"])
    assert out.code == 1, out.err
    reasons = json.loads(out.out)["reasons"]
    assert any("7845.21, the golden figure of bk_refunded_amount" in r for r in reasons)
    assert any("cases.jsonl changed since the improve journal started" in r for r in reasons)
    inside = run_outcome(IMPROVE, ["check", "--set", str(copy), "--candidate-model",
                                   str(copy / "truth"), "--json"])
    assert inside.code == 1 and "inside its goldens/truth" in inside.out


# ------------------------------------------------------------------------------------------
# The loop as make demo ran it: a harmful change rejected and rolled back, the refunds change
# accepted (gated on answers made by the scripted answerer, judged from recordings).


def _journal(demo_run, name: str) -> Journal:
    return Journal.open(demo_run.scratch / "improve" / name)


def test_demo_rolls_back_the_harmful_change_for_the_case_it_broke(needs_node, demo_run):
    j = _journal(demo_run, "harmful")
    gate = j.latest("gate_decided")
    assert gate is not None and gate["decision"] == REJECT
    assert gate["targets"] == {"bk_refunded_amount": "fixed beyond the band"}
    assert gate["broken_beyond"] == ["bk_total_revenue"]
    assert j.stage() == "rolled_back"
    assert j.latest("rolled_back")["digest"] == j.started["checkpoint"]["digest"]
    assert "rolled back" in demo_run.proc.stdout


def test_demo_accepts_the_refunds_change_the_candidate_model_holds(needs_node, demo_run):
    j = _journal(demo_run, "refunds")
    gate = j.latest("gate_decided")
    assert gate is not None and (gate["decision"], gate["reasons"]) == (ACCEPT, [])
    assert j.stage() == "accepted"
    model = demo_run.scratch / "bookshop" / "model" / "bookshop.malloy"
    assert "refunded_amount is sum(line_amount) { where: orders.status = 'returned' }" \
        in model.read_text()
    fixed = [e for e in Run.open(demo_run.scratch / "runs" / "baseline").view().events
             if e["kind"] == "issue_status" and e["status"] == "fixed"]
    assert [e["issue_id"] for e in fixed] == [ISSUE]
    assert fixed[0]["passing_attempt_ids"] == gate["passing_attempt_ids"] != []
    page = Path(gate["compare_dir"]) / "compare.html"
    assert "refunded_amount" in page.read_text()  # the diff is on the comparison page
    assert "accepted" in demo_run.proc.stdout and "the loop took" in demo_run.proc.stdout


# ------------------------------------------------------------------------------------------
# A gate interrupted after answering resumes: nothing answered twice, then the decision.


def test_a_gate_interrupted_before_scoring_resumes_where_its_journal_stopped(
        tmp_path, needs_node, monkeypatch):
    from malloy_evals.improve import gate as gate_mod
    from malloy_evals.improve.draft import draft_change
    from malloy_evals.llm.hand import HandProvider
    from malloy_evals.llm.select import make_provider
    from malloy_evals.report.arms import load_arm
    from malloy_evals.workflow.outputs import RunOutputs
    from malloy_evals.workflow.run_scorer import score_run

    copy, run = _set_copy(tmp_path, git=False, recordings=True)
    judge = make_provider("replay", role="judge", set_dir=copy)
    score_run(RunOutputs.load(run, copy), judge=judge, local=True, progress=lambda _m: None)
    band = json.loads((KIT / "reference" / "examples" / "noise_band.example.json").read_text())
    band["judge"] = {k: None for k in band["judge"]}  # no pins to hold against this judge
    (tmp_path / "band.json").write_text(json.dumps(band))
    steps.start(copy, run, ISSUE, tmp_path / "j")
    # The demo's own draft, so the candidate is the model the judge recordings were made for.
    cand = copy / "model-refunds"
    draft_change(tmp_path / "j", HandProvider(SET / "improve" / "drafts.jsonl"), cand)
    arm = load_arm("base", [run], load_set(copy))
    seed = next(s for s in range(200)
                if guard_sample(arm, ["bk_refunded_amount"], 1, s) == ["bk_total_revenue"])
    options = gate_mod.GateOptions(
        answerer=gate_mod.AnswererSpec(
            "command", template=f"{json.dumps(str(KIT / '.venv' / 'bin' / 'python'))} "
            f"{json.dumps(str(KIT / 'scripts' / 'scripted_answerer.py'))} --mcp-config "
            "{mcp_config} --question-file {question_file}"),
        judge=judge, judge_spec="replay", band=tmp_path / "band.json", guard=1, seed=seed,
        run_id="improve-refunds", allow_different_set=True, allow_different_retrieval=True)

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt
    monkeypatch.setattr(gate_mod, "score_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gate_mod.run_gate(tmp_path / "j", cand, options, progress=lambda _m: None)
    assert Journal.open(tmp_path / "j").stage() == "proposed"  # answered, not yet decided
    monkeypatch.setattr(gate_mod, "score_run", score_run)
    result = gate_mod.run_gate(tmp_path / "j", cand, options, progress=lambda _m: None)
    assert (result.decision, result.reasons) == (ACCEPT, [])
    journal = Journal.open(tmp_path / "j")
    assert [e["kind"] for e in journal.events] == ["improve_started", "change_proposed",
                                                   "gate_decided"]
    gate_run = Run.open(journal.latest("gate_decided")["run_dir"])
    assert sorted(a["qid"] for a in gate_run.view().attempts()) == ["bk_refunded_amount",
                                                                    "bk_total_revenue"]
    again = gate_mod.run_gate(tmp_path / "j", cand, options, progress=lambda _m: None)
    assert again.resumed and again.decision == ACCEPT


def test_the_gate_runs_the_checks_first_and_rejects_before_spending(tmp_path, needs_node):
    from malloy_evals.improve import gate as gate_mod
    from malloy_evals.llm.hand import HandProvider

    copy, run = _set_copy(tmp_path, git=False)
    steps.start(copy, run, ISSUE, tmp_path / "j")
    cand = _candidate(copy, "model-cheat")
    f = cand / "bookshop.malloy"
    f.write_text(f.read_text().replace(REFUNDS, REFUNDS.replace(
        "sum(line_amount) { where: orders.status = 'returned' }", "7845.21")))
    (tmp_path / "replies.jsonl").write_text("")
    options = gate_mod.GateOptions(answerer=gate_mod.AnswererSpec("command", template="false"),
                                   judge=HandProvider(tmp_path / "replies.jsonl"),
                                   judge_spec="hand", band=tmp_path / "no-band.json")
    result = gate_mod.run_gate(tmp_path / "j", cand, options, progress=lambda _m: None)
    assert result.decision == REJECT and result.exit_code == 1
    assert any("7845.21, the golden figure of bk_refunded_amount" in r for r in result.reasons)
    decided = Journal.open(tmp_path / "j").latest("gate_decided")
    assert decided["run_dir"] is None and not (tmp_path / "j" / "gates").exists()


def test_check_reads_an_edit_made_in_model_itself_against_the_checkpoint(tmp_path, needs_node):
    copy, run = _set_copy(tmp_path, git=False)
    steps.start(copy, run, ISSUE, tmp_path / "j")
    model = copy / "model" / "bookshop.malloy"
    model.write_text(model.read_text().replace(ANCHOR, REFUNDS + ANCHOR))
    argv = ["check", "--set", str(copy), "--candidate-model", str(copy / "model"), "--json"]
    alone = run_outcome(IMPROVE, argv)
    assert alone.code == 1 and "the model unchanged" in alone.out  # model/ against itself
    journaled = run_outcome(IMPROVE, [*argv, "--journal", str(tmp_path / "j")])
    assert journaled.code == 0, journaled.out
    assert "+    refunded_amount is sum(line_amount)" in json.loads(journaled.out)["diff"]
