"""promote_golden: move a golden from provisional to verified, and only on evidence.

A `scalar` or `rows` golden is promoted only when `verify_goldens` re-derives it from the truth
package (its canonical query gives the stored value); a `criteria` or `unanswerable` golden has
no value to re-derive, so a person attests it (`attest=True`, `by=NAME`). Promotion bumps
`goldenRevision` (scores pinned to the old revision go stale and are re-scored) and records
`verifiedBy` / `verifiedAt` on the golden. It rewrites only the promoted cases' lines of
cases.jsonl; every other byte of the file stays as it was.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, InputError
from malloy_evals.sets.eval_set import CASES_FILE, VALUE_KINDS, load_set, rewrite_jsonl
from malloy_evals.sets.goldens import verify_goldens

ATTESTED_KINDS = ("criteria", "unanswerable")  # no value to re-derive: a person vouches


@dataclass(frozen=True)
class Promotion:
    """What happened to one case's golden."""

    qid: str
    kind: str | None
    outcome: str                 # promoted | refused | skipped | already verified | error
    detail: str
    golden_revision: int | None = None  # the new revision, when promoted
    verified_by: str | None = None


@dataclass(frozen=True)
class PromoteReport:
    """promote_golden.py's result."""

    set_dir: str
    promotions: list[Promotion]

    @property
    def promoted(self) -> list[str]:
        return [p.qid for p in self.promotions if p.outcome == "promoted"]

    @property
    def exit_code(self) -> int:
        # A golden that does not re-derive is what this check exists to find: it outranks a
        # check that could not run.
        if any(p.outcome == "refused" for p in self.promotions):
            return EXIT_FINDING
        if any(p.outcome == "error" for p in self.promotions):
            return EXIT_UNMEASURED
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"set_dir": self.set_dir, "promoted": self.promoted,
                "promotions": self.promotions, "exit_code": self.exit_code}


def _a(word: Any) -> str:
    return f"{'an' if str(word)[:1] in 'aeiou' else 'a'} {word}"


def _now() -> str:
    t = _dt.datetime.now(_dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def promote_golden(set_dir: str | Path, qids: Sequence[str] | None = None, *, all_cases: bool = False,
                   attest: bool = False, by: str | None = None,
                   runtime_factory: Callable[..., Any] | None = None,
                   now: Callable[[], str] = _now) -> PromoteReport:
    """Promote the named cases' goldens (or, with `all_cases`, every provisional one that can be
    re-derived); rewrite their lines of cases.jsonl in place."""
    name = (by or "").strip()
    if attest and not name:
        raise InputError(None, None, "--attest needs --by NAME: an attestation is a person's word")
    if attest and all_cases:
        raise InputError(None, None, "--attest vouches for one case at a time; name it with --qid")
    eval_set = load_set(set_dir)
    if all_cases:
        chosen = [c for c in eval_set.cases.values() if c.golden_status == "provisional"]
    else:
        wanted = {q.lower() for q in qids or []}
        unknown = sorted(wanted - {q.lower() for q in eval_set.cases})
        if unknown:
            raise InputError(Path(set_dir) / CASES_FILE, None, f"no case with qid {', '.join(unknown)}")
        chosen = [c for c in eval_set.cases.values() if c.qid.lower() in wanted]

    results: dict[str, Promotion] = {}
    to_derive = []
    for case in chosen:
        kind, status = case.golden_kind, case.golden_status
        if case.golden is None:
            results[case.qid] = Promotion(case.qid, None, "refused", "the case has no golden")
        elif status == "verified":
            results[case.qid] = Promotion(case.qid, kind, "already verified", "nothing to do",
                                          case.golden_revision)
        elif status != "provisional":
            results[case.qid] = Promotion(case.qid, kind, "refused", (
                f"status {status}: only a provisional golden is promoted; {status} is settled by "
                "a person editing the case"))
        elif kind in ATTESTED_KINDS:
            if attest:
                results[case.qid] = Promotion(case.qid, kind, "promoted", "attested",
                                              verified_by=f"attested by {name}")
            else:
                outcome = "skipped" if all_cases else "refused"
                results[case.qid] = Promotion(case.qid, kind, outcome, (
                    f"{_a(kind)} golden has no value to re-derive: a person promotes it with "
                    "--attest --by NAME"))
        elif attest:
            results[case.qid] = Promotion(case.qid, kind, "refused", (
                f"{_a(kind)} golden is promoted only by re-deriving it from the truth package; "
                "--attest is for criteria and unanswerable goldens"))
        elif kind in VALUE_KINDS:
            to_derive.append(case)

    if to_derive:
        report = verify_goldens(set_dir, [c.qid for c in to_derive],
                                runtime_factory=runtime_factory)
        checks = {c.qid: c for c in report.checks}
        truth = report.truth_package or "truth/"
        for case in to_derive:
            check = checks.get(case.qid)
            if report.unmeasured:
                results[case.qid] = Promotion(case.qid, case.golden_kind, "error",
                                              f"could not re-derive: {report.unmeasured}")
            elif check is None or check.status == "error":
                detail = "; ".join(check.problems) if check else "not checked"
                results[case.qid] = Promotion(case.qid, case.golden_kind, "error",
                                              f"could not re-derive: {detail}")
            elif check.status == "drift":
                results[case.qid] = Promotion(case.qid, case.golden_kind, "refused", (
                    "does not re-derive from the truth package: " + "; ".join(check.problems)))
            else:
                who = f"re-derived from truth package {truth} by promote_golden.py"
                if name:
                    who += f" ({name})"
                results[case.qid] = Promotion(case.qid, case.golden_kind, "promoted",
                                              "re-derived", verified_by=who)

    replace: dict[int, Any] = {}
    stamped = now()
    final: list[Promotion] = []
    for case in chosen:
        result = results[case.qid]
        if result.outcome == "promoted":
            revision = (case.golden_revision or 0) + 1
            line = dict(case.raw)
            golden = dict(line["golden"])
            golden.update(status="verified", verifiedBy=result.verified_by, verifiedAt=stamped)
            line["golden"] = golden
            line["goldenRevision"] = revision
            replace[case.line] = line
            result = Promotion(result.qid, result.kind, "promoted", result.detail, revision,
                               result.verified_by)
        final.append(result)
    if replace:
        rewrite_jsonl(Path(set_dir) / CASES_FILE, replace=replace)
    return PromoteReport(str(set_dir), final)


def render_text(report: PromoteReport) -> str:
    out = []
    for p in report.promotions:
        rev = f" (goldenRevision {p.golden_revision})" if p.outcome == "promoted" else ""
        out.append(f"{p.outcome:<16} {p.qid} [{p.kind or '-'}]: {p.detail}{rev}")
    counts: dict[str, int] = {}
    for p in report.promotions:
        counts[p.outcome] = counts.get(p.outcome, 0) + 1
    out.append(", ".join(f"{n} {k}" for k, n in counts.items()) or "no case named")
    return "\n".join(out)
