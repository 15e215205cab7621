"""Problems a validator found, each naming a file and a line: the one finding type."""

from __future__ import annotations

from dataclasses import dataclass


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
