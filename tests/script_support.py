"""The kit's scripts found as a newcomer finds them, their parsers, and running one in-process.

Used by the tests that hold every script to the same command-line rules (test_commands.py,
test_exit_codes.py, test_documented_commands.py). Scripts are discovered, never listed: a new
script is held to the rules the day it lands.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

from malloy_evals.core import cli

KIT = Path(__file__).resolve().parents[1]


def skill_scripts() -> list[Path]:
    """Every skill script: skills/<skill>/scripts/<name>.py."""
    return sorted(p for p in KIT.glob("skills/*/scripts/*.py") if not p.name.startswith("_"))


def tool_scripts() -> list[Path]:
    """The kit's own tools: scripts/<name>.py (the demo, the recording authors, generators)."""
    return sorted(p for p in (KIT / "scripts").glob("*.py") if not p.name.startswith("_"))


def kit_scripts() -> list[Path]:
    return skill_scripts() + tool_scripts()


def script_by_path(text: str) -> Path | None:
    """The kit script a command line names (`skills/eval-answer/scripts/x.py`), or None."""
    path = (KIT / text).resolve()
    return path if path in set(kit_scripts()) else None


@cache
def load_script(path: Path) -> ModuleType:
    """Import a script file as a module (once); its main() is not run."""
    name = "kit_script_" + "_".join(path.relative_to(KIT).with_suffix("").parts).replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_parser(path: Path) -> argparse.ArgumentParser:
    """The script's own parser, from its build_parser()."""
    module = load_script(path)
    assert hasattr(module, "build_parser"), f"{path.name} has no build_parser()"
    return module.build_parser()


def option_strings(path: Path) -> set[str]:
    return {s for a in build_parser(path)._actions for s in a.option_strings}


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def parse_outcome(path: Path, argv: list[str], cwd: Path = KIT) -> Outcome:
    """Parse argv with the script's parser only (nothing runs): code 0 when it parses."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            build_parser(path).parse_args(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Outcome(code, out.getvalue(), err.getvalue())


def run_outcome(path: Path, argv: list[str], cwd: Path = KIT,
                env: dict[str, str] | None = None) -> Outcome:
    """Run the script's main(argv) in this process, from `cwd`, as `cli.run` would: the exit
    code, stdout and stderr. `env` replaces environment variables for the call."""
    module = load_script(path)
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                cli.run(module.main, argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Outcome(code, out.getvalue(), err.getvalue())
