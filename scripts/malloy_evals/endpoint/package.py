"""A Malloy package's identity: the sha256 of its model files, computed the same way wherever
the kit needs it (the local endpoint's `sourceContentSha`, a run's `modelSha`, the cache key of a
model's definitions), and cheap enough that nothing needs to start the runner to know it."""

from __future__ import annotations

import hashlib
from pathlib import Path


def package_sha(directory: str | Path) -> str:
    """sha256 over a package's model files: each `.malloy` file in path order, as
    `<relative path>\\0<bytes>\\0`. The same value is `sourceContentSha` and a run's `modelSha`."""
    root = Path(directory)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.malloy") if "node_modules" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()
