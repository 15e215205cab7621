"""Problems a validator found, each naming a file and a line, and the one report of a checked folder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED


@dataclass(frozen=True)
class LineProblem:
    """A problem found in a file of a run or set folder, naming the file and, when known, the line."""

    file: str             # file name relative to the folder, e.g. "events.jsonl"
    line: int | None
    message: str
    level: str = "error"  # "error" or "warning"

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class FolderReport:
    """What a validator found in one folder (a run for validate.py, a set for validate_set.py):
    the one report type, with one JSON shape. An unreadable folder is exit 3; any error, exit 1."""

    dir: str
    readable: bool
    counted: str          # what `count` counts: "events" (a run) or "cases" (a set)
    count: int
    errors: list[str]     # each `file:line: message` (LineProblem's text), or why it is unreadable
    warnings: list[str]   # unknown fields and the like: never change the exit code

    @property
    def status(self) -> str:
        """ok, invalid (some error) or unreadable."""
        if not self.readable:
            return "unreadable"
        return "invalid" if self.errors else "ok"

    @property
    def exit_code(self) -> int:
        if not self.readable:
            return EXIT_UNMEASURED
        return EXIT_FINDING if self.errors else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """`{dir, status, exit_code, <events|cases>: n, errors, warnings}`."""
        return {"dir": self.dir, "status": self.status, "exit_code": self.exit_code,
                self.counted: self.count, "errors": self.errors, "warnings": self.warnings}

    def render(self) -> str:
        """One line for the folder, then its problems (what the scripts print)."""
        counts = f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)"
        detail = ("could not be read" if not self.readable
                  else f"{self.count} {self.counted}; {counts}")
        lines = [f"{self.dir}: {self.status} ({detail})"]
        lines += [f"  error: {e}" for e in self.errors]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# Why a reader of a ledger did not count a live verdict (`Ignored.cause`; ledger/ties.py decides).
UNTIED = "untied"                  # it judged another attempt, or its case has no live one
MISSING_ARTIFACT = "missing artifact"
ALTERED_ARTIFACT = "altered artifact"
STALE = "stale"                    # tied, but judged under pins that are no longer current
SUPERSEDED = "superseded"          # a later live verdict of the same attempt stands in its place
CAUSES = (UNTIED, MISSING_ARTIFACT, ALTERED_ARTIFACT, STALE, SUPERSEDED)


@dataclass(frozen=True)
class Ignored:
    """A live verdict event a reader did not count, the line it is on, and why."""

    file: str            # the ledger as the reader was given it (`runs/r1/events.jsonl`)
    line: int | None     # None for events held in memory
    kind: str
    qid: str
    sample: int | None
    cause: str           # one of CAUSES
    why: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        sample = "_" if self.sample is None else self.sample
        return f"{where}: {self.kind} {self.qid} (sample {sample}) ignored, {self.cause}: {self.why}"


def ignored_counts(ignored: list[Ignored]) -> str | None:
    """`3 event(s) ignored: 2 untied, 1 stale` (None when nothing was ignored)."""
    if not ignored:
        return None
    counts = {c: sum(1 for i in ignored if i.cause == c) for c in CAUSES}
    return (f"{len(ignored)} event(s) ignored: "
            + ", ".join(f"{n} {c}" for c, n in counts.items() if n))


def ignored_lines(ignored: list[Ignored]) -> list[str]:
    """What a reader says of the verdicts it did not count: one line each, then the count."""
    counts = ignored_counts(ignored)
    return [*(str(i) for i in ignored), *([counts] if counts else [])]
