"""The kit's exceptions: input, usage and could-not-measure failures, each mapped to an exit code.

Findings (contaminated, veto hit, invalid ledger) are never exceptions: they are result values
with exit code 1. Exceptions are for the edges, where a script cannot go on.
"""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_USAGE = 2
EXIT_UNMEASURED = 3


class KitError(Exception):
    """A failure a script reports as one line on stderr, without a traceback."""

    exit_code = EXIT_UNMEASURED


class InputError(KitError):
    """Bad input: names the file and, when known, the line (`cases.jsonl:17: golden.kind: ...`)."""

    def __init__(self, path: str | Path | None, line: int | None, message: str):
        self.path = None if path is None else str(path)
        self.line = line
        self.message = message
        super().__init__(self.location_message())

    def location_message(self) -> str:
        if self.path is None:
            return self.message
        if self.line is None:
            return f"{self.path}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"


class UsageError(KitError):
    """A flag combination argparse cannot express was wrong (exit 2)."""

    exit_code = EXIT_USAGE


class UnmeasuredError(KitError):
    """The thing to measure could not be reached or read: server down, runtime missing (exit 3)."""

    exit_code = EXIT_UNMEASURED
