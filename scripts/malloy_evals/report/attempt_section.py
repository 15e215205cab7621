"""One attempt's section of the run page: question, golden and rubric beside the answer and the
rows the kit re-executed, then what the judge said, retrieval, contamination and the tool calls.

Sections are drawn at a level of detail (`Caps`): the first level shows everything a person
usually needs; on a page that would grow past its budget (reference/report.md) the largest
sections are drawn at a later level, which cuts long texts sooner and lists fewer rows and calls.
Every cut says how much it left out and links the file that has all of it (the transcript, the
prediction CSV, the ledger). The levels are chosen before anything is drawn, from each section's
size at each level as `section_size` reckons it from the evidence, so each section is drawn once.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from malloy_evals.core.vocab import is_contaminated
from malloy_evals.core.words import attempt_label
from malloy_evals.report import details as d
from malloy_evals.report.figures import CaseRow
from malloy_evals.report.html import (
    Html,
    anchor_id,
    case_anchor,
    el,
    esc,
    href_to,
    join,
    link,
    rows_table,
    shown,
)


@dataclass(frozen=True)
class Caps:
    """How much of an attempt a section shows."""

    answer: int       # characters of the answer text
    query: int        # characters of each query
    text: int         # characters of a why, an error, a rubric
    rows: int         # re-executed and golden rows
    entities: int     # entity ids listed per get_context call
    calls: int        # tool calls listed (the first two thirds and the last third)


# The gathering in `details` keeps no more than the first level shows.
LEVELS = (
    Caps(answer=d.ANSWER_CHARS, query=d.QUERY_CHARS, text=d.TEXT_CHARS, rows=d.ROWS_SHOWN,
         entities=d.ENTITIES_SHOWN, calls=30),
    # Lists go first (the files linked hold them all), then long texts.
    Caps(answer=d.ANSWER_CHARS, query=1500, text=1000, rows=5, entities=3, calls=10),
    Caps(answer=2500, query=800, text=600, rows=3, entities=0, calls=6),
    Caps(answer=1200, query=500, text=400, rows=3, entities=0, calls=4),
    Caps(answer=600, query=400, text=250, rows=2, entities=0, calls=3),
)


def verdict_word(row: CaseRow | None) -> str:
    """The one word a verdict is filtered and coloured by: a verdict, `null`, `stale` or
    `unscored`."""
    if row is None:
        return "unscored"
    if row.stale:
        return "stale"
    if row.verdict:
        return row.verdict
    return "null" if row.scored else "unscored"


def verdict_text(row: CaseRow | None) -> str:
    """A verdict as the case table and the section heading show it: `null (contaminated)`."""
    if row is None or (not row.verdict and not row.scored):
        return "unscored (awaiting host reply)" if row is not None and row.awaiting_host \
            else "unscored"
    if row.stale:
        return f"stale (was {row.verdict or 'null'}; judged against an older golden)"
    if row.verdict and row.settled_by:
        return f"{row.verdict} (settled by {d.redacted(row.settled_by)})"
    if row.verdict:
        return row.verdict
    # A null reason can quote an error message (`environment_failure: ...`), so it is redacted.
    return f"null ({d.redacted(row.reason)})" if row.reason else "null"


def _within(text: d.Text | None, limit: int) -> d.Text | None:
    if text is None or len(text.text) <= limit:
        return text
    return d.Text(text.text[:limit], text.cut + len(text.text) - limit)


def pre(text: d.Text | None, limit: int, *, none: str = "null", class_: str | None = None,
        whole: str | None = None) -> Html:
    """A block of text kept as written (queries, answers), cut at `limit` with the count said;
    `whole` names where the uncut text is (`the transcript`)."""
    text = _within(text, limit)
    if text is None:
        return el("p", none, class_="note")
    more = (f"… {text.cut} more characters not shown" + (f" ({whole} has them)" if whole else "")
            if text.cut else None)
    return join(el("pre", text.text, class_=class_), el("p", more, class_="note") if more else None)


def inline(text: d.Text | None, limit: int = d.TEXT_CHARS, *, none: str = "null") -> Html:
    """Text inside a sentence, cut at `limit` with the count said."""
    text = _within(text, limit)
    if text is None:
        return esc(none)
    return join(text.text, f"… ({text.cut} more characters)" if text.cut else None)


def listing(items: Sequence[str], none: str = "none") -> Html:
    if not items:
        return esc(none)
    return el("ul", [el("li", el("code", i)) for i in items])


def facts(*items: tuple[str, Any]) -> Html:
    """A short line of facts (`submitted yes · turns 3 · seconds 12.5`), None ones left out."""
    out: list[Any] = []
    for key, value in ((k, v) for k, v in items if v is not None):
        out.append(join(" · " if out else None, el("i", key), " ", value))
    return el("p", out, class_="facts")


def _golden(g: d.Golden | None, caps: Caps) -> Html:
    if g is None:
        return el("p", "No golden (or no set to read it from).", class_="note")
    parts: list[Any] = [facts(("kind", shown(g.kind)), ("status", shown(g.status)),
                              ("revision", shown(g.revision)))]
    if g.error:
        parts.append(el("p", g.error, class_="err"))
    if g.rows is not None:
        parts.append(rows_table(g.rows.rows[:caps.rows], g.rows.total, caption="golden rows"))
    elif g.value is not None:
        parts.append(join(el("h5", "value"), pre(g.value, caps.text)))
    if g.canonical_query is not None:
        parts.append(join(el("h5", "canonical query (on the truth package)"),
                          pre(g.canonical_query, caps.query)))
    parts.append(join(el("h5", "rubric"), pre(g.rubric, caps.text * 2, none="no rubric")))
    if g.must_state:
        parts.append(join(el("h5", "must state"), listing(g.must_state)))
    if g.must_not_use:
        parts.append(join(el("h5", "must not use"), listing(g.must_not_use)))
    return join(*parts)


def _settled(row: CaseRow | None) -> Html | None:
    """A person's settled verdict (review.py): who, when and why, above what the judge said."""
    if row is None or not row.settled_by:
        return None
    return el("div", el("h4", "Settled by a person"),
              facts(("verdict", el("span", shown(row.verdict), class_=f"v-{row.verdict or 'null'}")),
                    ("by", d.redacted(row.settled_by)), ("when", row.settled_at),
                    ("the judge said", shown(row.judge_verdict))),
              el("h5", "why"), el("p", d.redacted(row.why or "")), class_="settled")


def _judge(j: d.Judged | None, caps: Caps) -> Html:
    if j is None:
        return el("p", "Not scored yet.", class_="note")
    # column_pairing maps each golden column to the answer's column (reference/judge.md).
    pairing = (join(*[join("; " if i else None, el("code", k), " → ",
                           el("code", v) if v is not None else "(unpaired)")
                      for i, (k, v) in enumerate(j.column_pairing.items())])
               if j.column_pairing else None)
    return join(
        facts(("verdict", el("span", shown(j.verdict), class_=f"v-{j.verdict or 'null'}")),
              ("null reason", j.reason), ("confidence", shown(j.confidence)),
              ("the judge's own verdict", j.judge_verdict), ("gold status", shown(j.gold_status)),
              ("gold note", inline(j.gold_note, caps.text) if j.gold_note else None),
              ("judge model", shown(j.judge_model)),
              ("must-not-use hits", ", ".join(j.must_not_use_hits) or "none"),
              ("leaf suspicions", ", ".join(j.leaf_hits) if j.leaf_hits else None),
              ("request and reply", link(j.judge_path, href_to(j.judge_path))
               if j.judge_path else None)),
        el("h5", "why"), pre(j.why, caps.text, whole="the judge's reply"),
        facts(("column pairing (golden → answer)", pairing)) if pairing else None)


def _listed(calls: Sequence[d.ToolCall], n: int) -> list[d.ToolCall]:
    """The calls a section lists: all of them, or the first two thirds of `n` and the last third."""
    chosen = list(calls)
    if len(chosen) > n:
        head = n * 2 // 3
        chosen = chosen[:head] + chosen[-(n - head):]
    return chosen


def _calls(a: d.AttemptDetail, caps: Caps) -> Html:
    if not a.calls:
        return el("p", "No get_context or execute_query call recorded.", class_="note")
    chosen = _listed(a.calls, caps.calls)
    final = a.final_query.text if a.final_query else None
    items = []
    for c in chosen:
        error = el("p", "error: ", inline(c.error, caps.text), class_="err") if c.error else None
        if c.tool == "get_context":
            returned = c.returned[:caps.entities]
            came = (f"{c.returned_total} came back" if c.returned_total is not None
                    else "nothing recorded of what came back")
            more = (f" (first {len(returned)})" if returned and c.returned_total is not None
                    and len(returned) < c.returned_total else "")
            items.append(el("li", el("b", "get_context"), " asked ",
                            el("code", "; ".join(c.targets)) if c.targets else "nothing",
                            f"; {came}{more}", ": " if returned else None,
                            el("code", ", ".join(returned)) if returned else None, error,
                            value=c.index + 1))
        else:
            # The final query is shown once, above; a call that ran it says so.
            same = c.query is not None and final is not None and c.query.text == final
            named = (join(" the named ", el("code", c.named))
                     if c.named and c.query is None else None)
            items.append(el("li", el("b", c.tool), " (the final query)" if same else None, named,
                            None if same or named else pre(c.query, caps.query, none="no query"),
                            error, value=c.index + 1))
    note = (el("p", f"{a.calls_total} calls; {len(chosen)} listed (the first and the last); the "
                    "ledger has them all.", class_="note") if a.calls_total > len(chosen) else None)
    return join(note, el("ol", items, class_="calls"))


def _answer(a: d.AttemptDetail, caps: Caps) -> Html:
    transcript = "the transcript" if a.transcript_path else None
    rows = a.prediction
    return join(
        el("h4", "Answer"),
        facts(("submitted", shown(a.submitted)), ("final query", a.final_query_source),
              ("truncated", "yes" if a.truncated else None), ("run error", a.run_error),
              ("turns", shown(a.num_turns, none="unknown")),
              ("seconds", shown(a.wall_seconds, none="unknown")),
              ("transcript", link("open", href_to(a.transcript_path))
               if a.transcript_path else None)),
        pre(a.answer, caps.answer, none="no answer text", class_="answer", whole=transcript),
        el("h5", "final query"),
        pre(a.final_query, caps.query, none="no final query", class_="query", whole=transcript),
        el("h4", "Re-executed rows"),
        rows_table(rows.rows[:caps.rows], rows.total, caption="rows the kit re-executed",
                   more_href=href_to(rows.path) if rows.path else None)
        if rows is not None else el("p", "No re-executed rows.", class_="note"),
        el("p", "re-execution error: ", inline(a.prediction_error, caps.text), class_="err")
        if a.prediction_error else None)


def _checks(a: d.AttemptDetail, caps: Caps) -> Html:
    r = a.retrieved
    retrieval = (facts(("recall", shown(r.recall)), ("precision", shown(r.precision)),
                       ("coverage", shown(r.coverage)), ("missing", ", ".join(r.missing) or "none"),
                       ("where to fix", r.where_to_fix),
                       ("why", inline(r.why, caps.text) if r.why else None))
                 if r else el("p", "No retrieval row.", class_="note"))
    contaminated = (el("p", "contaminated: " + shown(a.contaminated),
                       class_="err" if is_contaminated(a.contaminated) else None)
                    if a.contaminated is not None else el("p", "not checked", class_="note"))
    return el("div", el("div", el("h4", "Retrieval"), retrieval),
              el("div", el("h4", "Contamination"), contaminated,
                 listing(a.contamination_reasons) if a.contamination_reasons else None),
              class_="pair")


def attempt_section(a: d.AttemptDetail, row: CaseRow | None, *, first_of_case: bool,
                    caps: Caps = LEVELS[0], issues_page: str = "") -> Html:
    """The `<details>` section of one attempt, its id `anchor_id(qid, sample)`. `issues_page` is
    the page holding the diagnosis table its issue links point into ("": the same page)."""
    label = attempt_label(a.qid, a.sample)
    confidence = (f", confidence {row.confidence}" if row is not None
                  and row.confidence is not None else "")
    # The question and golden are the case's: shown in full in its first attempt and referred to
    # from the other samples (a run of k samples would otherwise repeat them k times).
    if first_of_case:
        question = el("p", inline(a.question, caps.text * 2, none="(not in the set given)"),
                      class_="question")
        golden = _golden(a.golden, caps)
    else:
        question, golden = None, el("p", link("question, golden and rubric: as in the case's "
                                              "first attempt", "#" + case_anchor(a.qid)),
                                    class_="note")
    body: list[Any] = [
        el("h4", "Question") if question else None, question,
        # Golden and answer side by side (stacked on a narrow screen): what the judge compared.
        el("div", el("div", el("h4", "Golden and rubric"), golden), el("div", _answer(a, caps)),
           class_="pair"),
        _settled(row),
        el("h4", "Judge"), _judge(a.judged, caps),
        _checks(a, caps),
        el("h4", f"Tool calls ({a.calls_total})"), _calls(a, caps),
    ]
    if a.issues:
        body.append(el("p", "Diagnosed in: ", join(*[join(link(i, f"{issues_page}#issue-{i}"), " ")
                                                     for i in a.issues])))
    word = verdict_word(row)
    return el("details", el("summary", el("h3", label, " · ",
                                          el("span", verdict_text(row), class_=f"v-{word}"),
                                          confidence)),
              # The comparison page links to a case, not an attempt: its first attempt holds the
              # case's anchor, inside the section so that following the link opens it.
              el("div", body, class_="attempt-body",
                 id=case_anchor(a.qid) if first_of_case else None),
              id=anchor_id(a.qid, a.sample), class_="attempt", data_verdict=word)


# What `section_size` adds for the markup around the evidence: the section's own frame, headings
# and fact lines, each listed call, each table row and cell. Set from drawn sections of generated
# runs (benchmarks/bench_report.py), so the reckoned size of a page lands near its drawn size.
SECTION_FRAME = 1900
CALL_FRAME = 90
ROW_FRAME = 10
CELL_FRAME = 10


def _kept(text: d.Text | None, limit: int) -> int:
    return 0 if text is None else min(len(text.text), limit)


def _rows_size(rows: d.Rows | None, limit: int) -> int:
    if rows is None:
        return 0
    shown_rows = rows.rows[:limit]
    return sum(ROW_FRAME + sum(CELL_FRAME + min(len(shown(v)), 300) for v in r.values())
               for r in shown_rows)


def section_size(a: d.AttemptDetail, *, first_of_case: bool, caps: Caps) -> int:
    """About how many bytes `attempt_section` draws for `a` at `caps`, reckoned from the evidence
    it would show (texts within their caps, rows and calls listed) without drawing it."""
    size = SECTION_FRAME + _kept(a.answer, caps.answer) + _kept(a.final_query, caps.query)
    size += _rows_size(a.prediction, caps.rows) + _kept(a.prediction_error, caps.text)
    if first_of_case:
        size += _kept(a.question, caps.text * 2)
        g = a.golden
        if g is not None:
            size += (_rows_size(g.rows, caps.rows) + _kept(g.value, caps.text)
                     + _kept(g.canonical_query, caps.query) + _kept(g.rubric, caps.text * 2)
                     + sum(len(x) + ROW_FRAME for x in (*g.must_state, *g.must_not_use)))
    j = a.judged
    if j is not None:
        size += _kept(j.why, caps.text) + _kept(j.gold_note, caps.text)
        size += sum(len(k) + len(v or "") + CELL_FRAME
                    for k, v in (j.column_pairing or {}).items())
    r = a.retrieved
    if r is not None:
        size += _kept(r.why, caps.text) + sum(len(m) + 2 for m in r.missing)
    size += sum(len(x) + ROW_FRAME for x in a.contamination_reasons)
    final = a.final_query.text if a.final_query else None
    for c in _listed(a.calls, caps.calls):
        size += CALL_FRAME + _kept(c.error, caps.text)
        if c.tool == "get_context":
            size += sum(len(t) + 2 for t in c.targets)
            size += sum(len(e) + 2 for e in c.returned[:caps.entities])
        elif c.query is None or final is None or c.query.text != final:
            size += _kept(c.query, caps.query)
    return size


def choose_levels(sizes: Sequence[Sequence[int]], budget: int) -> list[int]:
    """The level of each section, given its size at every level (`sizes[i][level]`): while the
    total is over `budget`, the largest section that can still be drawn shorter goes one level
    down. A heap keeps the largest at hand, so each step costs a logarithm, never a rescan."""
    levels = [0] * len(sizes)
    total = sum(s[0] for s in sizes)
    heap = [(-s[0], i) for i, s in enumerate(sizes) if len(s) > 1]
    heapq.heapify(heap)
    while total > budget and heap:
        _, i = heapq.heappop(heap)
        now = sizes[i][levels[i]]
        levels[i] += 1
        total += sizes[i][levels[i]] - now
        if levels[i] < len(sizes[i]) - 1:
            heapq.heappush(heap, (-sizes[i][levels[i]], i))
    return levels


def first_of_cases(attempts: Sequence[d.AttemptDetail]) -> list[bool]:
    """For each attempt, whether it is the first of its case in this order (it shows the case's
    question and golden, and holds the case's anchor)."""
    seen: set[str] = set()
    out = []
    for a in attempts:
        out.append(a.qid not in seen)
        seen.add(a.qid)
    return out


def attempt_sections(attempts: Sequence[d.AttemptDetail], rows: dict[Any, CaseRow],
                     budget: int, *, issues_page: str = "") -> tuple[list[Html], int]:
    """Every attempt's section, each drawn once at the level `choose_levels` gives it so that the
    total (in UTF-8 bytes, as `section_size` reckons it) stays within `budget`; returns the
    sections and how many were drawn shorter than the first level."""
    firsts = first_of_cases(attempts)
    sizes = [[section_size(a, first_of_case=f, caps=caps) for caps in LEVELS]
             for a, f in zip(attempts, firsts, strict=True)]
    levels = choose_levels(sizes, budget)
    sections = [attempt_section(a, rows.get((a.qid, a.sample)), first_of_case=f,
                                caps=LEVELS[level], issues_page=issues_page)
                for a, f, level in zip(attempts, firsts, levels, strict=True)]
    return sections, sum(1 for level in levels if level)
