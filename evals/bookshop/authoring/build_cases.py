"""Author the bookshop set's cases.jsonl (and goldens/) from the case definitions below.

Each value golden's canonicalQuery runs on the truth package through the kit's runtime (trusted,
unrestricted compile), and a hand-written DuckDB SQL twin over the CSVs must agree row for row
before anything is written; rubric numbers for the WRONG / ACCEPT / DIVERGENT clauses come from
auxiliary truth queries. The output is what a person would otherwise type by hand; edit the
definitions here, not cases.jsonl, and bump the case's goldenRevision when its golden changes.

Example:
  .venv/bin/python evals/bookshop/authoring/build_cases.py
"""
import csv
import json
import math
import sys
from pathlib import Path

import duckdb
from malloy_evals.endpoint.runner import MalloyRuntime, default_allow

SET = Path(__file__).resolve().parents[1]
DATA = SET / "data"

ITEMS = """order_items extend {
  join_one: o is orders extend { join_one: c is customers on customer_id = c.customer_id } on order_id = o.order_id
  join_one: b is books on book_id = b.book_id
}"""
SALE = "o.status = 'shipped' or o.status = 'pending'"
SQL_ITEMS = f"""'{DATA}/order_items.csv' i join '{DATA}/orders.csv' o using (order_id)
  join '{DATA}/customers.csv' c using (customer_id) join '{DATA}/books.csv' b using (book_id)"""
SQL_SALE = "o.status in ('shipped', 'pending')"
ORD = f"'{DATA}/orders.csv'"
CUS = f"'{DATA}/customers.csv'"
BKS = f"'{DATA}/books.csv'"

_RUNTIME: MalloyRuntime | None = None


def malloy(queries):
    """Run trusted queries on the truth package: [{rows}] or [{error}] per query."""
    global _RUNTIME
    if _RUNTIME is None:
        truth = SET / "truth"
        _RUNTIME = MalloyRuntime(truth, allow=default_allow(truth))
    out = []
    for q in queries:
        try:
            out.append({"rows": _RUNTIME.execute(q, model_path="truth.malloy", trusted=True)["rows"]})
        except Exception as exc:  # noqa: BLE001 - reported per query
            out.append({"error": str(exc)})
    return out


def sql(q):
    """The DuckDB twin of a canonical query: rows as dicts, one thread (deterministic sums)."""
    con = duckdb.connect()
    con.execute("set threads=1")
    cur = con.execute(q)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


CASES = []


def case(**kw):
    """Register one case definition (kept in the order cases.jsonl lists them)."""
    CASES.append(kw)


# ---------------------------------------------------------------- covered, scalar
case(
    qid="bk_total_revenue", split="dev", coverage="covered", tags=["revenue", "trap:list-price"],
    question="What is the shop's total revenue across all the data we have?",
    coverageNote="measure:order_items:revenue",
    requiresConcepts=["revenue (net of discounts, excluding cancelled and returned orders)"],
    expectedEntities={"required": ["measure:order_items:revenue"], "requiredAnyOf": [],
                      "acceptable": ["source:order_items:order_items", "dimension:order_items:unit_price",
                                     "dimension:order_items:line_amount"]},
    kind="scalar", col="revenue", round=2,
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  aggregate: revenue is sum(quantity * unit_price)\n}}",
    sql=f"select sum(quantity * unit_price) as revenue from {SQL_ITEMS} where {SQL_SALE}",
    aux={"gross": "run: order_items -> { aggregate: v is sum(quantity * unit_price) }",
         "listv": f"run: {ITEMS} -> {{ where: {SALE}; aggregate: v is sum(quantity * b.list_price) }}",
         "listall": f"run: {ITEMS} -> {{ aggregate: v is sum(quantity * b.list_price) }}"},
    rubric=("PREFERRED: total revenue {v:,.2f} dollars: quantity times unit_price over shipped and pending orders. "
            "WRONG: {gross:,.2f} (gross bookings, which keep cancelled and returned orders) presented as revenue. "
            "WRONG: {listv:,.2f}, {listall:,.2f} (the list_value measure) or any figure priced at books.list_price (list price as revenue). "
            "CREDITED: saying the data runs from January 2024 to June 2025."),
    mustState=[],
    mustNotUse=["list_value", "order_items.gross_revenue", "books.list_price.sum()", "list price as revenue"],
)

case(
    qid="bk_revenue_2024", split="dev", coverage="covered", tags=["revenue", "time", "trap:ship-date"],
    question="How much revenue did we make in 2024?",
    coverageNote="measure:order_items:revenue filtered on dimension:orders:order_date",
    requiresConcepts=["revenue", "calendar year by order date"],
    expectedEntities={"required": ["measure:order_items:revenue", "dimension:orders:order_date"],
                      "requiredAnyOf": [], "acceptable": ["view:order_items:monthly_revenue"]},
    kind="scalar", col="revenue", round=2,
    canon=f"run: {ITEMS} -> {{\n  where: ({SALE}) and year(o.order_date) = 2024\n  aggregate: revenue is sum(quantity * unit_price)\n}}",
    sql=f"select sum(quantity * unit_price) as revenue from {SQL_ITEMS} where {SQL_SALE} and year(o.order_date) = 2024",
    aux={"byship": f"run: {ITEMS} -> {{ where: ({SALE}) and year(o.ship_date) = 2024; aggregate: v is sum(quantity * unit_price) }}",
         "gross": f"run: {ITEMS} -> {{ where: year(o.order_date) = 2024; aggregate: v is sum(quantity * unit_price) }}"},
    rubric=("PREFERRED: {v:,.2f} dollars, revenue on orders placed in 2024 (by order_date). "
            "WRONG: {byship:,.2f}, the same revenue bucketed by ship_date. "
            "WRONG: {gross:,.2f}, which keeps cancelled and returned orders."),
    mustState=[],
    mustNotUse=["ship_date", "order_items.gross_revenue"],
)

case(
    qid="bk_gross_bookings", split="dev", coverage="covered", tags=["revenue"],
    question="What were our gross bookings, counting every order including cancelled and returned ones?",
    coverageNote="measure:order_items:gross_revenue",
    requiresConcepts=["gross bookings over all order statuses"],
    expectedEntities={"required": ["measure:order_items:gross_revenue"], "requiredAnyOf": [],
                      "acceptable": ["dimension:orders:status", "dimension:order_items:line_amount"]},
    kind="scalar", col="gross_revenue", round=2,
    canon="run: order_items -> {\n  aggregate: gross_revenue is sum(quantity * unit_price)\n}",
    sql=f"select sum(quantity * unit_price) as gross_revenue from '{DATA}/order_items.csv'",
    aux={"net": f"run: {ITEMS} -> {{ where: {SALE}; aggregate: v is sum(quantity * unit_price) }}"},
    rubric=("PREFERRED: {v:,.2f} dollars, quantity times unit_price over every order line. "
            "WRONG: {net:,.2f}, net revenue, which drops cancelled and returned orders the question asked to include."),
    mustState=[], mustNotUse=["list_value"],
)

case(
    qid="bk_member_count", split="dev", coverage="covered", tags=["customers"],
    question="How many of our customers are loyalty programme members?",
    coverageNote="dimension:customers:is_member with measure:customers:customer_count",
    requiresConcepts=["loyalty membership flag", "customer count"],
    expectedEntities={"required": ["dimension:customers:is_member"],
                      "requiredAnyOf": [["measure:customers:customer_count", "source:customers:customers"]],
                      "acceptable": []},
    kind="scalar", col="members", round=None,
    canon="run: customers -> {\n  where: is_member\n  aggregate: members is count()\n}",
    sql=f"select count(*) as members from {CUS} where is_member",
    aux={"ordering": "run: orders extend { join_one: c is customers on customer_id = c.customer_id } -> { where: c.is_member; aggregate: v is count(customer_id) }"},
    rubric=("PREFERRED: {v} member accounts. "
            "ACCEPT: {ordering} if the answer says it counts only members who placed at least one order. "
            "CREDITED: the share of all 600 accounts."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_signups_2024", split="dev", coverage="covered", tags=["customers", "time"],
    question="How many new customer accounts were opened in 2024?",
    coverageNote="dimension:customers:signup_date",
    requiresConcepts=["signup date"],
    expectedEntities={"required": ["dimension:customers:signup_date"], "requiredAnyOf": [],
                      "acceptable": ["measure:customers:customer_count"]},
    kind="scalar", col="new_accounts", round=None,
    canon="run: customers -> {\n  where: year(signup_date) = 2024\n  aggregate: new_accounts is count()\n}",
    sql=f"select count(*) as new_accounts from {CUS} where year(signup_date) = 2024",
    aux={"first_order": "run: orders -> { group_by: customer_id; aggregate: first_day is min(order_date) } -> { where: year(first_day) = 2024; aggregate: v is count() }"},
    rubric=("PREFERRED: {v} accounts with a signup_date in 2024. "
            "WRONG: {first_order}, customers whose first order was in 2024 (a different population)."),
    mustState=[], mustNotUse=["order_date"],
)

case(
    qid="bk_avg_list_price", split="dev", coverage="covered", tags=["catalogue"],
    question="What is the average list price of a book in our catalogue?",
    coverageNote="measure:books:avg_list_price",
    requiresConcepts=["catalogue list price"],
    expectedEntities={"required": [], "requiredAnyOf": [["measure:books:avg_list_price", "dimension:books:list_price"]],
                      "acceptable": ["source:books:books"]},
    kind="scalar", col="avg_list_price", round=2,
    canon="run: books -> {\n  aggregate: avg_list_price is avg(list_price)\n}",
    sql=f"select avg(list_price) as avg_list_price from {BKS}",
    aux={"paid": f"run: {ITEMS} -> {{ where: {SALE}; aggregate: v is sum(quantity * unit_price) / sum(quantity) }}"},
    rubric=("PREFERRED: {v:,.2f} dollars, the plain average of list_price over the 120 books. "
            "WRONG: {paid:,.2f}, the average price customers paid per copy (a sales figure, not the catalogue)."),
    mustState=[], mustNotUse=["unit_price"],
)

case(
    qid="bk_top_genre_units", split="dev", coverage="covered", tags=["catalogue", "ranking"],
    question="Which genre sells the most copies?",
    coverageNote="view:order_items:by_genre (units_sold)",
    requiresConcepts=["copies sold", "genre"],
    expectedEntities={"required": ["dimension:books:genre"],
                      "requiredAnyOf": [["measure:order_items:units_sold", "view:order_items:by_genre"]],
                      "acceptable": ["measure:order_items:revenue"]},
    kind="scalar", col="genre", round=None,
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  group_by: genre is b.genre\n  aggregate: units is sum(quantity)\n  order_by: units desc\n  limit: 1\n}}",
    sql=f"select b.genre as genre, sum(quantity) units from {SQL_ITEMS} where {SQL_SALE} group by 1 order by 2 desc limit 1",
    aux={"units": f"run: {ITEMS} -> {{ where: {SALE}; group_by: g is b.genre; aggregate: v is sum(quantity); order_by: v desc; limit: 1 }}"},
    rubric=("PREFERRED: Mystery ({units} copies on shipped and pending orders). "
            "ACCEPT: Mystery when counted over all orders. "
            "CREDITED: the runner-up genre."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_best_month", split="dev", coverage="covered", tags=["time", "ranking"],
    question="Which calendar month had our highest revenue?",
    coverageNote="view:order_items:monthly_revenue",
    requiresConcepts=["revenue", "month of order date"],
    expectedEntities={"required": [], "requiredAnyOf": [["view:order_items:monthly_revenue", "measure:order_items:revenue"]],
                      "acceptable": ["dimension:orders:order_date"]},
    kind="scalar", col="order_month", round=None,
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  group_by: order_month is substr(o.order_date.month::string, 1, 7)\n  aggregate: revenue is sum(quantity * unit_price)\n  order_by: revenue desc\n  limit: 1\n}}",
    sql=f"select strftime(o.order_date, '%Y-%m') as order_month, sum(quantity*unit_price) revenue from {SQL_ITEMS} where {SQL_SALE} group by 1 order by 2 desc limit 1",
    aux={"rev": f"run: {ITEMS} -> {{ where: {SALE}; group_by: m is o.order_date.month; aggregate: v is sum(quantity * unit_price); order_by: v desc; limit: 1 }}"},
    rubric=("PREFERRED: June 2025 (2025-06), revenue {rev:,.2f} dollars. "
            "ACCEPT: June 2025 named any way (\"Jun 2025\", \"2025-06-01\"). "
            "WRONG: naming only the month without the year (\"June\")."),
    mustState=[], mustNotUse=["ship_date"],
)

case(
    qid="bk_shipped_march_2025", split="dev", coverage="covered", tags=["revenue", "time", "ship-date-is-right"],
    question="How much revenue did we ship out of the warehouse in March 2025?",
    coverageNote="measure:order_items:revenue filtered on dimension:orders:ship_date",
    requiresConcepts=["revenue", "ship date"],
    expectedEntities={"required": ["measure:order_items:revenue", "dimension:orders:ship_date"], "requiredAnyOf": [],
                      "acceptable": ["dimension:orders:status"]},
    kind="scalar", col="revenue", round=2,
    canon=f"run: {ITEMS} -> {{\n  where: ({SALE}) and o.ship_date >= @2025-03-01 and o.ship_date < @2025-04-01\n  aggregate: revenue is sum(quantity * unit_price)\n}}",
    sql=f"select sum(quantity*unit_price) revenue from {SQL_ITEMS} where {SQL_SALE} and o.ship_date >= date '2025-03-01' and o.ship_date < date '2025-04-01'",
    aux={"byorder": f"run: {ITEMS} -> {{ where: ({SALE}) and o.order_date >= @2025-03-01 and o.order_date < @2025-04-01; aggregate: v is sum(quantity * unit_price) }}",
         "withret": f"run: {ITEMS} -> {{ where: o.ship_date >= @2025-03-01 and o.ship_date < @2025-04-01; aggregate: v is sum(quantity * unit_price) }}"},
    rubric=("PREFERRED: {v:,.2f} dollars, revenue on orders whose ship_date falls in March 2025. "
            "DIVERGENT: {withret:,.2f}, which also counts orders shipped in March and later returned, when the answer says so. "
            "WRONG: {byorder:,.2f}, March 2025 by order_date: the question asks what shipped."),
    mustState=[], mustNotUse=[],
)

# ---------------------------------------------------------------- covered, rows
case(
    qid="bk_revenue_by_genre", split="dev", coverage="covered", tags=["revenue", "breakdown"],
    question="Show me revenue for each book genre.",
    coverageNote="view:order_items:by_genre",
    requiresConcepts=["revenue", "genre"],
    expectedEntities={"required": [], "requiredAnyOf": [["view:order_items:by_genre", "measure:order_items:revenue"]],
                      "acceptable": ["dimension:books:genre", "measure:order_items:units_sold"]},
    kind="rows", cols=["genre", "revenue"],
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  group_by: genre is b.genre\n  aggregate: revenue is sum(quantity * unit_price)\n  order_by: revenue desc\n}}",
    sql=f"select b.genre as genre, sum(quantity*unit_price) as revenue from {SQL_ITEMS} where {SQL_SALE} group by 1 order by 2 desc",
    aux={},
    rubric=("PREFERRED: ten genres with revenue net of discounts over shipped and pending orders, Mystery highest. "
            "WRONG: amounts priced at books.list_price (list price as revenue). "
            "CREDITED: units sold per genre alongside."),
    mustState=[], mustNotUse=["list_value", "books.list_price", "list price as revenue"],
)

case(
    qid="bk_monthly_revenue_2025", split="dev", coverage="covered", tags=["revenue", "time", "breakdown"],
    question="What was our revenue in each month of 2025 so far?",
    coverageNote="view:order_items:monthly_revenue",
    requiresConcepts=["revenue", "month of order date"],
    expectedEntities={"required": [], "requiredAnyOf": [["view:order_items:monthly_revenue", "measure:order_items:revenue"]],
                      "acceptable": ["dimension:orders:order_date"]},
    kind="rows", cols=["order_month", "revenue"], path="goldens/bk_monthly_revenue_2025.csv",
    canon=f"run: {ITEMS} -> {{\n  where: ({SALE}) and year(o.order_date) = 2025\n  group_by: order_month is month(o.order_date)\n  aggregate: revenue is sum(quantity * unit_price)\n  order_by: order_month\n}}",
    sql=f"select month(o.order_date) as order_month, sum(quantity*unit_price) as revenue from {SQL_ITEMS} where {SQL_SALE} and year(o.order_date) = 2025 group by 1 order by 1",
    aux={},
    rubric=("PREFERRED: six months, January to June 2025, revenue by order_date. "
            "ACCEPT: months labelled as dates (2025-01-01) or names. "
            "WRONG: months bucketed by ship_date. "
            "CREDITED: noting that June 2025 is the last month in the data."),
    mustState=[], mustNotUse=["orders.ship_date"],
)

case(
    qid="bk_top_customers", split="dev", coverage="covered", tags=["customers", "ranking"],
    question="Who are our five biggest customers by revenue?",
    coverageNote="query:order_items:top_customers",
    requiresConcepts=["revenue per customer"],
    expectedEntities={"required": [], "requiredAnyOf": [["query:order_items:top_customers", "measure:order_items:revenue"]],
                      "acceptable": ["dimension:customers:name", "join:orders:customers"]},
    kind="rows", cols=["customer_name", "revenue"],
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  group_by: customer_name is o.c.name\n  aggregate: revenue is sum(quantity * unit_price)\n  order_by: revenue desc\n  limit: 5\n}}",
    sql=f"select c.name as customer_name, sum(quantity*unit_price) as revenue from {SQL_ITEMS} where {SQL_SALE} group by c.customer_id, c.name order by 2 desc limit 5",
    aux={"gross_top": f"run: {ITEMS} -> {{ group_by: n is o.c.name; aggregate: v is sum(quantity * unit_price); order_by: v desc; limit: 1 }}"},
    rubric=("PREFERRED: the five customers with the highest revenue, with their revenue, Ines Varga first. "
            "ACCEPT: the ten rows of the top_customers query, which contain these five. "
            "WRONG: a ranking by gross bookings (it puts {gross_top} first)."),
    mustState=[], mustNotUse=["order_items.gross_revenue"],
)

case(
    qid="bk_customers_by_region", split="dev", coverage="covered", tags=["customers", "breakdown"],
    question="How many customers do we have in each region?",
    coverageNote="view:customers:by_region",
    requiresConcepts=["customer home region"],
    expectedEntities={"required": ["dimension:customers:region"],
                      "requiredAnyOf": [["view:customers:by_region", "measure:customers:customer_count"]],
                      "acceptable": ["source:customers:customers"]},
    kind="rows", cols=["region", "customers"],
    canon="run: customers -> {\n  group_by: region\n  aggregate: customers is count()\n  order_by: customers desc\n}",
    sql=f"select region, count(*) as customers from {CUS} group by 1 order by 2 desc",
    aux={},
    rubric=("PREFERRED: customer accounts per home region, North America largest. "
            "DIVERGENT: counting only customers who ordered, when the answer says so. "
            "WRONG: counting orders by ship_region."),
    mustState=[], mustNotUse=["ship_region"],
)

case(
    qid="bk_revenue_by_region", split="dev", coverage="covered", tags=["revenue", "breakdown", "trap:ship-region"],
    question="Break down revenue by region.",
    coverageNote="measure:order_items:revenue by dimension:customers:region",
    requiresConcepts=["revenue", "customer home region"],
    expectedEntities={"required": ["measure:order_items:revenue", "dimension:customers:region"], "requiredAnyOf": [],
                      "acceptable": ["join:orders:customers", "join:order_items:orders"]},
    kind="rows", cols=["region", "revenue"],
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  group_by: region is o.c.region\n  aggregate: revenue is sum(quantity * unit_price)\n  order_by: revenue desc\n}}",
    sql=f"select c.region as region, sum(quantity*unit_price) as revenue from {SQL_ITEMS} where {SQL_SALE} group by 1 order by 2 desc",
    aux={},
    rubric=("PREFERRED: revenue per customer home region (customers.region), North America first. "
            "WRONG: revenue by orders.ship_region (ship_region as the customer's region). "
            "CREDITED: saying which region field was used."),
    mustState=[], mustNotUse=["orders.ship_region", "ship_region as the customer's region"],
)

case(
    qid="bk_channel_mix", split="dev", coverage="covered", tags=["revenue", "breakdown"],
    question="How does our revenue split across sales channels?",
    coverageNote="view:order_items:by_channel",
    requiresConcepts=["revenue", "sales channel"],
    expectedEntities={"required": [], "requiredAnyOf": [["view:order_items:by_channel", "dimension:orders:channel"]],
                      "acceptable": ["measure:order_items:revenue", "measure:orders:order_count"]},
    kind="rows", cols=["channel", "revenue"],
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  group_by: channel is o.channel\n  aggregate: revenue is sum(quantity * unit_price)\n  order_by: revenue desc\n}}",
    sql=f"select o.channel as channel, sum(quantity*unit_price) as revenue from {SQL_ITEMS} where {SQL_SALE} group by 1 order by 2 desc",
    aux={},
    rubric=("PREFERRED: revenue for web, app and marketplace, web largest. "
            "ACCEPT: the same split given as shares of revenue. "
            "CREDITED: order counts per channel."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_top_books", split="holdout", coverage="covered", tags=["catalogue", "ranking"],
    question="What are our five best-selling books by number of copies sold?",
    coverageNote="view:order_items:top_books",
    requiresConcepts=["copies sold", "book title"],
    expectedEntities={"required": [], "requiredAnyOf": [["view:order_items:top_books", "measure:order_items:units_sold"]],
                      "acceptable": ["dimension:books:title"]},
    kind="rows", cols=["title", "units_sold"],
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  group_by: title is b.title\n  aggregate: units_sold is sum(quantity)\n  order_by: units_sold desc, title\n  limit: 5\n}}",
    sql=f"select b.title as title, sum(quantity) as units_sold from {SQL_ITEMS} where {SQL_SALE} group by b.book_id, 1 order by 2 desc, 1 limit 5",
    aux={},
    rubric=("PREFERRED: the five titles with the most copies sold, The Lantern Secret, Book 3 first; two titles tie at 109 copies. "
            "ACCEPT: the ten rows of top_books, which contain these five. "
            "WRONG: a ranking by revenue."),
    mustState=[], mustNotUse=[],
)

# ---------------------------------------------------------------- derivable
case(
    qid="bk_units_per_order", split="dev", coverage="derivable", tags=["orders", "ratio"],
    question="On average, how many copies does a customer buy in one order?",
    coverageNote="no named measure; units_sold / orders.order_count over orders that count as a sale",
    requiresConcepts=["copies per order"],
    expectedEntities={"required": [], "requiredAnyOf": [["measure:order_items:units_sold", "dimension:order_items:quantity"],
                                                        ["measure:orders:order_count"]],
                      "acceptable": ["dimension:orders:counts_as_sale"]},
    kind="scalar", col="copies_per_order", round=2,
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  aggregate: copies_per_order is sum(quantity) / count(o.order_id)\n}}",
    sql=f"select sum(quantity) / count(distinct order_id) as copies_per_order from {SQL_ITEMS} where {SQL_SALE}",
    aux={"all": "run: order_items -> { aggregate: v is sum(quantity) / count(order_id) }",
         "lines": "run: order_items -> { aggregate: v is count() / count(order_id) }"},
    rubric=("PREFERRED: {v:.2f} copies per order over shipped and pending orders. "
            "ACCEPT: {all:.2f} over every order, whatever its status. "
            "WRONG: {lines:.2f}, order lines per order (distinct titles, not copies)."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_cancellation_rate", split="dev", coverage="derivable", tags=["orders", "ratio"],
    question="What share of our orders get cancelled?",
    coverageNote="no named rate; status = 'cancelled' count over orders.order_count",
    requiresConcepts=["cancellation rate"],
    expectedEntities={"required": ["dimension:orders:status"], "requiredAnyOf": [["measure:orders:order_count", "view:orders:by_status"]],
                      "acceptable": ["source:orders:orders"]},
    kind="scalar", col="cancellation_rate", round=4,
    canon="run: orders -> {\n  aggregate: cancellation_rate is count() { where: status = 'cancelled' } / count()\n}",
    sql=f"select count(*) filter (where status = 'cancelled') / count(*) as cancellation_rate from {ORD}",
    aux={"withret": "run: orders -> { aggregate: v is count() { where: status = 'cancelled' or status = 'returned' } / count() }"},
    rubric=("PREFERRED: {v:.4f} of orders (147 of 2,500, 5.88 percent); a rate as 5.88 or 0.0588 is the same. "
            "WRONG: {withret:.4f}, which adds returned orders to the cancellations."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_avg_days_to_ship", split="dev", coverage="derivable", tags=["orders", "time"],
    question="How many days does it take us on average to ship an order after it is placed?",
    coverageNote="no named measure; average of days(order_date to ship_date) over orders with a ship_date",
    requiresConcepts=["order date", "ship date", "days between dates"],
    expectedEntities={"required": ["dimension:orders:order_date", "dimension:orders:ship_date"], "requiredAnyOf": [],
                      "acceptable": ["dimension:orders:status"]},
    kind="scalar", col="avg_days_to_ship", round=2,
    canon="run: orders -> {\n  where: ship_date is not null\n  aggregate: avg_days_to_ship is avg(days(order_date to ship_date))\n}",
    sql=f"select avg(ship_date - order_date) as avg_days_to_ship from {ORD} where ship_date is not null",
    aux={"shiponly": "run: orders -> { where: status = 'shipped'; aggregate: v is avg(days(order_date to ship_date)) }"},
    rubric=("PREFERRED: {v:.2f} days, over every order that has a ship_date (shipped and returned). "
            "ACCEPT: {shiponly:.2f} days over shipped orders only, when the answer says so. "
            "ACCEPT: about 3 days."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_discount_total", split="dev", coverage="derivable", tags=["revenue", "list-price-is-right"],
    question="How much money did discounts cost us on the orders that went through, compared with charging list price?",
    coverageNote="no named measure; quantity times (books.list_price minus unit_price) over shipped and pending orders",
    requiresConcepts=["list price", "price paid", "discount amount"],
    expectedEntities={"required": ["dimension:books:list_price"],
                      "requiredAnyOf": [["dimension:order_items:unit_price", "measure:order_items:revenue"]],
                      "acceptable": ["dimension:order_items:discount", "measure:order_items:list_value"]},
    kind="scalar", col="discount_amount", round=2,
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  aggregate: discount_amount is sum(quantity * (b.list_price - unit_price))\n}}",
    sql=f"select sum(quantity * (b.list_price - unit_price)) as discount_amount from {SQL_ITEMS} where {SQL_SALE}",
    aux={"all": f"run: {ITEMS} -> {{ aggregate: v is sum(quantity * (b.list_price - unit_price)) }}"},
    rubric=("PREFERRED: {v:,.2f} dollars, list value minus revenue on shipped and pending orders. "
            "DIVERGENT: {all:,.2f} over every order including cancelled and returned ones, when the answer says so. "
            "WRONG: an average discount rate instead of a dollar amount."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_avg_price_paid", split="dev", coverage="derivable", tags=["revenue", "ratio", "trap:list-price"],
    question="What's the average price customers actually pay for a single copy?",
    coverageNote="no named measure; revenue / units_sold",
    requiresConcepts=["price paid per copy"],
    expectedEntities={"required": [], "requiredAnyOf": [["measure:order_items:revenue", "dimension:order_items:unit_price"],
                                                        ["measure:order_items:units_sold", "dimension:order_items:quantity"]],
                      "acceptable": []},
    kind="scalar", col="avg_price_paid", round=2,
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  aggregate: avg_price_paid is sum(quantity * unit_price) / sum(quantity)\n}}",
    sql=f"select sum(quantity*unit_price)/sum(quantity) as avg_price_paid from {SQL_ITEMS} where {SQL_SALE}",
    aux={"list": "run: books -> { aggregate: v is avg(list_price) }",
         "unweighted": f"run: {ITEMS} -> {{ where: {SALE}; aggregate: v is avg(unit_price) }}"},
    rubric=("PREFERRED: {v:,.2f} dollars per copy, revenue divided by copies sold. "
            "ACCEPT: {unweighted:,.2f}, the plain average unit_price per order line, when the answer says it is per line. "
            "WRONG: {list:,.2f}, the average catalogue list price."),
    mustState=[], mustNotUse=["books.list_price.avg()", "avg_list_price"],
)

case(
    qid="bk_refunded_amount", split="dev", coverage="derivable",
    tags=["revenue", "returns", "answerable-sounds-unanswerable"],
    question="How much money have we refunded to customers for returned orders?",
    coverageNote="no refund table; status 'returned' means shipped then refunded, so line amounts on returned orders",
    requiresConcepts=["returned orders", "amount paid"],
    expectedEntities={"required": ["dimension:orders:status"],
                      "requiredAnyOf": [["dimension:order_items:line_amount", "measure:order_items:gross_revenue", "dimension:order_items:unit_price"]],
                      "acceptable": []},
    kind="scalar", col="refunded", round=2,
    canon=f"run: {ITEMS} -> {{\n  where: o.status = 'returned'\n  aggregate: refunded is sum(quantity * unit_price)\n}}",
    sql=f"select sum(quantity*unit_price) as refunded from {SQL_ITEMS} where o.status = 'returned'",
    aux={"withcanc": f"run: {ITEMS} -> {{ where: o.status = 'returned' or o.status = 'cancelled'; aggregate: v is sum(quantity * unit_price) }}"},
    rubric=("PREFERRED: {v:,.2f} dollars, what customers paid on orders with status returned (the status doc says returned orders were refunded). "
            "WRONG: a refusal saying refunds are not recorded. "
            "WRONG: {withcanc:,.2f}, which adds cancelled orders that were never charged."),
    mustState=[], mustNotUse=["list_value"],
)

case(
    qid="bk_repeat_customers", split="holdout", coverage="derivable", tags=["customers"],
    question="How many customers have placed more than one order?",
    coverageNote="no named measure; orders grouped by customer_id, count above 1",
    requiresConcepts=["orders per customer"],
    expectedEntities={"required": ["dimension:orders:customer_id"], "requiredAnyOf": [["measure:orders:order_count"]],
                      "acceptable": []},
    kind="scalar", col="repeat_customers", round=None,
    canon="run: orders -> {\n  group_by: customer_id\n  aggregate: order_count is count()\n} -> {\n  where: order_count > 1\n  aggregate: repeat_customers is count()\n}",
    sql=f"select count(*) as repeat_customers from (select customer_id from {ORD} group by 1 having count(*) > 1)",
    aux={},
    rubric=("PREFERRED: {v} customers with two or more orders of any status. "
            "CREDITED: the share of ordering customers this is."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_member_revenue_share", split="dev", coverage="derivable", tags=["customers", "ratio"],
    question="What share of our revenue comes from loyalty members?",
    coverageNote="no named measure; revenue filtered on customers.is_member over revenue",
    requiresConcepts=["revenue", "membership"],
    expectedEntities={"required": ["dimension:customers:is_member", "measure:order_items:revenue"], "requiredAnyOf": [],
                      "acceptable": ["join:orders:customers"]},
    kind="scalar", col="member_share", round=4, status="provisional",
    canon=f"run: {ITEMS} -> {{\n  where: {SALE}\n  aggregate: member_share is sum(quantity * unit_price) {{ where: o.c.is_member }} / sum(quantity * unit_price)\n}}",
    sql=f"select sum(quantity*unit_price) filter (where c.is_member) / sum(quantity*unit_price) as member_share from {SQL_ITEMS} where {SQL_SALE}",
    aux={},
    rubric=("PREFERRED: {v:.4f} of revenue (as a percentage or a fraction). "
            "CREDITED: saying membership is today's status, not the status at the time of each order. "
            "Provisional: is_member holds current membership only; whether that answers the question is not settled."),
    mustState=[], mustNotUse=[],
)

case(
    qid="bk_gift_share", split="holdout", coverage="derivable", tags=["orders", "ratio"],
    question="What fraction of orders are gifts?",
    coverageNote="no named measure; count of is_gift over order_count",
    requiresConcepts=["gift flag"],
    expectedEntities={"required": ["dimension:orders:is_gift"], "requiredAnyOf": [["measure:orders:order_count"]],
                      "acceptable": []},
    kind="scalar", col="gift_share", round=4, status="provisional",
    canon="run: orders -> {\n  aggregate: gift_share is count() { where: is_gift } / count()\n}",
    sql=f"select count(*) filter (where is_gift) / count(*) as gift_share from {ORD}",
    aux={},
    rubric=("PREFERRED: {v:.4f} of all orders. "
            "ACCEPT: the fraction over shipped and pending orders only, when the answer says so. "
            "Provisional: the order population (all statuses or completed only) is not settled."),
    mustState=[], mustNotUse=[],
)

# ---------------------------------------------------------------- criteria
case(
    qid="bk_sales_trend", split="dev", coverage="covered", tags=["revenue", "time", "comparison"],
    question="Are sales growing? Compare the first half of 2025 with the first half of 2024.",
    coverageNote="measure:order_items:revenue by dimension:orders:order_date",
    requiresConcepts=["revenue", "half-year by order date"],
    expectedEntities={"required": ["measure:order_items:revenue"], "requiredAnyOf": [["dimension:orders:order_date", "view:order_items:monthly_revenue"]],
                      "acceptable": []},
    kind="criteria",
    aux={"h24": f"run: {ITEMS} -> {{ where: ({SALE}) and o.order_date >= @2024-01-01 and o.order_date < @2024-07-01; aggregate: v is sum(quantity * unit_price) }}",
         "h25": f"run: {ITEMS} -> {{ where: ({SALE}) and o.order_date >= @2025-01-01 and o.order_date < @2025-07-01; aggregate: v is sum(quantity * unit_price) }}"},
    rubric=("REQUIRED: says revenue grew from the first half of 2024 to the first half of 2025. "
            "PREFERRED: revenue {h24:,.2f} dollars (January to June 2024) against {h25:,.2f} dollars (January to June 2025), growth of about {growth:.0f} percent. "
            "ACCEPT: the same comparison in copies sold or order counts, if it also shows growth. "
            "WRONG: comparing calendar 2024 with the partial year 2025 and calling it a decline."),
    mustState=["sales grew"], mustNotUse=[],
)

case(
    qid="bk_busiest_month", split="dev", coverage="covered", tags=["time", "ranking", "underspecified"],
    question="What was our busiest month?",
    coverageNote="underspecified: busiest by orders, copies or revenue",
    requiresConcepts=["month of order date", "a measure of busyness"],
    expectedEntities={"required": [], "requiredAnyOf": [["measure:orders:order_count", "measure:order_items:revenue", "measure:order_items:units_sold", "view:order_items:monthly_revenue"]],
                      "acceptable": ["dimension:orders:order_date"]},
    kind="criteria",
    # The question leaves the measure open: a clarifying question that names it is a right answer.
    golden_extra={"clarifyOk": True}, goldenRevision=2,
    aux={"by_orders": "run: orders -> { group_by: m is substr(order_date.month::string, 1, 7); aggregate: v is count(); order_by: v desc; limit: 1 }",
         "n_orders": "run: orders -> { group_by: m is order_date.month; aggregate: v is count(); order_by: v desc; limit: 1 }"},
    rubric=("REQUIRED: says which measure defines busiest (orders, copies or revenue). "
            "ACCEPT: June 2025 by revenue. "
            "ACCEPT: {by_orders} by number of orders placed ({n_orders} orders). "
            "WRONG: a month without its year."),
    mustState=[], mustNotUse=[],
)

# ---------------------------------------------------------------- absent
case(
    qid="bk_profit_margin", split="dev", coverage="absent", tags=["refusal-expected", "cost"],
    question="What is our profit margin on book sales?",
    coverageNote="absent: no cost, wholesale price or margin anywhere in the data",
    requiresConcepts=["cost of goods", "profit"],
    expectedEntities={"required": [], "requiredAnyOf": [], "acceptable": ["measure:order_items:revenue"]},
    kind="unanswerable",
    aux={},
    rubric=("PREFERRED: declines, saying the data has no cost or wholesale price, so profit cannot be computed. "
            "ACCEPT: offers revenue only while stating plainly that it is not profit. "
            "WRONG: any margin figure, including list price minus unit price treated as profit."),
    mustState=["no cost data"], mustNotUse=["discount as profit margin"],
)

case(
    qid="bk_return_reasons", split="dev", coverage="absent", tags=["refusal-expected", "returns"],
    question="What are the most common reasons customers give for returning books?",
    coverageNote="absent: status records that an order was returned, not why",
    requiresConcepts=["return reason"],
    expectedEntities={"required": [], "requiredAnyOf": [], "acceptable": ["dimension:orders:status"]},
    kind="unanswerable",
    aux={},
    rubric=("PREFERRED: declines, saying returns are recorded only as an order status with no reason. "
            "CREDITED: giving the number of returned orders (191) as context, labelled as not a reason. "
            "WRONG: reasons inferred from genre, format or channel presented as customer reasons."),
    mustState=["no return reason"], mustNotUse=[],
)

case(
    qid="bk_author_nationality", split="holdout", coverage="absent", tags=["refusal-expected", "catalogue"],
    question="Which author nationality brings in the most revenue?",
    coverageNote="absent: authors have a name only, no nationality",
    requiresConcepts=["author nationality"],
    expectedEntities={"required": [], "requiredAnyOf": [], "acceptable": ["dimension:books:author"]},
    kind="unanswerable",
    aux={},
    rubric=("PREFERRED: declines, saying the catalogue has author names but no nationality. "
            "WRONG: grouping by customer country or by publisher and presenting it as author nationality."),
    mustState=[], mustNotUse=["customers.country as author nationality"],
)

case(
    qid="bk_stock_on_hand", split="dev", coverage="absent", tags=["refusal-expected", "inventory"],
    question="How many copies of The Iron Crossing do we still have in stock?",
    coverageNote="absent: no inventory or stock table",
    requiresConcepts=["inventory on hand"],
    expectedEntities={"required": [], "requiredAnyOf": [], "acceptable": ["dimension:books:title"]},
    kind="unanswerable",
    aux={},
    rubric=("PREFERRED: declines, saying there is no inventory data. "
            "CREDITED: copies sold of that title, clearly labelled as sales, not stock. "
            "WRONG: any stock figure."),
    mustState=[], mustNotUse=[],
)


def close(a, b):
    """Runtime and DuckDB agree: numbers to float noise, anything else as text."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return str(a) == str(b)


def main():
    """Check every case against both engines, then write cases.jsonl; exit 1 on any disagreement."""
    out_lines = []
    problems = 0
    for c in CASES:
        queries = []
        if c.get("canon"):
            queries.append(c["canon"])
        aux_names = list(c.get("aux", {}))
        queries += [c["aux"][n] for n in aux_names]
        res = malloy(queries) if queries else []
        for r, q in zip(res, queries):
            if "error" in r:
                print(c["qid"], "ERROR", r["error"], q, file=sys.stderr)
                problems += 1
        auxv = {}
        off = 1 if c.get("canon") else 0
        for i, n in enumerate(aux_names):
            row = res[off + i].get("rows", [{}])[0]
            # label-style aux values (a name or a month) are the first column, numbers are `v`
            auxv[n] = next(iter(row.values())) if n in ("by_orders", "gross_top") else row["v"]
        golden = {"status": c.get("status", "verified"), "kind": c["kind"]}
        fmt = dict(auxv)
        if c["kind"] in ("scalar", "rows"):
            rows = res[0]["rows"]
            sq = sql(c["sql"])
            if len(rows) != len(sq):
                print(c["qid"], "ROWCOUNT", len(rows), len(sq), file=sys.stderr)
                problems += 1
            for a, b in zip(rows, sq):
                for k in b:
                    if not close(a.get(k), b[k]):
                        print(c["qid"], "DIFF", k, a.get(k), b[k], file=sys.stderr)
                        problems += 1
            if c["kind"] == "scalar":
                v = rows[0][c["col"]]
                if c.get("round") is not None:
                    v = round(v, c["round"])
                value = {c["col"]: v}
                if c.get("round") is not None:
                    value["round"] = c["round"]
                fmt["v"] = v
                golden["value"] = value
            else:
                vals = [{k: (round(r[k], 2) if isinstance(r[k], float) else r[k]) for k in c["cols"]} for r in rows]
                if c.get("path"):
                    p = SET / c["path"]
                    p.parent.mkdir(exist_ok=True)
                    with p.open("w", newline="") as fh:
                        w = csv.DictWriter(fh, fieldnames=c["cols"], lineterminator="\n")
                        w.writeheader()
                        w.writerows(vals)
                    golden["path"] = c["path"]
                else:
                    golden["value"] = vals
            golden["canonicalQuery"] = c["canon"]
        # An unanswerable or criteria golden carries no value: the rubric is the whole key.
        if c["qid"] == "bk_sales_trend":
            fmt["growth"] = (auxv["h25"] / auxv["h24"] - 1) * 100
        golden["rubric"] = c["rubric"].format(**fmt)
        golden["mustState"] = c["mustState"]
        golden["mustNotUse"] = c["mustNotUse"]
        golden.update(c.get("golden_extra", {}))
        line = {"qid": c["qid"], "question": c["question"], "split": c["split"], "tags": c["tags"],
                "coverage": c["coverage"], "coverageNote": c["coverageNote"],
                "requiresConcepts": c["requiresConcepts"], "expectedEntities": c["expectedEntities"],
                "goldenRevision": c.get("goldenRevision", 1), "golden": golden}
        out_lines.append(json.dumps(line, ensure_ascii=False))
    (SET / "cases.jsonl").write_text("\n".join(out_lines) + "\n")
    print(f"{len(out_lines)} cases, {problems} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        if _RUNTIME is not None:
            _RUNTIME.close()
