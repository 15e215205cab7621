"""Write runs/EXPECTED.json and runs/EXPECTED.md: the verdict each recorded attempt should get.

The intent is written here by hand, per attempt, before any scoring: the verdict, the reason for
a null, and for every attempt that reaches the judge the reply a hand-authored judge recording
should hold (a judge_verdict object). The judge recordings and the demo test are checked
against it.

It also writes the authored judge replies of the two runs added for comparisons
(recordings/judge/_authored.baseline-2.jsonl and _authored.candidate.jsonl), from which
scripts/author_recordings.py makes their recordings.

Example:
  .venv/bin/python evals/bookshop/authoring/build_expected.py
"""
import json
from pathlib import Path

R = Path(__file__).resolve().parents[1] / "runs"


def a(qid, verdict, reason=None, judge=None, why="", **kw):
    """One attempt's expectation (every attempt here has a null sample)."""
    d = {"qid": qid, "sample": None, "verdict": verdict, "reason": reason}
    if judge: d["judge_reply"] = judge
    d.update(kw); d["why"] = why; return d
def j(verdict, confidence, pairing, why, gold_status="verified", gold_note=""):
    """A judge reply in the judge_verdict schema's shape, why first."""
    return {"why": why, "verdict": verdict, "confidence": confidence, "column_pairing": pairing, "gold_status": gold_status, "gold_note": gold_note}
base = [
 a("bk_total_revenue", "match", judge=j("match", 9, {"revenue": "revenue"}, "Re-executed revenue 90963.84 equals the golden 90,963.84 at cents; the answer states it is net of cancelled and returned orders (PREFERRED)."),
   final_query_source="declared", pattern="right answer; get_context sources tier first",
   why="Right number from the `revenue` measure, declared in a ```malloy block. Its first get_context names only environment and package (the sources tier)."),
 a("bk_revenue_2024", "match", judge=j("match", 9, {"revenue": "revenue"}, "Re-executed revenue 52857.34 for orders placed in 2024 equals the golden 52,857.34; bucketed by order_date (PREFERRED), not ship_date."),
   final_query_source="declared", pattern="right answer",
   why="Right number, filtered on orders.order_date; no must-not-use entry (`ship_date`, `order_items.gross_revenue`) appears."),
 a("bk_revenue_by_genre", "match", judge=j("match", 9, {"genre": "genre", "revenue": "revenue"}, "The by_genre view returns the ten golden genres with the same revenue; the extra units_sold column does not make a containing answer wrong."),
   final_query_source="named_view", final_query="run: order_items -> by_genre", pattern="named-view submission",
   why="Named view submitted with sourceName + queryName; recorded as `run: order_items -> by_genre`."),
 a("bk_top_customers", "match", judge=j("match", 8, {"customer_name": "customer_name", "revenue": "revenue"}, "The top_customers query returns ten rows whose first five are the golden five with equal revenue, and the answer itself names those five as the biggest (ACCEPT: the ten rows contain these five)."),
   final_query_source="named_view", final_query="run: top_customers", pattern="named query (no sourceName)",
   why="Named query submitted with queryName only; prediction has 10 rows containing the 5 golden rows."),
 a("bk_revenue_by_region", "match", judge=j("match", 9, {"region": "region", "revenue": "revenue"}, "Revenue per customers.region matches all four golden rows; the answer says it used the home region (CREDITED)."),
   final_query_source="declared", pattern="right answer; typed get_context (search_targets)",
   why="Right rows via orders.customers.region; the dotted trap `orders.ship_region` is absent, the prose entry goes to the judge. Its get_context uses the newer typed search_targets form."),
 a("bk_cancellation_rate", "match", judge=j("match", 9, {"cancellation_rate": "cancellation_rate"}, "cancellation_rate 0.0588 pairs by name and equals the golden; the answer's \"5.88%\" is the same rate with its percent scale stated."),
   final_query_source="declared", pattern="right answer, derivable case; one harmless Bash call",
   why="Derivable case answered right; the Bash `python3 -c 'print(...)'` runs in the analyst's own folder, so it is not contamination."),
 a("bk_avg_list_price", "match", judge=j("match", 9, {"avg_list_price": "avg_list_price"}, "avg_list_price 18.5108 rounds to the golden 18.51; book_count is an extra column."),
   final_query_source="declared", pattern="right answer; a Grep of the analyst's own notes",
   why="Right number from books.avg_list_price (here list price is the right field). The Grep searches the analyst's notes folder, which holds nothing protected: not contamination."),
 a("bk_gross_bookings", "no_match", judge=j("no_match", 9, {"gross_revenue": "revenue"}, "The answer gives 90,963.84, which is net revenue (WRONG clause: drops cancelled and returned orders); the golden gross bookings are 105,572.36."),
   final_query_source="declared", pattern="wrong number",
   why="Used the `revenue` measure where the question asked for gross bookings (`gross_revenue`)."),
 a("bk_avg_price_paid", "no_match", judge=j("match", 9, {"avg_price_paid": "avg_price_paid"}, "avg_price_paid 16.476 rounds to the golden 16.48; catalogue_avg is an extra column."),
   judge_verdict="match", must_not_use_hits=["books.list_price.avg()"], final_query_source="declared",
   pattern="must-not-use veto over right-looking numbers",
   why="The reported 16.48 is right, but the final query computes books.list_price.avg(), a mustNotUse entry (aggregate-call form): the veto turns the judge's match into no_match."),
 a("bk_profit_margin", "match", judge=j("match", 9, {}, "Golden is unanswerable (no cost data). The answer declines and names what is missing: no cost, wholesale price or supplier data (PREFERRED)."),
   final_query_source=None, final_query=None, pattern="refusal on an absent case",
   why="Correct refusal that names the missing data; no query was run."),
 a("bk_refunded_amount", "no_match", judge=j("no_match", 9, {"refunded": None}, "The golden holds a value (7,845.21 refunded on returned orders) and the case is tagged answerable-sounds-unanswerable; the answer refuses (WRONG: a refusal saying refunds are not recorded)."),
   final_query_source=None, final_query=None, pattern="refusal on an answerable case",
   why="Refused, but status 'returned' is documented as refunded: the amount is derivable."),
 a("bk_channel_mix", "no_match", judge=j("no_match", 8, {"channel": None, "revenue": None}, "Prose only: no query was run and no figures are given, so none of the golden revenue values is present."),
   final_query_source=None, final_query=None, pattern="prose with no query",
   why="Answered from get_context alone, with no numbers."),
 a("bk_stock_on_hand", None, reason="not_submitted", final_query=None, pattern="no submission",
   why="Two get_context calls, no execute_query and an empty final answer: submitted is false, so the score is null not_submitted and the judge is never called."),
 a("bk_avg_days_to_ship", "no_match", judge=j("no_match", 9, {"avg_days_to_ship": None}, "The only query failed (Unknown function 'date_diff') and re-execution returns the same error; the answer gives no number, only 'a few days'."),
   final_query_source="last", n_execute_errors=1, pattern="a query that errors",
   why="The final query is the failing call (no call succeeded); re-execution records the error instead of rows."),
 a("bk_units_per_order", "needs_human", judge=j("no_match", 4, {"copies_per_order": "copies_per_order"}, "copies_per_order pairs with copies_per_order by name and role. The re-executed rows hold 2.5647 (5,427 copies over 2,116 orders), 2.56 at the golden's two decimals, not the golden 2.55. The query counts shipped orders only, and the answer says so (pending orders left out as not yet sent). The rubric PREFERs shipped and pending orders (2.55) and ACCEPTs every order whatever its status (2.57), so it treats the order population as a choice, but it neither accepts nor calls wrong shipped orders alone. The question ('how many copies does a customer buy in one order') names no status, and whether an order not yet shipped is already a purchase it does not say; the model's counts_as_sale counts pending orders as sales, which favours the PREFERRED population without making this one wrong. No clause covers 2.56, so not a near_match; I lean no_match because the figure differs from the golden, but whether the rubric's tolerance of other populations reaches this one is a reading the packet does not settle."),
   judge_verdict="no_match", final_query_source="declared", pattern="low-confidence verdict",
   why="Shipped orders only: 2.5647, 2.56 at two decimals. The rubric PREFERs shipped and pending orders (2.55) and ACCEPTs every order (2.57) but says nothing of shipped-only, and the question names no status, so the judge cannot settle it from the packet: no_match at confidence 4 (<= 5), which post-processing turns into needs_human, keeping no_match as judge_verdict."),
 a("bk_shipped_march_2025", "near_match", judge=j("near_match", 8, {"revenue": "gross_revenue"}, "6,809.59 is revenue shipped in March 2025 including orders later returned; the golden is 6,624.69. The answer says it includes later returns, which is the rubric's DIVERGENT clause."),
   final_query_source="declared", pattern="near_match",
   why="Right date field (ship_date) but the gross_revenue population; a DIVERGENT clause covers it, so near_match, out of the pass-rate denominator."),
 a("bk_member_revenue_share", None, reason="golden_provisional", final_query_source="declared", pattern="provisional golden",
   why="The golden is provisional, so the golden gate scores null golden_provisional before any judge call."),
 a("bk_sales_trend", "match", judge=j("match", 9, {}, "Criteria golden: the answer says sales grew (REQUIRED) and gives 22,988.24 vs 38,106.50 for January-June 2024 vs 2025, about 66% (PREFERRED)."),
   final_query_source="declared", pattern="criteria golden; get_context environments tier first",
   why="Criteria case judged on the rubric alone. Its first get_context has no arguments (the environments tier)."),
]
leaky = [
 a("bk_total_revenue", None, reason="contaminated", contaminated=True, judge_verdict="match",
   judge=j("match", 9, {"revenue": "revenue"}, "Re-executed revenue 90963.84 equals the golden 90,963.84 (PREFERRED)."), contamination_rule="touching the eval area (Read of evals/bookshop/cases.jsonl)",
   pattern="a Read of evals/", why="Read of @KIT_ROOT@/evals/bookshop/cases.jsonl: rule 1."),
 a("bk_revenue_by_genre", None, reason="contaminated", contaminated=True, judge_verdict="match",
   judge=j("match", 9, {"genre": "genre", "revenue": "revenue"}, "The by_genre view returns the ten golden genres with the same revenue; units_sold is an extra column."), contamination_rule="recursive read (`grep -rn \"by_genre\" .` from the checkout root)",
   pattern="a recursive grep over the repository", why="cwd is the checkout (make_sample_runs.py fills @KIT_ROOT@), which contains evals/: rule 3, no protected path spelled out."),
 a("bk_member_count", None, reason="contaminated", contaminated=True, judge_verdict="match",
   judge=j("match", 9, {"members": "customer_count"}, "customer_count 231 for is_member equals the golden 231 member accounts (PREFERRED)."), contamination_rule="under-reporting (reportedCalls 5 > 2 host tool uses)",
   pattern="reported call count exceeds what the host logged", why="Recorded from a host log + answer file: reportedCalls 5, toolUses 2: rule 4."),
 a("bk_best_month", None, reason="answerer_truncated", truncated=True, pattern="a truncated attempt",
   why="result.subtype error_max_turns: null answerer_truncated before anything else."),
 a("bk_revenue_2024", "match", judge=j("match", 9, {"revenue": "revenue"}, "Re-executed revenue 52857.34 for orders placed in 2024 equals the golden 52,857.34 (PREFERRED)."),
   final_query_source="declared", pattern="one clean attempt",
   why="A clean right answer, so the leaky run still has a judged attempt; the run is INCOMPLETE anyway."),
]


def derive(run_id, attempts, changed):
    """A run whose attempts are `attempts` except the ones in `changed` (by qid)."""
    by_qid = {x["qid"]: x for x in changed}
    return [by_qid.get(x["qid"], x) for x in attempts]


CHANNEL_MATCH = a("bk_channel_mix", "match", judge=j("match", 9, {"channel": "channel", "revenue": "revenue"}, "The by_channel view returns web 50,431.09, app 27,290.25 and marketplace 13,242.50, the golden revenue per channel (PREFERRED); the shares given are the same split, and the order counts per channel are CREDITED."),
   final_query_source="named_view", final_query="run: order_items -> by_channel", pattern="named view run this time",
   why="The same answerer ran the by_channel view it only named in the baseline session; right split.")
# A second session of the baseline arm (A/A: same answerer, model and judge). Three answers come out
# differently, which is what a noise band measures.
base2 = derive("baseline-2", base, [
 CHANNEL_MATCH,
 a("bk_gross_bookings", "match", judge=j("match", 9, {"gross_revenue": "gross_revenue"}, "Re-executed gross_revenue 105572.36 equals the golden 105,572.36 at cents: every order line, cancelled and returned orders included (PREFERRED)."),
   final_query_source="declared", pattern="right measure this time",
   why="This session used gross_revenue, which counts every order; the baseline session used revenue."),
 a("bk_revenue_by_region", "no_match", judge=j("no_match", 9, {"region": "ship_region", "revenue": "revenue"}, "The rows are revenue by orders.ship_region (North America 42,208.00 ...), where parcels went, not the customer's home region: the rubric's WRONG clause. The golden North America is 44,245.88."),
   must_not_use_hits=["orders.ship_region"], final_query_source="declared", pattern="the ship-region trap, this time",
   why="This session grouped by orders.ship_region, a mustNotUse entry (dotted form): no_match, and the veto agrees with the judge."),
])
# The candidate arm: the same answerer served model-candidate/, where refunded_amount writes down the
# refunds rule the baseline's diagnosis named (RULE_UNWRITTEN on bk_refunded_amount).
cand = derive("candidate", base, [
 a("bk_refunded_amount", "match", judge=j("match", 9, {"refunded": "refunded_amount"}, "Re-executed refunded_amount 7845.21 equals the golden 7,845.21: what customers paid on orders with status returned (PREFERRED); cancelled orders are left out, as the rubric asks."),
   final_query_source="declared", pattern="the target, fixed by the model change",
   why="The candidate model has the measure refunded_amount; the answerer found it and ran it."),
 CHANNEL_MATCH,
 a("bk_cancellation_rate", "no_match", judge=j("no_match", 9, {"cancellation_rate": "cancellation_rate"}, "cancellation_rate 0.1352 adds returned orders to the cancellations: the rubric's WRONG clause. The golden is 0.0588 (147 of 2,500)."),
   final_query_source="declared", pattern="a case the session broke (not the model change)",
   why="This session counted returned orders as cancelled; nothing in the model change touches order status."),
 a("bk_shipped_march_2025", "match", judge=j("match", 9, {"revenue": "revenue"}, "Re-executed revenue 6624.69 on orders whose ship_date falls in March 2025 equals the golden 6,624.69 (PREFERRED): cancelled and returned orders excluded."),
   final_query_source="declared", pattern="out of neither (not a flip)",
   why="The net revenue measure by ship date: the PREFERRED figure, where the baseline session gave the DIVERGENT one (near_match)."),
 a("bk_stock_on_hand", "match", judge=j("match", 9, {}, "Golden is unanswerable (no inventory data). The answer declines and says the model has no inventory or stock data (PREFERRED); copies sold are offered only as an alternative, not as stock."),
   final_query_source=None, final_query=None, pattern="out of null (not a flip)",
   why="A refusal that names the missing data, where the baseline session submitted nothing (null not_submitted)."),
])
comparisons = {
 "aa": {"runs": ["baseline", "baseline-2"], "flipped": ["bk_channel_mix", "bk_gross_bookings", "bk_revenue_by_region"], "band": {"max_flips": 3, "mean_flips": 3.0}, "cases": 14},
 "candidate": {"base": ["baseline"], "candidate": ["candidate"], "targets": ["bk_refunded_amount"],
   "fixed": ["bk_channel_mix", "bk_refunded_amount"], "broken": ["bk_cancellation_rate"],
   "moved": {"bk_shipped_march_2025": ["neither", "pass"], "bk_stock_on_hand": ["null", "pass"]},
   "cases_compared": 14, "base_pass_rate": "9/14", "candidate_pass_rate": "10/14", "delta_points": "+7.1 (100 * 1/14)",
   "beyond_band": False, "verdict": "no detectable difference: the target is fixed, but 3 flips are what two sessions of the baseline arm also show"},
}

doc = {
 "about": "The verdict each recorded attempt is meant to get, and the judge reply a hand-authored recording should hold for the attempts that reach the judge (judge_reply follows reference/schemas/judge_verdict.schema.json). Judge recording keys: <runId>.<qid>.<sample> with sample written _ (e.g. baseline.bk_total_revenue._). Checked by scoring scratch copies of the runs with scripts/demo.py (score_run.py --judge replay --local over the hand-authored recordings made from these replies by author_recordings.py; the candidate run with --model evals/bookshop/model-candidate): every verdict, judge verdict and confidence below came out as written, and so did the comparisons at the end.",
 "runs": {
  "baseline": {"runId": "baseline", "phase": "baseline", "status": "complete", "attempts": base,
    "summary": {"attempts": 18, "match": 9, "no_match": 5, "near_match": 1, "needs_human": 1, "null": {"not_submitted": 1, "golden_provisional": 1},
                "pass_rate": "64.3% (9/14; 95% CI 38.8-83.7%)", "judge_calls": 16}},
  "leaky": {"runId": "leaky", "phase": "baseline", "status": "INCOMPLETE", "attempts": leaky,
    "summary": {"attempts": 5, "match": 1, "null": {"contaminated": 3, "answerer_truncated": 1}, "incomplete_because": "1 truncated (bk_best_month), 3 contaminated (bk_total_revenue, bk_revenue_by_genre, bk_member_count)", "judge_calls": 4, "note": "the three contaminated attempts are still judged (scoring keeps the judge read in judge_verdict) and then voided to null contaminated"}},
  "baseline-2": {"runId": "baseline-2", "phase": "baseline", "status": "complete", "attempts": base2,
    "summary": {"attempts": 18, "match": 10, "no_match": 4, "near_match": 1, "needs_human": 1, "null": {"not_submitted": 1, "golden_provisional": 1},
                "pass_rate": "71.4% (10/14; 95% CI 45.4-88.3%)", "judge_calls": 16}},
  "candidate": {"runId": "candidate", "phase": "loop", "status": "complete", "attempts": cand, "model": "model-candidate",
    "summary": {"attempts": 18, "match": 12, "no_match": 4, "needs_human": 1, "null": {"golden_provisional": 1},
                "pass_rate": "75.0% (12/16; 95% CI 50.5-89.8%)", "judge_calls": 17}},
 },
 "comparisons": comparisons,
}
(R / "EXPECTED.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
lines = ["# What each recorded attempt should score", "",
 "Written by the author of the transcripts, before any scoring, so the judge recordings and the demo",
 "test can be checked against intent. `EXPECTED.json` holds the same content for code; it also",
 "carries, per judged attempt, the reply a hand-authored judge recording should hold",
 "(`judge_reply`: verdict, confidence, column_pairing, gold_status, why).", "",
 "Judge recording keys are `<runId>.<qid>._` (every attempt has a null sample).", ""]
for name, run in doc["runs"].items():
    s = run["summary"]
    lines += [f"## `{name}` ({s.get('pass_rate', run['status'])})", "",
              "| qid | pattern | verdict | judge says | why |", "|---|---|---|---|---|"]
    for x in run["attempts"]:
        v = x["verdict"] if x["verdict"] else f"null `{x['reason']}`"
        js = ""
        if x.get("judge_reply"):
            js = f"{x['judge_reply']['verdict']} (confidence {x['judge_reply']['confidence']})"
            if x["verdict"] is None:
                js += ", then overridden"
        else:
            js = "not called"
        lines.append(f"| `{x['qid']}` | {x['pattern']} | **{v}** | {js} | {x['why']} |")
    lines += ["", "Counts: " + json.dumps(s, ensure_ascii=False), ""]
lines += ["## Comparisons", "",
          "`baseline` and `baseline-2` are two sessions of one arm (A/A): the cases that flip between them are the",
          "noise band. `candidate` is the same answerer served `model-candidate/`, where the refunds rule is written.", "",
          "```json", json.dumps(comparisons, indent=2, ensure_ascii=False), "```", ""]
(R / "EXPECTED.md").write_text("\n".join(lines))

# The authored judge replies of the runs added for comparisons, one line per judged attempt, for
# scripts/author_recordings.py (the baseline and leaky files were written before this script did).
REC = R.parent / "recordings" / "judge"
for run_id, attempts in (("baseline-2", base2), ("candidate", cand)):
    out = [json.dumps({"key": f"{run_id}.{x['qid']}._", "replies": [x["judge_reply"]]}, ensure_ascii=False)
           for x in attempts if x.get("judge_reply")]
    (REC / f"_authored.{run_id}.jsonl").write_text("\n".join(out) + "\n")
