#!/usr/bin/env python3
"""Score every attempt of a run, then retrieval, then write RESULTS.md, summary.json and report.html.

Attempts are scored in parallel with a progress line each on stderr. Resumable: an attempt whose
live score carries the current golden revision and judge pins is skipped; a stale one is voided
and re-scored. With `--judge host --emit` it writes every unscored attempt's judge request (one
per attempt, for a fresh host subagent each); `--judge host --ingest` then scores the attempts whose
reply.json is there and leaves the rest for a later --ingest. Before scoring, the goldens it would
judge are re-derived from the set's truth package (when it has one and Node is present): any
drift refuses the whole run with exit 1, naming every drifted case, unless --allow-drift (then
the summary's headline names them). A run is scored only against the set it was made on
(another set is exit 3, naming both, before anything is written). Exit 0 when the results were
written and every attempt has a verdict under current pins (an INCOMPLETE run included), 1 on
golden drift, 3 when the run is left PARTIAL (attempts unscored, stale or awaiting a host's
reply: the headline prints the command that finishes it), when nothing could be judged or an
input could not be read.

`--local --model DIR` serves (and shows the judge) another package folder than the set's model/,
and pins its sha: how a candidate model is scored against the same cases.

Examples (on copies of recorded runs, made by the cp lines):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge replay --local --only bk_total_revenue,bk_gross_bookings --rescore --json
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/baseline --set evals/bookshop --judge anthropic:claude-sonnet-4-5 --mcp-url http://localhost:4040/mcp --parallel 8 --rescore   # needs ANTHROPIC_API_KEY and a Publisher
  cp -r evals/bookshop/runs/candidate runs/
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/candidate --set evals/bookshop --judge replay --local --model evals/bookshop/model-candidate
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.judge.doctrine import add_judge_samples
from malloy_evals.llm.select import add_provider_arguments


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_run_argument(p)
    cli.add_set_argument(p)
    add_provider_arguments(p, "--judge")
    add_judge_samples(p)
    cli.add_endpoint_arguments(p)
    cli.add_model_argument(p)
    cli.add_coverage_argument(p, use="its measured verdicts beat the authored coverage")
    cli.add_count_argument(p, "--parallel", default=4, help="attempts scored at once (default 4)")
    cli.add_only_argument(p, what="qids")
    p.add_argument("--rescore", action="store_true",
                   help="void and re-score attempts even when their pins are current")
    p.add_argument("--allow-drift", action="store_true",
                   help="score even when goldens no longer re-derive from the truth package "
                        "(the summary's headline names them)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.llm.select import provider_from_args
    from malloy_evals.workflow.outputs import RunOutputs
    from malloy_evals.workflow.run_scorer import (
        DriftRefusal,
        render_refusal,
        render_text,
        score_run,
        scoring_lock,
    )
    # One scorer per run, held before anything else is done (a second exits 3 naming the
    # holder); then every input loaded and checked (the set it was made on, the coverage
    # report) before a judge is made or a call is spent.
    with scoring_lock(args.run):
        outputs = RunOutputs.load(args.run, args.set_dir, coverage=args.coverage,
                                  model_dir=args.model, refuse_public="score_run.py")
        judge = provider_from_args(args, "judge", role="judge", set_dir=args.set_dir,
                                   host_dir=args.run)
        result = score_run(outputs, judge=judge, judge_spec=args.judge, mcp_url=args.mcp_url,
                           local=args.local, parallel=args.parallel, only=args.only,
                           rescore=args.rescore, allow_drift=args.allow_drift,
                           judge_samples=args.judge_samples)
    if isinstance(result, DriftRefusal):
        cli.emit(result, as_json=args.json, render=render_refusal)
        return result.exit_code
    cli.emit(result, as_json=args.json, render=render_text)
    if args.json and result.report_html:
        cli.progress(f"report: {result.report_html}")  # stdout holds the one JSON document
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
