"""The must-not-use veto: does a submitted query use a forbidden field, in its text or inside a model definition it names?

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
   blanked like a line comment (a choice of the kit's): a field named in a doc tag is not a
   use, and a quote inside one (three quotes after `#`) must not open a string that hides the
   query after it. A block annotation (`#|` or `##|` ... a line whose `|#` or `|##` stands at the
   opener's column) is blanked whole, every line of it, as Malloy's lexer reads it.
3. Look for each path as a whole identifier path (a longer join path ending in it counts).
   Malloy's lexer skips whitespace and comments between tokens, so `books . list_price`,
   `books
  .list_price` and `books./* x */list_price` name `books.list_price`: blanks around a
   dot are closed up before matching. Identifiers are case-sensitive in Malloy (`LIST_PRICE` is
   not `list_price`; the query would not compile), so matching is too. A Malloy reserved word
   (`date`, `year`, `desc`, `count`, ...: RESERVED_WORDS) written without backticks is a keyword,
   never a name (Malloy makes a field of that name be quoted, `` `date` ``), so `x::date` or
   `order_by: n desc` uses no field called `date` or `desc`; backticked, it is the name.
4. When the model's definitions are given (`Definitions`, read by the caller from the compiled
   model), expand every named view, measure, dimension, filtered join, source filter and named
   query the query uses, transitively: `run: orders -> late_shipments`, where the view filters
   on `shipped_at`, uses `shipped_at` (reported as the path `late_shipments -> shipped_at`).
   Paths in definitions are from the query's source (`revenue -> orders.counts_as_sale ->
   orders.status`), so they match entries as the query text does: a longer join path ending in
   the entry is a hit, a bare leaf under another qualifier a leaf hit for the judge. The query's
   source is the name after `run:` (or `query: q is`), through `source: a is b` aliases in the
   query itself; a named query brings its own source and fields. Names the query defines itself
   (`x is ...`) are its own, not the model's; `join_one: o is orders` makes `o.x` the model's
   `orders` field `x`. A join's ON keys are plumbing, not a use. An entry the set allows inside a
   named definition (`mustNotUseAllowedIn`) reached only through that definition is `allowed`,
   not a veto; a use anywhere else still is.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_PATH_RE = re.compile(rf"^{_IDENT}(?:\.{_IDENT})*$")
# `products.retail_price.avg()` names `products.retail_price`: the aggregate call goes.
_TRAILING_CALL_RE = re.compile(rf"^(?P<path>.+)\.{_IDENT}\(\s*\)$")
_CONNECTIVES = (" as ", " through ")
# Whitespace (and blanked comments) on either side of a path dot after a name: Malloy ignores it.
_SPACED_DOT_RE = re.compile(r"(?<=\w)\s*\.\s*")
# The words the pinned Malloy lexer reads as keywords, not identifiers (case does not matter, and
# a timeframe's plural is the same keyword). A model field with such a name must be written in
# backticks, in the model and in a query; unquoted in a query it is the keyword (a cast `::date`,
# a timeframe `for 1 year`, `desc`, an aggregate `count()`). A test reads the pinned lexer.
RESERVED_WORDS = frozenset({
    "all", "and", "as", "asc", "avg", "boolean", "by", "case", "cast", "compose", "count",
    "date", "day", "days", "desc", "distinct", "else", "end", "exclude", "export", "extend",
    "false", "filter", "for", "from", "full", "has", "hour", "hours", "import", "in",
    "include", "inner", "internal", "is", "json", "left", "like", "max", "min", "minute",
    "minutes", "month", "months", "not", "now", "null", "number", "on", "or", "pick",
    "private", "public", "quarter", "quarters", "right", "second", "seconds", "source", "sql",
    "string", "sum", "table", "then", "this", "timestamp", "timestamptz", "to", "true",
    "virtual", "week", "weeks", "when", "with", "year", "years",
})
_WORD_OR_QUOTED_RE = re.compile(rf"`[^`\n]*`|(?<!\w){_IDENT}")
_NOT_A_NAME = "\x00"  # stands in for a keyword's letters: neither a word, a dot nor a blank


@dataclass(frozen=True)
class MustNotUseResult:
    """Which forbidden fields a submitted query uses (reference/must-not-use.md)."""

    hits: list[str]       # entries as written whose path the query uses: each vetoes the answer
    leaf_hits: list[str]  # dotted entries whose bare leaf appears elsewhere: a suspicion, no veto
    unchecked: list[str]  # prose entries (or every entry when there is no query): the judge's
    absent: list[str]     # decidable entries proven absent: nobody needs to look at them
    checked: list[str]    # the normalised paths tested for hits and leaf hits
    judge_note: str       # one line per unchecked entry and per leaf hit; "" when none
    # entry -> how the query reaches it through the model's definitions (`a -> b -> field`)
    paths: dict[str, str] = field(default_factory=dict)
    allowed: list[str] = field(default_factory=list)  # reached only inside a definition allowed
    expansion: str | None = None  # "expanded", "not possible: <why>"; None: no model was given
    # entry -> the one output column (a model measure the query's view or named query outputs)
    # it is reached through, and only through: in `hits`, but it vetoes only when that column is
    # one the answer reports (`vetoes`); otherwise it is a note for the judge
    through_outputs: dict[str, str] = field(default_factory=dict)

    def vetoes(self, reported: Iterable[str] | None) -> list[str]:
        """The hits that veto, given the output columns the answer reports (None or empty: every
        output column counts): a hit reached only through an unreported output column is not
        one (reference/must-not-use.md, "Lineage to what the answer reported")."""
        shown = set(reported or ())
        return [h for h in self.hits
                if h not in self.through_outputs or not shown or self.through_outputs[h] in shown]

    def lineage_notes(self, reported: Iterable[str] | None) -> list[str]:
        """The hits `vetoes` lets through as notes: `entry (through output column c)`."""
        vetoing = set(self.vetoes(reported))
        return [f"{h} (through output column {self.through_outputs[h]})" for h in self.hits
                if h not in vetoing]

    @property
    def exit_code(self) -> int:
        return EXIT_FINDING if self.hits else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """The six keys, plus `paths`, `allowed` and `expansion` when a model was given."""
        out: dict[str, Any] = {"hits": self.hits, "leaf_hits": self.leaf_hits,
                               "unchecked": self.unchecked, "absent": self.absent,
                               "checked": self.checked, "judge_note": self.judge_note}
        if self.expansion is not None:
            out.update(paths=self.paths, allowed=self.allowed, expansion=self.expansion,
                       through_outputs=self.through_outputs)
        return out


# ----------------------------------------------------------------------------------- noise

def noise_spans(text: str) -> list[tuple[int, int]]:
    """The [start, end) spans of comments and string literals, found in one left-to-right pass.

    Whichever token opens first wins: a `--` inside `'2024-01--2024-06'` is part of the string,
    a quote inside a `-- comment` is part of the comment. Backtick identifiers are skipped whole
    (they are names, not noise) so nothing inside them opens a comment. A `#` annotation runs to
    the end of its line, a block annotation to its closing line, as Malloy reads them.
    """
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        two = text[i:i + 2]
        if c == "#" and (two == "#|" or text[i:i + 3] == "##|"):
            end = _block_annotation_end(text, i)
            spans.append((i, end))
            i = end
            continue
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
            close = _string_end(text, i)
            if close is not None:
                spans.append((start, close))
                i = close
                continue
        i = start + 1
    return spans


def _block_annotation_end(text: str, i: int) -> int:
    """End (exclusive) of the block annotation opening at text[i] (`#|`, or `##|` for a doc
    block): the end of the first later line whose closer (`|#`, not `|##`; or `|##`) stands at
    the opener's column with only blanks before it; the end of text when none does."""
    closer = "|##" if text.startswith("##|", i) else "|#"
    col = i - (text.rfind("\n", 0, i) + 1)
    line = text.find("\n", i)
    while line >= 0:
        start = line + 1
        line = text.find("\n", start)
        head = text[start:start + col]
        if len(head) == col and not head.strip(" \t") and text.startswith(closer, start + col) \
                and not (closer == "|#" and text.startswith("#", start + col + 2)):
            return len(text) if line < 0 else line
    return len(text)


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


def blank_keywords(text: str) -> str:
    """The (noise-blanked) text with every reserved word written without backticks blanked to
    a character that is no part of a name: same length. A backticked word is kept (a name)."""
    def one(m: re.Match[str]) -> str:
        word = m.group(0)
        if word.startswith("`") or word.lower() not in RESERVED_WORDS:
            return word
        return _NOT_A_NAME * len(word)
    return _WORD_OR_QUOTED_RE.sub(one, text)


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


def check_must_not_use(query: str | None, entries: Iterable[str], *,
                       definitions: Definitions | str | None = None,
                       allowed_in: Mapping[str, Sequence[str]] | None = None,
                       outputs: Sequence[str] | None = None) -> MustNotUseResult:
    """Sort must-not-use entries into hits, leaf hits, unchecked and absent for one query.

    `definitions`: the model's (step 4), or why they could not be read (the expansion is then
    "not possible: ..."), or None when no model was given. `allowed_in`: entry as written ->
    names of definitions inside which it is allowed. `outputs`: the columns the query returned
    (its re-executed rows); a hit reached through the model only by way of one output column
    that is a model measure is marked in `through_outputs` (whether it vetoes depends on what
    the answer reports: `MustNotUseResult.vetoes`).
    """
    entries = list(entries)
    hits: list[str] = []
    leaf_hits: list[str] = []
    unchecked: list[str] = []
    absent: list[str] = []
    checked: list[str] = []
    leaves: dict[str, str] = {}
    paths: dict[str, str] = {}
    allowed: list[str] = []
    through: dict[str, str] = {}
    expansion: str | None = None
    if isinstance(definitions, str):
        expansion = f"not possible: {definitions}"
    if query is None or not query.strip():
        # No query: nothing can be proven present or absent, so everything is the judge's.
        unchecked = list(entries)
    else:
        # Positions no longer matter once blanked: close up `a . b` so it reads as `a.b`. The
        # query's structure (run:, source: a is b, x is ...) is read from `text`; what may name
        # a field (a path, a token to expand) from `names`, where keywords are no names.
        # A backtick becomes a blank, not nothing: `a`.`b` still closes up to a.b, and `x`select:
        # stays two tokens, as Malloy lexes them.
        quiet = blank_noise(query)
        text = _SPACED_DOT_RE.sub(".", quiet.replace("`", " "))
        names = _SPACED_DOT_RE.sub(".", blank_keywords(quiet).replace("`", " "))
        reach: _Reach | None = None
        if isinstance(definitions, Definitions):
            reach = _reach(text, names, definitions)
            expansion = reach.status
        for entry in entries:
            path = classify_entry(entry)
            if path is None:
                unchecked.append(entry)
                continue
            leaf = path.rsplit(".", 1)[-1]
            inside = _through_definitions(reach, path, (allowed_in or {}).get(entry, ()))
            if _present(path, names):
                hits.append(entry)
            elif inside.hit is not None:
                hits.append(entry)
                paths[entry] = inside.hit
                column = _only_through_output(reach, path, (allowed_in or {}).get(entry, ()),
                                              outputs or ())
                if column is not None:
                    through[entry] = column
            elif inside.allowed:
                allowed.append(entry)
                continue
            elif leaf != path and _present(leaf, names):
                leaf_hits.append(entry)
                leaves[entry] = leaf
            elif inside.leaf is not None:
                leaf_hits.append(entry)
                leaves[entry] = leaf
                paths[entry] = inside.leaf
            else:
                absent.append(entry)
                continue
            if path not in checked:
                checked.append(path)
    note = [f"- {e}" for e in unchecked]
    note += [(f"- {e}: a bare `{leaves[e]}` is used inside the model's definitions ({paths[e]}); "
              f"decide whether it is this field") if e in paths else
             (f"- {e}: a bare `{leaves[e]}` appears in the query (under another qualifier or "
              f"none); decide whether it is this field") for e in leaf_hits]
    note += [f"- {e}: reached only through the output column `{c}` ({paths[e]}); it decides "
             f"nothing unless `{c}` is the figure the answer reports" for e, c in through.items()]
    return MustNotUseResult(hits=hits, leaf_hits=leaf_hits, unchecked=unchecked, absent=absent,
                            checked=checked, judge_note="\n".join(note), paths=paths,
                            allowed=allowed, expansion=expansion, through_outputs=through)


# ------------------------------------------------------------------- the model's definitions

@dataclass(frozen=True)
class Definitions:
    """What each named field of a model uses, read by the caller from the compiled model
    (`MalloyRuntime.definitions()`): per source, field path -> the field paths its definition
    uses, all from that source ('' holds the source's own filters, a join's path its `where:`);
    per named query, its source and the paths its first stage uses."""

    sources: Mapping[str, Mapping[str, tuple[str, ...]]]
    queries: Mapping[str, tuple[str | None, tuple[str, ...]]] = field(default_factory=dict)
    # per source, the names of its measures (from the compiled surface): an output column that
    # is a measure is an aggregate the query reports, never a grouping that shapes its rows
    measures: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_runner(cls, raw: Mapping[str, Any], model_path: str | None = None,
                    surface: Mapping[str, Any] | None = None) -> Definitions:
        """From the runner's answer: the model at `model_path` when the package has it, else
        every model's definitions merged; `surface` (the runner's describe) gives the measures."""
        models = [m for m in raw.get("models") or [] if isinstance(m, dict)]
        chosen = [m for m in models if m.get("path") == model_path] or models
        sources: dict[str, dict[str, tuple[str, ...]]] = {}
        queries: dict[str, tuple[str | None, tuple[str, ...]]] = {}
        for model in chosen:
            for name, fields in (model.get("sources") or {}).items():
                merged = sources.setdefault(name, {})
                for key, refs in (fields or {}).items():
                    merged[key] = tuple(dict.fromkeys([*merged.get(key, ()), *map(str, refs)]))
            for name, q in (model.get("queries") or {}).items():
                queries[name] = (q.get("source"), tuple(map(str, q.get("refs") or ())))
        measures: dict[str, set[str]] = {}
        shown = [m for m in (surface or {}).get("models") or [] if isinstance(m, dict)]
        for model in [m for m in shown if m.get("path") == model_path] or shown:
            for src in model.get("sources") or []:
                if isinstance(src, dict) and isinstance(src.get("name"), str):
                    measures.setdefault(src["name"], set()).update(
                        str(x.get("name")) for x in src.get("measures") or []
                        if isinstance(x, dict) and x.get("name"))
        return cls(sources=sources, queries=queries,
                   measures={k: frozenset(v) for k, v in measures.items()})

    def names(self) -> set[str]:
        """Every name a definition can be called by: `field`, `join.field`, `source.field`,
        each named query and each source (for its filters)."""
        out = set(self.sources) | set(self.queries)
        for source, fields in self.sources.items():
            for key in fields:
                if key:
                    segs = key.split(".")
                    out.update(".".join(segs[i:]) for i in range(len(segs)))
                    out.add(f"{source}.{key}")
        return out


_RUN_RE = re.compile(rf"\brun\s*:\s*({_IDENT})")
_QUERY_IS_RE = re.compile(rf"\bquery\s*:\s*{_IDENT}\s+is\s+({_IDENT})")
_SOURCE_IS_RE = re.compile(rf"\bsource\s*:\s*({_IDENT})\s+is\s+({_IDENT})")
_JOIN_IS_RE = re.compile(rf"\bjoin_(?:one|many|cross)\s*:\s*({_IDENT})(?:\s+is\s+({_IDENT}))?")
_DEFINES_RE = re.compile(rf"({_IDENT})\s+is\b")
_TOKEN_RE = re.compile(rf"(?<![\w.]){_IDENT}(?:\.{_IDENT})*")
_HEAD_RE = re.compile(rf"^\s*({_IDENT})\s*(?:->|\bextend\b)")
_CALL_RE = re.compile(r"\s*\(")  # after a name: it is a function called, not a field


@dataclass(frozen=True)
class _Node:
    """A definition reached: in `source`, the field path `key`, seen from the query as
    `prefix + key` (a local join alias in front); `key` '' is the source's own filters; a
    named query is a node of its own (`query` true, `key` its name)."""

    source: str
    prefix: str
    key: str
    query: bool = False

    @property
    def label(self) -> str:
        if self.query:
            return self.key
        return self.prefix + self.key if self.key else self.source

    def refs(self, defs: Definitions) -> tuple[str, ...]:
        if self.query:
            return defs.queries[self.key][1]
        return (defs.sources.get(self.source) or {}).get(self.key, ())


@dataclass(frozen=True)
class _Reach:
    """Every field path the query reaches through definitions, with the chain that got there."""

    status: str
    seeds: tuple[tuple[_Node, tuple[str, ...]], ...] = ()
    definitions: Definitions | None = None
    chains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _reach(text: str, names: str, defs: Definitions) -> _Reach:
    """Expand every definition the (blanked) query text uses, breadth first: its structure read
    from `text`, the names it uses from `names` (the same text with keywords blanked)."""
    aliases = {a: b for a, b in _SOURCE_IS_RE.findall(text)}
    joins = {a: (b or a) for a, b in _JOIN_IS_RE.findall(text)}
    own = set(_DEFINES_RE.findall(text)) - set(joins)
    roots = _RUN_RE.findall(text) + _QUERY_IS_RE.findall(text)
    if not roots:
        head = _HEAD_RE.match(text)
        roots = [head.group(1)] if head else []
    seeds: list[tuple[_Node, tuple[str, ...]]] = []
    missing: list[str] = []
    sources: list[str] = []
    for root in roots:
        for _ in range(8):
            if root not in aliases:
                break
            root = aliases[root]
        if root in defs.queries:
            source = defs.queries[root][0]
            if source is not None and source in defs.sources:
                sources.append(source)
                seeds.append((_Node(source, "", root, query=True), ()))
                continue
        if root in defs.sources:
            sources.append(root)
        else:
            missing.append(root)
    if not sources:
        why = (f"the query's source {', '.join(dict.fromkeys(missing))} is not in the model"
               if missing else "no `run:` names the query's source")
        return _Reach(status=f"not possible: {why}")
    for source in dict.fromkeys(sources):
        if "" in defs.sources[source]:
            seeds.append((_Node(source, "", ""), ()))
        for m in _TOKEN_RE.finditer(names):
            segs = m.group(0).split(".")
            if len(segs) == 1 and (segs[0] in own or _CALL_RE.match(names, m.end())):
                continue  # a name the query defines, or a function call
            if segs[0] in joins and joins[segs[0]] in defs.sources and len(segs) > 1:
                target = joins[segs[0]]
                seeds += [(n, ()) for n in _nodes(".".join(segs[1:]), target, segs[0] + ".", defs)]
            else:
                seeds += [(n, ()) for n in _nodes(m.group(0), source, "", defs)]
    return _Reach(status="expanded", seeds=tuple(seeds), definitions=defs,
                  chains=_expand(seeds, defs, frozenset()))


def _nodes(path: str, source: str, prefix: str, defs: Definitions) -> list[_Node]:
    """The definitions a path runs through in a source: the field itself (its longest prefix
    that is defined) and every filtered join on the way."""
    fields = defs.sources.get(source) or {}
    segs = path.split(".")
    return [_Node(source, prefix, key) for k in range(len(segs), 0, -1)
            if (key := ".".join(segs[:k])) in fields]


def _expand(seeds: Sequence[tuple[_Node, tuple[str, ...]]], defs: Definitions,
            stops: frozenset[str], drop: str | None = None) -> dict[str, tuple[str, ...]]:
    """Field path -> the chain of definitions (labels) that first reaches it, breadth first;
    definitions named in `stops` are not opened; `drop`: an output column the query's own view
    or named query outputs, left out of what that view or query uses."""
    chains: dict[str, tuple[str, ...]] = {}
    seen: set[_Node] = set()
    queue: deque[tuple[_Node, tuple[str, ...]]] = deque()
    for node, via in seeds:
        if node.key and not via and not node.query:
            chains.setdefault(node.label, ())  # named in the query itself
        queue.append((node, via))
    while queue:
        node, via = queue.popleft()
        if node in seen or _named_in(node, stops):
            continue
        seen.add(node)
        chain = (*via, node.label)
        outputs_of_view = drop is not None and not via and not node.prefix and (
            node.query or (node.key and node.key not in defs.measures.get(node.source, ())))
        for ref in node.refs(defs):
            if outputs_of_view and ref == drop:
                continue  # the unreported output column, as the query's view outputs it
            chains.setdefault(node.prefix + ref, chain)
            for nxt in _nodes(ref, node.source, node.prefix, defs):
                queue.append((nxt, chain))
    return chains


def _named_in(node: _Node, names: Iterable[str]) -> bool:
    """Whether a definition is one of `names` (`field`, `join.field` or `source.field`)."""
    if node.query:
        return node.key in [name.strip() for name in names]
    full = [node.label.split("."), f"{node.source}.{node.key}".split(".")] if node.key else \
        [[node.source]]
    for name in names:
        want = name.strip().split(".")
        if any(segs[-len(want):] == want for segs in full):
            return True
    return False


def _only_through_output(reach: _Reach | None, path: str, allowed: Sequence[str],
                         outputs: Sequence[str]) -> str | None:
    """The one output column through which alone the model reaches `path`: a column named as a
    measure of the query's source, output by a view or named query the query names (the first
    hop of the chain). Leaving that column out of what the view uses, the path is no longer
    reached. None when there is no such column (a filter, a grouping, a join's where, the
    query's own text, or two columns reach it): then the hit vetoes whatever is reported."""
    if reach is None or reach.definitions is None or not outputs:
        return None
    defs = reach.definitions
    want = path.split(".")
    roots = {n.source for n, _via in reach.seeds}
    measures = set().union(*(defs.measures.get(src, frozenset()) for src in roots))
    found = [c for c in dict.fromkeys(outputs) if c in measures
             and _first(_expand(reach.seeds, defs, frozenset(allowed), drop=c),
                        lambda segs: segs[-len(want):] == want) is None]
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class _Inside:
    hit: str | None = None    # the path of a veto hit through definitions
    leaf: str | None = None   # the path of a leaf hit through definitions
    allowed: bool = False     # reached, but only inside an allowed definition


def _through_definitions(reach: _Reach | None, path: str, allowed: Sequence[str]) -> _Inside:
    """How an entry's path is reached through the model's definitions, if at all."""
    if reach is None or reach.definitions is None:
        return _Inside()
    want = path.split(".")
    hit = _first(reach.chains, lambda segs: segs[-len(want):] == want)
    if hit is not None and allowed:
        strict = _expand(reach.seeds, reach.definitions, frozenset(allowed))
        hit2 = _first(strict, lambda segs: segs[-len(want):] == want)
        return _Inside(hit=hit2) if hit2 is not None else _Inside(allowed=True)
    if hit is not None:
        return _Inside(hit=hit)
    if len(want) > 1:
        leaf = _first(reach.chains, lambda segs: segs[-1] == want[-1])
        if leaf is not None:
            return _Inside(leaf=leaf)
    return _Inside()


def _first(chains: Mapping[str, tuple[str, ...]], match: Any) -> str | None:
    """The display path (`a -> b -> field`) of the first reached path that matches."""
    for ref, chain in chains.items():
        if chain and match(ref.split(".")):
            return " -> ".join((*chain, ref))
    return None


def render_text(result: MustNotUseResult) -> str:
    """A short human reading of a result."""
    head = (f"VETO: the query uses {', '.join(result.hits)}" if result.hits
            else "no must-not-use hit")
    lines = [head]
    for label, items in (("leaf hits", result.leaf_hits), ("unchecked", result.unchecked),
                         ("allowed inside their definition", result.allowed),
                         ("absent", result.absent)):
        if items:
            lines.append(f"  {label}: {', '.join(items)}")
    for entry, path in result.paths.items():
        lines.append(f"  {entry}: through the model: {path}")
    lines.append("  expansion through the model's definitions: "
                 + (result.expansion or "not possible (no model given)"))
    if result.judge_note:
        lines.append("  note for the judge:")
        lines.extend("    " + line for line in result.judge_note.splitlines())
    return "\n".join(lines)
