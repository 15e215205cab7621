"""`--local` for answerers: the kit's endpoint over the set's `model/`, served on loopback HTTP.

An answerer is a separate program (or the API loop's MCP client), so the endpoint must be a URL,
not the stdio pipe re-execution uses: `serve_local.py --http PORT` on a free port of 127.0.0.1,
started in its own process group, waited for until it answers `tools/list`, and stopped (the
whole group, Node runner included) when the run ends.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from malloy_evals.core import paths
from malloy_evals.core.errors import InputError, KitError, UnmeasuredError
from malloy_evals.endpoint.mcp_client import connect
from malloy_evals.sets.eval_set import EvalSet

STARTUP_TIMEOUT_S = 300.0  # a ceiling: readiness is the server listing its tools
_PORT_TRIES = 3


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's group, SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def _wait_ready(proc: subprocess.Popen[bytes], url: str, deadline: float) -> bool:
    """True once the server lists its tools; False when it exited first."""
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            time.sleep(0.1)
            continue
        try:
            with connect(url=url, timeout=30) as client:
                client.list_tools()
            return True
        except KitError:
            time.sleep(0.2)
    raise UnmeasuredError(f"the local endpoint at {url} did not answer within "
                          f"{STARTUP_TIMEOUT_S:g} s")


@contextmanager
def serve_model_http(eval_set: EvalSet) -> Iterator[str]:
    """Serve the set's model/ package (environment and package from set.json) on a free loopback
    port; yield its MCP URL; stop it on exit. Exit 3 when it cannot start (no Node runtime, a
    model that does not load)."""
    if not eval_set.model_dir.is_dir():
        raise InputError(eval_set.model_dir, None, "the set has no model/ package to serve locally")
    script = paths.skill_script("serve_local")
    assert script is not None, "skills/eval-answer/scripts/serve_local.py is part of the kit"
    package = eval_set.package_spec  # its queries within the endpoint's budgets (query-budgets.md)
    why = ""
    for _ in range(_PORT_TRIES):
        port = _free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen([sys.executable, str(script), "--package", package,
                                     "--http", str(port)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
            try:
                ready = _wait_ready(proc, url, time.monotonic() + STARTUP_TIMEOUT_S)
            except BaseException:
                _stop(proc)
                raise
            if ready:
                try:
                    yield url
                finally:
                    _stop(proc)
                return
            _stop(proc)
            log.seek(0)
            why = log.read().decode("utf-8", "replace").strip()
            # Another process took the port between our probe and the server's bind: try another.
            if "cannot be served" not in why:
                break
    last = why.splitlines()[-1] if why else "it exited without a message"
    raise UnmeasuredError(f"the local endpoint over {eval_set.model_dir} did not start: "
                          f"{last.removeprefix('error: ')}")
