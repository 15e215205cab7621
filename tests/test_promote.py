"""promote_golden: provisional -> verified only on evidence, one line rewritten, the rest kept."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from malloy_evals.core.errors import InputError
from malloy_evals.sets.eval_set import load_set
from malloy_evals.sets.promote import promote_golden
from set_support import bookshop_copy, case_line

KIT = Path(__file__).resolve().parents[1]
SCRIPT = KIT / "skills" / "eval-answer" / "scripts" / "promote_golden.py"
PROVISIONAL = "bk_member_revenue_share"  # the sample set's provisional scalar golden


@pytest.fixture
def bookshop(tmp_path):
    return bookshop_copy(tmp_path / "bookshop")


def set_value(set_dir: Path, qid: str, value: dict) -> None:
    lines = (set_dir / "cases.jsonl").read_text().splitlines()
    n, obj = case_line(set_dir, qid)
    obj["golden"]["value"] = value
    lines[n - 1] = json.dumps(obj)
    (set_dir / "cases.jsonl").write_text("\n".join(lines) + "\n")


def test_a_re_derived_golden_is_promoted_and_only_its_line_changes(bookshop, needs_node):
    before = (bookshop / "cases.jsonl").read_bytes().split(b"\n")
    n, old = case_line(bookshop, PROVISIONAL)
    report = promote_golden(bookshop, [PROVISIONAL], by="Dana", now=lambda: "2026-12-01T10:00:00Z")
    assert report.exit_code == 0 and report.promoted == [PROVISIONAL]
    after = (bookshop / "cases.jsonl").read_bytes().split(b"\n")
    assert [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b] == [n - 1]
    _, new = case_line(bookshop, PROVISIONAL)
    assert new["goldenRevision"] == old["goldenRevision"] + 1
    assert new["golden"]["status"] == "verified" and new["golden"]["verifiedAt"] == "2026-12-01T10:00:00Z"
    assert new["golden"]["verifiedBy"] == ("re-derived from truth package bookshop_truth by "
                                           "promote_golden.py (Dana)")
    assert {k: v for k, v in new["golden"].items() if k not in ("status", "verifiedBy", "verifiedAt")} \
        == {k: v for k, v in old["golden"].items() if k != "status"}
    assert load_set(bookshop).case(PROVISIONAL).golden_status == "verified"


def test_a_drifted_golden_is_refused_and_the_file_is_untouched(bookshop, needs_node):
    set_value(bookshop, PROVISIONAL, {"member_share": 0.99, "round": 2})
    before = (bookshop / "cases.jsonl").read_bytes()
    report = promote_golden(bookshop, [PROVISIONAL])
    [p] = report.promotions
    assert (p.outcome, report.exit_code) == ("refused", 1)
    assert p.detail.startswith("does not re-derive from the truth package: ")
    assert (bookshop / "cases.jsonl").read_bytes() == before


def test_criteria_and_unanswerable_goldens_need_a_persons_attestation(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "set.json").write_text(json.dumps({"name": "s", "datasetVersion": 1, "targetPackage": "p",
                                            "targetModelPath": "m.malloy"}))
    cases = [{"qid": "q_none", "question": "Frost losses?", "goldenRevision": 4,
              "golden": {"status": "provisional", "kind": "unanswerable", "value": None,
                         "canonicalQuery": None}},
             {"qid": "q_crit", "question": "Busiest?",
              "golden": {"status": "provisional", "kind": "criteria"}}]
    (d / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    refused = promote_golden(d, ["q_none"])
    assert (refused.promotions[0].outcome, refused.exit_code) == ("refused", 1)
    with pytest.raises(InputError, match="--attest needs --by NAME"):
        promote_golden(d, ["q_none"], attest=True)
    done = promote_golden(d, ["q_none", "q_crit"], attest=True, by="Dana Reyes",
                          now=lambda: "2026-12-01T10:00:00Z")
    assert done.promoted == ["q_none", "q_crit"]
    first, second = [json.loads(x) for x in (d / "cases.jsonl").read_text().splitlines()]
    assert (first["goldenRevision"], first["golden"]["verifiedBy"]) == (5, "attested by Dana Reyes")
    assert second["goldenRevision"] == 1  # no revision before: the first one
    assert first["golden"]["value"] is None and first["golden"]["canonicalQuery"] is None


# Regression (hostile input, writes through links): cases.jsonl planted as a link to a file
# elsewhere was rewritten through the link by a promotion.
def test_promotion_replaces_a_linked_cases_file_and_leaves_its_target_alone(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "set.json").write_text(json.dumps({"name": "s", "datasetVersion": 1, "targetPackage": "p",
                                            "targetModelPath": "m.malloy"}))
    target = tmp_path / "elsewhere.jsonl"
    target.write_text(json.dumps({"qid": "q_none", "question": "Frost losses?",
                                  "golden": {"status": "provisional", "kind": "unanswerable",
                                             "value": None, "canonicalQuery": None}}) + "\n")
    before = target.read_text()
    (d / "cases.jsonl").symlink_to(target)
    done = promote_golden(d, ["q_none"], attest=True, by="Dana Reyes")
    assert done.promoted == ["q_none"] and not (d / "cases.jsonl").is_symlink()
    assert json.loads((d / "cases.jsonl").read_text())["golden"]["status"] == "verified"
    assert target.read_text() == before


def test_attesting_a_value_golden_is_refused(bookshop):
    report = promote_golden(bookshop, [PROVISIONAL], attest=True, by="Dana")
    assert report.promotions[0].outcome == "refused" and "only by re-deriving" in report.promotions[0].detail


def test_without_a_truth_package_nothing_is_promoted_and_it_says_why(bookshop):
    shutil.rmtree(bookshop / "truth")
    report = promote_golden(bookshop, [PROVISIONAL])
    assert (report.promotions[0].outcome, report.exit_code) == ("error", 3)
    assert "no truth package folder" in report.promotions[0].detail


def test_an_unknown_qid_is_exit_3_naming_it(bookshop):
    with pytest.raises(InputError, match="no case with qid nope"):
        promote_golden(bookshop, ["nope"])


def test_already_verified_is_left_alone(bookshop):
    before = (bookshop / "cases.jsonl").read_bytes()
    report = promote_golden(bookshop, ["bk_total_revenue"])
    assert report.promotions[0].outcome == "already verified" and report.exit_code == 0
    assert (bookshop / "cases.jsonl").read_bytes() == before


@pytest.mark.parametrize("args, message", [
    ([], "name the cases with --qid, or give --all"),
    (["--qid", "x", "--all"], "name the cases with --qid, or give --all"),
    (["--qid", "x", "--attest"], "--attest needs --by NAME"),
    (["--all", "--attest", "--by", "A"], "one case at a time"),
])
def test_wrong_command_lines_exit_2(bookshop, args, message):
    done = subprocess.run([sys.executable, str(SCRIPT), "--set", str(bookshop), *args],
                          capture_output=True, text=True, cwd=KIT, check=False)
    assert done.returncode == 2 and message in done.stderr
