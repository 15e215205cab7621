"""Clusters of diagnoses on a shared cause, and the issue and issue_status events they become."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from malloy_evals.core import codes, vocab
from malloy_evals.diagnose.replies import Diagnosis
from malloy_evals.diagnose.selection import DIAGNOSED_BY
from malloy_evals.ledger.events import AttemptKey, attempt_key


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
# Words that turn an id into a prescription (ids name the defect, never the remedy).
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
        if row is None or not isinstance(primary, str):
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
    return [Cluster(f"{d.primary_code.lower().replace('_', '-')}-{slug_of(d.qid)}", [d.qid],
                    d.primary_code, d.contributing_codes, d.component, d.owner, d.diagnosis,
                    d.reasoning[:500], d.confidence) for d in diagnoses]


def slug_of(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "case"


_ORDER = {"low": 0, "medium": 1, "high": 2}
_SUFFICIENCY_ORDER = {"sufficient": 0, "insufficient": 1, "unknown": 2}


def issue_events(run_id: str, clusters: list[Cluster], diagnoses: list[Diagnosis],
                 diagnosed_by: str, attempt_ids: Mapping[str, list[str]] | None = None
                 ) -> list[dict[str, Any]]:
    """One `issue` plus one `issue_status open` per cluster, largest first. `attempt_ids`: per
    qid, the live attempt events diagnosed, which the issue names (`attempt_event_ids`)."""
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
            "evidence": cl.evidence or None, "diagnosed_by": diagnosed_by,
            "attempt_event_ids": [a for q in cl.qids for a in (attempt_ids or {}).get(q, [])]})
        events.append({"kind": "issue_status", "issue_id": issue_id, "status": "open"})
    return events


def own_issues(events: Iterable[Mapping[str, Any]], qids: set[str] | None
               ) -> list[Mapping[str, Any]]:
    """The live issues this script wrote earlier (diagnosed_by starts with DIAGNOSED_BY), which a
    new pass supersedes (`Run.supersede`).

    `qids` None (a whole-run pass) takes them all; otherwise only those sharing a qid with the
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
        out.append(e)
    return out


# An issue in one of these states is done with: a later pass never re-opens or re-closes it.
SETTLED_STATUSES = frozenset({"fixed", "rejected"})


def fixed_issue_statuses(events: Iterable[Mapping[str, Any]],
                         passing: Mapping[AttemptKey, bool]) -> list[dict[str, Any]]:
    """One `issue_status fixed` per live issue, not yet fixed or rejected, every attempt of whose
    cases now passes; `passing_attempt_ids` names those attempts' events.

    Args:
        events: the run's live events, in ledger order.
        passing: attempt key -> whether that attempt passes now (a `match` with every needed
            entity delivered: a pass that still misses an entity is diagnosed again, not fixed).
    """
    events = list(events)
    status: dict[str, str] = {}
    issues: dict[str, Mapping[str, Any]] = {}
    attempts: dict[str, list[Mapping[str, Any]]] = {}
    for e in events:
        kind = e.get("kind")
        if kind == "issue":
            issues[str(e.get("issue_id"))] = e
        elif kind == "issue_status":
            status[str(e.get("issue_id"))] = str(e.get("status"))
        elif kind == "attempt":
            attempts.setdefault(str(e.get("qid")), []).append(e)
    out = []
    for issue_id, issue in issues.items():
        if status.get(issue_id) in SETTLED_STATUSES:
            continue
        qids = [str(q) for q in issue.get("qids") or []]
        members = [a for q in qids for a in attempts.get(q, [])]
        # Every case must have been answered again: a case with no attempt in this run says
        # nothing about the fix.
        if not qids or any(q not in attempts for q in qids):
            continue
        if all(passing.get(attempt_key(a), False) for a in members):
            out.append({"kind": "issue_status", "issue_id": issue_id, "status": "fixed",
                        "passing_attempt_ids": [str(a.get("event_id")) for a in members]})
    return out


def open_issues(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The live issues whose latest status is neither fixed nor rejected, in ledger order:
    `{issue_id, status, qids, primary_code, owner}` (an issue with no status reads as open)."""
    events = list(events)
    status = {str(e.get("issue_id")): str(e.get("status")) for e in events
              if e.get("kind") == "issue_status"}
    out = []
    for e in events:
        if e.get("kind") != "issue":
            continue
        issue_id = str(e.get("issue_id"))
        state = status.get(issue_id, "open")
        if state in SETTLED_STATUSES:
            continue
        out.append({"issue_id": issue_id, "status": state, "qids": list(e.get("qids") or []),
                    "primary_code": e.get("primary_code"), "owner": e.get("owner")})
    return out
