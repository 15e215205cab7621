#!/usr/bin/env python3
"""Record one answerer session as an `attempt` and its `tool_call` events in a run's ledger.

Reads a Claude Code transcript (stream-json or a saved session), or a host tool-use log plus the
answer text, and appends one attempt with one tool_call per get_context / execute_query call. The
transcript is copied into the attempt's artifacts with obvious secrets redacted. Recording the same
attempt again voids the earlier recording's events. Exit 0 recorded; 3 unreadable input or a
folder without run.json.

Examples (the first makes the run; the sessions are the sample set's own):
  .venv/bin/python skills/eval-answer/scripts/new_run.py --set evals/bookshop --out runs/base1 --answerer-model claude-sonnet-4-5
  .venv/bin/python skills/eval-answer/scripts/record_attempt.py --run runs/base1 --set evals/bookshop --qid bk_total_revenue --transcript evals/bookshop/transcripts/baseline/bk_total_revenue.jsonl --json
  .venv/bin/python skills/eval-answer/scripts/record_attempt.py --run runs/base1 --set evals/bookshop --qid bk_member_count --sample 1 --host-log evals/bookshop/transcripts/leaky/bk_member_count.hostlog.json --answer-file evals/bookshop/transcripts/leaky/bk_member_count.answer.md --reported-calls 4
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_attempt_arguments(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--transcript", type=cli.existing_file,
                        help="Claude Code transcript: stream-json or saved session .jsonl")
    source.add_argument("--host-log", type=cli.existing_file,
                        help="host tool-use log {toolUses, reportedCalls, cwd}")
    p.add_argument("--answer-file", type=cli.existing_file, help="the answer text (with --host-log)")
    p.add_argument("--reported-calls", type=cli.count, default=None,
                   help="MCP calls the answerer said it made (overrides the host log's field)")
    cli.add_check(p, lambda a: "--host-log needs --answer-file (a host log carries no answer)"
                  if a.host_log is not None and a.answer_file is None else None)
    cli.add_check(p, lambda a: "--answer-file goes with --host-log; a transcript carries its own "
                  "answer" if a.transcript is not None and a.answer_file is not None else None)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.transcripts import record_attempt, render_text
    result = record_attempt(args.run, args.set_dir, args.qid, args.sample,
                            transcript=args.transcript, host_log=args.host_log,
                            answer_file=args.answer_file, reported_calls=args.reported_calls)
    for warning in result.warnings:
        cli.progress(f"warning: {warning}")
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
