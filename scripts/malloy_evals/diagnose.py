"""Why did each answer fail, and who owns the fix? (SPEC 8)

Three parts, each usable alone:

- `select_cases`: every attempt of a run lands in exactly one bucket (failed, passed,
  retrieval-only, or excluded with a reason), so narrowing the selection never shrinks the
  denominator a reader divides by.
- `diagnose_run`: one evidence packet per selected case (never another case's golden), one
  diagnoser call per case (role `diagnose`, key `diag.<runId>.<qid>`), each reply validated against
  the cause-code table of eval-diagnose/SKILL.md; then one clustering call (`diag.<runId>.clusters`)
  grouping the diagnoses on shared cause; then `issue` + `issue_status open` events, voiding only
  the issues this script wrote earlier for the run.
- `cluster_failures`: the free mechanical first look, from score_retrieval's attribution, written to
  `<run>/clusters-mechanical.jsonl` and never to the diagnosed issues.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import codes, vocab
from .errors import EXIT_OK, EXIT_UNMEASURED, InputError, KitError, UsageError
from .providers import last_json_object

ROLE = "diagnose"
# What this script writes into an issue's `diagnosed_by`; a re-run voids live issues carrying it,
# and nothing else (SPEC 8: only this script's own earlier issues).
DIAGNOSED_BY = "diagnose.py"
SELECTABLE_VERDICTS = ("no_match", "near_match", "needs_human")
SPLITS = ("dev", "holdout", "all")
PARALLEL = 4  # diagnoser calls in flight at once
ANSWER_CHARS = 4000
GOLDEN_ROWS = 50
RETURNED_IDS = 25

# Exclusion reasons (SPEC 8), spelled once.
R_CONTAMINATED = "contaminated"
R_UNSCORED = "unscored"
R_HOLDOUT = "holdout"
R_SPLIT = "not in --split"
R_VERDICT = "verdict not selected"
R_NOT_NAMED = "not named in --only"
R_LIMIT = "beyond the limit"
R_NOT_IN_SET = "not in the set"

AttemptKey = tuple[str, "int | None"]


# --------------------------------------------------------------------------- selection

@dataclass(frozen=True)
class Bucketed:
    """One attempt and the bucket it landed in; `reason` says why when excluded."""

    qid: str
    sample: int | None
    verdict: str | None
    reason: str | None = None


@dataclass(frozen=True)
class Selection:
    """Every attempt of the run in exactly one bucket (SPEC 8)."""

    failed: list[Bucketed]
    passed: list[Bucketed]
    retrieval_only: list[Bucketed]   # passed, but a needed entity never arrived: diagnosed too
    excluded: list[Bucketed]

    @property
    def total(self) -> int:
        return len(self.failed) + len(self.passed) + len(self.retrieval_only) + len(self.excluded)

    @property
    def selected(self) -> list[Bucketed]:
        """The attempts to diagnose: failures first, then passes with a retrieval miss."""
        return self.failed + self.retrieval_only

    @property
    def selected_qids(self) -> list[str]:
        return list(dict.fromkeys(b.qid for b in self.selected))

    def excluded_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(_reason_class(b.reason) for b in self.excluded).items()))

    @property
    def non_passing(self) -> int:
        """The denominator of "how much was diagnosed": failures plus every excluded attempt that
        was not a pass. Narrowing moves attempts between buckets, never out of this count."""
        return len(self.failed) + sum(1 for b in self.excluded if b.verdict != "match")

    def to_json(self) -> dict[str, Any]:
        return {"attempts": self.total, "failed": len(self.failed), "passed": len(self.passed),
                "retrieval_only": len(self.retrieval_only), "excluded": len(self.excluded),
                "non_passing": self.non_passing, "selected_cases": self.selected_qids,
                "excluded_by_reason": self.excluded_by_reason(),
                "excluded_attempts": [{"qid": b.qid, "sample": b.sample, "verdict": b.verdict,
                                       "reason": b.reason} for b in self.excluded]}


def _reason_class(reason: str | None) -> str:
    """`unscored: judge_unparseable` counts under `unscored`; `verdict not selected: x` likewise."""
    return (reason or "").split(":", 1)[0]


def _is_contaminated(value: Any) -> bool:
    """true, "unknown" (SPEC 5.1: counts as contaminated everywhere) and legacy "true" strings."""
    return value is True or (isinstance(value, str) and value.lower() in ("true", "unknown"))


def select_cases(events: Iterable[Mapping[str, Any]], cases: Mapping[str, str], *,
                 verdicts: Iterable[str] = ("no_match",), split: str = "dev",
                 only: Iterable[str] | None = None, limit: int | None = None,
                 retrieval_misses: Mapping[AttemptKey, bool] | None = None) -> Selection:
    """Put every attempt of a run's live events into exactly one bucket (SPEC 8).

    Args:
        events: the run's live events (voids applied).
        cases: qid -> split of the set's cases.
        retrieval_misses: (qid, sample) -> True when a needed entity never reached the answerer
            (retrieval recall below 1); a passing attempt with a miss is `retrieval_only`.

    Order of the rules, first that applies: not in the set, contaminated, unscored, outside the
    split, pass (retrieval-only or passed), verdict not selected, failed. Then `only` and `limit`
    move failures and retrieval-only passes they drop into `excluded`, so the counts stay whole.
    `limit` counts cases (one packet per case); `limit=0` selects nothing.
    """
    verdicts = tuple(verdicts)
    bad = [v for v in verdicts if v not in SELECTABLE_VERDICTS]
    if bad:
        raise UsageError(f"--verdicts: {', '.join(bad)} not one of {', '.join(SELECTABLE_VERDICTS)}")
    if split not in SPLITS:
        raise UsageError(f"--split {split!r}: one of {', '.join(SPLITS)}")
    if limit is not None and limit < 0:
        raise UsageError("--limit must be 0 or more")
    misses = retrieval_misses or {}
    attempts: dict[AttemptKey, dict[str, Any]] = {}
    scores: dict[AttemptKey, dict[str, Any]] = {}
    for e in events:
        kind = e.get("kind")
        if kind not in ("attempt", "score"):
            continue
        key = (e.get("qid"), e.get("sample"))
        (attempts if kind == "attempt" else scores)[key] = dict(e)  # the latest live one wins
        attempts.setdefault(key, {})
    failed: list[Bucketed] = []
    passed: list[Bucketed] = []
    retrieval_only: list[Bucketed] = []
    excluded: list[Bucketed] = []
    for key, attempt in attempts.items():
        qid, sample = key
        score = scores.get(key)
        verdict = score.get("verdict") if score else None
        if qid not in cases:
            excluded.append(Bucketed(qid, sample, verdict, R_NOT_IN_SET))
        elif (_is_contaminated(attempt.get("contaminated"))
              or (score is not None and (_is_contaminated(score.get("contaminated"))
                                         or score.get("reason") == "contaminated"))):
            excluded.append(Bucketed(qid, sample, verdict, R_CONTAMINATED))
        elif score is None or verdict is None:
            why = "no score event" if score is None else (score.get("reason") or "null verdict")
            excluded.append(Bucketed(qid, sample, None, f"{R_UNSCORED}: {why}"))
        elif split != "all" and cases[qid] != split:
            reason = R_HOLDOUT if cases[qid] == "holdout" else f"{R_SPLIT}: {cases[qid]}"
            excluded.append(Bucketed(qid, sample, verdict, reason))
        elif verdict == "match":
            (retrieval_only if misses.get(key) else passed).append(Bucketed(qid, sample, verdict))
        elif verdict not in verdicts:
            excluded.append(Bucketed(qid, sample, verdict, f"{R_VERDICT}: {verdict}"))
        else:
            failed.append(Bucketed(qid, sample, verdict))
    if only is not None:
        named = set(only)
        failed, dropped_f = _partition(failed, lambda b: b.qid in named)
        retrieval_only, dropped_r = _partition(retrieval_only, lambda b: b.qid in named)
        excluded += [_with_reason(b, R_NOT_NAMED) for b in dropped_f + dropped_r]
    if limit is not None:
        kept_qids = list(dict.fromkeys(b.qid for b in failed + retrieval_only))[:limit]
        keep = set(kept_qids)
        failed, dropped_f = _partition(failed, lambda b: b.qid in keep)
        retrieval_only, dropped_r = _partition(retrieval_only, lambda b: b.qid in keep)
        excluded += [_with_reason(b, f"{R_LIMIT}: --limit {limit}") for b in dropped_f + dropped_r]
    return Selection(failed, passed, retrieval_only, excluded)


def _partition(items: list[Bucketed], keep: Callable[[Bucketed], bool]
               ) -> tuple[list[Bucketed], list[Bucketed]]:
    return [b for b in items if keep(b)], [b for b in items if not keep(b)]


def _with_reason(b: Bucketed, reason: str) -> Bucketed:
    return Bucketed(b.qid, b.sample, b.verdict, reason)


# --------------------------------------------------------------------------- evidence packet

def _golden_block(case: Any, set_dir: Path) -> dict[str, Any]:
    """This case's golden, rows capped; never any other case's."""
    from .sets import golden_value

    golden = case.golden or {}
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


def _must_not_use(case: Any, final_query: str | None, score: Mapping[str, Any]) -> dict[str, Any]:
    """The veto as scored, plus a fresh check of the final query when the checker is there."""
    out: dict[str, Any] = {"entries": case.must_not_use,
                           "hits": score.get("must_not_use_hits"),
                           "leaf_hits": score.get("leaf_hits")}
    if case.must_not_use:
        try:
            from .must_not_use import check_must_not_use
        except ImportError:
            return out
        result = check_must_not_use(final_query, case.must_not_use)
        out.update({"hits": result.hits, "leaf_hits": result.leaf_hits,
                    "unchecked": result.unchecked, "judge_note": result.judge_note})
    return out


def _attempt_block(run: Any, events: list[dict[str, Any]], case: Any, b: Bucketed,
                   retrieval_row: Mapping[str, Any] | None) -> dict[str, Any]:
    attempt = run.attempt(b.qid, b.sample, events) or {}
    score = run.score(b.qid, b.sample, events) or {}
    calls = run.tool_calls(b.qid, b.sample, events)
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
        "must_not_use": _must_not_use(case, attempt.get("final_query"), score),
        "retrieval": retrieval,
    }


def build_packet(run: Any, events: list[dict[str, Any]], eval_set: Any, qid: str,
                 attempts: list[Bucketed], retrieval_rows: Mapping[AttemptKey, Mapping[str, Any]],
                 measured_coverage: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The evidence one diagnoser call sees for one case: its question, golden, coverage, and each
    selected attempt's answer, queries, get_context calls, judge why, retrieval row and veto."""
    case = eval_set.case(qid)
    measured = (measured_coverage or {}).get(qid)
    if measured is None:
        # The run was scored against a coverage report: its rows carry the measured verdict, so
        # the packet is the same whether or not --coverage is passed again here.
        rows = [retrieval_rows.get((b.qid, b.sample)) or {} for b in attempts]
        measured = next((r.get("coverage") for r in rows
                         if r.get("coverage_source") == "measured"), None)
    return {
        "qid": qid, "question": case.question, "tags": case.tags,
        "golden": _golden_block(case, eval_set.dir),
        "expectedEntities": case.expected_entities,
        "coverage": {"authored": case.coverage, "coverageNote": case.coverage_note,
                     "measured": measured},
        "attempts": [_attempt_block(run, events, case, b, retrieval_rows.get((b.qid, b.sample)))
                     for b in attempts],
    }


# --------------------------------------------------------------------------- the diagnoser

CASE_SYSTEM_TEMPLATE = """\
You diagnose ONE failed answer of an evaluation over a Malloy semantic model: decide the cause code
and the owner of the fix. You do not re-score the answer and you propose no patch.

Walk the components in this order and stop at the first with positive evidence:
1. dataset: is the question answerable as written, is the golden right, did the data move?
2. agent-call: did the get_context calls ask for the needed concepts, with kinds (target_shapes)
   and scopes that could return them? A call pinned to one source cannot return another's entity.
3. get_context/model: is the needed entity absent, undocumented, duplicated without a resolving
   doc, or missing the rule that combines it?
4. get_context/retrieval: model right, ask on target, ranking buried it (needs proof).
5. construction: every needed entity and its guidance arrived, and the query is still wrong.
6. model-definition: the right entity was used and its definition or doc is wrong.

Rules:
- Sufficiency first: `construction` needs `sufficiency: sufficient`, i.e. the packet shows every
  needed entity (expectedEntities) and its guidance among what get_context returned. When the
  returned context is unknown, sufficiency is `unknown` and the component is not construction.
- Presence leads, rank refines: a needed entity never returned is never a construction failure.
- The owner test: if the model's docs were flawless, would the agent have answered right? No ->
  agent-skill. Yes, and the docs are wrong or silent -> model (package-skill when the rule spans
  sources). Agent right, key wrong -> dataset. `model` is not the default.
- When `answered_correctly` is true the answer passed: diagnose only why a needed entity never
  arrived, and how the answerer got around it.
- Use only codes from the table below. component and owner must be the code's own row.

{code_table}

Reply with one JSON object, reasoning first:
{{"reasoning": "...", "component": "...", "primary_code": "...", "contributing_codes": [...],
  "owner": "...", "sufficiency": "sufficient | insufficient | unknown",
  "severity": "high | medium | low", "confidence": "high | medium | low",
  "diagnosis": "one or two sentences naming the defect"}}
"""

CLUSTER_SYSTEM_TEMPLATE = """\
You cluster the diagnosed failures of one evaluation run into issues. Group on a SHARED CAUSE, not
a shared symptom: two MISSING findings about different entities are two clusters; the same owner and
component is only a hint. Never put two owners in one cluster. Every diagnosed qid goes in exactly
one cluster (singletons are fine).

A cluster_id is a short kebab-case slug naming the DEFECT, never the remedy: no words like add,
fix, should, use, make, missing, need (write `net-revenue-rule-absent`, not
`add-net-revenue-measure`).

Falsify behavioural clusters against the CONTROLS (the passing attempts): when a behaviour is as
common in passes as in failures, it cannot be the primary cause; name it among contributing codes.

Use only codes from this table, with their own component and owner:

{code_table}

Reply with one JSON object:
{{"reasoning": "...", "clusters": [{{"cluster_id": "...", "qids": [...], "primary_code": "...",
  "contributing_codes": [...], "component": "...", "owner": "...",
  "root_cause": "what is wrong, in one or two sentences", "evidence": "what shows it",
  "confidence": "high | medium | low"}}]}}
"""


def prompt_version(template: str) -> str:
    """sha256 of a prompt template (SPEC 7.5), before the code table is filled in."""
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def _diagnosis_schema(table: Mapping[str, codes.CauseCode]) -> dict[str, Any]:
    level = {"type": "string", "enum": list(vocab.SEVERITIES)}
    return {
        "type": "object", "additionalProperties": False,
        "required": ["reasoning", "component", "primary_code", "contributing_codes", "owner",
                     "sufficiency", "severity", "confidence", "diagnosis"],
        "properties": {
            "reasoning": {"type": "string"},
            "component": {"type": "string", "enum": list(vocab.COMPONENTS)},
            "primary_code": {"type": "string", "enum": list(table)},
            "contributing_codes": {"type": "array", "items": {"type": "string", "enum": list(table)}},
            "owner": {"type": "string", "enum": list(vocab.OWNERS)},
            "sufficiency": {"type": "string", "enum": list(vocab.SUFFICIENCIES)},
            "severity": level, "confidence": level,
            "diagnosis": {"type": "string"},
        },
    }


def _cluster_schema(table: Mapping[str, codes.CauseCode]) -> dict[str, Any]:
    level = {"type": "string", "enum": list(vocab.SEVERITIES)}
    return {
        "type": "object", "additionalProperties": False, "required": ["reasoning", "clusters"],
        "properties": {
            "reasoning": {"type": "string"},
            "clusters": {"type": "array", "items": {
                "type": "object", "additionalProperties": False,
                "required": ["cluster_id", "qids", "primary_code", "contributing_codes",
                             "component", "owner", "root_cause", "evidence", "confidence"],
                "properties": {
                    "cluster_id": {"type": "string"},
                    "qids": {"type": "array", "items": {"type": "string"}},
                    "primary_code": {"type": "string", "enum": list(table)},
                    "contributing_codes": {"type": "array",
                                           "items": {"type": "string", "enum": list(table)}},
                    "component": {"type": "string", "enum": list(vocab.COMPONENTS)},
                    "owner": {"type": "string", "enum": list(vocab.OWNERS)},
                    "root_cause": {"type": "string"}, "evidence": {"type": "string"},
                    "confidence": level}}},
        },
    }


def case_request(run_id: str, qid: str, packet: Mapping[str, Any],
                 table: Mapping[str, codes.CauseCode]) -> Any:
    """The diagnoser's request for one case (key `diag.<runId>.<qid>`)."""
    from .providers import LlmRequest

    system = CASE_SYSTEM_TEMPLATE.format(code_table=codes.render_table(dict(table)))
    user = "EVIDENCE PACKET (this case only)\n" + json.dumps(packet, indent=1, sort_keys=True,
                                                              ensure_ascii=False, default=str)
    return LlmRequest(role=ROLE, key=f"diag.{run_id}.{qid}", system=system,
                      messages=[{"role": "user", "content": user}],
                      output_schema=_diagnosis_schema(table),
                      prompt_version=prompt_version(CASE_SYSTEM_TEMPLATE))


def cluster_request(run_id: str, diagnoses: list[Diagnosis], controls: Mapping[str, Any],
                    table: Mapping[str, codes.CauseCode]) -> Any:
    """The clustering request over every valid diagnosis (key `diag.<runId>.clusters`)."""
    from .providers import LlmRequest

    system = CLUSTER_SYSTEM_TEMPLATE.format(code_table=codes.render_table(dict(table)))
    compact = [{k: getattr(d, k) for k in ("qid", "component", "primary_code",
                                           "contributing_codes", "owner", "sufficiency",
                                           "severity", "diagnosis", "answered_correctly")}
               for d in diagnoses]
    user = ("DIAGNOSES\n" + json.dumps(compact, indent=1, sort_keys=True, ensure_ascii=False)
            + "\n\nCONTROLS\n" + json.dumps(controls, indent=1, sort_keys=True))
    return LlmRequest(role=ROLE, key=f"diag.{run_id}.clusters", system=system,
                      messages=[{"role": "user", "content": user}],
                      output_schema=_cluster_schema(table),
                      prompt_version=prompt_version(CLUSTER_SYSTEM_TEMPLATE))


@dataclass(frozen=True)
class Diagnosis:
    """One case's validated diagnosis."""

    qid: str
    component: str
    primary_code: str
    contributing_codes: list[str]
    owner: str
    sufficiency: str
    severity: str
    confidence: str
    diagnosis: str
    reasoning: str
    answered_correctly: bool = False


@dataclass(frozen=True)
class Undiagnosed:
    """A case the diagnoser could not settle: the reply broke the table, or no reply came."""

    qid: str
    reason: str


def _level(value: Any, allowed: tuple[str, ...], name: str, problems: list[str]) -> str:
    if value not in allowed:
        problems.append(f"{name} {value!r} is not one of {', '.join(allowed)}")
    return str(value)


def validate_diagnosis(qid: str, obj: Any, table: Mapping[str, codes.CauseCode], *,
                       answered_correctly: bool = False) -> Diagnosis | Undiagnosed:
    """Check one diagnoser reply against the table; a reply that breaks it is rejected whole.

    Rejected: a code not in the table (primary or contributing), a component or owner that is not
    the primary code's own row, an off-vocabulary sufficiency / severity / confidence, an empty
    diagnosis, and `construction` without `sufficiency: sufficient` (sufficiency first).
    """
    if not isinstance(obj, dict):
        return Undiagnosed(qid, "no JSON object in the diagnoser's reply")
    problems: list[str] = []
    primary = obj.get("primary_code")
    row = table.get(primary) if isinstance(primary, str) else None
    if row is None:
        problems.append(f"primary_code {primary!r} is not a row of the cause-code table")
    contributing = obj.get("contributing_codes") or []
    if not isinstance(contributing, list):
        problems.append("contributing_codes is not a list")
        contributing = []
    outside = [c for c in contributing if c not in table]
    if outside:
        problems.append(f"contributing code(s) {', '.join(map(str, outside))} not in the table")
    component, owner = obj.get("component"), obj.get("owner")
    if row is not None:
        if component != row.component:
            problems.append(f"component {component!r} is not {primary}'s ({row.component})")
        if owner != row.owner:
            problems.append(f"owner {owner!r} is not {primary}'s ({row.owner})")
    sufficiency = _level(obj.get("sufficiency"), vocab.SUFFICIENCIES, "sufficiency", problems)
    severity = _level(obj.get("severity"), vocab.SEVERITIES, "severity", problems)
    confidence = _level(obj.get("confidence"), vocab.SEVERITIES, "confidence", problems)
    if component == "construction" and sufficiency != "sufficient":
        problems.append("construction needs sufficiency 'sufficient' (sufficiency first)")
    text = obj.get("diagnosis")
    if not isinstance(text, str) or not text.strip():
        problems.append("empty diagnosis")
    if problems:
        return Undiagnosed(qid, "rejected: " + "; ".join(problems))
    return Diagnosis(qid=qid, component=str(component), primary_code=str(primary),
                     contributing_codes=[c for c in contributing if c != primary],
                     owner=str(owner), sufficiency=sufficiency, severity=severity,
                     confidence=confidence, diagnosis=str(text).strip(),
                     reasoning=str(obj.get("reasoning") or ""),
                     answered_correctly=answered_correctly)


# --------------------------------------------------------------------------- clustering

@dataclass(frozen=True)
class Cluster:
    """Diagnosed cases sharing one cause: becomes one issue."""

    cluster_id: str
    qids: list[str]
    primary_code: str
    contributing_codes: list[str]
    component: str
    owner: str
    root_cause: str
    evidence: str
    confidence: str


SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# Words that turn an id into a prescription (SPEC 8: ids name the defect, never the remedy).
REMEDY_WORDS = frozenset({"add", "adds", "added", "fix", "fixes", "should", "use", "make",
                          "missing", "need", "needs", "rename", "document", "remove", "create"})


def remedy_words(cluster_id: str) -> list[str]:
    """The words of a cluster id that prescribe a remedy (empty when it names a defect)."""
    return [w for w in cluster_id.split("-") if w in REMEDY_WORDS]


def validate_clusters(obj: Any, diagnoses: list[Diagnosis],
                      table: Mapping[str, codes.CauseCode]) -> list[Cluster] | str:
    """The clusters of a clustering reply, or the reason they are rejected.

    Every diagnosed qid in exactly one cluster, no unknown qid, a defect-naming slug, codes from
    the table with their own component and owner, and one owner per cluster (its members' owner).
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("clusters"), list):
        return "no clusters list in the clustering reply"
    by_qid = {d.qid: d for d in diagnoses}
    seen: Counter[str] = Counter()
    out: list[Cluster] = []
    ids: set[str] = set()
    for i, c in enumerate(obj["clusters"]):
        if not isinstance(c, dict):
            return f"clusters[{i}] is not an object"
        cid = c.get("cluster_id")
        if not isinstance(cid, str) or not SLUG.match(cid):
            return f"clusters[{i}].cluster_id {cid!r} is not a kebab-case slug"
        if remedy_words(cid):
            return f"cluster id {cid!r} prescribes a remedy ({', '.join(remedy_words(cid))})"
        if cid in ids:
            return f"cluster id {cid!r} used twice"
        ids.add(cid)
        qids = c.get("qids")
        if not isinstance(qids, list) or not qids:
            return f"cluster {cid}: no qids"
        unknown = [q for q in qids if q not in by_qid]
        if unknown:
            return f"cluster {cid}: qids {', '.join(map(str, unknown))} were not diagnosed"
        seen.update(qids)
        primary = c.get("primary_code")
        row = table.get(primary) if isinstance(primary, str) else None
        if row is None:
            return f"cluster {cid}: primary_code {primary!r} is not in the table"
        if c.get("component") != row.component or c.get("owner") != row.owner:
            return f"cluster {cid}: component/owner are not {primary}'s ({row.component}/{row.owner})"
        owners = {by_qid[q].owner for q in qids}
        if owners != {row.owner}:
            return f"cluster {cid}: members owned by {', '.join(sorted(owners))}; keep owners apart"
        contributing = [x for x in c.get("contributing_codes") or [] if x != primary]
        if any(x not in table for x in contributing):
            return f"cluster {cid}: a contributing code is not in the table"
        confidence = c.get("confidence")
        out.append(Cluster(cid, list(dict.fromkeys(qids)), primary, contributing, row.component,
                           row.owner, str(c.get("root_cause") or "").strip(),
                           str(c.get("evidence") or "").strip(),
                           confidence if confidence in vocab.SEVERITIES else "medium"))
    twice = [q for q, n in seen.items() if n > 1]
    if twice:
        return f"qids in more than one cluster: {', '.join(sorted(twice))}"
    left = [d.qid for d in diagnoses if d.qid not in seen]
    if left:
        return f"diagnosed qids in no cluster: {', '.join(left)}"
    for cl in out:
        if not cl.root_cause:
            return f"cluster {cl.cluster_id}: empty root_cause"
    return out


def singleton_clusters(diagnoses: list[Diagnosis]) -> list[Cluster]:
    """One cluster per case: the fallback when clustering was not possible or was rejected."""
    return [Cluster(f"{d.primary_code.lower().replace('_', '-')}-{_slug(d.qid)}", [d.qid],
                    d.primary_code, d.contributing_codes, d.component, d.owner, d.diagnosis,
                    d.reasoning[:500], d.confidence) for d in diagnoses]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "case"


_ORDER = {"low": 0, "medium": 1, "high": 2}
_SUFFICIENCY_ORDER = {"sufficient": 0, "insufficient": 1, "unknown": 2}


def issue_events(run_id: str, clusters: list[Cluster], diagnoses: list[Diagnosis],
                 diagnosed_by: str) -> list[dict[str, Any]]:
    """One `issue` plus one `issue_status open` per cluster, largest first."""
    by_qid = {d.qid: d for d in diagnoses}
    events: list[dict[str, Any]] = []
    for cl in sorted(clusters, key=lambda c: (-len(c.qids), c.cluster_id)):
        members = [by_qid[q] for q in cl.qids]
        codes_ = {x for d in members for x in (d.primary_code, *d.contributing_codes)}
        contributing = sorted((codes_ | set(cl.contributing_codes)) - {cl.primary_code})
        issue_id = f"{run_id}:{cl.cluster_id}"
        events.append({
            "kind": "issue", "issue_id": issue_id, "qids": cl.qids,
            "primary_code": cl.primary_code, "contributing_codes": contributing,
            "component": cl.component, "owner": cl.owner, "diagnosis": cl.root_cause,
            "severity": max((d.severity for d in members), key=_ORDER.__getitem__),
            "confidence": cl.confidence,
            "sufficiency": max((d.sufficiency for d in members),
                               key=_SUFFICIENCY_ORDER.__getitem__),
            "evidence": cl.evidence or None, "diagnosed_by": diagnosed_by})
        events.append({"kind": "issue_status", "issue_id": issue_id, "status": "open"})
    return events


def own_issue_voids(events: Iterable[Mapping[str, Any]], qids: set[str] | None
                    ) -> list[dict[str, Any]]:
    """Voids for the live issues this script wrote earlier (diagnosed_by starts with DIAGNOSED_BY).

    `qids` None (a whole-run pass) voids them all; otherwise only those sharing a qid with the
    cases diagnosed now, so a narrowed re-run does not drop other cases' issues.
    """
    out = []
    for e in events:
        if e.get("kind") != "issue":
            continue
        if not str(e.get("diagnosed_by") or "").startswith(DIAGNOSED_BY):
            continue
        if qids is not None and not (set(e.get("qids") or []) & qids):
            continue
        out.append({"kind": "void", "target_event_id": e["event_id"],
                    "reason": "superseded by a new diagnose.py run"})
    return out


# --------------------------------------------------------------------------- controls

def behaviour(run: Any, events: list[dict[str, Any]], b: Bucketed) -> dict[str, Any]:
    """What an attempt did, for falsifying behavioural clusters: calls, bare targets, errors."""
    attempt = run.attempt(b.qid, b.sample, events) or {}
    gets = [c for c in run.tool_calls(b.qid, b.sample, events) if c.get("tool") == "get_context"]
    shapes = [s for c in gets for s in (c.get("target_shapes") or [])]
    return {"n_get_context": len(gets),
            "n_execute": attempt.get("n_execute"),
            "n_execute_errors": attempt.get("n_execute_errors"),
            "bare_targets": sum(1 for s in shapes if not s.get("has_text")) if shapes else None,
            "target_types": dict(Counter(str(s.get("type")) for s in shapes))}


def controls_block(run: Any, events: list[dict[str, Any]], selection: Selection) -> dict[str, Any]:
    """Behaviour rates of failing versus passing attempts, and how far they can be trusted."""
    def rates(items: list[Bucketed]) -> dict[str, Any]:
        rows = [behaviour(run, events, b) for b in items]
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


# --------------------------------------------------------------------------- the run

@dataclass(frozen=True)
class DiagnoseResult:
    """diagnose.py's output."""

    run_id: str
    diagnoser: str
    selection: Selection
    diagnoses: list[Diagnosis]
    undiagnosed: list[Undiagnosed]
    clusters: list[Cluster]
    clustered_by: str          # "diagnoser", "single case", "fallback: <why>", "pending: ..."
    issues_appended: list[str]
    issues_voided: int
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        # Selected cases and not one diagnosed is "could not measure" (SPEC 1); host emits are not.
        if self.selection.selected_qids and not self.diagnoses and not all(
                u.reason.startswith(("host reply pending", "dry run")) for u in self.undiagnosed):
            return EXIT_UNMEASURED
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "diagnoser": self.diagnoser,
                "selection": self.selection.to_json(),
                "diagnosed": len(self.diagnoses), "undiagnosed_count": len(self.undiagnosed),
                "diagnoses": self.diagnoses, "undiagnosed": self.undiagnosed,
                "clusters": self.clusters, "clustered_by": self.clustered_by,
                "issues_appended": self.issues_appended, "issues_voided": self.issues_voided,
                "warnings": self.warnings}


def _retrieval_rows(run: Any, events: list[dict[str, Any]], set_dir: Path,
                    warnings: list[str]) -> dict[AttemptKey, dict[str, Any]]:
    """Each attempt's retrieval row: its live retrieval_score event, else computed now."""
    rows = {(e.get("qid"), e.get("sample")): e for e in events if e.get("kind") == "retrieval_score"}
    attempts = {(e.get("qid"), e.get("sample")) for e in events if e.get("kind") == "attempt"}
    if attempts - set(rows):
        from .retrieval import row_fields, score_retrieval

        try:
            computed = score_retrieval(run.dir, set_dir)
        except KitError as exc:
            warnings.append(f"retrieval rows not computed: {exc}")
            return rows
        for r in computed.rows:
            rows.setdefault((r.qid, r.sample), row_fields(r))
    return rows


def _call(provider: Any, request: Any) -> tuple[Any, str | None]:
    """(reply, None) or (None, why): provider failures become a reason, never a guess."""
    from .providers import DryRun, HostReplyPending

    try:
        return provider.complete(request), None
    except HostReplyPending as exc:
        return None, f"host reply pending: {exc}"
    except DryRun as exc:
        return None, f"dry run: {exc}"
    except KitError as exc:
        return None, f"diagnoser failed: {exc}"


def _reply_object(reply: Any, key: str) -> Any:
    if reply.data is not None:
        return reply.data
    return last_json_object(reply.text or "", key)


def diagnose_run(run_dir: Path, set_dir: Path, provider_factory: Callable[[Path], Any], *,
                 only: list[str] | None = None, verdicts: Iterable[str] = ("no_match",),
                 split: str = "dev", limit: int | None = None,
                 coverage_report: Path | None = None,
                 progress: Callable[[str], None] | None = None) -> DiagnoseResult:
    """SPEC 8 end to end: select, build packets, diagnose, validate, cluster, append issues."""
    from .ledger import Run
    from .sets import load_set

    table = codes.load_codes()
    run = Run.open(run_dir)
    eval_set = load_set(set_dir)
    events = run.live()
    warnings: list[str] = []
    retrieval_rows = _retrieval_rows(run, events, Path(set_dir), warnings)
    misses = {k: (r.get("recall") is not None and r.get("recall") < 1)
              for k, r in retrieval_rows.items()}
    if only:
        unknown = [q for q in only if q not in eval_set.cases]
        if unknown:
            raise UsageError(f"--only names qids not in the set: {', '.join(unknown)}")
    selection = select_cases(events, {q: c.split for q, c in eval_set.cases.items()},
                             verdicts=verdicts, split=split, only=only, limit=limit,
                             retrieval_misses=misses)
    measured = None
    if coverage_report is not None:
        from .retrieval import load_coverage_report

        measured = load_coverage_report(coverage_report)
    provider = provider_factory(run.dir)
    by_qid: dict[str, list[Bucketed]] = defaultdict(list)
    for b in selection.selected:
        by_qid[b.qid].append(b)
    diagnoses: list[Diagnosis] = []
    undiagnosed: list[Undiagnosed] = []
    artifacts = run.dir / "diagnose"
    def one(item: tuple[str, list[Bucketed]]) -> Diagnosis | Undiagnosed:
        qid, attempts = item
        packet = build_packet(run, events, eval_set, qid, attempts, retrieval_rows, measured)
        request = case_request(run.run_id, qid, packet, table)
        reply, why = _call(provider, request)
        passed_only = all(b.verdict == "match" for b in attempts)
        if reply is None:
            outcome: Diagnosis | Undiagnosed = Undiagnosed(qid, why or "no reply")
        else:
            outcome = validate_diagnosis(qid, _reply_object(reply, "primary_code"), table,
                                         answered_correctly=passed_only)
        _keep(artifacts / f"{qid}.json", request, reply, outcome)
        if progress:
            label = (f"[{outcome.component}] {outcome.primary_code} -> {outcome.owner}"
                     if isinstance(outcome, Diagnosis) else f"undiagnosed: {outcome.reason}")
            progress(f"diagnose {qid}: {label}")
        return outcome

    # Cases are independent; the provider bounds its own concurrency. Results keep case order.
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        for outcome in pool.map(one, by_qid.items()):
            (diagnoses if isinstance(outcome, Diagnosis) else undiagnosed).append(outcome)
    clusters, clustered_by = _cluster(run, events, selection, diagnoses, provider, table,
                                      artifacts)
    diagnoser = _provider_name(provider)  # after the calls: replay learns its source from them
    appended: list[str] = []
    voided = 0
    if clusters:
        narrowed = only is not None or limit is not None
        voids = own_issue_voids(events, {d.qid for d in diagnoses} if narrowed else None)
        new = issue_events(run.run_id, clusters, diagnoses, f"{DIAGNOSED_BY} {diagnoser}")
        run.append(voids + new)
        voided = len(voids)
        appended = [e["issue_id"] for e in new if e["kind"] == "issue"]
    from .providers import provider_stats

    stats = provider_stats(provider)
    if stats:
        warnings.append(f"diagnoser calls: {json.dumps(stats, sort_keys=True)}")
    return DiagnoseResult(run.run_id, diagnoser, selection, diagnoses, undiagnosed, clusters,
                          clustered_by, appended, voided, warnings)


def _cluster(run: Any, events: list[dict[str, Any]], selection: Selection,
             diagnoses: list[Diagnosis], provider: Any, table: Mapping[str, codes.CauseCode],
             artifacts: Path) -> tuple[list[Cluster], str]:
    if not diagnoses:
        return [], "nothing diagnosed"
    if len(diagnoses) == 1:
        return singleton_clusters(diagnoses), "single case"
    request = cluster_request(run.run_id, diagnoses, controls_block(run, events, selection), table)
    reply, why = _call(provider, request)
    if reply is None and why and why.startswith("host reply pending") \
            and getattr(provider, "mode", None) == "ingest":
        # Host flow: the per-case replies are in; emit the clustering request for the host and
        # write no issue until its reply is there (a second --ingest picks it up).
        from .providers import HostProvider

        emitter = HostProvider("emit", getattr(provider, "host_dir", None), role=ROLE)
        _, why = _call(emitter, request)
        return [], f"pending: {why}"
    if reply is None:
        if why and why.startswith(("host reply pending", "dry run")):
            return [], f"pending: {why}"  # nothing was asked, so nothing may be written
        _keep(artifacts / "clusters.json", request, None, why)
        return singleton_clusters(diagnoses), f"fallback: {why}"
    result = validate_clusters(_reply_object(reply, "clusters"), diagnoses, table)
    _keep(artifacts / "clusters.json", request, reply, result)
    if isinstance(result, str):
        return singleton_clusters(diagnoses), f"fallback: {result}"
    return result, "diagnoser"


def _keep(path: Path, request: Any, reply: Any, outcome: Any) -> None:
    """The raw request digest, reply and outcome of one call, kept beside the run for review."""
    from . import cli

    # The digest the answering model was asked under (SPEC 7.5: the model is part of it); with no
    # reply no model answered, so it is taken with model null, as a host request is.
    digest = reply.request_digest if reply is not None else request.digest(model=None)
    doc = {"key": request.key, "request_digest": digest,
           "prompt_version": request.prompt_version,
           "reply": None if reply is None else {"source": reply.source, "text": reply.text,
                                                "data": reply.data},
           "outcome": outcome}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cli.dumps(doc) + "\n", encoding="utf-8")


def _provider_name(provider: Any) -> str:
    spec = getattr(provider, "spec", None) or "unknown"
    model = getattr(provider, "model", None)
    return f"{spec} ({model})" if model and model not in spec else str(spec)


def render_text(result: DiagnoseResult) -> str:
    """Per case `qid component/code -> owner`, then the clusters and the selection account."""
    sel = result.selection
    lines = [f"run {result.run_id}: diagnoser {result.diagnoser}"]
    for d in result.diagnoses:
        flag = " (answered correctly; retrieval miss)" if d.answered_correctly else ""
        lines.append(f"  {d.qid}: [{d.component}] {d.primary_code} -> {d.owner}{flag}: {d.diagnosis}")
    for u in result.undiagnosed:
        lines.append(f"  {u.qid}: UNDIAGNOSED: {u.reason}")
    lines.append(f"clusters ({result.clustered_by}):")
    for c in result.clusters:
        lines.append(f"  {c.cluster_id} [{c.primary_code} -> {c.owner}] {', '.join(c.qids)}: "
                     f"{c.root_cause}")
    lines.append(f"diagnosed {len(result.diagnoses)} case(s) of {len(sel.selected_qids)} selected; "
                 f"{sel.non_passing} non-passing attempt(s) in the run, {len(sel.failed)} selected "
                 f"as failed, {len(sel.retrieval_only)} retrieval-only passes, {len(sel.passed)} "
                 f"passed")
    if sel.excluded:
        lines.append("excluded: " + ", ".join(f"{k} {v}" for k, v in
                                              sel.excluded_by_reason().items()))
    lines.append(f"issues appended {len(result.issues_appended)}, voided {result.issues_voided}")
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


# --------------------------------------------------------------------------- mechanical first look

MECHANICAL_FILE = "clusters-mechanical.jsonl"


@dataclass(frozen=True)
class MechanicalResult:
    """cluster_failures' output: groups of failed attempts by where_to_fix and missing entity."""

    run_id: str
    failures: int
    clusters: list[dict[str, Any]]
    path: str
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_OK


def mechanical_clusters(rows: Iterable[Mapping[str, Any]],
                        questions: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Group failed attempts' retrieval rows by (where_to_fix, first missing entity); pure.

    A row with several missing groups goes under its first, so each attempt is in one group.
    The owner and component are score_retrieval's, which leaves `delivered, wrong` undecided.
    """
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if not r.get("failed"):
            continue
        where = r.get("where_to_fix") or "unattributed"
        missing = (r.get("missing") or [""])[0]
        groups[(where, missing)].append(r)
    out = []
    for (where, missing), members in groups.items():
        cid = _slug(where) + (f":{missing}" if missing else "")
        out.append({
            "cluster_id": cid, "where_to_fix": where, "missing": missing or None,
            "component": members[0].get("component"), "owner": members[0].get("owner"),
            "qids": list(dict.fromkeys(m.get("qid") for m in members)),
            "attempts": [{"qid": m.get("qid"), "sample": m.get("sample")} for m in members],
            "evidence": [{"qid": m.get("qid"), "sample": m.get("sample"),
                          "verdict": m.get("verdict"), "recall": m.get("recall"),
                          "missing": m.get("missing"), "coverage": m.get("coverage"),
                          "question": (questions or {}).get(m.get("qid")), "why": m.get("why")}
                         for m in members],
            "source": "mechanical"})
    out.sort(key=lambda c: (-len(c["attempts"]), c["cluster_id"]))
    return out


def cluster_failures(run_dir: Path, set_dir: Path) -> MechanicalResult:
    """Read the run's retrieval rows and write the mechanical groups to clusters-mechanical.jsonl."""
    from .ledger import Run
    from .sets import load_set

    run = Run.open(run_dir)
    eval_set = load_set(set_dir)
    events = run.live()
    warnings: list[str] = []
    rows = _retrieval_rows(run, events, Path(set_dir), warnings)
    clusters = mechanical_clusters(rows.values(),
                                   {q: c.question for q, c in eval_set.cases.items()})
    path = run.dir / MECHANICAL_FILE
    text = "".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in clusters)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # a derived file, rewritten whole, like RESULTS.md
    failures = sum(1 for r in rows.values() if r.get("failed"))
    return MechanicalResult(run.run_id, failures, clusters, str(path), warnings)


def render_mechanical(result: MechanicalResult) -> str:
    lines = [(f"run {result.run_id}: {result.failures} failed attempt(s) in "
             f"{len(result.clusters)} group(s) -> {result.path}")]
    for c in result.clusters:
        owner = c["owner"] or "undecided (diagnose decides)"
        lines.append(f"  {len(c['attempts']):>3}  {c['where_to_fix']}"
                     + (f" / {c['missing']}" if c["missing"] else "")
                     + f"  owner {owner}: {', '.join(c['qids'])}")
    lines += [f"warning: {w}" for w in result.warnings]
    lines.append("a first look, not a diagnosis: run diagnose.py for causes and owners")
    return "\n".join(lines)


__all__ = ["DIAGNOSED_BY", "MECHANICAL_FILE", "Bucketed", "Cluster", "DiagnoseResult",
           "Diagnosis", "MechanicalResult", "Selection", "Undiagnosed", "build_packet",
           "case_request", "cluster_failures", "cluster_request", "controls_block",
           "diagnose_run", "issue_events", "mechanical_clusters", "own_issue_voids",
           "remedy_words", "render_mechanical", "render_text", "select_cases",
           "singleton_clusters", "validate_clusters", "validate_diagnosis"]
