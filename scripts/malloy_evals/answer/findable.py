"""check_findable: can get_context find what each case says its answer needs?

For every case with expected entities, the served endpoint is asked three things:

1. `get_context` with the question itself (the plain `query` form): which expected entities come
   back, by the routes retrieval recall uses (exact > alias > in_docs);
2. `get_context` with each expected entity's own name, typed by its kind: can search surface it at
   all;
3. the package's listing of that kind (a typed target with no text): is it in the model.

An entity the question's words do not bring back but its own name does is a matter of phrasing:
an answerer that searches well finds it. An entity that even its own name does not bring back is
**unfindable**, and that is never the answerer's fault: when the model does not have it, the set
names something that is not there (owner `dataset`); when the model has it, search cannot surface
it (owner `model`: its name or docs). score_retrieval.py --findable reads this report and
attributes a failure whose missing entity is unfindable to that owner
(skills/eval-answer/reference/retrieval-rows.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.answer.reexecute import QueryEndpoint, open_endpoint
from malloy_evals.answer.retrieval import delivery_route, expected_groups
from malloy_evals.core import cli, files
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, KitError
from malloy_evals.core.vocab import split_entity_id
from malloy_evals.endpoint.context_payload import ranked_summary
from malloy_evals.sets.eval_set import load_set

QUESTION_LIMIT = 50          # get_context's largest page: the question gets every chance
NAME_LIMIT = 10              # an entity's own name should bring it into the first page
QUERY_CHARS = 500            # the Publisher's cap on a query string
# The target type that asks for each entity kind (a named query is found by `view`).
TARGET_FOR_KIND = {"source": "source", "dimension": "dimension", "measure": "measure",
                   "view": "view", "query": "view", "join": "join"}

FINDABLE = "findable"
PHRASING = "found by name only"
UNFINDABLE = "unfindable"


@dataclass(frozen=True)
class EntityFinding:
    """One expected entity of one case: how search did on it."""

    entity_id: str
    by_question: str          # route by the question's words: exact, alias, in_docs or missing
    by_name: bool             # its own name, typed by its kind, brought it back
    in_model: bool | None     # the package lists it (None: the listing could not be read)
    owner: str | None         # unfindable only: dataset (not in the model) or model


@dataclass(frozen=True)
class CaseFindings:
    qid: str
    status: str               # findable | found by name only | unfindable
    entities: list[EntityFinding]
    why: str


@dataclass(frozen=True)
class FindableReport:
    """check_findable over a set: per case, and the unfindable entities with their owners."""

    set_dir: str
    endpoint: str
    cases: list[CaseFindings]
    skipped: list[str] = field(default_factory=list)   # cases naming no expected entity

    @property
    def unfindable(self) -> dict[str, str]:
        return {e.entity_id: e.owner or "model" for c in self.cases for e in c.entities
                if c.status == UNFINDABLE and not e.by_name and e.by_question == "missing"}

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.cases if c.status == s)
                for s in (FINDABLE, PHRASING, UNFINDABLE)}

    @property
    def exit_code(self) -> int:
        return EXIT_FINDING if self.unfindable else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"set_dir": self.set_dir, "endpoint": self.endpoint, "counts": self.counts,
                "unfindable": self.unfindable, "cases": self.cases, "skipped": self.skipped,
                "exit_code": self.exit_code}


def _returned(payload: Any) -> tuple[dict[str, None], set[str]]:
    summary = ranked_summary(payload)
    ids = [e for e in summary.get("entity_ids") or [] if isinstance(e, str)]
    tokens = {t.lower() for t in summary.get("doc_tokens") or [] if isinstance(t, str)}
    return dict.fromkeys(ids), tokens


class _Search:
    """The endpoint's get_context, asked the three questions, with each kind's listing cached."""

    def __init__(self, endpoint: QueryEndpoint):
        self.endpoint = endpoint
        self.listings: dict[str, set[str] | None] = {}

    def _scope(self) -> list[dict[str, str]]:
        return [{"environment": self.endpoint.environment, "package": self.endpoint.package}]

    def by_question(self, question: str) -> tuple[dict[str, None], set[str]]:
        return _returned(self.endpoint.client.get_context(
            environmentName=self.endpoint.environment, packageName=self.endpoint.package,
            query=question[:QUERY_CHARS], limit=QUESTION_LIMIT))

    def by_name(self, entity: str) -> bool:
        kind, _, name = split_entity_id(entity)
        target = TARGET_FOR_KIND.get(kind)
        if target is None:
            return False
        returned, _ = _returned(self.endpoint.client.get_context(
            search_targets=[{"target_type": target, "search_text": name}], scopes=self._scope()))
        return entity in returned

    def in_model(self, entity: str) -> bool | None:
        kind = split_entity_id(entity)[0]
        target = TARGET_FOR_KIND.get(kind)
        if target is None:
            return False
        if target not in self.listings:
            try:
                listed, _ = _returned(self.endpoint.client.get_context(
                    search_targets=[{"target_type": target}], scopes=self._scope()))
                self.listings[target] = set(listed)
            except KitError:
                self.listings[target] = None
        listing = self.listings[target]
        return None if listing is None else entity in listing


def check_case(qid: str, question: str, expected: dict[str, Any] | None,
               search: _Search) -> CaseFindings | None:
    """One case's findings; None when it names no expected entity."""
    groups, _ = expected_groups(expected)
    if not groups:
        return None
    returned, tokens = search.by_question(question)
    kind_names = {(k, n) for k, _, n in map(split_entity_id, returned)}
    findings: list[EntityFinding] = []
    for entity in dict.fromkeys(e for g in groups for e in g):
        route = delivery_route(entity, returned, kind_names, tokens)
        by_name = route == "exact" or search.by_name(entity)
        in_model = True if by_name else search.in_model(entity)
        owner = None
        if route == "missing" and not by_name:
            owner = "dataset" if in_model is False else "model"
        findings.append(EntityFinding(entity, route, by_name, in_model, owner))
    found = {f.entity_id: f for f in findings}
    unmet = [g for g in groups if all(found[e].by_question == "missing" for e in g)]
    lost = [g for g in unmet if not any(found[e].by_name for e in g)]
    if lost:
        names = ", ".join(" | ".join(g) for g in lost)
        owners = sorted({found[e].owner or "model" for g in lost for e in g})
        why = (f"{names}: not returned by the question nor by its own name; "
               + ("not in the model (the set names something the model does not have)"
                  if owners == ["dataset"] else
                  "the model has it but search cannot surface it (its name or docs)"
                  if owners == ["model"] else "partly not in the model, partly not surfaced"))
        return CaseFindings(qid, UNFINDABLE, findings, why)
    if unmet:
        names = ", ".join(" | ".join(g) for g in unmet)
        return CaseFindings(qid, PHRASING, findings,
                            f"{names}: found by its own name, not by the question's words")
    return CaseFindings(qid, FINDABLE, findings, "the question's words bring back every group")


def check_findable(set_dir: str | Path, *, mcp_url: str | None = None, local: bool = False,
                   qids: list[str] | None = None, out: str | Path | None = None) -> FindableReport:
    """check_findable.py: every case of the set (or `qids`) against the endpoint; the JSON report
    also written to `out` when given."""
    eval_set = load_set(Path(set_dir))
    cli.check_known(qids, eval_set.cases, where=Path(set_dir) / "cases.jsonl")
    cases = [c for c in eval_set.cases.values() if not qids or c.qid in qids]
    results: list[CaseFindings] = []
    skipped: list[str] = []
    with open_endpoint(eval_set, mcp_url=mcp_url, local=local) as endpoint:
        search = _Search(endpoint)
        for case in cases:
            found = check_case(case.qid, case.question, case.expected_entities, search)
            if found is None:
                skipped.append(case.qid)
            else:
                results.append(found)
                cli.progress(f"{case.qid}: {found.status}")
        label = endpoint.label
    report = FindableReport(str(set_dir), label, results, skipped)
    if out is not None:
        path = Path(out)
        files.replace(path, cli.dumps(report) + "\n", path.parent)
    return report


def render_text(r: FindableReport) -> str:
    lines = [f"{c.status:18} {c.qid}: {c.why}" for c in r.cases]
    n = r.counts
    lines.append(f"{n[FINDABLE]} findable, {n[PHRASING]} found by name only, {n[UNFINDABLE]} "
                 f"unfindable ({len(r.skipped)} case(s) name no expected entity; endpoint "
                 f"{r.endpoint})")
    if r.unfindable:
        lines.append("unfindable (a set or model problem, never the answerer's): "
                     + ", ".join(f"{e} [{o}]" for e, o in sorted(r.unfindable.items())))
    return "\n".join(lines)
