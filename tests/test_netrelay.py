"""The relay the sandbox runs first (answer/harness/netrelay.py), run here as it runs inside: its
listeners are open before the command starts, each connection reaches the gateway's socket, and
it ends as the command ends (its exit status, or the signal that ended it)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from malloy_evals.answer.harness import gateway, netrelay, sandbox

RELAY = [sys.executable, *sandbox.RELAY_FLAGS, str(sandbox.RELAY_SCRIPT)]


def _config(tmp_path: Path, listen: list[tuple[str, int, str]]) -> Path:
    path = tmp_path / "relay.conf"
    path.write_text(gateway.relay_config(listen))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_connection_to_the_listener_reaches_the_unix_socket_before_the_command_ends(tmp_path):
    outer = socket.socket(socket.AF_UNIX)
    outer.bind(str(tmp_path / "0.sock"))
    outer.listen()

    def answer() -> None:
        conn, _ = outer.accept()
        with conn:
            conn.sendall(b"from the gateway: " + conn.recv(100))

    threading.Thread(target=answer, daemon=True).start()
    port = _free_port()
    config = _config(tmp_path, [("127.0.0.1", port, str(tmp_path / "0.sock"))])
    # The command connects at once: the listener must already be there.
    client = (f"import socket; s = socket.create_connection(('127.0.0.1', {port})); "
              "s.sendall(b'hi'); s.shutdown(socket.SHUT_WR); print(s.recv(100).decode())")
    done = subprocess.run([*RELAY, str(config), "--", sys.executable, "-c", client],
                          capture_output=True, text=True, timeout=120, check=False)
    outer.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "from the gateway: hi"
    assert netrelay.read_config(str(config)) == [("127.0.0.1", port, str(tmp_path / "0.sock"))]


def test_it_ends_with_the_commands_status_or_its_signal_and_restores_sigpipe(tmp_path):
    config = _config(tmp_path, [])
    status = subprocess.run([*RELAY, str(config), "--", "/bin/sh", "-c", "exit 7"],
                            timeout=120, check=False)
    killed = subprocess.run([*RELAY, str(config), "--", "/bin/sh", "-c", "kill -TERM $$"],
                            timeout=120, check=False)
    # The command's ignored signals, read by a program that sets none of its own (grep).
    ignored = subprocess.run([*RELAY, str(config), "--", "grep", "SigIgn", "/proc/self/status"],
                             capture_output=True, text=True, timeout=120, check=False)
    assert status.returncode == 7 and killed.returncode == -signal.SIGTERM
    mask = int(ignored.stdout.split()[1], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):   # Python ignores both; the command must not
        assert not mask & (1 << (sig - 1)), (sig, ignored.stdout)


def test_a_port_it_cannot_listen_on_is_said_and_the_command_never_runs(tmp_path):
    taken = socket.create_server(("127.0.0.1", 0))
    config = _config(tmp_path, [("127.0.0.1", taken.getsockname()[1], str(tmp_path / "x"))])
    done = subprocess.run([*RELAY, str(config), "--", "/bin/sh", "-c", "echo ran"],
                          capture_output=True, text=True, timeout=120, check=False)
    taken.close()
    assert done.returncode == 126 and "cannot listen on 127.0.0.1" in done.stderr
    assert done.stdout == ""
