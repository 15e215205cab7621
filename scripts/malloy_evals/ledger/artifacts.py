"""Reading an attempt's re-executed prediction back from its write-once artifacts."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core import jsonl
from malloy_evals.core.errors import InputError
from malloy_evals.ledger.run import Run


@dataclass(frozen=True)
class PredictionView:
    """What the judge sees of the final query's result: the kit's own rows, or the error."""

    rows: list[dict] | None
    row_count: int | None
    error: str | None = None
    path: str | None = None        # artifact path relative to the run, for the score's pin
    origin: str = "re-executed by the kit"  # or "claimed by the calibration answer, ..."


_NUM = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


_NUMBER_DIGITS = 300  # longer runs of digits are text: no column type of the runner holds one


def _cell(text: str | None) -> Any:
    if text is None or text == "":
        return None
    if len(text) <= _NUMBER_DIGITS and _NUM.fullmatch(text):
        return int(text) if re.fullmatch(r"-?(0|[1-9][0-9]*)", text) else float(text)
    return text


# A re-executed cell may be as long as the result's byte cap allows (reference/query-budgets.md);
# the csv module's default limit (128 KiB a field) would refuse to read it back.
csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))


def read_csv_rows(text: str) -> list[dict]:
    """Rows of a prediction CSV (header first), numbers as numbers, order kept."""
    return [{k: _cell(v) for k, v in row.items() if k is not None}
            for row in csv.DictReader(io.StringIO(text, newline=""))]


def read_prediction_csv(path: Path) -> list[dict]:
    """The rows of a prediction CSV artifact; InputError (exit 3) naming it when it cannot be
    read (a run folder is anyone's to edit)."""
    try:
        return read_csv_rows(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot be read: {getattr(exc, 'strerror', None) or exc}") from None


def _numbered(path: Path) -> int:
    m = re.search(r"\.(\d+)\.[^.]+$", path.name)
    return int(m.group(1)) if m else 1


def latest_artifact(folder: Path, stem: str, suffix: str) -> Path | None:
    """The newest write-once artifact `stem.suffix` / `stem.N.suffix` in a folder."""
    found = [p for p in folder.glob(f"{stem}*{suffix}")
             if re.fullmatch(rf"{re.escape(stem)}(\.\d+)?{re.escape(suffix)}", p.name)]
    return max(found, key=_numbered) if found else None


def read_prediction(run: Run, qid: str, sample: int | None) -> PredictionView | None:
    """The latest re-executed prediction in an attempt's artifacts (reexecute.py wrote it), or None."""
    folder = run.artifact_dir(qid, sample)
    if not folder.is_dir():
        return None
    csv_path = latest_artifact(folder, "prediction", ".csv")
    env_path = latest_artifact(folder, "envelope", ".json")
    envelope: dict = {}
    if env_path is not None:
        try:
            loaded = jsonl.loads(env_path.read_text(encoding="utf-8"))
            envelope = loaded if isinstance(loaded, dict) else {}
        except (ValueError, OSError):
            envelope = {}
    error = envelope.get("error")
    if csv_path is None and not error:
        # A query the server refused is a result too: reexecute.py kept its error on its own.
        err_path = latest_artifact(folder, "reexecute_error", ".json")
        if err_path is None:
            return None
        try:
            loaded = jsonl.loads(err_path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            return None
        refused = loaded.get("error") if isinstance(loaded, dict) else None
        if not refused:
            return None
        return PredictionView(rows=None, row_count=None, error=str(refused),
                              path=run.relpath(err_path))
    rows = read_prediction_csv(csv_path) if csv_path else []
    count = envelope.get("row_count")
    return PredictionView(rows=rows, row_count=count if isinstance(count, int) else len(rows),
                          error=str(error) if error else None,
                          path=run.relpath(found) if (found := csv_path or env_path) else None)
