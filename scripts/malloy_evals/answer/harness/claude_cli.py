"""The Claude Code CLI the `claude-code` answerer runs: which executable, its version, its command
line and the environment it needs (skills/eval-answer/reference/harness.md, "Claude Code").

The kit pins the CLI in its Node runtime (`@anthropic-ai/claude-code` in
endpoint/node_runner/package.json, installed by `make setup`, or from an installed package into the
user's cache on first need: endpoint/runtime_install.py); `--claude PATH` names another.
Every flag below was read off the pinned CLI itself (its `--help`, its init line and what its
requests to a loopback Messages API offered the model), not assumed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from malloy_evals.core import paths
from malloy_evals.core.cli import progress
from malloy_evals.core.errors import UnmeasuredError
from malloy_evals.endpoint import runtime_install

PACKAGE = "@anthropic-ai/claude-code"
PINNED_EXE = paths.RUNTIME_DIR / "node_modules" / ".bin" / "claude"
VERSION_TIMEOUT_S = 60.0

# Set for every Claude Code answerer. ENABLE_TOOL_SEARCH=false: without it the CLI keeps MCP
# tools deferrable and adds a `DeferredToolPlaceholder` tool to every request; with it the model
# is offered the allowed Publisher tools themselves and nothing else. The next two keep the CLI
# from calling anything but the Messages API (no telemetry, update checks or other side traffic:
# a session against a loopback API then makes no other request at all).
CLI_ENV = {"ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1"}


def pinned_version() -> str:
    """The CLI version the kit's package.json pins (`2.1.332`)."""
    doc = json.loads((paths.RUNTIME_SOURCE / "package.json").read_text(encoding="utf-8"))
    return str(doc["dependencies"][PACKAGE])


def find_claude(given: str | None, env: Mapping[str, str]) -> Path:
    """The executable to run: `--claude PATH` when given, else the kit's pinned install (from an
    installed package, installed into the user's cache now when it is not there yet), else
    `claude` on the answerer's PATH; exit 3 when there is none."""
    if given:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UnmeasuredError(f"--claude {given}: not an executable file")
        return path.absolute()
    if not paths.FROM_CHECKOUT and not runtime_install.status().claude_code:
        runtime_install.install(with_claude_code=True, progress=progress)
    if PINNED_EXE.exists() and os.access(PINNED_EXE, os.X_OK):
        return PINNED_EXE
    found = shutil.which("claude", path=env.get("PATH"))
    if found is None:
        raise UnmeasuredError("claude-code: the kit's Claude Code is not installed (run `make "
                              "setup`) and there is no `claude` on PATH; or name one with "
                              "--claude PATH")
    return Path(found)


def claude_version(exe: Path, env: Mapping[str, str]) -> str:
    """What `claude --version` prints (`2.1.332 (Claude Code)`), first line; exit 3 when it
    will not say (a broken install is not an answerer)."""
    try:
        out = subprocess.run([str(exe), "--version"], env=dict(env), capture_output=True,
                             text=True, timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnmeasuredError(f"{exe} --version: {exc}") from None
    said = (out.stdout or "").strip().splitlines()
    if out.returncode != 0 or not said:
        tail = (out.stderr or "").strip().splitlines()[-1:] or ["no output"]
        raise UnmeasuredError(f"{exe} --version exited {out.returncode}: {tail[0][:200]}")
    return said[0].strip()


def claude_argv(claude: str, *, question: str, prompt: str, mcp_config: Path, max_turns: int,
                allowed: list[str], withheld: list[str], model: str | None) -> list[str]:
    """`claude -p` for one blind attempt.

    `--tools ""` removes every built-in tool (file, shell, web, agents, skills, ToolSearch and the
    rest), so the only tools left are the MCP servers'; `--strict-mcp-config` makes the harness's
    config the only MCP server; `--disallowedTools` removes the endpoint's tools an answerer must
    not use (the Publisher's status and reload tools) from what the model is offered;
    `--allowedTools` lets the Publisher tools run without asking, and `--permission-mode dontAsk`
    refuses whatever was not allowed instead of waiting for a person. `--disable-slash-commands`
    drops skills and commands; `--no-session-persistence` saves nothing to resume.

    The question comes right after `-p`: the tool-list flags take several values, so a
    positional argument after them would be read as one more tool."""
    argv = [claude, "-p", question, "--output-format", "stream-json", "--verbose",
            "--max-turns", str(max_turns), "--mcp-config", str(mcp_config), "--strict-mcp-config",
            "--tools", "", "--allowedTools", ",".join(allowed)]
    if withheld:
        argv += ["--disallowedTools", ",".join(withheld)]
    argv += ["--permission-mode", "dontAsk", "--disable-slash-commands",
             "--no-session-persistence", "--append-system-prompt", prompt]
    if model:
        argv += ["--model", model]
    return argv
