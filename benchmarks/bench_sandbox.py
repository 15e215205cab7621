#!/usr/bin/env python3
"""Benchmark the sandbox's cost per attempt: sealed with its own network, sealed as before (files
and processes only, the network shared), and unsealed, side by side.

Three measurements, each taking turns between its modes (so a drift of the machine's speed
touches them alike):

- **start**: one process started the way the harness starts an attempt's command, under the
  run's real sandbox policy (the scripted answerer's program binds, the system folders, the
  allow-listed environment; bwrap's options through a pipe): `sealed+net` is today's seal (its
  own network namespace, the try's gateway listening, the relay started first inside, then the
  command), `sealed` the seal before it (no network namespace, no relay, no gateway), `unsealed`
  the command directly. Two commands: `true` (the bare cost of the namespaces, the mounts and
  the relay) and the scripted answerer's `--help` (a Python program importing the kit's
  library from inside the sandbox).
- **round trip**: one MCP tools/call (`malloy_getContext` of the package) from inside the
  sandbox, sealed+net through the relay and the gateway, sealed straight to the endpoint; the
  median of `--calls` calls made by one process.
- **attempt**: `run_answers.py` answering `--cases` cases of the bookshop set with the scripted
  answerer through one shared local endpoint, sealed (with its network) and with --no-sandbox;
  the figure is each attempt's own seconds as harness.jsonl records them.

`--argv` prints the two bwrap command lines of the `true` start (sealed+net, sealed) instead, for
timing them from outside as whole processes. Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_sandbox.py --runs 20 --rounds 3
  .venv/bin/python benchmarks/bench_sandbox.py --runs 5 --rounds 1 --cases 1 --calls 10 --json
  .venv/bin/python benchmarks/bench_sandbox.py --argv
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from measure import KIT_ROOT, load, parser, table

sys.path.insert(0, str(KIT_ROOT / "scripts"))

from malloy_evals.answer.harness import command, isolation, network, sandbox
from malloy_evals.answer.harness.gateway import open_gateway, relay_config
from malloy_evals.answer.harness.local import serve_model_http
from malloy_evals.core import paths
from malloy_evals.endpoint.mcp_server import answerer_client_prefix, answerer_client_url
from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import load_set

PYTHON = str(KIT_ROOT / ".venv" / "bin" / "python")
SCRIPTED = KIT_ROOT / "scripts" / "scripted_answerer.py"
RUN_ANSWERS = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "run_answers.py"
CASES = ("bk_total_revenue", "bk_profit_margin", "bk_revenue_by_genre", "bk_member_count")
MODES = ("sealed+net", "sealed", "unsealed")
TOOLS = ["malloy_getContext", "malloy_executeQuery"]
# One process timing `calls` MCP tools/call round trips to the URL it is given (stdlib only).
ROUND_TRIPS = textwrap.dedent("""
    import http.client, json, statistics, sys, time, urllib.parse
    url, calls = urllib.parse.urlsplit(sys.argv[1]), int(sys.argv[2])
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "malloy_getContext",
        "arguments": {"environmentName": "samples", "packageName": "bookshop"}}})
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        c.request("POST", url.path, body=body, headers={"Content-Type": "application/json",
                  "Accept": "application/json, text/event-stream"})
        r = c.getresponse()
        assert r.status == 200 and b"bookshop" in r.read(), r.status
        c.close()
        took.append(time.perf_counter() - started)
    print(json.dumps({"median_s": statistics.median(took)}))
""")


def policy(scratch: Path) -> sandbox.SandboxPolicy:
    """The policy run_answers makes for the scripted answerer (protecting a stand-in run)."""
    bwrap = sandbox.find_bwrap()
    program = sandbox.program_binds("command", PYTHON, [str(SCRIPTED)])
    protected = [paths.EVALS_DIR, scratch]
    return sandbox.make_policy(bwrap, sandbox.bwrap_version(bwrap), program=program, extra=[],
                               protected=protected, temp_base=Path(tempfile.gettempdir()),
                               env_names=sandbox.allowed_env_names("command"))


def endpoint_allow_list(url: str) -> network.NetworkAllowList:
    """What run_answers --local allows: the endpoint's per-try client path, its tools."""
    return network.NetworkAllowList((network.mcp_destination(
        url, tools=TOOLS, per_try_prefix=answerer_client_prefix(url)),))


@contextmanager
def attempt(pol: sandbox.SandboxPolicy, mode: str, work: Path, url: str
            ) -> Iterator[tuple[list[str] | None, Path | None, dict[str, str]]]:
    """One attempt's wrapper (None unsealed), relay configuration and environment, as the
    harness makes them in `mode`; the gateway, for sealed+net, listens while the block runs."""
    workdir, inputs = work / "work", work / "inputs"
    for d in (workdir, inputs):
        d.mkdir(parents=True, exist_ok=True)
    if mode == "unsealed":
        yield None, None, dict(os.environ)
        return
    env = sandbox.sandbox_environment(os.environ, pol.env_names,
                                      path_value=os.environ.get("PATH"), workdir=workdir)
    if mode == "sealed":  # the seal before the network: no namespace of its own, no relay
        options = [o for o in pol.options(workdir=workdir, inputs=inputs) if o != "--unshare-net"]
        yield [pol.bwrap, *options], None, env
        return
    allow = endpoint_allow_list(url).for_try(answerer_client_url(url, 1))
    shutil.rmtree(work / "net", ignore_errors=True)  # the last run's (the harness's go with it)
    with open_gateway(allow, work) as (_gate, config):
        yield ([pol.bwrap, *pol.options(workdir=workdir, inputs=inputs, sockets=config.parent)],
               config, env)


def run_once(argv: list[str], pol: sandbox.SandboxPolicy, mode: str, work: Path,
             url: str) -> tuple[float, str]:
    """Seconds to run `argv` to its end in `mode`, as the harness starts it, and its stdout."""
    out, err = work / "out", work / "err"
    for f in (out, err):
        f.unlink(missing_ok=True)
    with attempt(pol, mode, work, url) as (wrapper, config, env):
        full = pol.command(argv, config) if wrapper is not None else argv
        started = time.perf_counter()
        run = command.run_child(full, cwd=work / "work", env=env, timeout=120, stdout_path=out,
                                stderr_path=err, max_stdout_bytes=1 << 20, wrapper=wrapper)
        seconds = time.perf_counter() - started
    if run.exit_status != 0:
        raise SystemExit(f"{argv} ({mode}) ended {run.status_text()}: {err.read_text()[-500:]}")
    return seconds, out.read_text()


def bench_start(pol: sandbox.SandboxPolicy, scratch: Path, url: str,
                runs: int) -> list[dict[str, Any]]:
    rows = []
    for label, argv in (("true", ["/bin/true"]),
                        ("scripted answerer --help", [PYTHON, str(SCRIPTED), "--help"])):
        for mode in MODES:
            run_once(argv, pol, mode, scratch / "warm", url)  # page cache, .pyc files
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(runs):
            for mode in MODES:
                times[mode].append(run_once(argv, pol, mode, scratch / mode, url)[0])
        rows.append(_row(f"start: {label}", runs, times))
    return rows


def bench_round_trip(pol: sandbox.SandboxPolicy, scratch: Path, url: str, calls: int,
                     rounds: int) -> list[dict[str, Any]]:
    probe = scratch / "round_trips.py"
    probe.write_text(ROUND_TRIPS)
    # The probe is bound like the answerer's own script (a file beside it in the scratch folder).
    pol = replace(pol, extra=(*pol.extra, str(probe)))
    target = answerer_client_url(url, 1)
    times: dict[str, list[float]] = {m: [] for m in MODES[:2]}
    for _ in range(rounds):
        for mode in MODES[:2]:
            _s, said = run_once([sys.executable, str(probe), target, str(calls)], pol, mode,
                                scratch / f"rt-{mode}", url)
            times[mode].append(json.loads(said)["median_s"])
    return [_row(f"round trip: one MCP tools/call, median of {calls} x {rounds}",
                 calls * rounds, times)]


def bench_attempts(url: str, rounds: int, cases: int) -> list[dict[str, Any]]:
    eval_set = load_set(paths.EVALS_DIR / "bookshop")
    template = (f"{shlex.quote(PYTHON)} {shlex.quote(str(SCRIPTED))} --mcp-config {{mcp_config}} "
                "--question-file {question_file}")
    times: dict[str, list[float]] = {"sealed+net": [], "unsealed": []}
    with tempfile.TemporaryDirectory(prefix="bench-sb-") as tmp:
        for r in range(rounds):
            for mode, seconds in times.items():
                run = Run.create(Path(tmp) / f"{mode}{r}", eval_set.dir, "scripted-answerer",
                                 run_id=f"r{r}")
                argv = [PYTHON, str(RUN_ANSWERS), "--run", str(run.dir), "--set",
                        str(eval_set.dir), "--mcp-url", url, "--only",
                        ",".join(CASES[:cases]), "--answerer-cmd", template]
                if mode == "unsealed":
                    argv.append("--no-sandbox")
                subprocess.run(argv, cwd=KIT_ROOT, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                for line in (run.dir / "harness.jsonl").read_text().splitlines():
                    event = json.loads(line)
                    if event.get("event") == "try" and event.get("outcome") == "recorded":
                        seconds.append(event["seconds"])
    return [_row(f"attempt: run_answers, {cases} case(s) x {rounds} round(s)",
                 len(times["unsealed"]), times)]


def _row(what: str, n: int, times: dict[str, list[float]]) -> dict[str, Any]:
    med = {m: round(statistics.median(v) * 1000, 1) for m, v in times.items() if v}
    row: dict[str, Any] = {"what": what, "n": n, "load": load(),
                           **{f"{m}_median_ms": med.get(m) for m in MODES}}
    if "sealed+net" in med and "sealed" in med:
        row["network_cost_ms"] = round(med["sealed+net"] - med["sealed"], 1)
    return row


def print_argv(pol: sandbox.SandboxPolicy, scratch: Path) -> None:
    """The `true` start's two bwrap command lines, sealed+net and sealed, one per line (the
    relay's configuration names sockets no gateway serves: `true` never connects)."""
    workdir, inputs, net = scratch / "work", scratch / "inputs", scratch / "net"
    for d in (workdir, inputs, net):
        d.mkdir(parents=True, exist_ok=True)
    config = net / "relay.conf"
    config.write_text(relay_config([("127.0.0.1", 40000, str(net / "0.sock"))]))
    with_net = pol.argv(["/bin/true"], workdir=workdir, inputs=inputs, sockets=net,
                        relay_config=config)
    before = [o for o in pol.argv(["/bin/true"], workdir=workdir, inputs=inputs)
              if o != "--unshare-net"]
    for argv in (with_net, before):
        print(shlex.join(argv))


def _column(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: row.get(key)


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--runs", type=int, default=20, help="starts of each command in each mode")
    p.add_argument("--rounds", type=int, default=3, help="run_answers calls (and round-trip "
                                                          "processes) in each mode")
    p.add_argument("--cases", type=int, default=2, choices=range(1, len(CASES) + 1),
                   help="cases each run_answers call answers")
    p.add_argument("--calls", type=int, default=20, help="MCP calls per round-trip process")
    p.add_argument("--argv", action="store_true", help="print the `true` start's bwrap command "
                                                       "lines and stop")
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-sandbox-", dir=isolation.temp_base([])))
    pol = policy(base)
    if args.argv:
        print_argv(pol, base / "argv")  # left for the timing that follows; under the temp folder
        return 0
    with serve_model_http(load_set(paths.EVALS_DIR / "bookshop")) as url:
        rows = (bench_start(pol, base, url, args.runs)
                + bench_round_trip(pol, base, url, args.calls, args.rounds)
                + bench_attempts(url, args.rounds, args.cases))
    table(rows, {"what": lambda r: r["what"], "n": lambda r: r["n"],
                 **{f"{m} median ms": _column(f"{m}_median_ms") for m in MODES},
                 "network cost ms": _column("network_cost_ms"),
                 "load": lambda r: r["load"]}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
