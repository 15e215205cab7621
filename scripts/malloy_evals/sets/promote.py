"""promote_golden: move a golden from provisional to verified, and only on evidence.

A `scalar` or `rows` golden is promoted only when `verify_goldens` re-derives it from the truth
package (its canonical query gives the stored value); a `criteria` or `unanswerable` golden has
no value to re-derive, so a person attests it (`attest=True`, `by=NAME`). Promotion bumps
`goldenRevision` (scores pinned to the old revision go stale and are re-scored) and records
`verifiedBy` / `verifiedAt` on the golden. It rewrites only the promoted cases' lines of
cases.jsonl; every other byte of the file stays as it was.

Goldens change safely: one promote_golden per set at a time (a lock file beside cases.jsonl; a
second exits 3 naming the holder), and a line is rewritten only when it still holds the bytes it
was read with (compare-and-swap on the qid and the line's digest): a case edited meanwhile stops
the whole promotion (exit 3, naming it) and the file is left as the editor left it. A canonical
query whose compiled SQL reads no table of the truth package or data/ (a constant) did not derive
anything: refused as `not derived` (exit 3), unless a person attests it (`--attest --by`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core import files, jsonl
from malloy_evals.core.errors import (
    EXIT_FINDING,
    EXIT_OK,
    EXIT_UNMEASURED,
    InputError,
    UnmeasuredError,
)
from malloy_evals.sets.eval_set import CASES_FILE, VALUE_KINDS, Case, dump_like, load_set
from malloy_evals.sets.goldens import verify_goldens

ATTESTED_KINDS = ("criteria", "unanswerable")  # no value to re-derive: a person vouches
PROMOTE_LOCK = ".promote.lock"   # beside cases.jsonl: one promote_golden per set at a time
NOT_DERIVED = "not derived"


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
        if any(p.outcome in ("error", NOT_DERIVED) for p in self.promotions):
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
    with _set_lock(Path(set_dir)):
        return _promote_locked(Path(set_dir), qids, all_cases=all_cases, attest=attest, name=name,
                               runtime_factory=runtime_factory, now=now)


@contextlib.contextmanager
def _set_lock(set_dir: Path) -> Iterator[None]:
    """One promote_golden per set: the lock file beside cases.jsonl, taken at once or never."""
    if not set_dir.is_dir():
        raise InputError(set_dir, None, "not a folder")
    path = set_dir / PROMOTE_LOCK
    fd = files.open_append(path, set_dir)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text(encoding="utf-8", errors="replace").strip()
            raise UnmeasuredError(f"{set_dir}: another promote_golden.py holds {PROMOTE_LOCK} "
                                  f"({holder or 'holder unknown'}); wait for it") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"promote_golden.py: pid {os.getpid()} since {_now()}\n".encode())
        yield
    finally:
        os.close(fd)


def _line_sha(raw: bytes) -> str:
    return hashlib.sha256(raw.rstrip(b"\r")).hexdigest()


def _lines_as_read(path: Path, chosen: Sequence[Case]) -> dict[str, str]:
    """Each chosen case's line digest, read right after the set was loaded; a line that no longer
    holds what the loader read (edited in between) stops the promotion here."""
    lines = path.read_bytes().split(b"\n")
    out = {}
    for case in chosen:
        raw = lines[case.line - 1] if case.line - 1 < len(lines) else b""
        try:
            same = jsonl.loads(raw.decode("utf-8-sig")) == case.raw
        except (UnicodeDecodeError, ValueError):
            same = False
        if not same:
            raise _changed(path, case.qid, case.line)
        out[case.qid] = _line_sha(raw)
    return out


def _changed(path: Path, qid: str, line: int | None) -> InputError:
    return InputError(path, line, f"{qid}: its line changed while promote_golden.py worked (edited "
                                  "by someone else?); nothing was written: run it again")


def _swap_lines(path: Path, swaps: dict[str, tuple[str, Any]]) -> None:
    """Compare and swap: rewrite each qid's line with its new object only when the file holds
    exactly one line of that qid and that line still has the digest it was read with; otherwise
    InputError (exit 3) naming the case, and nothing written. Every other byte is kept."""
    lines = path.read_bytes().split(b"\n")
    where: dict[str, list[int]] = {}
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            obj = jsonl.loads(raw.decode("utf-8-sig"))
        except (UnicodeDecodeError, ValueError):
            continue
        qid = obj.get("qid") if isinstance(obj, dict) else None
        if isinstance(qid, str) and qid.lower() in {q.lower() for q in swaps}:
            where.setdefault(qid.lower(), []).append(i)
    for qid, (digest, _) in swaps.items():
        found = where.get(qid.lower(), [])
        if len(found) != 1 or _line_sha(lines[found[0]]) != digest:
            raise _changed(path, qid, found[0] + 1 if len(found) == 1 else None)
    for qid, (_, obj) in swaps.items():
        i = where[qid.lower()][0]
        ending = b"\r" if lines[i].endswith(b"\r") else b""
        lines[i] = dump_like(obj, lines[i]) + ending
    files.replace(path, b"\n".join(lines))


def _promote_locked(set_dir: Path, qids: Sequence[str] | None, *, all_cases: bool, attest: bool,
                    name: str, runtime_factory: Callable[..., Any] | None,
                    now: Callable[[], str]) -> PromoteReport:
    eval_set = load_set(set_dir)
    if all_cases:
        chosen = [c for c in eval_set.cases.values() if c.golden_status == "provisional"]
    else:
        wanted = {q.lower() for q in qids or []}
        unknown = sorted(wanted - {q.lower() for q in eval_set.cases})
        if unknown:
            raise InputError(Path(set_dir) / CASES_FILE, None, f"no case with qid {', '.join(unknown)}")
        chosen = [c for c in eval_set.cases.values() if c.qid.lower() in wanted]
    as_read = _lines_as_read(set_dir / CASES_FILE, chosen)

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
            elif check.reads is not None and not check.reads:
                # The value came out of the query itself (a constant), not out of the data.
                if attest:
                    results[case.qid] = Promotion(
                        case.qid, case.golden_kind, "promoted", "attested (reads no table)",
                        verified_by=f"attested by {name}; its canonical query reads no table")
                else:
                    results[case.qid] = Promotion(case.qid, case.golden_kind, NOT_DERIVED, (
                        "its canonical query reads no table of the truth package or data/ "
                        "(its value comes from the query itself): not derived; a person may "
                        "vouch for it with --attest --by NAME"))
            elif attest:
                results[case.qid] = Promotion(case.qid, case.golden_kind, "refused", (
                    f"{_a(case.golden_kind)} golden is promoted only by re-deriving it from the "
                    "truth package; --attest is for criteria and unanswerable goldens"))
            else:
                who = f"re-derived from truth package {truth} by promote_golden.py"
                if name:
                    who += f" ({name})"
                results[case.qid] = Promotion(case.qid, case.golden_kind, "promoted",
                                              "re-derived", verified_by=who)

    swaps: dict[str, tuple[str, Any]] = {}
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
            swaps[case.qid] = (as_read[case.qid], line)
            result = Promotion(result.qid, result.kind, "promoted", result.detail, revision,
                               result.verified_by)
        final.append(result)
    if swaps:
        _swap_lines(set_dir / CASES_FILE, swaps)
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
