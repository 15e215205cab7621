#!/usr/bin/env python3
"""The kit end to end on the sample set, offline: what `make demo` runs.

Copies the recorded runs of evals/bookshop (baseline, leaky, baseline-2, candidate) into a scratch
folder outside the checkout, measures coverage by replaying the recorded coverage reader, then
scores each run with score_run.py against the kit's local endpoint over the sample model (--local:
real Malloy re-execution; the candidate with --model evals/bookshop/model-candidate, the package
its answerer was served) and the recorded judge (--judge replay), prints the summaries, and says
who owns each failure: diagnose.py with the recorded diagnoser (eval-diagnose), after which
report.py rewrites each run's page (report.html) with the diagnosis in it. Last, did the
model change help? measure_noise.py measures the A/A band from the two baseline sessions into the
scratch folder, and compare_runs.py compares the candidate with the baseline against that band.
Then the live leg: run_answers.py puts four questions to the real Claude Code the kit pins
(--answerer claude-code), its model's turns replayed by the model stand-in on loopback
(scripts/model_standin.py, from evals/bookshop/model-scripts/): the CLI really calls get_context
and execute_query on the local endpoint, each attempt sealed in bubblewrap (without bwrap the leg stops with exit
3 saying how to install it). Without the Node runtime (so without the CLI) it uses
the kit's scripted answerer instead (scripts/scripted_answerer.py, no model, the same calls over
MCP), and says which. Each attempt is recorded and score_run.py scores them; only the judge's
replies are recordings (hand-authored, evals/bookshop/recordings/judge/_authored.live.jsonl).
Last, the improve leg (eval-improve, improve.py) closes the loop on the baseline's refunds issue
in a scratch copy of the set: a deliberately harmful change is gated and rolled back, then the
change model-candidate/ holds is gated and accepted (hand-authored drafts and judge replies).
The checkout is left as it was; the scratch folder and the pages are printed so RESULTS.md,
summary.json, report.html, COMPARE.md and the ledgers can be read afterwards.

--live-only runs the live leg alone: after a judge change, re-make its recordings with
  .venv/bin/python scripts/demo.py --live-only --scratch ../live-demo
  .venv/bin/python scripts/author_recordings.py --set evals/bookshop --replies evals/bookshop/recordings/judge/_authored.live.jsonl --run ../live-demo/runs/live --local   # rewrites evals/bookshop/recordings/judge in the checkout

Examples (`make demo` runs it without --scratch: a new temporary folder):
  .venv/bin/python scripts/demo.py --keep-going --scratch ../malloy-evals-demo
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the library, runnable by path

from malloy_evals.answer.harness.claude_cli import PINNED_EXE

KIT = Path(__file__).resolve().parents[1]
SET_DIR = KIT / "evals" / "bookshop"
RUNS = ("baseline", "leaky", "baseline-2", "candidate")
# Runs answered against another package than model/ (score_run.py --model), and the runs whose
# failures have recorded diagnoses.
MODEL_OF_RUN = {"candidate": SET_DIR / "model-candidate"}
DIAGNOSED = ("baseline", "leaky")
TARGETS = "bk_refunded_amount"  # what the candidate's model change was meant to fix
SCRIPTS = KIT / "skills" / "eval-answer" / "scripts"
DIAGNOSE = KIT / "skills" / "eval-diagnose" / "scripts" / "diagnose.py"
PAGE = "report.html"
SCRIPTED = KIT / "scripts" / "scripted_answerer.py"
# The live leg's cases: two right answers, one that filters 2024 by ship_date (the case's
# mustNotUse vetoes it) and one right refusal. The run id names the judge recordings (live.*).
LIVE_CASES = ("bk_total_revenue", "bk_revenue_by_genre", "bk_revenue_2024", "bk_profit_margin")
LIVE_RUN = "live"
MODEL_SCRIPTS = SET_DIR / "model-scripts"
STANDIN = KIT / "scripts" / "model_standin.py"
STANDIN_READY_S = 120  # a generous ceiling for the stand-in's readiness line on a loaded machine


def rel(path: Path) -> str:
    """A path as a person would type it from the kit's root."""
    try:
        return str(path.relative_to(KIT))
    except ValueError:
        return str(path)


def run_step(title: str, argv: list[str], *, quiet_stdout: bool = False,
             env: dict[str, str] | None = None) -> int:
    """Run one kit command from the kit's root, echoing the command line first."""
    shown = " ".join([".venv/bin/python" if a == sys.executable else rel(Path(a))
                      if a.startswith(str(KIT)) and " " not in a else shlex.quote(a)
                      for a in argv])
    print(f"\n$ {shown}", flush=True)
    proc = subprocess.run(argv, cwd=KIT, check=False, text=True, env=env,
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


@contextmanager
def model_standin(scratch: Path) -> Iterator[dict[str, str]]:
    """The model stand-in serving the live cases' model scripts; yields the environment that
    points Claude Code at it (any key; HOME in the scratch folder, so your own ~/.claude is
    neither read nor written)."""
    log = scratch / "standin-requests.jsonl"
    proc = subprocess.Popen([sys.executable, str(STANDIN), "--scripts", str(MODEL_SCRIPTS),
                             "--request-log", str(log)], cwd=KIT, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(STANDIN_READY_S)
        if not ready or not ready[0].startswith("listening "):
            raise RuntimeError(f"the model stand-in did not start within {STANDIN_READY_S} s")
        home = scratch / "claude-home"
        home.mkdir(exist_ok=True)
        yield {**os.environ, "ANTHROPIC_BASE_URL": ready[0].split()[1],
               "ANTHROPIC_API_KEY": "sk-model-standin-not-a-key", "HOME": str(home)}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def live_leg(scratch: Path) -> int:
    """Answer, record and score four cases live: the real Claude Code against the model stand-in
    (the scripted answerer when there is no CLI) over MCP through the local endpoint
    (run_answers.py), then score_run.py with the judge's recorded replies."""
    real_cli = PINNED_EXE.exists()
    who = ("the real Claude Code (the kit's pinned CLI) and the model stand-in" if real_cli
           else "the scripted answerer (no Claude Code installed: the Node runtime is missing)")
    print(f"\n{'=' * 30} live: run_answers.py with {who} {'=' * 30}", flush=True)
    run_dir = scratch / "runs" / LIVE_RUN
    if run_dir.exists():
        shutil.rmtree(run_dir)
    code = run_step("new_run live", [sys.executable, str(SCRIPTS / "new_run.py"), "--set",
                                     rel(SET_DIR), "--out", str(run_dir), "--answerer-model",
                                     "model-standin" if real_cli else "scripted-answerer",
                                     "--run-id", LIVE_RUN],
                    quiet_stdout=True)
    if code != 0:
        return code
    answer = [sys.executable, str(SCRIPTS / "run_answers.py"), "--run", str(run_dir), "--set",
              rel(SET_DIR), "--local", "--only", ",".join(LIVE_CASES), "--parallel", "2"]
    if real_cli:
        with model_standin(scratch) as env:
            code = run_step("run_answers live", [*answer, "--answerer", "claude-code"], env=env)
    else:
        # The answerer runs in an empty folder of its own: every path in its command is absolute.
        scripted = (f"{sys.executable} {SCRIPTED} --mcp-config {{mcp_config}} "
                    "--question-file {question_file} --max-turns {max_turns}")
        code = run_step("run_answers live", [*answer, "--answerer-cmd", scripted])
    if code != 0:
        return code
    code = run_step("score_run live", [sys.executable, str(SCRIPTS / "score_run.py"), "--run",
                                       str(run_dir), "--set", rel(SET_DIR), "--judge", "replay",
                                       "--local"])
    made = ("Claude Code's tool calls and the re-executed rows were made just now, its model's "
            f"turns replayed from {rel(MODEL_SCRIPTS)}/" if real_cli else
            "the answers, their MCP calls and the re-executed rows were made just now")
    print(f"(live leg, answered by {who}: {made}; the verdicts replay hand-authored judge replies "
          f"from {rel(SET_DIR / 'recordings' / 'judge')}/{LIVE_RUN}.*.json, pinned by request "
          "digest)", flush=True)
    return code


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__.strip()
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                epilog=doc[doc.index("--live-only runs"):],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scratch", type=Path, help="use this folder instead of a new temporary one "
                   "(it must be outside the checkout)")
    p.add_argument("--keep-going", action="store_true",
                   help="score the second run even when the first could not be scored")
    p.add_argument("--live-only", action="store_true",
                   help="run only the live leg (answer, record and score four cases)")
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
    if args.live_only:
        code = live_leg(scratch)
        clean, line = checkout_verdict(before, before_set)
        print(line if clean else f"demo: {line}", file=sys.stdout if clean else sys.stderr)
        return 1 if not clean else (0 if code == 0 else 3)
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
        if name in MODEL_OF_RUN:
            # The coverage report read model/, not this package: the authored coverage stands in.
            argv_score += ["--model", rel(MODEL_OF_RUN[name])]
        elif coverage is not None:
            argv_score += ["--coverage", str(coverage)]
        codes[name] = run_step(f"score_run {name}", argv_score)
        if codes[name] != 0 and not args.keep_going:
            break
        if (codes[name] == 0 and name in DIAGNOSED
                and (SET_DIR / "recordings" / "diagnose").is_dir()):
            # A score says an answer was wrong; the diagnosis says why and who owns the fix.
            code = run_step(f"diagnose {name}", [sys.executable, str(DIAGNOSE),
                                                 "--run", str(runs_dir / name),
                                                 "--set", rel(SET_DIR), "--diagnoser", "replay"])
            if code != 0:
                codes[name] = code
                if not args.keep_going:
                    break
        if codes[name] == 0:
            # score_run wrote the page before the diagnosis existed; write it again with it.
            argv_page = [sys.executable, str(SCRIPTS / "report.py"), "--run", str(runs_dir / name),
                         "--set", rel(SET_DIR)]
            if coverage is not None and name not in MODEL_OF_RUN:
                argv_page += ["--coverage", str(coverage)]
            code = run_step(f"report {name}", argv_page)
            if code != 0:
                codes[name] = code
                if not args.keep_going:
                    break

    if all(codes.get(r) == 0 for r in ("baseline", "baseline-2", "candidate")):
        codes["compare"] = compare_leg(scratch, runs_dir)

    if all(c == 0 for c in codes.values()) or args.keep_going:
        codes[LIVE_RUN] = live_leg(scratch)

    if codes.get("compare") == 0:
        codes["improve"] = improve_leg(scratch, runs_dir)

    print(f"\nscratch folder: {scratch} (RESULTS.md, summary.json, report.html and events.jsonl "
          "per run; noise-band.json; compare/COMPARE.md, compare.json, compare.html)")
    pages = [runs_dir / name / PAGE for name in (*RUNS, LIVE_RUN)]
    pages = [page for page in [*pages, scratch / "compare" / "compare.html"] if page.is_file()]
    for written in pages:
        print(f"page: {written}")
    clean, line = checkout_verdict(before, before_set)
    print(line if clean else f"demo: {line}", file=sys.stdout if clean else sys.stderr)
    if not clean:
        return 1
    print(f"demo finished in {time.monotonic() - started:.0f}s")
    return 0 if all(c == 0 for c in codes.values()) and len(codes) == len(RUNS) + 3 else 3


def compare_leg(scratch: Path, runs_dir: Path) -> int:
    """Did the model change help? The A/A band from the two baseline sessions, then the candidate
    against the baseline with that band and the target the change was meant to fix."""
    print(f"\n{'=' * 30} did the change help? {'=' * 30}", flush=True)
    band = scratch / "noise-band.json"
    code = run_step("measure_noise", [sys.executable, str(SCRIPTS / "measure_noise.py"),
                                      "--runs", str(runs_dir / "baseline"),
                                      str(runs_dir / "baseline-2"), "--set", rel(SET_DIR),
                                      "--out", str(band)])
    if code != 0:
        return code
    return run_step("compare_runs", [sys.executable, str(SCRIPTS / "compare_runs.py"),
                                     "--base", str(runs_dir / "baseline"),
                                     "--candidate", str(runs_dir / "candidate"),
                                     "--set", rel(SET_DIR), "--band", str(band),
                                     "--targets", TARGETS, "--out", str(scratch / "compare")])


# ---------------------------------------------------------------------------------------------
# eval-improve: the loop closed on the baseline's refunds issue (skills/eval-improve/SKILL.md)

IMPROVE = KIT / "skills" / "eval-improve" / "scripts" / "improve.py"
IMPROVE_ASSETS = SET_DIR / "improve"  # the hand-authored drafts
REFUNDS_ISSUE = "baseline:refund-rule-unwritten-for-returned-orders"
# (journal, hand-authored draft, gate run id: names the judge recordings, expected decision)
CHANGES = (("harmful", "harmful-drafts.jsonl", "improve-harmful", "rollback"),
           ("refunds", "drafts.jsonl", "improve-refunds", "accept"))


def improve_leg(scratch: Path, runs_dir: Path) -> int:
    """Close the loop on the refunds issue in a scratch copy of the set: a deliberately harmful
    change (it also counts returned orders as sales) is gated and rolled back, then the change the
    candidate model holds is gated and accepted. The drafts are hand-authored (hand:FILE), the
    answers are the scripted answerer's, made now on each candidate, and the judge's replies are
    hand-authored recordings."""
    print(f"\n{'=' * 30} improve: the refunds issue, gated {'=' * 30}", flush=True)
    started = time.monotonic()
    set_copy = scratch / "bookshop"
    if set_copy.exists():
        shutil.rmtree(set_copy)
    shutil.copytree(SET_DIR, set_copy, ignore=shutil.ignore_patterns("runs", "transcripts"))
    # The scripted answerer's built-in plan holds the cases the gates ask (it runs sealed: it
    # reads nothing of the kit's evals/).
    answerer = (f"{sys.executable} {SCRIPTED} --mcp-config {{mcp_config}} --question-file "
                "{question_file} --max-turns {max_turns}")
    for name, draft, run_id, expected in CHANGES:
        journal = scratch / "improve" / name
        if journal.exists():
            shutil.rmtree(journal)
        candidate = set_copy / f"model-{name}"
        if candidate.exists():
            shutil.rmtree(candidate)
        steps = [
            ["start", "--set", str(set_copy), "--run", str(runs_dir / "baseline"),
             "--issue", REFUNDS_ISSUE, "--journal", str(journal)],
            ["draft", "--journal", str(journal), "--drafter",
             f"hand:{IMPROVE_ASSETS / draft}", "--out", str(candidate)],
            ["gate", "--journal", str(journal), "--candidate-model", str(candidate),
             "--band", str(scratch / "noise-band.json"), "--judge", "replay",
             "--answerer-cmd", answerer, "--guard", "3", "--run-id", run_id, "--parallel", "4",
             # The baseline was recorded from hand-written sessions over an earlier revision of
             # the set's files; the gate's answers are the scripted answerer's, made now.
             "--allow-different-set", "--allow-different-retrieval"],
        ]
        for argv in steps:
            code = run_step(f"improve {argv[0]}", [sys.executable, str(IMPROVE), *argv])
            gate_rejected = argv[0] == "gate" and code == 1 and expected == "rollback"
            if gate_rejected:
                print("(the gate rejected the harmful change, exit 1, as it should: it is rolled "
                      "back)", flush=True)
            elif code != 0:
                return code
        code = run_step(f"improve {expected}", [sys.executable, str(IMPROVE), expected,
                                                "--journal", str(journal)])
        if code != 0:
            return code
    print(f"(improve: the drafts are hand-authored ({rel(IMPROVE_ASSETS)}), the answers were made "
          "just now by the scripted answerer on each candidate, the verdicts replay "
          "hand-authored judge recordings (improve-*.json); the loop took "
          f"{time.monotonic() - started:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
