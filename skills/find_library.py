"""Makes the kit's library importable for a skill script run by path, wherever the script is.

Every skill script (`skills/<skill>/scripts/<name>.py`) imports this first:

- in a checkout, or a copy of one, the library is `scripts/malloy_evals` in the nearest folder
  above; it goes first on the path, so a checkout's scripts run its own library, never whichever
  one the Python running them has installed;
- elsewhere (the installed package's own copy of the skills, or the Claude Code plugin's, which
  holds the skills and nothing else) the Python running the script has the package installed;
- if it has not, but a `malloy-evals` command is on PATH (pipx, uv tool install), that command
  runs the same script with the same arguments: the same flags, output and exit code;
- with neither, one line says how to install the package, and the script exits 3.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

INSTALL = ("pipx install malloy-evals (or: uv tool install malloy-evals; pip install "
           "malloy-evals)")
EXIT_UNMEASURED = 3


def checkout_library(start: Path) -> Path | None:
    """The `scripts` folder of the nearest checkout at or above `start`, or None."""
    for folder in [start, *start.parents]:
        if (folder / "scripts" / "malloy_evals").is_dir():
            return folder / "scripts"
    return None


def _make_importable() -> None:
    found = checkout_library(Path(__file__).resolve().parent)
    if found is not None:
        sys.path.insert(0, str(found))
        return
    if importlib.util.find_spec("malloy_evals") is not None:
        return
    script = Path(sys.argv[0]).stem
    command = shutil.which("malloy-evals")
    if command is not None and script:
        os.execv(command, [command, script, *sys.argv[1:]])
    sys.stderr.write(f"error: the malloy-evals package is not installed for {sys.executable} "
                     f"and no malloy-evals command is on PATH: {INSTALL}\n")
    raise SystemExit(EXIT_UNMEASURED)


_make_importable()
