"""Write the bookshop set's hand-written answerer sessions as Claude Code stream-json transcripts.

The sessions below (tool calls, narration, final answers, cost and turn figures) are written by
hand. Every MCP tool result is not: each call is sent to the kit's local endpoint
(serve_local.py over model/) and its real reply is stored, so the rows in a transcript are the
rows the model gives. Non-MCP tool results (Read, Bash) are canned. The leaky run's sessions that
ran in the checkout say @KIT_ROOT@ for it; scripts/make_sample_runs.py fills that in.

Runs: `baseline` and `leaky`; `baseline-2`, a second session of the baseline arm (A/A: same
answerer, model and judge); `candidate`, the same answerer served model-candidate/ (the refunds
rule written into the model). Each run's calls go to the package its answerer was served.

Re-running rewrites transcripts/ (the _meta reference ids in results change every run), so
rebuild only the runs you changed (--only RUN); rebuild them afterwards with
scripts/make_sample_runs.py --force --only RUN, and update runs/EXPECTED.*.

Examples:
  .venv/bin/python evals/bookshop/authoring/build_transcripts.py --only candidate
  .venv/bin/python evals/bookshop/authoring/build_transcripts.py /tmp/bookshop-transcripts
"""
import argparse
import asyncio
import json
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

KIT = Path(__file__).resolve().parents[3]
OUT = KIT / "evals/bookshop/transcripts"
PUB = "mcp__publisher__"
ENV = {"environmentName": "samples", "packageName": "bookshop"}
ANALYST_CWD = "/home/analyst/bookshop-questions"
KIT_CWD = "@KIT_ROOT@"  # make_sample_runs.py puts the checkout's path here


def gc(query=None, **extra):
    """A get_context call on the bookshop package (plain query, or typed search_targets)."""
    args = dict(ENV)
    if query is not None:
        args["query"] = query
    args.update(extra)
    return ("mcp", "malloy_getContext", args)


def ex(query=None, **extra):
    """An execute_query call: ad-hoc Malloy, or sourceName/queryName for a named view or query."""
    args = dict(ENV, modelPath="bookshop.malloy")
    if query is not None:
        args["query"] = query
    args.update(extra)
    return ("mcp", "malloy_executeQuery", args)


def say(text):
    """Narration between tool calls (an assistant text block)."""
    return ("text", text)


def tool(name, inp, result, is_error=False):
    """A non-MCP host tool use with a canned result (None: computed by canned())."""
    return ("tool", name, inp, result, is_error)


def block(q):
    """A ```malloy fenced block, so the final query is `declared`."""
    return f"```malloy\n{q}\n```"


Q_TOTAL = "run: order_items -> { aggregate: revenue }"
Q_2024 = "run: order_items -> {\n  where: orders.order_date ? @2024\n  aggregate: revenue\n}"
Q_REGION = "run: order_items -> {\n  group_by: orders.customers.region\n  aggregate: revenue\n}"
Q_CANCEL = ("run: orders -> {\n  aggregate:\n    order_count\n    cancelled is count() { where: status = 'cancelled' }\n"
            "    cancellation_rate is count() { where: status = 'cancelled' } / count()\n}")
Q_LIST = "run: books -> { aggregate: avg_list_price, book_count }"
Q_VETO = ("run: order_items -> {\n  aggregate:\n    avg_price_paid is revenue / units_sold\n"
          "    catalogue_avg is books.list_price.avg()\n}")
Q_DAYS = ("run: orders -> {\n  where: ship_date is not null\n"
          "  aggregate: avg_days is avg(date_diff('day', order_date, ship_date))\n}")
# Shipped orders only: a population the case's rubric neither accepts nor calls wrong (the
# low-confidence showcase; see runs/EXPECTED.md).
Q_UNITS = ("run: order_items -> {\n  where: orders.status = 'shipped'\n  aggregate:\n    copies is sum(quantity)\n    orders.order_count\n"
           "    copies_per_order is sum(quantity) / orders.order_count\n}")
Q_MARCH = ("run: order_items -> {\n  where: orders.ship_date >= @2025-03-01 and orders.ship_date < @2025-04-01\n"
           "  aggregate: gross_revenue\n}")
Q_MEMBER = ("run: order_items -> {\n  aggregate:\n    member_revenue is revenue { where: orders.customers.is_member }\n"
            "    revenue\n    member_share is revenue { where: orders.customers.is_member } / revenue\n}")
Q_TREND = ("run: order_items -> {\n  where: month(orders.order_date) <= 6\n  group_by: order_year is year(orders.order_date)\n"
           "  aggregate: revenue\n  order_by: order_year\n}")
Q_BEST = "run: order_items -> monthly_revenue"
Q_MEMBERS = "run: customers -> {\n  where: is_member\n  aggregate: customer_count\n}"

ATTEMPTS = {
    "baseline": {
        "bk_total_revenue": {"steps": [
            ("mcp", "malloy_getContext", dict(ENV)),  # tier 3: the package's sources
            gc("total revenue"),
            say("The model has a `revenue` measure on order_items, documented as net of discounts and excluding cancelled and returned orders. I'll run it."),
            ex(Q_TOTAL),
        ], "answer": ("Total revenue across all the data (January 2024 to June 2025) is **$90,963.84**. "
                   "That is quantity times the price actually paid, on shipped and pending orders; cancelled and returned orders are excluded.\n\n"
                   + block(Q_TOTAL))},
        "bk_revenue_2024": {"steps": [
            gc("revenue by year order date"),
            ex(Q_2024),
        ], "answer": ("Revenue for orders placed in 2024 was **$52,857.34** (by order date, net of discounts, excluding cancelled and returned orders).\n\n"
                   + block(Q_2024))},
        "bk_revenue_by_genre": {"steps": [
            gc("revenue by genre"),
            say("There is a named view `by_genre` on order_items. I'll run it."),
            ex(sourceName="order_items", queryName="by_genre"),
        ], "answer": ("Revenue by genre, highest first (the `by_genre` view):\n\n"
                   "| genre | revenue | units sold |\n|---|---:|---:|\n"
                   "| Mystery | 21,146.24 | 1,359 |\n| Fiction | 19,057.72 | 1,108 |\n| Fantasy | 17,473.68 | 1,005 |\n"
                   "| Science Fiction | 11,197.73 | 619 |\n| Children | 7,474.88 | 535 |\n| Romance | 6,679.06 | 440 |\n"
                   "| Science | 5,246.17 | 299 |\n| History | 1,508.86 | 88 |\n| Biography | 985.35 | 57 |\n| Cookery | 194.15 | 11 |")},
        "bk_top_customers": {"steps": [
            gc("top customers by revenue"),
            ex(queryName="top_customers"),
        ], "answer": ("The model's `top_customers` query ranks customers by revenue. The five biggest are:\n\n"
                   "1. Ines Varga (Latin America): $1,225.24\n2. Nikolai Hartmann (North America): $1,101.92\n"
                   "3. Zoe Yilmaz (North America): $1,061.68\n4. Sanjay Jensen (Asia Pacific): $1,052.37\n"
                   "5. Greta Rossi (North America): $1,036.94")},
        "bk_revenue_by_region": {"steps": [
            gc(search_targets=[{"target_type": "measure", "search_text": "revenue"},
                               {"target_type": "dimension", "search_text": "region"}]),
            say("Two region fields exist: customers.region (where the customer lives) and orders.ship_region (where the parcel went). The customer's home region is the usual meaning."),
            ex(Q_REGION),
        ], "answer": ("Revenue by customer home region:\n\n- North America: $44,245.88\n- Europe: $23,351.95\n"
                   "- Asia Pacific: $13,893.12\n- Latin America: $9,472.89\n\n"
                   "I used customers.region (where the customer lives), not the ship-to region.\n\n" + block(Q_REGION))},
        "bk_cancellation_rate": {"steps": [
            gc("order status cancelled"),
            ex(Q_CANCEL),
            tool("Bash", {"command": "python3 -c 'print(round(147/2500*100, 2))'", "description": "Convert to a percentage"},
                 [{"type": "text", "text": "5.88"}]),
        ], "answer": ("**5.88%** of orders are cancelled: 147 of 2,500 orders.\n\n" + block(Q_CANCEL))},
        "bk_avg_list_price": {"steps": [
            tool("Grep", {"pattern": "list price", "path": f"{ANALYST_CWD}/notes", "output_mode": "content"},
                 [{"type": "text", "text": f"{ANALYST_CWD}/notes/pricing.md:3:List price means the printed catalogue price, before discounts."}]),
            gc("average list price of a book"),
            ex(Q_LIST),
        ], "answer": ("The average list price of a book in the catalogue is **$18.51** (over 120 books).\n\n" + block(Q_LIST))},
        "bk_gross_bookings": {"steps": [
            gc("gross bookings all orders"),
            ex(Q_TOTAL),
        ], "answer": ("Gross bookings, counting every order including cancelled and returned ones, were **$90,963.84**.\n\n"
                   + block(Q_TOTAL))},
        "bk_avg_price_paid": {"steps": [
            gc("price paid per copy"),
            ex(Q_VETO),
        ], "answer": ("Customers pay on average **$16.48** per copy (revenue divided by copies sold), "
                   "against an average catalogue price of $18.51.\n\n" + block(Q_VETO))},
        "bk_profit_margin": {"steps": [
            gc("profit margin"),
            gc("cost price wholesale"),
        ], "answer": ("I can't answer this from the bookshop model. It records what customers paid (unit_price) and the catalogue list price, "
                   "but there is no cost, wholesale price or supplier data anywhere, so profit and margin cannot be computed. "
                   "Revenue is available if that helps, but it is not profit.")},
        "bk_refunded_amount": {"steps": [
            gc("refund amount"),
            gc("returns refunds"),
        ], "answer": ("The model has no refund data: there is no refund amount or refund table, only an order status. "
                   "So I can't say how much money was refunded.")},
        "bk_channel_mix": {"steps": [
            gc("sales channel revenue"),
        ], "answer": ("Most of our revenue comes through the website, followed by the app; the marketplace is a small share of sales. "
                   "The `by_channel` view on order_items has the exact split.")},
        "bk_stock_on_hand": {"steps": [
            gc("stock inventory copies on hand"),
            gc("The Iron Crossing"),
        ], "answer": ""},
        "bk_avg_days_to_ship": {"steps": [
            gc("ship date order date"),
            ex(Q_DAYS),
        ], "answer": ("I tried to compute the average gap between order_date and ship_date, but the query failed "
                   "(date_diff is not available in Malloy). From the data I saw, orders usually ship within a few days.")},
        "bk_units_per_order": {"steps": [
            gc("copies per order quantity"),
            ex(Q_UNITS),
        ], "answer": ("On average a customer buys **2.56 copies per order** (5,427 copies over 2,116 orders). "
                   "I counted shipped orders only: pending orders have not left the warehouse yet and can still be cancelled, "
                   "and cancelled and returned orders did not end in copies the customer kept.\n\n" + block(Q_UNITS))},
        "bk_shipped_march_2025": {"steps": [
            gc("revenue ship date"),
            ex(Q_MARCH),
        ], "answer": ("Orders shipped in March 2025 brought in **$6,809.59**. This counts everything that left the warehouse in March, "
                   "including orders that were later returned.\n\n" + block(Q_MARCH))},
        "bk_member_revenue_share": {"steps": [
            gc("loyalty member revenue"),
            ex(Q_MEMBER),
        ], "answer": ("Loyalty members bring in **40.3%** of revenue ($36,651.98 of $90,963.84).\n\n" + block(Q_MEMBER))},
        "bk_sales_trend": {"steps": [
            ("mcp", "malloy_getContext", {}),  # tier 1: environments and their packages
            gc("revenue by month"),
            ex(Q_TREND),
        ], "answer": ("Yes, sales are growing. Revenue for January to June 2025 was $38,106.50 against $22,988.24 for "
                   "January to June 2024, up about 66%.\n\n" + block(Q_TREND))},
    },
    "leaky": {
        "bk_total_revenue": {"cwd": KIT_CWD, "steps": [
            tool("Read", {"file_path": f"{KIT_CWD}/evals/bookshop/cases.jsonl"}, None),
            gc("total revenue"),
            ex(Q_TOTAL),
        ], "answer": ("Total revenue is **$90,963.84**.\n\n" + block(Q_TOTAL))},
        "bk_revenue_by_genre": {"cwd": KIT_CWD, "steps": [
            tool("Bash", {"command": "grep -rn \"by_genre\" .", "description": "Find where by_genre is defined"}, None),
            ex(sourceName="order_items", queryName="by_genre"),
        ], "answer": "Revenue by genre is in the `by_genre` view: Mystery leads with $21,146.24, then Fiction $19,057.72 and Fantasy $17,473.68."},
        "bk_best_month": {"truncated": True, "steps": [
            gc("revenue by month"),
            ex(Q_BEST),
            say("June 2025 looks highest so far; let me check the ship-date view of the same months."),
            gc("ship date month"),
        ], "answer": None},
        "bk_revenue_2024": {"steps": [
            gc("revenue 2024"),
            ex(Q_2024),
        ], "answer": ("Revenue for orders placed in 2024 was **$52,857.34**.\n\n" + block(Q_2024))},
    },
}

Q_SHIP_REGION = "run: order_items -> {\n  group_by: orders.ship_region\n  aggregate: revenue\n}"
Q_GROSS = "run: order_items -> { aggregate: gross_revenue }"
Q_CANCEL_RETURNED = ("run: orders -> {\n  aggregate:\n    order_count\n"
                     "    cancelled_or_returned is count() { where: status = 'cancelled' or status = 'returned' }\n"
                     "    cancellation_rate is count() { where: status = 'cancelled' or status = 'returned' } / count()\n}")
Q_MARCH_NET = ("run: order_items -> {\n  where: orders.ship_date >= @2025-03-01 and orders.ship_date < @2025-04-01\n"
               "  aggregate: revenue\n}")
Q_REFUNDS = "run: order_items -> { aggregate: refunded_amount }"

# The channel split answered with the view's numbers (baseline-2 and candidate: the same answerer
# runs the view it only named in the baseline session).
CHANNEL_RUN = {"steps": [
    gc("sales channel revenue"),
    say("There is a `by_channel` view on order_items with revenue per channel. I'll run it."),
    ex(sourceName="order_items", queryName="by_channel"),
], "answer": ("Revenue by sales channel (the `by_channel` view):\n\n"
              "| channel | revenue | orders |\n|---|---:|---:|\n"
              "| web | 50,431.09 | 1,376 |\n| app | 27,290.25 | 750 |\n| marketplace | 13,242.50 | 374 |\n\n"
              "The website brings in a little over half of revenue (55%), the app 30% and the marketplace 15%.")}

# A second session of the baseline arm (A/A): same answerer, same model/, same judge. Most answers
# come out as before; three do not, which is the noise a change has to beat.
ATTEMPTS["baseline-2"] = {
    **ATTEMPTS["baseline"],
    "bk_channel_mix": CHANNEL_RUN,
    "bk_gross_bookings": {"steps": [
        gc("gross bookings all orders"),
        say("gross_revenue on order_items counts every order, cancelled and returned included; revenue drops those."),
        ex(Q_GROSS),
    ], "answer": ("Gross bookings across every order, cancelled and returned ones included, were **$105,572.36**.\n\n"
               + block(Q_GROSS))},
    "bk_revenue_by_region": {"steps": [
        gc("revenue by region"),
        ex(Q_SHIP_REGION),
    ], "answer": ("Revenue by region:\n\n- North America: $42,208.00\n- Europe: $23,644.49\n"
               "- Asia Pacific: $13,981.32\n- Latin America: $11,130.03\n\n" + block(Q_SHIP_REGION))},
}

# The candidate arm: the same answerer against model-candidate/, where the refunds rule the
# baseline's diagnosis asked for is written as the measure refunded_amount.
ATTEMPTS["candidate"] = {
    **ATTEMPTS["baseline"],
    "bk_refunded_amount": {"steps": [
        gc("refund amount returned orders"),
        say("order_items has a `refunded_amount` measure: what customers paid on returned orders, which were refunded in full."),
        ex(Q_REFUNDS),
    ], "answer": ("We have refunded **$7,845.21** to customers for returned orders: what they had paid for those orders, "
               "refunded in full. Cancelled orders were never charged, so they are not included.\n\n" + block(Q_REFUNDS))},
    "bk_channel_mix": CHANNEL_RUN,
    "bk_cancellation_rate": {"steps": [
        gc("order status cancelled"),
        ex(Q_CANCEL_RETURNED),
    ], "answer": ("**13.52%** of orders get cancelled: 338 of 2,500 orders did not stay with the customer "
               "(cancelled before shipping, or returned after).\n\n" + block(Q_CANCEL_RETURNED))},
    "bk_shipped_march_2025": {"steps": [
        gc("revenue ship date"),
        ex(Q_MARCH_NET),
    ], "answer": ("Orders shipped in March 2025 brought in **$6,624.69** of revenue, counted by ship date "
               "(cancelled and returned orders excluded).\n\n" + block(Q_MARCH_NET))},
    "bk_stock_on_hand": {"steps": [
        gc("stock inventory copies on hand"),
        gc("The Iron Crossing"),
    ], "answer": ("I can't answer this: the bookshop model has no inventory or stock data, only the catalogue "
               "and what was sold. It could tell you how many copies of The Iron Crossing were sold, but not "
               "how many are left in stock.")},
}

# The package each run's answerer was served (model/ unless named here).
MODEL_OF_RUN = {"candidate": "model-candidate"}
SESSION_OF_RUN = {"baseline": 1, "leaky": 2, "baseline-2": 3, "candidate": 4}

# Host-log attempt (no transcript): the answerer reported more calls than the host logged.
HOST_LOGS = {
    "leaky": {
        "bk_member_count": {"tool_uses": [gc("loyalty members"), ex(Q_MEMBERS)], "reported": 5,
                                "answer": ("231 customers are loyalty programme members. I made 5 calls to the Publisher to check this "
                                        "(context, two queries and two cross-checks).\n\n" + block(Q_MEMBERS))},
    },
}


def dump_content(result):
    """The MCP result as a Claude Code tool_result content list (resource JSON as text blocks)."""
    blocks = []
    for b in result.content:
        res = getattr(b, "resource", None)
        if res is not None:
            blocks.append({"type": "text", "text": res.text})
        else:
            blocks.append({"type": "text", "text": b.text})
    return blocks


async def build(runs):
    """Replay the named runs' MCP calls against the local endpoint (over the package each run's
    answerer was served) and write their transcripts."""
    for run in runs:
        model = KIT / "evals/bookshop" / MODEL_OF_RUN.get(run, "model")
        params = StdioServerParameters(command=sys.executable,
                                       args=[str(KIT / "skills/eval-answer/scripts/serve_local.py"),
                                             "--package", f"samples/bookshop={model}"])
        async with Client(params, read_timeout_seconds=120) as client:
            await build_run(client, run, ATTEMPTS[run])


async def build_run(client, run, attempts):
    """One run's transcripts, every MCP result the endpoint's real reply."""
    (OUT / run).mkdir(parents=True, exist_ok=True)
    for n, (qid, spec) in enumerate(attempts.items()):
        lines = []
        cwd = spec.get("cwd", ANALYST_CWD)
        session = f"5e551{n:03d}-b00c-4a11-9e00-{SESSION_OF_RUN[run]:012d}"
        lines.append({"type": "system", "subtype": "init", "cwd": cwd, "session_id": session,
                      "tools": ["Bash", "Read", "Grep", "Glob", f"{PUB}malloy_getContext", f"{PUB}malloy_executeQuery"],
                      "mcp_servers": [{"name": "publisher", "status": "connected"}],
                      "model": "claude-sonnet-4-5", "permissionMode": "default"})
        turns = 0
        mid = 0
        for step in spec["steps"]:
            mid += 1
            msg_id = f"msg_{qid}_{mid:02d}"
            if step[0] == "text":
                lines.append({"type": "assistant", "message": {"id": msg_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                              "content": [{"type": "text", "text": step[1]}],
                              "usage": {"input_tokens": 40, "output_tokens": 60, "cache_read_input_tokens": 3000}}, "session_id": session})
                continue
            turns += 1
            use_id = f"toolu_{run}_{qid}_{mid:02d}"
            if step[0] == "mcp":
                name = PUB + step[1]
                args = step[2]
                r = await client.call_tool(step[1], args)
                content = dump_content(r)
                is_error = bool(r.is_error)
            else:
                name, args, content, is_error = step[1], step[2], step[3], step[4]
                if content is None:
                    content = canned(name, args)
            lines.append({"type": "assistant", "message": {"id": msg_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                          "content": [{"type": "tool_use", "id": use_id, "name": name, "input": args}],
                          "usage": {"input_tokens": 30, "output_tokens": 80, "cache_read_input_tokens": 3200}}, "session_id": session})
            lines.append({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use_id, "content": content, "is_error": is_error}]}, "session_id": session})
            print(run, qid, name, "ERROR" if is_error else "ok", file=sys.stderr)
        answer = spec.get("answer")
        if spec.get("truncated"):
            lines.append({"type": "result", "subtype": "error_max_turns", "is_error": True, "duration_ms": 61250,
                          "num_turns": 8, "session_id": session, "total_cost_usd": 0.0912,
                          "usage": {"input_tokens": 410, "output_tokens": 1320, "cache_read_input_tokens": 28100, "cache_creation_input_tokens": 5200}})
        else:
            if answer:
                lines.append({"type": "assistant", "message": {"id": f"msg_{qid}_final", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                              "content": [{"type": "text", "text": answer}],
                              "usage": {"input_tokens": 60, "output_tokens": 220, "cache_read_input_tokens": 4100}}, "session_id": session})
            cost = round(0.018 + 0.011 * turns + len(answer or "") / 100000, 4)
            lines.append({"type": "result", "subtype": "success", "is_error": False,
                          "duration_ms": 9000 + 4100 * turns + 7 * len(answer or ""), "num_turns": turns + 1,
                          "result": answer or "", "session_id": session, "total_cost_usd": cost,
                          "usage": {"input_tokens": 120 + 35 * turns, "output_tokens": 150 + 90 * turns + len(answer or "") // 4,
                                    "cache_read_input_tokens": 3000 * (turns + 1), "cache_creation_input_tokens": 4800}})
        (OUT / run / f"{qid}.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    for qid, spec in HOST_LOGS.get(run, {}).items():
        uses = [{"name": PUB + s[1], "input": s[2]} for s in spec["tool_uses"]]
        (OUT / run / f"{qid}.hostlog.json").write_text(json.dumps(
            {"toolUses": uses, "reportedCalls": spec["reported"], "cwd": ANALYST_CWD}, indent=2) + "\n")
        (OUT / run / f"{qid}.answer.md").write_text(spec["answer"] + "\n")


def canned(name, args):
    """Plausible output for the leaky sessions' file tools (what the answerer would have seen)."""
    if name == "Read":
        first = (KIT / "evals/bookshop/cases.jsonl").read_text().splitlines()[0]
        return [{"type": "text", "text": "     1\t" + first[:600] + "..."}]
    if name == "Bash" and "grep -rn" in args.get("command", ""):
        hits = []
        for p in sorted((KIT / "evals/bookshop").rglob("*")):
            if p.is_file() and p.suffix in (".malloy", ".jsonl", ".md") and "transcripts" not in p.parts and "runs" not in p.parts:
                for i, line in enumerate(p.read_text().splitlines(), 1):
                    if "by_genre" in line:
                        hits.append(f"./{p.relative_to(KIT)}:{i}:{line[:160]}")
        return [{"type": "text", "text": "\n".join(hits[:8])}]
    return [{"type": "text", "text": ""}]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=OUT,
                        help="another output folder, to try changes without touching the set")
    parser.add_argument("--only", action="append", choices=sorted(ATTEMPTS), metavar="RUN",
                        help="write only this run's transcripts (repeatable; default: all)")
    args = parser.parse_args()
    OUT = args.out
    asyncio.run(build(args.only or list(ATTEMPTS)))
