#!/usr/bin/env python3
"""Append events a host agent wrote itself, bound as the kit's own writers bind theirs.

EVENTS is a JSON-lines file of events in the shapes of reference/ledger-schema.md, without
event_id or at (they are assigned). Each event gets its id, time and the run's phase; a score,
retrieval_score or human_verdict gets the id of the attempt it judged (its case's live attempt,
or an attempt earlier in the same file; one it names must be that one) and the digests of the
artifacts it names (judge_artifact's request.json, reply_artifact, fixture_path), which must be
files inside the run; with --set a score also gets its case's goldenRevision and content digest.
Every event is checked first; all of them are appended as one batch, or none.
Exit 0 appended; 2 bad flags; 3 an event is refused (the message names EVENTS and its line),
or the folder has no run.json.

Examples (a host's own judge scored the recorded baseline's bk_total_revenue):
  mkdir -p runs
  cp -r evals/bookshop/runs/baseline runs/hosted
  .venv/bin/python skills/eval-answer/scripts/append_events.py --run runs/hosted --set evals/bookshop --events reference/examples/host-events.jsonl
  .venv/bin/python skills/eval-answer/scripts/append_events.py --run runs/hosted --set evals/bookshop --events reference/examples/host-events.jsonl --replace --json
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
    cli.add_run_argument(p)
    cli.add_set_argument(p, required=False,
                         help="the set the run was made on: a score that names no goldenRevision "
                              "or case digest gets its case's (so a later golden edit makes it "
                              "stale)")
    p.add_argument("--events", required=True, type=cli.existing_file, metavar="EVENTS",
                   help="the JSON-lines file of events the host wrote")
    p.add_argument("--replace", action="store_true",
                   help="a verdict for an attempt that already has a live one of its kind voids "
                        "that one in the same batch (without it, such a verdict is refused)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.ledger.binding import append_events, render_text
    from malloy_evals.sets.eval_set import load_set
    eval_set = load_set(args.set_dir) if args.set_dir is not None else None
    result = append_events(args.run, args.events, replace=args.replace, eval_set=eval_set)
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
