"""RESULTS.md and the short text rendering of a run summary; summary.json is the summary as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from malloy_evals.core import commands, files
from malloy_evals.core.cli import to_jsonable
from malloy_evals.core.findings import STALE, ignored_counts
from malloy_evals.core.vocab import CONTAMINATION_UNKNOWN, contamination_value, is_contaminated
from malloy_evals.core.words import attempt_label, number_or_na
from malloy_evals.report.figures import (
    PARTIAL_NOTE,
    CaseRow,
    RunSummary,
    partial_lines,
    samples_text,
)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _usd(x: float | None, unknown: int = 0) -> str:
    text = "unknown" if x is None else f"${x:.4f}"
    return text + (f" ({unknown} unknown)" if unknown and x is not None else "")


def _cell(value: Any, width: int = 80) -> str:
    if value is None:
        return ""
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def case_notes(row: CaseRow) -> list[str]:
    """What the case table's notes column says of an attempt (RESULTS.md and report.html)."""
    notes = []
    if row.excluded:
        notes.append("excluded: golden verified_wrong")
    if row.truncated:
        notes.append("truncated")
    if is_contaminated(row.contaminated):
        unknown = contamination_value(row.contaminated) == CONTAMINATION_UNKNOWN
        notes.append(f"contaminated ({CONTAMINATION_UNKNOWN})" if unknown else "contaminated")
    if row.must_not_use_hits:
        notes.append("veto: " + ", ".join(row.must_not_use_hits))
    if row.settled_by:
        when = f" on {row.settled_at}" if row.settled_at else ""
        notes.append(f"settled by {row.settled_by}{when} (judge said "
                     f"{row.judge_verdict or 'null'})")
    return notes


def case_verdict(row: CaseRow) -> str:
    """An attempt's verdict as the case tables show it: `stale (was match)` for a score judged
    against an older golden revision, `unscored`, `null (reason)`, or the verdict."""
    said = row.verdict if row.verdict else (f"null ({row.reason})" if row.scored else "unscored")
    if row.stale:
        return f"stale (was {said})"
    if not row.scored and row.awaiting_host:
        return "unscored (awaiting host reply)"
    return said


def render_markdown(s: RunSummary) -> str:
    """RESULTS.md: what a person reads after a run (every figure is also in summary.json)."""
    out: list[str] = []
    out.append(f"# Run {s.run_id or '?'} ({s.phase or '?'}) on set {s.set_name or '?'}")
    out.append("")
    judge = f"judges {s.judge_model}" if len(s.judges) > 1 else f"judge {s.judge_model or 'unknown'}"
    out.append(f"Answerer {s.answerer_model or 'unknown'}; {judge}"
               f" (JUDGE_VERSION {s.judge_version if s.judge_version is not None else '?'}).")
    out.append("")
    out.append(f"**{s.headline}**")
    out.append("")
    k_line = samples_text(s.samples)
    if k_line and s.samples:
        out.append(k_line + ".")
        out.append("Per case, samples matched of those decided: " + ", ".join(
            f"{c['qid']} {c['matched']}/{c['decided']}" for c in s.samples["per_case"]) + ".")
        out.append("")
    v = s.verdicts
    out.append(f"{s.attempts} attempts, {s.scored} scored. Verdicts: match {v['match']}, "
               f"no_match {v['no_match']}, near_match {v['near_match']}, "
               f"needs_human {v['needs_human']}, null {v['null']}.")
    neither = [f"{v['near_match']} near_match", f"{v['needs_human']} needs_human",
               f"{v['null']} null"]
    out.append(f"Out of the denominator: {', '.join(neither)}"
               + (f"; {s.excluded_verified_wrong} with a verified_wrong golden"
                  if s.excluded_verified_wrong else "") + ".")
    if s.settled_by_person:
        out.append(f"{s.settled_by_person} verdict(s) settled by a person (review.py), counted in "
                   f"place of the judge's; {s.overruled_by_person} of them overrule it.")
    if s.null_reasons:
        out.append("Null verdicts by reason: "
                   + ", ".join(f"{k} {n}" for k, n in s.null_reasons.items()) + ".")
    if s.unscored:
        out.append(f"Unscored (no score counted): {len(s.unscored)}: {', '.join(s.unscored)}"
                   + (" (a score some of them have was ignored: see Ignored events below)"
                      if any(i.kind == "score" and i.cause != STALE for i in s.ignored) else "")
                   + ".")
    if s.stale:
        out.append(f"Stale (judged against an older golden revision, counted apart from every "
                   f"verdict): {len(s.stale)}: {', '.join(s.stale)}.")
    for w in s.warnings:
        out.append(f"Warning: {w}.")
    if s.placed:
        out.append(f"{s.placed} verdict(s) name no attempt they judged (written by hand, or "
                   "before verdicts were bound): each is counted on the attempt of its case on "
                   "the line before it.")
    if s.ignored:
        out += ["", "## Ignored events", "",
                ("Live verdicts in the ledger that no figure above counts, each on its line "
                 "and why (reference/ledger-schema.md, \"Verdicts are tied to attempts\"):"), ""]
        out += [f"- {i}" for i in s.ignored]
        out.append(f"- {ignored_counts(s.ignored)}")

    if s.partial:
        out += ["", "## PARTIAL", "", PARTIAL_NOTE, ""]
        out += [f"- {what}: {counted}" for what, counted in partial_lines(s.partial)]
        out += ["", "Finish it with:", "", "```bash", s.partial.command, "```"]

    if s.incomplete:
        inc = s.incomplete
        out += ["", "## INCOMPLETE", ""]
        out.append("Truncated or contaminated attempts void the headline: no pass rate is given "
                   "until they are re-recorded and re-scored.")
        out.append("")
        out.append(f"- truncated: {len(inc.truncated)}" +
                   (f" ({', '.join(inc.truncated)})" if inc.truncated else ""))
        out.append(f"- contaminated (unknown included): {len(inc.contaminated)}" +
                   (f" ({', '.join(inc.contaminated)})" if inc.contaminated else ""))
        if inc.environment_failures:
            out.append(f"- environment failures (nothing measured; the re-score retries them): "
                       f"{len(inc.environment_failures)} ({', '.join(inc.environment_failures)})")
        out += ["", ("Re-record each attempt (a fresh answer, with more turns for a truncated one; "
                "an attempt recorded from a host log takes `--host-log LOG --answer-file ANSWER` "
                "instead of `--transcript`), then re-score them:"), "",
                "```bash", *inc.commands, "```"]

    if s.golden_drift:
        out += ["", "## Golden drift", "",
                ("Scored with `--allow-drift`: these goldens no longer follow from their "
                 "canonical queries on the truth package (`verify_goldens.py` says how), so "
                 "their verdicts rest on a key nobody defends today:"), "",
                *[f"- {q}" for q in s.golden_drift]]

    if s.doubted_goldens:
        out += ["", "## Doubted goldens", "",
                ("Not model failures: the key itself is in doubt. verified_wrong is out of "
                 "every aggregate; suspect is still counted."), ""]
        for d in s.doubted_goldens:
            note = f": {d['gold_note']}" if d.get("gold_note") else ""
            out.append(f"- {d['label']}: {d['gold_status']} (declared by {d['declared_by']}"
                       f"{', excluded' if d['excluded'] else ', still counted'}){note}")

    if s.vetoes:
        out += ["", "## Must-not-use vetoes", ""]
        for d in s.vetoes:
            judged = f" (judge said {d['judge_verdict']})" if d.get("judge_verdict") else ""
            out.append(f"- {d['label']}: {', '.join(d['hits'])}{judged}")

    waiting = [r for r in s.cases if r.verdict == "needs_human" and r.excluded is None]
    if waiting:
        out += ["", "## Needs a human", "",
                ("The judge was unsure (confidence 5 or lower) or contradicted itself; a person "
                 "settles these with `skills/eval-judge/scripts/review.py`, which records the "
                 "verdict and adds the prediction to judge-regressions.jsonl."), ""]
        for r in waiting:
            out.append(f"- {attempt_label(r.qid, r.sample)} (confidence {r.confidence})")

    out += ["", "## Cascade", ""]
    if s.cascade:
        cas = s.cascade
        out.append(f"{cas.get('total')} attempts, each on exactly one rung (every rung over all of "
                   f"them, not a shrinking funnel). Passes = delivered, right + the overlays: "
                   f"{cas.get('passes')}.")
        out += ["", "| rung | attempts | of which match (overlay) |", "|---|---|---|"]
        overlays = dict(cas.get("overlays") or {})
        for rung, n in dict(cas.get("rungs") or {}).items():
            overlay = overlays.get(rung)
            out.append(f"| {rung} | {n} | {'' if overlay is None else overlay} |")
    else:
        out.append(f"No retrieval rows: run `{commands.SCORE_RETRIEVAL_APPEND}` (score_run does) "
                   "first.")

    retrieval = s.retrieval
    out += ["", "## Retrieval", ""]
    out.append(f"mean recall {_pct(retrieval.get('mean_recall'))} over "
               f"{retrieval.get('measured', 0)} measured attempts; mean precision "
               f"{_pct(retrieval.get('mean_precision'))}; complete retrievals "
               f"{retrieval.get('complete_retrievals', 0)}.")
    if retrieval.get("failures_by_where_to_fix"):
        out.append("Failures by where to fix: " + ", ".join(
            f"{k} {n}" for k, n in retrieval["failures_by_where_to_fix"].items()) + ".")
        # The two tables answer different questions, and their counts differ on purpose.
        out.append("(These attribute the no_match attempts only, each to the first rule of "
                   "retrieval's attribution table that applies; the cascade places every "
                   "attempt, on the first rung "
                   "it stops at, so its rung counts differ from these.)")
    if retrieval.get("passed_not_fully_delivered") is not None:
        out.append(f"Passed, not fully delivered: {retrieval['passed_not_fully_delivered']}.")

    if s.coverage:
        c = s.coverage
        out += ["", "## Coverage", ""]
        version = f"; model version {c['version']}" if c.get("version") else ""
        # The report covers the cases it was run on (the whole set, or an --only subset), not
        # this run's attempts: say so rather than claim the whole set.
        out.append(f"From the coverage report (read from the model, over the report's own "
                   f"{c.get('cases')} cases, not this run's attempts): "
                   f"{c.get('modelled')} of {c.get('decided')} decided cases modelled "
                   f"({_pct(c.get('coverage'))}{version}; compiled "
                   f"surface {c.get('compiledSurface')}).")
        if c.get("by_verdict"):
            out.append("By verdict: " + ", ".join(
                f"{k} {n}" for k, n in dict(c["by_verdict"]).items()) + ".")

    if s.open_issues:
        out += ["", "## Open issues", "",
                ("From eval-diagnose: an issue stays here until its status is fixed (diagnose.py "
                 "marks it so once every attempt of its cases passes) or rejected."), ""]
        for issue in s.open_issues:
            out.append(f"- {issue['issue_id']} [{issue['status']}] {issue['primary_code']} -> "
                       f"{issue['owner']}: {', '.join(issue['qids'])}")

    c = s.cost
    out += ["", "## Cost", ""]
    out.append(f"- answerer: {_usd(c['answerer_usd'], c['answerer_unknown'])}")
    out.append(f"- judge: {_usd(c['judge_usd'], c['judge_unknown'])}")
    out.append(f"- turns: {c['turns'] if c['turns'] is not None else 'unknown'}")
    out.append(f"- get_context calls: {c['get_context_calls']}; execute_query calls: "
               f"{c['execute_query_calls']}")
    out.append(f"- entities delivered per answer: {number_or_na(c['entities_delivered_per_answer'])}")

    out += ["", "## Cases", "",
            "| attempt | verdict | confidence | coverage | recall | where to fix | notes | why |",
            "|---|---|---|---|---|---|---|---|"]
    for row in s.cases:
        verdict = case_verdict(row)
        notes = case_notes(row)
        recall = "" if row.recall is None else f"{row.recall:.2f}"
        out.append(f"| {attempt_label(row.qid, row.sample)} | {_cell(verdict)} | "
                   f"{_cell(row.confidence)} | {_cell(row.coverage)} | {recall} | "
                   f"{_cell(row.where_to_fix)} | {_cell('; '.join(notes))} | {_cell(row.why)} |")
    return "\n".join(out) + "\n"


def render_text(s: RunSummary) -> str:
    """The summary printed by score_run: the same text as RESULTS.md."""
    return render_markdown(s)


def summary_json(s: RunSummary) -> dict[str, Any]:
    """summary.json: every figure of RESULTS.md, as plain JSON values."""

    doc = to_jsonable(s)
    doc["schema"] = "malloy-evals/summary/1"
    return doc


def write_results(run_dir: str | Path, s: RunSummary) -> tuple[Path, Path]:
    """Write RESULTS.md and summary.json into the run folder (rewritten on every summary)."""
    run_dir = Path(run_dir)
    md = run_dir / "RESULTS.md"
    js = run_dir / "summary.json"
    # Rewritten whole each time, through a temporary file renamed over the old one: a link planted
    # in the run folder at either name is replaced, never written through.
    files.replace(md, render_markdown(s), run_dir)
    files.replace(js, json.dumps(summary_json(s), indent=2, ensure_ascii=False) + "\n", run_dir)
    return md, js
