"""Retrieval recall: did get_context deliver the entities a case's answer depends on,
and when an answer failed, where does the fix go? Plus the run cascade. The rules are written in
skills/eval-answer/reference/retrieval-rows.md.

Mechanical, no LLM. The deciders are pure and take values (`score_row`, `attribute`, `summarize`,
`cascade`). `score_retrieval` (the script) streams the ledger through the ledger's one live rule
(`ledger.live.TiedFold`, the tie rule applied as the live view applies it), decoding only the
lines and fields it needs, so memory grows with attempts, never with events; `score_view` scores
the live view a pass already holds.
"""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from malloy_evals.core import commands, jsonl, schemas
from malloy_evals.core.cli import to_jsonable
from malloy_evals.core.errors import EXIT_OK, InputError
from malloy_evals.core.findings import Ignored, LineProblem
from malloy_evals.core.vocab import DECIDED_VERDICTS, ENTITY_KINDS, split_entity_id
from malloy_evals.ledger import public_loop
from malloy_evals.ledger.events import (
    EVENTS_FILE,
    RUN_FILE,
    AttemptKey,
    effective_verdict,
    well_formed_key,
)
from malloy_evals.ledger.live import LiveView, TiedFold, decode_lean
from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import EvalSet, load_set

Route = Literal["exact", "alias", "in_docs", "missing"]
CoverageClass = Literal["covered", "gap", "absent", "unclear", "unknown"]
CoverageSource = Literal["measured", "authored", "none"]

# Effective coverage classes: authored levels and check_coverage's measured verdicts read together.
COVERED = frozenset({"covered", "MODELLED"})
GAP = frozenset({"derivable", "MISSING", "AMBIGUOUS", "RULE_UNWRITTEN"})
ABSENT = frozenset({"absent"})
UNCLEAR = frozenset({"UNDERSPECIFIED"})

# What one target type asks the server for: `view` also finds named queries, `any` (a plain query
# string) asks every kind, and a dimensional value names no entity kind at all.
KINDS_BY_TARGET: dict[str, frozenset[str]] = {
    "source": frozenset({"source"}), "dimension": frozenset({"dimension"}),
    "measure": frozenset({"measure"}), "view": frozenset({"view", "query"}),
    "query": frozenset({"query"}), "join": frozenset({"join"}),
    "dimensional_value": frozenset(), "any": frozenset(ENTITY_KINDS),
}

# The cascade's rungs, in order (reference/run-summary.md); overlays count `match` attempts per
# earlier rung.
RUNGS = ("not covered", "coverage unmeasured", "no entities named", "not retrieved",
         "not scored", "delivered, wrong", "delivered, right")
OVERLAY_RUNGS = RUNGS[:4]


def coverage_class(value: str | None) -> CoverageClass:
    """The class of an effective coverage value; anything unrecognised is unknown."""
    if value in COVERED:
        return "covered"
    if value in GAP:
        return "gap"
    if value in ABSENT:
        return "absent"
    if value in UNCLEAR:
        return "unclear"
    return "unknown"


def asked_kinds(target_types: Iterable[str]) -> set[str]:
    """The entity kinds a set of target types asked for; an unknown type asks for itself."""
    kinds: set[str] = set()
    for t in target_types:
        key = t.strip().lower()
        kinds |= KINDS_BY_TARGET.get(key, frozenset({key}) if key else frozenset())
    return kinds


@functools.lru_cache(maxsize=1024)
def _asked_cached(types: tuple[str, ...]) -> frozenset[str]:
    return frozenset(asked_kinds(types))


def call_target_types(call: Mapping[str, Any]) -> list[str]:
    """A get_context call's target types: from `target_shapes`, else the prefix of `targets`."""
    shapes = call.get("target_shapes")
    if isinstance(shapes, list) and shapes:
        return [str(s.get("type", "")) for s in shapes if isinstance(s, dict)]
    targets = call.get("targets")
    types: list[str] = []
    if isinstance(targets, list):
        for t in targets:
            if isinstance(t, str) and ":" in t:
                types.append(t.split(":", 1)[0])
            elif isinstance(t, dict) and t.get("target_type"):
                types.append(str(t["target_type"]))
    return types


# ---------------------------------------------------------------- one attempt

@dataclass
class Delivered:
    """What an attempt's get_context calls delivered, pooled over every call."""
    returned: dict[str, None] = field(default_factory=dict)  # entity ids, response order, no repeats
    doc_tokens: set[str] = field(default_factory=set)       # lower-cased
    asked: set[str] = field(default_factory=set)
    calls: int = 0

    def add_call(self, call: Mapping[str, Any]) -> None:
        """Pool one get_context tool_call event into this attempt's delivery."""
        self.calls += 1
        summary = call.get("ranked_summary")
        if isinstance(summary, dict):
            ids = summary.get("entity_ids")
            if isinstance(ids, list):
                # Interned: the same few hundred ids recur in every attempt of a run, and one shared
                # copy each keeps memory proportional to attempts, not to calls.
                try:
                    self.returned.update(dict.fromkeys(map(sys.intern, ids)))
                except TypeError:  # an id that is not a string (a hand-edited line): skip it
                    self.returned.update(dict.fromkeys(sys.intern(e) for e in ids
                                                       if isinstance(e, str)))
            tokens = summary.get("doc_tokens")
            if isinstance(tokens, list):
                # A doc token has at least one underscore: a one-word name is never
                # delivered by docs, even when a hand-written or older ledger lists it.
                self.doc_tokens.update(t.lower() for t in tokens if isinstance(t, str) and "_" in t)
        self.asked |= _asked_cached(tuple(call_target_types(call)))


def delivery_route(expected: str, returned: Mapping[str, Any], kind_names: set[tuple[str, str]],
                   doc_tokens: set[str]) -> Route:
    """exact (returned under that id) > alias (same kind and name, any source) > in_docs (its name
    is a doc token) > missing. Only `missing` is a miss."""
    if expected in returned:
        return "exact"
    kind, _, name = split_entity_id(expected)
    if (kind, name) in kind_names:
        return "alias"
    names = {name.lower(), name.rsplit(".", 1)[-1].lower()}
    if names & doc_tokens:
        return "in_docs"
    return "missing"


def expected_groups(expected: Mapping[str, Any] | None) -> tuple[list[list[str]], list[str]]:
    """The groups (each `required` id alone; each `requiredAnyOf` list) and the authored acceptable."""
    expected = expected or {}
    groups: list[list[str]] = [[e] for e in expected.get("required") or () if isinstance(e, str)]
    for members in expected.get("requiredAnyOf") or ():
        if isinstance(members, list):
            ids = [e for e in members if isinstance(e, str)]
            if ids:
                groups.append(ids)
    acceptable = [e for e in expected.get("acceptable") or () if isinstance(e, str)]
    return groups, acceptable


@dataclass(frozen=True)
class RetrievalRow:
    """One attempt's retrieval row, also the `retrieval_score` event body (every key of it)."""
    qid: str
    sample: int | None
    phase: str | None
    verdict: str | None
    failed: bool                  # verdict no_match; near_match, needs_human and null are not
    coverage: str | None          # the raw effective value (authored level or measured verdict)
    coverage_source: CoverageSource
    recall: float | None          # satisfied groups / groups; None with no groups or absent coverage
    precision: float | None       # |returned ∩ acceptable| / |returned|; None when nothing returned
    groups: int
    delivery: dict[str, Route]    # every group member's route
    missing: list[str]            # unmet groups, members joined by " | "
    noise: list[str]              # returned ids outside acceptable, response order
    asked_kinds: list[str]
    where_to_fix: str | None      # failed attempts only
    owner: str | None
    component: str | None
    why: str | None


def score_row(*, qid: str, sample: int | None, phase: str | None, verdict: str | None,
              expected: Mapping[str, Any] | None, coverage: str | None,
              coverage_source: CoverageSource, delivered: Delivered,
              in_model: Mapping[str, bool] | None = None,
              unfindable: Mapping[str, str] | None = None) -> RetrievalRow:
    """Decide one attempt's retrieval row from values. `in_model` is the coverage
    report's word on which expected entities the compiled model holds (None: not measured);
    `unfindable` is check_findable's: entity id -> owner (dataset or model) for an entity that
    get_context does not return even when asked for it by name."""
    groups, acceptable = expected_groups(expected)
    returned = delivered.returned
    kind_names: set[tuple[str, str]] | None = None  # built only when some id was not returned as is
    delivery: dict[str, Route] = {}
    for members in groups:
        for eid in members:
            if eid in delivery:
                continue
            if eid in returned:
                delivery[eid] = "exact"
                continue
            if kind_names is None:
                kind_names = {(k, n) for k, _, n in map(split_entity_id, returned)}
            delivery[eid] = delivery_route(eid, returned, kind_names, delivered.doc_tokens)
    unmet = [members for members in groups if all(delivery[e] == "missing" for e in members)]
    cls = coverage_class(coverage)
    recall = None if not groups or cls == "absent" else (len(groups) - len(unmet)) / len(groups)
    accept = set(acceptable) | {e for members in groups for e in members}
    precision = (sum(1 for e in returned if e in accept) / len(returned)) if returned else None
    missing_kinds = {split_entity_id(e)[0] for members in unmet for e in members}
    failed = verdict == "no_match"
    unmet_ids = [e for members in unmet for e in members]
    where, component, owner, why = attribute(
        failed=failed, verdict=verdict, coverage=coverage, coverage_source=coverage_source,
        groups=len(groups), recall=recall, missing=[" | ".join(m) for m in unmet],
        missing_kinds=missing_kinds, asked=delivered.asked,
        in_model={e: in_model[e] for e in unmet_ids if e in in_model} if in_model else None,
        unfindable=unfindable)
    return RetrievalRow(
        qid=qid, sample=sample, phase=phase, verdict=verdict, failed=failed, coverage=coverage,
        coverage_source=coverage_source, recall=recall, precision=precision, groups=len(groups),
        delivery=delivery, missing=[" | ".join(m) for m in unmet],
        noise=[e for e in returned if e not in accept], asked_kinds=sorted(delivered.asked),
        where_to_fix=where, owner=owner, component=component, why=why)


def reattribute(row: Mapping[str, Any], verdict: str | None,
                in_model: Mapping[str, bool] | None = None) -> RetrievalRow:
    """A stored retrieval row decided again for another verdict (a person settled the attempt):
    what retrieval delivered does not change, only whether and where the failure is attributed.
    `in_model` is the coverage report's word on which missing entities the model holds."""
    missing = list(row.get("missing") or [])
    missing_kinds = {split_entity_id(e.strip())[0] for m in missing for e in m.split(" | ")}
    failed = verdict == "no_match"
    where, component, owner, why = attribute(
        failed=failed, verdict=verdict, coverage=row.get("coverage"),
        coverage_source=row.get("coverage_source") or "none", groups=int(row.get("groups") or 0),
        recall=row.get("recall"), missing=missing, missing_kinds=missing_kinds,
        asked=set(row.get("asked_kinds") or []), in_model=in_model)
    values: dict[str, Any] = {f: row.get(f) for f in _ROW_FIELDS}
    values.update(verdict=verdict, failed=failed, where_to_fix=where, component=component,
                  owner=owner, why=why)
    return RetrievalRow(**values)


# What each gap verdict says is missing, so a `model coverage` attribution names it.
GAP_MEANS = {
    "MISSING": "no query over the model can produce what the question needs",
    "RULE_UNWRITTEN": "the rule for combining or filtering the parts is not written",
    "AMBIGUOUS": "several candidates, and nothing in the model says which one to use",
    "derivable": "no named entity answers it; it is built from parts (the authored label)",
}


def attribute(*, failed: bool, verdict: str | None, coverage: str | None, coverage_source: str,
              groups: int, recall: float | None, missing: list[str], missing_kinds: set[str],
              asked: set[str], in_model: Mapping[str, bool] | None = None,
              unfindable: Mapping[str, str] | None = None
              ) -> tuple[str | None, str | None, str | None, str]:
    """(where_to_fix, component, owner, why) for one row: the first rule of the attribution
    table that applies, for failed attempts only; anything else is never attributed.

    A coverage gap is blamed on the model only for what the model lacks: when the coverage report
    shows the compiled model holds a missing entity (`in_model`), its absence from the answer is
    the ask's or retrieval's, decided as for a covered case, and the why never claims the model
    lacks it."""
    if not failed:
        if verdict == "match" and recall is not None and recall < 1:
            return None, None, None, (f"passed with recall {recall:.2f}: passed, not fully delivered "
                                      f"(missing {', '.join(missing)}); never attributed")
        state = "a pass" if verdict == "match" else "neither a pass nor a failure"
        return None, None, None, f"verdict {verdict or 'null'} is {state}: not attributed"
    cls = coverage_class(coverage)
    cov = f"coverage {coverage or 'unknown'} ({coverage_source})"
    if cls == "absent":
        return ("refusal behaviour", "construction", "agent-skill",
                f"{cov}: the model cannot answer this, so the failure is in how the answerer declined")
    if cls == "unclear":
        return "question unclear", "dataset", "dataset", f"{cov}: the question itself is unclear"
    if groups == 0:
        return ("retrieval not measured", None, None,
                "the case names no expected entities; add expectedEntities.required to measure retrieval")
    if recall is not None and recall >= 1:
        return ("delivered, wrong", "construction", None,
                ("every expected entity reached the answerer; eval-diagnose decides who owns the "
                 "wrong answer (sufficiency first)"))
    short = ", ".join(missing)
    lost = [m for m in missing
            if unfindable and all(e.strip() in unfindable for e in m.split(" | "))]
    if lost:
        owners = {unfindable[e.strip()] for m in lost for e in m.split(" | ")} if unfindable else set()
        owner = "dataset" if owners == {"dataset"} else "model"
        means = ("the set names what the model does not have" if owner == "dataset" else
                 "the model has it, but get_context does not return it even asked by its name")
        return ("unfindable", "dataset" if owner == "dataset" else "get_context/model", owner,
                (f"missing {', '.join(lost)}: unfindable (check_findable): {means}; a set or "
                 "model problem, not the answerer's"))
    in_model = in_model or {}
    present = [e for e, held in in_model.items() if held]
    if cls == "gap" and not present:
        absent = [e for e, held in in_model.items() if not held]
        lacks = f"the compiled model has no {', '.join(absent)}; " if absent else ""
        means = GAP_MEANS.get(str(coverage), "the model cannot express it as asked")
        return ("model coverage", "get_context/model", "model",
                f"{cov}: {lacks}{means} (not delivered: {short})")
    if cls in ("covered", "gap"):
        held = (f"; the compiled model has {', '.join(present)}, so {cov} is about something "
                "else (the rule, a join or a named measure), not this entity" if cls == "gap" else "")
        never = sorted(missing_kinds - asked)
        if never:
            return ("never asked", "agent-call", "agent-skill",
                    (f"missing {short}; the answerer never asked get_context for "
                     f"{', '.join(never)} (asked: {', '.join(sorted(asked)) or 'nothing'}){held}"))
        state = f"{cov}: " if cls == "covered" else ""
        return ("not retrieved", "get_context/model", "model",
                (f"missing {short} although its kind was asked and {state}NOT-RETURNED, the "
                 f"entity exists and its docs did not bring it back{held}"))
    return ("coverage not measured", None, None,
            f"missing {short} and coverage is unknown; run {commands.CHECK_COVERAGE} and pass --coverage")


# ---------------------------------------------------------------- aggregates

def _get(row: Any, key: str) -> Any:
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key)


def cascade_rung(row: Mapping[str, Any] | RetrievalRow) -> str:
    """The one rung of the cascade an attempt stops on."""
    cls = coverage_class(_get(row, "coverage"))
    if cls in ("gap", "absent", "unclear"):
        return "not covered"
    if cls == "unknown":
        return "coverage unmeasured"
    recall = _get(row, "recall")
    if not _get(row, "groups") or recall is None:
        return "no entities named"
    if recall < 1:
        return "not retrieved"
    verdict = _get(row, "verdict")
    if verdict not in DECIDED_VERDICTS:
        return "not scored"
    return "delivered, wrong" if verdict == "no_match" else "delivered, right"


def cascade(rows: Iterable[Mapping[str, Any] | RetrievalRow]) -> dict[str, Any]:
    """The cascade: each attempt on exactly one rung, plus overlays counting the `match`
    attempts that stopped on an earlier rung (so passes = delivered, right + overlays)."""
    rungs = dict.fromkeys(RUNGS, 0)
    overlays = dict.fromkeys(OVERLAY_RUNGS, 0)
    total = passes = 0
    for row in rows:
        rung = cascade_rung(row)
        rungs[rung] += 1
        total += 1
        if _get(row, "verdict") == "match":
            passes += 1
            if rung in overlays:
                overlays[rung] += 1
    return {"rungs": rungs, "overlays": overlays, "total": total, "passes": passes}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(rows: list[RetrievalRow]) -> dict[str, Any]:
    """The retrieval summary; `attributed` equals `failures` by construction."""
    failed = [r for r in rows if r.failed]
    recalls = [r.recall for r in rows if r.recall is not None]
    precisions = [r.precision for r in rows if r.precision is not None]
    by_where = Counter(r.where_to_fix for r in failed if r.where_to_fix)
    return {
        "attempts": len(rows),
        "failures": len(failed),
        "attributed": sum(1 for r in failed if r.where_to_fix),
        "mean_recall": _mean(recalls),
        "mean_precision": _mean(precisions),
        "complete_retrievals": sum(1 for x in recalls if x >= 1),
        "passed_not_fully_delivered": sum(1 for r in rows if r.verdict == "match"
                                          and r.recall is not None and r.recall < 1),
        "failures_by_where_to_fix": dict(sorted(by_where.items())),
        "cascade": cascade(rows),
    }


# ---------------------------------------------------------------- the ledger


@dataclass
class AttemptState:
    """What retrieval keeps per attempt key: memory per attempt, never per event."""
    has_attempt: bool = False
    delivered: Delivered = field(default_factory=Delivered)
    score: Mapping[str, Any] | None = None   # the latest live score
    human: Mapping[str, Any] | None = None   # the latest live human_verdict (a person settled it)
    attempt_id: str | None = None         # the live attempt's event id
    live_retrieval_ids: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str | None:
        """The attempt's effective verdict: the judge's, or a person's who settled it."""
        attempt = {"event_id": self.attempt_id} if self.attempt_id else None
        return effective_verdict(self.score, self.human, attempt).verdict


_KINDS = ("attempt", "tool_call", "score", "retrieval_score", "human_verdict")


def collect_states(events: Iterable[Mapping[str, Any]]) -> dict[AttemptKey, AttemptState]:
    """Fold live events, in ledger order, into what retrieval needs per attempt key: whether it
    has an attempt, what its get_context calls delivered, its live score and human_verdict (for
    its effective verdict) and its live retrieval_score ids. execute_query calls never deliver
    entities."""
    states: dict[AttemptKey, AttemptState] = {}
    for event in events:
        kind = event.get("kind")
        if kind not in _KINDS or (kind == "tool_call" and event.get("tool") != "get_context"):
            continue
        key = well_formed_key(event)
        if key is None:
            continue
        state = states.get(key)
        if state is None:
            state = states[key] = AttemptState()
        if kind == "attempt":
            state.has_attempt = True
            state.attempt_id = event.get("event_id")
        elif kind == "tool_call":
            state.delivered.add_call(event)
        elif kind == "score":
            state.score = event  # the latest live score wins
        elif kind == "human_verdict":
            state.human = event
        elif isinstance(event.get("event_id"), str):
            state.live_retrieval_ids.append(event["event_id"])
    return states


def tied_states(fold_path: Path, problems: list[LineProblem],
                ignored: list[Ignored] | None = None) -> dict[AttemptKey, AttemptState]:
    """`collect_states` over a ledger read in one streaming pass (`ledger.live.TiedFold`), with
    the tie rule applied as `score_view` applies it through the live view: an attempt's score,
    human_verdict and retrieval_score count only when tied to its live attempt (the verdicts it
    did not count go to `ignored`, with why)."""
    fold = TiedFold(fold_path, needles=_NEEDLES, decode=decode_lean)
    states = collect_states(e for e in fold if e.get("kind") == "tool_call")
    problems.extend(fold.problems)
    if ignored is not None:
        ignored.extend(fold.ignored())
    tied: list[Mapping[str, Any]] = []
    for key in fold.attempt_keys():
        tied.append(fold.attempt(key) or {})
        tied += [e for kind in ("score", "human_verdict", "retrieval_score")
                 if (e := fold.tied(kind, key)) is not None]
    for key, state in collect_states(tied).items():
        states.setdefault(key, state)
        states[key].has_attempt, states[key].attempt_id = state.has_attempt, state.attempt_id
        states[key].score, states[key].human = state.score, state.human
        states[key].live_retrieval_ids = state.live_retrieval_ids
    return states


# The lines retrieval decodes: get_context calls first (most lines of a ledger), then the rest of
# its kinds. execute_query calls, issues and voids are never decoded.
_NEEDLES = (b'"get_context"', b'"attempt"', b'"score"', b'"retrieval_score"', b'"human_verdict"')


def _read_report(path: Path, what: str) -> Any:
    """A JSON report another script wrote (`what` names it in errors); InputError naming it."""
    try:
        return jsonl.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot read {what}: "
                                     f"{getattr(exc, 'strerror', None) or exc}") from None
    except ValueError as exc:
        raise InputError(path, getattr(exc, "lineno", None), f"{what} is not JSON") from None


def read_unfindable(path: str | Path) -> dict[str, str]:
    """{entity id: owner} from a check_findable.py --json report (--findable)."""
    report = _read_report(Path(path), "the findable report")
    found = report.get("unfindable") if isinstance(report, dict) else None
    if not isinstance(found, dict):
        raise InputError(Path(path), None, "unfindable: missing or not an object (is this a "
                                           "check_findable.py --json report?)")
    return {str(k): str(v) for k, v in found.items()}


COVERAGE_FIGURES = ("version", "modelSha256", "compiledSurface", "reader", "cases", "decided",
                    "modelled", "coverage", "by_verdict")


@dataclass(frozen=True)
class CoverageReport:
    """A check_coverage report as read from its file: THE one loader of it (every reader of a
    coverage report takes this object, so no two readers can disagree about what is valid)."""

    path: str
    figures: dict[str, Any]                    # the report's headline (COVERAGE_FIGURES)
    verdicts: dict[str, str | None]            # qid -> measured verdict (None = undecided)
    held: dict[str, dict[str, bool]]           # qid -> {expected entity id: held by the model}


def load_coverage_report(path: Path) -> CoverageReport:
    """Read and check a check_coverage report against its schema (coverage_report.schema.json):
    a report that is not JSON or breaks the schema is refused here, in one line naming the file,
    before any scoring or spending."""
    report = _read_report(path, "the coverage report")
    problems = schemas.validate("coverage_report", report)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(path, None, f"not a check_coverage report: {first}{more}")
    verdicts: dict[str, str | None] = {}
    held: dict[str, dict[str, bool]] = {}
    for item in report["cases_detail"]:
        verdicts[item["qid"]] = item.get("verdict")
        ids = item.get("expected_in_model")
        if isinstance(ids, dict):
            held[item["qid"]] = {str(k): v for k, v in ids.items() if isinstance(v, bool)}
    return CoverageReport(str(path), {k: report.get(k) for k in COVERAGE_FIGURES}, verdicts, held)


def effective_coverage(qid: str, authored: str | None,
                       measured: Mapping[str, str | None] | None) -> tuple[str | None, CoverageSource]:
    """The measured verdict, else the authored coverage, else unknown."""
    if measured is not None and measured.get(qid) is not None:
        return measured[qid], "measured"
    if authored is not None:
        return authored, "authored"
    return None, "none"


@dataclass(frozen=True)
class RetrievalResult:
    """score_retrieval's output: the rows, their summary, and what --append wrote."""
    rows: list[RetrievalRow]
    summary: dict[str, Any]
    appended: int = 0
    voided: int = 0
    warnings: list[str] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)  # verdicts not counted, and why

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "summary": self.summary, "ignored": self.ignored}

    @property
    def exit_code(self) -> int:
        return EXIT_OK


def _sort_key(row: RetrievalRow) -> tuple[str, int, int]:
    return (row.qid, row.sample is not None, row.sample or 0)


def score_retrieval(run_dir: str | Path, set_dir: str | Path, *,
                    coverage: CoverageReport | None = None, append: bool = False,
                    findable: str | Path | None = None) -> RetrievalResult:
    """score_retrieval.py: score every live attempt of a run, streaming its ledger so
    memory follows attempts, never events; with `append`, write one retrieval_score per attempt
    in one batch, superseding each attempt's earlier live one."""

    run_dir = Path(run_dir)
    if not (run_dir / RUN_FILE).is_file():
        raise InputError(run_dir / RUN_FILE, None,
                         f"no run.json: not a run folder (create one with {commands.NEW_RUN})")
    eval_set = load_set(Path(set_dir))
    measured, held = (coverage.verdicts, coverage.held) if coverage is not None else (None, {})
    events_path = run_dir / EVENTS_FILE
    if public_loop.ledger_is_public(events_path):
        # This reader decodes only the lines and keys it uses, in the kit's spelling; it does not
        # guess (score_view reads one through a live view, which normalises it).
        raise InputError(events_path, 1, public_loop.refusal("score_retrieval.py"))
    problems: list[LineProblem] = []
    ignored: list[Ignored] = []
    states = tied_states(events_path, problems, ignored)
    run = Run.open(run_dir) if append else None
    unfindable = read_unfindable(findable) if findable is not None else None
    return _score(states, eval_set, measured, held, [str(p) for p in problems], run, str(set_dir),
                  unfindable, ignored)


def score_view(run: Run, eval_set: EvalSet, view: LiveView, *,
               coverage: CoverageReport | None = None, append: bool = False) -> RetrievalResult:
    """Retrieval over the live view a pass already holds (score_run, diagnose): no second read of
    the ledger. `coverage` and `append` as score_retrieval."""
    measured, held = (coverage.verdicts, coverage.held) if coverage is not None else (None, {})
    return _score(collect_states(view.tied_events()), eval_set, measured, held,
                  [str(p) for p in view.problems], run if append else None, str(eval_set.dir),
                  ignored=view.ignored())


def _score(states: Mapping[AttemptKey, AttemptState], eval_set: EvalSet,
           measured: Mapping[str, str | None] | None, held: Mapping[str, Mapping[str, bool]],
           warnings: list[str], run: Run | None, set_label: str,
           unfindable: Mapping[str, str] | None = None,
           ignored: list[Ignored] | None = None) -> RetrievalResult:
    """The rows of every attempt with an attempt event; appended (superseding) when `run` is given.
    `held`: per qid, which expected entities the compiled model holds (the coverage report's)."""
    rows: list[RetrievalRow] = []
    superseded: list[str] = []  # the live retrieval_score ids of the attempts scored now
    for key, state in states.items():
        if not state.has_attempt:
            continue
        case = eval_set.cases.get(key.qid)
        if case is None:
            warnings.append(f"{key.qid}: no such case in {set_label}; attempt skipped")
            continue
        superseded += state.live_retrieval_ids
        value, source = effective_coverage(key.qid, case.coverage, measured)
        rows.append(score_row(qid=key.qid, sample=key.sample, phase=key.phase,
                              verdict=state.verdict, expected=case.expected_entities,
                              coverage=value, coverage_source=source, delivered=state.delivered,
                              in_model=held.get(key.qid), unfindable=unfindable))
    rows.sort(key=_sort_key)
    appended = voided = 0
    if run is not None and rows:
        ids: dict[tuple[str, int | None, str | None], str | None] = {
            (key.qid, key.sample, key.phase): state.attempt_id
            for key, state in states.items()}
        done = run.supersede(superseded,
                             [{"kind": "retrieval_score", **row_fields(row),
                               "attempt_event_id": ids.get((row.qid, row.sample, row.phase))}
                              for row in rows],
                             "superseded by a new score_retrieval row")
        appended, voided = len(done.events), len(done.voids)
    return RetrievalResult(rows=rows, summary=summarize(rows), appended=appended, voided=voided,
                           warnings=warnings, ignored=list(ignored or []))


def row_fields(row: RetrievalRow) -> dict[str, Any]:
    """A row as plain JSON fields (the retrieval_score event body without kind, id and time).
    Every field already holds JSON values, so a shallow copy is the whole conversion."""
    return {f: getattr(row, f) for f in _ROW_FIELDS}


_ROW_FIELDS = tuple(RetrievalRow.__dataclass_fields__)


def dump_json(result: RetrievalResult) -> str:
    """The `--json` document `{rows, summary}` on one line: with 10,000 rows the indented encoder
    (pure Python) would cost more than the scoring itself."""
    return json.dumps({"rows": [row_fields(r) for r in result.rows], "summary": result.summary,
                       "ignored": to_jsonable(result.ignored)}, ensure_ascii=False)


def render_text(result: RetrievalResult) -> str:
    """The human rendering: one line per attempt, misses under it, then the summary."""
    lines = [f"{'qid':<24} {'sample':>6} {'coverage':<16} {'verdict':<12} {'recall':>6} {'prec':>6}  where to fix"]
    for r in result.rows:
        lines.append(f"{r.qid:<24} {'-' if r.sample is None else r.sample:>6} {r.coverage or '-'!s:<16} "
                     f"{r.verdict or 'null'!s:<12} {_pct(r.recall):>6} {_pct(r.precision):>6}  "
                     f"{r.where_to_fix or ''}")
        if r.missing:
            lines.append(f"    missing: {'; '.join(r.missing)}")
    s = result.summary
    lines.append("")
    lines.append(f"attempts {s['attempts']}, failures {s['failures']}, attributed {s['attributed']}")
    lines.append(f"complete retrievals {s['complete_retrievals']}; mean recall {_pct(s['mean_recall'])}, "
                 f"mean precision {_pct(s['mean_precision'])}; passed, not fully delivered "
                 f"{s['passed_not_fully_delivered']}")
    if s["failures_by_where_to_fix"]:
        lines.append("where to fix: " + ", ".join(f"{k} {v}" for k, v in s["failures_by_where_to_fix"].items()))
    c = s["cascade"]
    lines.append("cascade: " + ", ".join(f"{k} {v}" for k, v in c["rungs"].items()))
    lines.append("  match attempts stopped earlier: " + ", ".join(f"{k} {v}" for k, v in c["overlays"].items()))
    if result.appended:
        lines.append(f"appended {result.appended} retrieval_score events, voided {result.voided}")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"
