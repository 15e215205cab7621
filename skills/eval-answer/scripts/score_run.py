#!/usr/bin/env python3
"""Score every attempt of a run, then retrieval, then write RESULTS.md and summary.json (SPEC 5.5).

Attempts are scored in parallel with a progress line each on stderr. Resumable: an attempt whose
live score carries the current golden revision and judge pins is skipped; a stale one is voided
and re-scored. With `--judge host --emit` it writes every unscored attempt's judge request (one
per attempt, for a fresh host subagent each); `--judge host --ingest` then scores the attempts whose
reply.json is there and leaves the rest for a later --ingest. Exit 0 when the results were written
(an INCOMPLETE run included), 3 when nothing could be judged or an input could not be read.

Examples (the first on a scratch copy: cp -r evals/bookshop/runs/baseline /tmp/baseline):
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run /tmp/baseline --set evals/bookshop --judge replay --local
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run /tmp/baseline --set evals/bookshop --judge replay --local --only bk_total_revenue,bk_gross_bookings --rescore --json
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/r1 --set evals/bookshop --judge anthropic:claude-sonnet-4-5 --mcp-url http://localhost:4040/mcp --parallel 8   # needs an API key and an endpoint running
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.core import cli
from malloy_evals.judge.providers.select import add_provider_arguments, provider_from_args
from malloy_evals.workflow.run_scorer import render_text, score_run


def main(argv=None) -> int:
    p = cli.parser(__doc__)
    p.add_argument("--run", required=True, type=cli.existing_dir, help="the run folder")
    p.add_argument("--set", required=True, type=cli.existing_dir, help="the set folder")
    add_provider_arguments(p, "--judge")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--mcp-url", help="the Publisher's MCP endpoint to re-execute against")
    where.add_argument("--local", action="store_true",
                       help="start the kit's endpoint over the set's model/ package")
    p.add_argument("--coverage", type=Path, help="a check_coverage report (measured coverage)")
    p.add_argument("--parallel", type=int, default=4, help="attempts scored at once (default 4)")
    p.add_argument("--only", type=cli.split_qids, help="score only these qids (q1,q2)")
    p.add_argument("--rescore", action="store_true",
                   help="void and re-score attempts even when their pins are current")
    cli.add_json_flag(p)
    args = p.parse_args(argv)
    if args.parallel < 1:
        p.error("--parallel must be at least 1")
    judge = provider_from_args(args, "judge", role="judge", set_dir=args.set, host_dir=args.run)
    result = score_run(args.run, args.set, judge=judge, judge_spec=args.judge,
                       mcp_url=args.mcp_url, local=args.local, coverage=args.coverage,
                       parallel=args.parallel, only=args.only, rescore=args.rescore)
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
