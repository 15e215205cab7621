"""The report pages' markup builder: escaping by construction, relative links only, one shell."""

from __future__ import annotations

import base64
import hashlib
import html
import re

import pytest
from malloy_evals.report import html as h

HOSTILE = '</table></pre><script>alert(1)</script><img src=x onerror="alert(2)">&amp;'


def test_a_plain_string_child_is_escaped_whatever_it_holds():
    out = h.el("pre", HOSTILE)
    assert "<script>" not in out and "</table>" not in out and "<img" not in out
    assert out == ("<pre>&lt;/table&gt;&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img "
                   "src=x onerror=&quot;alert(2)&quot;&gt;&amp;amp;</pre>")


def test_markup_made_by_the_builder_passes_through_unescaped():
    inner = h.el("code", "a<b")
    assert h.el("p", inner) == "<p><code>a&lt;b</code></p>"


def test_attribute_values_are_escaped_so_they_cannot_close_the_quote():
    out = h.el("td", "x", data_qid='q1" onclick="alert(1)')
    assert out == '<td data-qid="q1&quot; onclick=&quot;alert(1)">x</td>'


@pytest.mark.parametrize("url", [
    pytest.param("javascript:alert(1)", id="javascript-scheme"),
    pytest.param(" JavaScript:alert(1)", id="scheme-with-space-and-case"),
    pytest.param("https://cdn.example.com/x.css", id="absolute-https"),
    pytest.param("//cdn.example.com/x.js", id="protocol-relative"),
    pytest.param("/etc/passwd", id="root-relative"),
    pytest.param("file:///etc/passwd", id="file-scheme"),
    pytest.param("C:\\runs\\r1", id="windows-drive"),
    pytest.param("\\\\host\\share", id="unc-path"),
    pytest.param("data:text/html,<script>", id="data-url"),
])
def test_a_link_to_anything_but_a_relative_path_is_refused(url):
    with pytest.raises(ValueError, match="relative path"):
        h.el("a", "x", href=url)
    assert h.link("x", url) == "x"  # link() falls back to the bare text


@pytest.mark.parametrize("url", ["#attempt-q1", "artifacts/q1/_/prediction.csv",
                                 "../r1/report.html#case-q1", "report%20copy.html"])
def test_relative_links_and_fragments_are_kept(url):
    assert h.el("a", "x", href=url) == f'<a href="{url}">x</a>'


def test_event_handler_attributes_cannot_be_written():
    with pytest.raises(ValueError, match="not allowed"):
        h.el("div", "x", onclick="alert(1)")


def test_href_to_percent_encodes_each_segment_and_keeps_slashes():
    assert h.href_to("artifacts/q 1/_/pred#1.csv") == "artifacts/q%201/_/pred%231.csv"
    assert h.href_to("../r1/report.html", fragment="case-q1") == "../r1/report.html#case-q1"


def test_anchor_ids_name_the_sample_and_keep_ids_safe():
    assert h.anchor_id("bk_total_revenue", None) == "attempt-bk_total_revenue"
    assert h.anchor_id("bk_total_revenue", 2) == "attempt-bk_total_revenue-s2"
    assert h.case_anchor('q"1 x') == "case-q_1_x"


def test_text_shows_null_and_yes_no_rather_than_python_words():
    # A number as the engine returned it, every digit (issue 25: never cut to six), and a
    # structured value as words, never a Python dict.
    assert [h.shown(None), h.shown(True), h.shown(False), h.shown(0.1 + 0.2)] == [
        "null", "yes", "no", "0.30000000000000004"]
    assert h.shown({"rule": "read", "tools": ["Bash", None]}) == "rule: read; tools: Bash, null"
    assert (h.pct(None), h.usd(None)) == ("n/a", "unknown")


def test_rows_table_states_the_full_count_and_links_the_file_when_rows_are_cut():
    out = h.rows_table([{"a": 1}, {"a": 2}], 250, caption="rows the kit re-executed",
                       more_href="artifacts/q1/_/prediction.csv")
    assert "250 rows, first 2 shown" in out
    assert 'href="artifacts/q1/_/prediction.csv"' in out
    assert out.count("<tr>") == 3  # the header and the two rows shown


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_page_pins_its_own_script_and_style_and_allows_no_fetch():
    doc = h.page("t", h.el("p", "body"))
    policy = html.unescape(
        re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', doc).group(1))
    assert "default-src 'none'" in policy
    assert f"script-src {_csp_hash(h.SCRIPT)}" in policy
    assert f"style-src {_csp_hash(h.STYLE)}" in policy
    # The hashes cover exactly the inline text: any other inline script would be refused.
    assert f"<script>{h.SCRIPT}</script>" in doc and f"<style>{h.STYLE}</style>" in doc
    assert doc.count("<script") == 1


def test_page_names_no_absolute_url_anywhere():
    doc = h.page("t", h.el("p", "body"))
    assert not re.search(r"(?i)\b(?:src|href)\s*=\s*\"?(?:[a-z]+:|//)", doc)
    assert "http://" not in doc and "https://" not in doc
