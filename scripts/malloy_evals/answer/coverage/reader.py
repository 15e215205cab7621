"""Can the model express an answer to each question at all? Decided by reading the model.

No answerer, no judge, no golden, no warehouse query: a reader model (role `coverage`, key
`cov.<qid>`) sees an inventory of the compiled model, the set's conventions, the question and its
`requiresConcepts`, and answers MODELLED or one of the four gap verdicts. The reply rules turn
that answer into a verdict, or into "undecided" when the answer breaks them.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from malloy_evals.answer.coverage.narrow import CaseInventory, how_narrowed, narrow
from malloy_evals.answer.coverage.surface import ModelView, read_local_model, read_served_model
from malloy_evals.answer.retrieval import expected_groups
from malloy_evals.core import cli, codes, files
from malloy_evals.core.errors import EXIT_OK, EXIT_UNMEASURED, KitError, UsageError
from malloy_evals.core.words import shown
from malloy_evals.llm.base import (
    EMITTED,
    LlmRequest,
    NoReply,
    Provider,
    ask,
    last_json_object,
    provider_label,
)
from malloy_evals.llm.select import provider_stats
from malloy_evals.sets.eval_set import CASES_FILE, EvalSet, load_set

ROLE = "coverage"
RULE_KINDS = ("guessable", "arbitrary")


# Above this the prompt is not sent: an instability measured in the reference harness (verdicts
# flip to the pass above ~100 KB of model text) makes an over-long prompt a failed measurement.
MAX_MODEL_CHARS = 250_000
NOT_READ_NO_DESCRIBE = "not read: the package was not compiled"

SYSTEM_TEMPLATE = """\
You decide whether a Malloy semantic model can express the answer to one analytical question.
You are not answering the question and you run nothing: you read the model inventory (or, when the
compiled surface could not be read, the model's source text) and decide one verdict.

Verdicts:
- MODELLED: one entity, or a combination the model documents, expresses every quantity the
  question needs, and nothing in the model leaves a choice open. Name the entities.
- MISSING: no query over this model could produce a quantity the question needs.
- AMBIGUOUS: several candidates could express a quantity and nothing in the model says which.
- RULE_UNWRITTEN: the data is there but the rule for combining or filtering it is not written.
  Say rule_kind "guessable" when the data forces the rule, "arbitrary" when it is a business
  decision (a rule known only from a stated convention is arbitrary).
- UNDERSPECIFIED: the question itself is unclear: more than one reading of it is defensible.

How to decide:
1. List every quantity the question needs (a ratio needs a numerator and a denominator; a
   "per X" needs X; a period needs a date to count it by).
2. For each quantity list EVERY candidate entity in the inventory, by id `kind:source:name`.
3. Rule a candidate out only by quoting the model's own doc that rules it out. A name that
   resembles the question is not a resolution; finding the numerator is not coverage; a caveat is
   not a resolution.
4. Conventions are definitions of terms. Apply one only when the question uses its term; never
   substitute your own reading of a term the conventions or docs define.
5. A compiled field without a doc is undocumented, not absent: every table column a source exposes
   is in the inventory even when the model text never names it.
6. If a quantity keeps more than one candidate after step 3, the verdict is not MODELLED.

Reply with one JSON object and nothing after it:
{"quantities": [{"quantity": "...", "candidates": ["kind:source:name", ...],
  "ruled_out": "the quoted doc that leaves one candidate, or null"}],
 "resolved_by": "the doc or convention that settles any choice, or null",
 "why": "two or three sentences",
 "verdict": "MODELLED | MISSING | AMBIGUOUS | RULE_UNWRITTEN | UNDERSPECIFIED",
 "rule_kind": "guessable | arbitrary | null",
 "entities": ["kind:source:name", ...]}
"""

USER_TEMPLATE = """\
MODEL ({surface_label})
{model}

CONVENTIONS OF THIS SET
{conventions}

QUESTION
{question}

CONCEPTS THE QUESTION NEEDS
{concepts}
"""

# The reader's reply, as structured output (why before verdict, so the verdict follows reasons).
READER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["quantities", "resolved_by", "why", "verdict", "rule_kind", "entities"],
    "properties": {
        "quantities": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["quantity", "candidates", "ruled_out"],
            "properties": {"quantity": {"type": "string"},
                           "candidates": {"type": "array", "items": {"type": "string"}},
                           "ruled_out": {"type": ["string", "null"]}}}},
        "resolved_by": {"type": ["string", "null"]},
        "why": {"type": "string"},
        "verdict": {"type": "string", "enum": list(codes.COVERAGE_VERDICTS)},
        "rule_kind": {"type": ["string", "null"], "enum": [*RULE_KINDS, None]},
        "entities": {"type": "array", "items": {"type": "string"}},
    },
}


def prompt_version() -> str:
    """sha256 of the reader's prompt template: the recording's prompt_version
    (reference/providers.md)."""
    return hashlib.sha256((SYSTEM_TEMPLATE + "\x00" + USER_TEMPLATE).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- the reply rules

@dataclass(frozen=True)
class Reading:
    """One reader reply after the reply rules; verdict None means undecided."""

    verdict: str | None
    why: str
    entities: list[str] = field(default_factory=list)
    rule_kind: str | None = None
    quantities: list[dict] = field(default_factory=list)
    resolved_by: str | None = None
    rejected: str | None = None   # why the reply broke the rules (one of REJECTIONS); None: kept


# Why a reply is rejected (asked again, then left undecided), as the report counts them.
R_NO_JSON = "no JSON object"
R_VERDICT = "verdict not allowed"
R_NO_ENTITY = "MODELLED without an entity"
R_UNKNOWN_ENTITY = "names an entity not in the model"
REJECTIONS = (R_NO_JSON, R_VERDICT, R_NO_ENTITY, R_UNKNOWN_ENTITY)
# Re-asks after a rejected reply, as the judge's default --judge-retries: one.
REPLY_RETRIES = 1


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v.strip() for v in value if isinstance(v, str) and v.strip()]


def _quantities(value: Any) -> list[dict]:
    """Quantities as [{quantity, candidates, ruled_out}]; the older dict form {q: [..]} is read too."""
    if isinstance(value, dict):
        value = [{"quantity": k, "candidates": v, "ruled_out": None} for k, v in value.items()]
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        if not isinstance(item, dict):
            continue
        ruled = item.get("ruled_out")
        out.append({"quantity": str(item.get("quantity") or ""),
                    "candidates": _strings(item.get("candidates")),
                    "ruled_out": ruled.strip() if isinstance(ruled, str) and ruled.strip() else None})
    return out


def read_reply(data: dict | None, text: str = "", known: frozenset[str] | None = None) -> Reading:
    """Apply the reply rules (reference/coverage.md) to one reader reply (structured object, else
    the raw text).

    - a verdict outside MODELLED and the gap verdicts is undecided;
    - an entity (named, or a candidate) that the compiled inventory `known` does not hold makes
      the reply unusable: the reader invented it, and an invented entity would inflate coverage;
    - MODELLED with a quantity holding several candidates, none ruled out and nothing resolving
      them, becomes AMBIGUOUS;
    - MODELLED that names no entity is undecided;
    - rule_kind is kept only for RULE_UNWRITTEN.
    A broken rule sets `rejected`, so the caller can ask again before leaving the case undecided.
    """
    obj = data if isinstance(data, dict) else last_json_object(text or "", "verdict")
    if obj is None:
        return Reading(None, "no JSON object in the reader's reply", rejected=R_NO_JSON)
    raw_verdict = obj.get("verdict")
    why = str(obj.get("why") or "").strip()
    quantities = _quantities(obj.get("quantities"))
    resolved = obj.get("resolved_by")
    resolved_by = resolved.strip() if isinstance(resolved, str) and resolved.strip() else None
    entities = _strings(obj.get("entities"))
    verdict = raw_verdict.strip().upper() if isinstance(raw_verdict, str) else None
    if verdict not in codes.COVERAGE_VERDICTS:
        return Reading(None, f"reader answered verdict {shown(raw_verdict)}, not one of "
                             f"{', '.join(codes.COVERAGE_VERDICTS)}; {why}".strip(),
                       entities, None, quantities, resolved_by, rejected=R_VERDICT)
    unknown = unknown_entities(entities, quantities, known)
    if unknown:
        return Reading(None, f"the reply names {', '.join(unknown)}, not in the compiled model; "
                             f"{why}".strip(), entities, None, quantities, resolved_by,
                       rejected=R_UNKNOWN_ENTITY)
    if verdict == codes.MODELLED:
        open_choices = [q for q in quantities if len(q["candidates"]) > 1 and not q["ruled_out"]]
        if open_choices and resolved_by is None:
            names = ", ".join(q["quantity"] or "?" for q in open_choices)
            return Reading("AMBIGUOUS",
                           f"[several candidates for {names} and nothing in the model resolves "
                           f"them] {why}".strip(), entities, None, quantities, resolved_by)
        if not entities:
            return Reading(None, f"MODELLED without naming an entity that expresses it; {why}"
                           .strip(), entities, None, quantities, resolved_by, rejected=R_NO_ENTITY)
    rule_kind = obj.get("rule_kind") if verdict == "RULE_UNWRITTEN" else None
    if rule_kind not in RULE_KINDS:
        rule_kind = None
    return Reading(verdict, why, entities, rule_kind, quantities, resolved_by)


def unknown_entities(entities: list[str], quantities: list[dict],
                     known: frozenset[str] | None) -> list[str]:
    """The entity ids a reply names (as entities or candidates) that the compiled inventory does
    not hold, in the order named; none when the inventory is unknown (the model text was read)."""
    if known is None:
        return []
    named = [*entities, *(c for q in quantities for c in q["candidates"])]
    return [e for e in dict.fromkeys(named) if e not in known]


@dataclass(frozen=True)
class CaseCoverage:
    """The decided (or undecided) verdict of one case, with every sample's verdict."""

    qid: str
    verdict: str | None
    why: str
    entities: list[str]
    rule_kind: str | None
    samples: list[str | None]
    stable: bool
    quantities: list[dict] = field(default_factory=list)
    resolved_by: str | None = None
    rejected: list[str] = field(default_factory=list)   # each rejected reply's reason class
    calls: int = 0                                      # reader calls made (or, dry run, planned)
    inventory_chars: int | None = None                  # the model part of its request
    narrowing: dict | None = None                       # how its inventory was narrowed
    expected_in_model: dict[str, bool] | None = None    # expectedEntities found in the inventory


def majority(qid: str, readings: list[Reading]) -> CaseCoverage:
    """The verdict of repeated readings: the most frequent; a tie between MODELLED and any other
    outcome (undecided included) goes to the other; two different gaps tied leave it undecided."""
    samples = [r.verdict for r in readings]
    if not readings:
        return CaseCoverage(qid, None, "no reading", [], None, [], False)
    counts = Counter(samples)
    top = max(counts.values())
    tied = [v for v in counts if counts[v] == top]
    gaps = [v for v in tied if v is not None and v != codes.MODELLED]
    stable = len(counts) == 1
    if len(gaps) > 1:
        return CaseCoverage(qid, None, "samples disagreed on which gap: " + ", ".join(sorted(gaps)),
                            [], None, samples, False)
    if len(tied) == 1:
        winner: str | None = tied[0]
    elif gaps:
        winner = gaps[0]
    else:
        winner = None  # MODELLED tied with undecided: the non-MODELLED outcome wins
    chosen = next(r for r in readings if r.verdict == winner)
    why = chosen.why
    if winner is None and len(tied) > 1:
        why = "samples split between MODELLED and undecided; " + why
    return CaseCoverage(qid, winner, why, chosen.entities, chosen.rule_kind, samples, stable,
                        chosen.quantities, chosen.resolved_by)


def render_conventions(conventions: Iterable[Any]) -> str:
    lines = [f"- {c.strip()}" for c in conventions or [] if isinstance(c, str) and c.strip()]
    return "\n".join(lines) if lines else "(none stated)"


NARROWED_LABEL = ("part of the compiled inventory, `kind:source:name (type): doc`: the sources "
                  "holding what a search of the model found for this question's concepts, each "
                  "whole unless it did not fit; other sources of the model are not shown")


def build_request(qid: str, question: str, concepts: list[str], conventions: list[str],
                  view: ModelView, narrowed: CaseInventory | None = None) -> LlmRequest:
    """The reader's LlmRequest for one case: never the golden, never another case. A large
    model's case gets its `narrowed` part of the inventory instead of the whole."""

    label = ("compiled inventory: every entity of every source, `kind:source:name (type): doc`"
             if view.compiled_surface == "read"
             else f"source text; compiled surface {view.compiled_surface}")
    if narrowed is not None:
        label = NARROWED_LABEL
    user = USER_TEMPLATE.format(
        surface_label=label, model=view.text if narrowed is None else narrowed.text,
        conventions=render_conventions(conventions),
        question=question,
        concepts=", ".join(c for c in concepts if isinstance(c, str)) or "(none named)")
    return LlmRequest(role=ROLE, key=f"cov.{qid}", system=SYSTEM_TEMPLATE,
                      messages=[{"role": "user", "content": user}],
                      output_schema=READER_SCHEMA, prompt_version=prompt_version(),
                      max_tokens=2048)


# --------------------------------------------------------------------------- the report

@dataclass(frozen=True)
class CoverageReport:
    """check_coverage's report (reference/schemas/coverage_report.schema.json)."""

    version: str | None
    modelSha256: str | None
    compiledSurface: str
    reader: str | None
    cases: int
    decided: int
    modelled: int
    coverage: float | None        # modelled / decided; None when nothing was decided
    by_verdict: dict[str, int]    # verdict (or "undecided") -> cases
    cases_detail: list[dict]
    labelComparison: dict | None = None
    host_folder: str | None = None  # host: where requests and replies are (printed, not in JSON)
    inventory: dict | None = None   # {chars, limit, narrowed, how}: what the reader was given
    reader_calls: int = 0           # calls made (a dry run: calls it would make)
    rejected_replies: dict[str, int] = field(default_factory=dict)  # reason -> replies rejected
    dry_run: bool = False

    def to_json(self) -> dict:
        doc = {k: getattr(self, k) for k in (
            "version", "modelSha256", "compiledSurface", "reader", "cases", "decided", "modelled",
            "coverage", "by_verdict", "cases_detail", "inventory", "reader_calls",
            "rejected_replies")}
        if self.labelComparison is not None:
            doc["labelComparison"] = self.labelComparison
        if self.dry_run:
            doc["dry_run"] = True
        return doc

    @property
    def pending(self) -> int:
        """Cases whose host request was emitted and awaits its reply (host --emit)."""
        return sum(1 for row in self.cases_detail
                   if str(row.get("why") or "").startswith(EMITTED))

    @property
    def exit_code(self) -> int:
        # Emitting requests is --emit's job, as in score_attempt and diagnose: not "could not
        # measure", as long as every undecided case is waiting for its host reply. A dry run's
        # result is its count of calls, each within the size limit.
        if self.decided or (self.cases and self.pending == self.cases - self.decided):
            return EXIT_OK
        if self.dry_run and self.cases and self.reader_calls:
            return EXIT_OK
        return EXIT_UNMEASURED


def summarise(rows: list[CaseCoverage]) -> dict[str, Any]:
    """cases, decided (verdict not None), modelled, coverage = modelled / decided, by_verdict."""
    decided = [r for r in rows if r.verdict is not None]
    modelled = sum(1 for r in decided if r.verdict == codes.MODELLED)
    by_verdict = Counter(r.verdict or "undecided" for r in rows)
    return {"cases": len(rows), "decided": len(decided), "modelled": modelled,
            "coverage": (modelled / len(decided)) if decided else None,
            "by_verdict": dict(sorted(by_verdict.items()))}


LABEL_NOTE = ("agreement between the authored coverage labels and this measurement; either side can "
              "be the stale one, so a disagreement is a question to settle, not an error of either")


def compare_labels(rows: list[CaseCoverage], labels: dict[str, tuple[str | None, str | None]]
                   ) -> dict[str, Any]:
    """Join measured verdicts with authored labels: agreement means (label covered) equals
    (verdict MODELLED). Undecided and unlabelled cases are not compared."""
    matrix: Counter[tuple[str, str]] = Counter()
    disagree = []
    agree = 0
    for row in rows:
        label, note = labels.get(row.qid, (None, None))
        if row.verdict is None or not label:
            continue
        matrix[(label, row.verdict)] += 1
        if (label == "covered") == (row.verdict == codes.MODELLED):
            agree += 1
        else:
            disagree.append({
                "qid": row.qid, "label": label, "verdict": row.verdict, "coverageNote": note,
                "why": row.why,
                "shape": ("label says covered, model reads as a gap" if label == "covered"
                          else "label says gap, model reads as expressible")})
    compared = sum(matrix.values())
    return {"compared": compared, "agree": agree, "disagree": disagree,
            "matrix": [{"label": k[0], "verdict": k[1], "n": n} for k, n in sorted(matrix.items())],
            "note": LABEL_NOTE if compared else "nothing to compare: no decided case has a label"}


def _row_json(row: CaseCoverage) -> dict:
    return {"qid": row.qid, "verdict": row.verdict, "why": row.why, "entities": row.entities,
            "rule_kind": row.rule_kind, "samples": row.samples, "stable": row.stable,
            "quantities": row.quantities, "resolved_by": row.resolved_by,
            "rejected": row.rejected, "inventory_chars": row.inventory_chars,
            "narrowing": row.narrowing, "expected_in_model": row.expected_in_model}


@dataclass(frozen=True)
class CaseReading:
    """Every reading of one case, with the replies rejected on the way and the calls made."""

    readings: list[Reading]
    rejected: list[str]
    calls: int


def read_case(provider: Provider, request: LlmRequest, repeat: int, known: frozenset[str] | None = None,
              retries: int = REPLY_RETRIES) -> CaseReading:
    """`repeat` readings of one case. A reply that breaks the rules (no JSON, an unknown verdict
    or entity, MODELLED naming nothing) is asked again up to `retries` times, then kept as an
    undecided reading; a provider failure is an undecided reading carrying it."""

    readings: list[Reading] = []
    rejected: list[str] = []
    calls = 0
    for _ in range(repeat):
        for attempt in range(retries + 1):
            calls += 1
            try:
                reply = ask(provider, request)
            except KitError as exc:  # replay miss/stale, budget, gave up: this case is undecided
                failed = Reading(None, f"reader failed: {exc}")
                if rejected and attempt:  # the re-ask found nothing: the rejection is the story
                    failed = Reading(None, f"{readings_why(rejected)}; re-asked, and {failed.why}")
                return CaseReading([*readings, failed], rejected, calls)
            if isinstance(reply, NoReply):
                # --emit wrote the request (a result); --ingest found no reply (nothing decided).
                return CaseReading([*readings, Reading(None, reply.why)], rejected, calls)
            reading = read_reply(reply.data, reply.text, known)
            if reading.rejected is None:
                break
            rejected.append(reading.rejected)
            if attempt == retries:
                break
        readings.append(reading)
    return CaseReading(readings, rejected, calls)


def readings_why(rejected: list[str]) -> str:
    return "reply rejected: " + ", ".join(rejected)


@dataclass(frozen=True)
class CoverageCase:
    """What the reader may see of one case (never the golden), and what only the report uses."""

    qid: str
    question: str
    concepts: list[str]
    label: str | None = None   # authored `coverage`, only for --compare-labels
    note: str | None = None    # authored `coverageNote`, only for --compare-labels
    expected: list[str] = field(default_factory=list)  # expectedEntities ids: never sent, only
    # checked against the compiled inventory, so retrieval can tell a gap from an entity it missed


def measure(cases: list[CoverageCase], view: ModelView, conventions: list[str], provider: Provider, *,
            repeat: int = 1, version: str | None = None, compare: bool = False,
            parallel: int = 4, progress: Callable[[str], None] | None = None,
            dry_run: bool = False, limit: int = MAX_MODEL_CHARS) -> CoverageReport:
    """Read every case against one model view and build the report. A model whose inventory is
    over `limit` characters is narrowed per case (narrow.py) when the view has a search; with
    `dry_run` every request is built and counted, and none is sent."""
    if repeat < 1:
        raise UsageError("--repeat must be at least 1")
    known = view.entity_ids
    narrowing = len(view.text) > limit and view.search is not None and view.surface is not None

    def one(case: CoverageCase) -> CaseCoverage:
        expected = ({e: e in known for e in case.expected} if known is not None and case.expected
                    else None)
        narrowed = (narrow(view.surface or {}, view.search, case.concepts, case.question, limit)
                    if narrowing and view.search is not None else None)
        chars = len(narrowed.text) if narrowed is not None else len(view.text)
        shape: dict[str, Any] = {"inventory_chars": chars, "expected_in_model": expected,
                 "narrowing": narrowed.to_json() if narrowed is not None else None}
        if chars > limit:
            return CaseCoverage(case.qid, None, f"model too large to read in one prompt "
                                f"({chars} chars > {limit}) and no search to narrow it: a failed "
                                "measurement, not a gap", [], None, [], False, **shape)
        request = build_request(case.qid, case.question, case.concepts, conventions, view,
                                narrowed)
        if dry_run:
            return CaseCoverage(case.qid, None, f"dry run: {repeat} request(s) of "
                                f"{len(request.messages[0]['content'])} characters, not sent",
                                [], None, [], False, calls=repeat, **shape)
        read = read_case(provider, request, repeat, known)
        row = replace(majority(case.qid, read.readings), rejected=read.rejected,
                      calls=read.calls, **shape)
        if progress:
            progress(f"cov {case.qid}: {row.verdict or 'undecided'}")
        return row

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        rows = list(pool.map(one, cases))
    summary = summarise(rows)
    comparison = None
    if compare:
        comparison = compare_labels(rows, {c.qid: (c.label, c.note) for c in cases})
    inventory = {"chars": len(view.text), "limit": limit, "narrowed": narrowing,
                 "how": (how_narrowed(len(view.text), limit) if narrowing else
                         "every case gets the whole inventory" if len(view.text) <= limit else
                         "too large for one prompt, and this model has no search to narrow it "
                         "(a served package is read whole): nothing was sent")}
    return CoverageReport(
        version=version, modelSha256=view.model_sha256, compiledSurface=view.compiled_surface,
        reader=provider_label(provider), cases=summary["cases"], decided=summary["decided"],
        modelled=summary["modelled"], coverage=summary["coverage"],
        by_verdict=summary["by_verdict"], cases_detail=[_row_json(r) for r in rows],
        labelComparison=comparison, inventory=inventory,
        reader_calls=sum(r.calls for r in rows),
        rejected_replies=dict(sorted(Counter(x for r in rows for x in r.rejected).items())),
        dry_run=dry_run)


# --------------------------------------------------------------------------- the script's one call

def host_folder(out: Path | None, set_dir: Path) -> Path:
    """The folder a `host` reader's requests and replies live under: beside the `--out` report,
    else one fixed folder per set in the system's temporary folder. Never the current folder, so
    `--emit` and `--ingest` given the same `--out` (or none) meet wherever they run from, and a
    checkout is never written to."""
    if out is not None:
        return Path(out).resolve().parent
    resolved = Path(set_dir).resolve()
    tag = hashlib.sha256(str(resolved).encode("utf-8")).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / "malloy-evals-coverage" / f"{resolved.name}-{tag}"


def host_root(out: Path | None) -> Path:
    """The folder `host_folder` is walked from without following links: --out's folder (the
    user's choice, taken as given), else the system's temporary folder, where anyone may have
    planted a link in the host folder's place."""
    return Path(out).resolve().parent if out is not None else Path(tempfile.gettempdir())


# A convention says what it applies to either in words ("applies to ...") or as a leading
# "<term>: <definition>" label, the way the sample set writes them.
_CONVENTION_SCOPE = re.compile(r"\bappl(y|ies)\b|^[^:]{1,80}:\s", re.IGNORECASE)


def check_coverage(set_dir: Path, provider_factory: Callable[[], Provider], *,
                   model_dir: Path | None = None, publisher_url: str | None = None,
                   environment: str | None = None, package: str | None = None,
                   repeat: int = 1, only: list[str] | None = None, version: str | None = None,
                   out: Path | None = None, compare: bool = False, dry_run: bool = False,
                   warn: Callable[[str], None] | None = None) -> CoverageReport:
    """check_coverage end to end (reference/coverage.md): startup check, the set's cases, the
    model view, the reader, the report.

    `provider_factory` is called only after the startup check, so a broken code table stops the
    script before any provider (or host request) is set up.
    """
    codes.check_gap_verdicts()

    eval_set = load_set(set_dir)
    cases = _coverage_cases(eval_set, only)
    conventions = eval_set.config.get("conventions") or []
    if isinstance(conventions, str):  # a single string is a list of one
        conventions = [conventions]
    for i, conv in enumerate(conventions):
        if warn and isinstance(conv, str) and not _CONVENTION_SCOPE.search(conv):
            warn(f"set.json: conventions[{i}] states no scope (say what it applies to)")
    if model_dir is not None:
        view = read_local_model(model_dir, search_over=MAX_MODEL_CHARS)
    elif publisher_url:
        view = read_served_model(publisher_url, environment or eval_set.environment,
                                 package or eval_set.target_package)
    else:
        raise UsageError("give --model DIR or --publisher-url URL --environment E --package P")
    if warn and view.compiled_surface != "read":
        warn(f"compiled surface {view.compiled_surface}; the reader gets the model text, where "
             "implicitly exposed columns read as absent")
    try:
        provider = provider_factory()
        report = measure(cases, view, conventions, provider, repeat=repeat, version=version,
                         compare=compare, progress=warn, dry_run=dry_run)
    finally:
        if view.close is not None:
            view.close()
    if warn and report.inventory and report.inventory["narrowed"]:
        warn(f"inventory narrowed per case: {report.inventory['how']}")
    cycle = provider.cycle
    if cycle is not None and cycle.folder is not None:
        report = replace(report, host_folder=str(cycle.folder))
        if warn:
            done = ("wrote the reader requests into" if cycle.phase == "emit"
                    else "read the host replies from")
            warn(f"host: {done} {cycle.folder}")

    stats = provider_stats(provider)
    if warn and stats:  # calls, tokens and dollars (a --dry-run's estimate) on stderr
        warn(f"reader calls: {json.dumps(stats, sort_keys=True)}")
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        files.replace(out, cli.dumps(report) + "\n")
    return report


def _coverage_cases(eval_set: EvalSet, only: list[str] | None) -> list[CoverageCase]:
    """The cases to read, in file order; --only naming an unknown qid is exit 3."""
    cases = list(eval_set.cases.values())
    if only:
        cli.check_known(only, eval_set.cases, where=eval_set.dir / CASES_FILE)
        wanted = set(only)
        cases = [c for c in cases if c.qid in wanted]
    return [CoverageCase(c.qid, c.question, c.requires_concepts, c.coverage, c.coverage_note,
                         expected_ids(c.expected_entities)) for c in cases]


def expected_ids(expected: Any) -> list[str]:
    """Every id a case's expectedEntities names (required, each requiredAnyOf member), in order."""
    groups, _ = expected_groups(expected if isinstance(expected, dict) else None)
    return list(dict.fromkeys(e for group in groups for e in group))


def render_text(report: CoverageReport) -> str:
    """The console report: one line per case, then the figure; never the word for a score."""
    lines = []
    rows = sorted(report.cases_detail, key=lambda r: (r["verdict"] or "~", r["qid"]))
    for r in rows:
        kind = f" ({r['rule_kind']})" if r.get("rule_kind") else ""
        lines.append(f"{r['verdict'] or 'undecided':<15} {r['qid']}{kind}: {r['why']}")
    pct = "n/a" if report.coverage is None else f"{100 * report.coverage:.0f}%"
    lines.append(f"coverage {pct} ({report.modelled} MODELLED of {report.decided} decided; "
                 f"{report.cases} cases) at version {report.version or '(unlabelled)'}; compiledSurface: "
                 f"{report.compiledSurface}; reader {report.reader}")
    lines.append("  " + ", ".join(f"{k} {v}" for k, v in report.by_verdict.items()))
    if report.labelComparison is not None:
        lc = report.labelComparison
        lines.append(f"labels vs measurement: {lc['agree']} of {lc['compared']} agree. {lc['note']}")
        for d in lc["disagree"]:
            lines.append(f"  {d['qid']}: label {d['label']}, measured {d['verdict']} ({d['shape']})")
    if not report.decided and report.exit_code == EXIT_OK:
        lines.append(f"emitted {report.pending} reader request(s) into {report.host_folder}: a "
                     "host subagent writes each <key>.reply.json beside its request; then run "
                     "the same command with --ingest (and the same --out)")
    elif not report.decided:
        where = f" (looked for replies in {report.host_folder})" if report.host_folder else ""
        lines.append(f"nothing decided: no measurement{where} (exit 3)")
    return "\n".join(lines)
