#!/usr/bin/env python3
"""Benchmark the sandbox's start-up cost per attempt, sealed and unsealed side by side.

Two measurements, each taking turns (sealed, unsealed, sealed, ...) so a drift of the machine's
speed touches both alike:

- **start**: one process started the way the harness starts an attempt's command, under the
  run's real sandbox policy (the scripted answerer's program binds, the system folders, the
  allow-listed environment; bwrap's options through a pipe) or directly. Two commands: `true`
  (the bare cost of making and tearing down the namespaces and mounts) and the scripted
  answerer's `--help` (a Python program importing the kit's library from inside the sandbox).
- **attempt**: `run_answers.py` answering `--cases` cases of the bookshop set with the scripted
  answerer through one shared local endpoint, sealed and with --no-sandbox; the figure is each
  attempt's own seconds as harness.jsonl records them (the answerer's start to its end).

Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_sandbox.py --runs 20 --rounds 3
  .venv/bin/python benchmarks/bench_sandbox.py --runs 5 --rounds 1 --cases 1 --json
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from measure import KIT_ROOT, load, parser, table

sys.path.insert(0, str(KIT_ROOT / "scripts"))

from malloy_evals.answer.harness import command, sandbox
from malloy_evals.answer.harness.local import serve_model_http
from malloy_evals.core import paths
from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import load_set

PYTHON = str(KIT_ROOT / ".venv" / "bin" / "python")
SCRIPTED = KIT_ROOT / "scripts" / "scripted_answerer.py"
RUN_ANSWERS = KIT_ROOT / "skills" / "eval-answer" / "scripts" / "run_answers.py"
CASES = ("bk_total_revenue", "bk_profit_margin", "bk_revenue_by_genre", "bk_member_count")


def policy(scratch: Path) -> sandbox.SandboxPolicy:
    """The policy run_answers makes for the scripted answerer (protecting a stand-in run)."""
    bwrap = sandbox.find_bwrap()
    program = sandbox.program_binds("command", PYTHON, [str(SCRIPTED)])
    protected = [paths.EVALS_DIR, scratch]
    return sandbox.make_policy(bwrap, sandbox.bwrap_version(bwrap), program=program, extra=[],
                               protected=protected, temp_base=Path(tempfile.gettempdir()),
                               env_names=sandbox.allowed_env_names("command"))


def start_once(argv: list[str], pol: sandbox.SandboxPolicy | None, work: Path) -> float:
    """Seconds to run `argv` to its end, sealed under `pol` or not, as the harness starts it."""
    workdir, inputs = work / "work", work / "inputs"
    for d in (workdir, inputs):
        d.mkdir(parents=True, exist_ok=True)
    out, err = work / "out", work / "err"
    for f in (out, err):
        f.unlink(missing_ok=True)
    env = dict(os.environ)
    wrapper = None
    if pol is not None:
        env = sandbox.sandbox_environment(os.environ, pol.env_names, path_value=env.get("PATH"),
                                          workdir=workdir)
        wrapper = [pol.bwrap, *pol.options(workdir=workdir, inputs=inputs)]
    started = time.perf_counter()
    run = command.run_child(argv, cwd=workdir, env=env, timeout=120, stdout_path=out,
                            stderr_path=err, max_stdout_bytes=1 << 20, wrapper=wrapper)
    seconds = time.perf_counter() - started
    if run.exit_status != 0:
        raise SystemExit(f"{argv} ended {run.status_text()}: {err.read_text()[-500:]}")
    return seconds


def bench_start(runs: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        scratch = Path(tmp)
        pol = policy(scratch)
        for label, argv in (("true", ["/bin/true"]),
                            ("scripted answerer --help", [PYTHON, str(SCRIPTED), "--help"])):
            for mode in (pol, None):
                start_once(argv, mode, scratch / "warm")  # page cache, .pyc files
            times: dict[str, list[float]] = {"sealed": [], "unsealed": []}
            for _ in range(runs):
                times["sealed"].append(start_once(argv, pol, scratch / "s"))
                times["unsealed"].append(start_once(argv, None, scratch / "u"))
            rows.append(_row(f"start: {label}", runs, times))
    return rows


def bench_attempts(rounds: int, cases: int) -> list[dict[str, Any]]:
    eval_set = load_set(paths.EVALS_DIR / "bookshop")
    template = (f"{shlex.quote(PYTHON)} {shlex.quote(str(SCRIPTED))} --mcp-config {{mcp_config}} "
                "--question-file {question_file}")
    times: dict[str, list[float]] = {"sealed": [], "unsealed": []}
    with serve_model_http(eval_set) as url, tempfile.TemporaryDirectory(prefix="bench-sb-") as tmp:
        for r in range(rounds):
            for mode in ("sealed", "unsealed"):
                run = Run.create(Path(tmp) / f"{mode}{r}", eval_set.dir, "scripted-answerer",
                                 run_id=f"{mode}{r}")
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
                        times[mode].append(event["seconds"])
    return [_row(f"attempt: run_answers, {cases} case(s) x {rounds} round(s)",
                 len(times["sealed"]), times)]


def _row(what: str, n: int, times: dict[str, list[float]]) -> dict[str, Any]:
    sealed = statistics.median(times["sealed"])
    unsealed = statistics.median(times["unsealed"])
    return {"what": what, "n": n, "load": load(),
            "sealed_median_ms": round(sealed * 1000, 1),
            "unsealed_median_ms": round(unsealed * 1000, 1),
            "cost_ms": round((sealed - unsealed) * 1000, 1)}


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--runs", type=int, default=20, help="starts of each command in each mode")
    p.add_argument("--rounds", type=int, default=3, help="run_answers calls in each mode")
    p.add_argument("--cases", type=int, default=2, choices=range(1, len(CASES) + 1),
                   help="cases each run_answers call answers")
    args = p.parse_args()
    rows = bench_start(args.runs) + bench_attempts(args.rounds, args.cases)
    table(rows, {"what": lambda r: r["what"], "n": lambda r: r["n"],
                 "sealed median ms": lambda r: r["sealed_median_ms"],
                 "--no-sandbox median ms": lambda r: r["unsealed_median_ms"],
                 "sandbox cost ms": lambda r: r["cost_ms"], "load": lambda r: r["load"]},
          args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
