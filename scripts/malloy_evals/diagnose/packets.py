"""The evidence packet for one failed case (never another case's golden), and the behavioural controls."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from malloy_evals.checks.model_definitions import case_definitions
from malloy_evals.checks.must_not_use import Definitions, check_must_not_use
from malloy_evals.core.errors import InputError
from malloy_evals.diagnose.selection import (
    ANSWER_CHARS,
    GOLDEN_ROWS,
    RETURNED_IDS,
    Bucketed,
    Selection,
)
from malloy_evals.ledger.events import AttemptKey
from malloy_evals.ledger.live import LiveView
from malloy_evals.sets.eval_set import Case, EvalSet, golden_value


def _golden_block(case: Case, set_dir: Path) -> dict[str, Any]:
    """This case's golden, rows capped; never any other case's."""

    golden = case.golden or {}
    note: str | None
    try:
        value = golden_value(case, set_dir)
    except InputError as exc:
        value, note = None, f"golden rows unreadable: {exc}"
    else:
        note = None
    block: dict[str, Any] = {"kind": golden.get("kind"), "status": case.golden_status,
                             "canonicalQuery": golden.get("canonicalQuery"),
                             "rubric": golden.get("rubric"), "mustState": case.must_state,
                             "mustNotUse": case.must_not_use}
    if isinstance(value, list):
        block["rows"] = value[:GOLDEN_ROWS]
        block["row_count"] = len(value)
    else:
        block["value"] = value
    if note:
        block["note"] = note
    return block


def _must_not_use(case: Case, final_query: str | None, score: Mapping[str, Any],
                  definitions: Definitions | str | None = None) -> dict[str, Any]:
    """The veto as scored, plus a fresh check of the final query (expanded through the model's
    definitions when they were read: a hit inside a view comes with its path)."""
    out: dict[str, Any] = {"entries": case.must_not_use,
                           "hits": score.get("must_not_use_hits"),
                           "leaf_hits": score.get("leaf_hits")}
    if case.must_not_use:
        result = check_must_not_use(final_query, case.must_not_use, definitions=definitions,
                                    allowed_in=case.must_not_use_allowed_in)
        out.update({"hits": result.hits, "leaf_hits": result.leaf_hits,
                    "unchecked": result.unchecked, "judge_note": result.judge_note})
        if result.paths:
            out["paths"] = result.paths
        if result.allowed:
            out["allowed"] = result.allowed
    return out


def _attempt_block(view: LiveView, case: Case, b: Bucketed,
                   retrieval_row: Mapping[str, Any] | None,
                   definitions: Definitions | str | None = None) -> dict[str, Any]:
    attempt = view.attempt(b.key) or {}
    score = view.tied_score(b.key) or {}
    calls = view.tool_calls(b.key)
    gets, runs = [], []
    for c in calls:
        if c.get("tool") == "get_context":
            summary = c.get("ranked_summary") or {}
            gets.append({"call_index": c.get("call_index"), "targets": c.get("targets"),
                         "target_shapes": c.get("target_shapes"), "scopes": c.get("scopes"),
                         "returned_in_rank_order": (summary.get("entity_ids") or [])[:RETURNED_IDS]
                         if summary else None,
                         "result_count": summary.get("result_count") if summary else None,
                         "retrieval_mode": c.get("retrieval_mode"), "error": c.get("error")})
        elif c.get("tool") == "execute_query":
            runs.append({"call_index": c.get("call_index"), "query": c.get("query"),
                         "source_name": c.get("source_name"), "query_name": c.get("query_name"),
                         "givens": c.get("givens"), "error": c.get("error")})
    answer = attempt.get("answer_text") or ""
    retrieval = None
    if retrieval_row:
        retrieval = {k: retrieval_row.get(k) for k in (
            "recall", "missing", "delivery", "asked_kinds", "coverage", "coverage_source",
            "where_to_fix", "owner", "component", "why")}
    return {
        "sample": b.sample, "verdict": b.verdict,
        "answered_correctly": b.verdict == "match",
        "judge": {"why": score.get("why"), "confidence": score.get("confidence"),
                  "judge_verdict": score.get("judge_verdict"),
                  "gold_status": score.get("gold_status"), "gold_note": score.get("gold_note"),
                  "column_pairing": score.get("column_pairing")},
        "answer_text": answer[:ANSWER_CHARS] + ("…" if len(answer) > ANSWER_CHARS else ""),
        "final_query": attempt.get("final_query"),
        "final_query_source": attempt.get("final_query_source"),
        "queries_run": runs, "get_context_calls": gets,
        "counts": {k: attempt.get(k) for k in ("n_get_context", "n_execute", "n_execute_errors",
                                               "num_turns")},
        "truncated": attempt.get("truncated"), "run_error": attempt.get("run_error"),
        "must_not_use": _must_not_use(case, attempt.get("final_query"), score, definitions),
        "retrieval": retrieval,
    }


def build_packet(view: LiveView, eval_set: EvalSet, qid: str,
                 attempts: list[Bucketed], retrieval_rows: Mapping[AttemptKey, Mapping[str, Any]],
                 measured_coverage: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The evidence one diagnoser call sees for one case: its question, golden, coverage, and each
    selected attempt's answer, queries, get_context calls, judge why, retrieval row and veto."""
    case = eval_set.case(qid)
    definitions = case_definitions(eval_set, case)
    measured = (measured_coverage or {}).get(qid)
    if measured is None:
        # The run was scored against a coverage report: its rows carry the measured verdict, so
        # the packet is the same whether or not --coverage is passed again here.
        rows = [retrieval_rows.get(b.key) or {} for b in attempts]
        measured = next((r.get("coverage") for r in rows
                         if r.get("coverage_source") == "measured"), None)
    return {
        "qid": qid, "question": case.question, "tags": case.tags,
        "golden": _golden_block(case, eval_set.dir),
        "expectedEntities": case.expected_entities,
        "coverage": {"authored": case.coverage, "coverageNote": case.coverage_note,
                     "measured": measured},
        "attempts": [_attempt_block(view, case, b, retrieval_rows.get(b.key), definitions)
                     for b in attempts],
    }


def behaviour(view: LiveView, b: Bucketed) -> dict[str, Any]:
    """What an attempt did, for falsifying behavioural clusters: calls, bare targets, errors."""
    attempt = view.attempt(b.key) or {}
    gets = [c for c in view.tool_calls(b.key) if c.get("tool") == "get_context"]
    shapes = [s for c in gets for s in (c.get("target_shapes") or [])]
    return {"n_get_context": len(gets),
            "n_execute": attempt.get("n_execute"),
            "n_execute_errors": attempt.get("n_execute_errors"),
            "bare_targets": sum(1 for s in shapes if not s.get("has_text")) if shapes else None,
            "target_types": dict(Counter(str(s.get("type")) for s in shapes))}


def controls_block(view: LiveView, selection: Selection) -> dict[str, Any]:
    """Behaviour rates of failing versus passing attempts, and how far they can be trusted."""
    def rates(items: list[Bucketed]) -> dict[str, Any]:
        rows = [behaviour(view, b) for b in items]
        n = len(rows)
        if not n:
            return {"attempts": 0}

        def share(pred: Callable[[dict], bool]) -> float:
            return round(sum(1 for r in rows if pred(r)) / n, 3)
        return {"attempts": n,
                "share_with_bare_targets": share(lambda r: bool(r["bare_targets"])),
                "share_with_execute_errors": share(lambda r: bool(r["n_execute_errors"])),
                "share_with_one_get_context_or_none": share(lambda r: r["n_get_context"] <= 1)}
    controls = selection.passed + selection.retrieval_only
    n = len(controls)
    if n == 0:
        note = ("no passing attempts: nothing can falsify a behavioural cluster; mark such "
                "clusters unfalsified. Clusters about model facts are unaffected.")
    elif n < 3:
        note = ("one or two passing attempts: not a rate. If a behaviour also appears in a pass, "
                "it is contributing, not primary.")
    else:
        note = ("compare the shares: a behaviour about as common in passes as in failures does "
                "not separate them and is contributing, not primary.")
    return {"failing": rates(selection.failed), "passing": rates(controls), "note": note}
