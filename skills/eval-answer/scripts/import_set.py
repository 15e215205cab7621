#!/usr/bin/env python3
"""Import a golden set written for the public Publisher eval loop as a kit set.

Reads the public set folder as published (set.json, cases.jsonl, and model/, truth/, data/ and
any other files beside them, all copied along) and carries its links as published: a link to a
place inside the set folder (model/data -> ../data) is made again inside the imported set; a link
leaving it is copied only with --copy-linked-data, else left out and named; every link and what
was done with it is printed and written to the report. It maps the few fields the kit spells
otherwise (truthModel -> truthModelPath; clarifyOk, clarifyPreferred and alternates onto the
golden; a ranked rows golden -> ordered, its rank column dropped from the compared columns when
the canonical query does not return it; a golden with no kind gets one from its value and tags),
keeps every other field verbatim, and writes OUT/import-report.json: what was copied, mapped and
kept, and every judgement call. Goldens keep their published status: to score an
imported set, promote its goldens first (promote_golden.py). The imported set is checked as
validate_set.py checks it (its names against the compiled model too), so the report's errors and
warnings are the ones validate_set.py prints. Exit 0 when the imported set validates (warnings
allowed), 1 when it has errors, 2 on a wrong command line, 3 when the source cannot be read or OUT
is not an empty folder.

With --questions FILE --set SET it adds a list of questions to an existing set instead: a CSV with
a `question` column (optional `golden_query`, a Malloy query over the set's model, and `notes`), a
markdown list, or one question per line. Each becomes a case with a generated qid and the question
verbatim; a golden query is run on the set's model and its result kept as a provisional golden
(never verified until promote_golden.py re-derives it from truth/); a question without one gets no
golden and the tag no-golden. Exit 1 when a golden query failed, 3 when none could run (no Node).

Examples (the kit's own small public-format set, from its tests; then questions added to a copy
of the sample set):
  .venv/bin/python skills/eval-answer/scripts/import_set.py --from tests/fixtures/public_loop/set --out runs/nursery
  .venv/bin/python skills/eval-answer/scripts/import_set.py --from tests/fixtures/public_loop/set --out runs/nursery2 --json
  mkdir -p runs
  cp -r evals/bookshop runs/qset
  .venv/bin/python skills/eval-answer/scripts/import_set.py --questions tests/fixtures/questions/questions.csv --set runs/qset
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("--from", type=cli.existing_dir, dest="source", metavar="DIR",
                   help="the public set folder (holds set.json and cases.jsonl)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="the kit set folder to write (new, or an empty folder)")
    p.add_argument("--copy-linked-data", action="store_true",
                   help="copy what a link leaving the published set points to (a data folder "
                        "elsewhere in its repository); without it such a link is left out and named")
    p.add_argument("--questions", type=cli.existing_file, metavar="FILE",
                   help="a question list (CSV, markdown list or one per line) to add to --set")
    cli.add_set_argument(p, required=False,
                         help="with --questions: the set the new cases are added to")
    cli.add_json_flag(p)
    cli.add_check(p, _one_mode)
    return p


def _one_mode(args: argparse.Namespace) -> str | None:
    if args.questions is not None:
        if args.source is not None or args.out is not None:
            return "--questions goes with --set, not with --from/--out"
        return None if args.set_dir is not None else "--questions needs --set SET"
    if args.source is None or args.out is None:
        return "give --from DIR --out DIR (a public set), or --questions FILE --set SET"
    if args.set_dir is not None:
        return "--set goes with --questions"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.checks.model_definitions import check_set_with_model
    from malloy_evals.sets.importer import import_set, render_report
    from malloy_evals.sets.questions import import_questions, render_questions
    if args.questions is not None:
        added = import_questions(args.questions, args.set_dir)
        cli.emit(added, as_json=args.json, render=render_questions)
        return added.exit_code
    report = import_set(args.source, args.out, copy_linked_data=args.copy_linked_data,
                        check=check_set_with_model)  # the report says what validate_set will
    cli.emit(report, as_json=args.json, render=render_report)
    return report.exit_code


if __name__ == "__main__":
    cli.run(main)
