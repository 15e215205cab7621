#!/usr/bin/env python3
"""Check a submitted query's text for forbidden fields (golden.mustNotUse, SPEC 5.2): exit 1 on any hit (a veto).

Examples (`--query-file FILE` reads the query from a file instead):
  .venv/bin/python skills/eval-answer/scripts/check_must_not_use.py --query 'run: order_items -> { aggregate: revenue }' books.list_price "list_price as revenue" --json
  .venv/bin/python skills/eval-answer/scripts/check_must_not_use.py --query 'run: orders -> { aggregate: books.list_price.sum() }' books.list_price   # a hit: exit 1
  .venv/bin/python skills/eval-answer/scripts/check_must_not_use.py --query 'run: order_items -> { aggregate: list_value }' --set evals/bookshop --qid bk_total_revenue --json   # the case's mustNotUse names list_value: exit 1

Exit codes: 0 no hit (leaf hits and prose entries are for the judge), 1 a hit, 2 usage,
3 the query file or the set cannot be read. An empty query means no query: every entry is unchecked.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # runnable by path

from malloy_evals.checks.must_not_use import check_must_not_use, render_text
from malloy_evals.core import cli
from malloy_evals.core.errors import InputError


def _read_query(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, None, f"not UTF-8 text (byte {exc.start})") from None


def _set_entries(set_dir: Path, qid: str) -> list[str]:
    from malloy_evals.sets.eval_set import CASES_FILE, load_set

    case = load_set(set_dir).case(qid)
    entries = case.must_not_use
    bad = [e for e in entries if not isinstance(e, str)]
    if bad:
        raise InputError(Path(set_dir) / CASES_FILE, getattr(case, "line", None),
                         f"golden.mustNotUse: expected strings, got {bad[0]!r}")
    return entries


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
    cli.add_check(p, lambda a: "--set and --qid go together"
                  if (a.set_dir is None) != (a.qid is None) else None)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    query = _read_query(args.query_file) if args.query_file is not None else args.query
    entries = list(args.entries)
    if args.set_dir is not None:
        entries += _set_entries(args.set_dir, args.qid)
    result = check_must_not_use(query, entries)
    cli.emit(result, as_json=args.json, render=render_text)
    return result.exit_code


if __name__ == "__main__":
    cli.run(main)
