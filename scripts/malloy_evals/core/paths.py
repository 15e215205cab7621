"""Where the kit's own files live: in a checkout (the library installed editable from it), or in an
installed package, where the build put them beside the library as package data (`kit/`)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

LIBRARY_DIR = Path(__file__).resolve().parents[1]  # scripts/malloy_evals, or site-packages/malloy_evals
# The kit's skills, reference pages and sample set, copied under the package when it is built
# (setup.py); a checkout never has this folder, so its absence means "running from a checkout".
PACKAGED_KIT = LIBRARY_DIR / "kit"
FROM_CHECKOUT = not PACKAGED_KIT.is_dir()
KIT_ROOT = LIBRARY_DIR.parents[1] if FROM_CHECKOUT else PACKAGED_KIT
REFERENCE_DIR = KIT_ROOT / "reference"
SCHEMAS_DIR = REFERENCE_DIR / "schemas"
SKILLS_DIR = KIT_ROOT / "skills"
EVALS_DIR = KIT_ROOT / "evals"
# The Node project that runs Malloy as the kit ships it: package.json, its lockfile, runner.mjs.
RUNTIME_SOURCE = LIBRARY_DIR / "endpoint" / "node_runner"


def user_cache_dir() -> Path:
    """The kit's folder in the user's cache: `$XDG_CACHE_HOME/malloy-evals`, else
    `~/.cache/malloy-evals`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "malloy-evals"


def runtime_digest(source: Path = RUNTIME_SOURCE) -> str:
    """The first 16 hex digits of the sha256 of the Node project's own files (names and bytes;
    node_modules/ left out): a new pin or a new runner.mjs is a new installed runtime."""
    digest = hashlib.sha256()
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        digest.update(path.name.encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


# Where node_modules is and runner.mjs runs from (Node resolves a module's imports from the
# folders above the importing file): in a checkout, the project itself (`make setup` installs
# it); from a package, a copy of the project in the user's cache, installed on first need
# (endpoint/runtime_install.py), since site-packages is no place to write.
RUNTIME_DIR = (RUNTIME_SOURCE if FROM_CHECKOUT
               else user_cache_dir() / "node-runtime" / runtime_digest())


def skill_md(skill: str) -> Path:
    """The SKILL.md of one of the kit's skills."""
    return SKILLS_DIR / skill / "SKILL.md"


def skill_script(name: str) -> Path | None:
    """The skill script called `name` (with or without `.py`), wherever it lives under skills/."""
    stem = name.removesuffix(".py")
    matches = sorted(SKILLS_DIR.glob(f"*/scripts/{stem}.py"))
    return matches[0] if matches else None
