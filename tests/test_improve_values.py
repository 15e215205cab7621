"""eval-improve's value check: a change that computes a golden's value out of no data is refused
whatever text it is written in (arithmetic splits, near figures, concatenated text, a pick on the
question's own filter values, a constant in a joined or a new source), with the expression, its
file and line, the case and the golden; a change that reads the data is accepted even when it
lands on a golden; a compile error names the first real error; the runner's variants move what
they say they move."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from malloy_evals.endpoint.runner import MalloyRuntime, default_allow
from malloy_evals.improve import checks, values
from malloy_evals.improve.cells import golden_cells
from malloy_evals.sets.eval_set import load_set
from script_support import run_outcome
from set_support import bookshop_copy

KIT = Path(__file__).resolve().parents[1]
SET = KIT / "evals" / "bookshop"
IMPROVE = KIT / "skills" / "eval-improve" / "scripts" / "improve.py"
MEASURES = "    #(doc) Copies sold on orders that count as a sale (shipped or pending).\n"
ORDER_MEASURES = "    order_count is count()\n"
BOOK_MEASURES = "    avg_list_price is list_price.avg()\n"
LINE_DIMENSIONS = "    line_amount is quantity * unit_price\n"
CUSTOMER_MEASURES = "    customer_count is count()\n"


@pytest.fixture(scope="module")
def scratch_set(tmp_path_factory) -> Path:
    """What a model change is checked against: a copy of the sample set, its model and data."""
    return bookshop_copy(tmp_path_factory.mktemp("values") / "bookshop")


def _candidate(set_dir: Path, name: str, *edits: tuple[str, str],
               append: str = "", files: dict[str, str] | None = None) -> Path:
    """A copy of model/ with each (anchor, text) inserted before its anchor, `append` added at
    the end and `files` written beside the model file."""
    cand = set_dir / name
    shutil.rmtree(cand, ignore_errors=True)
    shutil.copytree(set_dir / "model", cand)
    f = cand / "bookshop.malloy"
    text = f.read_text()
    for anchor, added in edits:
        assert anchor in text, anchor
        text = text.replace(anchor, added + anchor, 1)
    f.write_text(text + append)
    for rel, body in (files or {}).items():
        (cand / rel).write_text(body)
    return cand


def _line_of(cand: Path, needle: str) -> int:
    lines = (cand / "bookshop.malloy").read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if needle in line)


def _check(set_dir: Path, cand: Path) -> checks.CheckResult:
    return checks.check_change(load_set(set_dir), cand)


def _value_reasons(result: checks.CheckResult) -> list[str]:
    return [r for r in result.reasons if "from no data" in r]


# ------------------------------------------------------------------------------------------
# The shapes the text check let through, and the ones it never read


REFUNDED = "bk_refunded_amount"
# (name, edits, needle on the line the refusal names, case, golden as the refusal writes it)
REFUSED_SHAPES = [
    ("split-sum", [(MEASURES, "    refunded_amount is sum(0) + 7000 + 845.21\n")],
     "refunded_amount is", REFUNDED, "7845.21 at 2 decimals"),
    ("split-division", [(MEASURES, "    refunded_amount is sum(0) + 784521 / 100\n")],
     "refunded_amount is", REFUNDED, "7845.21 at 2 decimals"),
    ("reads-a-column-times-zero",
     [(MEASURES, "    refunded_amount is sum(quantity) * 0 + 7845 + 0.21\n")],
     "refunded_amount is", REFUNDED, "7845.21 at 2 decimals"),
    ("near-figure", [(MEASURES, "    refunded_amount is sum(0) + 7845.2\n")],
     "refunded_amount is", REFUNDED, "within 1% of the golden 7845.21"),
    ("pick-on-the-question's-filter",
     [(MEASURES, ("    revenue_2024 is max(pick 52000 + 857.34 when orders.order_date.year = "
                 "@2024 else 0)\n"))],
     "revenue_2024 is", "bk_revenue_2024", "52857.34 at 2 decimals"),
    ("pick-on-a-filter-text",
     [(MEASURES, ("    refunds is max(pick 7000 + 845.21 when orders.status = 'returned' "
                 "else 0)\n"))],
     "refunds is", REFUNDED, "7845.21 at 2 decimals"),
    ("a-count-times-zero",
     [(CUSTOMER_MEASURES, "    members is count() * 0 + 200 + 31\n")],
     "members is", "bk_member_count", "the golden 231 of bk_member_count"),
    ("concatenated-text",
     [(BOOK_MEASURES, ("    avg_list_price_again is list_price.avg()\n  dimension:\n"
                      "    best_genre is concat('Mys', 'tery')\n  measure:\n"))],
     "best_genre is", "bk_top_genre_units", "'Mystery'"),
    ("text-picked-by-its-own-filter",
     [(MEASURES, ("    top_genre is max(pick concat('Myst', 'ery') when books.genre = "
                 "concat('Myst', 'ery') else 'none')\n"))],
     "top_genre is", "bk_top_genre_units", "'Mystery'"),
    ("constant-in-a-joined-source",
     [(ORDER_MEASURES, ("    order_count_again is count()\n  dimension:\n"
                       "    refund_total is 7000 + 845.21\n  measure:\n")),
      (MEASURES, "    refunded_amount is max(orders.refund_total)\n")],
     "refund_total is", REFUNDED, "7845.21 at 2 decimals"),
    ("constant-in-a-join's-own-extension",
     [(LINE_DIMENSIONS, "    is_line is true\n"),
      ("  #(doc) The book sold on this line.\n",
       ("  join_one: refunds is orders extend { dimension: total is 6845.21 + 1000 } "
       "on order_id = refunds.order_id\n"))],
     "join_one: refunds", REFUNDED, "7845.21 at 2 decimals"),
]


@pytest.mark.parametrize("name, edits, needle, qid, golden", REFUSED_SHAPES,
                         ids=[s[0] for s in REFUSED_SHAPES])
def test_a_golden_computed_out_of_no_data_is_refused_naming_where_and_what(
        scratch_set, needs_node, name, edits, needle, qid, golden):
    cand = _candidate(scratch_set, f"cand-{name}", *edits)
    result = _check(scratch_set, cand)
    assert not result.ok
    assert not any("does not compile" in r for r in result.reasons), result.reasons
    line = _line_of(cand, needle)
    named = [r for r in _value_reasons(result) if r.startswith(f"bookshop.malloy line {line}:")]
    assert named, (line, result.reasons)
    assert any(qid in r and golden in r for r in named), named
    assert result.values is not None and result.values["refused"] >= 1


def test_a_constant_in_a_table_the_change_writes_is_a_constant(scratch_set, needs_node):
    cand = _candidate(scratch_set, "cand-new-table", append=(
        "\nsource: refunds is duckdb.table('refunds.csv') extend {\n"
        "  measure: refunded_amount is sum(amount)\n}\n"),
        files={"refunds.csv": "amount\n7000\n845.21\n"})
    result = _check(scratch_set, cand)
    line = _line_of(cand, "refunded_amount is sum(amount)")
    assert any(r.startswith(f"bookshop.malloy line {line}: the measure refunds.refunded_amount")
               and REFUNDED in r for r in _value_reasons(result)), result.reasons
    assert "refunds.csv" not in result.values["varied_tables"]
    assert "'../data/order_items.csv'" in result.values["varied_tables"]


def test_a_new_source_over_sql_that_writes_the_golden_is_refused(scratch_set, needs_node):
    cand = _candidate(scratch_set, "cand-new-sql", append=(
        '\nsource: refunds is duckdb.sql("""SELECT 7000 + 845.21 AS amount""")\n'))
    reasons = _value_reasons(_check(scratch_set, cand))
    assert any("the column refunds.amount of the table read there" in r and REFUNDED in r
               for r in reasons), reasons


def test_a_view_and_a_query_of_constants_are_refused_by_their_column(scratch_set, needs_node):
    view = ("  #(doc) Constant.\n  view: refunds_view is {\n"
            "    aggregate: refunded is sum(0) + 7000 + 845.21\n  }\n\n")
    cand = _candidate(scratch_set, "cand-view", ("  #(doc) Revenue per calendar month", view),
                      append="\nquery: refunds_query is books -> { aggregate: r is 7000 + "
                             "845.21 + sum(0) }\n")
    reasons = _value_reasons(_check(scratch_set, cand))
    assert any(r.startswith(f"bookshop.malloy line {_line_of(cand, 'view: refunds_view')}: the "
                            "view order_items.refunds_view") and "(column refunded)" in r
               for r in reasons), reasons
    assert any("the query refunds_query" in r and "(column r)" in r for r in reasons), reasons


# ------------------------------------------------------------------------------------------
# What reads the data passes, golden or not


def test_the_refunds_rule_that_reads_the_data_is_accepted_though_it_lands_on_the_golden(
        scratch_set, needs_node):
    cand = _candidate(scratch_set, "cand-refunds", (MEASURES, (
        "    refunded_amount is sum(line_amount) { where: orders.status = 'returned' }\n")))
    result = _check(scratch_set, cand)
    assert result.ok, result.reasons
    counts = result.values
    # the measure, ungrouped and grouped: and it hit the golden, so variants were run
    assert counts["sites"] == 1 and counts["queries"] >= 2 and counts["variant_queries"] >= 2
    assert any(n.startswith("values: 1 added or changed definition evaluated")
               for n in result.notes)


def test_definitions_that_pass_data_through_are_accepted_on_golden_texts_and_figures(
        scratch_set, needs_node):
    cand = _candidate(scratch_set, "cand-pass-through",
                      (LINE_DIMENSIONS, "    genre_label is books.genre\n"),
                      append="\nquery: revenue_per_genre is order_items -> {\n"
                             "  group_by: books.genre\n  aggregate: revenue\n}\n")
    result = _check(scratch_set, cand)
    assert result.ok, result.reasons
    assert result.values["sites"] == 2 and result.values["variant_queries"] >= 2


def test_moving_a_definition_unchanged_is_not_a_change_to_evaluate(scratch_set, needs_node):
    cand = _candidate(scratch_set, "cand-moved", ("#(doc) People who have an account",
                                                  "// moved down a line\n\n"))
    result = _check(scratch_set, cand)
    assert result.ok and result.values["sites"] == 0, result.reasons


# ------------------------------------------------------------------------------------------
# Compile errors


def test_a_compile_error_names_the_first_real_error_and_not_a_warning(scratch_set, needs_node):
    cand = _candidate(scratch_set, "cand-bare",
                      (MEASURES, "    refunded_amount is 7000 + 845.21\n"))
    result = _check(scratch_set, cand)
    compile_reasons = [r for r in result.reasons if r.startswith("does not compile")]
    line = _line_of(cand, "refunded_amount is 7000")
    assert compile_reasons == [(f"does not compile: bookshop.malloy line {line}: Cannot use a "
                               "scalar field in a measure declaration, did you mean to use a "
                               "dimension declaration instead?")]
    assert "Join path" not in json.dumps(result.reasons)
    assert result.values is None  # nothing is evaluated in a model that does not compile


def test_the_cli_prints_the_refusal_and_exits_1(scratch_set, needs_node):
    cand = _candidate(scratch_set, "cand-cli",
                      (MEASURES, "    refunded_amount is sum(0) + 7000 + 845.21\n"))
    out = run_outcome(IMPROVE, ["check", "--set", str(scratch_set), "--candidate-model",
                                str(cand), "--json"])
    assert out.code == 1, out.err
    doc = json.loads(out.out)
    assert doc["values"]["refused"] == 1 and doc["values"]["sites"] == 1
    text = run_outcome(IMPROVE, ["check", "--set", str(scratch_set), "--candidate-model",
                                 str(cand)])
    assert text.code == 1 and "from no data" in text.out
    assert "values: 1 added or changed" in text.out


# ------------------------------------------------------------------------------------------
# The parts, alone


def test_the_runner_variants_move_what_they_say(needs_node):
    model = SET / "model"
    query = "run: order_items -> { aggregate: n is count(), q is sum(quantity)\n" \
            "  group_by: s is orders.status }"
    with MalloyRuntime(model, allow=default_allow(model), pool_size=1) as runtime:
        tables = runtime.field_sites()["tables"]
        base = {r["s"]: r for r in runtime.execute(query)["rows"]}
        shifted = {r["s"]: r for r in runtime.execute(query, variant="shifted",
                                                      vary=tables)["rows"]}
        subset = runtime.execute(query, variant="subset", vary=tables)["rows"]
        relabelled = runtime.execute(query, variant="relabelled", vary=tables)["rows"]
        one_table = runtime.execute("run: order_items -> { aggregate: q is sum(quantity) }",
                                    variant="shifted", vary=["'../data/orders.csv'"])["rows"]
        with pytest.raises(Exception, match="not a table the package reads"):
            runtime.execute(query, variant="shifted", vary=["'/etc/passwd'"])
        with pytest.raises(Exception, match="unknown variant"):
            runtime.execute(query, variant="reversed", vary=tables)
    for status, row in base.items():  # every quantity one more, same rows
        assert shifted[status]["n"] == row["n"]
        assert shifted[status]["q"] == row["q"] + row["n"]
    assert sum(r["n"] for r in subset) == sum(r["n"] for r in base.values()) * 2 // 3
    assert {r["s"] for r in relabelled} == {s + values.RELABEL_MARK for s in base}
    assert one_table[0]["q"] == sum(r["q"] for r in base.values())  # order_items not varied


def test_hits_are_exact_at_the_golden_precision_or_near_for_long_figures():
    cells = golden_cells(load_set(SET))
    found = {(h.qid, h.near) for h in values.find_hits(
        [{"a": 7845.214, "b": 7790.0, "c": 3.0, "d": "mystery", "e": 7000.0}], cells)}
    assert (REFUNDED, False) in found           # 7845.214 is 7845.21 at 2 decimals
    assert (REFUNDED, True) in found            # 7790 is within 1% of 7845.21
    assert ("bk_top_genre_units", False) in found  # texts compare case-folded
    assert ("bk_avg_days_to_ship", False) not in found  # 3.0 has one significant digit
    assert not values.find_hits([{"e": 7000.0}], cells)


def test_only_tables_the_set_holds_are_varied(tmp_path):
    base = tmp_path / "model"
    cand = tmp_path / "cand"
    for folder in (base, cand):
        folder.mkdir()
        (folder / "same.csv").write_text("a\n1\n")
    (cand / "edited.csv").write_text("a\n2\n")
    (base / "edited.csv").write_text("a\n1\n")
    (cand / "added.csv").write_text("a\n3\n")
    tables = ["'../data/orders.csv'", "'same.csv'", "'edited.csv'", "added.csv", "warehouse.orders"]
    assert values.varied_tables(tables, cand, base) == [
        "'../data/orders.csv'", "'same.csv'", "warehouse.orders"]


def test_an_unchanged_view_that_reads_a_changed_measure_is_evaluated_too(scratch_set, needs_node):
    cand = scratch_set / "cand-reader"
    shutil.rmtree(cand, ignore_errors=True)
    shutil.copytree(scratch_set / "model", cand)
    f = cand / "bookshop.malloy"
    rule = "    revenue is sum(line_amount) { where: orders.counts_as_sale }\n"
    f.write_text(f.read_text().replace(rule, "    revenue is sum(0) + 90000 + 963.84\n"))
    reasons = _value_reasons(_check(scratch_set, cand))
    view = [r for r in reasons if "the view order_items.by_channel" in r]
    assert any("the measure order_items.revenue" in r and "bk_total_revenue" in r
               for r in reasons), reasons
    assert view and "unchanged but reading a definition the change made" in view[0], reasons


def test_readers_of_follow_references_through_other_definitions():
    definitions = {"models": [{"path": "m.malloy", "sources": {"items": {
        "amount": ["qty", "price"], "total": ["amount"], "by_kind": ["kind", "total"],
        "other": ["qty"]}}, "queries": {"top": {"source": "items", "refs": ["by_kind"]},
                                       "plain": {"source": "items", "refs": ["qty"]}}}]}
    assert values.readers_of(definitions, {("m.malloy", "items", "amount")}) == {
        ("m.malloy", "items", "total"), ("m.malloy", "items", "by_kind"),
        ("m.malloy", None, "top")}


def test_a_baseline_kept_elsewhere_is_compiled_beside_the_candidate_and_removed(
        scratch_set, tmp_path, needs_node):
    checkpoint = tmp_path / "journal" / "checkpoint"  # where a journal keeps it: no ../data there
    shutil.copytree(scratch_set / "model", checkpoint)
    cand = _candidate(scratch_set, "cand-elsewhere",
                      (MEASURES, "    refunded_amount is sum(0) + 784521 / 100\n"))
    result = checks.check_change(load_set(scratch_set), cand, baseline_model=checkpoint)
    assert result.values["sites"] == 1, result.notes  # compared with it: one change, not all
    assert any(REFUNDED in r for r in _value_reasons(result)), result.reasons
    assert not list(scratch_set.glob(".value-check-*"))


def test_a_baseline_that_does_not_compile_has_every_definition_evaluated(
        scratch_set, tmp_path, needs_node):
    broken = tmp_path / "broken"
    shutil.copytree(scratch_set / "model", broken)
    (broken / "bookshop.malloy").write_text("source: nothing is duckdb.table('none.csv')\n")
    cand = _candidate(scratch_set, "cand-against-broken")
    result = checks.check_change(load_set(scratch_set), cand, baseline_model=broken)
    assert any("could not be compiled" in n for n in result.notes), result.notes
    assert result.values["sites"] > 20 and result.ok, result.reasons  # the model reads its data


def test_a_constant_inside_a_nest_is_refused(scratch_set, needs_node):
    view = ("  #(doc) Constant, nested.\n  view: nested_refunds is {\n"
            "    group_by: orders.status\n"
            "    nest: parts is { aggregate: refunded is sum(0) + 7000 + 845.21 }\n  }\n\n")
    cand = _candidate(scratch_set, "cand-nest", ("  #(doc) Revenue per calendar month", view))
    reasons = _value_reasons(_check(scratch_set, cand))
    assert any("the view order_items.nested_refunds" in r and "(column parts.refunded)" in r
               and REFUNDED in r for r in reasons), reasons


def test_a_view_filtered_on_a_written_text_that_groups_by_the_data_is_accepted(
        scratch_set, needs_node):
    view = ("  #(doc) What returned orders paid, per genre.\n  view: returned_by_genre is {\n"
            "    where: orders.status = 'returned'\n    group_by: books.genre\n"
            "    aggregate: paid is sum(line_amount)\n  }\n\n")
    cand = _candidate(scratch_set, "cand-filtered", ("  #(doc) Revenue per calendar month", view))
    result = _check(scratch_set, cand)
    assert result.ok, result.reasons  # its genres (golden texts) read the data
    assert result.values["variant_queries"] >= 1
