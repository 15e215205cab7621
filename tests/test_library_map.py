"""reference/library.md draws the library as it is: every package and module of
scripts/malloy_evals/ is on it, and every module and main name it gives exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
LIBRARY = KIT / "scripts" / "malloy_evals"
MAP = KIT / "reference" / "library.md"

MODULE_ROW = re.compile(r"^\| `([\w/]+\.py)` \| (.*?) \| (.*?) \|$", re.MULTILINE)
PACKAGE_ROW = re.compile(r"^\| `([\w/]+)/` \| ", re.MULTILINE)
NAME = re.compile(r"`([A-Za-z_]\w*)`")


def library_modules() -> set[str]:
    return {p.relative_to(LIBRARY).as_posix() for p in LIBRARY.rglob("*.py")
            if p.name != "__init__.py" and "node_modules" not in p.parts}


def library_packages() -> set[str]:
    return {p.parent.relative_to(LIBRARY).as_posix() for p in LIBRARY.rglob("__init__.py")
            if p.parent != LIBRARY}


def module_rows(text: str) -> dict[str, tuple[str, str]]:
    return {m.group(1): (m.group(2), m.group(3)) for m in MODULE_ROW.finditer(text)}


def main_names(cell: str) -> list[str]:
    """The names a row gives: backticked identifiers outside parentheses (inside them are a
    class's methods or a remark)."""
    outside = re.sub(r"\([^()]*\)", "", cell)
    return NAME.findall(outside)


def defined_names(path: Path) -> set[str]:
    """What a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def map_problems(text: str) -> list[str]:
    """Where library.md and the tree disagree, one line each."""
    rows = module_rows(text)
    modules = library_modules()
    problems = [f"{m}: a module of the library, not on the map" for m in sorted(modules - set(rows))]
    problems += [f"{m}: on the map, not in the library" for m in sorted(set(rows) - modules)]
    packages = set(PACKAGE_ROW.findall(text))
    problems += [f"{p}/: a package of the library, not on the map"
                 for p in sorted(library_packages() - packages)]
    problems += [f"{p}/: on the map, not a package of the library"
                 for p in sorted(packages - library_packages())]
    for module, (what, cell) in sorted(rows.items()):
        if module not in modules:
            continue
        if not what.strip():
            problems.append(f"{module}: says nothing about what it decides")
        names = main_names(cell)
        if not names:
            problems.append(f"{module}: names none of its main names")
        have = defined_names(LIBRARY / module)
        problems += [f"{module}: gives `{n}`, which it does not define" for n in names
                     if n not in have]
    return problems


def test_library_map_has_every_module_and_package_and_names_only_what_exists():
    assert map_problems(MAP.read_text(encoding="utf-8")) == []


def test_a_stale_map_is_found():
    text = MAP.read_text(encoding="utf-8")
    some_module = min(library_modules())
    rows = module_rows(text)
    dropped = MODULE_ROW.sub(lambda m: "" if m.group(1) == some_module else m.group(0), text)
    assert f"{some_module}: a module of the library, not on the map" in map_problems(dropped)
    what, cell = rows[some_module]
    renamed = text.replace(f"| `{some_module}` | {what} | {cell} |",
                           f"| `{some_module}` | {what} | {cell}, `no_such_name` |")
    assert f"{some_module}: gives `no_such_name`, which it does not define" in \
        map_problems(renamed)
    ghost = text + "\n| `core/ghost.py` | Nothing. | `nothing` |\n"
    assert "core/ghost.py: on the map, not in the library" in map_problems(ghost)


def test_names_in_parentheses_are_remarks_not_main_names():
    assert main_names("`Run` (`append`, `view`), `Superseded`") == ["Run", "Superseded"]
