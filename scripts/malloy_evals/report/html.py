"""The markup the report pages are built from: every value escaped by construction, one page shell.

A page is built from `el(...)` calls. A plain string handed to `el` (or `esc`) is always escaped;
only `Html`, which this module alone makes, passes through as markup. So an answer, a query, a
golden or a judge's why can never become markup, whatever it contains: the builder has no way to
take a string as HTML. Links are checked as they are built: a page links only by relative path
(to another page or an artifact) or to a fragment of itself, never to an absolute URL, so an
opened page reaches nothing beyond its own folder (reference/report.md).

The shell (`page`) inlines the style sheet and the one script, and pins both by sha256 in a
Content-Security-Policy, so even markup that got in some other way could run no script and fetch
nothing.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

# Attributes whose value is a URL: only relative references are allowed there.
_URL_ATTRIBUTES = frozenset({"href", "src", "action", "formaction", "xlink:href", "poster", "srcset"})
# A scheme (`javascript:`, `https:`, `file:`), a protocol-relative `//host`, a root-relative `/x` or
# a Windows drive or UNC path: anything that would leave the page's own folder.
_NOT_RELATIVE = re.compile(r"^\s*(?:[A-Za-z][A-Za-z0-9+.-]*:|[/\\])")
_TAG = re.compile(r"[a-z][a-z0-9-]*")
_ATTRIBUTE = re.compile(r"[a-z][a-z0-9:-]*")
_VOID_TAGS = frozenset({"br", "hr", "meta", "input", "col", "wbr"})


class Html(str):
    """Markup this module made: every value in it was escaped, every tag is the kit's own."""

    __slots__ = ()


class Cell(Html):
    """A table cell made by `td`, so `table` takes it as the cell itself."""

    __slots__ = ()


def esc(value: Any) -> Html:
    """`value` as text inside markup: `<`, `>`, `&` and quotes escaped; Html passes unchanged."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def is_relative_url(url: str) -> bool:
    """True for a fragment (`#x`) or a relative path (`../r1/report.html#attempt-q1`)."""
    return bool(url) and not _NOT_RELATIVE.match(url) and "\x00" not in url


def el(tag: str, *children: Any, **attrs: Any) -> Html:
    """`<tag attrs>children</tag>`. Children: strings (escaped), Html, None (skipped) or iterables
    of those. Attributes: `class_` is `class`, `data_qid` is `data-qid`; True is a bare
    attribute, None and False are left out; every value is escaped. A URL attribute must be
    relative (a programming error otherwise: the page must never name an absolute URL)."""
    if not _TAG.fullmatch(tag):
        raise ValueError(f"not a tag name: {tag!r}")
    parts = [f"<{tag}"]
    for raw_name, value in attrs.items():
        name = raw_name.rstrip("_").replace("_", "-")
        if not _ATTRIBUTE.fullmatch(name) or name.startswith("on"):
            raise ValueError(f"attribute {name!r} is not allowed")
        if value is None or value is False:
            continue
        if value is True:
            parts.append(f" {name}")
            continue
        text = str(value)
        if name in _URL_ATTRIBUTES and not is_relative_url(text):
            raise ValueError(f"{name}={text!r}: a report page links only by relative path")
        parts.append(f' {name}="{esc(text)}"')
    parts.append(">")
    if tag in _VOID_TAGS:
        return Html("".join(parts))
    parts.append(_children(children))
    parts.append(f"</{tag}>")
    return Html("".join(parts))


def _children(children: Iterable[Any]) -> str:
    out: list[str] = []
    for child in children:
        if child is None:
            continue
        if isinstance(child, (str, int, float)):
            out.append(esc(child))
        else:
            out.append(_children(child))
    return "".join(out)


def join(*children: Any) -> Html:
    """Several pieces as one piece of markup (strings escaped)."""
    return Html(_children(children))


def href_to(target: str | Path, *, fragment: str | None = None) -> str:
    """A relative path as a URL (each segment percent-encoded, `/` kept), plus `#fragment`."""
    text = Path(target).as_posix() if isinstance(target, Path) else str(target)
    url = quote(text, safe="/")
    return url + (f"#{quote(fragment, safe='')}" if fragment else "")


def link(text: Any, url: str | None, **attrs: Any) -> Html:
    """`<a href=url>text</a>`, or the bare text when there is no safe URL to link to."""
    if not url or not is_relative_url(url):
        return esc(text)
    return el("a", text, href=url, **attrs)


def anchor_id(qid: str, sample: Any) -> str:
    """The id of an attempt's detail section, shared by the run page and the comparison page's
    links into it: `attempt-bk_total_revenue`, `attempt-bk_total_revenue-s2` for sample 2."""
    base = "attempt-" + _id_part(qid)
    return base if sample is None else f"{base}-s{sample}"


def case_anchor(qid: str) -> str:
    """The id of a case on a run page (its first attempt): what the comparison page links to."""
    return "case-" + _id_part(qid)


def _id_part(qid: str) -> str:
    # qids are already safe ids; this keeps a hand-edited one from breaking the fragment.
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(qid))


def shown(value: Any, *, none: str = "null") -> str:
    """A value as a person reads it: None as `null` (or the word given), booleans as yes/no, a
    number exactly as the engine returned it (`exact_number`), a structured value as words
    (`key: value; key: value`, items joined by commas), never as a Python dict or list."""
    if value is None:
        return none
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return exact_number(value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {shown(v, none=none)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(shown(v, none=none) for v in value) or "none"
    return str(value)


def exact_number(value: float) -> str:
    """A number with every digit it has: the shortest text that reads back as the same float
    (Python's repr, as JSON writes it), never rounded to fewer significant digits."""
    return repr(value) if isinstance(value, float) else str(value)


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (`62.5%`), or `n/a`."""
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def usd(x: float | None) -> str:
    """Dollars (`$0.0419`), or `unknown` (an unpriced cost is unknown, never $0)."""
    return "unknown" if x is None else f"${x:.4f}"


def clip(text: str, limit: int) -> tuple[str, int]:
    """`text` cut to `limit` characters, and how many were cut."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]], *, caption: Any = None,
          **attrs: Any) -> Html:
    """A table with a header row (`th scope=col`) in a wrapper that scrolls sideways on narrow
    screens, so the page itself never does."""
    head = el("thead", el("tr", [el("th", h, scope="col") for h in headers]))
    body = el("tbody", [el("tr", [c if isinstance(c, Cell) else el("td", c) for c in row])
                        for row in rows])
    return el("div", el("table", el("caption", caption) if caption is not None else None,
                        head, body, **attrs), class_="scroll")


def td(*children: Any, **attrs: Any) -> Cell:
    """A table cell with attributes (`data_sort`, `class_`), for `table` rows."""
    return Cell(el("td", *children, **attrs))


def definition_list(items: Iterable[tuple[Any, Any]], **attrs: Any) -> Html:
    """`<dl>` of (term, description) pairs; a None description is left out."""
    return el("dl", [[el("dt", k), el("dd", v)] for k, v in items if v is not None], **attrs)


def rows_table(rows: Sequence[Mapping[str, Any]], total: int | None, *, caption: str,
               more_href: str | None = None) -> Html:
    """Data rows (re-executed or golden) as a table: the first rows shown, the full count stated,
    and a link to the file that holds them all when more exist than are shown."""
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(str(key))
    n = len(rows) if total is None else total
    note = f"{n} row{'s' if n != 1 else ''}"
    if len(rows) < n:
        note += f", first {len(rows)} shown"
    head = join(caption, " (", note, ")")
    if more_href and len(rows) < n:
        head = join(head, " ", link("all rows", more_href))
    if not rows:
        return el("p", head, class_="rows-note")
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    return table(columns, cells, caption=head, class_="data")


def _cell(value: Any) -> str:
    text, cut = clip(shown(value), 300)
    return text + (f"… ({cut} more characters)" if cut else "")


# ---------------------------------------------------------------------------------------------
# The page shell

STYLE = """
:root{--fg:#1d2430;--muted:#5b6474;--line:#d6dae1;--bg:#fff;--soft:#f4f6f9;--ok:#1f7a3d;
--bad:#b42318;--mid:#8a5a00;--null:#5b6474;--accent:#2457a6}
*{box-sizing:border-box}
body{margin:0 auto;max-width:72rem;padding:1rem;font:15px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
h1{font-size:1.5rem;margin:.2rem 0 .4rem}h2{font-size:1.2rem;margin:1.6rem 0 .5rem;
border-bottom:1px solid var(--line);padding-bottom:.2rem}h3{font-size:1rem;margin:1rem 0 .3rem}
h4{font-size:.95rem;margin:.8rem 0 .2rem}
.meta,.note,.rows-note{color:var(--muted)}
.headline{font-size:1.35rem;font-weight:700;margin:.6rem 0;padding:.6rem .8rem;
border-left:.35rem solid var(--accent);background:var(--soft);overflow-wrap:anywhere}
.headline p{margin:0}.headline p+p{font-size:1rem;margin-top:.3rem}
.headline.incomplete,.headline.worse{border-color:var(--bad)}
.headline.better{border-color:var(--ok)}
.alert{padding:.5rem .8rem;border:1px solid var(--bad);border-radius:.3rem;margin:.5rem 0}
.scroll{overflow-x:auto;max-width:100%;margin:.4rem 0}
table{border-collapse:collapse;font-size:.9rem}
caption{text-align:left;color:var(--muted);padding:.2rem 0;caption-side:top}
th,td{border:1px solid var(--line);padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:var(--soft)}
td.num,th.num,table.cases td:nth-child(3),table.cases td:nth-child(5),
table.cases td:nth-child(6){text-align:right;font-variant-numeric:tabular-nums}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:var(--soft);padding:.5rem;
border-radius:.3rem;margin:.3rem 0;font-size:.85rem;max-width:100%}
code{overflow-wrap:anywhere}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.15rem .8rem;margin:.4rem 0}
dt{color:var(--muted)}dd{margin:0;overflow-wrap:anywhere}
.v-match{color:var(--ok);font-weight:600}.v-no_match{color:var(--bad);font-weight:600}
.v-near_match,.v-needs_human{color:var(--mid);font-weight:600}
.v-null,.v-unscored{color:var(--null);font-weight:600}
details.attempt{border:1px solid var(--line);border-radius:.3rem;margin:.4rem 0;padding:.2rem .6rem}
details.attempt>summary{cursor:pointer;font-weight:600;padding:.2rem 0}
details.attempt>summary>h3{display:inline;margin:0}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:0 1.2rem}.pair>*{min-width:0}
.question{white-space:pre-wrap;font-size:1.05rem;overflow-wrap:anywhere}
dl.stats{display:flex;flex-wrap:wrap;gap:.4rem}dl.stats>div{border:1px solid var(--line);
border-radius:.3rem;padding:.2rem .6rem;min-width:5.5rem}dl.stats dd{font-size:1.3rem;font-weight:700}
details[open].attempt>summary{border-bottom:1px solid var(--line);margin-bottom:.4rem}
.chart{max-width:40rem;width:100%;height:auto;display:block}
.chart text{font:12px system-ui,sans-serif;fill:var(--fg)}
.bar-match{fill:var(--ok)}.bar-no_match{fill:var(--bad)}.bar-near_match,.bar-needs_human{fill:#d89b1d}
.bar-null{fill:#98a1b0}.bar{fill:var(--accent)}.bar-overlay{fill:var(--ok)}
.controls{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;margin:.4rem 0}
.controls input,.controls select{font:inherit;padding:.15rem .3rem}
th button{all:unset;cursor:pointer;font-weight:700}
th button::after{content:" \\2195";color:var(--muted)}
tr.hidden{display:none}.c-fixed{color:var(--ok);font-weight:600}
.c-broken{color:var(--bad);font-weight:600}.c-moved{color:var(--mid)}
ol.calls{padding-left:1.6rem}ol.calls>li{margin:.3rem 0}
.facts{margin:.3rem 0}.facts i{color:var(--muted);font-style:normal}
.err{color:var(--bad)}
@media (max-width:50rem){.pair{grid-template-columns:1fr}}
@media (max-width:40rem){body{padding:.5rem;font-size:14px}dl{grid-template-columns:1fr}
dt{font-weight:600}}
@media print{.controls,th button::after{display:none}details::details-content{
content-visibility:visible;display:block}body{max-width:none}.headline{break-after:avoid}
a{color:inherit;text-decoration:none}}
""".strip()

# Sorting and filtering on top of a page that is complete without it: every control is made here,
# so a reader without JavaScript sees no dead buttons.
SCRIPT = r"""
(function(){
"use strict";
function val(td){var s=td.getAttribute("data-sort");if(s===null)s=td.textContent.trim();
var t=s.replace(/^\$/,"");return /^-?[0-9.]+(e-?[0-9]+)?$/i.test(t)?parseFloat(t):s.toLowerCase();}
function sortable(t){var ths=t.tHead.rows[0].cells;for(var i=0;i<ths.length;i++){(function(i){
var b=document.createElement("button");b.type="button";b.textContent=ths[i].textContent;
ths[i].textContent="";ths[i].appendChild(b);b.addEventListener("click",function(){
var asc=ths[i].getAttribute("aria-sort")!=="ascending";for(var j=0;j<ths.length;j++)
ths[j].removeAttribute("aria-sort");ths[i].setAttribute("aria-sort",asc?"ascending":"descending");
var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);rows.sort(function(a,b){
var x=val(a.cells[i]),y=val(b.cells[i]);if(x===""||y==="")return (x==="")-(y==="");
if(typeof x!==typeof y){x=String(x);y=String(y);}return (x<y?-1:x>y?1:0)*(asc?1:-1);});rows.forEach(function(r){body.appendChild(r);});});})(i);}}
function filterable(t){var box=document.createElement("div");box.className="controls";
var q=document.createElement("input");q.type="search";q.placeholder="filter cases";
q.setAttribute("aria-label","filter cases by any text");var sel=document.createElement("select");
var word=t.getAttribute("data-filter-word")||"verdict";sel.setAttribute("aria-label","show one "+word);
var seen={},o=document.createElement("option");o.value="";o.textContent="every "+word;sel.appendChild(o);
var rows=Array.prototype.slice.call(t.tBodies[0].rows);rows.forEach(function(r){
var v=r.getAttribute("data-verdict");if(v&&!seen[v]){seen[v]=1;var op=document.createElement("option");
op.value=v;op.textContent=v;sel.appendChild(op);}});var out=document.createElement("output");
out.setAttribute("aria-live","polite");function apply(){var s=q.value.toLowerCase(),n=0;
rows.forEach(function(r){var ok=(!sel.value||r.getAttribute("data-verdict")===sel.value)&&
(!s||r.textContent.toLowerCase().indexOf(s)>=0);r.classList.toggle("hidden",!ok);if(ok)n++;});
out.textContent=n+" of "+rows.length+" shown";}q.addEventListener("input",apply);
sel.addEventListener("change",apply);box.appendChild(q);box.appendChild(sel);box.appendChild(out);
var wrap=t.parentNode;wrap.parentNode.insertBefore(box,wrap);apply();}
function openTarget(){var id=decodeURIComponent(location.hash.slice(1));if(!id)return;
var e=document.getElementById(id);while(e){if(e.tagName==="DETAILS")e.open=true;e=e.parentElement;}}
document.querySelectorAll("table[data-sortable]").forEach(sortable);
document.querySelectorAll("table[data-filterable]").forEach(filterable);
window.addEventListener("hashchange",openTarget);openTarget();
window.addEventListener("beforeprint",function(){document.querySelectorAll("details").forEach(
function(d){d.open=true;});});
})();
""".strip()


def _sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


# Nothing may be fetched (no default source), only the kit's own script and style run, and a
# page cannot be framed into submitting anything. Images only as inline data (none are used).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; "
    f"script-src {_sha256_source(SCRIPT)}; style-src {_sha256_source(STYLE)}; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)


def page(title: str, body: Html, *, description: str | None = None) -> str:
    """A whole, self-contained HTML document: styles and script inline, no external resource."""
    head = join(
        Html('<meta charset="utf-8">'),
        el("meta", http_equiv="Content-Security-Policy", content=CONTENT_SECURITY_POLICY),
        el("meta", name="viewport", content="width=device-width, initial-scale=1"),
        el("meta", name="referrer", content="no-referrer"),
        el("meta", name="generator", content="malloy-evals report"),
        el("meta", name="description", content=description) if description else None,
        el("title", title),
        Html(f"<style>{STYLE}</style>"),
    )
    return ("<!doctype html>\n" + el("html", el("head", head),
                                     el("body", body, Html(f"<script>{SCRIPT}</script>")),
                                     lang="en") + "\n")
