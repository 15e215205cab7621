"""A set's golden cells: the numbers and texts a model change must never write or compute.

Each number is kept with the precision it is compared at (its golden's `round`, else the decimals
it is written with); each text cell case-folded. improve/checks.py reads them for the figures a
change writes, improve/values.py for the values a change computes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from malloy_evals.core.errors import InputError
from malloy_evals.sets.eval_set import EvalSet, golden_value

MIN_SIGNIFICANT = 4
# A number as a model text writes it: 7845.21, 7,845.21, -0.4029, 1.2e3.
NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")


@dataclass(frozen=True)
class GoldenFigure:
    """A value some golden holds, with the precision it is compared at."""

    qid: str
    value: float
    decimals: int | None    # compare rounded to this many decimals; None: exactly


@dataclass(frozen=True)
class GoldenCells:
    """Every golden's numbers and text cells, the things a change must never write."""

    figures: list[GoldenFigure]
    texts: dict[str, str]   # casefolded text cell -> the qid holding it
    text_columns: list[str] = field(default_factory=list)  # golden tables' text columns, in order


def _decimals_written(value: float) -> int:
    text = repr(float(value))
    if "e" in text or "E" in text:
        return 0
    return len(text.split(".")[1].rstrip("0")) if "." in text else 0


def _cells(value: Any) -> Iterator[tuple[Any, int | None]]:
    """The cells of a golden value with the precision its `round` gives (None: as written)."""
    if isinstance(value, dict):
        rnd = value.get("round")
        decimals = rnd if isinstance(rnd, int) and not isinstance(rnd, bool) else None
        for k, v in value.items():
            if k != "round":
                yield v, decimals
    elif isinstance(value, list):
        for row in value:
            yield from _cells(row)
    else:
        yield value, None


def golden_cells(eval_set: EvalSet) -> GoldenCells:
    """Every golden figure and text cell of the set (unreadable golden files are skipped: the
    set's own checks report them)."""
    figures: list[GoldenFigure] = []
    texts: dict[str, str] = {}
    text_columns: dict[str, None] = {}
    for qid, case in eval_set.cases.items():
        try:
            value = golden_value(case, eval_set.dir)
        except InputError:
            continue
        for row in value if isinstance(value, list) else []:  # a table: what its rows group by
            for k, v in row.items() if isinstance(row, dict) else ():
                if isinstance(v, str) and as_number(v) is None:
                    text_columns.setdefault(k, None)
        for cell, decimals in _cells(value):
            if isinstance(cell, bool) or cell is None:
                continue
            number = as_number(cell)
            if number is not None:
                figures.append(GoldenFigure(qid, number, decimals if decimals is not None
                                            else _decimals_written(number)))
            elif isinstance(cell, str) and cell.strip():
                texts.setdefault(cell.strip().casefold(), qid)
    return GoldenCells(figures, texts, list(text_columns))


def as_number(cell: Any) -> float | None:
    """A finite number, or one written as text (`7,845.21`); else None."""
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        return float(cell) if math.isfinite(float(cell)) else None
    if isinstance(cell, str) and NUMBER.fullmatch(cell.strip()):
        return float(cell.strip().replace(",", ""))
    return None


def significant_digits(literal: str) -> int:
    """Significant digits of a number as written: `7845.21` 6, `0.0588` 3, `1200` 2."""
    mantissa = re.split(r"[eE]", literal.lstrip("-+"))[0].replace(",", "")
    if "." in mantissa:
        return len(mantissa.replace(".", "").lstrip("0"))
    return len(mantissa.lstrip("0").rstrip("0"))


def equal_at(literal: float, figure: GoldenFigure) -> bool:
    if figure.decimals is None:
        return math.isclose(literal, figure.value, rel_tol=1e-9, abs_tol=0.0)
    scale = 10 ** figure.decimals
    return round(literal * scale) == round(figure.value * scale)
