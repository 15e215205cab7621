"""Dollar cost of a call from the dated price table in reference/prices.md; an unpriced model costs None, never 0."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from malloy_evals.core import paths

PRICES_PATH = paths.REFERENCE_DIR / "prices.md"


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens for one model id (prefix)."""

    model: str
    input: float
    output: float
    cache_write: float
    cache_read: float


def load_prices(path: Path = PRICES_PATH) -> dict[str, Price]:
    """The price table of reference/prices.md: rows `| model | input | output | cache write | cache read |`."""
    prices: dict[str, Price] = {}
    if not path.is_file():
        return prices
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("claude"):
            continue
        try:
            nums = [float(c.lstrip("$")) for c in cells[1:]]
        except ValueError:
            continue
        prices[cells[0]] = Price(cells[0], *nums)
    return prices


def price_for(model: str | None, prices: dict[str, Price] | None = None) -> Price | None:
    """The row for a model id: exact, or the row plus a date or `-latest` suffix
    (`claude-sonnet-4-5-20250929` takes the `claude-sonnet-4-5` row). Anything else is unknown
    (None): `claude-opus-4-7` must not silently borrow `claude-opus-4`'s price."""
    if not model:
        return None
    table = load_prices() if prices is None else prices
    if model in table:
        return table[model]
    base = re.sub(r"-(\d{8}|latest)$", "", model)
    return table.get(base)


def cost_usd(model: str | None, *, input_tokens: int | None, output_tokens: int | None,
             cache_read_tokens: int | None = 0, cache_write_tokens: int | None = 0,
             discount: float = 1.0, prices: dict[str, Price] | None = None) -> float | None:
    """Dollar cost of one call, or None when the model's price or the usage is unknown (never 0)."""
    price = price_for(model, prices)
    if price is None or input_tokens is None or output_tokens is None:
        return None
    total = (input_tokens * price.input + output_tokens * price.output
             + (cache_write_tokens or 0) * price.cache_write
             + (cache_read_tokens or 0) * price.cache_read) / 1_000_000
    return round(total * discount, 8)
