"""How far to trust the judge (issue 26): agreement with people (Cohen's kappa and its interval),
re-verification, self-consistency (judge samples), k answerer samples (pass@1, pass@k, pass^k)
and the doctrine decisions with their fixtures."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from judge_support import FakeProvider, make_run, make_set, verdict, write_prediction
from malloy_evals.answer.scoring import score_attempt
from malloy_evals.checks.must_not_use import Definitions, check_must_not_use
from malloy_evals.judge import decision
from malloy_evals.judge.doctrine import load_doctrine
from malloy_evals.judge.packet import Submission
from malloy_evals.ledger.artifacts import PredictionView
from malloy_evals.ledger.run import Run
from malloy_evals.llm.select import make_provider
from malloy_evals.report import agreement, stats
from malloy_evals.report.figures import CaseRow, sample_summary
from malloy_evals.sets.eval_set import load_set
from malloy_evals.workflow import review
from malloy_evals.workflow.outputs import RunOutputs
from malloy_evals.workflow.reverify import reverify
from script_support import KIT, run_outcome
from tie_support import tied

AGREEMENT = KIT / "skills" / "eval-judge" / "scripts" / "judge_agreement.py"
CHECK_JUDGE = KIT / "skills" / "eval-judge" / "scripts" / "check_judge.py"
Z = 1.959963984540054


def table(cells: dict[tuple[str, str], int]) -> list[tuple[str, str]]:
    """Pairs from a confusion table {(judge, person): count}."""
    return [pair for pair, n in cells.items() for _ in range(n)]


def asymptotic_kappa_ci(p_o: float, p_e: float, n: int) -> tuple[float, float]:
    """The large-sample interval kappa +- z * sqrt(p_o (1 - p_o) / n) / (1 - p_e), by hand."""
    kappa = (p_o - p_e) / (1 - p_e)
    half = Z * math.sqrt(p_o * (1 - p_o) / n) / (1 - p_e)
    return kappa - half, kappa + half


# --------------------------------------------------------------------------- kappa


def test_perfect_agreement_is_kappa_1_with_a_point_interval():
    pairs = table({("match", "match"): 6, ("no_match", "no_match"): 4, ("near_match", "near_match"): 2})
    assert stats.cohen_kappa(pairs) == 1.0
    assert stats.kappa_bootstrap(pairs, resamples=500) == (1.0, 1.0)


def test_chance_level_agreement_is_kappa_0_and_its_interval_straddles_0():
    # Each rater says match half the time, independently: p_o = 0.5 = p_e.
    pairs = table({("match", "match"): 25, ("match", "no_match"): 25,
                   ("no_match", "match"): 25, ("no_match", "no_match"): 25})
    assert stats.cohen_kappa(pairs) == pytest.approx(0.0)
    low, high = stats.kappa_bootstrap(pairs)
    hand_low, hand_high = asymptotic_kappa_ci(0.5, 0.5, 100)   # -0.196 .. 0.196
    assert low < 0 < high
    assert low == pytest.approx(hand_low, abs=0.04) and high == pytest.approx(hand_high, abs=0.04)


def test_mixed_table_kappa_and_interval_match_the_hand_computed_figures():
    # p_o = 35/50 = 0.7; marginals judge 25/25, person 30/20: p_e = (25*30 + 25*20) / 2500 = 0.5
    pairs = table({("match", "match"): 20, ("match", "no_match"): 5,
                   ("no_match", "match"): 10, ("no_match", "no_match"): 15})
    assert stats.cohen_kappa(pairs) == pytest.approx(0.4)
    low, high = stats.kappa_bootstrap(pairs)
    hand_low, hand_high = asymptotic_kappa_ci(0.7, 0.5, 50)    # 0.146 .. 0.654
    assert low == pytest.approx(hand_low, abs=0.05) and high == pytest.approx(hand_high, abs=0.05)
    assert stats.kappa_bootstrap(pairs, seed=3) == stats.kappa_bootstrap(pairs, seed=3)
    assert stats.kappa_bootstrap(pairs, seed=3) != stats.kappa_bootstrap(pairs, seed=4)


def test_one_label_throughout_has_no_kappa():
    assert stats.cohen_kappa([("match", "match")] * 5) is None
    assert stats.cohen_kappa([]) is None


# --------------------------------------------------------------------------- agreement with people


def _settled_run(root: Path, pairs: list[tuple[str, str]]) -> Run:
    """A run of q_rev answered len(pairs) times: each sample scored with the judge's verdict and
    settled by a person with the other."""
    set_dir = make_set(root)
    run = make_run(root, set_dir, [{"qid": "q_rev", "sample": i, "answer_text": f"answer {i}"}
                                   for i in range(len(pairs))])
    view = run.view()
    for i, (judge, _person) in enumerate(pairs):
        run.append([tied(run.dir, {"kind": "score", "qid": "q_rev", "sample": i, "verdict": judge,
                                   "confidence": 8, "why": "the judge"})])
    view = run.view()
    for i, (_judge, person) in enumerate(pairs):
        key = run.key("q_rev", i)
        run.append([{"kind": "human_verdict", "qid": "q_rev", "sample": i, "verdict": person,
                     "why": f"settled {i}", "settled_by": "Dana",
                     "attempt_event_id": view.attempt(key)["event_id"],
                     "score_event_id": view.score(key)["event_id"]}])
    return run


def test_agreement_over_settled_attempts_gives_every_figure(tmp_path):
    pairs = table({("match", "match"): 5, ("no_match", "no_match"): 4,
                   ("needs_human", "no_match"): 2, ("near_match", "match"): 1})
    run = _settled_run(tmp_path, pairs)
    report = agreement.judge_agreement([run.dir])
    assert report.pairs == 12 and report.trusted and report.exit_code == 0
    assert report.agreement == pytest.approx(9 / 12, abs=1e-4)
    # p_e by hand: judge 5 m, 4 x, 2 h, 1 n; person 6 m, 6 x: (5*6 + 4*6) / 144 = 0.375
    assert report.kappa == pytest.approx((0.75 - 0.375) / (1 - 0.375), abs=1e-4)
    assert report.confusion["needs_human"]["no_match"] == 2
    assert report.confusion["near_match"]["match"] == 1
    assert {(d["judge"], d["human"]) for d in report.disagreements} == {
        ("needs_human", "no_match"), ("near_match", "match")}
    assert all(d["who"] == "Dana" and d["why"].startswith("settled") for d in report.disagreements)
    low, high = report.kappa_ci
    assert low <= report.kappa <= high


def test_fewer_than_ten_pairs_are_printed_as_too_few_to_trust_and_exit_1(tmp_path):
    run = _settled_run(tmp_path, [("match", "match"), ("no_match", "match"), ("match", "match")])
    out = run_outcome(AGREEMENT, ["--run", str(run.dir), "--json"])
    assert out.code == 1
    doc = json.loads(out.out)
    assert {"pairs", "agreement", "kappa", "kappa_ci", "confusion", "disagreements"} <= set(doc)
    assert doc["pairs"] == 3 and "too few pairs to trust" in doc["note"]
    text = run_outcome(AGREEMENT, ["--run", str(run.dir)])
    assert "too few pairs to trust" in text.out and "no_match, person match" in text.out


def test_the_sets_regression_fixtures_add_their_pairs_once(tmp_path):
    run = _settled_run(tmp_path, [("match", "match")])
    set_dir = tmp_path / "set"
    fixtures = [{"fixtureId": "q_rev.a", "qid": "q_rev", "verdict": "no_match", "why": "wrong",
                 "settledBy": "Lee", "provenance": {"run": "old", "sample": None,
                                                    "judgeVerdict": "match"}},
                {"fixtureId": "q_rev.b", "qid": "q_rev", "verdict": "match", "why": "same",
                 "settledBy": "Dana", "provenance": {"run": run.run_id, "sample": 0,
                                                     "judgeVerdict": "match"}},
                {"fixtureId": "q_rev.c", "qid": "q_rev", "verdict": "match", "why": "no judge"}]
    (set_dir / "judge-regressions.jsonl").write_text("\n".join(map(json.dumps, fixtures)) + "\n")
    report = agreement.judge_agreement([run.dir], set_dir)
    assert report.pairs == 2  # the run's pair, the old run's fixture; q_rev.b is the same attempt
    assert report.disagreements == [{"run": "old", "qid": "q_rev", "sample": None, "judge": "match",
                                     "human": "no_match", "who": "Lee", "why": "wrong"}]


# --------------------------------------------------------------------------- re-verification


def _hand_file(path: Path, run: Run, disagree: set[str]) -> Path:
    """Hand replies for every judged attempt of `run`: the recorded verdict again, except on the
    chosen cases, where the reply says the other thing."""
    lines = []
    view = run.view()
    for key, score in view.latest("score").items():
        recorded = score.get("verdict")
        if recorded not in agreement.LABELS:
            continue
        said = {"match": "no_match", "no_match": "match", "near_match": "no_match",
                "needs_human": "match"}[recorded] if key.qid in disagree else recorded
        reply = {"why": f"re-judged {key.qid}", "verdict": "no_match" if said == "needs_human"
                 else said, "confidence": 4 if said == "needs_human" else 9,
                 "column_pairing": [], "gold_status": "verified", "gold_note": None}
        base = f"{run.run_id}.{key.qid}._"
        keys = [f"{base}.s{i}" for i in (1, 2, 3)] if score.get("judge_samples") else [base]
        lines += [json.dumps({"key": k, "replies": [reply]}) for k in keys]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_reverify_on_the_sample_run_finds_exactly_the_chosen_disagreements(needs_node, demo_run,
                                                                            tmp_path):
    run_dir = tmp_path / "baseline"
    shutil.copytree(demo_run.scratch / "runs" / "baseline", run_dir)
    run = Run.open(run_dir)
    es = load_set(KIT / "evals" / "bookshop")
    live = list(run.view().latest("score").values())
    before = [e for e in live if e.get("verdict") in agreement.LABELS]  # judged, not null by rule
    assert 10 <= len(before) < len(live)
    chosen = {"bk_total_revenue", "bk_profit_margin"}
    hand = _hand_file(tmp_path / "hand.jsonl", run, chosen)
    provider = make_provider(f"hand:{hand}", role="judge", set_dir=None)
    report = reverify(run, es, provider=provider, sample=100, seed=11)
    assert report.sampled == report.judged_attempts == report.compared == len(before)
    assert {i.qid for i in report.items if i.agrees is False} == chosen
    assert report.disagreements == 2 and report.rate == pytest.approx(2 / len(before), abs=1e-4)
    low, high = stats.wilson_interval(2, len(before))
    assert report.rate_ci == [round(low, 4), round(high, 4)]
    assert report.exit_code == 0  # the lower bound is below the default 0.1
    reverifies = [e for e in run.read().events if e["kind"] == "reverify"]
    assert len(reverifies) == len(before)
    after = run.view().latest("score").values()
    assert sorted(e["event_id"] for e in after) == sorted(e["event_id"] for e in live)
    for e in reverifies:
        score_ = next(s for s in before if s["qid"] == e["qid"])
        assert e["score_event_id"] == score_["event_id"] and e["attempt_event_id"]
        assert e["agrees"] is (e["qid"] not in chosen)
    # a lower bound above the allowed rate is the finding (exit 1)
    strict = reverify(run, es, provider=make_provider(f"hand:{hand}", role="judge", set_dir=None),
                      sample=100, seed=11, max_disagreement=0.0)
    assert strict.rate_ci[0] > 0 and strict.exit_code == 1


def test_reverify_draws_the_same_sample_for_the_same_seed(tmp_path):
    run = _settled_run(tmp_path, [("match", "match")] * 8)
    keys = list(run.view().latest("score"))
    from malloy_evals.workflow.reverify import draw_sample
    assert draw_sample(keys, 3, 5) == draw_sample(list(reversed(keys)), 3, 5)
    assert len(draw_sample(keys, 30, 5)) == 8


def test_reverify_needs_a_sample_and_refuses_host_for_regressions(tmp_path):
    out = run_outcome(CHECK_JUDGE, ["--set", "evals/bookshop", "--reverify", "evals/bookshop/runs/baseline",
                                    "--judge", "replay"])
    assert out.code == 2 and "--sample" in out.err
    out = run_outcome(CHECK_JUDGE, ["--set", "evals/bookshop", "--judge", "host", "--emit"])
    assert out.code == 2 and "--reverify" in out.err


# --------------------------------------------------------------------------- judge samples


REFUSAL = "I cannot say: the model does not make revenue clear."


@pytest.fixture
def refusal_world(tmp_path):
    """q_rev (a scalar golden) answered by a refusal: where the judge is known unstable."""
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": REFUSAL}])
    return run, load_set(set_dir)


def _score(run, es, provider, **kw):
    return score_attempt(run, es, "q_rev", None, provider=provider, reexecute=False, **kw)


def test_a_refusal_against_a_value_asks_the_judge_three_times_and_a_split_is_unstable(refusal_world):
    run, es = refusal_world
    provider = FakeProvider([verdict("no_match", 9, "refuses"), verdict("match", 8, "fine"),
                             verdict("no_match", 9, "refuses")])
    result = _score(run, es, provider)
    assert [r.key for r in provider.requests] == ["r1.q_rev._.s1", "r1.q_rev._.s2", "r1.q_rev._.s3"]
    assert len({r.digest(model="m") for r in provider.requests}) == 1  # the same packet each time
    assert result.verdict == "needs_human"
    assert result.reason == "judge_unstable: 2 no_match / 1 match"
    assert result.event["judge_samples"] == ["no_match", "match", "no_match"]
    assert "judge_unstable" in result.event["why"]


def test_unanimous_samples_give_the_verdict_and_record_every_sample(refusal_world):
    run, es = refusal_world
    result = _score(run, es, FakeProvider([verdict("no_match", 9, "refuses")] * 3))
    assert (result.verdict, result.reason) == ("no_match", None)
    assert result.event["judge_samples"] == ["no_match"] * 3


def test_an_answer_with_a_query_is_judged_once_unless_asked(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "answer_text": "1,234.50",
                                        "final_query": "run: order_items -> { aggregate: revenue }"}])
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    once = FakeProvider([verdict()])
    result = _score(run, load_set(set_dir), once, append=False)
    assert [r.key for r in once.requests] == ["r1.q_rev._"] and result.event["judge_samples"] is None
    twice = FakeProvider([verdict(), verdict()])
    result = _score(run, load_set(set_dir), twice, append=False, judge_samples=2)
    assert len(twice.requests) == 2 and result.event["judge_samples"] == ["match", "match"]


def test_recordings_hold_every_sample_and_replay_is_exact(tmp_path):
    set_dir = make_set(tmp_path / "a")
    run = make_run(tmp_path / "a", set_dir, [{"qid": "q_rev", "answer_text": REFUSAL}])
    es = load_set(set_dir)
    hand = tmp_path / "hand.jsonl"
    hand.write_text("\n".join(json.dumps({"key": f"r1.q_rev._.s{i}", "replies": [verdict(v, 9, w)]})
                              for i, (v, w) in enumerate([("no_match", "a"), ("match", "b"),
                                                          ("no_match", "c")], 1)) + "\n")
    rec = tmp_path / "rec"
    recorded = _score(run, es, make_provider(f"hand:{hand}", role="judge", set_dir=None,
                                             record_dir=rec))
    assert sorted(p.name for p in rec.glob("*.json")) == [f"r1.q_rev._.s{i}.json" for i in (1, 2, 3)]
    again = make_run(tmp_path / "b", set_dir, [{"qid": "q_rev", "answer_text": REFUSAL}])
    replayed = _score(again, es, make_provider(f"replay:{rec}", role="judge", set_dir=None))
    fields = ("verdict", "reason", "why", "judge_samples", "confidence")
    assert [replayed.event[f] for f in fields] == [recorded.event[f] for f in fields]
    assert replayed.reason == "judge_unstable: 2 no_match / 1 match"


def test_host_emit_writes_one_request_per_sample_and_ingest_waits_for_all(refusal_world):
    run, es = refusal_world
    emit = make_provider("host", role="judge", set_dir=None, host_mode="emit", host_dir=run.dir)
    assert _score(run, es, emit).status == "emitted"
    folder = run.artifact_dir("q_rev", None) / "judge"
    keys = [json.loads((folder / f"s{i}" / "request.json").read_text())["key"] for i in (1, 2, 3)]
    assert keys == ["r1.q_rev._.s1", "r1.q_rev._.s2", "r1.q_rev._.s3"]
    ingest = make_provider("host", role="judge", set_dir=None, host_mode="ingest", host_dir=run.dir)
    for i in (1, 2):
        (folder / f"s{i}" / "reply.json").write_text(json.dumps(verdict("no_match", 9, "refuses")))
    waiting = _score(run, es, ingest)
    assert waiting.status == "pending" and waiting.exit_code == 3
    assert [e for e in run.read().events if e["kind"] == "score"] == []
    (folder / "s3" / "reply.json").write_text(json.dumps(verdict("no_match", 9, "refuses")))
    done = _score(run, es, make_provider("host", role="judge", set_dir=None, host_mode="ingest",
                                         host_dir=run.dir))
    assert (done.status, done.verdict) == ("scored", "no_match")
    assert done.event["judge_samples"] == ["no_match"] * 3


# --------------------------------------------------------------------------- k answerer samples


def _row(qid: str, sample: int, verdict_: str) -> CaseRow:
    values = dict.fromkeys(CaseRow.__dataclass_fields__)
    values.update(qid=qid, sample=sample, verdict=verdict_, scored=True,
                  counted=verdict_ in ("match", "no_match"), must_not_use_hits=[],
                  n_get_context=0, n_execute=0)
    return CaseRow(**values)


def test_pass_at_k_and_pass_hat_k_for_three_samples_match_the_hand_computed_figures():
    outcomes = {"a": ["match"] * 3, "b": ["match", "match", "no_match"],
                "c": ["no_match"] * 3, "d": ["no_match", "match", "no_match"]}
    rows = [_row(q, i, v) for q, vs in outcomes.items() for i, v in enumerate(vs)]
    s = sample_summary(rows)
    assert s["k"] == 3 and s["cases"] == 4
    assert s["pass_at_1"] == pytest.approx((1 + 2 / 3 + 0 + 1 / 3) / 4, abs=1e-4)   # 0.5
    assert s["pass_at_k"] == 0.75 and s["pass_hat_k"] == 0.25 and s["majority"] == 0.5
    # Wilson by hand for 3/4: centre (0.75 + z^2/8) / (1 + z^2/4), half-width as in the formula
    z2 = Z * Z
    centre = (0.75 + z2 / 8) / (1 + z2 / 4)
    half = Z / (1 + z2 / 4) * math.sqrt(0.75 * 0.25 / 4 + z2 / 64)
    assert s["pass_at_k_ci"] == [round(centre - half, 4), round(centre + half, 4)]
    low, high = s["pass_at_1_ci"]
    assert low < 0.5 < high
    assert [c["fraction"] for c in s["per_case"]] == [1.0, 0.6667, 0.0, 0.3333]
    assert stats.pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)       # 1 - C(3,3)/C(5,3)
    assert stats.pass_hat_k(5, 4, 3) == pytest.approx(4 / 10)           # C(4,3)/C(5,3)


def test_a_run_answered_once_per_case_has_no_k_figures():
    assert sample_summary([_row("a", 0, "match"), _row("b", 0, "no_match")]) is None


def test_the_sign_flip_test_is_exact_for_few_cases():
    # 3 cases all moved up by 1/3: 2 of the 8 sign patterns reach |mean| 1/3 -> p = 0.25
    assert stats.sign_flip_p([1 / 3, 1 / 3, 1 / 3]) == pytest.approx(0.25)
    assert stats.sign_flip_p([0.0, 0.0]) == 1.0


# --------------------------------------------------------------------------- doctrine decisions


def test_the_doctrine_states_each_decision():
    text = load_doctrine().text
    assert "the rubric clause\n  wins" in text or "the rubric clause wins" in " ".join(text.split())
    flat = " ".join(text.split())
    assert "No rubric clause excuses a wrong value." in flat
    assert "say in `why` that you overrode the clause" in flat
    assert "reached only through an output column is no veto by itself" in flat


# A view that outputs two measures, one of them built on a forbidden field; views that use the
# field in a filter or a grouping; a measure reporting it in its own expression.
LINEAGE = Definitions(
    sources={"orders": {
        "late_total": ("amount", "is_late"), "total": ("amount",),
        "is_late": ("shipped_at", "order_date"), "ship_bucket": ("is_late",),
        "both": ("late_total", "total"),
        "late_only": ("total", "is_late"),
        "by_bucket": ("ship_bucket", "total")}},
    measures={"orders": frozenset({"late_total", "total"})})


def test_a_forbidden_field_reached_only_through_an_unreported_output_is_a_note():
    r = check_must_not_use("run: orders -> both", ["shipped_at"], definitions=LINEAGE,
                           outputs=["late_total", "total"])
    assert r.hits == ["shipped_at"] and r.through_outputs == {"shipped_at": "late_total"}
    assert r.vetoes(["total"]) == []
    assert r.lineage_notes(["total"]) == ["shipped_at (through output column late_total)"]
    assert r.vetoes(["late_total"]) == ["shipped_at"]    # the reported column's own expression
    assert r.vetoes([]) == ["shipped_at"]                # no golden columns: every column counts
    assert "late_total" in r.judge_note


@pytest.mark.parametrize("query, outputs", [
    ("run: orders -> late_only", ["total"]),                  # in a filter
    ("run: orders -> by_bucket", ["ship_bucket", "total"]),   # in a grouping
    ("run: orders -> { aggregate: late_total, total }", ["late_total", "total"]),  # its own text
])
def test_a_forbidden_field_in_a_filter_a_grouping_or_the_querys_text_stays_a_veto(query, outputs):
    r = check_must_not_use(query, ["shipped_at"], definitions=LINEAGE, outputs=outputs)
    assert r.hits == ["shipped_at"] and r.through_outputs == {}
    assert r.vetoes(["total"]) == ["shipped_at"]


def _lineage_decision(tmp_path, pairing):
    cases = [{"qid": "q_sales", "question": "Total sales?", "goldenRevision": 1,
              "golden": {"status": "verified", "kind": "scalar", "value": {"total": 30.5},
                         "mustNotUse": ["shipped_at"]}}]
    es = load_set(make_set(tmp_path, cases))
    sub = Submission(answer_text="Total sales are 30.50.", final_query="run: orders -> both",
                     queries=[], prediction=PredictionView(rows=[{"late_total": 10.5, "total": 30.5}],
                                                           row_count=1))
    reply = verdict("match", 9, "total pairs with total")
    reply["column_pairing"] = pairing
    return decision.evaluate(es, es.case("q_sales"), sub, provider=FakeProvider([reply]), key="k",
                             definitions=LINEAGE)


def test_the_scored_veto_follows_what_the_answer_reported(tmp_path):
    kept = _lineage_decision(tmp_path / "a", [{"gold": "total", "prediction": "total"}])
    assert (kept.verdict, kept.must_not_use_hits) == ("match", [])
    assert kept.must_not_use_notes == ["shipped_at (through output column late_total)"]
    vetoed = _lineage_decision(tmp_path / "b", [{"gold": "total", "prediction": "late_total"}])
    assert (vetoed.verdict, vetoed.judge_verdict, vetoed.must_not_use_hits) == (
        "no_match", "match", ["shipped_at"])


def test_a_near_match_stable_across_arms_goes_to_diagnosis_not_the_queue(tmp_path):
    set_dir = make_set(tmp_path)
    runs = []
    for name, genre_verdict in (("base", "near_match"), ("other", "near_match"), ("third", "match")):
        run = Run.create(tmp_path / name, load_set(set_dir), "x", phase="baseline", run_id=name)
        run.append([{"kind": "attempt", "qid": q, "sample": None, "submitted": True,
                     "answer_text": "a", "final_query": None, "contaminated": False}
                    for q in ("q_genre", "q_rev")])
        run.append([tied(run.dir, {"kind": "score", "qid": "q_genre", "sample": None,
                                   "verdict": genre_verdict, "confidence": 8, "why": "DIVERGENT"}),
                    tied(run.dir, {"kind": "score", "qid": "q_rev", "sample": None,
                                   "verdict": "near_match", "confidence": 8, "why": "DIVERGENT"})])
        runs.append(run)
    # q_rev is near_match in every arm; q_genre is not in the third
    queue = review.review_queue(RunOutputs.load(runs[0].dir, set_dir),
                                arms=[runs[1].dir, runs[2].dir])
    assert [i.qid for i in queue.items] == ["q_genre"]
    assert [r["qid"] for r in queue.to_diagnosis] == ["q_rev"]
    assert "--verdicts near_match --only q_rev" in queue.diagnose_command
    alone = review.review_queue(RunOutputs.load(runs[0].dir, set_dir))
    assert sorted(i.qid for i in alone.items) == ["q_genre", "q_rev"] and not alone.to_diagnosis
