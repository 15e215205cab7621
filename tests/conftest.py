"""Shared test set-up: the kit root on the path, and the Node gate for runtime-backed tests."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT / "scripts"))

RUNTIME_NODE_MODULES = KIT_ROOT / "scripts" / "malloy_evals" / "endpoint" / "node_runner" / "node_modules"


def node_runtime_missing_reason() -> str | None:
    """Why the Node Malloy runtime cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not on PATH (install Node 20+; `make test` installs the runtime)"
    if not (RUNTIME_NODE_MODULES / "@malloydata" / "malloy").is_dir():
        return "the Node Malloy runtime is not installed (run `make test`, which runs npm install)"
    return None


@pytest.fixture
def needs_node() -> None:
    """Skip a runtime-backed test with a clear reason when Node is absent, except in CI."""
    reason = node_runtime_missing_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so runtime tests must run: {reason}")
    pytest.skip(reason)


@pytest.fixture
def kit_root() -> Path:
    return KIT_ROOT


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (Debian's, driven by Playwright) for the report pages' tests; skipped
    with the reason when it is missing, except in CI, where it must run (.ci/run installs it)."""
    from browser_support import browser_missing_reason, launched

    reason = browser_missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so the browser tests must run: {reason}")
        pytest.skip(reason)
    with launched() as b:
        yield b


@pytest.fixture(scope="session")
def bookshop_mcp_url():
    """The kit's endpoint over the sample model on loopback HTTP, shared by the answerer-harness
    tests (run_answers --mcp-url), started once per session and stopped after."""
    reason = node_runtime_missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so runtime tests must run: {reason}")
        pytest.skip(reason)
    from malloy_evals.answer.harness.local import serve_model_http
    from malloy_evals.sets.eval_set import load_set

    with serve_model_http(load_set(KIT_ROOT / "evals" / "bookshop")) as url:
        yield url
