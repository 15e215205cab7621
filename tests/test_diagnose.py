"""eval-diagnose: selection buckets, reply validation, clustering, issue events, cluster_failures."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import pytest
from malloy_evals.core import codes, paths, schemas
from malloy_evals.core.errors import InputError, UsageError
from malloy_evals.diagnose import issues as diagnose_issues
from malloy_evals.diagnose import mechanical as diagnose_mechanical
from malloy_evals.diagnose import replies as diagnose_replies
from malloy_evals.diagnose import run as diagnose_run
from malloy_evals.diagnose import selection as diagnose_selection
from malloy_evals.diagnose.replies import Diagnosis, Undiagnosed
from malloy_evals.diagnose.selection import Bucketed
from malloy_evals.ledger.run import Run
from malloy_evals.llm.base import LlmReply, OneShot, RecordingMissing
from malloy_evals.workflow.outputs import RunOutputs


def run_diagnose(run_dir, set_dir, factory, **kw):
    """diagnose_run over the run as its outputs' owner loads it (as diagnose.py does)."""
    o = RunOutputs.load(Path(run_dir), Path(set_dir))
    return diagnose_run.diagnose_run(o.run, o.eval_set, o.view, factory, **kw)

from script_support import run_outcome
from tie_support import tied

DIAGNOSE = paths.KIT_ROOT / "skills" / "eval-diagnose" / "scripts" / "diagnose.py"
CLUSTER_FAILURES = paths.KIT_ROOT / "skills" / "eval-diagnose" / "scripts" / "cluster_failures.py"
TABLE = codes.load_codes()


# ---------------------------------------------------------------- selection (pure)

def attempt(qid, sample=None, **kw):
    return {"kind": "attempt", "event_id": f"att-{qid}-{sample}", "qid": qid, "sample": sample,
            "phase": "baseline", **kw}


def score(qid, verdict, sample=None, **kw):
    # Bound to the attempt `attempt(qid, sample)` makes (ledger/ties.py)
    return {"kind": "score", "qid": qid, "sample": sample, "phase": "baseline", "verdict": verdict,
            "attempt_event_id": f"att-{qid}-{sample}", **kw}


EVENTS = [
    attempt("f1"), score("f1", "no_match"),
    attempt("f2"), score("f2", "no_match"),
    attempt("f3"), score("f3", "no_match"),
    attempt("p1"), score("p1", "match"),
    attempt("r1"), score("r1", "match"),                          # a pass with a retrieval miss
    attempt("n1"), score("n1", "near_match"),
    attempt("c1", contaminated="unknown"), score("c1", "no_match"),
    attempt("u1"), score("u1", None, reason="judge_unparseable"),
    attempt("u2"),                                                # never scored
    attempt("h1"), score("h1", "no_match"),                       # holdout
]
SPLITS = {q: "dev" for q in ("f1", "f2", "f3", "p1", "r1", "n1", "c1", "u1", "u2")} | {"h1": "holdout"}
MISSES = {("r1", None, "baseline"): True, ("p1", None, "baseline"): False}


def select(**kw):
    return diagnose_selection.select_cases(EVENTS, SPLITS, retrieval_misses=MISSES, **kw)


def reasons(selection):
    return {b.qid: b.reason for b in selection.excluded}


def test_every_attempt_lands_in_exactly_one_bucket():
    s = select()
    keys = [b.qid for b in s.failed + s.passed + s.retrieval_only + s.excluded]
    assert sorted(keys) == sorted({e["qid"] for e in EVENTS}) and len(keys) == len(set(keys))
    assert [b.qid for b in s.failed] == ["f1", "f2", "f3"]
    assert [b.qid for b in s.passed] == ["p1"] and [b.qid for b in s.retrieval_only] == ["r1"]


def test_contaminated_and_unscored_are_excluded_with_their_reason():
    r = reasons(select())
    assert r["c1"] == "contaminated"
    assert r["u1"] == "unscored: judge_unparseable"
    assert r["u2"] == "unscored: no score event"
    assert r["h1"] == "holdout"
    assert r["n1"] == "verdict not selected: near_match"


def test_a_verdict_a_person_settled_is_the_one_selection_reads():
    settled = [{"kind": "human_verdict", "qid": "n1", "sample": None, "phase": "baseline",
                "verdict": "no_match", "why": "list price", "settled_by": "Dana",
                "attempt_event_id": "att-n1-None"},
               {"kind": "human_verdict", "qid": "f1", "sample": None, "phase": "baseline",
                "verdict": "match", "why": "rows agree", "settled_by": "Dana",
                "attempt_event_id": "att-f1-None"}]
    s = diagnose_selection.select_cases(EVENTS + settled, SPLITS, retrieval_misses=MISSES)
    assert [b.qid for b in s.failed] == ["f2", "f3", "n1"]
    assert "f1" in [b.qid for b in s.passed]


def test_contamination_outranks_the_split():
    events = [attempt("x", contaminated=True), score("x", "no_match")]
    s = diagnose_selection.select_cases(events, {"x": "holdout"})
    assert reasons(s) == {"x": "contaminated"}


def test_limit_zero_selects_nothing_and_keeps_every_attempt_counted():
    whole, none = select(), select(limit=0)
    assert none.selected == [] and none.selected_qids == []
    assert none.total == whole.total == 10
    # 3 failures + near_match + contaminated + 2 unscored + holdout; passes never count
    assert none.non_passing == whole.non_passing == 3 + 1 + 1 + 2 + 1
    assert reasons(none)["f1"] == "beyond the limit: --limit 0"


@pytest.mark.parametrize("kw", [
    pytest.param({"limit": 1}, id="limit"),
    pytest.param({"only": ["f2"]}, id="only"),
    pytest.param({"only": ["f2", "r1"], "limit": 1}, id="only-and-limit"),
])
def test_narrowing_never_shrinks_the_denominator(kw):
    whole, narrow = select(), select(**kw)
    assert narrow.total == whole.total
    assert narrow.non_passing == whole.non_passing
    assert len(narrow.selected_qids) == 1


def test_only_records_the_cases_it_drops():
    r = reasons(select(only=["f2"]))
    assert r["f1"] == r["f3"] == r["r1"] == "not named in --only"


def test_split_all_lets_holdout_in_and_verdicts_widen_the_failures():
    s = select(split="all", verdicts=["no_match", "near_match"])
    assert {b.qid for b in s.failed} == {"f1", "f2", "f3", "h1", "n1"}


def test_unknown_verdict_for_selection_is_a_usage_error():
    with pytest.raises(UsageError, match="match"):
        select(verdicts=["match"])


# ---------------------------------------------------------------- reply validation

def good(**kw):
    obj = {"reasoning": "r", "component": "get_context/model", "primary_code": "NOT-RETURNED",
           "contributing_codes": ["LOW-RANK"], "owner": "model", "sufficiency": "insufficient",
           "severity": "high", "confidence": "medium", "diagnosis": "region doc silent"}
    obj.update(kw)
    return obj


def test_valid_reply_becomes_a_diagnosis():
    d = diagnose_replies.validate_diagnosis("q1", good(), TABLE)
    assert isinstance(d, Diagnosis) and (d.primary_code, d.owner) == ("NOT-RETURNED", "model")


@pytest.mark.parametrize("change, says", [
    pytest.param({"primary_code": "COVERAGE"}, "COVERAGE", id="retired-code"),
    pytest.param({"primary_code": "INVENTED"}, "INVENTED", id="invented-code"),
    pytest.param({"contributing_codes": ["NO-DISAMBIG"]}, "NO-DISAMBIG", id="contributing-outside"),
    pytest.param({"owner": "retrieval"}, "owner", id="owner-not-the-codes"),
    pytest.param({"owner": "engine"}, "owner", id="owner-outside-vocabulary"),
    pytest.param({"component": "construction"}, "component", id="component-not-the-codes"),
    pytest.param({"severity": "critical"}, "severity", id="severity-outside"),
    pytest.param({"diagnosis": ""}, "empty diagnosis", id="empty"),
])
def test_reply_outside_the_table_is_rejected_naming_why(change, says):
    u = diagnose_replies.validate_diagnosis("q1", good(**change), TABLE)
    assert isinstance(u, Undiagnosed) and u.reason.startswith("rejected") and says in u.reason


def test_construction_without_sufficiency_is_rejected():
    u = diagnose_replies.validate_diagnosis("q1", good(component="construction", primary_code="WRONG-FIELD",
                                               owner="agent-skill", sufficiency="unknown"), TABLE)
    assert isinstance(u, Undiagnosed) and "sufficiency first" in u.reason


# ---------------------------------------------------------------- clustering

def diag(qid, code="NOT-RETURNED", owner="model", component="get_context/model"):
    return Diagnosis(qid, component, code, [], owner, "insufficient", "medium", "high", f"d {qid}", "r")


def cluster(cid, qids, code="NOT-RETURNED", owner="model", component="get_context/model"):
    return {"cluster_id": cid, "qids": qids, "primary_code": code, "contributing_codes": [],
            "component": component, "owner": owner, "root_cause": "region docs silent",
            "evidence": "e", "confidence": "high"}


DIAGS = [diag("a"), diag("b"), diag("c", "WRONG-FIELD", "agent-skill", "construction")]


def test_valid_clusters_are_taken():
    got = diagnose_issues.validate_clusters(
        {"clusters": [cluster("region-doc-silent", ["a", "b"]),
                      cluster("picked-list-price", ["c"], "WRONG-FIELD", "agent-skill",
                              "construction")]}, DIAGS, TABLE)
    assert [c.cluster_id for c in got] == ["region-doc-silent", "picked-list-price"]


@pytest.mark.parametrize("clusters, says", [
    pytest.param([cluster("add-region-synonyms", ["a", "b"]), cluster("x", ["c"], "WRONG-FIELD",
                  "agent-skill", "construction")], "prescribes", id="remedy-id"),
    pytest.param([cluster("region", ["a", "b", "c"])], "keep owners apart", id="mixed-owners"),
    pytest.param([cluster("region", ["a", "b"])], "in no cluster", id="qid-left-out"),
    pytest.param([cluster("r1", ["a", "b"]), cluster("r2", ["b"]), cluster("x", ["c"], "WRONG-FIELD",
                  "agent-skill", "construction")], "more than one", id="qid-twice"),
    pytest.param([cluster("Region Docs", ["a", "b", "c"])], "slug", id="not-a-slug"),
])
def test_bad_clusters_are_rejected(clusters, says):
    got = diagnose_issues.validate_clusters({"clusters": clusters}, DIAGS, TABLE)
    assert isinstance(got, str) and says in got


def test_issue_events_take_the_worst_member_severity_and_validate():
    clusters = [diagnose_issues.Cluster("region-doc-silent", ["a", "b"], "NOT-RETURNED", [],
                                 "get_context/model", "model", "docs silent", "e", "high")]
    members = [diag("a"), Diagnosis("b", "get_context/model", "NOT-RETURNED", ["LOW-RANK"], "model",
                                    "unknown", "high", "low", "d", "r")]
    events = diagnose_issues.issue_events("run1", clusters, members, "diagnose.py fake")
    issue, status = events
    assert issue["issue_id"] == "run1:region-doc-silent" and status["status"] == "open"
    assert (issue["severity"], issue["sufficiency"]) == ("high", "unknown")
    assert issue["contributing_codes"] == ["LOW-RANK"]
    for e in events:
        assert schemas.validate_event({**e, "event_id": "e1", "at": "2026-01-01T00:00:00Z"}) == []


# ---------------------------------------------------------------- diagnose_run on a real ledger

class FakeDiagnoser(OneShot):
    """A Provider of our protocol: per-case replies by qid, and a clustering reply."""

    spec = "fake"
    model = "fake-diagnoser"

    def __init__(self, per_case: dict, clusters: dict | None = None):
        self.per_case, self.clusters, self.requests = per_case, clusters, []

    def complete(self, request):
        self.requests.append(request)
        qid = request.key.rsplit(".", 1)[1]
        data = self.clusters if qid == "clusters" else self.per_case.get(qid)
        if data is None:
            raise RecordingMissing(f"no reply for {request.key}")
        return LlmReply(json.dumps(data), data, "fake-diagnoser",
                        request.digest(model="fake-diagnoser"))


def make_set(tmp_path: Path) -> Path:
    s = tmp_path / "set"
    s.mkdir()
    (s / "set.json").write_text(json.dumps({"name": "tiny", "datasetVersion": 1,
                                            "targetPackage": "shop", "targetModelPath": "shop.malloy"}))
    cases = [{"qid": q, "question": f"question {q}?", "coverage": "covered",
              "expectedEntities": {"required": ["measure:orders:revenue"]},
              "golden": {"kind": "scalar", "value": {"v": f"GOLDEN-{q.upper()}"},
                         "mustNotUse": ["books.list_price"]}}
             for q in ("q1", "q2", "q3")]
    (s / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return s


def make_run(tmp_path: Path, set_dir: Path) -> Run:
    run = Run.create(tmp_path / "run", set_dir, "answerer-x", run_id="r1")
    events = []
    for q, verdict in (("q1", "no_match"), ("q2", "no_match"), ("q3", "match")):
        events.append({"kind": "attempt", "event_id": f"att-{q}", "qid": q, "sample": None,
                       "submitted": True,
                       "final_query": "run: orders -> {aggregate: books.list_price.sum()}",
                       "answer_text": f"answer {q}", "n_get_context": 1})
        events.append({"kind": "tool_call", "qid": q, "sample": None, "tool": "get_context",
                       "call_index": 0, "targets": ["measure: sales"],
                       "target_shapes": [{"type": "measure", "has_text": True}],
                       "ranked_summary": {"entity_ids": ["measure:orders:revenue"], "hits": [],
                                          "result_count": 1, "doc_tokens": []}})
        events.append(tied(run.dir, {"kind": "score", "qid": q, "sample": None,
                                     "verdict": verdict, "why": f"judge why {q}",
                                     "confidence": 8}, f"att-{q}"))
    run.append(events)
    return run


WRONG_FIELD = good(component="construction", primary_code="WRONG-FIELD", owner="agent-skill",
                   sufficiency="sufficient", contributing_codes=[], diagnosis="used list price")
CLUSTERS = {"reasoning": "one cause", "clusters": [
    cluster("list-price-read-as-revenue", ["q1", "q2"], "WRONG-FIELD", "agent-skill",
            "construction")]}


def test_run_is_diagnosed_clustered_and_written_as_issues(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    fake = FakeDiagnoser({"q1": WRONG_FIELD, "q2": WRONG_FIELD}, CLUSTERS)
    result = run_diagnose(run.dir, set_dir, lambda d: fake)
    assert [d.qid for d in result.diagnoses] == ["q1", "q2"] and result.exit_code == 0
    assert result.clustered_by == "diagnoser"
    issues = [e for e in Run.open(run.dir).live() if e["kind"] == "issue"]
    assert [i["issue_id"] for i in issues] == ["r1:list-price-read-as-revenue"]
    assert issues[0]["diagnosed_by"].startswith("diagnose.py")
    keys = [r.key for r in fake.requests]  # cases run in parallel; clustering comes after them
    assert sorted(keys[:2]) == ["diag.r1.q1", "diag.r1.q2"] and keys[2] == "diag.r1.clusters"


def test_packet_holds_only_its_own_cases_golden(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    fake = FakeDiagnoser({"q1": WRONG_FIELD, "q2": WRONG_FIELD}, CLUSTERS)
    run_diagnose(run.dir, set_dir, lambda d: fake)
    q1 = next(r for r in fake.requests if r.key == "diag.r1.q1").messages[0]["content"]
    assert "GOLDEN-Q1" in q1 and "GOLDEN-Q2" not in q1 and "GOLDEN-Q3" not in q1
    assert "judge why q1" in q1 and "books.list_price" in q1  # judge why and the veto hit


def test_rerun_voids_only_its_own_earlier_issues(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    theirs = run.append_event({"kind": "issue", "issue_id": "person:x", "qids": ["q1"],
                               "primary_code": "MISSING", "component": "get_context/model",
                               "owner": "model", "diagnosis": "filed by a person"})
    fake = lambda d: FakeDiagnoser({"q1": WRONG_FIELD, "q2": WRONG_FIELD}, CLUSTERS)
    first = run_diagnose(run.dir, set_dir, fake)
    second = run_diagnose(run.dir, set_dir, fake)
    assert (first.issues_voided, second.issues_voided) == (0, 1)
    live = [e for e in Run.open(run.dir).live() if e["kind"] == "issue"]
    assert sorted(e["issue_id"] for e in live) == ["person:x", "r1:list-price-read-as-revenue"]
    assert theirs["event_id"] in {e["event_id"] for e in live}


def _rescore(run, qid, verdict):
    """A corrected attempt's new score: the old live score voided, the new one appended."""
    old = next(e for e in run.live() if e["kind"] == "score" and e["qid"] == qid)
    run.append([{"kind": "void", "target_event_id": old["event_id"], "reason": "re-scored"},
                tied(run.dir, {"kind": "score", "qid": qid, "sample": None, "verdict": verdict,
                               "why": f"judge why {qid}", "confidence": 9})])


@pytest.fixture
def diagnosed(tmp_path):
    """(set, run, diagnoser) after one diagnose pass: q1 and q2 in one open issue."""
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    fake = lambda d: FakeDiagnoser({"q1": WRONG_FIELD, "q2": WRONG_FIELD}, CLUSTERS)
    run_diagnose(run.dir, set_dir, fake)
    return set_dir, run, fake


def test_issue_whose_cases_all_pass_now_is_marked_fixed_naming_the_passing_attempts(diagnosed):
    # Issue 16 item 5: after a corrected attempt passed, diagnosis selected nothing and left the
    # earlier `open` issue live.
    set_dir, run, fake = diagnosed
    _rescore(run, "q1", "match")
    _rescore(run, "q2", "match")
    result = run_diagnose(run.dir, set_dir, fake)
    assert result.selection.selected_qids == [] and result.issues_appended == []
    assert result.issues_fixed == ["r1:list-price-read-as-revenue"] and result.open_issues == []
    live = Run.open(run.dir).live()
    [status] = [e for e in live if e["kind"] == "issue_status" and e["status"] == "fixed"]
    attempts = {e["qid"]: e["event_id"] for e in live if e["kind"] == "attempt"}
    assert status["passing_attempt_ids"] == [attempts["q1"], attempts["q2"]]
    assert schemas.validate_event(status) == []
    assert "open issues: none" in diagnose_run.render_text(result)
    again = run_diagnose(run.dir, set_dir, fake)
    assert again.issues_fixed == []  # fixed once; a later pass leaves it alone


def test_issue_with_a_case_still_failing_is_not_fixed(diagnosed):
    set_dir, run, _ = diagnosed
    _rescore(run, "q1", "match")
    result = run_diagnose(run.dir, set_dir, lambda d: FakeDiagnoser({"q2": WRONG_FIELD}))
    assert result.issues_fixed == []
    assert [i["issue_id"] for i in result.open_issues] == ["r1:wrong-field-q2"]


def test_a_fixed_issue_is_marked_fixed_not_voided_when_other_cases_are_rediagnosed(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    # No clustering reply: one issue per case.
    first = run_diagnose(run.dir, set_dir, lambda d: FakeDiagnoser(
        {"q1": WRONG_FIELD, "q2": WRONG_FIELD}))
    assert first.issues_appended == ["r1:wrong-field-q1", "r1:wrong-field-q2"]
    q1_issue = next(e for e in run.live() if e["kind"] == "issue" and e["qids"] == ["q1"])
    _rescore(run, "q1", "match")
    result = run_diagnose(run.dir, set_dir, lambda d: FakeDiagnoser({"q2": WRONG_FIELD}))
    assert result.issues_fixed == ["r1:wrong-field-q1"] and result.issues_voided == 1
    assert q1_issue["event_id"] in {e["event_id"] for e in Run.open(run.dir).live()}
    assert [i["issue_id"] for i in result.open_issues] == ["r1:wrong-field-q2"]


def test_replies_outside_the_table_leave_cases_undiagnosed_and_exit_3(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    bad = good(primary_code="CONVENTION")
    result = run_diagnose(run.dir, set_dir, lambda d: FakeDiagnoser({"q1": bad, "q2": bad}))
    assert result.diagnoses == [] and len(result.undiagnosed) == 2
    assert all("CONVENTION" in u.reason for u in result.undiagnosed)
    assert result.exit_code == 3
    assert not [e for e in Run.open(run.dir).live() if e["kind"] == "issue"]


def test_rejected_clustering_falls_back_to_one_issue_per_case(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    remedy = {"reasoning": "", "clusters": [cluster("use-unit-price", ["q1", "q2"], "WRONG-FIELD",
                                                     "agent-skill", "construction")]}
    result = run_diagnose(run.dir, set_dir,
                                   lambda d: FakeDiagnoser({"q1": WRONG_FIELD, "q2": WRONG_FIELD}, remedy))
    assert result.clustered_by.startswith("fallback: cluster id 'use-unit-price' prescribes")
    assert len(result.issues_appended) == 2


def test_limit_zero_diagnoses_nothing_and_calls_nothing(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    fake = FakeDiagnoser({})
    result = run_diagnose(run.dir, set_dir, lambda d: fake, limit=0)
    assert fake.requests == [] and result.exit_code == 0
    assert result.selection.excluded_by_reason() == {"beyond the limit": 2}


def test_script_json_accounts_for_every_attempt(tmp_path, capsys):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    rec = tmp_path / "rec"
    rec.mkdir()
    main = runpy.run_path(str(DIAGNOSE), run_name="diagnose")["main"]
    code = main(["--run", str(run.dir), "--set", str(set_dir), "--diagnoser", f"replay:{rec}",
                 "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 3  # two cases selected, no recordings: nothing diagnosed
    sel = doc["selection"]
    assert sel["attempts"] == 3 and sel["failed"] == 2 and sel["passed"] == 1
    assert all("no recording" in u["reason"] for u in doc["undiagnosed"])


# ---------------------------------------------------------------- cluster_failures

ROWS = [
    {"qid": "a", "sample": None, "failed": True, "where_to_fix": "not retrieved",
     "missing": ["measure:orders:revenue"], "owner": "model", "component": "get_context/model"},
    {"qid": "b", "sample": None, "failed": True, "where_to_fix": "not retrieved",
     "missing": ["measure:orders:revenue", "dimension:orders:status"], "owner": "model",
     "component": "get_context/model"},
    {"qid": "c", "sample": None, "failed": True, "where_to_fix": "never asked",
     "missing": ["measure:orders:revenue"], "owner": "agent-skill", "component": "agent-call"},
    {"qid": "d", "sample": None, "failed": True, "where_to_fix": "delivered, wrong", "missing": [],
     "owner": None, "component": "construction"},
    {"qid": "e", "sample": None, "failed": False, "where_to_fix": None, "missing": ["x"]},
]


def test_mechanical_clusters_group_by_where_to_fix_and_first_missing_entity():
    got = diagnose_mechanical.mechanical_clusters(ROWS)
    assert [(c["where_to_fix"], c["missing"], c["qids"]) for c in got] == [
        ("not retrieved", "measure:orders:revenue", ["a", "b"]),
        ("delivered, wrong", None, ["d"]),
        ("never asked", "measure:orders:revenue", ["c"]),
    ]
    assert got[1]["owner"] is None  # delivered, wrong: diagnose decides


def test_cluster_failures_writes_its_own_file(tmp_path, capsys):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    main = runpy.run_path(str(CLUSTER_FAILURES), run_name="cluster_failures")["main"]
    assert main(["--run", str(run.dir), "--set", str(set_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lines = (run.dir / "clusters-mechanical.jsonl").read_text().splitlines()
    assert doc["failures"] == 2 and len(lines) == len(doc["clusters"]) >= 1
    assert all(json.loads(x)["source"] == "mechanical" for x in lines)
    assert not (run.dir / "clusters.jsonl").exists()


def test_bucketed_is_plain_data():
    assert Bucketed("q", None, "no_match").reason is None


def _host(set_dir):
    """host(mode): a provider factory for diagnose_run, a host diagnoser in that mode."""
    from malloy_evals.llm.select import make_provider

    def host(mode):
        return lambda d: make_provider("host", role="diagnose", set_dir=set_dir, host_mode=mode,
                                       host_dir=d)
    return host


def test_host_flow_emits_then_ingests_cases_then_clusters(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    host = _host(set_dir)
    emitted = run_diagnose(run.dir, set_dir, host("emit"))
    base = run.dir / "host" / "diagnose"
    assert emitted.exit_code == 0 and emitted.issues_appended == []
    assert sorted(p.name for p in base.glob("*.request.json")) == [
        "diag.r1.q1.request.json", "diag.r1.q2.request.json"]
    for q in ("q1", "q2"):
        (base / f"diag.r1.{q}.reply.json").write_text(json.dumps(WRONG_FIELD))
    waiting = run_diagnose(run.dir, set_dir, host("ingest"))
    assert len(waiting.diagnoses) == 2 and waiting.clustered_by.startswith("pending")
    assert (base / "diag.r1.clusters.request.json").is_file() and waiting.issues_appended == []
    (base / "diag.r1.clusters.reply.json").write_text(json.dumps(CLUSTERS))
    done = run_diagnose(run.dir, set_dir, host("ingest"))
    assert done.issues_appended == ["r1:list-price-read-as-revenue"]


def test_host_ingest_with_a_reply_under_the_wrong_name_exits_3_naming_the_file(tmp_path):
    # Issue 16 item 9: the SKILL.md said `reply.json`, the kit reads `<key>.reply.json`, and with
    # the wrong name --ingest said "pending" and exited 0.
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    host = _host(set_dir)
    run_diagnose(run.dir, set_dir, host("emit"))
    base = run.dir / "host" / "diagnose"
    (base / "reply.json").write_text(json.dumps(WRONG_FIELD))
    result = run_diagnose(run.dir, set_dir, host("ingest"))
    assert result.diagnoses == [] and result.exit_code == 3
    why = {u.qid: u.reason for u in result.undiagnosed}
    assert f"no reply yet in {base}" in why["q1"]
    assert "this request's reply is diag.r1.q1.reply.json" in why["q1"]


def test_skill_md_names_the_reply_file_the_host_provider_reads():
    text = paths.skill_md("eval-diagnose").read_text()
    assert "`<key>.reply.json`" in text and "writes `reply.json`" not in text


def test_shipped_baseline_run_is_diagnosed_offline_with_table_codes(tmp_path, needs_node):
    bookshop = paths.KIT_ROOT / "evals" / "bookshop"
    run_dir = tmp_path / "runs" / "baseline"
    shutil.copytree(bookshop / "runs" / "baseline", run_dir)
    report = tmp_path / "coverage.json"
    scripts = paths.KIT_ROOT / "skills" / "eval-answer" / "scripts"
    # Each script's main(argv) run in this process, as its command line runs it.
    for script, argv in ((scripts / "check_coverage.py",
                          ["--set", bookshop, "--model", bookshop / "model", "--reader", "replay",
                           "--out", report]),
                         (scripts / "score_run.py",
                          ["--run", run_dir, "--set", bookshop, "--judge", "replay", "--local",
                           "--coverage", report]),
                         (DIAGNOSE, ["--run", run_dir, "--set", bookshop, "--diagnoser", "replay",
                                     "--json"])):
        done = run_outcome(script, [str(a) for a in argv], tmp_path)
        assert done.code == 0, done.err[-2000:]
    doc = json.loads(done.out)
    sel = doc["selection"]
    assert doc["undiagnosed"] == [] and doc["diagnosed"] == sel["failed"] > 0
    assert sel["failed"] + sel["passed"] + sel["retrieval_only"] + sel["excluded"] == sel["attempts"]
    issues = [e for e in Run.open(run_dir).live() if e["kind"] == "issue"]
    assert len(issues) == len(doc["clusters"])
    for issue in issues:
        for code in (issue["primary_code"], *issue["contributing_codes"]):
            assert code in TABLE
        assert TABLE[issue["primary_code"]].owner == issue["owner"]


def test_narrowed_rerun_voids_only_own_issues_sharing_a_diagnosed_qid():
    events = [
        {"kind": "issue", "event_id": "a", "qids": ["q1", "q2"], "diagnosed_by": "diagnose.py x"},
        {"kind": "issue", "event_id": "b", "qids": ["q3"], "diagnosed_by": "diagnose.py x"},
        {"kind": "issue", "event_id": "c", "qids": ["q1"], "diagnosed_by": "a person"},
    ]
    assert [e["event_id"] for e in diagnose_issues.own_issues(events, {"q1"})] == ["a"]
    assert [e["event_id"] for e in diagnose_issues.own_issues(events, None)] == ["a", "b"]


def test_only_naming_an_unknown_case_exits_3_naming_the_cases_file(tmp_path, capsys):
    # Drift fixed: a qid not in the set is exit 3 in every script (it was 2 here).
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    main = runpy.run_path(str(DIAGNOSE), run_name="diagnose")["main"]
    from malloy_evals.core import cli

    with pytest.raises(SystemExit) as exc:
        cli.run(main, ["--run", str(run.dir), "--set", str(set_dir), "--diagnoser", "replay",
                       "--only", "q9"])
    assert exc.value.code == 3
    assert "cases.jsonl: --only names qids not in the set: q9" in capsys.readouterr().err


# Regression (hostile input): a link planted at a file diagnose.py rewrites, or in place of its
# diagnose/ folder, made the kit write outside the run.
def test_diagnose_never_writes_through_a_planted_link(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    (run.dir / "diagnose").symlink_to(outside)
    fake = FakeDiagnoser({"q1": WRONG_FIELD, "q2": WRONG_FIELD}, CLUSTERS)
    with pytest.raises(InputError, match="symbolic link"):
        run_diagnose(run.dir, set_dir, lambda d: fake)
    assert list(outside.iterdir()) == []


def test_mechanical_clusters_file_replaces_a_planted_link(tmp_path):
    set_dir = make_set(tmp_path)
    run = make_run(tmp_path, set_dir)
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("theirs\n")
    (run.dir / diagnose_mechanical.MECHANICAL_FILE).symlink_to(target)
    result = diagnose_mechanical.cluster_failures(run.dir, set_dir)
    assert not Path(result.path).is_symlink() and target.read_text() == "theirs\n"
