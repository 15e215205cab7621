"""The sealed answerer's only way out, run INSIDE the sandbox before the answerer itself.

A sealed attempt has a network namespace of its own: its 127.0.0.1 is its own loopback, with
nothing listening and no route anywhere else. This program listens there, on the addresses the
answerer was configured with (the MCP endpoint's host:port, the model API's, the proxy's), and
relays every connection byte for byte over a Unix socket bound into the sandbox to the harness's
gateway outside (gateway.py), which alone connects out and decides what may pass. Then it runs
the answerer's command as its child and ends as the child ends, with its exit status.

It is program code the answerer may see: it holds no set, run or key, only the listening
addresses and the socket paths (read from a file of lines `host<TAB>port<TAB>socket path`). It
imports nothing but a few modules of the standard library (no json, no subprocess: they would
double its start), so whichever Python the sandbox already binds can run it
(`python3 -I -S netrelay.py CONFIG -- COMMAND...`).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading

_CHUNK = 1 << 16
_BACKLOG = 128


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy one direction until its end, then pass the end on (half-close). The gateway outside
    relays the same way."""
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _relay(conn: socket.socket, unix_path: str) -> None:
    """One answerer connection, relayed to the gateway's socket both ways."""
    outer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        outer.connect(unix_path)
    except OSError:
        conn.close()
        outer.close()
        return
    back = threading.Thread(target=pump, args=(outer, conn), daemon=True)
    back.start()
    pump(conn, outer)
    back.join()
    conn.close()
    outer.close()


def _serve(listener: socket.socket, unix_path: str) -> None:
    while True:
        try:
            conn, _addr = listener.accept()
        except OSError:
            return
        threading.Thread(target=_relay, args=(conn, unix_path), daemon=True).start()


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on the sandbox's own loopback."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(_BACKLOG)
    return sock


def read_config(path: str) -> list[tuple[str, int, str]]:
    """The listeners: one `host<TAB>port<TAB>socket path` a line."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh.read().splitlines():
            host, port, unix_path = line.split("\t", 2)
            out.append((host, int(port), unix_path))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: netrelay.py CONFIG -- COMMAND [ARG ...]\n")
        return 2
    # Every listener is open before the answerer starts: its first connection finds it there.
    for host, port, unix_path in read_config(argv[0]):
        try:
            sock = listen(host, int(port))
        except OSError as exc:
            sys.stderr.write(f"netrelay: cannot listen on {host}:{port} inside the sandbox: "
                             f"{exc.strerror or exc}\n")
            return 126
        threading.Thread(target=_serve, args=(sock, unix_path), daemon=True).start()
    try:
        # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec:
        # the answerer gets them back at their defaults, as any process it starts expects.
        child = os.posix_spawnp(argv[2], argv[2:], os.environ,
                                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as exc:
        sys.stderr.write(f"netrelay: cannot start {argv[2]}: {exc.strerror or exc}\n")
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: os.kill(child, signum))
    _pid, status = os.waitpid(child, 0)  # a signal forwarded meanwhile is retried (PEP 475)
    if os.WIFSIGNALED(status):  # ended by a signal: end the same way, so the harness sees it
        ended_by = os.WTERMSIG(status)
        signal.signal(ended_by, signal.SIG_DFL)
        os.kill(os.getpid(), ended_by)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
