#!/usr/bin/env python3
"""Write a large synthetic eval set (a Malloy package of many documented sources, its tables, cases
and hand-written coverage replies) for measuring check_coverage on big models.

The model is invented and deterministic (one seeded random.Random): a retailer's many business
units, each a source over the same three small tables, each with dozens of documented dimensions,
measures and views whose names mix a shared vocabulary with unit-specific words, so a search has
near misses to rank. The model file grows to about `--size` bytes. Every case asks for one measure
of one unit broken out by one of its dimensions; `replies.jsonl` answers each case MODELLED,
naming exactly those two entities, in the `hand:FILE` format (reference/hand-replies.md).
Nothing is written but the folder `--out` names: put it under runs/ (which git ignores) or outside
the checkout.

Examples:
  .venv/bin/python scripts/generate_large_model.py --out runs/large-1mb --size 1000000
  .venv/bin/python scripts/generate_large_model.py --out runs/large-5mb --size 5000000 --cases 31
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from dataclasses import dataclass
from pathlib import Path

SEED = 20261201
PACKAGE, MODEL_FILE = "large", "large.malloy"

UNIT_WORDS = ["harbor", "meadow", "granite", "falcon", "willow", "copper", "summit", "lagoon",
              "cedar", "ember", "orchid", "tundra", "quartz", "prairie", "beacon", "juniper",
              "canyon", "saffron", "glacier", "maple", "onyx", "delta", "sierra", "cobalt"]
UNIT_KINDS = ["store", "warehouse", "outlet", "depot", "kiosk", "studio", "market", "hub"]
MEASURE_NOUNS = ["revenue", "refund", "discount", "shipping_cost", "tax", "margin", "units",
                 "returns", "orders", "basket_value", "tips", "fees", "chargebacks", "credits",
                 "loyalty_points", "gift_cards", "markdowns", "shrinkage", "payroll", "rent"]
MEASURE_QUALIFIERS = ["gross", "net", "adjusted", "weekly", "seasonal", "promo", "online",
                      "instore", "wholesale", "member"]
DIMENSION_NOUNS = ["region", "channel", "category", "segment", "cashier", "aisle", "supplier",
                   "campaign", "payment_method", "shift", "weekday", "brand", "tier", "zone"]
DIMENSION_QUALIFIERS = ["primary", "secondary", "legacy", "current", "billing", "shipping"]
DOC_FILLER = ["Counts only rows the finance team has reconciled.",
              "Figures are in US dollars at the booking-day exchange rate.",
              "Use this for board reporting; the operational dashboards use a nightly copy.",
              "Rows before the 2019 migration are estimates.",
              "Excludes internal transfers between units.",
              "Restated quarterly when late adjustments arrive.",
              "Null when the till did not record it.",
              "Owned by the regional controller of this unit."]


@dataclass(frozen=True)
class Unit:
    """One business unit: one source of the model."""

    name: str
    words: str
    measures: list[str]
    dimensions: list[str]


def _words(name: str) -> str:
    return name.replace("_", " ")


def _doc(rng: random.Random, head: str) -> str:
    return " ".join([head, *rng.sample(DOC_FILLER, 3)])


def _source_text(rng: random.Random, unit: Unit) -> str:
    lines = [f"#(doc) {_doc(rng, f'The {unit.words}: one row per sale line booked by this unit.')}",
             f"source: {unit.name} is duckdb.table('../data/sales.csv') extend {{",
             "  dimension:"]
    for d in unit.dimensions:
        column = rng.choice(["region", "channel", "category"])
        head = f"The {_words(d)} of a sale at the {unit.words}."
        lines.append(f"    #(doc) {_doc(rng, head)}")
        lines.append(f"    {d} is {column}")
    lines.append("  measure:")
    for m in unit.measures:
        column = rng.choice(["amount", "quantity", "cost"])
        head = f"Total {_words(m)} of the {unit.words}."
        lines.append(f"    #(doc) {_doc(rng, head)}")
        lines.append(f"    {m} is {column}.sum()")
    for i, (m, d) in enumerate(zip(unit.measures[:3], unit.dimensions[:3], strict=True)):
        head = f"{_words(m)} by {_words(d)}."
        lines.append(f"  #(doc) {_doc(rng, head)}")
        lines.append(f"  view: report_{i} is {{ group_by: {d}; aggregate: {m} }}")
    lines.append("}")
    return "\n".join(lines) + "\n\n"


def _unit(rng: random.Random, index: int) -> Unit:
    word, kind = UNIT_WORDS[index % len(UNIT_WORDS)], UNIT_KINDS[(index // len(UNIT_WORDS)) % len(UNIT_KINDS)]
    name = f"{word}_{kind}_{index}"
    measures = rng.sample([f"{q}_{n}" for q in MEASURE_QUALIFIERS for n in MEASURE_NOUNS], 30)
    dimensions = rng.sample([f"{q}_{n}" for q in DIMENSION_QUALIFIERS for n in DIMENSION_NOUNS], 16)
    return Unit(name, f"{word} {kind} number {index}", measures, dimensions)


def _tables(data: Path, rng: random.Random) -> None:
    data.mkdir(parents=True, exist_ok=True)
    with (data / "sales.csv").open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["sale_id", "region", "channel", "category", "amount", "quantity", "cost"])
        for i in range(200):
            out.writerow([i, rng.choice(["north", "south", "east", "west"]),
                          rng.choice(["web", "app", "till"]), rng.choice(["food", "home", "toys"]),
                          round(rng.uniform(1, 500), 2), rng.randint(1, 9), round(rng.uniform(1, 300), 2)])


def generate(out: Path, size: int, cases: int = 31, seed: int = SEED) -> dict:
    """Write the set under `out`; returns what was written (sizes and counts)."""
    rng = random.Random(seed)
    out = Path(out)
    (out / "model").mkdir(parents=True, exist_ok=True)
    _tables(out / "data", rng)
    units: list[Unit] = []
    parts: list[str] = [("// A synthetic retailer with many business units, generated by "
                         "scripts/generate_large_model.py.\n\n")]
    written = len(parts[0])
    while written < size:
        unit = _unit(rng, len(units))
        text = _source_text(rng, unit)
        units.append(unit)
        parts.append(text)
        written += len(text)
    model = out / "model" / MODEL_FILE
    model.write_text("".join(parts), encoding="utf-8")
    (out / "model" / "publisher.json").write_text(json.dumps({"name": PACKAGE}) + "\n")
    (out / "set.json").write_text(json.dumps({
        "name": out.name, "datasetVersion": 1, "targetPackage": PACKAGE,
        "targetModelPath": MODEL_FILE, "environment": "samples",
        "conventions": ["Money amounts: in US dollars."]}, indent=2) + "\n")
    lines, replies = [], []
    for i in range(cases):
        unit = units[rng.randrange(len(units))]
        measure, dimension = rng.choice(unit.measures), rng.choice(unit.dimensions)
        m_words, d_words = _words(measure), _words(dimension)
        qid = f"lg_{i:03d}"
        measure_id, dimension_id = f"measure:{unit.name}:{measure}", f"dimension:{unit.name}:{dimension}"
        lines.append({"qid": qid, "question": f"What was the {m_words} of the {unit.words}, by {d_words}?",
                      "coverage": "covered", "coverageNote": measure_id,
                      "requiresConcepts": [f"{m_words} {unit.name}", f"{d_words} {unit.name}"],
                      "expectedEntities": {"required": [measure_id, dimension_id]},
                      "goldenRevision": 1,
                      "golden": {"kind": "criteria", "status": "verified",
                                 "rubric": f"REQUIRED: the {m_words} per {d_words}."}})
        replies.append({"key": f"cov.{qid}", "replies": [{
            "quantities": [{"quantity": m_words, "candidates": [measure_id], "ruled_out": None},
                           {"quantity": d_words, "candidates": [dimension_id], "ruled_out": None}],
            "resolved_by": None, "why": f"{measure} and {dimension} of {unit.name} answer it.",
            "verdict": "MODELLED", "rule_kind": None, "entities": [measure_id, dimension_id]}]})
    (out / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in lines), encoding="utf-8")
    (out / "replies.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies), encoding="utf-8")
    return {"set": str(out), "model_bytes": model.stat().st_size, "sources": len(units),
            "entities": sum(1 + len(u.measures) + len(u.dimensions) + 3 for u in units),
            "cases": cases, "replies": str(out / "replies.jsonl")}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="the set folder to write (under runs/, or outside the checkout)")
    p.add_argument("--size", type=int, default=1_000_000, help="model file size to reach, in bytes")
    p.add_argument("--cases", type=int, default=31, help="number of cases (and replies)")
    p.add_argument("--seed", type=int, default=SEED)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(json.dumps(generate(args.out, args.size, args.cases, args.seed), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
