"""Running the real Claude Code CLI in tests: the kit's pinned install against the model stand-in
(llm/standin.py) on loopback, with a scratch HOME so the user's own configuration never loads and
nothing is written into it. Tests that need the CLI take conftest's `needs_claude` fixture: it skips
with the reason where the Node runtime (and so the CLI) is missing, and fails instead under CI."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from malloy_evals.answer.harness import claude_cli
from malloy_evals.llm import standin

CLAUDE = claude_cli.PINNED_EXE


def claude_missing_reason() -> str | None:
    if not CLAUDE.exists():
        return (f"the kit's Claude Code is not installed ({CLAUDE} is missing): run `make setup` "
                "with Node 20+ and npm on PATH")
    return None


def write_script(folder: Path, name: str, question: str, turns: list[Any],
                 model: str = "claude-sonnet-4-5") -> Path:
    """A model script file (reference/model-scripts.md)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"question": question, "model": model, "turns": turns}, indent=1))
    return path


@contextmanager
def model_server(scripts: list[Path], home: Path, monkeypatch: pytest.MonkeyPatch,
                 log: Path | None = None) -> Iterator[standin.StandIn]:
    """The stand-in serving `scripts`; this process's environment points Claude Code at it (any
    key), with HOME a scratch folder."""
    home.mkdir(parents=True, exist_ok=True)
    with standin.serve(standin.load_scripts(scripts), log_path=log) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-standin-not-a-key")
        monkeypatch.setenv("HOME", str(home))
        yield server


def cli_env(server: standin.StandIn, home: Path) -> dict[str, str]:
    """The environment a test gives the CLI it starts itself (the harness makes its own)."""
    return {**os.environ, **claude_cli.CLI_ENV, "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-standin-not-a-key", "HOME": str(home)}


def run_claude(argv: list[str], *, cwd: Path, env: dict[str, str],
               timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """The real CLI, to its end: the process and its stream-json lines."""
    done = subprocess.run([str(CLAUDE), *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, lines


def init_line(lines: list[dict]) -> dict:
    [init] = [e for e in lines if e.get("type") == "system" and e.get("subtype") == "init"]
    return init


def tool_results(lines: list[dict]) -> dict[str, dict]:
    """Every tool_result block of a transcript, by its tool_use_id."""
    out: dict[str, dict] = {}
    for e in lines:
        if e.get("type") != "user":
            continue
        content = e.get("message", {}).get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                out[block["tool_use_id"]] = block
    return out


def result_text(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)
