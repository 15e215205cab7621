#!/usr/bin/env python3
"""Serve local Malloy packages through the Malloy Publisher's MCP tools.

Stdio by default (for a host's MCP config); --http PORT serves stateless streamable HTTP at
http://127.0.0.1:PORT/mcp plus the Publisher's REST routes under /api/v0. Over HTTP, waiting
queries are served one client at a time in turn (a client is named by /mcp/client/NAME, else
told apart by its connection), and a client that hangs up has its query stopped at once
(reference/query-budgets.md). DuckDB may read each
package folder and its sibling data/ folder; --allow adds more. `--set S` serves that set's
package under test (environment and package from set.json, the folder model/, or the folder
`--model DIR` names, e.g. a candidate model beside it). With --http, --json prints one
JSON document ({mcp_url, rest_base, packages}) before serving; over stdio, stdout is the protocol.

Examples (each serves until stopped with Ctrl-C):
  .venv/bin/python skills/eval-answer/scripts/serve_local.py --package samples/bookshop=evals/bookshop/model   # serves MCP over stdio
  .venv/bin/python skills/eval-answer/scripts/serve_local.py --package samples/bookshop=evals/bookshop/model --http 4040   # serves http://127.0.0.1:4040/mcp
  .venv/bin/python skills/eval-answer/scripts/serve_local.py --package samples/mini=tests/fixtures/mini_pkg/model --allow evals/bookshop/data --http 4041 --json   # serves :4041
  .venv/bin/python skills/eval-answer/scripts/serve_local.py --set evals/bookshop --model evals/bookshop/model-candidate --http 4042   # serves the candidate model at :4042
"""
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.endpoint.mcp_server import parse_package_arg
from malloy_evals.endpoint.runner import QUERY_TIMEOUT_S


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    p.add_argument("--package", action="append", default=[], metavar="ENV/PKG=DIR",
                   type=cli.checked_by(parse_package_arg),
                   help="a package to serve (repeatable), e.g. samples/bookshop=evals/bookshop/model")
    cli.add_set_argument(p, required=False,
                         help="also serve this set's package under test (set.json names it)")
    cli.add_model_argument(p, help="with --set: serve this package folder instead of the "
                                   "set's model/ (e.g. evals/bookshop/model-candidate)")
    p.add_argument("--allow", action="append", default=[], metavar="DIR", type=cli.existing_dir,
                   help="another folder DuckDB may read (repeatable)")
    p.add_argument("--http", type=cli.port, metavar="PORT",
                   help="serve stateless streamable HTTP at 127.0.0.1:PORT/mcp instead of stdio")
    p.add_argument("--timeout", type=cli.seconds, default=QUERY_TIMEOUT_S, metavar="SECONDS",
                   help=f"seconds one query may take from its arrival, waiting for a runner "
                        f"included (default {QUERY_TIMEOUT_S:g}); a query over it is answered as a "
                        "query error (\"the endpoint is busy\" if it never started) and its runner "
                        "is replaced if stuck")
    cli.add_json_flag(p)
    cli.add_check(p, lambda a: "--json needs --http: over stdio, stdout carries the MCP protocol"
                  if a.json and a.http is None else None)
    cli.add_check(p, lambda a: "give --package ENV/PKG=DIR or --set SET"
                  if not a.package and a.set_dir is None else None)
    cli.add_check(p, lambda a: "--model stands in for a set's model/: give --set SET with it"
                  if a.model is not None and a.set_dir is None else None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # The whole command line (a package folder that is not there included) is decided before
    # Node is looked for: a usage error is exit 2 on a machine without Node too.
    args = build_parser().parse_args(argv)
    from malloy_evals.core.errors import EXIT_OK, UnmeasuredError
    from malloy_evals.endpoint.mcp_server import check_port_free, check_unique_packages, serve
    from malloy_evals.endpoint.runner import runtime_missing_reason
    from malloy_evals.sets.eval_set import load_set
    specs = list(args.package)
    if args.set_dir is not None:
        specs.append(load_set(args.set_dir, args.model).package_spec)
    packages = [parse_package_arg(v, args.allow, args.timeout) for v in specs]
    check_unique_packages(packages)
    reason = runtime_missing_reason()
    if reason:
        raise UnmeasuredError(reason)
    if args.http is not None:
        check_port_free(args.http)
        names = [f"{s.environment}/{s.name}" for s in packages]
        base = f"http://127.0.0.1:{args.http}"
        if args.json:
            cli.emit({"mcp_url": base + "/mcp", "rest_base": base + "/api/v0", "packages": names},
                     as_json=True)
        cli.progress(f"serving {', '.join(names)} at {base}/mcp")
    serve(packages, http_port=args.http)
    return EXIT_OK


if __name__ == "__main__":
    cli.run(main)
