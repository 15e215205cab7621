"""A small shop model whose views, measures, dimensions, joins and sources are built on
`shipped_at` and `region`, for the must-not-use expansion tests: its text and data (for the
runner-backed tests) and its definitions as the runner reads them (for the pure ones;
test_model_definitions.py proves the runner gives exactly these)."""

from __future__ import annotations

from pathlib import Path

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
