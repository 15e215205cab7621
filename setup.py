"""The package's build: the library from scripts/malloy_evals, and the kit's own files beside it.

MANIFEST.in says what a release carries (the sdist). Every file it lists inside a folder other
than the library itself (the skills, the reference pages and schemas, the sample set, the kit's
tools in scripts/) is copied into the wheel under `malloy_evals/kit/`, at the same path it has in
a checkout; `malloy_evals.core.paths` finds the kit there when the library is not in a checkout.
The library's own files (every file under scripts/malloy_evals, node_modules aside) are package
data as they are. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LIBRARY = "scripts/malloy_evals/"
KIT_IN_PACKAGE = Path("malloy_evals") / "kit"


def kit_files(manifest: list[str]) -> list[str]:
    """The manifest's files that make up the kit around the library: those inside a folder,
    except the library's and the build's own metadata (`*.egg-info`)."""
    return sorted(Path(name).as_posix() for name in manifest
                  if len(Path(name).parts) > 1 and not name.startswith(LIBRARY)
                  and not any(part.endswith(".egg-info") for part in Path(name).parts))


class BuildWithKit(build_py):
    """build_py, then the kit's files copied into the built package (not for an editable
    install: there the library finds the checkout's own files)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        self.run_command("egg_info")
        manifest = self.get_finalized_command("egg_info").filelist.files
        target = Path(self.build_lib) / KIT_IN_PACKAGE
        shutil.rmtree(target, ignore_errors=True)  # a file gone from the kit leaves the wheel too
        for name in kit_files(manifest):
            dest = target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(name, dest)


setup(cmdclass={"build_py": BuildWithKit})
