"""The comparison: the verdict rule, the statistics over cases decided in both arms (checked by
hand), targets, the noise band decision, refusal, the outputs and the CI gate's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from arms_support import PINS, make_run, make_set
from conftest import KIT_ROOT
from malloy_evals.core import schemas
from malloy_evals.core.errors import InputError, UsageError
from malloy_evals.core.words import signed
from malloy_evals.report.compare import compare_runs, p_text, verdict_line
from malloy_evals.report.noise import measure_noise

SCRIPT = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "compare_runs.py"

# ------------------------------------------------------------------------ the verdict rule


def _line(low, high, fixed=2, broken=0, band=None, delta=None, targets=None, others=()):
    return verdict_line(delta_points=(low + high) / 2 if delta is None else delta,
                        delta_ci=[low, high], fixed=["f"] * fixed, broken=["b"] * broken,
                        mcnemar_p=0.5, band_max=band, targets=targets or {},
                        non_target_broken=list(others))


@pytest.mark.parametrize("kw, first_words", [
    pytest.param({"low": 3.1, "high": 21.9, "fixed": 6, "broken": 1, "band": 3},
                 "candidate better:", id="above_0_and_beyond_band"),
    pytest.param({"low": 3.1, "high": 21.9}, "candidate better:", id="above_0_no_band"),
    pytest.param({"low": 3.1, "high": 21.9, "fixed": 2, "broken": 1, "band": 3},
                 "no detectable difference:", id="above_0_but_within_band"),
    pytest.param({"low": -21.0, "high": -2.0, "fixed": 0, "broken": 5, "band": 2},
                 "candidate worse:", id="below_0_and_beyond_band"),
    pytest.param({"low": -21.0, "high": -2.0, "fixed": 0, "broken": 2}, "candidate worse:",
                 id="below_0_no_band"),
    pytest.param({"low": -5.0, "high": 20.0, "fixed": 9, "band": 1},
                 "no detectable difference:", id="interval_includes_0_though_beyond_band"),
])
def test_verdict_first_words_follow_the_rule(kw, first_words):
    assert _line(**kw).startswith(first_words)


def test_verdict_line_spells_the_figures_like_the_example():
    line = _line(3.1, 21.9, fixed=6, broken=1, band=3, delta=12.5,
                 targets={"q1": "fixed", "q2": "fixed"})
    assert line == ("candidate better: +12.5 points (95% CI +3.1 to +21.9), 6 fixed / 1 broken, "
                    "McNemar p=0.50, flips 7 > A/A band 3; targets 2/2 fixed")


def test_no_difference_says_how_far_the_estimate_moved_and_why_not_enough():
    line = _line(-7.1, 21.4, fixed=2, broken=1, band=3, delta=7.1)
    assert line.startswith("no detectable difference: +7.1 points (95% CI -7.1 to +21.4)")
    assert line.endswith("; not enough: the 95% CI includes 0 and two runs of the same arm "
                         "already differ by 3 flips")


def test_targeted_fix_that_broke_others_beyond_the_band_says_so_on_the_first_line():
    line = _line(-10.0, 10.0, fixed=1, broken=3, band=2, delta=0.0,
                 targets={"t": "fixed"}, others=["x", "y", "z"])
    assert line.endswith("; targets 1/1 fixed; BUT broke 3 other cases (x, y, z), beyond the "
                         "A/A band 2")


def test_number_formats():
    assert (signed(12.46), signed(-3.14), signed(-0.04)) == ("+12.5", "-3.1", "0.0")
    # Rounded half up, as a person expects 0.125 to read.
    assert (p_text(0.125), p_text(1.0), p_text(0.0039), p_text(0.0001)) == (
        "0.13", "1.00", "0.004", "<0.001")


# ------------------------------------------------------------------------ statistics by hand


QIDS = [f"q{i}" for i in range(8)]


@pytest.fixture
def ab(tmp_path):
    """Base: q0-q3 fail, q4-q7 pass. Candidate: q0-q2 fixed, q4 broken, q3 into neither, q7 into
    null. Decided in both: q0, q1, q2, q4, q5, q6 (6 cases)."""
    s = make_set(tmp_path, QIDS)
    base = {q: "no_match" for q in QIDS[:4]} | {q: "match" for q in QIDS[4:]}
    cand = {**base, "q0": "match", "q1": "match", "q2": "match", "q3": "near_match",
            "q4": "no_match", "q7": ("null", "judge_unparseable")}
    return s, make_run(tmp_path, s, "base", base), make_run(tmp_path, s, "cand", cand)


def test_statistics_over_cases_decided_in_both_arms(ab):
    s, base, cand = ab
    c = compare_runs([base], [cand], s, seed=7)
    assert (c.fixed, c.broken, c.cases_compared) == (["q0", "q1", "q2"], ["q4"], 6)
    # base passes q4, q5, q6 of the six: 3/6; candidate q0, q1, q2, q5, q6: 5/6.
    assert c.base_pass_rate == pytest.approx(3 / 6)
    assert c.candidate_pass_rate == pytest.approx(5 / 6)
    assert c.delta_points == pytest.approx(100 * (5 / 6 - 3 / 6))
    # McNemar over 3 fixed, 1 broken: 2 * (C(4,0) + C(4,1)) / 2^4 = 10 / 16.
    assert c.mcnemar_p == pytest.approx(10 / 16)
    assert [m["qid"] for m in c.moved] == ["q3", "q7"]
    assert [(m["base"], m["candidate"]) for m in c.moved] == [("fail", "neither"), ("pass", "null")]
    assert c.bootstrap_seed == 7


def test_interval_matches_the_enumerated_bootstrap_of_one_fix_in_four(tmp_path):
    # Differences [1, 0, 0, 0]: the resampled mean is K/4, K ~ Binomial(4, 1/4); the 2.5th
    # percentile is 0 (P(K=0) = 81/256) and the 97.5th is 3/4 (P(K=4) = 1/256 < 2.5% < P(K>=3)).
    s = make_set(tmp_path, ["a", "b", "c", "d"])
    base = make_run(tmp_path, s, "base", {"a": "no_match", "b": "match", "c": "match", "d": "no_match"})
    cand = make_run(tmp_path, s, "cand", {"a": "match", "b": "match", "c": "match", "d": "no_match"})
    c = compare_runs([base], [cand], s)
    assert c.delta_points == pytest.approx(25.0)
    assert c.delta_ci == [0.0, 75.0]
    assert c.verdict.startswith("no detectable difference: +25.0 points (95% CI 0.0 to +75.0)")


def test_same_seed_same_interval_other_seed_may_differ(ab):
    s, base, cand = ab
    first = compare_runs([base], [cand], s, seed=1, resamples=2000).delta_ci
    assert compare_runs([base], [cand], s, seed=1, resamples=2000).delta_ci == first


def test_k_samples_compare_pass_fractions(tmp_path):
    # a: base 1/3 -> candidate 2/3 (majority crossed: fixed); b: 3/3 -> 2/3 (moved, no flip).
    s = make_set(tmp_path, ["a", "b"])
    base = make_run(tmp_path, s, "base", {"a": ["match", "no_match", "no_match"],
                                          "b": ["match", "match", "match"]})
    cand = make_run(tmp_path, s, "cand", {"a": ["match", "match", "no_match"],
                                          "b": ["match", "no_match", "match"]})
    c = compare_runs([base], [cand], s)
    assert (c.fixed, c.broken, [m["qid"] for m in c.moved]) == (["a"], [], ["b"])
    assert c.base_pass_rate == pytest.approx((1 / 3 + 1) / 2)
    assert c.candidate_pass_rate == pytest.approx((2 / 3 + 2 / 3) / 2)
    assert c.delta_points == pytest.approx(0.0, abs=1e-9)
    assert c.base.samples_per_case == 3
    assert any("pass fractions" in h for h in c.headline)


def test_several_runs_in_one_arm_are_repeated_measurements(tmp_path):
    s = make_set(tmp_path, ["a"])
    b1 = make_run(tmp_path, s, "b1", {"a": "no_match"})
    b2 = make_run(tmp_path, s, "b2", {"a": "no_match"})
    c1 = make_run(tmp_path, s, "c1", {"a": "match"})
    c = compare_runs([b1, b2], [c1], s)
    assert c.rows[0].base.decided == 2 and c.fixed == ["a"]
    # The measure command names both base runs: they are the A/A pair to measure.
    assert "--runs " in c.measure_band_command and "b1" in c.measure_band_command
    assert "b2" in c.measure_band_command


# ------------------------------------------------------------------------ band and targets


def test_band_decides_beyond_and_targets_are_reported(ab, tmp_path):
    s, base, cand = ab
    # An A/A pair of the base arm with q5 flipped: a band of 1.
    aa = make_run(tmp_path, s, "base2", {q: "no_match" for q in QIDS[:4]}
                  | {q: "match" for q in QIDS[4:]} | {"q5": "no_match"})
    band = tmp_path / "band.json"
    assert measure_noise([base, aa], s, band).band.max_flips == 1
    c = compare_runs([base], [cand], s, band_path=band, targets=["q0", "q3"])
    assert (c.beyond_band, c.band.max_flips) == (True, 1)  # 4 flips > 1
    assert c.targets == {"q0": "fixed", "q3": "not fixed"}
    assert c.non_target_broken == ["q4"] and c.regression is False  # 1 is not beyond a band of 1
    assert "targets 1/2 fixed; broke 1 other case (q4), within the A/A band 1" in c.verdict


def test_without_band_it_says_not_measured_and_prints_the_command(ab):
    s, base, cand = ab
    c = compare_runs([base], [cand], s)
    assert c.band is None and c.beyond_band is None
    assert "noise band not measured" in c.verdict
    assert any(h.startswith("noise band not measured: measure it with .venv/bin/python "
                            "skills/eval-answer/scripts/measure_noise.py --runs ")
               for h in c.headline)


def test_target_not_in_the_set_is_an_input_error(ab):
    s, base, cand = ab
    with pytest.raises(InputError, match="nope"):
        compare_runs([base], [cand], s, targets=["nope"])


def test_the_same_run_in_both_arms_is_a_usage_error(ab):
    s, base, _ = ab
    with pytest.raises(UsageError):
        compare_runs([base], [base], s)


def test_band_measured_under_another_judge_is_refused_unless_allowed(ab, tmp_path):
    s, base, cand = ab
    other = tmp_path / "other"
    outcomes = {q: "match" for q in QIDS}
    pins = {**PINS, "judge_model": "claude-x"}
    r1 = make_run(other, s, "o1", outcomes, pins=pins)
    r2 = make_run(other, s, "o2", outcomes, pins=pins)
    band = tmp_path / "band.json"
    measure_noise([r1, r2], s, band)
    refused = compare_runs([base], [cand], s, band_path=band)
    assert not refused.comparable
    assert refused.differences == [
        "noise band: judge_model claude-x when measured, hand-authored here"]
    allowed = compare_runs([base], [cand], s, band_path=band, allow_different_judge=True)
    assert allowed.comparable and allowed.headline[0].startswith(
        "compared despite (allowed by --allow-different-judge): noise band: judge_model")


# ------------------------------------------------------------------------ refusal and headline


def test_refused_comparison_names_every_difference_and_computes_nothing(tmp_path):
    s = make_set(tmp_path, ["a", "b"])
    base = make_run(tmp_path, s, "base", {"a": "match", "b": "match"})
    cand = make_run(tmp_path, s, "cand", {"a": "match", "b": "no_match"}, revisions={"b": 2},
                    pins={**PINS, "judge_model": "claude-x"})
    c = compare_runs([base], [cand], s)
    assert not c.comparable and c.exit_code == 3
    assert c.differences == ["b: goldenRevision 1 vs 2", "judge_model: hand-authored vs claude-x"]
    assert c.verdict == "not comparable: b: goldenRevision 1 vs 2 (and 1 more)"
    assert (c.rows, c.delta_points, c.mcnemar_p) == ([], None, None)
    assert c.headline[-1] == "to compare anyway, say so: --allow-different-judge --only-common-cases"
    assert schemas.validate("compare", c.to_json()) == []


def test_allowed_differences_are_in_the_headline_of_every_output(tmp_path):
    s = make_set(tmp_path, ["a", "b"])
    base = make_run(tmp_path, s, "base", {"a": "match", "b": "match"})
    cand = make_run(tmp_path, s, "cand", {"a": "no_match", "b": "no_match"}, revisions={"b": 2})
    out = tmp_path / "out"
    c = compare_runs([base], [cand], s, only_common_cases=True, out_dir=out)
    assert c.comparable and c.dropped == {"b": "b: goldenRevision 1 vs 2"}
    assert [r.qid for r in c.rows] == ["a"]
    targeted = compare_runs([base], [cand], s, only_common_cases=True, targets=["b"])
    assert targeted.targets == {"b": "not fixed"}
    assert "target b: not compared (b: goldenRevision 1 vs 2)" in targeted.headline
    said = "compared despite (allowed by --only-common-cases): b: goldenRevision 1 vs 2"
    assert said in c.headline
    assert said in (out / "COMPARE.md").read_text()
    assert said in json.loads((out / "compare.json").read_text())["headline"]


def test_incomplete_arm_is_compared_over_clean_attempts_and_the_headline_says_so(tmp_path):
    s = make_set(tmp_path, ["a", "b", "c"])
    base = make_run(tmp_path, s, "base", {"a": "match", "b": "match", "c": "no_match"})
    cand = make_run(tmp_path, s, "cand", {"a": "match", "b": ("null", "contaminated"),
                                          "c": ("null", "answerer_truncated")},
                    contaminated=("b",), truncated=("c",))
    c = compare_runs([base], [cand], s)
    assert ("candidate: 2 of 3 attempts left out (1 contaminated: b; 1 truncated: c); compared "
            "over its clean attempts only") in c.headline
    assert c.cases_compared == 1 and c.fixed == c.broken == []


# ------------------------------------------------------------------------ outputs and the script


def test_outputs_hold_the_same_document_and_it_validates(ab, tmp_path):
    s, base, cand = ab
    out = tmp_path / "cmp"
    c = compare_runs([base], [cand], s, out_dir=out, targets=["q0"])
    doc = json.loads((out / "compare.json").read_text())
    assert doc == json.loads(json.dumps(c.to_json()))
    assert schemas.validate("compare", doc) == []
    required = {"verdict", "comparable", "differences", "cases_compared", "fixed", "broken",
                "moved", "base_pass_rate", "candidate_pass_rate", "delta_points", "delta_ci",
                "bootstrap_seed", "mcnemar_p", "band", "beyond_band", "targets", "cases"}
    assert required <= set(doc)
    md = (out / "COMPARE.md").read_text()
    assert md.splitlines()[2] == f"**{c.verdict}**"
    assert "| `q0` | fail | pass | fixed (target) |" in md


# Regression (hostile input, writes through links): COMPARE.md and compare.json planted as links
# to files elsewhere were written through.
def test_outputs_replace_links_planted_in_their_place(ab, tmp_path):
    s, base, cand = ab
    out, outside = tmp_path / "cmp", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    for name in ("COMPARE.md", "compare.json"):
        (outside / name).write_text("theirs")
        (out / name).symlink_to(outside / name)
    compare_runs([base], [cand], s, out_dir=out)
    assert not (out / "COMPARE.md").is_symlink() and not (out / "compare.json").is_symlink()
    assert json.loads((out / "compare.json").read_text())["cases_compared"] == 6
    assert {p.read_text() for p in outside.iterdir()} == {"theirs"}


def _script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=KIT_ROOT,
                          check=False, capture_output=True, text=True, timeout=600)


def test_script_prints_the_verdict_first_and_one_json_document(ab):
    s, base, cand = ab
    text = _script("--base", base, "--candidate", cand, "--set", s)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].startswith("no detectable difference: +33.3 points")
    doc = json.loads(_script("--base", base, "--candidate", cand, "--set", s, "--json").stdout)
    assert doc["fixed"] == ["q0", "q1", "q2"] and doc["exit_code"] == 0


@pytest.mark.parametrize("extra, band_max, code", [
    pytest.param([], None, 0, id="no_gate"),
    pytest.param(["--fail-on-regression"], None, 1, id="any_broken_without_band"),
    pytest.param(["--fail-on-regression"], 1, 0, id="broken_within_band"),
    pytest.param(["--fail-on-regression", "--targets", "q0"], 0, 1, id="broken_beyond_band"),
])
def test_ci_gate_exit_codes(ab, tmp_path, extra, band_max, code):
    s, base, cand = ab
    args = ["--base", base, "--candidate", cand, "--set", s, *extra]
    if band_max is not None:
        outcomes = {q: "no_match" for q in QIDS[:4]} | {q: "match" for q in QIDS[4:]}
        aa = make_run(tmp_path, s, "aa", outcomes | ({"q5": "no_match"} if band_max else {}))
        band = tmp_path / "band.json"
        assert measure_noise([base, aa], s, band).band.max_flips == band_max
        args += ["--band", band]
    proc = _script(*args)
    assert proc.returncode == code, proc.stdout + proc.stderr


def test_script_refusal_exits_3_and_names_the_difference(tmp_path):
    s = make_set(tmp_path, ["a"])
    base = make_run(tmp_path, s, "base", {"a": "match"})
    cand = make_run(tmp_path, s, "cand", {"a": "match"}, pins={**PINS, "judge_version": 3})
    proc = _script("--base", base, "--candidate", cand, "--set", s, "--json")
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["differences"] == ["judge_version: 2 vs 3"]
    assert "refused: not comparable: judge_version: 2 vs 3" in proc.stderr


@pytest.mark.parametrize("args", [
    pytest.param(["--base"], id="base_without_runs"),
    pytest.param(["--base", "BASE", "--candidate", "no/such/run"], id="missing_run_folder"),
    pytest.param(["--base", "BASE", "--candidate", "CAND", "--band", "no/such/band.json"],
                 id="missing_band_file"),
    pytest.param(["--base", "BASE", "--candidate", "CAND", "--seed", "-1"], id="negative_seed"),
    pytest.param(["--base", "BASE", "--candidate", "BASE"], id="same_run_in_both_arms"),
])
def test_script_usage_errors_exit_2(ab, args):
    s, base, cand = ab
    argv = [str(base) if a == "BASE" else str(cand) if a == "CAND" else a for a in args]
    proc = _script(*argv, "--set", s)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr


def test_script_run_folder_without_run_json_exits_3(ab):
    s, base, _ = ab
    proc = _script("--base", base, "--candidate", s, "--set", s)
    assert proc.returncode == 3 and "run.json" in proc.stderr
