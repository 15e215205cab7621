"""reference/library.md draws the library as it is: every package and module of
scripts/malloy_evals/ is on it, every module and main name it gives exists, no name it gives is
private, and every name one package (or a script) takes from another package is on it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
LIBRARY = KIT / "scripts" / "malloy_evals"
SCRIPT = "a script"  # the package of a skill script or a kit script outside the library
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


def module_path(dotted: str) -> str | None:
    """`malloy_evals.a.b` as the library module `a/b.py`, or None (a package, or not the kit's)."""
    parts = dotted.split(".")
    if parts[0] != "malloy_evals" or len(parts) < 2:
        return None
    rel = "/".join(parts[1:]) + ".py"
    return rel if (LIBRARY / rel).is_file() else None


def package_of(module: str) -> str:
    return module.rpartition("/")[0] or "."


def names_taken(path: Path) -> list[tuple[str, str]]:
    """(module, name) for every name this source takes from a library module: imported by name,
    or read as an attribute of a library module it imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    taken: list[tuple[str, str]] = []
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                whole = module_path(f"{node.module}.{alias.name}")
                if whole is not None:
                    modules[alias.asname or alias.name] = whole
                elif (owner := module_path(node.module)) is not None:
                    taken.append((owner, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and (whole := module_path(alias.name)) is not None:
                    modules[alias.asname] = whole
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in modules:
            taken.append((modules[node.value.id], node.attr))
    return taken


def cross_package_names() -> dict[tuple[str, str], set[str]]:
    """(module, name) -> the packages that take it from another package (SCRIPT for scripts)."""
    sources = [p for p in (KIT / "scripts").rglob("*.py") if "node_modules" not in p.parts]
    sources += list((KIT / "skills").glob("*/scripts/*.py"))
    users: dict[tuple[str, str], set[str]] = {}
    for path in sources:
        here = (package_of(path.relative_to(LIBRARY).as_posix())
                if path.is_relative_to(LIBRARY) else SCRIPT)
        for module, name in names_taken(path):
            if package_of(module) != here:
                users.setdefault((module, name), set()).add(here)
    return users


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
        problems += [f"{module}: gives `{n}`, a private name" for n in names if n.startswith("_")]
    for (module, name), users in sorted(cross_package_names().items()):
        if module in rows and name not in main_names(rows[module][1]):
            problems.append(f"{module}: `{name}` is used by {', '.join(sorted(users))}, "
                            "not on the map")
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


def test_a_door_missing_from_the_map_is_found():
    # A name another package imports, taken off its module's row, is named with its users.
    (module, name), users = min(cross_package_names().items())
    what, cell = module_rows(MAP.read_text(encoding="utf-8"))[module]
    kept = ", ".join(f"`{n}`" for n in main_names(cell) if n != name) or "`nothing`"
    text = MAP.read_text(encoding="utf-8").replace(f"| `{module}` | {what} | {cell} |",
                                                   f"| `{module}` | {what} | {kept} |")
    assert f"{module}: `{name}` is used by {', '.join(sorted(users))}, not on the map" in \
        map_problems(text)


def test_a_private_main_name_is_found():
    text = MAP.read_text(encoding="utf-8")
    module = "core/cli.py"
    what, cell = module_rows(text)[module]
    private = text.replace(f"| `{module}` | {what} | {cell} |",
                           f"| `{module}` | {what} | {cell}, `_hidden` |")
    assert f"{module}: gives `_hidden`, a private name" in map_problems(private)


def test_names_taken_reads_imports_and_module_attributes(tmp_path):
    source = tmp_path / "s.py"
    source.write_text("from malloy_evals.core import cli\nfrom malloy_evals.core.files import replace\n"
                      "import malloy_evals.ledger.run as r\ncli.emit(1)\nr.Run\n")
    assert sorted(names_taken(source)) == [("core/cli.py", "emit"), ("core/files.py", "replace"),
                                           ("ledger/run.py", "Run")]


def test_names_in_parentheses_are_remarks_not_main_names():
    assert main_names("`Run` (`append`, `view`), `Superseded`") == ["Run", "Superseded"]
