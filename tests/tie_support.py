"""Verdict events as the kit writes them, for tests that build ledgers by hand: bound to the live
attempt they judge, and (for a judge's verdict) backed by a request and a reply artifact written
into the run with their digests (ledger/ties.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from malloy_evals.ledger.events import sample_segment


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def attempt_id(run_dir: Path, qid: str, sample: int | None = None) -> str | None:
    """The event id of the latest attempt of (qid, sample) in the run's ledger, voids applied."""
    from malloy_evals.ledger.live import LiveView
    view = LiveView.read(Path(run_dir) / "events.jsonl")
    for key, event in view.latest("attempt").items():
        if key.qid == qid and key.sample == sample:
            return event["event_id"]
    return None


def tied(run_dir: str | Path, event: dict[str, Any], attempt_event_id: str | None = None
         ) -> dict[str, Any]:
    """`event` (a score, human_verdict or retrieval_score) tied to its attempt: the attempt's id
    filled in (the live one unless given) and, for a score with a verdict or a human_verdict, the
    artifacts it rests on written into the run with their digests. Returns the event."""
    run_dir = Path(run_dir)
    qid, sample = event["qid"], event.get("sample")
    event.setdefault("attempt_event_id", attempt_event_id or attempt_id(run_dir, qid, sample))
    base = run_dir / "artifacts" / qid / sample_segment(sample)
    kind = event.get("kind")
    if kind == "score" and event.get("verdict") is not None and not event.get("reply_sha"):
        n = 1
        while (base / ("judge" if n == 1 else f"judge.{n}")).exists():
            n += 1
        folder = base / ("judge" if n == 1 else f"judge.{n}")
        folder.mkdir(parents=True)
        (folder / "request.json").write_text(json.dumps({"key": f"{qid}.{n}"}) + "\n")
        (folder / "replies.json").write_text(json.dumps([{"data": {
            "verdict": event["verdict"]}, "n": n}]) + "\n")
        rel = folder.relative_to(run_dir).as_posix()
        event.update(judge_artifact=rel, request_sha=_sha(folder / "request.json"),
                     reply_artifact=f"{rel}/replies.json",
                     reply_sha=_sha(folder / "replies.json"), reply_origin="hand")
    if kind == "human_verdict" and not event.get("fixture_sha"):
        folder = base / "human"
        folder.mkdir(parents=True, exist_ok=True)
        n = len(list(folder.glob("fixture*.json"))) + 1
        path = folder / ("fixture.json" if n == 1 else f"fixture.{n}.json")
        path.write_text(json.dumps({"fixtureId": event.get("fixture_id"), "qid": qid,
                                    "verdict": event.get("verdict")}) + "\n")
        event.update(fixture_path=path.relative_to(run_dir).as_posix(), fixture_sha=_sha(path))
    return event


def two_case_run(root: Path, *, coverage: str | None = None) -> tuple[Any, Any]:
    """A two-case set under `root` ("How many orders?", "Which genre sells most?"; golden
    revisions 1 and 2, each case's `coverage` when given) and a run holding one submitted attempt
    per case. Returns (run, loaded set)."""
    from malloy_evals.ledger.run import Run
    from malloy_evals.sets.eval_set import load_set
    set_dir = root / "tiny"
    set_dir.mkdir()
    (set_dir / "set.json").write_text(json.dumps({
        "name": "tiny", "datasetVersion": 1, "targetPackage": "tiny",
        "targetModelPath": "tiny.malloy"}))
    cases = [
        {"qid": "q1", "question": "How many orders?", "goldenRevision": 1,
         "golden": {"kind": "scalar", "value": {"n": 3}}},
        {"qid": "q2", "question": "Which genre sells most?", "goldenRevision": 2,
         "golden": {"kind": "rows", "value": [{"genre": "a"}]}},
    ]
    for case in cases:
        if coverage is not None:
            case["coverage"] = coverage
    (set_dir / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    run = Run.create(root / "run", set_dir, "test-answerer", run_id="tiny-baseline-1")
    run.append([{"kind": "attempt", "qid": q, "sample": None, "submitted": True,
                 "final_query": "run: orders -> {aggregate: n is count()}",
                 "answer_text": "3"} for q in ("q1", "q2")])
    return run, load_set(set_dir)
