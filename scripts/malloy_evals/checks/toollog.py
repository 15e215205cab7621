"""The one reader of host tool uses: a host tool-use log or a Claude Code transcript.

`read_tool_uses(path)` decides which of the two a file is and returns every host tool use it
records, in order, with the reported call count and the working directory when the file carries
them. Contamination (reference/contamination.md) and transcript ingestion both read tool uses
through it, so the two can never disagree about what the answerer did.

Accepted shapes:
- a host log: one JSON object `{"toolUses": [{"name", "input"}], "reportedCalls": N, "cwd": DIR}`
  (aliases `tool_uses`, `tool`, `arguments`, `args`, `reported_calls`), a bare JSON list of tool
  uses, or JSON lines with one tool use per line;
- a Claude Code transcript: stream-json lines (`system` init with `cwd`, `assistant` messages with
  `tool_use` blocks, `user` messages with `tool_result` blocks, a final `result` line), a saved
  session `.jsonl` (every line carries `cwd`), or the JSON array `--output-format json --verbose`
  prints.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from malloy_evals.core import jsonl
from malloy_evals.core.errors import InputError
from malloy_evals.core.words import shown

LogKind = Literal["host_log", "transcript"]

_TOOL_USES_KEYS = ("toolUses", "tool_uses")
_REPORTED_KEYS = ("reportedCalls", "reported_calls")
_NAME_KEYS = ("name", "tool", "tool_name")
_INPUT_KEYS = ("input", "arguments", "args", "parameters")
_TRANSCRIPT_TYPES = frozenset({"system", "assistant", "user", "result", "summary"})
# Content blocks that are tool uses: the host's own, a server tool's, an MCP connector's.
_TOOL_USE_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


@dataclass(frozen=True)
class ToolUse:
    """One host tool use as logged: the tool's name and its input (normally an object)."""

    name: str
    input: Any            # a dict for well-formed entries; a non-object entry is kept as logged
    id: str | None = None  # the transcript's tool_use id; None in host logs


@dataclass(frozen=True)
class ToolLog:
    """Every host tool use one file records, plus what the file says about the session."""

    tool_uses: list[ToolUse]
    reported_calls: int | None  # from the host log's reportedCalls; transcripts never carry it
    cwd: str | None             # the session's working directory when the file names it
    kind: LogKind
    warnings: list[str] = field(default_factory=list)
    # A transcript's records (every JSON value, in order), so what else a reader needs from the
    # session (results, the answer, usage) comes from this one reading of the file.
    records: list[Any] = field(default_factory=list)


def read_tool_uses(path: str | Path) -> ToolLog:
    """Read a host tool-use log or a Claude Code transcript; bad input raises InputError (exit 3)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, None, f"not UTF-8 text (byte {exc.start})") from None
    return parse_tool_log(text, path)


def parse_tool_log(text: str, path: str | Path = "<log>") -> ToolLog:
    """The same as read_tool_uses, over text already in memory (`path` names it in errors)."""
    if not text.strip():
        raise InputError(path, None, "empty file: no tool-use log or transcript in it")
    try:
        whole = jsonl.loads(text)
    except json.JSONDecodeError as exc:
        whole = _NOT_ONE_DOCUMENT
        _raise_if_one_broken_document(text, exc, path)
    if whole is not _NOT_ONE_DOCUMENT:
        return _from_document(whole, path)
    records, warnings = jsonl.json_lines(text, path)
    if any(_is_transcript_record(r) for _, r in records):
        return _from_transcript(records, path, warnings)
    if all(_looks_like_tool_use(r) for _, r in records):
        uses = [_host_entry(r, path, line, warnings) for line, r in records]
        return ToolLog(tool_uses=uses, reported_calls=None, cwd=None, kind="host_log",
                       warnings=warnings)
    raise InputError(path, records[0][0] if records else None,
                     "neither a host tool-use log nor a Claude Code transcript")


_NOT_ONE_DOCUMENT = object()


def _parses_alone(line: str) -> bool:
    try:
        jsonl.loads(line)
    except ValueError:
        return False
    return True


def _raise_if_one_broken_document(text: str, exc: json.JSONDecodeError,
                                  path: str | Path) -> None:
    """A pretty-printed log that fails to parse is one broken document: name the line where the
    parse stopped, not line 1. It is told from JSON lines by no line being an object by itself."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or _parses_alone(lines[0]):
        return
    if any(line.lstrip().startswith("{") and _parses_alone(line) for line in lines[1:]):
        return  # JSON lines with a bad line: jsonl.json_lines names it
    raise InputError(path, exc.lineno, f"not JSON: {exc.msg}") from None


def _has_any(obj: dict[str, Any], keys: tuple[str, ...]) -> bool:
    return any(k in obj for k in keys)


def _looks_like_tool_use(record: Any) -> bool:
    """A bare tool-use record: a name and an input (a lone `name` is too common to trust)."""
    return (isinstance(record, dict) and _has_any(record, _NAME_KEYS)
            and (_has_any(record, _INPUT_KEYS) or "tool" in record))


def _is_transcript_record(record: Any) -> bool:
    return isinstance(record, dict) and _kind(record) in _TRANSCRIPT_TYPES


def _kind(record: dict[str, Any]) -> str | None:
    """A record's or block's `type` when it is a string (anything else is no known type)."""
    kind = record.get("type")
    return kind if isinstance(kind, str) else None


def _from_document(doc: Any, path: str | Path) -> ToolLog:
    """One JSON document: a host log object, a list of tool uses, or a transcript array."""
    warnings: list[str] = []
    if isinstance(doc, dict) and _has_any(doc, _TOOL_USES_KEYS):
        return _from_host_object(doc, path)
    if isinstance(doc, dict) and doc.get("type") == "result":
        # `--output-format json` without --verbose keeps only the result: the tool uses are gone,
        # and reading it as "no tool uses" would pass a session nobody can check.
        raise InputError(path, None, "a result-only document carries no tool uses; "
                         "record the session with --output-format stream-json (or json --verbose)")
    if isinstance(doc, dict) and _is_transcript_record(doc):
        return _from_transcript([(1, doc)], path, warnings)
    if isinstance(doc, list):
        if any(_is_transcript_record(r) for r in doc):
            return _from_transcript([(None, r) for r in doc], path, warnings)
        if all(_looks_like_tool_use(r) for r in doc):
            uses = [_host_entry(r, path, None, warnings) for r in doc]
            return ToolLog(tool_uses=uses, reported_calls=None, cwd=None, kind="host_log",
                           warnings=warnings)
    raise InputError(path, None, "neither a host tool-use log (no toolUses list) "
                     "nor a Claude Code transcript")


def _from_host_object(doc: dict[str, Any], path: str | Path) -> ToolLog:
    warnings: list[str] = []
    key = next(k for k in _TOOL_USES_KEYS if k in doc)
    if all(k in doc for k in _TOOL_USES_KEYS):
        warnings.append(f"{path}: both toolUses and tool_uses present; read toolUses")
    entries = doc[key]
    if not isinstance(entries, list):
        raise InputError(path, None, f"{key}: expected a list of tool uses, got {_type(entries)}")
    uses = [_host_entry(e, path, None, warnings, index=i) for i, e in enumerate(entries)]
    reported = _reported_calls(doc, path)
    cwd = doc.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise InputError(path, None, f"cwd: expected a string, got {_type(cwd)}")
    return ToolLog(tool_uses=uses, reported_calls=reported, cwd=cwd or None, kind="host_log",
                   warnings=warnings)


def _reported_calls(doc: dict[str, Any], path: str | Path) -> int | None:
    key = next((k for k in _REPORTED_KEYS if k in doc), None)
    if key is None or doc[key] is None:
        return None
    value = doc[key]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(path, None, f"{key}: expected a count (an integer >= 0), got {shown(value)}")
    return value


def _host_entry(entry: Any, path: str | Path, line: int | None, warnings: list[str],
                index: int | None = None) -> ToolUse:
    """One logged tool use. A malformed entry is still a tool use: it counts, and is scanned."""
    where = f"{path}:{line}" if line is not None else f"{path}: toolUses[{index}]"
    if not isinstance(entry, dict):
        warnings.append(f"{where}: not an object; counted and scanned as logged")
        return ToolUse(name="", input=entry)
    name = next((entry[k] for k in _NAME_KEYS if isinstance(entry.get(k), str)), "")
    if not name:
        warnings.append(f"{where}: no tool name")
    raw: Any = next((entry[k] for k in _INPUT_KEYS if k in entry), {})
    return ToolUse(name=name, input=_decoded_input(raw),
                   id=entry["id"] if isinstance(entry.get("id"), str) else None)


def _decoded_input(raw: Any) -> Any:
    """Some hosts log arguments as a JSON-encoded string (function-calling APIs): decode it."""
    if isinstance(raw, str):
        stripped = raw.strip()
        if stripped.startswith("{"):
            try:
                value = jsonl.loads(stripped)
            except ValueError:
                return raw
            if isinstance(value, dict):
                return value
    return raw if raw is not None else {}


def _from_transcript(records: Sequence[tuple[int | None, Any]], path: str | Path,
                     warnings: list[str]) -> ToolLog:
    """Tool uses from a transcript's assistant messages, in order, each tool_use id once.

    Saved sessions and newer stream-json split one assistant message over several lines, and
    a resumed session may repeat a block: the id, not the line, identifies a tool use. Subagent
    (sidechain) tool uses are host tool uses too, so they count.
    """
    uses: list[ToolUse] = []
    seen: set[str] = set()
    cwd: str | None = None
    for line, record in records:
        if not isinstance(record, dict):
            continue
        _check_type(record, path, line, "type")
        if cwd is None and isinstance(record.get("cwd"), str) and record["cwd"]:
            cwd = record["cwd"]
        if record.get("type") != "assistant":
            continue
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            _check_type(block, path, line, "message.content[].type")
            if _kind(block) not in _TOOL_USE_BLOCKS:
                continue
            block_id = got if isinstance(got := block.get("id"), str) else None
            if block_id is not None:
                if block_id in seen:
                    continue
                seen.add(block_id)
            name = block["name"] if isinstance(block.get("name"), str) else ""
            uses.append(ToolUse(name=name, input=_decoded_input(block.get("input")), id=block_id))
    return ToolLog(tool_uses=uses, reported_calls=None, cwd=cwd, kind="transcript",
                   warnings=warnings, records=[record for _, record in records])


def _check_type(record: dict[str, Any], path: str | Path, line: int | None, where: str) -> None:
    """A transcript record or content block whose `type` is there but not a string cannot be
    read: which tool uses it holds is unknown, so the file is refused rather than half-read."""
    if "type" in record and not isinstance(record["type"], str) and record["type"] is not None:
        raise InputError(path, line, f"{where}: expected a string, got {_type(record['type'])}")


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__
