"""The demo end to end: `scripts/demo.py` scores the committed recorded runs against the committed
recordings (real Malloy re-execution, replayed judge and coverage reader) into a scratch folder,
and every attempt's verdict, the INCOMPLETE decision and the cascade come out as the set's author
intended (evals/bookshop/runs/EXPECTED.*, spelled out below)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import node_runtime_missing_reason

KIT = Path(__file__).resolve().parents[1]
DEMO = KIT / "scripts" / "demo.py"

# (qid, sample) -> (verdict, null reason). Filled from evals/bookshop/runs/EXPECTED.*
BASELINE_VERDICTS: dict[tuple[str, int | None], tuple[str | None, str | None]] = {}
LEAKY_VERDICTS: dict[tuple[str, int | None], tuple[str | None, str | None]] = {}
BASELINE_CASCADE: dict[str, int] = {}
LEAKY_INCOMPLETE = {"truncated": [], "contaminated": []}


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory) -> dict:
    """Run the demo once for the module; returns its stdout and both summary.json documents."""
    if node_runtime_missing_reason() is not None:
        return {}  # each test's needs_node fixture skips (or fails under CI) with the reason
    scratch = tmp_path_factory.mktemp("demo")
    proc = subprocess.run([sys.executable, str(DEMO), "--scratch", str(scratch), "--keep-going"],
                          cwd=KIT, check=False, capture_output=True, text=True, timeout=600)
    out = {"proc": proc, "scratch": scratch}
    for name in ("baseline", "leaky"):
        path = scratch / "runs" / name / "summary.json"
        out[name] = json.loads(path.read_text()) if path.is_file() else None
    return out


def _verdicts(doc: dict) -> dict[tuple[str, int | None], tuple[str | None, str | None]]:
    return {(c["qid"], c["sample"]): (c["verdict"], c["reason"]) for c in doc["cases"]}


def test_demo_exits_0_and_leaves_the_checkout_untouched(needs_node, demo_output):
    proc = demo_output["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "checkout untouched" in proc.stdout


def test_baseline_has_a_pass_rate_and_every_verdict_as_intended(needs_node, demo_output):
    doc = demo_output["baseline"]
    assert doc["status"] == "complete"
    assert doc["headline"].startswith("pass rate ")
    assert _verdicts(doc) == BASELINE_VERDICTS


def test_baseline_cascade_counts(needs_node, demo_output):
    assert demo_output["baseline"]["cascade"]["rungs"] == BASELINE_CASCADE


def test_leaky_is_incomplete_with_no_pass_rate(needs_node, demo_output):
    doc = demo_output["leaky"]
    assert doc["status"] == "incomplete"
    assert doc["pass_rate"] is None
    assert doc["headline"].startswith("INCOMPLETE")
    assert sorted(doc["incomplete"]["truncated"]) == LEAKY_INCOMPLETE["truncated"]
    assert sorted(doc["incomplete"]["contaminated"]) == LEAKY_INCOMPLETE["contaminated"]
    assert "--rescore" in doc["incomplete"]["commands"][-1]


def test_leaky_verdicts_as_intended(needs_node, demo_output):
    assert _verdicts(demo_output["leaky"]) == LEAKY_VERDICTS


def test_demo_prints_both_summaries(needs_node, demo_output):
    out = demo_output["proc"].stdout
    assert demo_output["baseline"]["headline"] in out
    assert demo_output["leaky"]["headline"] in out
