"""The diagnoser's prompts and replies: requests, schemas, and validation against the cause-code table."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from malloy_evals.core import codes, vocab
from malloy_evals.diagnose.selection import ROLE
from malloy_evals.llm.base import LlmRequest

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
    """sha256 of a prompt template (reference/providers.md), before the code table is filled in."""
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
                 table: Mapping[str, codes.CauseCode]) -> LlmRequest:
    """The diagnoser's request for one case (key `diag.<runId>.<qid>`)."""

    system = CASE_SYSTEM_TEMPLATE.format(code_table=codes.render_table(dict(table)))
    user = "EVIDENCE PACKET (this case only)\n" + json.dumps(packet, indent=1, sort_keys=True,
                                                              ensure_ascii=False, default=str)
    return LlmRequest(role=ROLE, key=f"diag.{run_id}.{qid}", system=system,
                      messages=[{"role": "user", "content": user}],
                      output_schema=_diagnosis_schema(table),
                      prompt_version=prompt_version(CASE_SYSTEM_TEMPLATE))


def cluster_request(run_id: str, diagnoses: list[Diagnosis], controls: Mapping[str, Any],
                    table: Mapping[str, codes.CauseCode]) -> LlmRequest:
    """The clustering request over every valid diagnosis (key `diag.<runId>.clusters`)."""

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
