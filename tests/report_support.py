"""Runs built for the report pages' tests and benchmark, through the real ledger (every event is
validated on append) over the sample set's cases.

`hostile_run` holds one attempt whose every free-text field tries to break out of the page;
`generated_run` holds N realistic attempts (k samples per case), for the page-size benchmark.
"""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path
from typing import Any

from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import load_set
from tie_support import tied

KIT = Path(__file__).resolve().parents[1]
SAMPLE_SET = KIT / "evals" / "bookshop"

# Text that closes every element it might sit in, then runs script three ways, fetches an image
# from the network and from beside the page, and carries a secret.
HOSTILE = ('</pre></table></td></details><script>window.__pwned = 1; document.title = "pwned"'
           '</script><img src="https://attacker.example/x.png" onerror="window.__pwned = 2">'
           '<img src=x onerror="window.__pwned = 3"><a href="javascript:window.__pwned=4">go</a>'
           ' sk-ant-api03-abcdefghijklmnopqrstu')
SECRET = "sk-ant-api03-abcdefghijklmnopqrstu"


def _attempt(qid: str, sample: int | None, **fields: Any) -> dict[str, Any]:
    base = {"kind": "attempt", "qid": qid, "sample": sample, "submitted": True,
            "contaminated": False, "final_query": "run: orders -> {aggregate: n is count()}",
            "answer_text": "42", "final_query_source": "last_ok", "num_turns": 3,
            "cost_usd": 0.04, "wall_seconds": 12.5}
    base.update(fields)
    return base


def hostile_run(root: Path, set_dir: Path = SAMPLE_SET) -> Run:
    """One scored attempt of bk_total_revenue whose answer, query, tool calls, judge why, column
    names, rows and issue all carry `HOSTILE`."""
    run = Run.create(root / "hostile", set_dir, "test-answerer", run_id="hostile-1")
    qid = "bk_total_revenue"
    # A file whose name reads as a script URL: the ledger names it as the transcript and the
    # judge's folder, so the page links it, as a relative path and nothing else.
    (run.dir / "javascript:alert(1)").write_text("a file, not a script\n")
    rows = io.StringIO()
    csv.writer(rows).writerows([[HOSTILE, "revenue"], [HOSTILE, 90963.84]])
    prediction = run.write_artifact(qid, None, "prediction.csv", rows.getvalue())
    run.append([
        _attempt(qid, None, answer_text=HOSTILE, final_query=f"run: orders -> {{}} // {HOSTILE}",
                 transcript_path="javascript:alert(1)",
                 contamination_reasons=[HOSTILE], event_id="hostile-attempt"),
        {"kind": "tool_call", "qid": qid, "sample": None, "tool": "get_context",
         "call_index": 0, "targets": [f"any: {HOSTILE}"],
         "target_shapes": [{"type": "any", "has_text": True}],
         "ranked_summary": {"entity_ids": [f"measure:x:{HOSTILE}"], "hits": [],
                            "result_count": 1, "doc_tokens": []},
         "error": HOSTILE},
        {"kind": "tool_call", "qid": qid, "sample": None, "tool": "execute_query",
         "call_index": 1, "query": HOSTILE, "error": HOSTILE},
        tied(run.dir, {"kind": "score", "qid": qid, "sample": None, "verdict": "no_match",
                       "why": HOSTILE, "confidence": 8,
                       "column_pairing": {HOSTILE: None, "revenue": "revenue"},
                       "gold_status": "verified", "gold_note": HOSTILE,
                       "must_not_use_hits": [HOSTILE], "leaf_hits": [], "judge_model": HOSTILE,
                       "judge_version": 2, "prediction_path": run.relpath(prediction)},
             "hostile-attempt"),
        {"kind": "issue", "issue_id": "hostile-cluster", "qids": [qid],
         "primary_code": "WRONG-FIELD", "component": "construction", "owner": "agent-skill",
         "diagnosis": HOSTILE},
    ])
    return run


# ---------------------------------------------------------------------------------------------
# A realistic run of many attempts

_WORDS = ["revenue", "orders", "shipped", "pending", "customers", "region", "genre", "month",
          "total", "average", "price", "list", "unit", "quantity", "discount", "cancelled",
          "returned", "member", "channel", "the", "of", "and", "by", "for", "with", "from",
          "over", "in", "2024", "2025", "which", "is", "was"]
_ENTITIES = ["measure:order_items:revenue", "measure:order_items:gross_revenue",
             "dimension:orders:order_date", "dimension:orders:status",
             "dimension:orders:ship_date", "dimension:customers:region",
             "dimension:books:genre", "view:order_items:monthly_revenue",
             "view:order_items:by_genre", "source:order_items:order_items",
             "measure:order_items:units_sold", "dimension:order_items:unit_price",
             "measure:order_items:list_value", "query:order_items:top_customers"]
_VERDICTS = ("match", "match", "match", "no_match", "no_match", "near_match", "needs_human",
             None)


def _prose(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    return " ".join(words).capitalize() + "."


def generated_run(root: Path, attempts: int = 500, *, seed: int = 0,
                  set_dir: Path = SAMPLE_SET) -> Run:
    """`attempts` scored attempts over the set's cases (k samples each), with answers of 80-250
    words, 2-6 tool calls, a judge's why, a retrieval row and a prediction of 1-60 rows."""
    rng = random.Random(seed)
    eval_set = load_set(set_dir)
    qids = list(eval_set.cases)
    run = Run.create(root / "generated", set_dir, "claude-sonnet-4-5", run_id="generated-1")
    batch: list[dict[str, Any]] = []
    for i in range(attempts):
        qid, sample = qids[i % len(qids)], i // len(qids) + 1
        query = ("run: order_items -> {\n  where: orders.status = 'shipped' or orders.status = "
                 f"'pending'\n  group_by: {rng.choice(['genre', 'region', 'month'])}\n"
                 "  aggregate: revenue\n  order_by: revenue desc\n  limit: 10\n}")
        n_rows = rng.randint(1, 60)
        rows = "label,revenue\n" + "".join(f"row {r},{rng.uniform(10, 9999):.2f}\n"
                                           for r in range(n_rows))
        prediction = run.write_artifact(qid, sample, "prediction.csv", rows)
        run.write_artifact(qid, sample, "envelope.json", {"row_count": n_rows})
        verdict = rng.choice(_VERDICTS)
        aid = f"a{i}"
        batch.append(_attempt(qid, sample, answer_text=_prose(rng, rng.randint(80, 250)),
                              final_query=query, event_id=aid,
                              transcript_path=f"artifacts/{qid}/{sample}/transcript.jsonl"))
        for c in range(rng.randint(2, 6)):
            if c % 2 == 0:
                batch.append({"kind": "tool_call", "qid": qid, "sample": sample,
                              "tool": "get_context", "call_index": c,
                              "targets": [f"any: {_prose(rng, 3)}"],
                              "target_shapes": [{"type": "any", "has_text": True}],
                              "ranked_summary": {"entity_ids": rng.sample(_ENTITIES, 10),
                                                 "hits": [], "result_count": 10,
                                                 "doc_tokens": []}})
            else:
                batch.append({"kind": "tool_call", "qid": qid, "sample": sample,
                              "tool": "execute_query", "call_index": c, "query": query,
                              "error": None if rng.random() < 0.8 else
                              "Error during query execution: Unknown field 'revenu'"})
        batch.append({"kind": "score", "qid": qid, "sample": sample, "verdict": verdict,
                      "attempt_event_id": aid,
                      "reason": None if verdict else "judge_unparseable",
                      "why": _prose(rng, rng.randint(20, 50)),
                      "confidence": rng.randint(3, 10),
                      "column_pairing": {"label": "genre", "revenue": "revenue"},
                      "gold_status": "verified", "must_not_use_hits": [], "leaf_hits": [],
                      "judge_model": "claude-sonnet-4-5", "judge_version": 2,
                      "prediction_path": run.relpath(prediction), "judge_cost_usd": 0.012})
        tied(run.dir, batch[-1], aid)
        recall = rng.choice([0.0, 0.5, 1.0, 1.0])
        batch.append({"kind": "retrieval_score", "qid": qid, "sample": sample,
                      "attempt_event_id": aid, "verdict": verdict, "failed": verdict == "no_match",
                      "coverage": "MODELLED", "coverage_source": "measured", "recall": recall,
                      "precision": 0.3, "groups": 2, "delivery": {}, "missing": [],
                      "noise": [], "asked_kinds": ["any"],
                      "where_to_fix": "delivered, wrong" if verdict == "no_match" else None,
                      "owner": None, "component": None, "why": _prose(rng, 12)})
        if len(batch) > 400:
            run.append(batch)
            batch = []
    if batch:
        run.append(batch)
    return run


def write_json(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path
