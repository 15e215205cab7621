#!/usr/bin/env python3
"""Decide, by reading the model, whether it can express an answer to each question.

No answerer, no judge, no golden, no warehouse query. Exit 0 when at least one case was decided,
or when --emit wrote a request for every case (it prints the folder); 3 when nothing was decided
(--ingest finding no reply included; it names the folder it looked in) or the cause-code table
lacks a gap verdict; 2 on usage errors. A host reader's requests and replies live beside --out,
else in one folder per set under the system's temporary folder: give --ingest the same --out.
A model too large for one prompt is narrowed per case by the runtime's search (the report's
`inventory` says how); --dry-run sends nothing and reports the `reader_calls` it would make.

Examples:
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader replay --json
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader replay --out runs/coverage.json --compare-labels
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader replay --dry-run --json
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --model evals/bookshop/model --reader anthropic:claude-sonnet-4-5 --repeat 3 --version v2 --out runs/cov-v2.json --compare-labels   # needs an API key
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set evals/bookshop --publisher-url http://127.0.0.1:4000 --environment samples --package bookshop --reader replay   # needs a Publisher at :4000
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.llm import select as providers


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_set_argument(p)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", type=cli.existing_dir, metavar="DIR",
                       help="a local Malloy package, compiled by the kit's runtime")
    where.add_argument("--publisher-url", type=cli.http_url, metavar="URL",
                       help="a Publisher serving the package (REST: models, source, sourceInfos)")
    p.add_argument("--environment", help="with --publisher-url (default: set.json environment)")
    p.add_argument("--package", help="with --publisher-url (default: set.json targetPackage)")
    providers.add_provider_arguments(p, "--reader")
    cli.add_count_argument(p, "--repeat", default=1,
                           help="read each case N times; the majority decides, ties go to the gap")
    cli.add_only_argument(p)
    p.add_argument("--version", metavar="LABEL", help="stamped on the report (a model version)")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the JSON report here")
    p.add_argument("--compare-labels", action="store_true",
                   help="join the verdicts with the cases' authored coverage labels")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.coverage.reader import (
        check_coverage,
        host_folder,
        host_root,
        render_text,
    )
    host_dir = host_folder(args.out, args.set_dir)

    def provider_factory():
        return providers.provider_from_args(args, "reader", role="coverage",
                                            set_dir=args.set_dir, host_dir=host_dir,
                                            host_root=host_root(args.out))

    report = check_coverage(
        args.set_dir, provider_factory, model_dir=args.model, publisher_url=args.publisher_url,
        environment=args.environment, package=args.package, repeat=args.repeat, only=args.only,
        version=args.version, out=args.out, compare=args.compare_labels, dry_run=args.dry_run,
        warn=cli.progress)
    cli.emit(report, as_json=args.json, render=render_text)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
