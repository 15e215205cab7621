"""The free mechanical first look: failures grouped by where_to_fix and missing entity, from retrieval's attribution."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core import commands, files
from malloy_evals.core.errors import EXIT_OK
from malloy_evals.core.findings import Ignored
from malloy_evals.diagnose.issues import slug_of
from malloy_evals.diagnose.run import attempt_retrieval_rows
from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import load_set

MECHANICAL_FILE = "clusters-mechanical.jsonl"


@dataclass(frozen=True)
class MechanicalResult:
    """cluster_failures' output: groups of failed attempts by where_to_fix and missing entity."""

    run_id: str
    failures: int
    clusters: list[dict[str, Any]]
    path: str
    warnings: list[str] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)  # verdicts not counted, and why

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
    asked: Mapping[Any, str] = questions or {}  # looked up by a row's qid, whatever it holds
    out: list[dict[str, Any]] = []
    for (where, missing), members in groups.items():
        cid = slug_of(where) + (f":{missing}" if missing else "")
        out.append({
            "cluster_id": cid, "where_to_fix": where, "missing": missing or None,
            "component": members[0].get("component"), "owner": members[0].get("owner"),
            "qids": list(dict.fromkeys(m.get("qid") for m in members)),
            "attempts": [{"qid": m.get("qid"), "sample": m.get("sample")} for m in members],
            "evidence": [{"qid": m.get("qid"), "sample": m.get("sample"),
                          "verdict": m.get("verdict"), "recall": m.get("recall"),
                          "missing": m.get("missing"), "coverage": m.get("coverage"),
                          "question": asked.get(m.get("qid")), "why": m.get("why")}
                         for m in members],
            "source": "mechanical"})
    out.sort(key=lambda c: (-len(c["attempts"]), c["cluster_id"]))
    return out


def cluster_failures(run_dir: Path, set_dir: Path) -> MechanicalResult:
    """Read the run's retrieval rows and write the mechanical groups to clusters-mechanical.jsonl."""

    run = Run.open(run_dir)
    eval_set = load_set(set_dir)
    warnings: list[str] = []
    view = run.view()
    rows = attempt_retrieval_rows(run, view, eval_set, warnings)
    clusters = mechanical_clusters(rows.values(),
                                   {q: c.question for q, c in eval_set.cases.items()})
    path = run.dir / MECHANICAL_FILE
    text = "".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in clusters)
    files.replace(path, text, run.dir)  # a derived file, rewritten whole, like RESULTS.md
    failures = sum(1 for r in rows.values() if r.get("failed"))
    return MechanicalResult(run.run_id, failures, clusters, str(path), warnings, view.ignored())


def render_mechanical(result: MechanicalResult) -> str:
    lines = [(f"run {result.run_id}: {result.failures} failed attempt(s) in "
             f"{len(result.clusters)} group(s) -> {result.path}")]
    for c in result.clusters:
        owner = c["owner"] or "undecided (diagnose decides)"
        lines.append(f"  {len(c['attempts']):>3}  {c['where_to_fix']}"
                     + (f" / {c['missing']}" if c["missing"] else "")
                     + f"  owner {owner}: {', '.join(c['qids'])}")
    lines += [f"warning: {w}" for w in result.warnings]
    lines.append(f"a first look, not a diagnosis: run {commands.DIAGNOSE} for causes and owners")
    return "\n".join(lines)
