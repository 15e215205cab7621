"""Private stays private: no module of the kit (library or script) imports another module's
`_name`, or reaches one through a module it imported. What two modules share gets a public name
in the module that owns it, and reference/library.md lists it when another package uses it."""

from __future__ import annotations

import ast
from pathlib import Path

from malloy_evals.core import paths

KIT = paths.KIT_ROOT


def kit_sources() -> list[Path]:
    """The library, the kit's own scripts and every skill's scripts."""
    found = [p for p in (KIT / "scripts").rglob("*.py") if "node_modules" not in p.parts]
    return sorted(found + list((KIT / "skills").glob("*/scripts/*.py")))


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(source: str) -> list[str]:
    """`module.name` for every private name this source takes from a kit module: imported by
    name, or read as an attribute of a kit module it imported."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> the kit module it is
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "malloy_evals":
            for alias in node.names:
                if is_private(alias.name):
                    found.append(f"{node.module}.{alias.name}")
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "malloy_evals":
                    modules[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in modules:
                found.append(f"{modules[base.id]}.{node.attr}")
    return found


def test_no_module_takes_another_modules_private_name():
    problems = [f"{path.relative_to(KIT)}: {name}"
                for path in kit_sources()
                for name in private_reaches(path.read_text(encoding="utf-8"))]
    assert problems == []


def test_a_private_name_taken_either_way_is_found():
    assert private_reaches("from malloy_evals.ledger.run import _load, Run\n") == [
        "malloy_evals.ledger.run._load"]
    assert private_reaches("from malloy_evals.ledger import run as r\nr._load(1)\n") == [
        "malloy_evals.ledger.run._load"]
    assert private_reaches("import malloy_evals.ledger.run as r\nx = r._Index\n") == [
        "malloy_evals.ledger.run._Index"]
    # A module's own private names, a dunder and another library's private names are its business.
    assert private_reaches("def _own():\n    return _own\nfrom malloy_evals import __version__\n"
                           "import os\nos._exit\n") == []
