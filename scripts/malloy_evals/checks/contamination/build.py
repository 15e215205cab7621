"""A build file the answerer wrote (Makefile, justfile, build.ninja), read as the shell commands
it runs when `make`, `just` or `ninja` runs it (reference/contamination.md, "Build files").

The text is never run: its recipes become shell command lines, with the file's own variables
(`NAME = value`, `$(NAME)`, `${NAME}`, just's `{{name}}`, ninja's `$name`) and the automatic
ones (`$@`, `$<`, `$^`; ninja's `$in`, `$out`) put in, so `cat $(DATA)` reads what DATA names.
A rule line's prerequisites are read as paths too (`out: ../evals/x/cases.jsonl`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# The build tools, the files each runs when none is named, and the options naming the file and
# the folder it runs in.
BUILD_TOOLS: dict[str, tuple[str, ...]] = {
    "make": ("GNUmakefile", "makefile", "Makefile"),
    "gmake": ("GNUmakefile", "makefile", "Makefile"),
    "just": ("justfile", "Justfile", ".justfile", "JUSTFILE"),
    "ninja": ("build.ninja",),
}
FILE_OPTS = frozenset({"-f", "--file", "--makefile", "--justfile"})
DIR_OPTS = frozenset({"-C", "--directory", "-d", "--working-directory"})

_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*(?::{1,3}=|\?=|\+=|!=|=)\s*(.*)$")
_RULE = re.compile(r"^([^\s:=#][^:=#]*?)\s*:(?!=)\s*(.*)$")
_MAKE_VAR = re.compile(r"\$[({]([A-Za-z_][A-Za-z0-9_.-]*)[)}]")
_JUST_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")
_NINJA_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_PASSES = 4  # variables naming variables, resolved this deep


def _joined(text: str) -> list[str]:
    """Lines, with backslash continuations joined and whole-line comments dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if not line.strip().startswith("#"):
            out.append(line)
    if pending:
        out.append(pending)
    return out


def _put_in(text: str, values: dict[str, str], pattern: re.Pattern[str]) -> str:
    for _ in range(_PASSES):
        new = pattern.sub(lambda m: values.get(m.group(1), m.group(0)), text)
        if new == text:
            break
        text = new
    return text


def _make_like(text: str, *, just: bool) -> list[str]:
    """A Makefile's or justfile's recipes as shell command lines."""
    values: dict[str, str] = {}
    lines = _joined(text)
    for line in lines:
        m = _ASSIGN.match(line)
        if m and not line[:1].isspace():
            values[m.group(1)] = m.group(2).strip().strip("\"'")
    commands: list[str] = []
    target, prereqs = "", ""
    for line in lines:
        if not line.strip():
            continue
        if line[:1].isspace():
            recipe = line.strip().lstrip("@-+").strip()
            recipe = recipe.replace("$@", target).replace("$<", prereqs.split()[0] if prereqs.split() else "")
            recipe = recipe.replace("$^", prereqs).replace("$+", prereqs)
            recipe = _put_in(recipe, values, _JUST_VAR if just else _MAKE_VAR)
            commands.append(recipe.replace("$$", "$"))
            continue
        if _ASSIGN.match(line):
            continue
        m = _RULE.match(line)
        if m:
            target = m.group(1).strip()
            prereqs = _put_in(m.group(2).split(";", 1)[0].split("#", 1)[0],
                              values, _JUST_VAR if just else _MAKE_VAR).strip()
            if just:
                prereqs = ""  # a just recipe's `name arg: dep` lists recipes, not files
            elif prereqs:
                commands.append(f"cat {prereqs}")  # its recipes read them, as $< and $^
            inline = m.group(2).split(";", 1)
            if len(inline) == 2 and inline[1].strip():
                commands.append(_put_in(inline[1].strip(), values, _MAKE_VAR))
    return commands


def _ninja(text: str) -> list[str]:
    """A build.ninja's build statements as the commands of their rules."""
    values: dict[str, str] = {}
    rules: dict[str, dict[str, str]] = {}
    builds: list[tuple[str, str, str, dict[str, str]]] = []
    current: dict[str, str] | None = None
    for line in _joined(text):
        if not line.strip():
            continue
        indented = line[:1].isspace()
        m = _ASSIGN.match(line.strip())
        if indented and m and current is not None:
            current[m.group(1)] = m.group(2).strip()
            continue
        current = None
        if m and not indented:
            values[m.group(1)] = _put_in(m.group(2).strip(), values, _NINJA_VAR)
            continue
        words = line.split()
        if words[0] == "rule" and len(words) > 1:
            current = rules.setdefault(words[1], {})
        elif words[0] == "build" and ":" in line:
            outs, _, rest = line[len("build"):].partition(":")
            rest_words = rest.split()
            rule = rest_words[0] if rest_words else ""
            ins = " ".join(w for w in rest_words[1:] if w not in ("|", "||"))
            current = {}
            builds.append((rule, outs.strip(), ins, current))
    commands: list[str] = []
    for rule, outs, ins, local in builds:
        command = rules.get(rule, {}).get("command", "")
        ins = _put_in(ins, {**values, **local}, _NINJA_VAR)
        scope = {**values, **local, "in": ins, "out": outs}
        if ins:
            commands.append(f"cat {ins}")
        if command:
            commands.append(_put_in(command, scope, _NINJA_VAR).replace("$$", "$"))
    return commands


def build_commands(tool: str, text: str) -> list[str]:
    """The shell command lines a build file's text runs under `tool` (make, gmake, just, ninja)."""
    if tool == "ninja":
        return _ninja(text)
    return _make_like(text, just=tool == "just")


def build_file_and_folder(tool: str, args: Sequence[str]) -> tuple[str | None, str | None]:
    """(the build file named with -f, the folder named with -C), each None when not given."""
    named: str | None = None
    folder: str | None = None
    k = 0
    while k < len(args):
        word = args[k]
        opt, eq, value = word.partition("=")
        if opt in FILE_OPTS | DIR_OPTS and not eq and k + 1 < len(args):
            value, k = args[k + 1], k + 1
        elif word.startswith("-f") and len(word) > 2 and tool != "just":
            opt, value = "-f", word[2:]
        elif word.startswith("-C") and len(word) > 2:
            opt, value = "-C", word[2:]
        if opt in FILE_OPTS and value:
            named = value
        elif opt in DIR_OPTS and value and not (tool == "make" and opt == "-d"):
            folder = value
        k += 1
    return named, folder
