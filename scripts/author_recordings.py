#!/usr/bin/env python3
"""Write hand-authored judge recordings through the exact request-building code path.

A recording's request digest covers the whole packet (doctrine, question, golden, rubric, answer,
rows, model sources), so it cannot be typed by hand. This tool takes the replies a person wrote and
runs the real code (judge calibration, regression fixtures, and with --run a run's attempts, scored
in a scratch copy) with the `hand:` provider under --record: every recording gets the digest and
prompt version a replay will compute, and `source: "hand-authored"`. Re-run it after any change to
the doctrine, a rubric, a golden or the model to regenerate the recordings.

Input (--replies): JSON lines, one per recording key:
  {"key": "calib.<qid>.<answer>", "replies": [<reply>, ...]}
  {"key": "regress.<fixtureId>", "replies": [<reply>]}
  {"key": "<runId>.<qid>.<sample or _>", "replies": [<reply>]}
A reply is the judge's verdict object ({"why", "verdict", "confidence", "column_pairing",
"gold_status", "gold_note"}) or a string (raw reply text, parsed like any model's). The k-th call
of a key gets replies[k]; the last reply repeats, so one reply serves every --samples call.
Exit 0 when every recording was written and ends as it must (calibration: the expected verdicts;
fixtures: the settled ones), 1 when an authored reply leads somewhere else, 3 when a key could not
be built. Coverage and diagnose recordings are authored the same way through their own scripts:
`--reader hand:FILE --record` / `--diagnoser hand:FILE --record`.

Examples:
  .venv/bin/python scripts/author_recordings.py --set evals/bookshop --replies evals/bookshop/recordings/judge/_authored.jsonl
  .venv/bin/python scripts/author_recordings.py --set evals/bookshop --replies evals/bookshop/recordings/judge/_authored.jsonl --samples 3 --out runs/recordings --json
  .venv/bin/python scripts/author_recordings.py --set evals/bookshop --replies evals/bookshop/recordings/judge/_authored.baseline.jsonl --run evals/bookshop/runs/baseline --local
  .venv/bin/python scripts/author_recordings.py --set evals/bookshop --replies evals/bookshop/recordings/judge/_authored.candidate.jsonl --run evals/bookshop/runs/candidate --local --model evals/bookshop/model-candidate --out runs/recordings
"""

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the library, runnable by path

from malloy_evals.core import cli


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_set_argument(p)
    p.add_argument("--role", default="judge", choices=["judge"],
                   help="judge (coverage and diagnose: see above)")
    p.add_argument("--replies", required=True, type=cli.existing_file,
                   help="the authored replies (JSON lines)")
    p.add_argument("--out", type=Path, default=None,
                   help="recordings folder (default <set>/recordings/judge)")
    cli.add_count_argument(p, "--samples", default=3, help="calibration samples per answer")
    cli.add_count_argument(p, "--repeat", default=1, help="judgements per regression fixture")
    cli.add_run_argument(p, required=False, help="also author the judge recordings of this run")
    cli.add_endpoint_arguments(p, required=lambda a: a.run is not None,
                               purpose="with --run: re-execute")
    cli.add_model_argument(p)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.authoring import author_judge_recordings, render_author
    from malloy_evals.sets.eval_set import load_set
    report = author_judge_recordings(
        load_set(args.set_dir), args.replies, out_dir=args.out,
        samples=args.samples, repeat=args.repeat, run_dir=args.run,
        mcp_url=args.mcp_url, local=args.local, model_dir=args.model)
    cli.emit(report, as_json=args.json, render=render_author)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
