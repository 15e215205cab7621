"""Property-based fuzzing of the kit's readers of outside files (hostile input).

Every reader of a file the kit did not write (transcripts, host logs, set files, ledgers,
recordings, replies, reports) must either read it or refuse it with one `KitError` line naming the
file: never another exception (a traceback), never a half-written result. The strategies here
make such files from real ones: a value somewhere in a JSON document replaced by a hostile one
(an object where a string was, a lone surrogate, a huge number, deep nesting), or the bytes of
the file damaged (cut, invalid UTF-8, a stray byte).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from malloy_evals.core.errors import InputError, KitError

# Modest budgets: the suite stays fast; each reader gets this many generated files per run.
# MALLOY_EVALS_FUZZ_EXAMPLES=2000 digs deeper by hand.
FUZZ = settings(max_examples=int(os.environ.get("MALLOY_EVALS_FUZZ_EXAMPLES", "60")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

HOSTILE_SCALARS = st.sampled_from([
    None, True, False, 0, -1, 2**70, 1.5, -0.0, 1e308, "", "x", "\ud800", "\udfff", "\u202e\u200b",
    "type", "assistant", "tool_use", "result", "../../etc/passwd", "a" * 5000])
JSON_VALUES = st.recursive(
    HOSTILE_SCALARS | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "message", "content", "id", "name", "input", "text", "kind",
                         "qid", "sample", "verdict", "replies", "samples", "x"]) | st.text(max_size=8),
        inner, max_size=4),
    max_leaves=12)


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` with one value (found by a random walk from the top) replaced by a hostile one."""
    if isinstance(doc, dict) and doc and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(doc, key=str)))
        return {**doc, key: draw(mutated(doc[key]))}
    if isinstance(doc, list) and doc and draw(st.booleans()):
        i = draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], draw(mutated(doc[i])), *doc[i + 1:]]
    return draw(JSON_VALUES | st.just([[[[[[[[[[[]]]]]]]]]]]))


@st.composite
def mutated_lines(draw: st.DrawFn, lines: list[Any]) -> str:
    """JSON lines text of `lines` with one to three of them mutated."""
    out = list(lines)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(out) - 1))
        out[i] = draw(mutated(out[i]))
    return "".join(json.dumps(line) + "\n" for line in out)


@st.composite
def damaged_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` cut short, or with invalid UTF-8, a stray byte, or deep nesting put in somewhere."""
    at = draw(st.integers(0, len(data)))
    insert = draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"{", b"]", b"\n", b'"\\ud800"',
                                   b"[" * 5000, b"1" * 5000, b"NaN"]))
    if draw(st.booleans()):
        return data[:at]
    return data[:at] + insert + data[at:]


def read_lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def reads_or_refuses(read: Callable[[], Any], path: Path, *also: Path) -> Any:
    """Call a reader: its result, or None when it refused with one KitError line (an InputError
    names `path`, or one of the files it goes with: `also`). Any other exception fails the test
    (it would be a traceback for the user)."""
    try:
        return read()
    except KitError as exc:
        message = str(exc)
        assert "\n" not in message, f"a refusal is one line: {message!r}"
        if isinstance(exc, InputError):
            assert any(p.name in message for p in (path, *also)), f"a refusal names the file: {message!r}"
        return None


SAMPLE_TRANSCRIPTS = sorted((Path(__file__).resolve().parents[1] / "evals" / "bookshop"
                             / "transcripts").rglob("*.jsonl"))


def mutated_transcript(data: st.DataObject, folder: Path) -> Path:
    """A sample transcript with one to three lines mutated, written to `folder`/t.jsonl."""
    source = data.draw(st.sampled_from(SAMPLE_TRANSCRIPTS))
    path = folder / "t.jsonl"
    path.write_text(data.draw(mutated_lines(read_lines(source))))
    return path


def mutated_report(data: st.DataObject, folder: Path) -> Path:
    """A small check_coverage report, mutated or with damaged bytes, written to `folder`."""
    report = {"cases_detail": [{"qid": "q1", "verdict": "MODELLED"}, {"qid": "q2", "verdict": None}],
              "decided": 1, "coverage": 1.0}
    path = folder / "coverage.json"
    raw = json.dumps(data.draw(mutated(report))).encode()
    path.write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    return path


def mutated_set_file(data: st.DataObject, source: Path, target: Path) -> str:
    """Overwrite the set folder `target` (a copy of `source`)'s set.json or cases.jsonl with the
    source's, mutated or with damaged bytes; returns the file's name."""
    name = data.draw(st.sampled_from(["set.json", "cases.jsonl"]))
    if name == "set.json":
        text = json.dumps(data.draw(mutated(json.loads((source / name).read_text()))))
    else:
        text = data.draw(mutated_lines(read_lines(source / name)))
    raw = text.encode("utf-8", "backslashreplace")
    (target / name).write_bytes(data.draw(damaged_bytes(raw)) if data.draw(st.booleans()) else raw)
    return name
