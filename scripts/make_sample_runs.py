#!/usr/bin/env python3
"""Build the bookshop set's recorded runs from its hand-written transcripts, as a user would.

For each run folder under evals/bookshop/transcripts/ (baseline, leaky, baseline-2, candidate)
this calls `new_run.py --set evals/bookshop --out evals/bookshop/runs/<run> --answerer-model <m>
--run-id <run> --phase <phase>` (`loop` for the candidate arm, `baseline` otherwise) and then
`record_attempt.py` once per transcript (`<qid>.jsonl`), or per host log (`<qid>.hostlog.json`
with its `<qid>.answer.md`). Nothing is scored here: score_run.py does that (the candidate with
`--local --model evals/bookshop/model-candidate`, the package its answerer was served).

Transcripts may say `@KIT_ROOT@` where the answerer's working directory was this checkout (the
leaky run's recursive grep); it is replaced by the checkout's real path in a temporary copy
before recording, so the contamination check sees the session where it would have run.

Examples:
  .venv/bin/python scripts/make_sample_runs.py --only leaky --out-root runs/bookshop
  .venv/bin/python scripts/make_sample_runs.py --force   # rewrites evals/bookshop/runs in the checkout
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
SET = KIT / "evals" / "bookshop"
SCRIPTS = KIT / "skills" / "eval-answer" / "scripts"
PLACEHOLDER = "@KIT_ROOT@"
ANSWERER = "claude-sonnet-4-5"
PHASE_OF_RUN = {"candidate": "loop"}  # a run made while improving the model; others: baseline


def _run(args: list[str]) -> None:
    """Run one kit script by path, echoing the command; any failure stops the build."""
    shown = " ".join(str(a) for a in args[1:])
    print(f"$ {Path(args[0]).name} {shown}", file=sys.stderr)
    done = subprocess.run([str(a) for a in args], check=False, cwd=KIT, text=True, capture_output=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"failed (exit {done.returncode}): {shown}")


def _localise(src: Path, tmp: Path) -> Path:
    """A copy of `src` with the checkout placeholder filled in (the original when it has none)."""
    text = src.read_text(encoding="utf-8")
    if PLACEHOLDER not in text:
        return src
    out = tmp / src.name
    out.write_text(text.replace(PLACEHOLDER, str(KIT)), encoding="utf-8")
    return out


def build_run(name: str, out_root: Path, force: bool) -> Path:
    """Create run `name` and record every transcript and host log found for it."""
    source = SET / "transcripts" / name
    out = out_root / name
    if out.exists() and any(out.iterdir()):
        if not force:
            raise SystemExit(f"{out} exists and is not empty; pass --force to rebuild it")
        shutil.rmtree(out)
    py = sys.executable
    _run([py, SCRIPTS / "new_run.py", "--set", SET, "--out", out, "--answerer-model", ANSWERER,
          "--run-id", name, "--phase", PHASE_OF_RUN.get(name, "baseline")])
    with tempfile.TemporaryDirectory(prefix=f"bookshop-{name}-") as tmpdir:
        tmp = Path(tmpdir)
        for transcript in sorted(source.glob("*.jsonl")):
            _run([py, SCRIPTS / "record_attempt.py", "--run", out, "--set", SET,
                  "--qid", transcript.stem, "--transcript", _localise(transcript, tmp)])
        for log in sorted(source.glob("*.hostlog.json")):
            qid = log.name.removesuffix(".hostlog.json")
            answer = log.with_name(f"{qid}.answer.md")
            _run([py, SCRIPTS / "record_attempt.py", "--run", out, "--set", SET, "--qid", qid,
                  "--host-log", _localise(log, tmp), "--answer-file", answer])
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Examples:" + __doc__.split("Examples:")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", metavar="RUN",
                        help="build only this run (repeatable; default: all)")
    parser.add_argument("--out-root", type=Path, default=SET / "runs",
                        help="where run folders go (default: evals/bookshop/runs)")
    parser.add_argument("--force", action="store_true", help="rebuild a run folder that exists")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Build the runs named by --only (default: every folder under transcripts/)."""
    args = build_parser().parse_args(argv)
    # The recording scripts run from the kit's root: a relative --out-root is this folder's.
    out_root = args.out_root.resolve()
    names = args.only or sorted(p.name for p in (SET / "transcripts").iterdir() if p.is_dir())
    for name in names:
        out = build_run(name, out_root, args.force)
        print(f"{name}: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
