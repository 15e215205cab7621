"""The Node Malloy runtime: whether it can run here, and installing it for an installed package.

From a checkout the Node project (`endpoint/node_runner/`) is installed where it is, Claude Code
with it, by `make setup`. From an installed package it is copied into the user's cache folder
(`paths.RUNTIME_DIR`: one folder per digest of the project's files, never site-packages) and
installed there with npm from the same package.json and lockfile, on first need or by
`setup_runtime.py`. The pinned Claude Code CLI (about 380 MB of the project's 500) comes only when
asked (`--with-claude-code`, or the first `--answerer claude-code`): scoring, re-execution and
the local endpoint never run it.

An install runs under a lock beside the folder and is built in a scratch folder renamed into
place when npm has finished, so an interrupted or concurrent install never leaves a folder that
looks installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from malloy_evals.core import paths
from malloy_evals.core.errors import UnmeasuredError

CLI_PACKAGE = "@anthropic-ai/claude-code"
NODE_MAJOR = 20  # the oldest Node the runner supports
# Installed as optional dependencies of @malloydata/db-duckdb, never loaded by runner.mjs (the
# Makefile removes the same two).
UNUSED_MODULES = ("@duckdb/duckdb-wasm", "@motherduck")
INSTALLED_MARKER = ".installed"            # written last: the runner's modules are complete
CLI_MARKER = ".installed-claude-code"     # written last: the pinned CLI is complete
NPM_INSTALL = ("install", "--no-fund", "--no-audit", "--loglevel=error")
NPM_TIMEOUT_S = 1800.0  # a ceiling for a slow registry; npm's own retries come first
NODE_HINT = ("install Node 20 or newer with npm (https://nodejs.org/en/download, or Debian/Ubuntu: "
             "apt-get install nodejs npm)")
MAKE_HINT = "run `make test` or `make demo` (they run npm install there)"


@dataclass(frozen=True)
class RuntimeStatus:
    """Where the Node runtime is and what of it is installed."""

    dir: Path
    from_checkout: bool      # the checkout's own project (make setup), not the user's cache
    malloy: bool             # the runner's modules are installed
    claude_code: bool        # the pinned Claude Code CLI is installed
    node: str | None         # `node --version`, None without node
    installed_now: list[str]  # what this call installed: "malloy", "claude-code"
    seconds: float           # how long this call took

    def render(self) -> str:
        what = ["Malloy runner" if self.malloy else "Malloy runner NOT installed",
                "Claude Code" if self.claude_code else "no Claude Code"]
        where = "the checkout's Node project" if self.from_checkout else "the user cache"
        done = (f"; installed {' and '.join(self.installed_now)} in {self.seconds:.0f} s"
                if self.installed_now else "")
        return f"Node runtime ({where}, node {self.node or 'missing'}): {self.dir}\n  " \
               f"{', '.join(what)}{done}"


@functools.lru_cache(maxsize=4)
def node_major(node: str) -> int | None:
    """The major version of the node binary at `node`, or None when it cannot be read."""
    version = node_version(node)
    m = re.match(r"v(\d+)\.", version or "")
    return int(m.group(1)) if m else None


@functools.lru_cache(maxsize=4)
def node_version(node: str) -> str | None:
    """What `node --version` prints (`v20.20.2`), or None when it cannot be run."""
    try:
        # A ceiling for a loaded machine; the answer comes as soon as node has started.
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=120,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip() or None


def node_problem(*, needs_npm: bool) -> str | None:
    """Why this machine's Node cannot run (or, `needs_npm`, install) the runtime, else None."""
    node = shutil.which("node")
    then = (", then run this again" if not paths.FROM_CHECKOUT
            else ", then run `make test` or `make demo`")
    if node is None:
        return f"node is not on PATH; Malloy re-execution needs Node 20 or newer: {NODE_HINT}{then}"
    major = node_major(node)
    if major is not None and major < NODE_MAJOR:
        return (f"node {major} is too old; Malloy re-execution needs Node 20 or newer: "
                f"{NODE_HINT}{then}")
    if needs_npm and shutil.which("npm") is None:
        return f"npm is not on PATH; installing the Node runtime needs it: {NODE_HINT}{then}"
    return None


def _has_malloy(folder: Path) -> bool:
    return (folder / "node_modules" / "@malloydata" / "malloy").is_dir()


def _has_cli(folder: Path) -> bool:
    exe = folder / "node_modules" / ".bin" / "claude"
    return exe.exists() and os.access(exe, os.X_OK)


def status(folder: Path | None = None) -> RuntimeStatus:
    """What is installed in the runtime folder (paths.RUNTIME_DIR), nothing changed."""
    folder = paths.RUNTIME_DIR if folder is None else folder
    return _status(folder, [], 0.0)


def _status(folder: Path, installed: list[str], seconds: float) -> RuntimeStatus:
    node = shutil.which("node")
    complete = (folder / INSTALLED_MARKER).is_file() or paths.FROM_CHECKOUT
    return RuntimeStatus(dir=folder, from_checkout=paths.FROM_CHECKOUT,
                         malloy=complete and _has_malloy(folder),
                         claude_code=_has_cli(folder) and (paths.FROM_CHECKOUT
                                                           or (folder / CLI_MARKER).is_file()),
                         node=node_version(node) if node else None,
                         installed_now=installed, seconds=seconds)


def missing_reason(progress: Callable[[str], None]) -> str | None:
    """Why the Malloy runner cannot start here, or None when it can. From an installed package a
    runtime not yet in the user's cache is installed now (`progress` says so: it takes a while,
    once); an install that fails is the reason."""
    problem = node_problem(needs_npm=False)
    if problem is not None:
        return problem
    if paths.FROM_CHECKOUT:
        if not _has_malloy(paths.RUNTIME_DIR):
            return f"the Node Malloy runtime is not installed in {paths.RUNTIME_DIR}; {MAKE_HINT}"
        return None
    if status().malloy:
        return None
    try:
        install(with_claude_code=False, progress=progress)
    except UnmeasuredError as exc:
        return str(exc)
    return None


def install(*, with_claude_code: bool, progress: Callable[[str], None],
            folder: Path | None = None) -> RuntimeStatus:
    """Install what is missing of the runtime (the Claude Code CLI too, `with_claude_code`) into
    the user's cache folder, from the package's pinned Node project; already installed, nothing
    is done. From a checkout nothing is installed here (`make setup` does it): a missing runtime
    is an UnmeasuredError saying so, as is a missing node or npm and a failed npm install."""
    folder = paths.RUNTIME_DIR if folder is None else folder
    started = time.monotonic()
    if paths.FROM_CHECKOUT:
        current = status(folder)
        if not current.malloy or (with_claude_code and not current.claude_code):
            raise UnmeasuredError(f"the checkout's Node runtime ({folder}) is incomplete; "
                                  f"{MAKE_HINT}")
        return current
    current = status(folder)
    if current.malloy and (current.claude_code or not with_claude_code):
        return current
    problem = node_problem(needs_npm=True)
    if problem is not None:
        raise UnmeasuredError(problem)
    installed: list[str] = []
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / f"{folder.name}.lock"):
        if not (folder / INSTALLED_MARKER).is_file():
            progress(f"malloy-evals: installing the Node Malloy runtime into {folder} (first use: "
                     "npm install from the kit's pinned lockfile, about 120 MB)")
            _install_runner(folder)
            installed.append("malloy")
        if with_claude_code and not (folder / CLI_MARKER).is_file():
            progress(f"malloy-evals: installing the pinned Claude Code CLI into {folder} (npm "
                     "install from the same lockfile, about 380 MB)")
            _install_cli(folder)
            installed.append("claude-code")
    done = _status(folder, installed, time.monotonic() - started)
    if installed:
        progress(f"malloy-evals: Node runtime ready in {done.seconds:.0f} s ({folder})")
    return done


def _install_runner(folder: Path) -> None:
    """The runner's modules, built in a scratch folder beside `folder` and renamed into place:
    the project's files with Claude Code left out of package.json (npm keeps every other pin of
    the lockfile and drops what only the CLI needed)."""
    scratch = folder.parent / f"{folder.name}.partial-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    if folder.exists():  # a folder without its marker: an install that never finished
        shutil.rmtree(folder)
    scratch.mkdir()
    try:
        for source in sorted(paths.RUNTIME_SOURCE.iterdir()):
            if source.is_file():
                shutil.copyfile(source, scratch / source.name)
        manifest = json.loads((scratch / "package.json").read_text(encoding="utf-8"))
        manifest.get("dependencies", {}).pop(CLI_PACKAGE, None)
        (scratch / "package.json").write_text(json.dumps(manifest, indent=2) + "\n",
                                              encoding="utf-8")
        _npm_install(scratch)
        if not _has_malloy(scratch):
            raise UnmeasuredError(f"npm install in {scratch} finished without @malloydata/malloy")
        (scratch / INSTALLED_MARKER).write_text("", encoding="utf-8")
        scratch.rename(folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _install_cli(folder: Path) -> None:
    """The pinned CLI added to an installed runtime: the project's own package.json and lockfile
    put back, then npm install (it adds the CLI at its pinned version and changes nothing else)."""
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(paths.RUNTIME_SOURCE / name, folder / name)
    _npm_install(folder)
    if not _has_cli(folder):
        raise UnmeasuredError(f"npm install in {folder} finished without the Claude Code CLI "
                              f"({CLI_PACKAGE})")
    (folder / CLI_MARKER).write_text("", encoding="utf-8")


def _npm_install(folder: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise UnmeasuredError(f"npm is not on PATH: {NODE_HINT}")
    try:
        done = subprocess.run([npm, *NPM_INSTALL], cwd=folder, capture_output=True, text=True,
                              timeout=NPM_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnmeasuredError(f"npm install in {folder} could not finish: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:] or ["no output"]
        raise UnmeasuredError(f"npm install in {folder} failed (exit {done.returncode}): "
                              + " / ".join(line.strip() for line in tail)[:600])
    for name in UNUSED_MODULES:
        shutil.rmtree(folder / "node_modules" / name, ignore_errors=True)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive lock on `lock_path` (made when missing), held while the block runs: a second
    process installing the same runtime waits, then finds it installed."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
