"""The local MCP endpoint that speaks the Malloy Publisher's tool contract (SPEC 6).

The Publisher itself cannot be installed here, so the kit serves its own packages through the
same four tools, argument names, required sets, envelopes and error shapes, backed by the Node
runner (`runtime.MalloyRuntime`). Pointing the kit at a real Publisher is then one flag
(`--mcp-url`). Over HTTP it also answers the three REST routes the kit reads for pins and for
the compiled surface of served packages.

Contract notes (from the Publisher's server at 0.0.209):
- success: `content[0]` is a resource block `{uri, mimeType: application/json, text: JSON}`;
- tool errors: `isError`, the same resource block holding `{error, suggestions, ...}`, then a
  text block with the message and the suggestions;
- `malloy_executeQuery` with both or neither of `query` / `queryName` is a JSON-RPC -32602;
- arguments that break a tool's input schema (a required one missing, `limit` above 50) are a
  tool error of the same shape, naming the arguments, never the SDK's bare text block.
"""

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
