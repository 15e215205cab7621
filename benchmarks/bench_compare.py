#!/usr/bin/env python3
"""Benchmark compare_runs on two large arms and review.py listing a large queue, beside floors.

Generates, through the real ledger (tests/arms_support.py's set, tests/tie_support.py's tied
scores with their judge artifacts): a set of N cases and two runs of one scored attempt per case
(verdicts drawn with a fixed seed, about a fifth flipping between the arms), then times, each in its
own child under `/usr/bin/time -v`:

  compare_runs   compare_runs.py --base A --candidate B --set S --json, by path
  duckdb-flips   DuckDB reading both ledgers with declared columns (kind, qid, verdict) and
                 counting the paired table's four cells: the floor of reading two arms
  bootstrap-*    the paired bootstrap of the N differences in-process: drawn from the four cell
                 counts (`report.stats.cell_bootstrap`, what compare_runs does) and case by case
                 (`report.stats.bootstrap`, what it did), 10,000 resamples each
  review         review.py --run R --set S --json on a run of M attempts, each needs_human (one
                 card per attempt: M cards)

`--kit DIR` runs the two scripts of another checkout too (its own .venv), on the same folders.
Not a test: the figures go to benchmarks/README.md.

Examples:
  .venv/bin/python benchmarks/bench_compare.py --cases 500 --review 500
  .venv/bin/python benchmarks/bench_compare.py --cases 5000 --review 10000 --kit /tmp/base --json
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

KIT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT_ROOT / "scripts"))
sys.path.insert(0, str(KIT_ROOT / "tests"))  # the builders the comparison tests use

from arms_support import PINS, make_set
from malloy_evals.ledger.run import Run
from malloy_evals.report.stats import bootstrap, cell_bootstrap
from malloy_evals.sets.eval_set import load_set, question_sha
from measure import MEASURED, duckdb_argv, kit_python, kits, load, measure, parser, table
from tie_support import tied

COMPARE = Path("skills") / "eval-answer" / "scripts" / "compare_runs.py"
REVIEW = Path("skills") / "eval-judge" / "scripts" / "review.py"
DUCK_FLIPS = """
WITH a AS (SELECT qid, last(verdict) AS v FROM read_json(?, format='newline_delimited',
             columns={kind: 'VARCHAR', qid: 'VARCHAR', verdict: 'VARCHAR'})
           WHERE kind = 'score' GROUP BY qid),
     b AS (SELECT qid, last(verdict) AS v FROM read_json(?, format='newline_delimited',
             columns={kind: 'VARCHAR', qid: 'VARCHAR', verdict: 'VARCHAR'})
           WHERE kind = 'score' GROUP BY qid)
SELECT a.v = 'match' AS a_pass, b.v = 'match' AS b_pass, count(*)
FROM a JOIN b USING (qid) GROUP BY ALL ORDER BY ALL
"""


def write_arm(root: Path, set_dir: Path, run_id: str, verdicts: dict[str, str]) -> Path:
    """A run with one attempt per case and its tied score, appended in two batches."""
    run = Run.create(root / run_id, load_set(set_dir), "answerer-x", run_id=run_id)
    attempts = []
    for qid in verdicts:
        attempts.append({"kind": "attempt", "event_id": uuid.uuid4().hex, "qid": qid,
                         "sample": None, "submitted": True,
                         "final_query": "run: t -> { aggregate: n }", "answer_text": "n is 1",
                         "question_sha": question_sha(f"What is {qid}?"),
                         "truncated": False, "contaminated": False})
    run.append(attempts)
    run.append([tied(run.dir, {"kind": "score", "qid": a["qid"], "sample": None, **PINS,
                               "golden_revision": 1, "verdict": verdicts[a["qid"]],
                               "why": "the figures differ", "confidence": 5},
                     a["event_id"]) for a in attempts])
    return run.dir


def generate(root: Path, cases: int, review: int) -> dict[str, Path]:
    rng = random.Random(7)
    qids = [f"c{i:05d}" for i in range(max(cases, review))]
    set_dir = make_set(root, qids, name="bench")
    base = {q: rng.choice(["match", "no_match"]) for q in qids[:cases]}
    cand = {q: (v if rng.random() < 0.8 else rng.choice(["match", "no_match"]))
            for q, v in base.items()}
    return {"set": set_dir, "base": write_arm(root, set_dir, "base", base),
            "candidate": write_arm(root, set_dir, "candidate", cand),
            "review": write_arm(root, set_dir, "review", dict.fromkeys(qids[:review],
                                                                      "needs_human"))}


def in_process(folders: dict[str, Path], rows: list[dict[str, Any]]) -> None:
    """The duckdb floor in a child; both bootstraps timed in this process (CPU seconds)."""
    argv = duckdb_argv(DUCK_FLIPS, str(folders["base"] / "events.jsonl"),
                       str(folders["candidate"] / "events.jsonl"))
    rows.append({"what": "duckdb-flips", "kit": "-", "load": load(), **measure(argv, KIT_ROOT)})
    base = {e["qid"]: e["verdict"] for e in Run.open(folders["base"]).live() if e["kind"] == "score"}
    cand = {e["qid"]: e["verdict"] for e in Run.open(folders["candidate"]).live()
            if e["kind"] == "score"}
    diffs = [(cand[q] == "match") - (base[q] == "match") for q in base]
    for what, call in (("bootstrap-cells", lambda: cell_bootstrap(
                            diffs.count(1), diffs.count(-1), diffs.count(0))),
                       ("bootstrap-cases", lambda: bootstrap(
                            diffs, lambda d: sum(d) / len(d), seed=20261201, resamples=10_000,
                            level=0.95))):
        start = time.process_time()
        interval = call()
        rows.append({"what": what, "kit": "-", "load": load(), "cpu_seconds":
                     round(time.process_time() - start, 2), "wall_seconds": None,
                     "peak_rss_mib": None, "interval": interval})


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--cases", type=int, default=5000, help="cases in each compared arm")
    p.add_argument("--review", type=int, default=10000, help="cards in the review queue")
    args = p.parse_args()
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="bench-compare-"))
    scratch.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        print(f"generating {args.cases} v {args.cases} cases and {args.review} cards ...",
              file=sys.stderr)
        folders = generate(scratch / "gen", args.cases, args.review)
        for kit in kits(args):
            py = kit_python(kit)
            print(f"compare_runs, {kit} (load {load()}) ...", file=sys.stderr)
            rows.append({"what": "compare_runs", "kit": str(kit), "load": load(), **measure(
                [py, str(kit / COMPARE), "--base", str(folders["base"]), "--candidate",
                 str(folders["candidate"]), "--set", str(folders["set"]), "--json"], kit,
                ok=(0, 1))})
            print(f"review, {kit} (load {load()}) ...", file=sys.stderr)
            rows.append({"what": "review", "kit": str(kit), "load": load(), **measure(
                [py, str(kit / REVIEW), "--run", str(folders["review"]), "--set",
                 str(folders["set"]), "--json"], kit)})
        in_process(folders, rows)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    table(rows, {"what": lambda r: r["what"], "kit": lambda r: r["kit"], **MEASURED}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
