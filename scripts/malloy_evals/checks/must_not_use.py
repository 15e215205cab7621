"""The must-not-use veto: does a submitted query's TEXT use a forbidden field (SPEC 5.2)?

`golden.mustNotUse` names the similar-but-wrong field (list price where the question wants the
price paid). Using one fails the answer however good the number looks, so this is decided here,
mechanically, never by the judge. The judge only receives what cannot be decided here: prose
entries, and leaf hits (the field's bare name under another qualifier or none).

Steps:
1. Classify each entry: a bare identifier or dotted path (a trailing aggregate call such as
   `.avg()` dropped) is decidable; anything else (`x as a proxy`, `a line-item denominator`)
   is prose.
2. Blank comments and string literals in ONE left-to-right pass, keeping every position, so a
   name in a comment or a string never counts and `//` inside a URL string eats nothing.
   Malloy annotations (`# bar_chart`, `#(doc) ...`, `## ...`) run to the end of their line and are
   blanked like a line comment (SPEC 5.2 does not name them): a field named in a doc tag is not a
   use, and a quote inside one (three quotes after `#`) must not open a string that hides the
   query after it.
3. Look for each path as a whole identifier path (a longer join path ending in it counts).
   Malloy's lexer skips whitespace and comments between tokens, so `books . list_price`,
   `books
  .list_price` and `books./* x */list_price` name `books.list_price`: blanks around a
   dot are closed up before matching. Identifiers are case-sensitive in Malloy (`LIST_PRICE` is
   not `list_price`; the query would not compile), so matching is too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_PATH_RE = re.compile(rf"^{_IDENT}(?:\.{_IDENT})*$")
# `products.retail_price.avg()` names `products.retail_price`: the aggregate call goes.
_TRAILING_CALL_RE = re.compile(rf"^(?P<path>.+)\.{_IDENT}\(\s*\)$")
_CONNECTIVES = (" as ", " through ")
# Whitespace (and blanked comments) on either side of a path dot: Malloy ignores it.
_SPACED_DOT_RE = re.compile(r"\s*\.\s*")


@dataclass(frozen=True)
class MustNotUseResult:
    """Which forbidden fields a submitted query uses (SPEC 5.2)."""

    hits: list[str]       # entries as written whose path the query uses: each vetoes the answer
    leaf_hits: list[str]  # dotted entries whose bare leaf appears elsewhere: a suspicion, no veto
    unchecked: list[str]  # prose entries (or every entry when there is no query): the judge's
    absent: list[str]     # decidable entries proven absent: nobody needs to look at them
    checked: list[str]    # the normalised paths tested for hits and leaf hits
    judge_note: str       # one line per unchecked entry and per leaf hit; "" when none

    @property
    def exit_code(self) -> int:
        return EXIT_FINDING if self.hits else EXIT_OK


# ----------------------------------------------------------------------------------- noise

def noise_spans(text: str) -> list[tuple[int, int]]:
    """The [start, end) spans of comments and string literals, found in one left-to-right pass.

    Whichever token opens first wins: a `--` inside `'2024-01--2024-06'` is part of the string,
    a quote inside a `-- comment` is part of the comment. Backtick identifiers are skipped whole
    (they are names, not noise) so nothing inside them opens a comment. A `#` annotation runs to
    the end of its line, as Malloy reads it.
    """
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        two = text[i:i + 2]
        if two in ("--", "//") or c == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            spans.append((i, end))
            i = end
            continue
        if two == "/*":
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            spans.append((i, end))
            i = end
            continue
        if c == "`":
            end = text.find("`", i + 1)
            if end < 0 or "\n" in text[i:end]:
                i += 1
                continue
            i = end + 1
            continue
        start = i
        # Malloy's prefixed strings (f'..', r'..'): one letter glued to the quote, not the end
        # of a longer name.
        if (c.isalpha() and i + 1 < n and text[i + 1] in "'\""
                and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            i += 1
            c = text[i]
        if c in "'\"":
            end = _string_end(text, i)
            if end is not None:
                spans.append((start, end))
                i = end
                continue
        i = start + 1
    return spans


def _string_end(text: str, i: int) -> int | None:
    """End (exclusive) of the string literal opening at text[i], or None when it never closes.

    A triple-quoted string may span lines and runs to the end of text when unclosed; a one-line
    string must close on its line, else the quote is just a character.
    """
    q = text[i]
    n = len(text)
    if text[i:i + 3] == q * 3:
        end = text.find(q * 3, i + 3)
        return n if end < 0 else end + 3
    j = i + 1
    while j < n:
        ch = text[j]
        if ch == "\\" and j + 1 < n and text[j + 1] != "\n":
            j += 2
            continue
        if ch == "\n":
            return None
        if ch == q:
            return j + 1
        j += 1
    return None


def blank_noise(text: str) -> str:
    """The text with comments and strings blanked to spaces: same length, newlines kept."""
    chars = list(text)
    for start, end in noise_spans(text):
        for k in range(start, end):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars)


# --------------------------------------------------------------------------------- entries

def classify_entry(entry: str) -> str | None:
    """The field path a must-not-use entry names, or None when the entry is prose.

    Prose: a connective (` as `, ` through `) or any text that is not one identifier or a dotted
    path. A connective objects to a USE of a field, not to the field, so the whole entry goes to
    the judge rather than vetoing its head.
    """
    text = entry.strip()
    if any(conn in text for conn in _CONNECTIVES):
        return None
    text = text.replace("`", "")
    m = _TRAILING_CALL_RE.match(text)
    if m:
        text = m.group("path")
    return text if _PATH_RE.match(text) else None


def _present(path: str, text: str) -> bool:
    """Whether `path` appears as a whole identifier path in (blanked, backtick-free) text.

    Nothing word-like may follow it; before it comes the start of text or a character that is
    neither a word character nor a dot, then optionally more `name.` segments: a longer join path
    to the same field counts, `x_products.retail_price` does not count for
    `products.retail_price`, and a dotted path never matches its bare leaf.
    """
    pattern = rf"(?<![\w.])(?:{_IDENT}\.)*{re.escape(path)}(?!\w)"
    return re.search(pattern, text) is not None


def check_must_not_use(query: str | None, entries: Iterable[str]) -> MustNotUseResult:
    """Sort must-not-use entries into hits, leaf hits, unchecked and absent for one query."""
    entries = list(entries)
    hits: list[str] = []
    leaf_hits: list[str] = []
    unchecked: list[str] = []
    absent: list[str] = []
    checked: list[str] = []
    leaves: dict[str, str] = {}
    if query is None or not query.strip():
        # No query: nothing can be proven present or absent, so everything is the judge's.
        unchecked = list(entries)
    else:
        # Positions no longer matter once blanked: close up `a . b` so it reads as `a.b`.
        text = _SPACED_DOT_RE.sub(".", blank_noise(query).replace("`", ""))
        for entry in entries:
            path = classify_entry(entry)
            if path is None:
                unchecked.append(entry)
                continue
            leaf = path.rsplit(".", 1)[-1]
            if _present(path, text):
                hits.append(entry)
            elif leaf != path and _present(leaf, text):
                leaf_hits.append(entry)
                leaves[entry] = leaf
            else:
                absent.append(entry)
                continue
            if path not in checked:
                checked.append(path)
    note = [f"- {e}" for e in unchecked]
    note += [f"- {e}: a bare `{leaves[e]}` appears in the query (under another qualifier or "
             f"none); decide whether it is this field" for e in leaf_hits]
    return MustNotUseResult(hits=hits, leaf_hits=leaf_hits, unchecked=unchecked, absent=absent,
                            checked=checked, judge_note="\n".join(note))


def render_text(result: MustNotUseResult) -> str:
    """A short human reading of a result."""
    head = (f"VETO: the query uses {', '.join(result.hits)}" if result.hits
            else "no must-not-use hit")
    lines = [head]
    for label, items in (("leaf hits", result.leaf_hits), ("unchecked", result.unchecked),
                         ("absent", result.absent)):
        if items:
            lines.append(f"  {label}: {', '.join(items)}")
    if result.judge_note:
        lines.append("  note for the judge:")
        lines.extend("    " + line for line in result.judge_note.splitlines())
    return "\n".join(lines)
