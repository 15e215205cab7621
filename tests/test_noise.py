"""The noise band: flips between runs of one arm, written to the file --out names and read back,
refused when the runs are not one arm."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from arms_support import PINS, make_run, make_set
from conftest import KIT_ROOT
from fuzz_support import FUZZ, damaged_bytes, mutated, reads_or_refuses
from hypothesis import given
from hypothesis import strategies as st
from malloy_evals.core import schemas
from malloy_evals.core.errors import InputError, UsageError
from malloy_evals.report.noise import band_differences, measure_noise, read_band

SCRIPT = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "measure_noise.py"
QIDS = ["a", "b", "c", "d", "e", "f"]


@pytest.fixture
def aa(tmp_path):
    """Three sessions of one arm: r2 differs from r1 in a, b (flips) and c (a move into
    neither); r3 differs from r1 in d (a flip) only."""
    s = make_set(tmp_path, QIDS)
    one = {"a": "match", "b": "no_match", "c": "match", "d": "match", "e": "no_match",
           "f": ("null", "not_submitted")}
    r1 = make_run(tmp_path, s, "r1", one)
    r2 = make_run(tmp_path, s, "r2", {**one, "a": "no_match", "b": "match", "c": "near_match"})
    r3 = make_run(tmp_path, s, "r3", {**one, "d": "no_match"})
    return s, [r1, r2, r3]


def test_band_counts_flips_per_pair_and_keeps_the_largest(aa, tmp_path):
    s, runs = aa
    out = tmp_path / "bands" / "band.json"
    result = measure_noise(runs, s, out)
    band = result.band
    assert result.exit_code == 0 and not result.refused
    # r1-r2: a, b flip (c only moves into neither); r1-r3: d; r2-r3: a, b, d.
    assert [(p.runs, p.flips, p.flipped) for p in band.pairs] == [
        (["r1", "r2"], 2, ["a", "b"]), (["r1", "r3"], 1, ["d"]), (["r2", "r3"], 3, ["a", "b", "d"])]
    assert (band.max_flips, band.mean_flips) == (3, 2.0)  # (2 + 1 + 3) / 3
    # Cases decided in both runs: r1-r2 a, b, d, e (c is neither in r2; f is null) -> 4.
    assert band.cases == 4
    assert band.judge == PINS
    assert [r["run_id"] for r in band.runs] == ["r1", "r2", "r3"]


def test_band_file_is_written_where_out_says_and_reads_back(aa, tmp_path):
    s, runs = aa
    out = tmp_path / "band.json"
    written = measure_noise(runs[:2], s, out).band
    doc = json.loads(out.read_text())
    assert schemas.validate("noise_band", doc) == []
    assert doc["band"] == {"max_flips": 2, "mean_flips": 2.0}
    back = read_band(out)
    assert (back.max_flips, back.mean_flips, back.cases, back.judge, back.set_name) == (
        written.max_flips, written.mean_flips, written.cases, written.judge, "shop")
    assert back.path == str(out)
    assert sorted(p.name for p in s.iterdir()) == ["cases.jsonl", "set.json"]  # never the set


# Regression (hostile input, writes through links): the band file planted as a link was written
# through.
def test_band_file_replaces_a_link_planted_in_its_place(aa, tmp_path):
    s, runs = aa
    target = tmp_path / "elsewhere.json"
    target.write_text("theirs")
    out = tmp_path / "band.json"
    out.symlink_to(target)
    measure_noise(runs[:2], s, out)
    assert not out.is_symlink() and read_band(out).max_flips == 2
    assert target.read_text() == "theirs"


def test_runs_of_different_arms_are_refused_and_nothing_is_written(tmp_path):
    s = make_set(tmp_path, ["a"])
    r1 = make_run(tmp_path, s, "r1", {"a": "match"})
    r2 = make_run(tmp_path, s, "r2", {"a": "match"}, answerer="another-answerer")
    out = tmp_path / "band.json"
    result = measure_noise([r1, r2], s, out)
    assert result.refused and result.exit_code == 3 and result.band is None
    assert result.differences == [("answererModel differs between the runs (another-answerer, "
                                   "answerer-x): an A/A band needs runs of the same arm")]
    assert not out.exists()


def test_runs_with_another_judge_are_refused(tmp_path):
    s = make_set(tmp_path, ["a"])
    r1 = make_run(tmp_path, s, "r1", {"a": "match"})
    r2 = make_run(tmp_path, s, "r2", {"a": "match"}, pins={**PINS, "judge_version": 3})
    result = measure_noise([r1, r2], s, tmp_path / "band.json")
    assert result.refused and "judge_version: 2 vs 3" in result.differences


def test_runs_over_different_cases_need_only_common_cases(tmp_path):
    s = make_set(tmp_path, ["a", "b"])
    r1 = make_run(tmp_path, s, "r1", {"a": "match", "b": "match"})
    r2 = make_run(tmp_path, s, "r2", {"a": "no_match"})
    assert measure_noise([r1, r2], s, tmp_path / "x.json").refused
    band = measure_noise([r1, r2], s, tmp_path / "y.json", only_common_cases=True).band
    assert (band.max_flips, band.cases, band.only_common_cases) == (1, 1, True)


def test_one_run_or_the_same_run_twice_is_a_usage_error(aa, tmp_path):
    s, runs = aa
    with pytest.raises(UsageError):
        measure_noise(runs[:1], s, tmp_path / "band.json")
    with pytest.raises(UsageError):
        measure_noise([runs[0], runs[0]], s, tmp_path / "band.json")


@pytest.mark.parametrize("text", ["not json", json.dumps({"band": 3})])
def test_a_file_that_is_not_a_band_is_an_input_error(tmp_path, text):
    path = tmp_path / "band.json"
    path.write_text(text)
    with pytest.raises(InputError, match="band"):
        read_band(path)


def test_band_of_another_set_or_judge_is_a_difference(aa, tmp_path):
    s, runs = aa
    band = measure_noise(runs[:2], s, tmp_path / "band.json").band
    assert [d.kind for d in band_differences(band, "other", {})] == ["set"]
    found = band_differences(band, "shop", {"judge_model": ["claude-x"]})
    assert [(d.kind, d.text) for d in found] == [
        ("judge", "noise band: judge_model hand-authored when measured, claude-x here")]
    assert band_differences(band, "shop", {k: [v] for k, v in PINS.items()}) == []


def _script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=KIT_ROOT,
                          check=False, capture_output=True, text=True, timeout=600)


def test_script_writes_the_band_and_prints_one_json_document(aa, tmp_path):
    s, runs = aa
    out = tmp_path / "band.json"
    proc = _script("--runs", *runs[:2], "--set", s, "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["band"]["band"]["max_flips"] == 2 and doc["out"] == str(out)
    assert json.loads(out.read_text())["pairs"][0]["flipped"] == ["a", "b"]


@pytest.mark.parametrize("args, code", [
    pytest.param(["--runs", "RUN1"], 2, id="one_run"),
    pytest.param(["--runs", "RUN1", "no/such/run"], 2, id="missing_folder"),
    pytest.param(["--runs", "RUN1", "SETDIR"], 3, id="folder_without_run_json"),
])
def test_script_exit_codes(aa, tmp_path, args, code):
    s, runs = aa
    argv = [str(runs[0]) if a == "RUN1" else str(s) if a == "SETDIR" else a for a in args]
    proc = _script(*argv, "--set", s, "--out", tmp_path / "band.json")
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr


# A band file is read back by compare_runs.py --band: mutated, it is read or refused in one line
# naming it (exit 3), never a traceback (hostile input, fuzzed).
@pytest.fixture
def good_band(aa, tmp_path):
    """The band two sessions of `aa` give, measured once per test: the strategies below draw from
    it, and a band measured anew per example (a new folder, a new time) would make hypothesis see
    its own data generation change between examples."""
    s, runs = aa
    good = tmp_path / "good.json"
    measure_noise(runs[:2], s, good)
    return json.loads(good.read_text())


@FUZZ
@given(data=st.data())
def test_a_mutated_band_file_is_read_or_refused_in_one_line(good_band, tmp_path_factory, data):
    d = tmp_path_factory.mktemp("band")
    raw = json.dumps(data.draw(mutated(good_band))).encode("utf-8", "backslashreplace")
    path = d / "band.json"
    path.write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    band = reads_or_refuses(lambda: read_band(path), path)
    if band is not None:
        band_differences(band, "shop", {k: [v] for k, v in PINS.items()})
