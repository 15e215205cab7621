"""Shared test set-up: the kit root on the path, the Node gate for runtime-backed tests, and
what a session starts once for every module that reads it (a browser, an endpoint, the demo)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT / "scripts"))

from demo_support import DemoLauncher, DemoRun, shared_root  # after the path above

RUNTIME_NODE_MODULES = KIT_ROOT / "scripts" / "malloy_evals" / "endpoint" / "node_runner" / "node_modules"


def node_runtime_missing_reason() -> str | None:
    """Why the Node Malloy runtime cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not on PATH (install Node 20+; `make test` installs the runtime)"
    if not (RUNTIME_NODE_MODULES / "@malloydata" / "malloy").is_dir():
        return "the Node Malloy runtime is not installed (run `make test`, which runs npm install)"
    return None


def _skip_unless_ci(reason: str | None, what: str) -> None:
    """Skip with the reason when something a test needs is missing; under CI, fail instead."""
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so {what} must run: {reason}")
    pytest.skip(reason)


@pytest.fixture
def needs_node() -> None:
    """Skip a runtime-backed test with a clear reason when Node is absent, except in CI."""
    skip_without_node()


def skip_without_node() -> None:
    """Skip the calling test (or fixture, of any scope) with a clear reason when Node is absent,
    except in CI."""
    _skip_unless_ci(node_runtime_missing_reason(), "runtime tests")


@pytest.fixture
def needs_claude() -> None:
    """Skip a test of the real Claude Code with the reason when the kit's pinned CLI is not
    installed (no Node runtime), except in CI, where it fails."""
    from claude_support import claude_missing_reason

    _skip_unless_ci(claude_missing_reason(), "the real-CLI tests")


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


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> DemoRun | None:
    """`make demo`'s work, done once per run for every module that reads its output (test_demo,
    test_run_page, test_compare_page, and test_documented_commands for the demo's own --help
    line): see demo_support. None without Node: each reader's needs_node fixture skips (or
    fails under CI) with the reason."""
    if node_runtime_missing_reason() is not None:
        return None
    launcher = _demo_launcher(tmp_path_factory)
    launcher.start()  # already started when collection saw a reader: a no-op then
    return launcher.result()


_LAUNCHER: list[DemoLauncher] = []  # this process's launcher, made once


def _demo_launcher(tmp_path_factory: pytest.TempPathFactory) -> DemoLauncher:
    if not _LAUNCHER:
        _LAUNCHER.append(DemoLauncher(shared_root(tmp_path_factory.getbasetemp())))
    return _LAUNCHER[0]


def _reads_the_demo(item: pytest.Item) -> bool:
    """A test that asks for demo_run, or asks for it while it runs (marked `reads_demo`)."""
    return ("demo_run" in getattr(item, "fixturenames", ())
            or item.get_closest_marker("reads_demo") is not None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The demo's readers run last (in collection order otherwise): the demo, started in the
    background, runs beside the other tests instead of holding a worker up."""
    items.sort(key=_reads_the_demo)  # a stable sort: only the readers move


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the demo in the background as soon as the tests to run include one that reads it,
    so it runs beside the tests before them instead of holding its first reader up."""
    if any(map(_reads_the_demo, session.items)) and node_runtime_missing_reason() is None:
        # The object the tmp_path_factory fixture returns (pytest keeps it on the config).
        _demo_launcher(session.config._tmp_path_factory).start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A worker that started the demo and runs out of tests first waits for it (a reader on
    another worker may still be waiting); a session cut short stops it."""
    if _LAUNCHER:
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            _LAUNCHER[0].stop()
        else:
            _LAUNCHER[0].wait()
