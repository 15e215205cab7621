#!/usr/bin/env python3
"""Decide, by reading the model, whether it can express an answer to each question (SPEC 5.4).

No answerer, no judge, no golden, no warehouse query. Exit 0 when at least one case was decided,
or when --emit wrote a request for every case (it prints the folder); 3 when nothing was decided
(--ingest finding no reply included; it names the folder it looked in) or the cause-code table
lacks a gap verdict; 2 on usage errors. A host reader's requests and replies live beside --out,
else in one folder per set under the system's temporary folder: give --ingest the same --out.
A model too large for one prompt is narrowed per case by the runtime's search (the report's
`inventory` says how); --dry-run sends nothing and reports the `reader_calls` it would make.

Examples:
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader replay --json
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader anthropic:claude-sonnet-4-5 --repeat 3 --version v2 --out runs/cov-v2.json --compare-labels   # needs an API key
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader replay --dry-run --json
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/mine --publisher-url http://127.0.0.1:4000 --environment samples --package bookshop --reader replay   # needs a real Publisher and your set
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.answer.coverage.reader import check_coverage, host_folder, render_text
from malloy_evals.core import cli
from malloy_evals.judge.providers import select as providers


def main(argv: Sequence[str] | None = None) -> int:
    p = cli.parser(__doc__)
    p.add_argument("--set", required=True, type=cli.existing_dir, dest="set_dir",
                   help="the set folder (set.json, cases.jsonl)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", type=Path, metavar="DIR",
                       help="a local Malloy package, compiled by the kit's runtime")
    where.add_argument("--publisher-url", metavar="URL",
                       help="a Publisher serving the package (REST: models, source, sourceInfos)")
    p.add_argument("--environment", help="with --publisher-url (default: set.json environment)")
    p.add_argument("--package", help="with --publisher-url (default: set.json targetPackage)")
    providers.add_provider_arguments(p, "--reader")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="read each case N times; the majority decides, ties go to the gap")
    p.add_argument("--only", type=cli.split_qids, metavar="q1,q2", help="only these cases")
    p.add_argument("--version", metavar="LABEL", help="stamped on the report (a model version)")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the JSON report here")
    p.add_argument("--compare-labels", action="store_true",
                   help="join the verdicts with the cases' authored coverage labels")
    cli.add_json_flag(p)
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    host_dir = host_folder(args.out, args.set_dir)

    def provider_factory():
        return providers.provider_from_args(args, "reader", role="coverage",
                                            set_dir=args.set_dir, host_dir=host_dir)

    report = check_coverage(
        args.set_dir, provider_factory, model_dir=args.model, publisher_url=args.publisher_url,
        environment=args.environment, package=args.package, repeat=args.repeat, only=args.only,
        version=args.version, out=args.out, compare=args.compare_labels, dry_run=args.dry_run,
        warn=cli.progress)
    cli.emit(report, as_json=args.json, render=render_text)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
