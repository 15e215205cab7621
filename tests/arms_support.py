"""Builders for comparison tests: a small set and scored run folders written through the ledger,
so a comparison reads them exactly as it reads a real run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import load_set, question_sha
from tie_support import tied

PINS = {"judge_version": 2, "rubric_sha": "a" * 64, "judge_prompt_sha": "b" * 64,
        "judge_model": "hand-authored"}


def make_set(root: Path, qids: list[str], *, name: str = "shop",
             revisions: dict[str, int] | None = None,
             golden_status: dict[str, str] | None = None) -> Path:
    """A set folder with one scalar case per qid."""
    d = root / f"set-{name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "set.json").write_text(json.dumps({"name": name, "datasetVersion": 1,
                                            "targetPackage": "shop",
                                            "targetModelPath": "shop.malloy"}))
    lines = []
    for q in qids:
        golden: dict[str, Any] = {"kind": "scalar", "value": {"n": 1}}
        if golden_status and q in golden_status:
            golden["status"] = golden_status[q]
        lines.append(json.dumps({"qid": q, "question": f"What is {q}?",
                                 "goldenRevision": (revisions or {}).get(q, 1),
                                 "golden": golden}))
    (d / "cases.jsonl").write_text("\n".join(lines) + "\n")
    return d


def _score(verdict: Any) -> dict[str, Any]:
    """`match`, `no_match`, `near_match`, `needs_human`, or ("null", reason)."""
    if isinstance(verdict, tuple):
        return {"verdict": None, "reason": verdict[1]}
    return {"verdict": verdict}


def make_run(root: Path, set_dir: Path, run_id: str, outcomes: dict[str, Any], *,
             pins: dict[str, Any] | None = None, revisions: dict[str, int] | None = None,
             questions: dict[str, str] | None = None, contaminated: tuple[str, ...] = (),
             truncated: tuple[str, ...] = (), unscored: tuple[str, ...] = (),
             answerer: str = "answerer-x", model_sha: str | None = None,
             void_first: tuple[str, ...] = (), voided: tuple[str, ...] = ()) -> Path:
    """A run folder whose attempts end with the given verdicts.

    `outcomes[qid]` is one verdict (sample null) or a list of verdicts (samples 0..k-1).
    `void_first` qids get a first score of the opposite verdict that is then voided; `voided`
    qids get their score and then a void of it, so a reader that applies voids sees them unscored.
    """
    es = load_set(set_dir)
    run = Run.create(root / run_id, es, answerer, run_id=run_id)
    if model_sha:
        run.update_info(modelSha=model_sha)
    for qid, verdicts in outcomes.items():
        samples = list(enumerate(verdicts)) if isinstance(verdicts, list) else [(None, verdicts)]
        for sample, verdict in samples:
            attempt = {"kind": "attempt", "qid": qid, "sample": sample, "submitted": True,
                       "final_query": "run: t -> { aggregate: n }", "answer_text": "n is 1",
                       "question_sha": (questions or {}).get(qid)
                       or question_sha(f"What is {qid}?"),
                       "truncated": qid in truncated, "contaminated": qid in contaminated}
            att = run.append_event(attempt)
            if qid in unscored:
                continue
            score = {"kind": "score", "qid": qid, "sample": sample, **(pins or PINS),
                     "golden_revision": (revisions or {}).get(qid, 1), **_score(verdict)}
            if qid in void_first:
                wrong = {**score, "verdict": "no_match" if verdict == "match" else "match",
                         "reason": None}
                first = run.append_event(tied(run.dir, wrong, att["event_id"]))
                run.void(first["event_id"], "re-scored")
            written = run.append_event(tied(run.dir, score, att["event_id"]))
            if qid in voided:
                run.void(written["event_id"], "retracted")
    return run.dir
