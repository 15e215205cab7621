"""Charts drawn by the kit as inline SVG: horizontal bars with their numbers written beside them.

A chart repeats figures the page also gives as text or a table (a reader without sight, or a
printer without colour, loses nothing), so each is a plain drawing: no script, no external font,
no image. Labels go through the same escaping as the rest of the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from malloy_evals.report.html import Html, el

LABEL_WIDTH = 170    # room for the longest cascade rung, "coverage unmeasured"
BAR_WIDTH = 300
VALUE_WIDTH = 170
ROW_HEIGHT = 24
BAR_HEIGHT = 16


@dataclass(frozen=True)
class Bar:
    """One bar: its label, its count, and optionally the part of it drawn as an overlay."""

    label: str
    value: int
    css: str = "bar"                 # the class that colours it (`bar-match`, `bar`)
    overlay: int | None = None       # e.g. the matches among a cascade rung's attempts
    overlay_label: str = "match"


def bar_chart(bars: Sequence[Bar], *, title: str) -> Html:
    """Bars scaled to the largest value (a chart of zeros draws no bars), numbers beside each."""
    top = max([b.value for b in bars] + [1])
    height = ROW_HEIGHT * len(bars) + 8
    width = LABEL_WIDTH + BAR_WIDTH + VALUE_WIDTH
    shapes: list[Html] = [el("title", title)]
    for i, bar in enumerate(bars):
        y = 4 + i * ROW_HEIGHT
        length = round(BAR_WIDTH * bar.value / top, 1)
        text_y = y + BAR_HEIGHT - 3
        value_text = str(bar.value)
        if bar.overlay:
            value_text += f" ({bar.overlay} {bar.overlay_label})"
        shapes.append(el("text", bar.label, x=LABEL_WIDTH - 8, y=text_y, text_anchor="end"))
        if length > 0:
            shapes.append(el("rect", el("title", f"{bar.label}: {value_text}"), x=LABEL_WIDTH,
                             y=y, width=length, height=BAR_HEIGHT, class_=bar.css))
        if bar.overlay:
            part = round(BAR_WIDTH * bar.overlay / top, 1)
            shapes.append(el("rect", x=LABEL_WIDTH, y=y + BAR_HEIGHT - 5, width=part, height=5,
                             class_="bar-overlay"))
        shapes.append(el("text", value_text, x=LABEL_WIDTH + length + 6, y=text_y))
    # Inline SVG in HTML needs no namespace; the HTML parser restores `viewBox`'s capital letter.
    return el("svg", shapes, viewbox=f"0 0 {width} {height}", width=width, height=height,
              role="img", aria_label=title, class_="chart")
