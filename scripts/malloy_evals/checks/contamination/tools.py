"""What kind of tool a tool use is, from its name: file, search, shell, fetch, MCP, Publisher."""

from __future__ import annotations

import re
from typing import Literal

ToolKind = Literal["mcp", "shell", "fetch", "grep", "glob", "list", "file", "other"]

_PUBLISHER_KEYS = frozenset({
    "getcontext", "executequery", "getstatus", "reloadpackage", "listpackages", "listprojects",
    "listmodels", "getmodel", "compilemodel", "searchmalloydocs", "searchdatabaseschema",
})
_SHELL_WORDS = frozenset({"bash", "shell", "sh", "zsh", "terminal", "powershell", "pwsh", "cmd"})
_SHELL_NAMES = frozenset({"runterminalcmd", "executecommand", "runcommand", "localshell",
                          "execcommand", "runshellcommand", "shellcommand", "containerexec"})
_FILE_WORDS = frozenset({"read", "write", "edit", "multiedit", "notebookread", "notebookedit",
                         "view", "file", "files", "cat", "open", "create", "str", "replace",
                         "move", "copy", "delete", "mkdir", "rm", "head", "tail", "stat"})
_FETCH_WORDS = frozenset({"webfetch", "fetch", "http", "curl", "browse", "url", "download"})
TREE_NAMES = ("directorytree", "tree")
_LIST_NAMES = frozenset({"ls", "listdir", "listdirectory", "listfiles", "directorytree", "tree",
                         "listallowed", "dirlist"})


def name_words(name: str) -> set[str]:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return {w for w in re.split(r"[^a-z0-9]+", snake.lower()) if w}


def split_tool(name: str) -> tuple[str, str]:
    """(server, bare tool name) of `mcp__server__tool`; ("", name) for a host tool."""
    if not name.startswith("mcp__"):
        return "", name
    parts = name.split("__", 2)
    return (parts[1], parts[2]) if len(parts) == 3 else ("", parts[-1])


def is_publisher_tool(name: str) -> bool:
    """Whether a tool is the Publisher's (malloy_*, or any tool of a publisher/malloy server):
    the only MCP tools whose paths the rule-2 exemption covers wholesale."""
    server, bare = split_tool(name)
    key = re.sub(r"[^a-z0-9]", "", bare.lower())
    return key.startswith("malloy") or key in _PUBLISHER_KEYS or (
        bool(server) and any(w in name_words(server) for w in ("publisher", "malloy")))


def tool_kind(name: str) -> ToolKind:
    """What a host tool can do, from its name (Claude Code's names and common others)."""
    prefixed = name.startswith("mcp__")
    _server, bare = split_tool(name)
    key = re.sub(r"[^a-z0-9]", "", bare.lower())
    words = name_words(bare)
    if is_publisher_tool(name):
        return "mcp"
    if words & _SHELL_WORDS or key in _SHELL_NAMES:
        return "shell"
    if "grep" in words or "ripgrep" in words or key in ("searchfiles", "grepsearch", "rg"):
        return "grep"
    if "glob" in words or key in ("filesearch", "findfiles", "globfiles"):
        return "glob"
    if key in _LIST_NAMES:
        return "list"
    if words & _FETCH_WORDS:
        return "fetch"
    if words & _FILE_WORDS:
        return "file"
    return "mcp" if prefixed else "other"
