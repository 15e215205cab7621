"""Reading one host tool use into what it touches, whatever the tool."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

from malloy_evals.checks.contamination.commands import brace_expand, see_shell
from malloy_evals.checks.contamination.refs import Ref, to_ref
from malloy_evals.checks.contamination.tools import (
    TREE_NAMES,
    is_publisher_tool,
    name_words,
    split_tool,
    tool_kind,
)
from malloy_evals.checks.contamination.touches import (
    COMMAND_KEYS,
    CWD_KEYS,
    GLOB_KEYS,
    GREP_FILTER_KEYS,
    MODEL_PATH_KEYS,
    PATH_KEYS,
    PROSE_KEYS,
    URL_KEYS,
    URL_RE,
    Seen,
    State,
    Sweep,
    Touch,
    embedded,
    glob_split,
    keyed,
    path_touch,
    strings_in,
)
from malloy_evals.checks.toollog import ToolUse

# A tool that starts a subagent (Claude Code's Task, an Agent tool) with a prompt.
_SUBAGENT_WORDS = frozenset({"task", "agent", "subagent"})


def see(use: ToolUse, state: State) -> Seen:
    """Everything one tool use names, by tool kind."""
    seen = Seen()
    name = use.name or ""
    kind = tool_kind(name) if name else "other"
    data = use.input
    if not isinstance(data, dict):
        # A malformed entry is still evidence: read every string in it as free text.
        for text in strings_in(data):
            seen.touches.extend(embedded(text, state.cwd, literals_path_like=True))
        return seen
    cwd = state.cwd
    for value in keyed(data, CWD_KEYS):
        seen.touches.append(path_touch(value, cwd))
        cwd = to_ref(value, cwd)
    words = name_words(split_tool(name)[1])
    if "git" in words and words & {"show", "diff", "log"} and not is_publisher_tool(name):
        # A git tool (mcp__git__git_show) prints contents from the whole repository it names.
        for value in list(keyed(data, PATH_KEYS)) or ["."]:
            seen.sweeps.append(Sweep(root=to_ref(value.replace("\\", "/"), cwd), pattern=None))
    if kind == "mcp":
        _see_mcp(data, cwd, seen, publisher=is_publisher_tool(name))
        return seen
    if kind == "other" and words & _SUBAGENT_WORDS:
        # A subagent (Task) handed a path has reached it, whatever the log shows of the
        # subagent's own calls: every path its prompt names is a touch. The model file it may
        # name (the Publisher serves it to the subagent too) is not the answer key.
        for text in strings_in(data):
            seen.touches.extend(embedded(text, cwd, literals_path_like=True, exempt=True))
        return seen
    for value in keyed(data, URL_KEYS):
        seen.touches.extend(embedded(value, cwd, literals_path_like=True)
                            or [Touch(text=value, ref=to_ref(value), path_like=True, url=True)])
    path_values = list(keyed(data, PATH_KEYS - {"uri"}))
    for value in path_values:
        seen.touches.append(path_touch(value, cwd))
    if kind == "shell":
        for command in _command_texts(data):
            cwd = see_shell(command, cwd, state, seen)
        state.cwd = cwd
    elif kind == "grep":
        roots = path_values or ["."]
        filters = tuple(keyed(data, GREP_FILTER_KEYS))
        if isinstance(data.get("type"), str) and data["type"].strip():
            filters += (f"*.{data['type'].strip()}",)
        for root in roots:
            seen.sweeps.append(Sweep(root=to_ref(root.replace("\\", "/"), cwd), pattern=None,
                                     filters=filters))
        for value in filters:
            seen.touches.append(Touch(text=value, ref=to_ref(value), path_like=False))
    elif kind == "glob":
        glob_root = (to_ref(path_values[0].replace("\\", "/"), cwd) if path_values
                     else cwd or Ref(False, ()))
        for given in keyed(data, GLOB_KEYS):
            for pattern in brace_expand(given):  # the Glob tool expands `{a,b}`
                fixed, rest = glob_split(pattern, glob_root)
                seen.touches.append(Touch(text=given,
                                          ref=to_ref(pattern.replace("\\", "/"), glob_root),
                                          base=glob_root, path_like=True))
                seen.sweeps.append(Sweep(root=fixed, pattern=rest, kind="glob"))
    elif kind == "list" and re.sub(r"[^a-z]", "", name.lower()).endswith(TREE_NAMES):
        # A tree tool lists everything below its root (MCP filesystem's directory_tree).
        for value in path_values or ["."]:
            seen.sweeps.append(Sweep(root=to_ref(value.replace("\\", "/"), cwd), pattern=None))
    elif kind == "file":
        _remember_written(data, path_values, cwd, state, creates=bool(
            words & {"write", "create"} or data.get("command") == "create"))
    if kind in ("file", "fetch") and not words & {"write", "edit", "create", "todo",
                                                 "multiedit", "replace", "web"}:
        # A reading tool's other inputs (a SQL query: read_csv('/repo/sets/x.csv')) name paths
        # in string literals; its prose fields do not.
        for key, value in data.items():
            lowered = key.lower() if isinstance(key, str) else ""
            if lowered in PATH_KEYS | URL_KEYS | CWD_KEYS | PROSE_KEYS:
                continue
            for text in strings_in(value):
                seen.touches.extend(embedded(text, cwd, literals_path_like=False, runs=False))
    return seen


def _see_mcp(data: dict[str, Any], cwd: Ref | None, seen: Seen, *, publisher: bool = True) -> None:
    """An MCP call: its path-ish arguments, URLs, and quoted literals in its other text.

    Package-relative paths (`modelPath: bookshop.malloy`) are not resolved against the host's cwd:
    the server resolves them. A `modelPath`, and everything a Publisher tool names, is exempt from
    rule 2 (reference/contamination.md); another server's tool (a filesystem or database server)
    reading the model file through a `path` or a query literal is a file tool reading it.
    """
    path_keys = PATH_KEYS | URL_KEYS
    for key_set, exempt in ((MODEL_PATH_KEYS, True), (path_keys - MODEL_PATH_KEYS, publisher)):
        for value in keyed(data, key_set):
            if URL_RE.search(value):
                seen.touches.extend(embedded(value, None, literals_path_like=True, exempt=exempt))
            else:
                seen.touches.append(path_touch(value, None, exempt=exempt))
    for key, value in data.items():
        if isinstance(key, str) and key.lower() in path_keys:
            continue
        for text in strings_in(value):
            # A query's words are not paths (`gold/total` divides two fields): only URLs and
            # string literals count.
            seen.touches.extend(embedded(text, None, literals_path_like=False, exempt=publisher,
                                          runs=False))


def _command_texts(data: dict[str, Any]) -> Iterator[str]:
    for key, value in data.items():
        if not (isinstance(key, str) and key.lower() in COMMAND_KEYS):
            continue
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            yield shlex.join(value)  # argv form (["bash", "-lc", "..."])
        else:
            yield from strings_in(value)


def _remember_written(data: dict[str, Any], paths: list[str], cwd: Ref | None,
                      state: State, *, creates: bool = False) -> None:
    """Keep what the answerer wrote, so a script it runs later can be read for file access;
    a whole file written (not an edit of one) is a file the answerer made."""
    body = [v for k in ("content", "file_text", "new_string", "new_str", "new_source", "text")
            for v in ([data[k]] if isinstance(data.get(k), str) else [])]
    for edit in data.get("edits") or []:
        if isinstance(edit, dict) and isinstance(edit.get("new_string"), str):
            body.append(edit["new_string"])
    if not body:
        return
    whole = creates and not any(k in data for k in ("old_string", "old_str", "edits"))
    for value in paths:
        ref = to_ref(value.replace("\\", "/"), cwd)
        if whole:
            state.made.add(ref)
            state.written[ref] = "\n".join(body)
        else:
            state.written[ref] = state.written.get(ref, "") + "\n" + "\n".join(body)
