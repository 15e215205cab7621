"""Where the kit's own files live, resolved from this package (installed editable from the checkout)."""

from __future__ import annotations

from pathlib import Path

LIBRARY_DIR = Path(__file__).resolve().parents[1]  # scripts/malloy_evals
KIT_ROOT = LIBRARY_DIR.parents[1]
REFERENCE_DIR = KIT_ROOT / "reference"
SCHEMAS_DIR = REFERENCE_DIR / "schemas"
SKILLS_DIR = KIT_ROOT / "skills"
EVALS_DIR = KIT_ROOT / "evals"
RUNTIME_DIR = LIBRARY_DIR / "endpoint" / "node_runner"   # the Node project that runs Malloy


def skill_md(skill: str) -> Path:
    """The SKILL.md of one of the kit's skills."""
    return SKILLS_DIR / skill / "SKILL.md"


def skill_script(name: str) -> Path | None:
    """The skill script called `name` (with or without `.py`), wherever it lives under skills/."""
    stem = name.removesuffix(".py")
    matches = sorted(SKILLS_DIR.glob(f"*/scripts/{stem}.py"))
    return matches[0] if matches else None
