"""The kit's own Python stays ruff-clean (the style guide's one mechanical rule)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[1]


def test_library_scripts_tests_and_benchmarks_are_ruff_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: it is part of the dev extra (pip install -e .[dev])")
    proc = subprocess.run([ruff, "check", "scripts", "skills", "tests", "benchmarks", "evals"],
                          cwd=KIT, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
