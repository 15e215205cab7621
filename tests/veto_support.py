"""A small shop model whose views, measures, dimensions, joins and sources are built on
`shipped_at` and `region`, for the must-not-use expansion tests: its text and data (for the
runner-backed tests) and its definitions as the runner reads them (for the pure ones;
test_model_definitions.py proves the runner gives exactly these). Two of its dimensions carry
names Malloy reserves (`year`, `date`: backticked in the model), so a query's keywords can be
told from its names. The decided veto cases over it are tables here, read by the veto's tests
and by the corpus test (test_veto_corpus.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from malloy_evals.checks.must_not_use import Definitions

SHOP_MODEL = """\
source: customers is duckdb.table('../data/customers.csv') extend {
  primary_key: customer_id
  dimension: is_eu is region = 'EU'
}

source: orders is duckdb.table('../data/orders.csv') extend {
  primary_key: order_id
  join_one: customers on customer_id = customers.customer_id
  join_one: eu_customers is customers extend { where: is_eu } on customer_id = eu_customers.customer_id
  dimension:
    is_late is shipped_at > order_date
    ship_bucket is pick 'late' when is_late else 'on time'
    ship_lag is days(order_date to shipped_at)
    `year` is year(shipped_at)
    `date` is shipped_at::date
  measure:
    order_count is count()
    late_count is count() { where: is_late }
    total is amount.sum()
    eu_total is amount.sum() { where: customers.is_eu }
  view: late_shipments is {
    where: is_late
    aggregate: order_count
  }
  view: by_status is {
    group_by: status
    aggregate: order_count
  }
  view: top_late is late_shipments + { limit: 5 }
  view: with_having is {
    group_by: status
    aggregate: total
    having: late_count > 0
  }
}

source: late_orders is orders extend {
  where: shipped_at > order_date
}

query: late_q is orders -> late_shipments
"""

SHOP_DATA = {
    "orders.csv": "order_id,customer_id,order_date,shipped_at,status,amount\n"
                  "1,1,2024-01-01,2024-01-03,shipped,10.5\n2,2,2024-01-02,,pending,20\n",
    "customers.csv": "customer_id,name,region\n1,Ana,EU\n2,Bo,NA\n",
}

_ORDERS = {
    "by_status": ("status", "order_count"),
    "customers.is_eu": ("customers.region",),
    "eu_customers": ("eu_customers.is_eu",),
    "eu_customers.is_eu": ("eu_customers.region",),
    "eu_total": ("amount", "customers.is_eu"),
    "is_late": ("shipped_at", "order_date"),
    "late_count": ("is_late",),
    "late_shipments": ("order_count", "is_late"),
    "ship_bucket": ("is_late",),
    "ship_lag": ("order_date", "shipped_at"),
    "year": ("shipped_at",),
    "date": ("shipped_at",),
    "top_late": ("order_count", "is_late"),
    "total": ("amount",),
    "with_having": ("status", "total", "late_count"),
}

SHOP_DEFINITIONS = Definitions(
    sources={"customers": {"is_eu": ("region",)},
             "orders": _ORDERS,
             "late_orders": {"": ("shipped_at", "order_date"), **_ORDERS}},
    queries={"late_q": ("orders", ("order_count", "is_late"))},
)


def write_shop(root: Path) -> Path:
    """The shop as a package folder `root/model` with its tables in `root/data`; returns the
    package folder."""
    (root / "model").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "model" / "shop.malloy").write_text(SHOP_MODEL, encoding="utf-8")
    for name, text in SHOP_DATA.items():
        (root / "data" / name).write_text(text, encoding="utf-8")
    return root / "model"


# ------------------------------------------------------------------ decided cases

# The query text alone: (query, entry, whether the entry vetoes).
PRESENCE = [
    pytest.param("run: t -> { aggregate: total_sales_2021_adj }", "total_sales_2021", False,
                 id="longer_name_after"),
    pytest.param("run: t -> { aggregate: total_sales_2021 }", "total_sales_2021", True,
                 id="exact_name"),
    pytest.param("run: t -> { aggregate: c is product.cost.sum() }", "product.cost", True,
                 id="dotted_with_aggregate"),
    pytest.param("run: t -> { aggregate: p is order_items.products.retail_price.sum() }",
                 "products.retail_price", True, id="longer_join_path"),
    pytest.param("run: t -> { group_by: order_items.shipped_at }", "shipped_at", True,
                 id="qualified_use_of_bare_entry"),
    pytest.param("run: t -> { aggregate: p is x_products.retail_price.avg() }",
                 "products.retail_price", False, id="longer_qualifier_name"),
    pytest.param("run: t -> { aggregate: p is products.retail_price_adj.avg() }",
                 "products.retail_price", False, id="longer_leaf_name"),
    pytest.param("run: t -> { aggregate: p is `products`.`retail_price`.avg() }",
                 "products.retail_price", True, id="backtick_identifiers"),
    pytest.param("run: t -> { aggregate: p is products.retail_price.avg() }",
                 "products.retail_price.avg()", True, id="entry_with_aggregate"),
    pytest.param("run: t -> {\n  where: year(shipped_at) = 2022\n}", "shipped_at", True,
                 id="inside_a_function_call"),
    pytest.param("shipped_at", "shipped_at", True, id="whole_text"),
    pytest.param("run: t -> { aggregate: n is count() } -- shipped_at", "shipped_at", False,
                 id="only_in_dash_comment"),
    pytest.param("run: t -> { aggregate: n is count() } // shipped_at", "shipped_at", False,
                 id="only_in_slash_comment"),
    pytest.param("run: t -> { /* shipped_at\n and more */ aggregate: n is count() }", "shipped_at",
                 False, id="only_in_block_comment"),
    pytest.param("run: t -> { where: label = 'shipped_at' }", "shipped_at", False,
                 id="only_in_single_quoted_string"),
    pytest.param('run: t -> { where: label = "shipped_at" }', "shipped_at", False,
                 id="only_in_double_quoted_string"),
    pytest.param('run: t -> { where: doc = """\nshipped_at\n""" }', "shipped_at", False,
                 id="only_in_triple_quoted_string"),
    pytest.param("run: t -> { where: d ~ f'shipped_at > 3' }", "shipped_at", False,
                 id="only_in_malloy_filter_string"),
    pytest.param("run: t -> { where: d ~ r'shipped_at' }", "shipped_at", False,
                 id="only_in_malloy_regex_string"),
    pytest.param("run: t -> { where: url = 'https://x.y/z', aggregate: s is shipped_at.sum() }",
                 "shipped_at", True, id="slashes_inside_url_string_eat_nothing"),
    pytest.param("run: t -> { where: r = '2024-01--2024-06'\n aggregate: total_sales }",
                 "total_sales", True, id="dashes_inside_date_string_eat_nothing"),
    pytest.param("run: t -> { aggregate: n is count() } -- it's shipped_at\n", "shipped_at", False,
                 id="quote_inside_comment_keeps_comment"),
    pytest.param("run: t -> { where: note = 'a -- b', group_by: shipped_at }", "shipped_at", True,
                 id="comment_marker_inside_string"),
    pytest.param("run: t -> { where: `a--b` = 1, group_by: shipped_at }", "shipped_at", True,
                 id="comment_marker_inside_backticks"),
    pytest.param("run: t -> { where: chief'x = 1\n group_by: shipped_at }", "shipped_at", True,
                 id="unclosed_quote_is_just_a_character"),
    pytest.param("run: t -> { group_by: Shipped_At }", "shipped_at", False, id="case_differs"),
]


# books.list_price spelled with blanks and comments Malloy skips between tokens: a veto.
SPELLED_WITH_BLANKS = [
    pytest.param("run: order_items -> { aggregate: x is books . list_price.sum() }",
                 id="spaces_around_the_dot"),
    pytest.param("run: order_items -> { aggregate: x is books\n    .list_price.sum() }",
                 id="newline_before_the_dot"),
    pytest.param("run: order_items -> { aggregate: x is books /* c */ . list_price.sum() }",
                 id="block_comment_beside_the_dot"),
    pytest.param("run: order_items -> { aggregate: x is books. -- note\n list_price.sum() }",
                 id="line_comment_after_the_dot"),
    pytest.param("run: order_items -> { aggregate: x is `books` . `list_price`.sum() }",
                 id="spaced_backtick_segments"),
    pytest.param("run: order_items extend { measure: m is books.list_price.sum() } -> "
                 "{ aggregate: m }", id="inside_an_extend_measure"),
]


# Spellings that name another field (or none) than books.list_price: no veto.
LOOKALIKE_SPELLINGS = [
    pytest.param("run: order_items -> { aggregate: x is BOOKS.LIST_PRICE.sum() }",
                 id="other_case_does_not_compile"),
    pytest.param("run: order_items -> { aggregate: x is books.list\u200b_price.sum() }",
                 id="zero_width_space_does_not_compile"),
    pytest.param("run: order_items -> { aggregate: x is books.list_pri\u0441e.sum() }",
                 id="cyrillic_lookalike_is_another_name"),
]


# books.list_price only inside noise: absent.
ONLY_IN_NOISE = [
    pytest.param("run: t -> { where: note = f'{books.list_price}' }", id="inside_a_prefixed_string"),
    pytest.param("run: t -> { aggregate: c is count() } -- books.list_price", id="in_a_comment"),
    pytest.param("run: t -> { where: a = 1--books.list_price\n aggregate: c is count() }",
                 id="double_dash_opens_a_comment_in_malloy"),
]


# A quote inside an annotation hides nothing after it: list_price vetoes.
QUOTE_IN_ANNOTATION = [
    pytest.param('# """\nrun: books -> { aggregate: x is list_price.sum() }',
                 id="triple_quote_in_an_annotation_before_run"),
    pytest.param('#(doc) """\nrun: books -> { aggregate: x is list_price.sum() }',
                 id="triple_quote_in_a_doc_annotation"),
    pytest.param('run: books -> {\n  # """\n  aggregate: x is list_price.sum() }',
                 id="triple_quote_in_an_inner_annotation"),
]


# Through SHOP_DEFINITIONS: (query, entry, the path the veto reports).
THROUGH_THE_MODEL = [
    pytest.param("run: orders -> late_shipments", "shipped_at",
                 "late_shipments -> is_late -> shipped_at", id="named_view"),
    pytest.param("run: orders -> top_late + { limit: 2 }", "shipped_at",
                 "top_late -> is_late -> shipped_at", id="refined_view_built_on_a_view"),
    pytest.param("run: orders -> { aggregate: late_count }", "shipped_at",
                 "late_count -> is_late -> shipped_at", id="filtered_measure"),
    pytest.param("run: orders -> { group_by: ship_bucket }", "shipped_at",
                 "ship_bucket -> is_late -> shipped_at", id="dimension_on_a_dimension"),
    pytest.param("run: orders -> { group_by: status\n nest: late_shipments }", "shipped_at",
                 "late_shipments -> is_late -> shipped_at", id="nested_view"),
    pytest.param("run: orders -> with_having", "shipped_at",
                 "with_having -> late_count -> is_late -> shipped_at", id="view_with_having"),
    pytest.param("run: orders -> { where: is_late\n aggregate: order_count }", "shipped_at",
                 "is_late -> shipped_at", id="dimension_in_a_where"),
    pytest.param("run: late_orders -> by_status", "shipped_at", "late_orders -> shipped_at",
                 id="source_extension_filter"),
    pytest.param("run: late_q", "shipped_at", "late_q -> is_late -> shipped_at", id="named_query"),
    pytest.param("query: mine is orders -> late_shipments\nrun: mine", "shipped_at",
                 "late_shipments -> is_late -> shipped_at", id="query_defined_in_the_text"),
    pytest.param("run: orders -> { group_by: eu_customers.name }", "region",
                 "eu_customers -> eu_customers.is_eu -> eu_customers.region", id="filtered_join"),
    pytest.param("run: orders -> { aggregate: eu_total }", "customers.region",
                 "eu_total -> customers.is_eu -> customers.region", id="measure_through_a_join"),
    pytest.param("source: o2 is orders extend { dimension: z is 1 }\nrun: o2 -> late_shipments",
                 "shipped_at", "late_shipments -> is_late -> shipped_at", id="source_alias_in_the_text"),
    pytest.param("run: orders extend { join_one: c is customers on customer_id = c.customer_id } "
                 "-> { group_by: c.is_eu }", "region", "c.is_eu -> c.region",
                 id="join_alias_in_the_text"),
    pytest.param("run: orders -> { aggregate: books_late is late_count }", "is_late",
                 "late_count -> is_late", id="entry_naming_a_dimension"),
]


# Through SHOP_DEFINITIONS, definitions that do not reach the entry: (query, entry), absent.
NOT_THROUGH_THE_MODEL = [
    pytest.param("run: orders -> by_status", "shipped_at", id="a_view_without_it"),
    pytest.param("run: orders -> { aggregate: total }", "shipped_at", id="a_measure_without_it"),
    pytest.param("run: orders -> { aggregate: is_late is count() }", "shipped_at",
                 id="a_name_the_query_defines_itself"),
    pytest.param("run: orders -> { group_by: customers.name }", "customer_id",
                 id="a_join_key_is_plumbing"),
    pytest.param("run: orders -> by_status // late_shipments", "shipped_at",
                 id="a_view_named_in_a_comment"),
    pytest.param("run: orders -> { where: status = 'late_shipments'\n aggregate: order_count }",
                 "shipped_at", id="a_view_named_in_a_string"),
    pytest.param("run: customers -> { group_by: name }", "region", id="another_source"),
    pytest.param("run: orders -> { group_by: ship_bucket }", "region", id="an_unrelated_chain"),
]


# shipped_at with mustNotUseAllowedIn: (query, the definitions it is allowed in, allowed | hit).
ALLOWED_INSIDE = [
    pytest.param("run: orders -> late_shipments", ["is_late"], "allowed", id="only_inside_it"),
    pytest.param("run: orders -> late_shipments", ["orders.is_late"], "allowed",
                 id="named_with_its_source"),
    pytest.param("run: late_q", ["late_q"], "allowed", id="a_named_query"),
    pytest.param("run: late_orders -> by_status", ["late_orders"], "allowed",
                 id="a_source_filter"),
    pytest.param("run: orders -> { aggregate: late_count\n group_by: lag is ship_lag }",
                 ["is_late"], "hit", id="also_through_another_definition"),
    pytest.param("run: orders -> { where: shipped_at is not null\n aggregate: late_count }",
                 ["is_late"], "hit", id="also_in_the_query_text"),
    pytest.param("run: orders -> late_shipments", ["ship_lag"], "hit", id="allowed_elsewhere"),
]


# Words Malloy reserves, as a query writes them: unquoted they are keywords (no field is named by
# them, whatever the model calls its fields); backticked they are names. Through SHOP_DEFINITIONS,
# whose `year` and `date` are built on shipped_at: (query, entry, whether it vetoes).
KEYWORDS_THROUGH_THE_MODEL = [
    pytest.param("run: orders -> { group_by: d is order_date::date }", "shipped_at", False,
                 id="a_cast"),
    pytest.param("run: orders -> { where: order_date ? @2024 for 1 year\n aggregate: order_count }",
                 "shipped_at", False, id="a_timeframe"),
    pytest.param("run: orders -> { group_by: m is order_date.year\n aggregate: order_count }",
                 "shipped_at", False, id="a_truncation"),
    pytest.param("run: orders -> { group_by: y is YEAR (order_date) }", "shipped_at", False,
                 id="a_function_in_capitals_with_a_blank"),
    pytest.param("run: orders -> { group_by: `year` }", "shipped_at", True, id="the_quoted_name"),
    pytest.param("run: orders -> { where: `date` > @2024-01-01\n aggregate: order_count }",
                 "shipped_at", True, id="the_quoted_name_in_a_filter"),
]

# The same in the query text alone: (query, entry, whether it vetoes).
KEYWORDS_IN_THE_TEXT = [
    pytest.param("run: t -> { group_by: status\n aggregate: n is count()\n order_by: n desc }",
                 "desc", False, id="an_order"),
    pytest.param("run: t -> { group_by: `desc` }", "desc", True, id="a_field_called_desc"),
    pytest.param("run: t -> { group_by: d is shipped_at::date }", "date", False, id="a_cast"),
    pytest.param("run: t -> { group_by: d is shipped_at::date }", "shipped_at", True,
                 id="the_field_cast"),
]

# Block annotations (`#|` ... `|#`, `##|` ... `|##`), which Malloy reads to a closing line at the
# opener's column, and a backticked name glued to the next word: (query, whether list_price vetoes).
READ_AS_MALLOY_LEXES = [
    pytest.param("#| about list_price\nlist_price is the catalogue price\n|#\n"
                 "run: books -> { aggregate: n is count() }", False, id="a_block_before_the_query"),
    pytest.param("##| doc\nlist_price\n|##\nrun: books -> { aggregate: n is count() }", False,
                 id="a_doc_block"),
    pytest.param("run: books -> {\n  #| note\n  list_price\n  |#\n  aggregate: n is count() }", False,
                 id="a_block_inside_closed_at_its_column"),
    pytest.param("run: books -> {\n  #| note\n|#\n  aggregate: x is list_price.sum() }", False,
                 id="a_closer_at_another_column_closes_nothing"),
    pytest.param("#| x\n|##\nrun: books -> { aggregate: x is list_price.sum() }", False,
                 id="a_doc_closer_does_not_close_a_block"),
    pytest.param("#| x\n|#\nrun: books -> { aggregate: x is list_price.sum() }", True,
                 id="the_query_after_a_closed_block"),
    pytest.param("run: books -> { group_by: `list_price`aggregate: n is count() }", True,
                 id="a_backticked_name_glued_to_a_keyword"),
]
