"""check_must_not_use: entry classes, one-pass blanking, whole-path presence, buckets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from malloy_evals.checks.must_not_use import (
    blank_noise,
    check_must_not_use,
    classify_entry,
    noise_spans,
    render_text,
)
from veto_support import (
    ALLOWED_INSIDE,
    KEYWORDS_IN_THE_TEXT,
    KEYWORDS_THROUGH_THE_MODEL,
    LOOKALIKE_SPELLINGS,
    NOT_THROUGH_THE_MODEL,
    ONLY_IN_NOISE,
    PRESENCE,
    QUOTE_IN_ANNOTATION,
    READ_AS_MALLOY_LEXES,
    SHOP_DEFINITIONS,
    SPELLED_WITH_BLANKS,
    THROUGH_THE_MODEL,
)

SCRIPT = Path(__file__).resolve().parents[1] / "skills" / "eval-answer" / "scripts" / "check_must_not_use.py"


# ------------------------------------------------------------------ entry classes

@pytest.mark.parametrize("entry, path", [
    pytest.param("shipped_at", "shipped_at", id="bare_name"),
    pytest.param("product.cost", "product.cost", id="dotted"),
    pytest.param("products.retail_price.avg()", "products.retail_price", id="trailing_aggregate"),
    pytest.param("retail_price.sum( )", "retail_price", id="aggregate_with_space"),
    pytest.param("  order_items.shipped_at  ", "order_items.shipped_at", id="surrounding_space"),
    pytest.param("`products`.`retail_price`", "products.retail_price", id="backticks"),
])
def test_decidable_entry_names_its_path(entry, path):
    assert classify_entry(entry) == path


@pytest.mark.parametrize("entry", [
    pytest.param("weekly_active_users as a cumulative series", id="as_connective"),
    pytest.param("total_sales as the answer", id="as_the_answer"),
    pytest.param("sale_price.avg() as spend per customer", id="aggregate_as"),
    pytest.param("product.cost through the order_items join", id="through_connective"),
    pytest.param("products.retail_price.avg() through the product join", id="aggregate_through"),
    pytest.param("inventory_items.sold_at as a count of units actually sold", id="as_count"),
    pytest.param("an average of per-SKU prices", id="plain_prose"),
    pytest.param("status = 'Cancelled' as an abandonment proxy", id="condition"),
    pytest.param("a line-item denominator", id="hyphenated_prose"),
    pytest.param("1207 + 1701 as a sum", id="arithmetic"),
    pytest.param("November 2022 as the answer without naming the truncation", id="date_prose"),
    pytest.param("sum(retail_price)", id="function_call_form"),
    pytest.param("2022_sales", id="leading_digit"),
    pytest.param("avg()", id="call_alone"),
    pytest.param("", id="empty"),
])
def test_prose_entry_is_not_decidable(entry):
    assert classify_entry(entry) is None


# ------------------------------------------------------------------ presence

@pytest.mark.parametrize("query, entry, hit", PRESENCE)
def test_presence(query, entry, hit):
    result = check_must_not_use(query, [entry])
    assert (result.hits == [entry]) is hit


def test_dotted_entry_never_hits_its_bare_leaf():
    result = check_must_not_use("run: t -> { aggregate: c is cost.sum() }", ["product.cost"])
    assert result.hits == []
    assert result.leaf_hits == ["product.cost"]


def test_leaf_under_another_qualifier_is_a_leaf_hit():
    result = check_must_not_use("run: t -> { aggregate: c is inventory_items.cost.sum() }",
                                ["product.cost"])
    assert (result.hits, result.leaf_hits) == ([], ["product.cost"])
    assert result.exit_code == 0


def test_dotted_hit_is_not_also_a_leaf_hit():
    result = check_must_not_use("run: t -> { aggregate: c is product.cost.sum() }", ["product.cost"])
    assert (result.hits, result.leaf_hits) == (["product.cost"], [])
    assert result.exit_code == 1


# ------------------------------------------------------------------ buckets and the note

def test_hit_and_absent_entries_go_to_their_buckets():
    result = check_must_not_use("run: t -> { where: year(shipped_at) = 2022 }",
                                ["shipped_at", "delivered_at"])
    assert result.hits == ["shipped_at"]
    assert result.absent == ["delivered_at"]
    assert result.unchecked == []
    assert result.checked == ["shipped_at"]


def test_absent_entry_goes_to_nobody_else():
    result = check_must_not_use("run: t -> { aggregate: other.cost.sum() }", ["products.retail_price"])
    assert result.absent == ["products.retail_price"]
    assert (result.hits, result.leaf_hits, result.unchecked, result.checked) == ([], [], [], [])
    assert result.judge_note == ""


def test_joined_path_hit_leaves_nothing_unchecked():
    result = check_must_not_use("run: t -> { aggregate: p is order_items.products.retail_price.sum() }",
                                ["products.retail_price"])
    assert result.hits == ["products.retail_price"] and result.unchecked == []


def test_prose_entry_using_a_present_field_is_unchecked_not_a_hit():
    result = check_must_not_use("run: t -> { aggregate: weekly_active_users }",
                                ["weekly_active_users as a cumulative series"])
    assert result.hits == []
    assert result.unchecked == ["weekly_active_users as a cumulative series"]


def test_no_query_leaves_every_entry_unchecked():
    result = check_must_not_use(None, ["shipped_at", "x as y"])
    assert result.unchecked == ["shipped_at", "x as y"]
    assert (result.hits, result.absent, result.checked) == ([], [], [])
    assert result.exit_code == 0


def test_blank_query_counts_as_no_query():
    assert check_must_not_use("  \n", ["shipped_at"]).unchecked == ["shipped_at"]


def test_zero_entries_is_valid_and_clean():
    result = check_must_not_use("run: t -> { aggregate: n is count() }", [])
    assert (result.hits, result.leaf_hits, result.unchecked, result.absent, result.checked,
            result.judge_note) == ([], [], [], [], [], "")
    assert result.exit_code == 0


def test_entries_are_reported_as_written_and_checked_normalised():
    result = check_must_not_use("run: t -> { aggregate: p is products.retail_price.avg() }",
                                ["products.retail_price.avg()"])
    assert result.hits == ["products.retail_price.avg()"]
    assert result.checked == ["products.retail_price"]


def test_judge_note_has_prose_and_leaf_lines_but_never_a_vetoed_entry():
    result = check_must_not_use(
        "run: t -> { where: year(shipped_at) = 2022, aggregate: c is cost.sum() }",
        ["an average of per-SKU prices", "product.cost", "shipped_at"])
    lines = result.judge_note.splitlines()
    assert len(lines) == 2
    assert "an average of per-SKU prices" in lines[0]
    assert "product.cost" in lines[1] and "bare `cost`" in lines[1]
    assert "shipped_at" not in result.judge_note


# ------------------------------------------------------------------ blanking

def test_blanking_keeps_length_and_newlines():
    text = "a -- c\n'x'\n/* y\nz */ b"
    out = blank_noise(text)
    assert len(out) == len(text)
    assert out == "a     \n   \n    \n     b"


def test_first_opened_token_wins():
    assert blank_noise("'--' x") == "     x"
    assert blank_noise("-- 'x\ny") == "     \ny"


QUERY_ALPHABET = st.sampled_from(list("ab_.` \n'\"-/*frxy12{}()=:") + ["--", "//", "/*", "*/",
                                                                       '"""', "f'", "r'"])


@settings(max_examples=300, deadline=None)
@given(st.lists(QUERY_ALPHABET, max_size=60).map("".join))
def test_blanking_never_shifts_positions(text):
    out = blank_noise(text)
    assert len(out) == len(text)
    spans = noise_spans(text)
    inside = {k for start, end in spans for k in range(start, end)}
    for k, (before, after) in enumerate(zip(text, out, strict=True)):
        if before == "\n":
            assert after == "\n"
        elif k in inside:
            assert after == " "
        else:
            assert after == before


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80), st.lists(st.text(max_size=20), max_size=4))
def test_checking_arbitrary_text_never_raises(query, entries):
    result = check_must_not_use(query, entries)
    buckets = result.hits + result.leaf_hits + result.unchecked + result.absent
    assert sorted(buckets) == sorted(entries)


# ------------------------------------------------------------------ the script

def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, check=False)


KEYS = {"hits", "leaf_hits", "unchecked", "absent", "checked", "judge_note"}


def test_cli_hit_exits_1_with_the_spec_keys():
    out = _run("--query", "run: t -> { aggregate: x is books.list_price.sum() }",
               "books.list_price", "list price as revenue", "--json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == KEYS
    assert doc["hits"] == ["books.list_price"]
    assert doc["unchecked"] == ["list price as revenue"]


def test_cli_query_file_without_hit_exits_0(tmp_path):
    query = tmp_path / "final.malloy"
    query.write_text("run: order_items -> { aggregate: revenue } -- not books.list_price\n")
    out = _run("--query-file", str(query), "books.list_price", "--json")
    assert out.returncode == 0
    assert json.loads(out.stdout)["absent"] == ["books.list_price"]


def test_cli_without_a_query_is_a_usage_error():
    assert _run("books.list_price").returncode == 2


def test_cli_set_without_qid_is_a_usage_error():
    assert _run("--query", "x", "--set", "evals/bookshop").returncode == 2


def test_cli_missing_query_file_is_a_usage_error(tmp_path):
    # Drift fixed: a path argument that is not there is exit 2 in every script (it was 3 here).
    out = _run("--query-file", str(tmp_path / "nope.malloy"), "x", "--json")
    assert out.returncode == 2
    assert "nope.malloy: no such file" in out.stderr and "Traceback" not in out.stderr


def test_cli_unreadable_query_file_exits_3(tmp_path):
    bad = tmp_path / "final.malloy"
    bad.write_bytes(b"run: \xff\xfe")
    out = _run("--query-file", str(bad), "x", "--json")
    assert out.returncode == 3
    assert "final.malloy: not UTF-8 text" in out.stderr and "Traceback" not in out.stderr


def test_cli_reads_must_not_use_from_the_set(tmp_path):
    set_dir = tmp_path / "shop"
    set_dir.mkdir()
    (set_dir / "set.json").write_text(json.dumps({
        "name": "shop", "datasetVersion": 1, "targetPackage": "shop",
        "targetModelPath": "shop.malloy"}))
    case = {"qid": "q1", "question": "Total revenue?", "goldenRevision": 1,
            "golden": {"status": "verified", "kind": "scalar", "value": {"revenue": 1.0},
                       "mustNotUse": ["books.list_price", "list price as revenue"]}}
    (set_dir / "cases.jsonl").write_text(json.dumps(case) + "\n")
    out = _run("--query", "run: t -> { aggregate: r is books.list_price.sum() }",
               "--set", str(set_dir), "--qid", "q1", "--json")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert doc["hits"] == ["books.list_price"]
    assert doc["unchecked"] == ["list price as revenue"]


# ------------------------------------------------------------------ evasion attempts (review)

@pytest.mark.parametrize("query", SPELLED_WITH_BLANKS)
def test_forbidden_path_spelled_with_blanks_malloy_ignores_is_a_hit(query):
    # Regression: the Malloy runtime compiles `books . list_price` (whitespace and comments
    # between tokens are skipped), and the veto used to miss it (a leaf hit, or even absent).
    result = check_must_not_use(query, ["books.list_price"])
    assert result.hits == ["books.list_price"]
    assert result.exit_code == 1


@pytest.mark.parametrize("query", LOOKALIKE_SPELLINGS)
def test_lookalike_spellings_are_not_the_forbidden_path(query):
    # Malloy identifiers are case-sensitive ASCII names: these do not name the field (the query
    # fails to compile or names another field), so they are no veto; the judge sees the rows.
    assert check_must_not_use(query, ["books.list_price"]).hits == []


def test_renamed_forbidden_leaf_in_an_extend_is_a_leaf_hit_for_the_judge():
    # A dotted entry never hits a bare leaf; `dimension: x is list_price` inside
    # `books extend` is shown to the judge as a suspicion, not vetoed.
    query = "run: books extend { dimension: x is list_price } -> { aggregate: a is x.sum() }"
    result = check_must_not_use(query, ["books.list_price"])
    assert (result.hits, result.leaf_hits) == ([], ["books.list_price"])
    assert "list_price" in result.judge_note


def test_bare_entry_renamed_in_an_extend_is_a_hit():
    query = "run: order_items extend { measure: lv is list_value } -> { aggregate: lv }"
    assert check_must_not_use(query, ["list_value"]).hits == ["list_value"]


@pytest.mark.parametrize("query", ONLY_IN_NOISE)
def test_forbidden_path_only_in_noise_is_absent(query):
    assert check_must_not_use(query, ["books.list_price"]).absent == ["books.list_price"]


@pytest.mark.parametrize("query", QUOTE_IN_ANNOTATION)
def test_quote_inside_an_annotation_cannot_hide_the_query_after_it(query):
    # Regression: Malloy runs these (an annotation ends at its line), but the blanker opened a
    # triple-quoted string at `# """` and blanked the rest of the query: the veto was evaded.
    assert check_must_not_use(query, ["list_price"]).hits == ["list_price"]


@pytest.mark.parametrize("query, hit", READ_AS_MALLOY_LEXES)
def test_the_query_is_read_as_malloy_lexes_it_block_annotations_and_backticks(query, hit):
    # Regression: a field named on the lines of a `#| ... |#` block (a note, not code) vetoed
    # the answer; the blanker ended every annotation at its first line.
    assert (check_must_not_use(query, ["list_price"]).hits == ["list_price"]) is hit


@pytest.mark.parametrize("query, entry, hit", KEYWORDS_IN_THE_TEXT)
def test_an_unquoted_reserved_word_is_a_keyword_never_a_field(query, entry, hit):
    assert (check_must_not_use(query, [entry]).hits == [entry]) is hit


@pytest.mark.parametrize("query, entry, hit", KEYWORDS_THROUGH_THE_MODEL)
def test_a_keyword_in_the_query_does_not_expand_the_models_field_of_that_name(query, entry, hit):
    # Regression: the expansion took `::date`, `for 1 year`, `.year` for the model's `date` and
    # `year` dimensions (built on shipped_at) and vetoed answers the text alone decided right.
    result = check_must_not_use(query, [entry], definitions=SHOP_DEFINITIONS)
    assert (result.hits == [entry]) is hit
    assert (entry in result.paths) is hit


def test_field_named_only_in_an_annotation_is_absent():
    query = "# books.list_price is not used here\nrun: books -> { aggregate: y is count() }"
    assert check_must_not_use(query, ["list_price"]).absent == ["list_price"]


# ------------------------------------------------------------------ through the model's definitions
# The shop of veto_support.py: `is_late` compares shipped_at with order_date, and views, measures,
# dimensions, a source and a named query are built on it; `eu_customers` filters on region.

@pytest.mark.parametrize("query, entry, path", THROUGH_THE_MODEL)
def test_a_forbidden_field_inside_a_named_definition_is_a_hit_with_its_path(query, entry, path):
    result = check_must_not_use(query, [entry], definitions=SHOP_DEFINITIONS)
    assert result.hits == [entry]
    assert result.paths == {entry: path}
    assert result.expansion == "expanded"
    assert result.exit_code == 1


@pytest.mark.parametrize("query, entry", NOT_THROUGH_THE_MODEL)
def test_definitions_that_do_not_reach_the_field_leave_it_absent(query, entry):
    result = check_must_not_use(query, [entry], definitions=SHOP_DEFINITIONS)
    assert result.hits == [] and result.leaf_hits == []
    assert result.absent == [entry]


def test_a_dotted_entry_reached_only_as_its_bare_leaf_is_a_leaf_hit_for_the_judge_with_its_path():
    result = check_must_not_use("run: orders -> late_shipments", ["order_items.shipped_at"],
                                definitions=SHOP_DEFINITIONS)
    assert (result.hits, result.leaf_hits) == ([], ["order_items.shipped_at"])
    assert "late_shipments -> is_late -> shipped_at" in result.judge_note
    assert result.exit_code == 0


def test_a_text_hit_needs_no_path():
    result = check_must_not_use("run: orders -> { where: shipped_at > order_date\n"
                                "aggregate: late_count }", ["shipped_at"],
                                definitions=SHOP_DEFINITIONS)
    assert result.hits == ["shipped_at"] and result.paths == {}


@pytest.mark.parametrize("query, allowed, verdict", ALLOWED_INSIDE)
def test_an_entry_allowed_inside_a_named_definition_is_not_a_veto_there(query, allowed, verdict):
    result = check_must_not_use(query, ["shipped_at"], definitions=SHOP_DEFINITIONS,
                                allowed_in={"shipped_at": allowed})
    if verdict == "allowed":
        assert (result.hits, result.allowed, result.exit_code) == ([], ["shipped_at"], 0)
    else:
        assert (result.hits, result.allowed, result.exit_code) == (["shipped_at"], [], 1)


def test_the_hit_path_avoids_the_allowed_definition_when_another_reaches_the_field():
    result = check_must_not_use("run: orders -> { aggregate: late_count\n group_by: ship_lag }",
                                ["shipped_at"], definitions=SHOP_DEFINITIONS,
                                allowed_in={"shipped_at": ["is_late"]})
    assert result.paths == {"shipped_at": "ship_lag -> shipped_at"}


def test_without_a_model_the_veto_reads_the_text_alone_and_keeps_its_six_keys():
    result = check_must_not_use("run: orders -> late_shipments", ["shipped_at"])
    assert (result.hits, result.expansion) == ([], None)
    assert set(result.to_json()) == KEYS


def test_a_model_that_could_not_be_read_says_why_and_decides_on_the_text():
    result = check_must_not_use("run: orders -> { group_by: shipped_at }", ["shipped_at"],
                                definitions="node is not on PATH")
    assert result.hits == ["shipped_at"]
    assert result.expansion == "not possible: node is not on PATH"
    assert set(result.to_json()) == KEYS | {"paths", "allowed", "expansion", "through_outputs"}


@pytest.mark.parametrize("query, why", [
    pytest.param("run: invoices -> late_shipments", "the query's source invoices is not in the model",
                 id="unknown_source"),
    pytest.param("late_shipments", "no `run:` names the query's source", id="no_source_at_all"),
])
def test_an_expansion_that_cannot_find_the_source_says_so(query, why):
    result = check_must_not_use(query, ["shipped_at"], definitions=SHOP_DEFINITIONS)
    assert result.expansion == f"not possible: {why}"
    assert result.absent == ["shipped_at"]


def test_definition_names_include_join_and_source_qualified_forms():
    names = SHOP_DEFINITIONS.names()
    assert {"late_shipments", "orders.late_shipments", "is_eu", "customers.is_eu",
            "orders.customers.is_eu", "late_q", "late_orders"} <= names
    assert "shipped_at" not in names


def test_text_rendering_names_the_path_and_the_expansion():
    text = render_text(check_must_not_use("run: orders -> late_shipments", ["shipped_at"],
                                          definitions=SHOP_DEFINITIONS))
    assert "VETO" in text and "late_shipments -> is_late -> shipped_at" in text
    assert "not possible (no model given)" in render_text(check_must_not_use("run: x", ["y"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list("abcdefghij_. {}:->\n'\"/*#") + [
    "run:", "orders", "late_shipments", "is_late", "join_one:", " is ", "source:", "extend",
    "late_q", "eu_customers"]), max_size=40).map("".join), st.lists(st.sampled_from(
        ["shipped_at", "region", "a.b", "is_late", "x as y"]), max_size=3))
def test_expanding_arbitrary_text_never_raises(query, entries):
    result = check_must_not_use(query, entries, definitions=SHOP_DEFINITIONS,
                                allowed_in={"shipped_at": ["is_late"]})
    assert sorted(result.hits + result.leaf_hits + result.unchecked + result.absent
                  + result.allowed) == sorted(entries)
