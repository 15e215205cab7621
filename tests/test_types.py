"""The library type-checks: mypy, configured in pyproject.toml ([tool.mypy]), finds no error.

The library (`scripts/malloy_evals`) is checked with every function typed
(`disallow_untyped_defs`); scripts and tests are not type-checked (see the comment in
pyproject.toml).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[1]


def test_library_type_checks_with_no_mypy_error():
    if subprocess.run([sys.executable, "-c", "import mypy"], capture_output=True,
                      check=False).returncode != 0:
        pytest.fail("mypy is not installed: it is part of the dev extra (pip install -e .[dev])")
    # The configuration in pyproject.toml names what is checked and how strictly.
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=KIT,
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_mypy_configuration_checks_the_library_strictly():
    import tomllib

    config = tomllib.loads((KIT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["files"] == ["scripts/malloy_evals"]
    assert config["python_version"] == "3.11"
    assert config["disallow_untyped_defs"] is True
    assert "ignore_errors" not in config
    overrides = config.get("overrides", [])
    assert not any(o.get("ignore_errors") for o in overrides), overrides


IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<after>.*)$")


def unexplained_ignores(text: str) -> list[tuple[int, str]]:
    """Lines whose `# type: ignore` names no error code, or gives no reason: a comment after it
    on the line, or a comment line right above."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, start=1):
        m = IGNORE.search(line)
        if m is None:
            continue
        above = lines[number - 2].strip() if number > 1 else ""
        reason = "#" in m.group("after") or above.startswith("#")
        if m.group("codes") is None or not reason:
            found.append((number, line.strip()))
    return found


def test_every_type_ignore_in_the_library_names_its_code_and_a_reason():
    found = {str(p.relative_to(KIT)): bad
             for p in sorted((KIT / "scripts" / "malloy_evals").rglob("*.py"))
             if (bad := unexplained_ignores(p.read_text(encoding="utf-8")))}
    assert found == {}


def test_an_ignore_without_a_code_or_a_reason_is_found():
    text = ("x = f()  # type: ignore\n"
            "y = g()  # type: ignore[arg-type]\n"
            "# the stubs lack it\n"
            "z = h()  # type: ignore[attr-defined]\n"
            "w = k()  # type: ignore[misc]  # start over, in place\n")
    assert [n for n, _ in unexplained_ignores(text)] == [1, 2]
