"""Shared test set-up: the kit root on the path, the Node gate for runtime-backed tests, and
what a session starts once for every module that reads it (a browser, an endpoint, the demo)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
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
    """Skip a runtime-backed test with a clear reason when Node is absent, except in CI (SPEC 6)."""
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


# The demo as its --help writes it (`.venv/bin/python scripts/demo.py --keep-going --scratch
# ../malloy-evals-demo`), run from a scratch copy of the kit's root.
DEMO = KIT_ROOT / "scripts" / "demo.py"
DEMO_ARGS = ("--keep-going", "--scratch", "../malloy-evals-demo")


@dataclass(frozen=True)
class DemoRun:
    """The demo run once for the session: what it printed and where it wrote."""

    kit: Path                                # the scratch copy of the kit it ran from
    scratch: Path                            # its --scratch folder: runs/, noise-band.json, compare/
    proc: subprocess.CompletedProcess[str]   # exit code, stdout, stderr


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> DemoRun | None:
    """`make demo`'s work done once for every module that reads its output (test_demo,
    test_run_page, and test_documented_commands for the demo's own --help line), in a process
    of its own as a person starts it. None without Node: each reader's needs_node fixture skips
    (or fails under CI) with the reason. Readers only read what it wrote."""
    if node_runtime_missing_reason() is not None:
        return None
    from script_support import make_scratch

    kit = make_scratch(tmp_path_factory.mktemp("demo"))
    proc = subprocess.run([sys.executable, str(DEMO.relative_to(KIT_ROOT)), *DEMO_ARGS], cwd=kit,
                          check=False, capture_output=True, text=True, timeout=600)
    return DemoRun(kit, (kit / DEMO_ARGS[-1]).resolve(), proc)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs two workers, `--dist loadgroup`), every test that
    reads the session's demo runs on one worker, so the demo runs once, not once per worker."""
    for item in items:
        if "demo_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("demo"))
