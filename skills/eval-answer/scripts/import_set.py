#!/usr/bin/env python3
"""Import a golden set written for the public Publisher eval loop as a kit set.

Reads the public set folder as published (set.json, cases.jsonl, and model/, truth/, data/ and
any other files beside them, all copied along; links are not followed), maps the few fields the
kit spells otherwise (truthModel -> truthModelPath; clarifyOk, clarifyPreferred and alternates
onto the golden; a ranked rows golden -> ordered; a golden with no kind gets one from its value
and tags), keeps every other field verbatim, and writes OUT/import-report.json: what was copied,
mapped and kept, and every judgement call. Goldens keep their published status: to score an
imported set, promote its goldens first (promote_golden.py). Exit 0 when the imported set
validates (warnings allowed), 1 when it has errors, 2 on a wrong command line, 3 when the source
cannot be read or OUT is not an empty folder.

Examples (the kit's own small public-format set, from its tests):
  .venv/bin/python skills/eval-answer/scripts/import_set.py --from tests/fixtures/public_loop/set --out runs/nursery
  .venv/bin/python skills/eval-answer/scripts/import_set.py --from tests/fixtures/public_loop/set --out runs/nursery2 --json
"""

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path[:0] = [str(d / "scripts") for d in Path(__file__).resolve().parents
                if (d / "scripts" / "malloy_evals").is_dir()][:1]  # the kit's library, found upward

from malloy_evals.core import cli
from malloy_evals.sets.importer import import_set, render_report


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("--from", required=True, type=cli.existing_dir, dest="source", metavar="DIR",
                   help="the public set folder (holds set.json and cases.jsonl)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="the kit set folder to write (new, or an empty folder)")
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = import_set(args.source, args.out)
    cli.emit(report, as_json=args.json, render=render_report)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
