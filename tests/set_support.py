"""The sample set as tests change it: a copy without its recorded runs, and a case found by its
line in cases.jsonl."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

BOOKSHOP = Path(__file__).resolve().parents[1] / "evals" / "bookshop"


def bookshop_copy(dest: Path) -> Path:
    """A copy of the sample set at `dest` without its runs, transcripts and recordings (the
    parts a test that edits the set never reads). Returns `dest`."""
    shutil.copytree(BOOKSHOP, dest, ignore=shutil.ignore_patterns("runs", "transcripts",
                                                                   "recordings"))
    return dest


def case_line(set_dir: Path, qid: str) -> tuple[int, dict]:
    """The 1-based line number of case `qid` in the set's cases.jsonl, and the case."""
    for n, line in enumerate((set_dir / "cases.jsonl").read_text().splitlines(), 1):
        case = json.loads(line)
        if case["qid"] == qid:
            return n, case
    raise AssertionError(f"no case {qid} in {set_dir / 'cases.jsonl'}")
