"""report.html: one self-contained page per run, read against its ledger.

The figures on the page are the run summary itself (`figures.summarize`, the computation behind
summary.json and RESULTS.md), rendered, never recomputed: the headline is the summary's headline,
word for word. Behind each row of the case table is the evidence `details` gathered from the
ledger: question, golden, answer, re-executed rows, the judge's why, retrieval and the tool calls.
A run that is not (fully) scored still gets its page; the headline then says what is not scored.

Past SPLIT_AT attempts the page stays the size of its table: it keeps the figures, the table and
the first sections, and every case gets a page of its own beside it (`report-case-<qid>.html`,
all of its attempts), linked from the table. The run outputs' owner (workflow/outputs.py) writes
them with report.html and removes any case page this writing did not make, so none outlives a
rescore.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core import commands, files
from malloy_evals.core.errors import EXIT_OK, InputError
from malloy_evals.core.findings import Ignored, ignored_counts
from malloy_evals.core.words import attempt_label
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.report import details as d
from malloy_evals.report.agreement import figure_line, measure, run_pairs
from malloy_evals.report.attempt_section import (
    attempt_sections,
    first_of_cases,
    inline,
    verdict_text,
    verdict_word,
)
from malloy_evals.report.charts import Bar, bar_chart
from malloy_evals.report.details import redacted
from malloy_evals.report.figures import (
    PARTIAL_NOTE,
    STATUS_COMPLETE,
    VERDICT_ORDER,
    CaseRow,
    RunSummary,
    partial_lines,
    samples_text,
)
from malloy_evals.report.html import (
    Html,
    anchor_id,
    case_anchor,
    definition_list,
    el,
    esc,
    href_to,
    join,
    link,
    page,
    pct,
    shown,
    table,
    td,
    usd,
)
from malloy_evals.report.markdown import case_notes
from malloy_evals.sets.eval_set import SET_FILE, EvalSet, load_set

PAGE_FILE = "report.html"
# A page over this many bytes draws its largest attempt sections shorter (attempt_section.LEVELS):
# the aim is under 2 MB for a 500-attempt run, with room to spare.
PAGE_BUDGET = 1_900_000
# Past this many attempts, report.html keeps the first sections (at most INLINE_SECTIONS of them
# and INLINE_BYTES in all) and every case's attempts go on a page of its own beside it: a page
# of thousands of sections is slow to open even with every section closed.
SPLIT_AT = 300
INLINE_SECTIONS = 100
INLINE_BYTES = 500_000
# A case of more attempts than this (many samples) spreads over several pages of this many each.
CASE_PAGE_ATTEMPTS = 300
CASE_PAGE = re.compile(r"report-case-[A-Za-z0-9_.-]+(?:~[0-9]+)?\.html")  # the case pages' names
SIDE_FILES = ("RESULTS.md", "summary.json", "events.jsonl")
VERDICTS = (*VERDICT_ORDER, "null")  # the summary's verdict counts, in its order
WHY_CHARS = 240  # of the judge's (or the person's) why in the cases table; the attempt has it all


@dataclass(frozen=True)
class PageContext:
    """What the page says about where it came from (paths as a person would type them)."""

    run_label: str
    set_label: str | None          # None: no set was given or found beside the run
    run_info: dict[str, Any]
    files: tuple[str, ...] = ()    # files beside the page that it links to (RESULTS.md, ...)
    agreement: str | None = None   # the judge's agreement with people, when pairs exist


@dataclass(frozen=True)
class RunPage:
    """report.py --run's result: the page written and what it holds."""

    path: str
    bytes: int
    attempts: int
    headline: str
    status: str
    set_dir: str | None
    unscored: int                  # attempts without a live score (their page still shows them)
    not_scored: str | None         # the headline's not-scored line, when there is one
    case_pages: tuple[str, ...] = ()   # the case pages written beside it (past SPLIT_AT)
    case_bytes: int = 0                # their bytes, all together
    ignored: tuple[Ignored, ...] = ()  # live verdicts the figures do not count, and why

    @property
    def exit_code(self) -> int:
        return EXIT_OK  # a page was written: an unscored or INCOMPLETE run is a result too


# ---------------------------------------------------------------------------------------------
# Pieces


def _cost(row: CaseRow) -> float | None:
    known = [c for c in (row.answerer_cost_usd, row.judge_cost_usd) if c is not None]
    return round(sum(known), 6) if known else None


def _owners(qid: str, issues: Sequence[d.Issue]) -> str:
    owners = sorted({i.owner for i in issues if qid in i.qids and i.owner})
    return ", ".join(owners)


# ---------------------------------------------------------------------------------------------
# Header and summary sections. The figures are the summary's; the few texts it carries from the
# ledger (vetoed fields, null reasons, gold notes) are redacted like every other ledger text.


def _header(s: RunSummary, ctx: PageContext) -> Html:
    info = ctx.run_info
    # Model names come from the ledger (a judge's own reply may name one): redacted like the rest.
    judge = redacted(s.judge_model or "unknown")
    version = shown(s.judge_version, none="unknown")
    meta = [(f"Answerer {redacted(s.answerer_model or 'unknown')}; judge {judge} "
            f"(JUDGE_VERSION {version})."),
            f" Run folder {ctx.run_label}"
            + (f"; set {ctx.set_label}." if ctx.set_label else ".")]
    if info.get("started"):
        meta.append(f" Started {info['started']}.")
    parts: list[Any] = [
        el("h1", f"Run {s.run_id or 'unknown'} ({s.phase or 'unknown phase'}) on set "
                 f"{s.set_name or 'unknown'}"),
        el("p", meta, class_="meta"),
        _headline_box(s),
    ]
    if s.partial is not None:
        parts.append(_partial(s))
    k_line = samples_text(s.samples)
    if k_line:
        parts.append(el("p", k_line + ".", id="k-samples", class_="meta"))
    if ctx.agreement:
        parts.append(el("p", ctx.agreement + ".", id="judge-agreement", class_="meta"))
    if ctx.set_label is None:
        parts.append(el("p", "No set was given (--set) or found around the run folder: questions, "
                        "goldens and rubrics are not shown, and a golden the set marks "
                        "verified_wrong is not taken out of the figures.", class_="alert",
                        id="no-set"))
    if s.incomplete:
        parts.append(_incomplete(s))
    for w in s.warnings:
        parts.append(el("p", f"Warning: {w}.", class_="alert"))
    if s.ignored:
        parts.append(_ignored(s))
    nav = [("#verdicts", "Verdicts"), ("#cascade", "Cascade"),
           ("#retrieval", "Retrieval and coverage"), ("#cost", "Cost"),
           ("#diagnosis", "Diagnosis"), ("#cases", "Cases"), ("#attempts", "Attempts")]
    beside = [f for f in SIDE_FILES if f in ctx.files]
    parts.append(el("nav", el("p", "On this page: ",
                              join(*[join(link(t, h), " · ") for h, t in nav[:-1]]),
                              link(nav[-1][1], nav[-1][0]), ".",
                              join(" Files beside it: ", join(*[join(link(f, href_to(f)), " ")
                                                                 for f in beside]))
                              if beside else None),
                    aria_label="contents", class_="meta"))
    return el("header", parts)


def _ignored(s: RunSummary) -> Html:
    """The live verdicts no figure counts, each on its ledger line with why (as RESULTS.md)."""
    return el("section", el("p", f"{ignored_counts(s.ignored)}: no figure on this page counts "
                                 "them.", class_="alert"),
              el("ul", [el("li", redacted(str(i))) for i in s.ignored]), id="ignored-events")


def _headline_box(s: RunSummary) -> Html:
    """The summary's headline word for word (UNSEALED, INCOMPLETE, PARTIAL as it says them); a
    run not fully scored says so inside the same box."""
    headline_class = "headline" if s.status == STATUS_COMPLETE else "headline incomplete"
    return el("div", el("p", s.headline, id="headline", data_status=s.status),
              el("p", not_scored_line(s), id="not-scored-line") if s.unscored else None,
              class_=headline_class)


def not_scored_line(s: RunSummary) -> str:
    """What is not scored yet, in the words the page's headline box and report.py print."""
    n = len(s.unscored)
    if not s.scored:
        return f"not scored yet: none of the {s.attempts} attempt(s) has a score"
    return (f"not fully scored: {n} of {s.attempts} attempt(s) have no score yet; the figures "
            f"cover the {s.scored} scored")


def _partial(s: RunSummary) -> Html:
    """What a partial run still owes (unscored, awaiting a host, stale) and the one command
    that finishes it: the same words and command as RESULTS.md's PARTIAL section."""
    p = s.partial
    assert p is not None
    return el("section", el("h2", "PARTIAL: no pass rate"),
              el("p", f"{PARTIAL_NOTE} Their answers, queries and tool calls are shown below."),
              definition_list(partial_lines(p)),
              el("p", "Finish it with:"), el("pre", p.command), id="not-scored", class_="alert")


def _incomplete(s: RunSummary) -> Html:
    inc = s.incomplete
    assert inc is not None
    return el("section", el("h2", "INCOMPLETE: no pass rate"),
              el("p", "Truncated or contaminated attempts void the headline: no pass rate is given "
                      "until they are re-recorded and re-scored."),
              definition_list([
                  ("truncated", f"{len(inc.truncated)}" + (f": {', '.join(inc.truncated)}"
                                                           if inc.truncated else "")),
                  ("contaminated (unknown included)", f"{len(inc.contaminated)}" + (
                      f": {', '.join(inc.contaminated)}" if inc.contaminated else "")),
              ]),
              el("p", "Re-record each attempt (a fresh answer; an attempt recorded from a host log "
                      "takes --host-log LOG --answer-file ANSWER instead of --transcript), then "
                      "re-score them:"),
              el("pre", "\n".join(inc.commands)), id="incomplete", class_="alert")


def _verdicts(s: RunSummary, where: Layout) -> Html:
    v = s.verdicts
    counts = el("dl", [el("div", el("dt", k), el("dd", n, data_count=k)) for k, n in
                       [("attempts", s.attempts), ("scored", s.scored),
                        ("stale", len(s.stale)), ("unscored", len(s.unscored))]
                       + [(k, v.get(k, 0)) for k in VERDICTS]], class_="stats")
    chart = bar_chart([Bar(k, int(v.get(k, 0)), css=f"bar-{k}") for k in VERDICTS],
                      title="verdict counts")
    parts: list[Any] = [el("h2", "Verdicts"), counts, chart]
    parts.append(el("p", "Only match and no_match are in the pass rate's denominator; near_match, "
                         "needs_human and null are counted apart, and so is a stale score "
                         "(judged against an older golden revision)"
                    + (f", and {s.excluded_verified_wrong} attempt(s) with a verified_wrong "
                       "golden are out of every figure" if s.excluded_verified_wrong else "") + ".",
                    class_="note"))
    if s.null_reasons:
        parts.append(el("p", "Null verdicts by reason: " + ", ".join(
            f"{redacted(k)} {n}" for k, n in s.null_reasons.items()) + "."))
    if s.vetoes:
        parts.append(el("h3", "Must-not-use vetoes"))
        parts.append(el("ul", [el("li", link(x["label"], where.attempt_href(x["qid"], x["sample"])),
                                  ": ", redacted(", ".join(x["hits"])),
                                  f" (the judge said {x['judge_verdict']})"
                                  if x.get("judge_verdict") else None) for x in s.vetoes]))
    if s.doubted_goldens:
        parts.append(el("h3", "Doubted goldens"))
        parts.append(el("ul", [el("li", link(x["label"], where.attempt_href(x["qid"], x["sample"])),
                                  f": {x['gold_status']} (declared by {x['declared_by']}; "
                                  f"{'excluded' if x['excluded'] else 'still counted'})",
                                  f": {redacted(x['gold_note'])}" if x.get("gold_note")
                                  else None)
                               for x in s.doubted_goldens]))
    waiting = [r for r in s.cases if r.verdict == "needs_human" and r.excluded is None]
    if waiting:
        parts.append(el("h3", "Needs a human"))
        parts.append(el("ul", [el("li", link(attempt_label(r.qid, r.sample),
                                             where.attempt_href(r.qid, r.sample)),
                                  f" (confidence {shown(r.confidence)})") for r in waiting]))
    return el("section", parts, id="verdicts")


def _cascade(s: RunSummary) -> Html:
    parts: list[Any] = [el("h2", "Cascade")]
    cas = s.cascade
    if not cas:
        parts.append(el("p", f"No retrieval rows yet: {commands.SCORE_RUN} (or "
                             f"{commands.SCORE_RETRIEVAL_APPEND}) places each attempt on the "
                             "cascade.", class_="note"))
        return el("section", parts, id="cascade")
    rungs = dict(cas.get("rungs") or {})
    overlays = dict(cas.get("overlays") or {})
    parts.append(el("p", f"{cas.get('total')} attempts, each on exactly one rung (the first one "
                         f"it stops at). Passes = delivered, right + the matches on earlier rungs: "
                         f"{cas.get('passes')}."))
    parts.append(bar_chart([Bar(r, int(n or 0), overlay=overlays.get(r) or None)
                            for r, n in rungs.items()], title="cascade: attempts per rung"))
    parts.append(table(["rung", "attempts", "of which match (overlay)"],
                       [[r, td(shown(n), class_="num", data_rung=r),
                         td("" if overlays.get(r) is None else shown(overlays[r]), class_="num")]
                        for r, n in rungs.items()], caption="Cascade rungs", id="cascade-table"))
    return el("section", parts, id="cascade")


def _retrieval(s: RunSummary) -> Html:
    r = s.retrieval
    parts: list[Any] = [el("h2", "Retrieval and coverage")]
    parts.append(definition_list([
        ("mean recall", el("span", pct(r.get("mean_recall")), data_figure="mean_recall")),
        ("measured attempts", shown(r.get("measured", 0))),
        ("mean precision", pct(r.get("mean_precision"))),
        ("complete retrievals", shown(r.get("complete_retrievals", 0))),
        ("passed, not fully delivered", shown(r.get("passed_not_fully_delivered"), none="n/a")),
        ("failures by where to fix", ", ".join(f"{k} {n}" for k, n in dict(
            r.get("failures_by_where_to_fix") or {}).items()) or "none"),
    ]))
    c = s.coverage
    if c:
        parts.append(el("p", f"Coverage, read from the model over the report's own {c.get('cases')} "
                             f"cases (not this run's attempts): {c.get('modelled')} of "
                             f"{c.get('decided')} decided cases modelled (",
                        el("span", pct(c.get("coverage")), data_figure="coverage"),
                        f"; compiled surface {shown(c.get('compiledSurface'))}; reader "
                        f"{shown(c.get('reader'))})."))
        if c.get("by_verdict"):
            parts.append(el("p", "By verdict: " + ", ".join(
                f"{k} {n}" for k, n in dict(c["by_verdict"]).items()) + "."))
    else:
        parts.append(el("p", f"No coverage report given ({commands.SCORE_RUN} or "
                             f"{commands.REPORT_COVERAGE} FILE): each attempt's coverage class "
                             "comes from its retrieval row.",
                        class_="note"))
    return el("section", parts, id="retrieval")


def _cost_section(s: RunSummary) -> Html:
    c = s.cost
    answerer = usd(c.get("answerer_usd")) + (f" ({c['answerer_unknown']} unknown)"
                                             if c.get("answerer_unknown") else "")
    judge = usd(c.get("judge_usd")) + (f" ({c['judge_unknown']} unknown)"
                                       if c.get("judge_unknown") and c.get("judge_usd") is not None
                                       else "")
    return el("section", el("h2", "Cost"), definition_list([
        ("answerer", el("span", answerer, data_figure="answerer_usd")),
        ("judge", el("span", judge, data_figure="judge_usd")),
        ("turns", shown(c.get("turns"), none="unknown")),
        ("get_context calls", shown(c.get("get_context_calls"))),
        ("execute_query calls", shown(c.get("execute_query_calls"))),
        ("entities delivered per answer", shown(c.get("entities_delivered_per_answer"),
                                                none="n/a")),
    ]), id="cost")


def _diagnosis(issues: Sequence[d.Issue], qids: set[str], where: Layout) -> Html:
    parts: list[Any] = [el("h2", "Diagnosis")]
    if not issues:
        parts.append(el("p", f"No diagnosis yet: {commands.DIAGNOSE} (eval-diagnose) says why each "
                             "failure happened and who owns it.", class_="note"))
        return el("section", parts, id="diagnosis")
    rows = []
    for i in issues:
        cases = join(*[join(link(q, where.case_href(q)) if q in qids else esc(q), " ")
                       for q in i.qids])
        code = i.primary_code or "?"
        if i.contributing_codes:
            code += " (+ " + ", ".join(i.contributing_codes) + ")"
        rows.append([td(el("code", i.issue_id), id="issue-" + i.issue_id), code,
                     td(shown(i.owner), data_owner=i.owner or ""), shown(i.component), cases,
                     shown(i.status), inline(i.diagnosis)])
    parts.append(table(["issue", "cause code", "owner", "component", "cases", "status",
                        "diagnosis"], rows, caption=f"{len(issues)} issue(s), each a cluster of "
                                                    "failures on one shared cause",
                       id="issues-table"))
    return el("section", parts, id="diagnosis")


def _case_table(s: RunSummary, issues: Sequence[d.Issue], where: Layout) -> Html:
    head = el("thead", el("tr", [el("th", h, scope="col") for h in (
        "attempt", "verdict", "confidence", "owner", "recall", "cost", "coverage",
        "where to fix", "notes", "why")]))
    rows = []
    for r in s.cases:
        cost = _cost(r)
        # An attempt whose section is on its case's page keeps its anchors here, on its row (a
        # comparison page links to `report.html#case-<qid>`).
        away = where.is_away(r.qid, r.sample)
        # Lean rows (a run may have thousands): the sorting script reads the cells' own text.
        rows.append(el(
            "tr",
            td(link(attempt_label(r.qid, r.sample), where.attempt_href(r.qid, r.sample)),
               id=case_anchor(r.qid) if away and where.first_row(r.qid, r.sample) else None),
            td(verdict_text(r), class_=f"v-{verdict_word(r)}"),
            td(shown(r.confidence, none="")), td(_owners(r.qid, issues)),
            td("" if r.recall is None else f"{r.recall:.2f}"),
            td("" if cost is None else usd(cost)),
            td(shown(r.coverage, none="")), td(shown(r.where_to_fix, none="")),
            td(redacted("; ".join(case_notes(r)))),
            td(inline(d.text_of(redacted(r.why), WHY_CHARS), WHY_CHARS, none=""), class_="why"),
            data_verdict=verdict_word(r), id=anchor_id(r.qid, r.sample) if away else None))
    return el("section", el("h2", "Cases"),
              el("div", el("table", el("caption", f"{len(s.cases)} attempt(s); sort by a column, "
                                                  "open an attempt for its evidence"),
                           head, el("tbody", rows), id="cases-table", class_="cases",
                           data_sortable=True, data_filterable=True), class_="scroll"),
              id="cases")


def case_page(qid: str, part: int = 1) -> str:
    """The file name of a case's own page beside report.html: `report-case-<qid>.html`, and
    `report-case-<qid>~2.html` for the second page of a case with more than CASE_PAGE_ATTEMPTS
    attempts (`~` is in no qid)."""
    return f"report-{case_anchor(qid)}" + (f"~{part}" if part > 1 else "") + ".html"


@dataclass(frozen=True)
class Layout:
    """Where each attempt's section is: on report.html, or only on its case's page."""

    split: bool = False
    inline: frozenset[tuple[str, Any]] = frozenset()   # attempts drawn on report.html (split)
    firsts: Mapping[str, Any] = field(default_factory=dict)   # each case's first sample
    pages: Mapping[tuple[str, Any], str] = field(default_factory=dict)  # each attempt's case page

    def is_away(self, qid: str, sample: Any) -> bool:
        return self.split and (qid, sample) not in self.inline

    def first_row(self, qid: str, sample: Any) -> bool:
        return qid in self.firsts and self.firsts[qid] == sample

    def attempt_href(self, qid: str, sample: Any) -> str:
        if self.is_away(qid, sample):
            return href_to(self.pages[(qid, sample)], fragment=anchor_id(qid, sample))
        return "#" + anchor_id(qid, sample)

    def case_href(self, qid: str) -> str:
        if qid in self.firsts and self.is_away(qid, self.firsts[qid]):
            return href_to(self.pages[(qid, self.firsts[qid])], fragment=case_anchor(qid))
        return "#" + case_anchor(qid)


@dataclass(frozen=True)
class RenderedRun:
    """report.html's text and, past SPLIT_AT attempts, each case page's (by file name)."""

    page: str
    cases: dict[str, str] = field(default_factory=dict)


def _by_case(attempts: Sequence[d.AttemptDetail]) -> dict[str, list[d.AttemptDetail]]:
    out: dict[str, list[d.AttemptDetail]] = {}
    for a in attempts:
        out.setdefault(a.qid, []).append(a)
    return out


def render_run_page(s: RunSummary, attempts: Sequence[d.AttemptDetail],
                    issues: Sequence[d.Issue], ctx: PageContext) -> RenderedRun:
    """The whole page for one run: every figure from `s`, every attempt's evidence from `attempts`
    (drawn shorter, largest first, where a page would pass PAGE_BUDGET). Past SPLIT_AT attempts
    the sections are drawn on their cases' pages and the first of them shown here too."""
    rows = {(r.qid, r.sample): r for r in s.cases}
    split = len(attempts) > SPLIT_AT
    firsts = {a.qid: a.sample
              for a, f in zip(attempts, first_of_cases(attempts), strict=True) if f}
    title = f"{s.run_id or 'run'}: {s.headline}"
    cases: dict[str, str] = {}
    if split:
        drawn: dict[tuple[str, Any], Html] = {}
        pages: dict[tuple[str, Any], str] = {}
        shortened = 0
        for qid, own in _by_case(attempts).items():
            parts = [own[i:i + CASE_PAGE_ATTEMPTS] for i in range(0, len(own), CASE_PAGE_ATTEMPTS)]
            names = [case_page(qid, n) for n in range(1, len(parts) + 1)]
            for name, part in zip(names, parts, strict=True):
                text, sections, n = _case_page(s, qid, part, rows, ctx, name, names)
                cases[name] = text
                drawn.update(((a.qid, a.sample), h) for a, h in zip(part, sections, strict=True))
                pages.update(((a.qid, a.sample), name) for a in part)
                shortened += n
        kept: list[Html] = []
        size = 0
        for a in attempts[:INLINE_SECTIONS]:
            h = drawn[(a.qid, a.sample)]
            size += len(h.encode("utf-8"))
            if kept and size > INLINE_BYTES:
                break
            kept.append(h)
        where = Layout(True, frozenset((a.qid, a.sample) for a in attempts[:len(kept)]), firsts,
                       pages)
    else:
        where = Layout(firsts=firsts)
    header = _header(s, ctx)
    figures = join(_verdicts(s, where), _cascade(s), _retrieval(s), _cost_section(s),
                   _diagnosis(issues, {r.qid for r in s.cases}, where),
                   _case_table(s, issues, where))

    def whole(attempts_part: Html) -> str:
        return page(title, join(header, el("main", figures, attempts_part)),
                    description=f"malloy-evals run {s.run_id}: {s.headline}")

    if split:
        note = (f"The first {len(kept)} of {len(attempts)} attempts are shown here. Every "
                "attempt, these included, is on its case's own page beside this one "
                f"({len(cases)} pages, report-case-<case>.html), linked from each row of the "
                "table." + (f" {shortened} of {len(attempts)} are drawn shorter to keep those "
                             "pages small." if shortened else ""))
        sections = kept
    else:
        fixed = len(whole(Html("")).encode("utf-8"))
        sections, shortened = attempt_sections(attempts, rows, PAGE_BUDGET - fixed)
        note = ("Each attempt's evidence: open one (or follow a link from the table)."
                + (f" {shortened} of {len(attempts)} are drawn shorter to keep this page small."
                   if shortened else ""))
    return RenderedRun(whole(el("section", el("h2", "Attempts"), el("p", note, class_="note"),
                                sections, id="attempts")), cases)


def _case_page(s: RunSummary, qid: str, attempts: Sequence[d.AttemptDetail],
               rows: dict[Any, CaseRow], ctx: PageContext, name: str, names: Sequence[str]
               ) -> tuple[str, list[Html], int]:
    """One case's page (`name`, one of the case's `names`): the run's headline, a way back to the
    run's page (and to the case's other pages), and the case's attempts, drawn within
    PAGE_BUDGET; returns it, its sections and how many are shorter."""
    title = f"{s.run_id or 'run'}: case {qid}: {s.headline}"
    run = f"run {s.run_id or 'unknown'}"
    others = (el("p", f"This case's attempts are on {len(names)} pages: ",
                  join(*[join(" · " if i else None,
                              esc(str(i + 1)) if n == name else link(str(i + 1), href_to(n)))
                         for i, n in enumerate(names)]), ".")
              if len(names) > 1 else None)
    header = el("header",
                el("h1", f"Case {qid} of {run} ({s.phase or 'unknown phase'})"),
                el("p", f"Run folder {ctx.run_label}" + (f"; set {ctx.set_label}."
                                                         if ctx.set_label else "."),
                   class_="meta"),
                _headline_box(s),
                el("nav", el("p", "Back to ", link(f"the {run}'s page", href_to(PAGE_FILE)),
                             " (its figures, the cases table and the diagnosis)."), others,
                   aria_label="contents", class_="meta"))
    shell = len(page(title, join(header, el("main", el("section", id="attempts")))).encode())
    sections, shortened = attempt_sections(attempts, rows, PAGE_BUDGET - shell,
                                           issues_page=PAGE_FILE)
    note = (f"{len(attempts)} attempt(s) of case {qid}: open one for its evidence."
            + (f" {shortened} are drawn shorter to keep this page small." if shortened else ""))
    body = el("main", el("section", el("h2", "Attempts"), el("p", note, class_="note"), sections,
                         id="attempts"))
    return (page(title, join(header, body), description=f"malloy-evals {run}, case {qid}"),
            sections, shortened)


def render_text(result: RunPage) -> str:
    """report.py --run's text output: where the page is, and the headline it carries."""
    pages = (f"; {len(result.case_pages)} case pages beside it, {result.case_bytes // 1024} KB"
             if result.case_pages else "")
    return (f"wrote {result.path} ({result.bytes // 1024} KB, {result.attempts} attempts{pages})\n"
            f"{result.headline}" + (f"\n{result.not_scored}" if result.not_scored else ""))


def find_set(run_dir: Path, set_name: str | None) -> Path | None:
    """The set a run folder sits in (`<set>/runs/<run>`, as the sample set keeps its runs) when
    that set has the run's name; None otherwise."""
    candidate = run_dir.resolve().parent.parent
    if not (candidate / SET_FILE).is_file():
        return None
    try:
        found = load_set(candidate)
    except InputError:
        return None
    return candidate if set_name is None or found.name == set_name else None


def write_run_page(run: Run, eval_set: EvalSet, view: LiveView, summary: RunSummary, *,
                   run_label: str, set_label: str) -> RunPage:
    """Write `report.html` into the run folder: `summary` rendered (the very summary RESULTS.md
    and summary.json were written from, workflow/outputs.py), each attempt's evidence read from
    the live view `view`."""
    info = dict(run.info)
    issues = d.issues_of(view.events)
    attempts = d.attempt_details(run, eval_set, view,
                                 [run.key(r.qid, r.sample) for r in summary.cases], issues)
    target = Path(run.dir) / PAGE_FILE
    side_files = tuple(f for f in SIDE_FILES if (target.parent / f).is_file())
    agreement = figure_line(measure(run_pairs(run.run_id, view)))
    rendered = render_run_page(summary, attempts, issues,
                               PageContext(run_label, set_label, info, side_files, agreement))
    # The case pages first, so that no link of the new report.html names a page not yet there.
    case_bytes = 0
    for name, text in rendered.cases.items():
        files.replace(target.parent / name, text, target.parent, sync=False)
        case_bytes += len(text.encode("utf-8"))
    write_atomic(target, rendered.page)
    return RunPage(path=str(target), bytes=len(rendered.page.encode("utf-8")),
                   attempts=summary.attempts, headline=summary.headline, status=summary.status,
                   set_dir=set_label, unscored=len(summary.unscored),
                   not_scored=not_scored_line(summary) if summary.unscored else None,
                   case_pages=tuple(rendered.cases), case_bytes=case_bytes,
                   ignored=tuple(summary.ignored))


def case_pages_in(run_dir: Path) -> list[str]:
    """The case pages now in a run folder (file names, sorted)."""
    with files.folder(run_dir, create=False) as fd:
        return sorted(n for n in os.listdir(fd) if CASE_PAGE.fullmatch(n))


def remove_case_pages(run_dir: Path, keep: Iterable[str]) -> list[str]:
    """Remove every case page in the run folder but those in `keep` (the ones just written): a
    rescore that no longer splits its page, or a case gone from the run, leaves none behind. A
    link in a case page's place is removed as a link, never followed. Returns the names removed."""
    kept = set(keep)
    removed = []
    with files.folder(run_dir, create=False) as fd:
        for name in sorted(os.listdir(fd)):
            if not CASE_PAGE.fullmatch(name) or name in kept:
                continue
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                continue  # a folder of that name is not a page the kit wrote
            os.unlink(name, dir_fd=fd)
            removed.append(name)
    return removed


def write_atomic(target: Path, text: str) -> None:
    """Replace `target` whole, never through a link: a reader never opens half a page, and a
    link planted in its place is replaced (core/files.py)."""
    files.replace(target, text, target.parent)
