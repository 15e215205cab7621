"""check_coverage: reply rules, majority, the report, the model view, and replay runs."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
from malloy_evals.answer.coverage import narrow as coverage_narrow
from malloy_evals.answer.coverage import reader as coverage_reader
from malloy_evals.answer.coverage import surface as coverage_surface
from malloy_evals.answer.coverage.reader import CaseCoverage, CoverageCase, Reading
from malloy_evals.answer.coverage.surface import ModelView
from malloy_evals.core import cli, paths, schemas
from malloy_evals.core.errors import KitError
from malloy_evals.llm.base import EMITTED, LlmReply, OneShot, RecordingMissing

CHECK_COVERAGE = paths.KIT_ROOT / "skills" / "eval-answer" / "scripts" / "check_coverage.py"
BOOKSHOP = paths.KIT_ROOT / "evals" / "bookshop"


class FakeReader(OneShot):
    """A Provider of our protocol answering canned replies per key, in call order."""

    spec = "fake"
    model = "fake-reader"

    def __init__(self, replies: dict[str, list]):
        self.replies = {k: list(v) for k, v in replies.items()}
        self.requests: list = []

    def complete(self, request):
        self.requests.append(request)
        queue = self.replies.get(request.key)
        if not queue:
            raise RecordingMissing(f"no reply for {request.key}")
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        data = item if isinstance(item, dict) else None
        text = item if isinstance(item, str) else json.dumps(item)
        return LlmReply(text=text, data=data, source="fake-reader",
                        request_digest=request.digest(model="fake-reader"))


def reply(verdict, entities=(), quantities=(), resolved_by=None, rule_kind=None, why="because"):
    return {"quantities": list(quantities), "resolved_by": resolved_by, "why": why,
            "verdict": verdict, "rule_kind": rule_kind, "entities": list(entities)}


def q(name, *candidates, ruled_out=None):
    return {"quantity": name, "candidates": list(candidates), "ruled_out": ruled_out}


# ---------------------------------------------------------------- reply rules

def test_modelled_without_entity_is_undecided():
    r = coverage_reader.read_reply(reply("MODELLED", entities=[]))
    assert r.verdict is None and "without naming an entity" in r.why


def test_modelled_with_entity_is_taken():
    r = coverage_reader.read_reply(reply("MODELLED", ["measure:orders:revenue"],
                                  [q("revenue", "measure:orders:revenue")]))
    assert r.verdict == "MODELLED" and r.entities == ["measure:orders:revenue"]


def test_modelled_with_two_candidates_and_nothing_resolving_is_ambiguous():
    r = coverage_reader.read_reply(reply("MODELLED", ["dimension:customers:region"],
                                  [q("region", "dimension:customers:region",
                                     "dimension:orders:ship_region")]))
    assert r.verdict == "AMBIGUOUS" and "several candidates for region" in r.why


@pytest.mark.parametrize("kwargs", [
    pytest.param({"resolved_by": "the region doc says home region"}, id="resolved_by"),
    pytest.param({"ruled_out": "ship_region: 'not where the customer lives'"}, id="ruled_out"),
])
def test_modelled_with_two_candidates_and_a_resolution_stays_modelled(kwargs):
    quantity = q("region", "dimension:customers:region", "dimension:orders:ship_region",
                 ruled_out=kwargs.get("ruled_out"))
    r = coverage_reader.read_reply(reply("MODELLED", ["dimension:customers:region"], [quantity],
                                  resolved_by=kwargs.get("resolved_by")))
    assert r.verdict == "MODELLED"


def test_missing_is_never_upgraded_or_downgraded():
    r = coverage_reader.read_reply(reply("MISSING", quantities=[q("margin", "a", "b")]))
    assert r.verdict == "MISSING"


def test_invented_verdict_is_undecided_naming_it():
    r = coverage_reader.read_reply(reply("PARTIAL", ["measure:orders:revenue"]))
    assert r.verdict is None and "PARTIAL" in r.why


def test_rule_kind_kept_only_for_rule_unwritten():
    assert coverage_reader.read_reply(reply("RULE_UNWRITTEN", rule_kind="arbitrary")).rule_kind == "arbitrary"
    assert coverage_reader.read_reply(reply("RULE_UNWRITTEN", rule_kind="maybe")).rule_kind is None
    assert coverage_reader.read_reply(reply("MISSING", rule_kind="arbitrary")).rule_kind is None


def test_text_reply_with_quoted_malloy_before_the_json_is_read():
    text = ("The model has `extend { measure: x is count() }` in it.\n"
            '{"note": "draft"}\n' + json.dumps(reply("UNDERSPECIFIED")) + "\nDone.")
    assert coverage_reader.read_reply(None, text).verdict == "UNDERSPECIFIED"


def test_reply_without_json_is_undecided():
    assert coverage_reader.read_reply(None, "I think it is modelled.").verdict is None


# ---------------------------------------------------------------- majority

def R(verdict):
    return Reading(verdict, f"why {verdict}", ["measure:x:y"] if verdict == "MODELLED" else [])


@pytest.mark.parametrize("samples, expected", [
    pytest.param(["RULE_UNWRITTEN", "MODELLED", "RULE_UNWRITTEN"], "RULE_UNWRITTEN", id="majority"),
    pytest.param(["MODELLED", "RULE_UNWRITTEN"], "RULE_UNWRITTEN", id="tie-goes-to-gap"),
    pytest.param(["MISSING", "MODELLED"], "MISSING", id="tie-goes-to-gap-either-order"),
    pytest.param(["MODELLED", None], None, id="modelled-vs-undecided-tie-is-undecided"),
    pytest.param(["MODELLED", "MODELLED"], "MODELLED", id="stable-pass"),
    pytest.param([None, "MISSING", "MISSING"], "MISSING", id="majority-over-undecided"),
    pytest.param(["RULE_UNWRITTEN", "MISSING", "MODELLED"], None, id="split-gaps-undecided"),
    pytest.param([None, None], None, id="all-undecided"),
])
def test_majority(samples, expected):
    row = coverage_reader.majority("q1", [R(s) for s in samples])
    assert row.verdict == expected
    assert row.samples == samples


def test_majority_keeps_the_winning_samples_why_and_marks_instability():
    row = coverage_reader.majority("q1", [R("MODELLED"), R("MISSING"), R("MISSING")])
    assert row.why == "why MISSING" and row.stable is False


def test_split_gaps_say_so():
    row = coverage_reader.majority("q1", [R("RULE_UNWRITTEN"), R("MISSING")])
    assert row.verdict is None and "disagreed on which gap" in row.why


# ---------------------------------------------------------------- report arithmetic

def _row(qid, verdict):
    return CaseCoverage(qid, verdict, "w", [], None, [verdict], True)


def test_summarise_leaves_undecided_out_of_the_denominator():
    s = coverage_reader.summarise([_row("a", "MODELLED"), _row("b", "MODELLED"), _row("c", "MISSING"),
                            _row("d", None)])
    assert (s["cases"], s["decided"], s["modelled"]) == (4, 3, 2)
    assert s["coverage"] == 2 / 3
    assert s["by_verdict"] == {"MISSING": 1, "MODELLED": 2, "undecided": 1}


def test_summarise_nothing_decided_is_none_not_zero():
    assert coverage_reader.summarise([_row("a", None)])["coverage"] is None
    assert coverage_reader.summarise([])["coverage"] is None


def test_compare_labels_flags_disagreements_and_never_says_accuracy():
    rows = [_row("a", "MODELLED"), _row("b", "MODELLED"), _row("c", "MISSING"), _row("d", None)]
    labels = {"a": ("covered", None), "b": ("derivable", "needs a rule"), "c": ("absent", None),
              "d": ("covered", None)}
    lc = coverage_reader.compare_labels(rows, labels)
    assert (lc["compared"], lc["agree"]) == (3, 2)
    assert [d["qid"] for d in lc["disagree"]] == ["b"]
    assert lc["disagree"][0]["coverageNote"] == "needs a rule"
    assert sum(m["n"] for m in lc["matrix"]) == 3
    assert "accuracy" not in json.dumps(lc).lower()


# ---------------------------------------------------------------- model view

SURFACE = {"models": [{"path": "shop.malloy", "sources": [{
    "name": "orders", "doc": "One row per order.",
    "dimensions": [{"name": "status", "type": "string", "doc": "shipped or pending"},
                   {"name": "ship_region", "type": "string", "doc": ""}],
    "measures": [{"name": "revenue", "type": "number", "doc": "Net revenue."}],
    "views": [{"name": "by_month", "doc": "Revenue per month."}],
    "joins": [{"name": "customers", "relationship": "one", "doc": "Who ordered."}]}],
    "queries": [{"name": "top", "source": "orders", "doc": "Top orders."}]}], "errors": []}


def test_inventory_lists_every_entity_by_id_and_marks_undocumented_columns():
    inv = coverage_surface.inventory(SURFACE)
    for line in ("dimension:orders:status (string): shipped or pending",
                 "dimension:orders:ship_region (string): (undocumented)",
                 "measure:orders:revenue (number): Net revenue.", "view:orders:by_month",
                 "join:orders:customers (one)", "query:orders:top"):
        assert line in inv


class FakeRuntime:
    """Stands in for the Node runtime: describe() gives SURFACE, search() ranks nothing."""

    def __init__(self, model_dir=None):
        self.closed = False

    def describe(self):
        return SURFACE

    def search(self, text, limit=10):
        return []

    def close(self):
        self.closed = True


def _model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "shop.malloy").write_text("source: orders is duckdb.table('o.csv')\n", encoding="utf-8")
    return d


def test_local_model_read_through_describe(tmp_path):
    view = coverage_surface.read_local_model(_model_dir(tmp_path), describe=lambda d: SURFACE)
    assert view.compiled_surface == "read" and "measure:orders:revenue" in view.text
    assert len(view.model_sha256) == 64


def test_compile_error_is_not_read_and_falls_back_to_text(tmp_path):
    broken = {"models": [], "errors": [{"path": "shop.malloy", "message": "'nope' is not defined"}]}
    view = coverage_surface.read_local_model(_model_dir(tmp_path), describe=lambda d: broken)
    assert view.compiled_surface.startswith("not read: compile error")
    assert "nope" in view.compiled_surface and "duckdb.table('o.csv')" in view.text


def test_runtime_failure_is_not_read_with_its_reason(tmp_path):
    def fail(_):
        raise KitError("node is not on PATH")
    view = coverage_surface.read_local_model(_model_dir(tmp_path), describe=fail)
    assert view.compiled_surface == "not read: node is not on PATH"


def test_served_source_infos_become_the_same_inventory():
    infos = [{"name": "orders", "annotations": [{"value": "#(doc) One row per order.\n"}],
              "schema": {"fields": [
                  {"kind": "dimension", "name": "status", "type": "string",
                   "annotations": [{"value": "#(doc) shipped or pending"}]},
                  {"kind": "measure", "name": "revenue", "type": "number"}]}}]
    surface = coverage_surface.surface_from_source_infos("shop.malloy", json.dumps(infos), [])
    inv = coverage_surface.inventory({"models": [surface]})
    assert "dimension:orders:status (string): shipped or pending" in inv
    assert "measure:orders:revenue (number): (undocumented)" in inv


# ---------------------------------------------------------------- measuring with a fake reader

VIEW = ModelView("read", coverage_surface.inventory(SURFACE), "0" * 64, "here")


def test_repeat_reads_each_case_n_times_and_takes_the_majority():
    reader = FakeReader({"cov.q1": [reply("MODELLED", ["measure:orders:revenue"]),
                                    reply("MISSING"), reply("MISSING")]})
    report = coverage_reader.measure([CoverageCase("q1", "Revenue?", [])], VIEW, [], reader, repeat=3)
    assert report.cases_detail[0]["verdict"] == "MISSING"
    assert report.cases_detail[0]["samples"] == ["MODELLED", "MISSING", "MISSING"]
    assert len(reader.requests) == 3


def test_missing_recording_leaves_the_case_undecided_and_nothing_decided_exits_3():
    report = coverage_reader.measure([CoverageCase("q1", "Revenue?", [])], VIEW, [], FakeReader({}))
    assert report.cases_detail[0]["verdict"] is None
    assert "reader failed" in report.cases_detail[0]["why"]
    assert (report.decided, report.coverage, report.exit_code) == (0, None, 3)


def test_host_emit_with_every_case_pending_exits_0_not_3(tmp_path):
    # Emitting the requests is what --emit is for, as in score_attempt and diagnose.
    from malloy_evals.llm.select import make_provider

    emitter = make_provider("host", role="coverage", set_dir=tmp_path, host_mode="emit",
                            host_dir=tmp_path / "host")
    report = coverage_reader.measure([CoverageCase("q1", "Revenue?", [])], VIEW, [], emitter)
    assert report.cases_detail[0]["why"].startswith(EMITTED)
    assert (report.decided, report.pending, report.exit_code) == (0, 1, 0)
    assert list((tmp_path / "host").rglob("*request.json"))


def test_host_emit_text_says_waiting_for_replies_not_exit_3(tmp_path):
    # Regression: the text said "(exit 3)" while the script exited 0 for a pending emit.
    from malloy_evals.llm.select import make_provider

    emitter = make_provider("host", role="coverage", set_dir=tmp_path, host_mode="emit",
                            host_dir=tmp_path / "host")
    report = coverage_reader.measure([CoverageCase("q1", "Revenue?", [])], VIEW, [], emitter)
    text = coverage_reader.render_text(report)
    assert "exit 3" not in text and "--ingest" in text


def test_one_pending_and_one_failed_case_still_exits_3():
    from malloy_evals.llm.base import HostReplyPending

    reader = FakeReader({"cov.q1": [HostReplyPending("waiting")]})
    report = coverage_reader.measure([CoverageCase("q1", "Revenue?", []),
                               CoverageCase("q2", "Margin?", [])], VIEW, [], reader)
    assert (report.decided, report.pending, report.exit_code) == (0, 1, 3)


def test_request_carries_inventory_conventions_question_and_concepts():
    reader = FakeReader({"cov.q1": [reply("MISSING")]})
    coverage_reader.measure([CoverageCase("q1", "What was margin?", ["gross margin"])], VIEW,
                     ["Margin applies to shipped orders."], reader)
    req = reader.requests[0]
    text = req.messages[0]["content"]
    assert req.role == "coverage" and req.key == "cov.q1"
    assert req.prompt_version == coverage_reader.prompt_version()
    assert "measure:orders:revenue" in text and "- Margin applies to shipped orders." in text
    assert "What was margin?" in text and "gross margin" in text


def test_report_validates_against_its_schema():
    reader = FakeReader({"cov.a": [reply("MODELLED", ["measure:orders:revenue"])],
                         "cov.b": [reply("RULE_UNWRITTEN", rule_kind="guessable")]})
    cases = [CoverageCase("a", "Revenue?", [], "covered"), CoverageCase("b", "Net?", [], "covered")]
    report = coverage_reader.measure(cases, VIEW, [], reader, version="v1", compare=True)
    doc = cli.to_jsonable(report)
    assert schemas.validate("coverage_report", doc) == []
    assert (doc["decided"], doc["modelled"], doc["coverage"]) == (2, 1, 0.5)
    assert doc["labelComparison"]["agree"] == 1


# ---------------------------------------------------------------- the whole script

def _tiny_set(tmp_path: Path) -> Path:
    s = tmp_path / "set"
    s.mkdir()
    (s / "set.json").write_text(json.dumps({
        "name": "tiny", "datasetVersion": 1, "targetPackage": "bookshop",
        "targetModelPath": "bookshop.malloy",
        "conventions": ["Revenue applies to shipped and pending orders."]}), encoding="utf-8")
    cases = [
        {"qid": "rev", "question": "What was total revenue?", "coverage": "covered",
         "requiresConcepts": ["revenue"],
         "golden": {"kind": "scalar", "value": {"revenue": 987654.32}, "status": "verified"}},
        {"qid": "margin", "question": "What was our gross margin?", "coverage": "absent",
         "golden": {"kind": "unanswerable", "rubric": "SECRET-RUBRIC-TEXT"}},
    ]
    (s / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return s


def _replies(tmp_path: Path) -> Path:
    path = tmp_path / "replies.jsonl"
    lines = [{"key": "cov.rev", "replies": [reply("MODELLED", ["measure:order_items:revenue"])]},
             {"key": "cov.margin", "replies": [reply("MISSING", why="no cost column")]}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def test_reader_never_sees_the_golden(tmp_path, monkeypatch):
    set_dir = _tiny_set(tmp_path)
    reader = FakeReader({"cov.rev": [reply("MISSING")], "cov.margin": [reply("MISSING")]})
    monkeypatch.setattr(coverage_surface, "_start_runtime", FakeRuntime)
    coverage_reader.check_coverage(set_dir, lambda: reader, model_dir=_model_dir(tmp_path))
    sent = json.dumps([r.to_json() for r in reader.requests])
    assert "987654" not in sent and "SECRET-RUBRIC-TEXT" not in sent


def _host_cycle(tmp_path, monkeypatch, capsys, *extra):
    """check_coverage.py with `--reader host`: --emit from one folder, --ingest from another."""
    main = runpy.run_path(str(CHECK_COVERAGE), run_name="check_coverage")["main"]
    monkeypatch.setattr(coverage_surface, "_start_runtime", FakeRuntime)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "systmp"))
    set_dir, model = _tiny_set(tmp_path), _model_dir(tmp_path)
    common = ["--set", str(set_dir), "--model", str(model), "--reader", "host", *extra]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    emitted = main([*common, "--emit"])
    emit_out = capsys.readouterr()
    monkeypatch.chdir(tmp_path / "b")
    return main, common, emitted, emit_out


def test_host_emit_without_out_says_where_and_ingest_elsewhere_finds_it(tmp_path, monkeypatch,
                                                                         capsys):
    # Issue 16 item 8: --ingest without the --out used at --emit looked in the current folder,
    # and --emit did not say where it wrote.
    main, common, emitted, out = _host_cycle(tmp_path, monkeypatch, capsys)
    folder = coverage_reader.host_folder(None, tmp_path / "set") / "host" / "coverage"
    assert emitted == 0 and str(folder) in out.err and str(folder) in out.out
    assert sorted(p.name for p in folder.iterdir()) == ["cov.margin.request.json",
                                                        "cov.rev.request.json"]
    assert not list((tmp_path / "a").iterdir())  # nothing written to the current folder
    assert main([*common, "--ingest"]) == 3  # no reply yet: nothing decided
    pending = capsys.readouterr()
    assert f"no reply yet in {folder}" in pending.out and "exit 3" in pending.out
    (folder / "cov.rev.reply.json").write_text(json.dumps(reply("MODELLED", ["measure:orders:revenue"])))
    assert main([*common, "--ingest", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decided"] == 1


def test_host_ingest_with_the_same_out_reads_beside_the_report(tmp_path, monkeypatch, capsys):
    report = tmp_path / "reports" / "cov.json"
    main, common, emitted, _ = _host_cycle(tmp_path, monkeypatch, capsys, "--out", str(report))
    folder = report.parent / "host" / "coverage"
    assert emitted == 0 and (folder / "cov.rev.request.json").is_file()
    (folder / "reply.json").write_text(json.dumps(reply("MISSING")))  # the wrong name
    assert main([*common, "--ingest", "--json"]) == 3
    why = {r["qid"]: r["why"] for r in json.loads(capsys.readouterr().out)["cases_detail"]}
    assert "reply.json is there, but this request's reply is cov.rev.reply.json" in why["rev"]


# Regression (hostile input, writes through links): the default host folder lives in the shared
# temporary folder, where anyone may plant `malloy-evals-coverage` as a link; --emit followed it.
def test_host_emit_never_follows_a_link_planted_in_the_temporary_folder(tmp_path, monkeypatch,
                                                                        capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "systmp").mkdir()
    (tmp_path / "systmp" / "malloy-evals-coverage").symlink_to(outside)
    main = runpy.run_path(str(CHECK_COVERAGE), run_name="check_coverage")["main"]
    monkeypatch.setattr(coverage_surface, "_start_runtime", FakeRuntime)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "systmp"))
    set_dir, model = _tiny_set(tmp_path), _model_dir(tmp_path)
    code = main(["--set", str(set_dir), "--model", str(model), "--reader", "host", "--emit",
                 "--json"])
    whys = [r["why"] for r in json.loads(capsys.readouterr().out)["cases_detail"]]
    assert code == 3 and whys and all("malloy-evals-coverage: is a symbolic link" in w for w in whys)
    assert list(outside.iterdir()) == []


def test_only_with_unknown_qid_exits_3(tmp_path):
    # Drift fixed: a qid not in the set is exit 3 in every script (it was 2 here).
    main = runpy.run_path(str(CHECK_COVERAGE), run_name="check_coverage")["main"]
    with pytest.raises(SystemExit) as exc:
        cli.run(main, ["--set", str(_tiny_set(tmp_path)), "--model", str(_model_dir(tmp_path)),
                       "--reader", "replay", "--only", "nope"])
    assert exc.value.code == 3


def test_sample_package_recorded_then_replayed_reads_compiled_surface(tmp_path, needs_node,
                                                                     capsys):
    main = runpy.run_path(str(CHECK_COVERAGE), run_name="check_coverage")["main"]
    set_dir, rec = _tiny_set(tmp_path), tmp_path / "rec"
    common = ["--set", str(set_dir), "--model", str(BOOKSHOP / "model"), "--json"]
    assert main([*common, "--reader", f"hand:{_replies(tmp_path)}", "--record", str(rec)]) == 0
    capsys.readouterr()
    out = tmp_path / "report.json"
    assert main([*common, "--reader", f"replay:{rec}", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["compiledSurface"] == "read"
    assert doc["reader"].endswith("(hand-authored)")
    assert (doc["decided"], doc["modelled"]) == (2, 1)
    assert json.loads(out.read_text()) == doc
    assert schemas.validate("coverage_report", doc) == []


def test_shipped_bookshop_recordings_decide_every_case_offline(needs_node, capsys):
    if not (BOOKSHOP / "recordings" / "coverage").is_dir():
        pytest.fail("evals/bookshop/recordings/coverage/ is missing: coverage must run offline")
    main = runpy.run_path(str(CHECK_COVERAGE), run_name="check_coverage")["main"]
    code = main(["--set", str(BOOKSHOP), "--model", str(BOOKSHOP / "model"), "--reader", "replay",
                 "--json", "--compare-labels"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["compiledSurface"] == "read"
    assert doc["decided"] == doc["cases"] > 0


class FakeRest:
    """Stands in for mcp_client.PublisherRest: the three routes check_coverage reads."""

    served_infos: object = None
    content_sha: object = "c" * 64

    def __init__(self, base_url):
        self.base = base_url

    def package(self, env, pkg):
        return {"name": pkg, "sourceContentSha": self.content_sha}

    def models(self, env, pkg):
        return [{"path": "shop.malloy"}]

    def model(self, env, pkg, path):
        return {"sourceText": "source: orders is duckdb.table('o.csv')",
                "sourceInfos": self.served_infos, "queries": []}


@pytest.mark.parametrize("infos, surface", [
    pytest.param([{"kind": "source", "name": "orders", "schema": {"fields": [
        {"kind": "measure", "name": "revenue", "type": {"kind": "number_type"}}]}}], "read",
        id="compiled"),
    pytest.param(None, "not read: shop.malloy: no compiled sourceInfos", id="text-only"),
])
def test_served_package_reads_source_infos_else_falls_back_to_text(monkeypatch, infos, surface):

    monkeypatch.setattr(FakeRest, "served_infos", infos)
    monkeypatch.setattr(coverage_surface, "PublisherRest", FakeRest)
    view = coverage_surface.read_served_model("http://127.0.0.1:1", "samples", "shop")
    assert view.compiled_surface == surface
    assert view.source == "http://127.0.0.1:1 samples/shop"
    expected = "measure:orders:revenue (number)" if infos else "duckdb.table('o.csv')"
    assert expected in view.text


def test_unscoped_convention_warns_and_scoped_ones_do_not(tmp_path, monkeypatch):
    set_dir = _tiny_set(tmp_path)
    cfg = json.loads((set_dir / "set.json").read_text())
    cfg["conventions"] = ["Revenue: price paid.", "Applies to money: dollars.", "Be careful."]
    (set_dir / "set.json").write_text(json.dumps(cfg))
    monkeypatch.setattr(coverage_surface, "_start_runtime", FakeRuntime)
    warnings: list[str] = []
    reader = FakeReader({"cov.rev": [reply("MISSING")], "cov.margin": [reply("MISSING")]})
    coverage_reader.check_coverage(set_dir, lambda: reader, model_dir=_model_dir(tmp_path),
                            warn=warnings.append)
    scope = [w for w in warnings if "states no scope" in w]
    assert scope == ["set.json: conventions[2] states no scope (say what it applies to)"]


def test_report_model_sha_is_the_runs_model_sha_local_and_served(tmp_path, monkeypatch):
    # A coverage report and a run over one model must carry the same digest (run.json modelSha
    # = the package's sourceContentSha), or nobody can tell they measured the same model.
    from malloy_evals.endpoint.package import package_sha

    model = _model_dir(tmp_path)
    view = coverage_surface.read_local_model(model, describe=lambda d: SURFACE)
    assert view.model_sha256 == package_sha(model)
    monkeypatch.setattr(FakeRest, "served_infos", None)
    monkeypatch.setattr(coverage_surface, "PublisherRest", FakeRest)
    served = coverage_surface.read_served_model("http://127.0.0.1:1", "samples", "shop")
    assert served.model_sha256 == "c" * 64


# ---------------------------------------------------------------- replies naming unknown entities

SURFACE_VIEW = ModelView("read", coverage_surface.inventory(SURFACE), "0" * 64, "here", SURFACE)


def test_reply_naming_an_entity_not_in_the_compiled_model_is_asked_again():
    # Issue 16 item 2: MODELLED for `measure:order_items:lifetime_value_total`, which the compiled
    # model does not have, was taken as is and inflated coverage.
    invented = reply("MODELLED", ["measure:orders:lifetime_value_total"],
                     [q("lifetime value", "measure:orders:lifetime_value_total")])
    reader = FakeReader({"cov.q1": [invented, reply("MODELLED", ["measure:orders:revenue"])]})
    report = coverage_reader.measure([CoverageCase("q1", "Revenue?", [])], SURFACE_VIEW, [], reader)
    [row] = report.cases_detail
    assert (row["verdict"], row["rejected"]) == ("MODELLED", ["names an entity not in the model"])
    assert report.reader_calls == 2 and len(reader.requests) == 2
    assert report.rejected_replies == {"names an entity not in the model": 1}


def test_reply_inventing_an_entity_twice_leaves_the_case_undecided_and_counted():
    invented = reply("MODELLED", ["measure:order_items:lifetime_value_total"])
    reader = FakeReader({"cov.q1": [invented, invented]})
    report = coverage_reader.measure([CoverageCase("q1", "Revenue?", [])], SURFACE_VIEW, [], reader)
    [row] = report.cases_detail
    assert row["verdict"] is None and "measure:order_items:lifetime_value_total" in row["why"]
    assert (report.decided, report.exit_code) == (0, 3)
    assert report.rejected_replies == {"names an entity not in the model": 2}


def test_an_invented_candidate_is_rejected_like_an_invented_entity():
    r = coverage_reader.read_reply(reply("AMBIGUOUS", quantities=[q("region", "dimension:orders:ship_region",
                                                                     "dimension:orders:home_region")]),
                                   known=SURFACE_VIEW.entity_ids)
    assert r.verdict is None and r.rejected == "names an entity not in the model"
    assert "dimension:orders:home_region" in r.why and "ship_region," not in r.why


def test_entities_are_not_checked_when_only_the_model_text_was_read():
    r = coverage_reader.read_reply(reply("MODELLED", ["measure:orders:anything"]), known=None)
    assert r.verdict == "MODELLED"


def test_report_says_which_expected_entities_the_compiled_model_holds():
    reader = FakeReader({"cov.q1": [reply("MISSING")]})
    case = CoverageCase("q1", "Revenue by user?", [], expected=["measure:orders:revenue",
                                                                 "source:users:users"])
    report = coverage_reader.measure([case], SURFACE_VIEW, [], reader)
    assert report.cases_detail[0]["expected_in_model"] == {"measure:orders:revenue": True,
                                                           "source:users:users": False}


# ---------------------------------------------------------------- large models, narrowed per case

def _large_surface(n_sources: int) -> dict:
    """A compiled surface of `n_sources` sources with 60 documented fields each (~10 KB a source)."""
    doc = "Figures are reconciled by finance; rows before the migration are estimates. " * 2
    sources = [{"name": f"unit_{i}", "doc": f"Business unit {i}.",
                "dimensions": [{"name": f"dim_{j}", "type": "string", "doc": doc} for j in range(30)],
                "measures": [{"name": f"measure_{j}", "type": "number", "doc": doc} for j in range(30)],
                "views": [], "joins": []} for i in range(n_sources)]
    return {"models": [{"path": "large.malloy", "sources": sources, "queries": []}]}


def _search_for(hits_by_text: dict[str, list[tuple[str, str, str]]]):
    """A runtime search answering fixed hits (kind, source, name) per search text."""
    calls: list[str] = []

    def search(text, limit):
        calls.append(text)
        return [{"kind": k, "source": s, "name": n, "score": 1.0} for k, s, n in
                hits_by_text.get(text, [])[:limit]]
    search.calls = calls
    return search


def _large_view(n_sources: int, search) -> ModelView:
    surface = _large_surface(n_sources)
    return ModelView("read", coverage_surface.inventory(surface), "0" * 64, "here", surface,
                     search=search)


def test_narrowed_inventory_leads_with_the_sources_the_search_found_and_fits_the_budget():
    search = _search_for({"margin": [("measure", "unit_7", "measure_3"), ("measure", "unit_9", "measure_1")],
                          "region": [("dimension", "unit_7", "dim_2"), ("dimension", "unit_400", "dim_0")]})
    surface = _large_surface(500)
    got = coverage_narrow.narrow(surface, search, ["margin", "region"], "?", 250_000)
    assert got.searched == ["margin", "region"] and search.calls == ["margin", "region"]
    # Each concept's best source comes before either's second: unit_7, then unit_9 and unit_400.
    assert got.sources == ["unit_7", "unit_9", "unit_400"]
    assert "measure:unit_7:measure_3" in got.text and "dimension:unit_7:dim_29" in got.text
    assert "unit_8" not in got.text
    assert len(got.text) <= coverage_narrow.NARROWED_CHARS and got.entities_found == 4


def test_a_source_that_no_longer_fits_whole_is_given_by_its_hits():
    hits = [("measure", f"unit_{i}", "measure_0") for i in range(40)]
    got = coverage_narrow.narrow(_large_surface(60), _search_for({"x": hits}), ["x"], "?", 250_000)
    assert got.sources and got.partial_sources and not got.left_out
    last = got.partial_sources[-1]
    assert f"measure:{last}:measure_0" in got.text and f"dimension:{last}:dim_0 " not in got.text
    assert len(got.text) <= coverage_narrow.NARROWED_CHARS


def test_a_case_naming_no_concept_is_searched_by_its_question():
    search = _search_for({"What was margin?": [("measure", "unit_1", "measure_2")]})
    got = coverage_narrow.narrow(_large_surface(3), search, [], "What was margin?", 250_000)
    assert got.searched == ["What was margin?"] and got.sources == ["unit_1"]


def test_large_model_dry_run_gives_every_case_one_request_within_the_limit():
    # Issue 17: a model whose inventory is over the limit decided nothing (exit 3); each case now
    # gets the part of the inventory its concepts need, and --dry-run shows the calls it would make.
    search = _search_for({"margin": [("measure", "unit_7", "measure_3")],
                          "region": [("dimension", "unit_300", "dim_2")]})
    view = _large_view(400, search)
    assert len(view.text) > coverage_reader.MAX_MODEL_CHARS
    cases = [CoverageCase(f"q{i}", "What was margin by region?", ["margin", "region"]) for i in range(3)]
    reader = FakeReader({})
    report = coverage_reader.measure(cases, view, [], reader, dry_run=True)
    assert reader.requests == [] and report.reader_calls == 3 and report.exit_code == 0
    assert report.inventory["narrowed"] is True and "runtime's search" in report.inventory["how"]
    for row in report.cases_detail:
        assert row["inventory_chars"] <= coverage_narrow.NARROWED_CHARS
        assert row["narrowing"]["sources"] == ["unit_7", "unit_300"]
    assert schemas.validate("coverage_report", cli.to_jsonable(report)) == []


def test_large_model_cases_are_decided_from_their_narrowed_inventory():
    search = _search_for({"margin": [("measure", "unit_7", "measure_3")]})
    reader = FakeReader({"cov.q1": [reply("MODELLED", ["measure:unit_7:measure_3"])]})
    report = coverage_reader.measure([CoverageCase("q1", "Margin?", ["margin"])],
                                     _large_view(400, search), [], reader)
    assert report.decided == 1
    sent = reader.requests[0].messages[0]["content"]
    assert len(sent) < coverage_narrow.NARROWED_CHARS + 2000
    assert "part of the compiled inventory" in sent and "measure:unit_7:measure_3" in sent


def test_small_model_keeps_the_whole_inventory_and_its_request():
    reader = FakeReader({"cov.q1": [reply("MISSING")]})
    search = _search_for({})
    view = ModelView("read", coverage_surface.inventory(SURFACE), "0" * 64, "here", SURFACE,
                     search=search)
    report = coverage_reader.measure([CoverageCase("q1", "Margin?", ["margin"])], view, [], reader)
    assert search.calls == [] and report.inventory["narrowed"] is False
    assert report.cases_detail[0]["narrowing"] is None
    expected = coverage_reader.build_request("q1", "Margin?", ["margin"], [], VIEW)
    assert reader.requests[0].digest(model=None) == expected.digest(model=None)


def test_generated_large_model_is_narrowed_by_the_runtimes_search_and_decided_by_hand(
        tmp_path, needs_node, capsys):
    # Issue 17, end to end on a 1 MB model generated outside the repository: --dry-run shows one
    # request per case within the limit; hand-written replies (hand:FILE) decide every case.
    gen = runpy.run_path(str(paths.KIT_ROOT / "scripts" / "generate_large_model.py"))["generate"]
    info = gen(tmp_path / "large-1mb", 1_000_000, cases=5)
    assert info["model_bytes"] >= 1_000_000
    set_dir = Path(info["set"])
    main = runpy.run_path(str(CHECK_COVERAGE), run_name="check_coverage")["main"]
    common = ["--set", str(set_dir), "--model", str(set_dir / "model"), "--json",
              "--reader", f"hand:{info['replies']}"]
    assert main([*common, "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["reader_calls"] == 5 and dry["inventory"]["chars"] > coverage_reader.MAX_MODEL_CHARS
    assert all(r["inventory_chars"] <= coverage_narrow.NARROWED_CHARS for r in dry["cases_detail"])
    assert main(common) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["decided"], done["modelled"], done["rejected_replies"]) == (5, 5, {})
    for row in done["cases_detail"]:
        unit = row["entities"][0].split(":")[1]
        assert unit in row["narrowing"]["sources"]  # the case's own source reached its reader
    assert schemas.validate("coverage_report", done) == []


def test_a_large_models_searches_share_the_one_runner_that_compiled_it(needs_node, monkeypatch):
    # Issue 30: the cases' searches came from the reader's threads at once and started a second
    # runner, which compiled the model again; the model is now compiled once, by one runner.
    from concurrent.futures import ThreadPoolExecutor

    from malloy_evals.endpoint.runner import MalloyRuntime

    started: list[MalloyRuntime] = []

    class Recorded(MalloyRuntime):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(coverage_surface, "MalloyRuntime", Recorded)
    view = coverage_surface.read_local_model(BOOKSHOP / "model", search_over=10)
    assert view.search is not None and view.close is not None
    try:
        texts = ["revenue", "genre", "region", "orders", "members", "ship date"] * 2
        with ThreadPoolExecutor(max_workers=4) as pool:
            hits = list(pool.map(lambda text: view.search(text, 5), texts))  # type: ignore[misc]
        assert sum(1 for h in hits if h) >= 10
        assert len(started) == 1 and len(started[0].pids) == 1 and started[0].restarts == 0
    finally:
        view.close()
