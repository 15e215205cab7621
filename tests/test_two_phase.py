"""The two-phase cycle is one declaration (llm/base.py `TwoPhase`), asked by the judge, the
coverage reader and the diagnoser alike: a provider that declares it is driven emit -> reply ->
ingest through all three, whatever its spec, class or file names. `host` is one such provider;
`Desk` below is another, so nothing can lean on the spec "host" or on HostProvider itself."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import test_coverage as cov
import test_diagnose as diag
from judge_support import make_run, make_set, verdict, write_prediction
from malloy_evals.answer.coverage.reader import CoverageCase, measure
from malloy_evals.answer.scoring import score_attempt
from malloy_evals.core import paths
from malloy_evals.llm.base import (
    EMITTED,
    HostReplyPending,
    LlmReply,
    LlmRequest,
    OneShot,
    Phase,
    Provider,
    reply_from_sample,
)
from malloy_evals.llm.host import HostProvider
from malloy_evals.sets.eval_set import load_set


class Desk(OneShot):
    """A two-phase provider that is not `host`: a person at a desk. Unplaced requests are
    `<folder>/<key>.ask.json`, their replies `<key>.answer.json`; in a folder placed for a key (the
    judge's attempt folder) they are `request.json` and `reply.json`, as TwoPhase.place says."""

    spec = "desk"
    model = "a person at a desk"

    def __init__(self, phase: Phase, root: Path, role: str):
        self.phase: Phase = phase
        self.root, self.role = root, role
        self.cycle = self
        self.placed: dict[str, Path] = {}

    @property
    def folder(self) -> Path:
        return self.root / "desk" / self.role

    def place(self, key: str, folder: Path, root: Path | None = None) -> None:
        self.placed[key] = folder

    def emitter(self) -> Provider:
        return Desk("emit", self.root, self.role)

    def paths(self, key: str) -> tuple[Path, Path]:
        if key in self.placed:
            return self.placed[key] / "request.json", self.placed[key] / "reply.json"
        return self.folder / f"{key}.ask.json", self.folder / f"{key}.answer.json"

    def complete(self, request: LlmRequest) -> LlmReply:
        ask, answer = self.paths(request.key)
        if self.phase == "emit":
            ask.parent.mkdir(parents=True, exist_ok=True)
            ask.write_text(json.dumps(request.to_json()))
            raise HostReplyPending(f"asked {ask.name}")
        if not answer.is_file():
            raise HostReplyPending(f"no {answer.name} yet")
        return reply_from_sample(json.loads(answer.read_text()), source=self.model,
                                 digest=request.digest(model=None))


def host(phase: Phase, root: Path, role: str) -> HostProvider:
    return HostProvider(phase, root, role=role)


def reply_path(provider: Provider, key: str) -> Path:
    """Where the reply to an unplaced request goes, for either provider."""
    if isinstance(provider, Desk):
        return provider.paths(key)[1]
    assert isinstance(provider, HostProvider)
    return provider.files_for(key)[1]


PROVIDERS = [pytest.param(host, id="host"), pytest.param(Desk, id="desk")]


@pytest.mark.parametrize("make", PROVIDERS)
def test_the_judge_emits_then_ingests_through_the_declaration(tmp_path, make):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir, [{"qid": "q_rev", "final_query": "run: x -> {aggregate: r}",
                                        "answer_text": "Revenue is $1,234.50."}])
    write_prediction(run, "q_rev", None, "revenue\n1234.5\n")
    es = load_set(set_dir)

    def score(phase):
        return score_attempt(run, es, "q_rev", None, provider=make(phase, run.dir, "judge"),
                             reexecute=False)

    assert score("ingest").status == "pending"  # nothing emitted yet: nothing decided
    first = score("emit")
    folder = run.artifact_dir("q_rev", None) / "judge"
    assert first.status == "emitted" and (folder / "request.json").is_file()
    (folder / "reply.json").write_text(json.dumps(verdict("no_match", 8, "1,500 is not 1,234.50")))
    done = score("ingest")
    [event] = [e for e in run.read().events if e["kind"] == "score"]
    assert done.verdict == event["verdict"] == "no_match"
    assert event["judge_model"] == make("ingest", run.dir, "judge").model


@pytest.mark.parametrize("make", PROVIDERS)
def test_the_coverage_reader_emits_then_ingests_through_the_declaration(tmp_path, make):
    cases = [CoverageCase("q1", "Revenue?", [])]
    emitted = measure(cases, cov.VIEW, [], make("emit", tmp_path, "coverage"))
    assert emitted.cases_detail[0]["why"].startswith(EMITTED)
    assert (emitted.pending, emitted.exit_code) == (1, 0)
    ingest = make("ingest", tmp_path, "coverage")
    missing = measure(cases, cov.VIEW, [], ingest)
    assert (missing.decided, missing.pending, missing.exit_code) == (0, 0, 3)
    reply_path(ingest, "cov.q1").write_text(json.dumps(cov.reply("MODELLED",
                                                                 ["measure:orders:revenue"])))
    read = measure(cases, cov.VIEW, [], make("ingest", tmp_path, "coverage"))
    assert read.cases_detail[0]["verdict"] == "MODELLED" and read.exit_code == 0


@pytest.mark.parametrize("make", PROVIDERS)
def test_the_diagnoser_emits_ingests_and_asks_for_clusters_through_the_declaration(tmp_path, make):
    set_dir = diag.make_set(tmp_path)
    run = diag.make_run(tmp_path, set_dir)
    emitted = diag.run_diagnose(run.dir, set_dir, lambda d: make("emit", d, "diagnose"))
    assert emitted.exit_code == 0 and emitted.issues_appended == [] and not emitted.diagnoses
    ingest = make("ingest", run.dir, "diagnose")
    for q in ("q1", "q2"):
        reply_path(ingest, f"diag.r1.{q}").write_text(json.dumps(diag.WRONG_FIELD))
    waiting = diag.run_diagnose(run.dir, set_dir, lambda d: make("ingest", d, "diagnose"))
    # The cases are read; the clustering request is first asked now, through the cycle's emitter.
    assert len(waiting.diagnoses) == 2 and waiting.clustered_by.startswith("pending")
    assert waiting.issues_appended == []
    reply_path(ingest, "diag.r1.clusters").write_text(json.dumps(diag.CLUSTERS))
    done = diag.run_diagnose(run.dir, set_dir, lambda d: make("ingest", d, "diagnose"))
    assert done.issues_appended == ["r1:list-price-read-as-revenue"]


def test_no_caller_outside_llm_names_the_host_provider_or_probes_a_provider():
    """The declaration is the only door: outside llm/ nothing imports HostProvider, compares a
    provider's spec or mode with anything, or reads an attribute of a provider with getattr."""
    library = paths.KIT_ROOT / "scripts" / "malloy_evals"
    found = []
    for path in sorted(library.rglob("*.py")):
        if path.parent.name == "llm" or "node_modules" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(library)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and any(a.name == "HostProvider" for a in node.names):
                found.append(f"{where}: imports HostProvider")
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Attribute) and side.attr in ("spec", "mode")
                    for side in (node.left, *node.comparators)):
                found.append(f"{where}: compares a provider's spec or mode")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and node.args \
                    and isinstance(node.args[0], ast.Name) \
                    and node.args[0].id in ("provider", "judge", "inner", "reader", "diagnoser"):
                found.append(f"{where}: probes {node.args[0].id} with {node.func.id}")
    assert found == []
