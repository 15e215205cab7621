#!/usr/bin/env python3
"""The kit end to end on the sample set, offline: what `make demo` runs.

Copies the two recorded runs of evals/bookshop (baseline, leaky) into a scratch folder outside the
checkout, measures coverage by replaying the recorded coverage reader, then scores each run with
score_run.py against the kit's local endpoint over the sample model (--local: real Malloy
re-execution) and the recorded judge (--judge replay), prints both summaries, and then says who
owns each failure: diagnose.py with the recorded diagnoser (eval-diagnose). The checkout is
left as it was; the scratch folder is printed so RESULTS.md, summary.json and the ledgers can be
read afterwards.

Examples (`make demo` runs it without --scratch: a new temporary folder):
  .venv/bin/python scripts/demo.py --keep-going --scratch ../malloy-evals-demo
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
SET_DIR = KIT / "evals" / "bookshop"
RUNS = ("baseline", "leaky")
SCRIPTS = KIT / "skills" / "eval-answer" / "scripts"
DIAGNOSE = KIT / "skills" / "eval-diagnose" / "scripts" / "diagnose.py"


def rel(path: Path) -> str:
    """A path as a person would type it from the kit's root."""
    try:
        return str(path.relative_to(KIT))
    except ValueError:
        return str(path)


def run_step(title: str, argv: list[str], *, quiet_stdout: bool = False) -> int:
    """Run one kit command from the kit's root, echoing the command line first."""
    shown = " ".join([".venv/bin/python" if a == sys.executable else rel(Path(a))
                      if a.startswith(str(KIT)) else a for a in argv])
    print(f"\n$ {shown}", flush=True)
    proc = subprocess.run(argv, cwd=KIT, check=False, text=True,
                          stdout=subprocess.PIPE if quiet_stdout else None)
    if proc.returncode not in (0,):
        print(f"[{title}: exit {proc.returncode}]", flush=True)
    return proc.returncode


def git_status(*paths: str) -> str | None:
    """`git status --porcelain` of the checkout (limited to `paths` when given), or None when
    this is not a git checkout."""
    if shutil.which("git") is None or not (KIT / ".git").exists():
        return None
    proc = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *paths],
                          cwd=KIT, check=False, capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def checkout_verdict(before: str | None, before_set: str | None) -> tuple[bool, str]:
    """Whether the demo left the checkout as it found it, and the line that says so.

    From a clean checkout (a fresh clone) nothing at all may change. In a working tree that
    already had local edits, only the sample set's folder is compared: the demo reads nothing
    else, and other edits may be in progress while it runs.
    """
    after = git_status()
    if before is None or after is None:
        return True, "not a git checkout: nothing to compare"
    if not before:
        if after:
            return False, "the checkout changed while the demo ran:\n" + after
        return True, "checkout clean (git status shows nothing)"
    after_set = git_status(rel(SET_DIR))
    if after_set != before_set:
        return False, f"{rel(SET_DIR)} changed while the demo ran:\n{after_set}"
    return True, (f"checkout untouched ({rel(SET_DIR)} as it was; other local edits predate "
                  "the demo)")


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__.strip()
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                epilog=doc[doc.index("Examples"):],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scratch", type=Path, help="use this folder instead of a new temporary one "
                   "(it must be outside the checkout)")
    p.add_argument("--keep-going", action="store_true",
                   help="score the second run even when the first could not be scored")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)

    started = time.monotonic()
    before = git_status()
    before_set = git_status(rel(SET_DIR))
    scratch = (args.scratch.resolve() if args.scratch
               else Path(tempfile.mkdtemp(prefix="malloy-evals-demo-")))
    if scratch == KIT or KIT in scratch.parents:
        p.error(f"--scratch {scratch} is inside the checkout; the demo never writes there")
    missing = [r for r in RUNS if not (SET_DIR / "runs" / r / "run.json").is_file()]
    if missing:
        print(f"demo: the sample set has no recorded run {', '.join(missing)} in "
              f"{rel(SET_DIR / 'runs')}", file=sys.stderr)
        return 3
    print(f"malloy-evals demo: scratch folder {scratch}")
    runs_dir = scratch / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    for name in RUNS:
        target = runs_dir / name
        if target.exists():
            shutil.rmtree(target)
        # Only the recorded inputs travel: results of an earlier scoring are derived, not input.
        shutil.copytree(SET_DIR / "runs" / name, target,
                        ignore=shutil.ignore_patterns("RESULTS.md", "summary.json"))

    coverage: Path | None = scratch / "coverage.json"
    if (SCRIPTS / "check_coverage.py").is_file() and (SET_DIR / "recordings" / "coverage").is_dir():
        code = run_step("coverage", [sys.executable, str(SCRIPTS / "check_coverage.py"),
                                     "--set", rel(SET_DIR), "--model", rel(SET_DIR / "model"),
                                     "--reader", "replay", "--out", str(coverage)],
                        quiet_stdout=True)
        if code != 0 or not coverage.is_file():
            print("demo: coverage could not be measured; scoring with the authored coverage",
                  flush=True)
            coverage = None
        else:
            print(f"coverage report: {coverage}", flush=True)
    else:
        coverage = None

    codes = {}
    for name in RUNS:
        print(f"\n{'=' * 30} {name} {'=' * 30}", flush=True)
        argv_score = [sys.executable, str(SCRIPTS / "score_run.py"), "--run", str(runs_dir / name),
                      "--set", rel(SET_DIR), "--judge", "replay", "--local"]
        if coverage is not None:
            argv_score += ["--coverage", str(coverage)]
        codes[name] = run_step(f"score_run {name}", argv_score)
        if codes[name] != 0 and not args.keep_going:
            break
        if codes[name] == 0 and (SET_DIR / "recordings" / "diagnose").is_dir():
            # A score says an answer was wrong; the diagnosis says why and who owns the fix.
            code = run_step(f"diagnose {name}", [sys.executable, str(DIAGNOSE),
                                                 "--run", str(runs_dir / name),
                                                 "--set", rel(SET_DIR), "--diagnoser", "replay"])
            if code != 0:
                codes[name] = code
                if not args.keep_going:
                    break

    print(f"\nscratch folder: {scratch} (RESULTS.md, summary.json and events.jsonl per run)")
    clean, line = checkout_verdict(before, before_set)
    print(line if clean else f"demo: {line}", file=sys.stdout if clean else sys.stderr)
    if not clean:
        return 1
    print(f"demo finished in {time.monotonic() - started:.0f}s")
    return 0 if all(c == 0 for c in codes.values()) and len(codes) == len(RUNS) else 3


if __name__ == "__main__":
    sys.exit(main())
