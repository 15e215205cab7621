#!/usr/bin/env python3
"""Score one attempt in the order of reference/scoring.md and append exactly one score event.

Order: truncated -> golden gate -> not submitted -> contamination -> re-execution -> must-not-use
-> judge -> overrides (confidence <= 5 is needs_human; a must-not-use hit is no_match;
contaminated is null, each keeping the judge's own verdict in judge_verdict). Golden gates decide
before any judge call. With `--judge host --emit` it writes the judge request and appends nothing;
`--judge host --ingest` reads the host's reply and appends the score. Exit 0 when it wrote its
result (a null verdict included) or, with --emit, its request; 3 when it could not (unreadable
input, missing recording, --ingest with no reply yet or before any --emit), appending nothing.

Examples (on a copy of a recorded run, made by the first two lines):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/
  .venv/bin/python skills/eval-answer/scripts/score_attempt.py --run runs/baseline --set evals/bookshop --qid bk_total_revenue --judge replay --local --json
  .venv/bin/python skills/eval-answer/scripts/score_attempt.py --run runs/baseline --set evals/bookshop --qid bk_revenue_2024 --judge host --emit --local
  .venv/bin/python skills/eval-answer/scripts/score_attempt.py --run runs/baseline --set evals/bookshop --qid bk_top_customers --judge anthropic:claude-haiku-4-5 --mcp-url http://127.0.0.1:4040/mcp --json   # needs ANTHROPIC_API_KEY and an endpoint at :4040
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
    # --ingest judges the prediction its --emit re-executed: no endpoint then.
    cli.add_endpoint_arguments(p, required=lambda a: not a.ingest)
    cli.add_model_argument(p)
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
                              mcp_url=args.mcp_url, local=args.local,
                              judge_retries=args.judge_retries, model_dir=args.model,
                              judge_samples=args.judge_samples)
    doc = result.to_json()
    if result.status != "scored":
        doc |= {"status": result.status, "message": result.message}
    cli.emit(doc, as_json=args.json, render=lambda _d: render_score(result))
    if result.exit_code and result.message:
        cli.progress(result.message)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
