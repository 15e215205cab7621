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
import re
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


# A version as npm and the CLI write it: `2.1.332`, `2.2.0-beta.1` (a leading `v` allowed).
# `claude --version` says more around it (`2.1.332 (Claude Code)`); package.json may hold a
# range (`^2.1.332`).
_VERSION_RE = re.compile(r"(?<![\w.])v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)(?![\w.])")


def parse_version(text: str | None) -> str | None:
    """The version `text` names, alone: `2.1.332` from `2.1.332 (Claude Code)` (what `claude
    --version` prints, and what run.json held before the version was parsed), from `^2.1.332` or
    from `2.1.332` itself; None when it names none. The one reading of a CLI version: run.json,
    harness.jsonl, the pin and every message compare and show what this returns."""
    found = _VERSION_RE.search(text or "")
    return found.group(1) if found else None


def same_version(recorded: str | None, version: str) -> bool:
    """Whether a version recorded in run.json (either spelling) is `version`."""
    return parse_version(recorded) == parse_version(version)


def pinned_version() -> str:
    """The CLI version the kit's package.json pins (`2.1.332`)."""
    doc = json.loads((paths.RUNTIME_SOURCE / "package.json").read_text(encoding="utf-8"))
    pin = str(doc["dependencies"][PACKAGE])
    return parse_version(pin) or pin


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
    """The version `claude --version` names (`2.1.332`, from its line `2.1.332 (Claude Code)`);
    exit 3 when it will not say one (a broken install is not an answerer)."""
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
    version = parse_version(said[0])
    if version is None:
        raise UnmeasuredError(f"{exe} --version names no version: {said[0].strip()[:200]!r}")
    return version


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
