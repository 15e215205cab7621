#!/usr/bin/env python3
"""Judge one attempt: build the packet, call the judge, post-process, print the verdict.

Writes the judge's request, replies and verdict under the attempt's artifacts (write-once); never
the ledger (score_attempt.py does that). Needs the attempt's re-executed prediction when it has a
final query (reexecute.py writes it). Exit 0 with a verdict (a null verdict with its reason is a
result) or, with --emit, the written request; 3 when it could not judge (no re-executed prediction
yet, --ingest with no reply; a missing or stale recording names the command that re-records).

Examples (on a copy of a recorded run, re-executed first by the first three lines):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/
  .venv/bin/python skills/eval-answer/scripts/reexecute.py --run runs/baseline --set evals/bookshop --qid bk_total_revenue --local
  .venv/bin/python skills/eval-judge/scripts/judge.py --run runs/baseline --set evals/bookshop --qid bk_total_revenue --judge replay --json
  .venv/bin/python skills/eval-judge/scripts/judge.py --run runs/baseline --set evals/bookshop --qid bk_total_revenue --judge host --emit
  .venv/bin/python skills/eval-judge/scripts/judge.py --run runs/baseline --set evals/bookshop --qid bk_total_revenue --judge anthropic:claude-haiku-4-5 --json   # needs ANTHROPIC_API_KEY
"""

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.judge.doctrine import add_judge_retries, add_judge_samples
from malloy_evals.llm.select import add_provider_arguments


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_attempt_arguments(p)
    cli.add_model_argument(p, help="the package folder the attempt was answered against, "
                                   "shown to the judge instead of the set's model/ "
                                   "(e.g. evals/bookshop/model-candidate)")
    add_judge_retries(p)
    add_judge_samples(p)
    add_provider_arguments(p, "--judge")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.scoring import render_score, score_attempt_at
    from malloy_evals.llm.select import provider_from_args
    run_dir = Path(args.run)
    provider = provider_from_args(args, "judge", role="judge", set_dir=args.set_dir,
                                  host_dir=run_dir)
    result = score_attempt_at(run_dir, args.set_dir, args.qid, args.sample, provider=provider,
                              judge_retries=args.judge_retries, append=False,
                              model_dir=args.model, judge_samples=args.judge_samples)
    doc = result.event if result.event is not None else result.to_json() | {
        "status": result.status, "message": result.message}
    cli.emit(doc, as_json=args.json, render=lambda _d: render_score(result))
    if result.exit_code and result.message:
        cli.progress(result.message)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
