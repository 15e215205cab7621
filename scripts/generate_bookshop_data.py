#!/usr/bin/env python3
"""Write the bookshop sample set's tables (books, customers, orders, order_items) as CSV.

The data is invented and fully deterministic: one seeded random.Random, fixed calendar bounds,
no wall clock. Running it twice gives byte-identical files, so the goldens in
evals/bookshop/cases.jsonl stay reproducible. The CSVs are committed; re-run this only when the
set's datasetVersion is bumped.

Examples:
  .venv/bin/python scripts/generate_bookshop_data.py --out runs/bookshop-data --seed 7
  .venv/bin/python scripts/generate_bookshop_data.py   # rewrites evals/bookshop/data in the checkout
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import random
from pathlib import Path

SEED = 20261130
FIRST_ORDER_DAY = dt.date(2024, 1, 1)
LAST_ORDER_DAY = dt.date(2025, 6, 30)  # the data ends mid-year on purpose (a partial period)
N_BOOKS = 120
N_CUSTOMERS = 600
N_ORDERS = 2500

GENRES = ["Fiction", "Mystery", "Science Fiction", "Fantasy", "Romance", "History", "Biography",
          "Science", "Children", "Cookery"]
# Some genres sell more than others, so rankings are not ties.
GENRE_WEIGHT = {"Fiction": 9, "Mystery": 7, "Science Fiction": 5, "Fantasy": 6, "Romance": 4,
                "History": 3, "Biography": 2, "Science": 3, "Children": 5, "Cookery": 2}
PUBLISHERS = ["Larkspur Press", "Tidewater Books", "Quillmark", "Hollow Oak Publishing",
              "Northlight House", "Saltmarsh & Reed"]
FORMATS = {"hardcover": (24.0, 38.0), "paperback": (11.0, 19.0), "ebook": (6.0, 13.0)}
TITLE_A = ["Silent", "Crimson", "Last", "Hidden", "Winter", "Paper", "Glass", "Distant", "Iron",
           "Quiet", "Golden", "Broken", "Salt", "Lantern", "Borrowed", "Northern", "Velvet",
           "Hollow", "Restless", "Ninth"]
TITLE_B = ["Harbor", "Orchard", "Cartographer", "Tide", "Archive", "Garden", "Meridian",
           "Lighthouse", "Kingdom", "Recipe", "Voyage", "Letters", "Engine", "Forest", "Atlas",
           "Crossing", "Secret", "Summer", "Machine", "River"]
FIRST_NAMES = ["Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines",
               "Jonas", "Keiko", "Liam", "Maya", "Nikolai", "Olga", "Pedro", "Quinn", "Rosa",
               "Sanjay", "Tessa", "Umar", "Vera", "Wen", "Ximena", "Yusuf", "Zoe", "Amara",
               "Bastian", "Carmen", "Declan"]
LAST_NAMES = ["Abbott", "Brennan", "Castillo", "Dubois", "Eriksen", "Fischer", "Gallo",
              "Hartmann", "Ibarra", "Jensen", "Kowalski", "Lindqvist", "Moreau", "Nakamura",
              "Okafor", "Petrov", "Quintero", "Rossi", "Sato", "Tanaka", "Ueda", "Varga",
              "Walsh", "Yilmaz", "Zimmer"]
# region -> (countries, weight)
REGIONS = {
    "North America": (["United States", "Canada"], 45),
    "Europe": (["United Kingdom", "Germany", "France", "Ireland"], 30),
    "Asia Pacific": (["Australia", "Japan", "New Zealand"], 15),
    "Latin America": (["Mexico", "Brazil"], 10),
}
CHANNELS = [("web", 55), ("app", 30), ("marketplace", 15)]
DISCOUNTS = [0.0, 0.05, 0.10, 0.15, 0.25]


def _weighted(rng: random.Random, pairs: list[tuple[str, int]]) -> str:
    """One choice from (value, weight) pairs; a helper so every draw goes through one rng."""
    values, weights = zip(*pairs, strict=True)
    return rng.choices(values, weights=weights)[0]


def _day(rng: random.Random, start: dt.date, end: dt.date) -> dt.date:
    """A uniformly drawn day in [start, end]."""
    return start + dt.timedelta(days=rng.randint(0, (end - start).days))


def make_books(rng: random.Random) -> list[dict]:
    """Books with an author, genre, publisher, format and a list price set by the format."""
    authors = []
    while len(authors) < 60:
        name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        if name not in authors:
            authors.append(name)
    titles: set[str] = set()
    books = []
    for book_id in range(1, N_BOOKS + 1):
        while True:
            title = f"The {rng.choice(TITLE_A)} {rng.choice(TITLE_B)}"
            if rng.random() < 0.3:
                title = f"{title}, Book {rng.randint(2, 4)}"
            if title not in titles:
                titles.add(title)
                break
        fmt = _weighted(rng, [("hardcover", 3), ("paperback", 5), ("ebook", 2)])
        low, high = FORMATS[fmt]
        books.append({
            "book_id": book_id,
            "title": title,
            "author": rng.choice(authors),
            "genre": _weighted(rng, list(GENRE_WEIGHT.items())),
            "publisher": rng.choice(PUBLISHERS),
            "format": fmt,
            "list_price": round(round(rng.uniform(low, high) * 2) / 2 - 0.01, 2),  # x.49 / x.99
            "publication_year": rng.randint(1995, 2025),
            "page_count": rng.randint(96, 720),
        })
    return books


def make_customers(rng: random.Random) -> list[dict]:
    """Customers with a home region and country, a signup day and loyalty membership."""
    names: set[str] = set()
    customers = []
    region_pairs = [(r, w) for r, (_, w) in REGIONS.items()]
    for customer_id in range(1, N_CUSTOMERS + 1):
        while True:
            name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
            if name not in names or len(names) > 700:
                break
        if name in names:  # all pairs used up: disambiguate with an initial
            name = f"{name} {chr(65 + customer_id % 26)}."
        names.add(name)
        region = _weighted(rng, region_pairs)
        customers.append({
            "customer_id": customer_id,
            "name": name,
            "region": region,
            "country": rng.choice(REGIONS[region][0]),
            "signup_date": _day(rng, dt.date(2021, 1, 1), dt.date(2025, 5, 31)).isoformat(),
            "is_member": rng.random() < 0.35,
        })
    return customers


def make_orders(rng: random.Random, customers: list[dict], books: list[dict]
                ) -> tuple[list[dict], list[dict]]:
    """Orders and their lines. Ship dates only exist for shipped and returned orders; pending
    orders cluster in the last weeks of the data, as they would in a live shop."""
    # A few heavy buyers make the top-customer ranking stable.
    buyer_weight = [min(rng.paretovariate(1.8), 12.0) for _ in customers]
    book_weight = [GENRE_WEIGHT[b["genre"]] * rng.uniform(0.3, 2.0) for b in books]
    region_names = list(REGIONS)
    orders, items = [], []
    picks = rng.choices(range(len(customers)), weights=buyer_weight, k=N_ORDERS)
    drafts = []
    for idx in picks:
        cust = customers[idx]
        start = max(FIRST_ORDER_DAY, dt.date.fromisoformat(cust["signup_date"]))
        start = min(start, LAST_ORDER_DAY)
        drafts.append((_day(rng, start, LAST_ORDER_DAY), cust))
    drafts.sort(key=lambda d: (d[0], d[1]["customer_id"]))
    for order_id, (day, cust) in enumerate(drafts, start=1001):
        age = (LAST_ORDER_DAY - day).days
        if age < 10:
            status = _weighted(rng, [("pending", 70), ("shipped", 25), ("cancelled", 5)])
        else:
            status = _weighted(rng, [("shipped", 86), ("cancelled", 6), ("returned", 8)])
        ship = ""
        if status in ("shipped", "returned"):
            ship = (day + dt.timedelta(days=rng.choice([1, 1, 2, 2, 2, 3, 3, 4, 5, 7]))).isoformat()
        is_gift = rng.random() < 0.12
        ship_region = cust["region"]
        if is_gift and rng.random() < 0.6:  # gifts are often sent to someone elsewhere
            ship_region = rng.choice([r for r in region_names if r != cust["region"]])
        orders.append({
            "order_id": order_id,
            "customer_id": cust["customer_id"],
            "order_date": day.isoformat(),
            "ship_date": ship,
            "status": status,
            "channel": _weighted(rng, CHANNELS),
            "is_gift": is_gift,
            "ship_region": ship_region,
        })
        n_lines = _weighted(rng, [("1", 45), ("2", 30), ("3", 15), ("4", 7), ("5", 3)])
        chosen = set()
        for line_number in range(1, int(n_lines) + 1):
            while True:
                b = rng.choices(books, weights=book_weight)[0]
                if b["book_id"] not in chosen:
                    chosen.add(b["book_id"])
                    break
            # Members are offered deeper discounts more often.
            disc_weights = [50, 15, 20, 10, 5] if not cust["is_member"] else [25, 15, 30, 20, 10]
            discount = rng.choices(DISCOUNTS, weights=disc_weights)[0]
            items.append({
                "order_id": order_id,
                "line_number": line_number,
                "book_id": b["book_id"],
                "quantity": _weighted(rng, [("1", 78), ("2", 15), ("3", 5), ("5", 2)]),
                "unit_price": round(b["list_price"] * (1 - discount), 2),
                "discount": discount,
            })
    return orders, items


def write_csv(path: Path, rows: list[dict]) -> None:
    """One CSV with a header; booleans as true/false so DuckDB infers BOOLEAN."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (str(v).lower() if isinstance(v, bool) else v)
                             for k, v in row.items()})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "evals" / "bookshop" / "data")
    parser.add_argument("--seed", type=int, default=SEED)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Generate the four tables into --out (default evals/bookshop/data)."""
    args = build_parser().parse_args(argv)
    rng = random.Random(args.seed)
    books = make_books(rng)
    customers = make_customers(rng)
    orders, items = make_orders(rng, customers, books)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in [("books", books), ("customers", customers), ("orders", orders),
                       ("order_items", items)]:
        write_csv(args.out / f"{name}.csv", rows)
        print(f"{name}.csv: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
