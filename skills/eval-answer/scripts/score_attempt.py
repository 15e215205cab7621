#!/usr/bin/env python3
"""Score one attempt in SPEC 5.5 order and append exactly one score event.

Order: truncated -> golden gate -> not submitted -> contamination -> re-execution -> must-not-use
-> judge -> overrides (confidence <= 5 is needs_human; a must-not-use hit is no_match;
contaminated is null, each keeping the judge's own verdict in judge_verdict). Golden gates decide
before any judge call. With `--judge host --emit` it writes the judge request and appends nothing;
`--judge host --ingest` reads the host's reply and appends the score. Exit 0 when it wrote its
result (a null verdict included) or, with --emit, its request; 3 when it could not (unreadable
input, missing recording, --ingest with no reply yet or before any --emit), appending nothing.

Examples (on a scratch copy: cp -r evals/bookshop/runs/baseline /tmp/baseline):
  .venv/bin/python skills/eval-answer/scripts/score_attempt.py --run /tmp/baseline --set evals/bookshop --qid bk_total_revenue --judge replay --local --json
  .venv/bin/python skills/eval-answer/scripts/score_attempt.py --run /tmp/baseline --set evals/bookshop --qid bk_gross_bookings --judge host --emit --local
  .venv/bin/python skills/eval-answer/scripts/score_attempt.py --run /tmp/baseline --set evals/bookshop --qid bk_total_revenue --judge anthropic:claude-haiku-4-5 --mcp-url http://127.0.0.1:4040/mcp --json   # needs an API key and serve_local.py --http 4040 running
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.answer.scoring import render_score, score_attempt_at
from malloy_evals.core import cli
from malloy_evals.judge.doctrine import add_judge_retries
from malloy_evals.judge.providers.select import add_provider_arguments, provider_from_args


def main(argv=None) -> int:
    p = cli.parser(__doc__)
    cli.add_attempt_arguments(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--mcp-url", help="re-execute through this MCP endpoint")
    where.add_argument("--local", action="store_true",
                       help="re-execute through the kit's endpoint over the set's model/")
    cli.add_model_argument(p)
    add_judge_retries(p)
    add_provider_arguments(p, "--judge")
    cli.add_json_flag(p)
    args = p.parse_args(argv)
    cli.check_model_argument(p, args)
    run_dir = Path(args.run)
    provider = provider_from_args(args, "judge", role="judge", set_dir=args.set_dir,
                                  host_dir=run_dir)
    result = score_attempt_at(run_dir, args.set_dir, args.qid, args.sample, provider=provider,
                              mcp_url=args.mcp_url, local=args.local,
                              judge_retries=args.judge_retries, model_dir=args.model)
    doc = result.to_json()
    if result.status != "scored":
        doc |= {"status": result.status, "message": result.message}
    cli.emit(doc, as_json=args.json, render=lambda _d: render_score(result))
    if result.exit_code and result.message:
        cli.progress(result.message)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
