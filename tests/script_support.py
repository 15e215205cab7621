"""The kit's scripts found as a newcomer finds them, their parsers, and running one in-process.

Used by the tests that hold every script to the same command-line rules (test_commands.py,
test_exit_codes.py, test_documented_commands.py). Scripts are discovered, never listed: a new
script is held to the rules the day it lands.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import mcp.client.stdio  # noqa: F401 (see below)
from malloy_evals.core import cli

# The mcp SDK binds its stdio client's `errlog` default to sys.stderr when the module is first
# imported. Imported here, under pytest's capture, that is a real file: were it first imported
# inside run_outcome, the default would be the StringIO standing in for stderr there, and every
# later `--local` server would fail to start ("fileno").

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
    sys.modules[name] = module  # dataclasses look their module up while the script is imported
    spec.loader.exec_module(module)
    return module


def build_parser(path: Path) -> argparse.ArgumentParser:
    """The script's own parser, from its build_parser()."""
    module = load_script(path)
    assert hasattr(module, "build_parser"), f"{path.name} has no build_parser()"
    return module.build_parser()


def option_strings(path: Path) -> set[str]:
    """Every flag the script takes, its subcommands' included (improve.py start --set ...)."""
    found: set[str] = set()
    parsers = [build_parser(path)]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return found


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


def run_outcome(path: Path, argv: list[str], cwd: Path = KIT, *,
                timeout: float = 300.0) -> Outcome:
    """Run the script's main(argv) in this process, from `cwd`, as `cli.run` would: the exit
    code, stdout and stderr. Temporary folders it makes go under `cwd`'s parent. A command that
    does not finish in `timeout` seconds fails the test (a server that was not marked)."""
    module = load_script(path)
    out, err = io.StringIO(), io.StringIO()
    result: list[int] = []

    def call() -> None:
        try:
            cli.run(module.main, argv)
            result.append(0)
        except SystemExit as exc:
            result.append(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
        except BaseException:  # noqa: BLE001 (what the interpreter does: a traceback, exit 1)
            traceback.print_exc()
            result.append(1)

    saved_tempdir = tempfile.tempdir
    tempfile.tempdir = str(cwd.parent)
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            worker = threading.Thread(target=call, daemon=True)
            worker.start()
            worker.join(timeout)
    finally:
        tempfile.tempdir = saved_tempdir
    assert not worker.is_alive(), f"{path.name} {' '.join(argv)} did not finish in {timeout:.0f} s"
    return Outcome(result[0], out.getvalue(), err.getvalue())


# ---------------------------------------------------------------------------------------------
# Command lines written in the docs and in every script's --help

# The documents whose command lines must run as written from the kit's root.
DOC_GLOBS = ("README.md", "skills/*/SKILL.md", "reference/**/*.md", "skills/*/reference/*.md")

SCRIPT_START = re.compile(r"^(?:\.venv/bin/python\s+\S+\.py|malloy-evals\s+[a-z_]+)(?:\s|$)")
SETUP_START = re.compile(r"^(?:mkdir -p|cp -r)\s")
# A trailing comment that starts with one of these words makes a command parse-only: it needs
# what the test cannot have (an API key, a Publisher, a host's reply), serves until stopped, or
# rewrites the checkout itself.
PARSE_ONLY = re.compile(r"^(needs|serves|rewrites)\b")
EXPECTED_EXIT = re.compile(r"\bexit (\d)\b")


@dataclass(frozen=True)
class DocCommand:
    """One command line as a document writes it."""

    where: str      # `README.md:79`, or `skills/.../new_run.py (--help)`
    text: str       # the command, without its trailing comment
    comment: str    # the trailing `# ...` comment, without the `#`

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    def argv_in(self, cwd: Path) -> list[str]:
        """The words a shell started in `cwd` would pass: `$PWD` outside single quotes is `cwd`
        (`--answerer-cmd "$PWD/.venv/bin/python ..."` names the kit's root that way)."""
        return shlex.split(expand_pwd(self.text, cwd))

    @property
    def is_setup(self) -> bool:
        return bool(SETUP_START.match(self.text))

    @property
    def parse_only(self) -> bool:
        return bool(PARSE_ONLY.match(self.comment))

    @property
    def expected_exit(self) -> int:
        m = EXPECTED_EXIT.search(self.comment)
        return int(m.group(1)) if m else 0

    def script(self, cwd: Path | None = None) -> tuple[Path | None, list[str]]:
        """The kit script this line runs and its arguments (None: not a kit script), as a shell
        started in `cwd` would pass them when it is given."""
        argv = self.argv if cwd is None else self.argv_in(cwd)
        if argv[0] == "malloy-evals":
            found = cli.console_scripts().get(argv[1].replace("-", "_"))
            return (found.resolve() if found else None), argv[2:]
        return script_by_path(argv[1]), argv[2:]


def expand_pwd(text: str, cwd: Path) -> str:
    """`text` with `$PWD` / `${PWD}` replaced by `cwd` wherever a shell expands them (not inside
    single quotes)."""
    out, quote, i = [], None, 0
    while i < len(text):
        ch = text[i]
        if ch == "'" and quote != '"':
            quote = None if quote == "'" else "'"
        elif ch == '"' and quote != "'":
            quote = None if quote == '"' else '"'
        elif ch == "$" and quote != "'":
            for name in ("${PWD}", "$PWD"):
                if text.startswith(name, i) and not (name == "$PWD" and text[i + 4:i + 5].isalnum()):
                    out.append(str(cwd))
                    i += len(name)
                    break
            else:
                out.append(ch)
                i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def split_comment(line: str) -> tuple[str, str]:
    """`cmd  # comment` into (cmd, comment), ignoring `#` inside quotes or words."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.strip(), ""


def _command(where: str, text: str) -> DocCommand | None:
    cmd, comment = split_comment(text.strip())
    if SCRIPT_START.match(cmd) or SETUP_START.match(cmd):
        return DocCommand(where, cmd, comment)
    return None


INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def markdown_commands(path: Path) -> list[DocCommand]:
    """Command lines in fenced code blocks (continued with a trailing `\\`) and in inline code."""
    found: list[DocCommand] = []
    rel = path.relative_to(KIT).as_posix()
    fence: str | None = None
    pending = ""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        opener = re.match(r"^(`{3,}|~{3,})", stripped)
        if opener and (fence is None or stripped.startswith(fence)):
            fence = opener.group(1) if fence is None else None
            continue
        if fence is not None:
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            cmd = _command(f"{rel}:{n}", pending + stripped)
            pending = ""
        else:
            cmd = None
            for span in INLINE_CODE.findall(line):
                inline = _command(f"{rel}:{n}", span)
                if inline is not None:
                    found.append(inline)
        if cmd is not None:
            found.append(cmd)
    return found


@cache
def docstring_commands(script: Path) -> tuple[DocCommand, ...]:
    """The command lines of a script's module docstring (what its --help prints)."""
    doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    where = f"{script.relative_to(KIT).as_posix()} (--help)"
    return tuple(c for line in doc.splitlines() if (c := _command(where, line)) is not None)


def documents() -> dict[str, list[DocCommand]]:
    """Every document with command lines: the Markdown docs, then each script's --help."""
    docs: dict[str, list[DocCommand]] = {}
    for pattern in DOC_GLOBS:
        for path in sorted(KIT.glob(pattern)):
            docs[path.relative_to(KIT).as_posix()] = markdown_commands(path)
    for script in kit_scripts():
        docs[script.relative_to(KIT).as_posix()] = list(docstring_commands(script))
    return {name: cmds for name, cmds in docs.items() if cmds}


# What a scratch copy of the kit holds: the kit's own files by link (read, never written by a
# documented command), the sample sets as a real copy (commands write into them).
LINKED = ("skills", "scripts", "reference", "tests", ".venv", "README.md", "SKILL_INDEX.md")


def make_scratch(root: Path) -> Path:
    """A folder that looks like the kit's root to a command line, where writes stay."""
    kit = root / "kit"
    kit.mkdir(parents=True)
    for name in LINKED:
        if (KIT / name).exists():
            (kit / name).symlink_to(KIT / name)
    shutil.copytree(KIT / "evals", kit / "evals")
    return kit


def run_setup(cmd: DocCommand, cwd: Path) -> Outcome:
    """`mkdir -p` / `cp -r` as a shell runs them, refusing any path outside the scratch."""
    scratch = cwd.parent
    for arg in cmd.argv[2:]:
        target = (cwd / arg).resolve()
        assert target == scratch or scratch in target.parents, \
            f"{cmd.where}: {arg} leaves the scratch copy: {cmd.text}"
    done = subprocess.run(cmd.argv, cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=600)
    return Outcome(done.returncode, done.stdout, done.stderr)
