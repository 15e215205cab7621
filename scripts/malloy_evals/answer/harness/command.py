"""A command-line answerer: Claude Code, or any command that writes the same stream-json.

The child runs in its own process group (a new session) in the attempt's empty working folder,
with stdin empty, the filtered environment, stdout captured to a file as the transcript and
stderr kept beside it. Its time limit counts from its first output on stdout (the stream-json
`init` line, which Claude Code writes once its MCP servers are connected): how long a process
takes to start says how busy the machine is, not how the answerer did. Before that first output
only a generous start-up ceiling applies (`START_UP_LIMIT_S`). On timeout, or when stdout passes its cap, the whole group gets SIGTERM,
then SIGKILL after a short grace; when the child exits, anything it left running in its group is
killed too. What the child did is then read from its stdout: `classify` decides whether it was an
attempt (recorded) or a harness failure (logged, retried), by the rules in
skills/eval-answer/reference/harness.md.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from malloy_evals.answer.transcripts import CUT_OFF_SUBTYPES
from malloy_evals.core import jsonl
from malloy_evals.core.errors import UsageError

# What `{name}` in an --answerer-cmd template stands for (each replaced by a shell-quoted value).
PLACEHOLDERS = ("question_file", "prompt_file", "mcp_config", "workdir", "max_turns", "qid",
                "sample")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
STDERR_CAP_BYTES = 1 << 20      # stderr kept per attempt; the rest is read and dropped
KILL_GRACE_S = 3.0              # between SIGTERM and SIGKILL
# The most an answerer may take to write its first output (its start-up: the interpreter, its
# MCP connections) before its own time limit starts; a ceiling for a loaded machine, not a guess.
START_UP_LIMIT_S = 300.0
_POLL_S = 0.25                  # how often the watcher looks at the clock while the child runs
_CHUNK = 1 << 16


# ---------------------------------------------------------------- building the command line

def check_template(template: str, cwd: Path) -> None:
    """Refuse an --answerer-cmd template that cannot work (exit 2): unknown placeholders, no
    `{question_file}`, unbalanced quotes, or a relative path (the child runs in an empty folder,
    where a path relative to here names nothing)."""
    unknown = sorted({m for m in _PLACEHOLDER.findall(template) if m not in PLACEHOLDERS})
    if unknown:
        raise UsageError(f"--answerer-cmd: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
                         f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
    if "{question_file}" not in template:
        raise UsageError("--answerer-cmd must pass {question_file}: it is how the answerer gets "
                         "the question, exactly as the set stores it")
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise UsageError(f"--answerer-cmd: {exc} (quote it as one shell command line)") from None
    for word in words:
        if "{" in word or "/" not in word or word.startswith(("/", "~", "$")):
            continue
        path = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if path and not os.path.isabs(path) and (cwd / path).exists():
            raise UsageError(f"--answerer-cmd: {path!r} is relative, and the answerer runs in an "
                             f"empty folder of its own; write it as "
                             # absolute, links kept: .venv/bin/python must stay the venv's
                             f"{os.path.abspath(cwd / path)}")


def fill_template(template: str, values: dict[str, str]) -> str:
    """The template with each placeholder replaced by its shell-quoted value."""
    return _PLACEHOLDER.sub(lambda m: shlex.quote(values[m.group(1)])
                            if m.group(1) in values else m.group(0), template)


# ---------------------------------------------------------------- running it

@dataclass(frozen=True)
class ChildRun:
    """How one child process ended."""

    exit_status: int | None       # the return code; negative is the signal that ended it
    seconds: float
    timed_out: bool               # the harness stopped it at --timeout (or the start-up ceiling)
    flooded: bool                 # stdout passed its cap and the harness stopped it
    stdout_bytes: int
    start_error: str | None = None  # it could not be started at all

    def status_text(self) -> str:
        """`exit 1`, `killed by SIGKILL`, `not started`: how the process ended, in words."""
        if self.start_error is not None:
            return "not started"
        if self.exit_status is None:
            return "still running"
        if self.exit_status < 0:
            try:
                return f"killed by {signal.Signals(-self.exit_status).name}"
            except ValueError:
                return f"killed by signal {-self.exit_status}"
        return f"exit {self.exit_status}"


# Process groups of the answerers running now, so an interrupted harness can end them all: they
# run in sessions of their own, where a Ctrl-C at the terminal never reaches them.
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()


def kill_running() -> None:
    """SIGKILL every answerer process group still running (the harness is going away)."""
    with _RUNNING_LOCK:
        groups = list(_RUNNING)
    for pgid in groups:
        _kill_group(pgid, signal.SIGKILL)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _pump(source: IO[bytes], sink: IO[bytes], cap: int, on_cap: Any,
          on_data: Any = None) -> None:
    """Copy `source` to `sink` up to `cap` bytes; past it call `on_cap` once and drop the rest
    (still reading, so the child never blocks on a full pipe). `on_data` is called once, at the
    first bytes read."""
    written = 0
    capped = False
    while True:
        chunk = source.read1(_CHUNK) if hasattr(source, "read1") else source.read(_CHUNK)
        if not chunk:
            break
        if on_data is not None:
            on_data()
            on_data = None
        if written < cap:
            keep = chunk[: cap - written]
            sink.write(keep)
            sink.flush()
            written += len(keep)
        if written >= cap and not capped and len(chunk) and on_cap is not None:
            capped = True
            on_cap()


def run_child(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float,
              stdout_path: Path, stderr_path: Path, max_stdout_bytes: int,
              wrapper: list[str] | None = None,
              start_up_limit: float = START_UP_LIMIT_S) -> ChildRun:
    """Run one answerer process to its end, its timeout or its output cap (see the module doc):
    `timeout` seconds from its first output on stdout, `start_up_limit` seconds for that first
    output to come.

    `wrapper` is `[bwrap, its options...]` (sandbox.py) to run `argv` in: the options reach
    bwrap through a pipe (`bwrap --args FD -- argv`), never its command line."""
    started = time.monotonic()
    # Both capture files are created, exclusively, before the child exists: nothing it plants in
    # their place (a link to a file elsewhere) can turn the harness's writes into writes there.
    with stdout_path.open("xb") as out, stderr_path.open("xb") as err:
        fds: tuple[int, ...] = ()
        if wrapper is not None:
            head, fds = _args_through_pipe(wrapper[0], wrapper[1:])
            argv = [*head, "--", *argv]
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, pass_fds=fds)
        except OSError as exc:
            err.write(f"{exc}\n".encode())
            return ChildRun(None, 0.0, False, False, 0, start_error=exc.strerror or str(exc))
        finally:
            for fd in fds:
                os.close(fd)
        return _watch(proc, out, err, started, timeout=timeout, start_up_limit=start_up_limit,
                      max_stdout_bytes=max_stdout_bytes)


def _wait_for_limit(proc: subprocess.Popen[bytes], started: float, first_output: list[float],
                    timeout: float, start_up_limit: float) -> bool:
    """Wait until the child ends (False) or its limit passes (True): `start_up_limit` from its
    start while it has written nothing, then `timeout` from its first output."""
    while True:
        deadline = (first_output[0] + timeout) if first_output else (started + start_up_limit)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return proc.poll() is None
        try:
            proc.wait(timeout=min(remaining, _POLL_S))
            return False
        except subprocess.TimeoutExpired:
            continue


def _args_through_pipe(program: str, args: list[str]) -> tuple[list[str], tuple[int, ...]]:
    """`[program, --args, FD]` and the pipe's read end FD, the NUL-separated args already in it
    (a sandbox's command line is a few kilobytes: far below a pipe's buffer)."""
    payload = b"".join(a.encode("utf-8") + b"\0" for a in args)
    read_end, write_end = os.pipe()
    try:
        if len(payload) > 60_000:
            raise OSError(f"the sandbox's arguments are too long ({len(payload)} bytes)")
        os.write(write_end, payload)
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return [program, "--args", str(read_end)], (read_end,)


def _watch(proc: subprocess.Popen[bytes], out: IO[bytes], err: IO[bytes], started: float, *,
           timeout: float, start_up_limit: float, max_stdout_bytes: int) -> ChildRun:
    """Pump a started child's output into the capture files until it ends, times out or floods."""
    pgid = proc.pid  # a new session: the child leads its own process group
    with _RUNNING_LOCK:
        _RUNNING.add(pgid)
    flooded = threading.Event()

    def flood() -> None:
        flooded.set()
        _kill_group(pgid, signal.SIGKILL)

    first_output: list[float] = []  # when the child first wrote on stdout (its readiness)

    def spoke() -> None:
        first_output.append(time.monotonic())

    assert proc.stdout is not None and proc.stderr is not None
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, out, max_stdout_bytes, flood,
                                                  spoke),
                              daemon=True, name="answerer-stdout"),
             threading.Thread(target=_pump, args=(proc.stderr, err, STDERR_CAP_BYTES, None),
                              daemon=True, name="answerer-stderr")]
    for t in pumps:
        t.start()
    timed_out = False
    try:
        timed_out = _wait_for_limit(proc, started, first_output, timeout, start_up_limit)
        if timed_out:
            _kill_group(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
    except BaseException:
        _kill_group(pgid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        # Whatever the child left running in its group (a server it started, a stuck helper)
        # ends with it; a grandchild that made its own session is beyond reach.
        _kill_group(pgid, signal.SIGKILL)
        with _RUNNING_LOCK:
            _RUNNING.discard(pgid)
    proc.wait()
    for t in pumps:
        t.join(timeout=5)
    out.flush()
    return ChildRun(exit_status=proc.returncode, seconds=time.monotonic() - started,
                    timed_out=timed_out and not flooded.is_set(), flooded=flooded.is_set(),
                    stdout_bytes=os.fstat(out.fileno()).st_size)


# ---------------------------------------------------------------- what the child did

@dataclass(frozen=True)
class StreamScan:
    """What a captured stdout holds, read tolerantly: how many stream-json events, the result
    line if any, and whether the last line was cut mid-write."""

    events: int
    result: dict[str, Any] | None
    torn_tail: bool


def scan_stream(path: Path) -> StreamScan:
    """Count the JSON objects with a `type` in a captured stdout, and find its `result` line."""
    events = 0
    result: dict[str, Any] | None = None
    torn = False
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                torn = True
            try:
                obj = jsonl.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("type"), str):
                events += 1
                if obj["type"] == "result":
                    result = obj
    return StreamScan(events, result, torn)


@dataclass(frozen=True)
class Verdict:
    """Whether a finished child made an attempt, and if not, why (one line for the log)."""

    is_attempt: bool
    cut_off: bool = False          # an attempt stopped by the harness's timeout
    failure: str | None = None


def classify(run: ChildRun, scan: StreamScan, *, timeout: float, max_stdout_bytes: int) -> Verdict:
    """Attempt or harness failure (skills/eval-answer/reference/harness.md, "attempt or not").

    Any stream-json event makes the session an attempt unless the answerer never finished and
    crashed, flooded its output, or ended with an error result that is not a cut-off (a model or
    transport error, bad credentials): those are not answers and are retried."""
    if run.start_error is not None:
        return Verdict(False, failure=f"could not start the answerer: {run.start_error}")
    if run.flooded:
        return Verdict(False, failure=f"the answerer wrote more than {max_stdout_bytes // (1 << 20)} MB "
                                      "on stdout and was stopped")
    if scan.events == 0:
        if run.timed_out:
            return Verdict(False, failure=f"no stream-json on stdout before it was stopped "
                                          f"({timeout:g} s after its first output, or "
                                          f"{START_UP_LIMIT_S:g} s without any)")
        return Verdict(False, failure=f"the answerer ended ({run.status_text()}) without writing "
                                      "stream-json on stdout")
    result = scan.result
    if result is not None:
        subtype = result.get("subtype")
        if (result.get("is_error") or subtype != "success") and subtype not in CUT_OFF_SUBTYPES:
            said = str(result.get("result") or subtype or "error")[:300]
            return Verdict(False, failure=f"the answerer reported an error ({subtype}): {said}")
        return Verdict(True)
    if run.timed_out:
        return Verdict(True, cut_off=True)
    if run.exit_status != 0:
        return Verdict(False, failure=f"the answerer crashed ({run.status_text()}) before its "
                                      "result line")
    return Verdict(True)


def close_cut_off_stream(path: Path, *, timeout: float, seconds: float, torn_tail: bool) -> None:
    """End a transcript the harness cut off: drop a half-written last line, then append a
    `result` line with subtype `error_timeout`, marked as the harness's, so the attempt is
    recorded truncated. Cost and turns stay unknown: the answerer never reported them."""
    line = {"type": "result", "subtype": "error_timeout", "is_error": True,
            "duration_ms": int(seconds * 1000), "result": "",
            "written_by": f"run_answers.py: the answerer was stopped after {timeout:g} s"}
    # Opened without following a link (whatever the answerer left behind may still run).
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if torn_tail:
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            os.ftruncate(fd, data.rfind(b"\n") + 1)
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, (json.dumps(line) + "\n").encode("utf-8"))
    finally:
        os.close(fd)
