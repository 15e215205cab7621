"""The shared script plumbing: the console command, one-line progress, exit codes, JSON output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from malloy_evals.core import cli
from malloy_evals.core.errors import InputError, UsageError

KIT = Path(__file__).resolve().parents[1]
CONSOLE = Path(sys.executable).parent / "malloy-evals"


def test_console_command_runs_the_skill_script_of_that_name():
    assert CONSOLE.exists() or shutil.which("malloy-evals"), "pip install -e . installs it"
    via_console = subprocess.run([str(CONSOLE), "validate_set", "evals/bookshop", "--json"],
                                 cwd=KIT, capture_output=True, text=True, timeout=120, check=False)
    by_path = subprocess.run([sys.executable, "skills/eval-answer/scripts/validate_set.py",
                              "evals/bookshop", "--json"],
                             cwd=KIT, capture_output=True, text=True, timeout=120, check=False)
    assert via_console.returncode == by_path.returncode == 0
    assert json.loads(via_console.stdout) == json.loads(by_path.stdout)


def test_console_command_with_an_unknown_script_is_a_usage_error_listing_the_scripts():
    proc = subprocess.run([str(CONSOLE), "no_such_script"], cwd=KIT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "no script named 'no_such_script'" in proc.stderr and "score_run" in proc.stderr


class _SlowStream:
    """A stderr whose every write gives other threads the chance to write in between, as a
    terminal or pipe under load does: print() would then split a line from its newline."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        time.sleep(0.0005)
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_progress_lines_from_many_threads_never_run_into_each_other(monkeypatch):
    stream = _SlowStream()
    monkeypatch.setattr(sys, "stderr", stream)

    def burst(n: int) -> None:
        for i in range(40):
            cli.progress(f"worker {n} line {i}")

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = "".join(stream.parts).splitlines()
    assert len(lines) == 6 * 40
    assert all(re.fullmatch(r"worker \d line \d+", line) for line in lines)


def test_input_error_becomes_one_line_naming_file_and_line_with_exit_3(capsys):
    def main(argv):
        raise InputError("cases.jsonl", 17, "golden.kind: 'scalr' is not one of [...]")

    with pytest.raises(SystemExit) as exc:
        cli.run(main, [])
    assert exc.value.code == 3
    assert capsys.readouterr().err == "error: cases.jsonl:17: golden.kind: 'scalr' is not one of [...]\n"


def test_usage_error_exits_2():
    def main(argv):
        raise UsageError("give exactly one of --mcp-url URL or --local")

    with pytest.raises(SystemExit) as exc:
        cli.run(main, [])
    assert exc.value.code == 2


@dataclass(frozen=True)
class _Result:
    path: Path
    tags: frozenset[str]


def test_emit_json_is_one_document_with_paths_and_sets_made_plain(capsys):
    cli.emit(_Result(Path("runs/r1"), frozenset({"b", "a"})), as_json=True)
    assert json.loads(capsys.readouterr().out) == {"path": "runs/r1", "tags": ["a", "b"]}


@pytest.mark.parametrize("value, message", [
    pytest.param("abc", "'abc' is not a whole number", id="word"),
    pytest.param("-1", "-1 is negative", id="negative"),
])
def test_count_type_refuses_in_words(value, message):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=message):
        cli.count(value)


# The SDKs a script needs only to talk to a server or the API; importing them cost `--help` about
# a second (serve_local.py imported the MCP server, which imported the SDK at the top).
SDKS = ("mcp", "mcp_types", "anthropic", "pydantic", "starlette", "httpx")


def test_no_script_imports_an_sdk_to_answer_help():
    scripts = sorted(KIT.glob("skills/*/scripts/*.py")) + sorted(KIT.glob("scripts/*.py"))
    probe = (
        "import contextlib, io, runpy, sys\n"
        f"for path in {[str(p) for p in scripts]!r}:\n"
        "    sys.argv = [path, '--help']\n"
        "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "        runpy.run_path(path, run_name='__main__')\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SDKS!r}))\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=KIT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert len(scripts) > 20
