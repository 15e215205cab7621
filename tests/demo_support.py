"""The demo, run once per test session and read by every module (and every worker) that needs it.

`make test` runs the suite in pytest-xdist workers, each a process with session fixtures of its
own. The demo takes the better part of a minute, so it is started once, in the background, as
soon as a session's collection shows a test that reads it: the first worker to claim the run's
shared folder starts it (a process of its own, as `make demo` starts one), the tests go on
meanwhile, and each worker's `demo_run` fixture (conftest.py) waits for it and reads what it
wrote. Readers only read: the demo's output is the same for all of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from script_support import KIT, make_scratch

# The demo as its --help writes it (`.venv/bin/python scripts/demo.py --keep-going --scratch
# ../malloy-evals-demo`), run from a scratch copy of the kit's root.
DEMO = KIT / "scripts" / "demo.py"
DEMO_ARGS = ("--keep-going", "--scratch", "../malloy-evals-demo")
TIMEOUT = 900.0  # seconds: a demo still running then is stopped, and its readers fail (its
# improve leg answers, scores and compares twice more: 600 s was too short on a loaded machine)
CLAIM = "demo-session"  # the shared folder: the scratch kit, the demo's output, its exit code


@dataclass(frozen=True)
class DemoRun:
    """What the session's demo printed and where it wrote."""

    kit: Path                                # the scratch copy of the kit it ran from
    scratch: Path                            # its --scratch folder: runs/, noise-band.json, compare/
    proc: subprocess.CompletedProcess[str]   # exit code, stdout, stderr


def shared_root(basetemp: Path) -> Path:
    """The folder every worker of this run sees: under xdist each worker's basetemp is
    `<the run's>/popen-gwN`, so their parent; in a single process the session's own."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


class DemoLauncher:
    """Starts the demo in the background, at most once per run across workers."""

    def __init__(self, root: Path) -> None:
        self.folder = root / CLAIM
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """Claim the shared folder and start the demo there; a no-op when a worker (this one
        or another) already has."""
        try:
            self.folder.mkdir()
        except FileExistsError:
            return
        kit = make_scratch(self.folder)
        with open(self.folder / "stdout.txt", "w") as out, \
                open(self.folder / "stderr.txt", "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(DEMO.relative_to(KIT)), *DEMO_ARGS], cwd=kit,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, text=True)
        threading.Thread(target=self._record_exit, daemon=True).start()

    def _record_exit(self) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
            with open(self.folder / "stderr.txt", "a") as err:
                err.write(f"\n[the demo did not finish in {TIMEOUT:.0f} s and was stopped]\n")
        partial = self.folder / "exit_code.partial"
        partial.write_text(str(code))
        partial.replace(self.folder / "exit_code")  # readers see it whole or not at all

    def wait(self) -> None:
        """Until a demo this process started has ended (its own timeout stops it)."""
        if self.proc is not None:
            while not (self.folder / "exit_code").is_file() and self.proc.poll() is None:
                time.sleep(0.2)

    def stop(self) -> None:
        """End a demo this process started that is still running (a session cut short)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def result(self) -> DemoRun:
        """Wait for the demo (whichever worker started it) and read what it wrote."""
        done = self.folder / "exit_code"
        deadline = time.monotonic() + TIMEOUT + 60
        while not done.is_file():
            assert time.monotonic() < deadline, f"the session's demo never finished: {self.folder}"
            time.sleep(0.2)
        kit = self.folder / "kit"
        proc = subprocess.CompletedProcess(
            [sys.executable, str(DEMO.relative_to(KIT)), *DEMO_ARGS], int(done.read_text()),
            (self.folder / "stdout.txt").read_text(), (self.folder / "stderr.txt").read_text())
        return DemoRun(kit, (kit / DEMO_ARGS[-1]).resolve(), proc)
