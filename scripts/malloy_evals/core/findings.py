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
