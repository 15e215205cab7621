"""What a blind answerer is given, and what it is kept from (skills/eval-answer/reference/harness.md).

Each attempt gets a fresh, empty working folder outside the kit, the set and the run; a separate
folder for its inputs (the question exactly as stored, the answerer prompt, the MCP configuration
naming only the endpoint); and an environment from which every variable that names the kit, the
set or the run is removed. Claude Code is offered the endpoint's Publisher tools and nothing
else (claude_cli.py). Unsealed (--no-sandbox) that is a precaution only: a process can still open any file its
user can read. Sealed, sandbox.py wraps the command in bubblewrap and gives it an allow-listed
environment instead. The contamination check on the transcript still runs either way.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import UsageError
from malloy_evals.core.headers import as_references
from malloy_evals.endpoint.mcp_client import canonical_tool_name

# The name the harness gives the endpoint in the answerer's MCP configuration; Claude Code then
# calls its tools `mcp__malloy__<tool>`.
MCP_SERVER_NAME = "malloy"

# The tools an answerer may call, by canonical name: the two the kit records, and the Publisher's
# documentation search when the server offers it (it reads Malloy's docs, never the model's files).
ANSWERER_TOOLS = ("get_context", "execute_query", "search_docs", "search_malloy_docs")

# Variables a child never needs and that name this process's folders whatever their value.
_DROPPED_NAMES = ("OLDPWD", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "CONDA_PREFIX")


def protected_paths(*paths: str | Path | None) -> list[str]:
    """The folders an answerer must not be pointed at, as absolute strings (each also in its
    symlink-resolved form), longest first; None entries are skipped."""
    out: set[str] = set()
    for path in paths:
        if path is None:
            continue
        p = Path(path)
        out.add(str(p.absolute()))
        out.add(str(p.resolve()))
    return sorted(out, key=len, reverse=True)


def _names_protected(value: str, protected: list[str]) -> bool:
    return any(p in value for p in protected)


def child_environment(base: Mapping[str, str], protected: list[str], workdir: Path,
                      extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment an answerer process gets: `base` without any variable naming a protected
    folder. A list variable (PATH and the like) loses only the entries that name one; a variable
    whose name mentions the kit (MALLOY_EVALS...) goes whole. PWD is the working folder."""
    env: dict[str, str] = {}
    for name, value in base.items():
        if name in _DROPPED_NAMES or "MALLOY_EVALS" in name.upper():
            continue
        if not _names_protected(value, protected):
            env[name] = value
            continue
        parts = [p for p in value.split(os.pathsep) if p and not _names_protected(p, protected)]
        if len(value.split(os.pathsep)) > 1 and parts:
            env[name] = os.pathsep.join(parts)
    env["PWD"] = str(workdir)
    env.update(extra or {})
    return env


def mcp_config(url: str, header_vars: Mapping[str, str] | None = None) -> dict:
    """Claude Code's `--mcp-config` document naming only the endpoint; a hosted endpoint's
    headers are written as `${VAR}` references the answerer expands from its own environment
    (header_vars: header name -> variable), never as their values."""
    server: dict[str, Any] = {"type": "http", "url": url}
    if header_vars:
        server["headers"] = as_references(header_vars)
    return {"mcpServers": {MCP_SERVER_NAME: server}}


def answerer_tools(listed: list[str]) -> list[str]:
    """The endpoint's tools an answerer may call, by the server's own names, in its order."""
    return [name for name in listed if canonical_tool_name(name) in ANSWERER_TOOLS]


def withheld_tools(listed: list[str]) -> list[str]:
    """The endpoint's other tools (status, reload): never offered to an answerer."""
    return [name for name in listed if canonical_tool_name(name) not in ANSWERER_TOOLS]


def claude_tool_name(tool: str) -> str:
    """How Claude Code names one of the endpoint's tools: `mcp__malloy__malloy_getContext`."""
    return f"mcp__{MCP_SERVER_NAME}__{tool}"


@dataclass(frozen=True)
class AttemptSpace:
    """The folders and files of one attempt: `workdir` (empty, the child's cwd) and the inputs
    beside it, in a private folder removed when the attempt ends."""

    root: Path
    workdir: Path
    question_file: Path
    prompt_file: Path
    mcp_config: Path
    stdout: Path            # where the child's stdout (the transcript) is captured
    stderr: Path


def temp_base(protected: list[str]) -> Path:
    """The system temporary folder, unless it lies inside a protected folder (then /tmp)."""
    for candidate in (Path(tempfile.gettempdir()), Path("/tmp")):
        resolved = str(candidate.resolve())
        if candidate.is_dir() and not any(resolved == p or resolved.startswith(p + os.sep)
                                          for p in protected):
            return candidate
    raise UsageError("the temporary folder lies inside the kit, the set or the run; set TMPDIR "
                     "to a folder outside them (each attempt runs in a fresh folder there)")


@contextmanager
def attempt_space(protected: list[str], *, question: str, prompt: str,
                  mcp_url: str, header_vars: Mapping[str, str] | None = None
                  ) -> Iterator[AttemptSpace]:
    """Make one attempt's folders and inputs outside every protected folder; remove them after.

    The question file holds the question byte for byte as the set stores it (no newline added).
    The folder's name is random: a qid in it would tell the answerer which case it is on."""
    root = Path(tempfile.mkdtemp(prefix="malloy-evals-attempt-", dir=temp_base(protected)))
    try:
        workdir = root / "work"
        inputs = root / "inputs"
        workdir.mkdir()
        inputs.mkdir()
        space = AttemptSpace(root=root, workdir=workdir, question_file=inputs / "question.txt",
                             prompt_file=inputs / "prompt.md", mcp_config=inputs / "mcp.json",
                             stdout=root / "stdout.jsonl", stderr=root / "stderr.txt")
        space.question_file.write_text(question, encoding="utf-8")
        space.prompt_file.write_text(prompt, encoding="utf-8")
        space.mcp_config.write_text(json.dumps(mcp_config(mcp_url, header_vars), indent=2) + "\n",
                                    encoding="utf-8")
        yield space
    finally:
        shutil.rmtree(root, ignore_errors=True)
