"""The inline SVG bar charts: bars scaled to the largest count, numbers beside them, text escaped."""

from __future__ import annotations

import re

from malloy_evals.report.charts import BAR_WIDTH, Bar, bar_chart


def _widths(svg: str) -> list[float]:
    return [float(w) for w in re.findall(r'<rect [^>]*width="([0-9.]+)" height="16"', svg)]


def test_bars_are_scaled_to_the_largest_count():
    svg = bar_chart([Bar("match", 9), Bar("no_match", 3), Bar("null", 0)], title="verdicts")
    # 9 is the full width; 3 is a third of it; 0 draws no bar at all.
    assert _widths(svg) == [BAR_WIDTH, round(BAR_WIDTH * 3 / 9, 1)]
    assert ">9</text>" in svg and ">3</text>" in svg and ">0</text>" in svg


def test_a_chart_of_zeros_draws_no_bar_and_still_says_each_count():
    svg = bar_chart([Bar("match", 0), Bar("no_match", 0)], title="verdicts")
    assert _widths(svg) == []
    assert svg.count(">0</text>") == 2


def test_overlay_is_drawn_and_written_beside_the_count():
    svg = bar_chart([Bar("not covered", 9, overlay=3)], title="cascade")
    assert "9 (3 match)" in svg
    assert 'class="bar-overlay"' in svg


def test_chart_is_an_accessible_image_with_its_title():
    svg = bar_chart([Bar("match", 1)], title="verdict counts")
    assert svg.startswith('<svg viewbox="0 0 ') and 'role="img"' in svg
    assert 'aria-label="verdict counts"' in svg and "<title>verdict counts</title>" in svg


def test_labels_are_escaped():
    svg = bar_chart([Bar("<script>x</script>", 1)], title="t")
    assert "<script>" not in svg and "&lt;script&gt;" in svg
