#!/usr/bin/env python3
"""Check a submitted query for forbidden fields (golden.mustNotUse, reference/must-not-use.md): exit 1 on any hit (a veto).

With a model (--model DIR, or the set's model/ with --set), every view, measure, dimension,
filtered join, source filter and named query the query uses is expanded through the compiled
model, so `run: order_items -> by_value` where by_value sums books.list_price is a hit, reported
with its path; without one only the query text is read, and the output says the expansion was
not possible (see reference/must-not-use.md).

Examples (`--query-file FILE` reads the query from a file instead):
  .venv/bin/python skills/eval-answer/scripts/check_must_not_use.py --query 'run: order_items -> { aggregate: revenue }' books.list_price "list_price as revenue" --json
  .venv/bin/python skills/eval-answer/scripts/check_must_not_use.py --query 'run: order_items -> { aggregate: list_value }' books.list_price --model evals/bookshop/model   # list_value sums books.list_price: a hit, exit 1
  .venv/bin/python skills/eval-answer/scripts/check_must_not_use.py --query 'run: order_items -> { aggregate: list_value }' --set evals/bookshop --qid bk_total_revenue --json   # the case's mustNotUse names list_value: exit 1

Exit codes: 0 no hit (leaf hits and prose entries are for the judge), 1 a hit, 2 usage,
3 the query file or the set cannot be read. An empty query means no query: every entry is unchecked.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli


def _read_query(path: Path) -> str:
    from malloy_evals.core.errors import InputError
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, None, f"not UTF-8 text (byte {exc.start})") from None


def _set_case(set_dir: Path, qid: str) -> tuple[list[str], dict[str, list[str]], Path, str]:
    """The case's mustNotUse entries and mustNotUseAllowedIn, the set's model folder and path."""
    from malloy_evals.core.errors import InputError
    from malloy_evals.sets.eval_set import CASES_FILE, load_set
    eval_set = load_set(set_dir)
    case = eval_set.case(qid)
    entries = case.must_not_use
    bad = [e for e in entries if not isinstance(e, str)]
    if bad:
        raise InputError(Path(set_dir) / CASES_FILE, getattr(case, "line", None),
                         f"golden.mustNotUse: expected strings, got {bad[0]!r}")
    return entries, case.must_not_use_allowed_in, eval_set.model_dir, eval_set.target_model_path


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--query-file", type=cli.existing_file,
                        help="file holding the submitted (final) query")
    source.add_argument("--query", help="the submitted query as text")
    p.add_argument("entries", nargs="*", help="mustNotUse entries (field paths or prose)")
    cli.add_set_argument(p, required=False,
                         help="the set folder: read golden.mustNotUse of --qid")
    p.add_argument("--qid", help="the case whose golden.mustNotUse to read (with --set)")
    cli.add_model_argument(p, help="the package folder whose definitions the query's named "
                                   "views, measures and dimensions are expanded through "
                                   "(default with --set: its model/)")
    cli.add_check(p, lambda a: "--set and --qid go together"
                  if (a.set_dir is None) != (a.qid is None) else None)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.checks.model_definitions import check_query
    from malloy_evals.checks.must_not_use import render_text
    query = _read_query(args.query_file) if args.query_file is not None else args.query
    entries = list(args.entries)
    allowed_in: dict[str, list[str]] = {}
    model_dir, model_path = args.model, None
    if args.set_dir is not None:
        set_entries, allowed_in, set_model, model_path = _set_case(args.set_dir, args.qid)
        entries += set_entries
        if model_dir is None and set_model.is_dir():
            model_dir = set_model
    result = check_query(query, entries, model_dir=model_dir, model_path=model_path,
                         allowed_in=allowed_in)
    if result.expansion is None and args.json:
        cli.progress("note: no --model, so only the query text was read: a named view, measure "
                     "or dimension built on a forbidden field was not expanded")
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
