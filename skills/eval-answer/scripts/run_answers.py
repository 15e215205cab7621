#!/usr/bin/env python3
"""Put every question of a run's set to a blind answerer, N times each, and record every attempt.

Each attempt runs in a fresh empty folder outside the kit, the set and the run, with an MCP
configuration naming only the endpoint, sealed in a bubblewrap sandbox: it sees the system
folders and its own program read-only, its working folder, an empty /tmp and HOME, only its own
processes, and only PATH, LANG, TZ, what its answerer needs and --pass-env NAME from the
environment. Its network is its own: it can reach the endpoint's MCP path (its answerer tools
only) and, for claude-code, the model API's Messages routes, nothing else; --allow-host
HOST:PORT adds a destination (refused, exit 2, for the endpoint's or the model API's own port).
--sandbox-bind PATH adds a read-only path (refused, exit 2,
when it holds a set, a run or the kit's evals/). No bwrap, or a kernel refusing its namespaces:
exit 3 saying how to install it (Debian: apt-get install bubblewrap), unless --no-sandbox, which
runs it UNSEALED (printed first and last, and in every headline of the run). Each attempt is
recorded the moment it ends, through the same code as record_attempt.py (contamination check
included). Answerers:
`claude-code[:MODEL]` (Claude Code: the version the kit pins, installed by `make setup`, or
--claude PATH; only the Publisher tools offered; run.json records its claudeCodeVersion),
`anthropic:MODEL` (the
kit's own tool-use loop; needs ANTHROPIC_API_KEY), or --answerer-cmd TEMPLATE (any command writing
Claude Code stream-json on stdout; placeholders {question_file} {prompt_file} {mcp_config}
{workdir} {max_turns} {qid} {sample}, each replaced by a shell-quoted value; write paths in it
absolute: the command runs in its empty folder). A timed-out or turn-limited attempt is recorded
truncated. A crash, a model or transport error, or no stream-json at all is not an attempt: it goes
to <run>/harness.jsonl and is tried again; --max-failures of those in a row stop the run. Running
the same command again resumes; --redo QIDS answers chosen cases again. Exit 0 ran (a budget stop
included), 2 bad flags, 3 stopped by harness failures or could not start (no run.json, no endpoint,
no Claude Code, no API key, no working bwrap).

Examples (the first makes the run; the second answers two cases with the kit's scripted answerer,
scripts/scripted_answerer.py, which needs no model; $PWD is the kit's root, so its paths are
absolute):
  .venv/bin/python skills/eval-answer/scripts/new_run.py --set evals/bookshop --out runs/live1 --answerer-model scripted-answerer --run-id live1
  .venv/bin/python skills/eval-answer/scripts/run_answers.py --run runs/live1 --set evals/bookshop --local --only bk_total_revenue,bk_profit_margin --answerer-cmd "$PWD/.venv/bin/python $PWD/scripts/scripted_answerer.py --mcp-config {mcp_config} --question-file {question_file}"
  .venv/bin/python skills/eval-answer/scripts/run_answers.py --run runs/live1 --set evals/bookshop --local --only bk_revenue_by_genre --no-sandbox --answerer-cmd "$PWD/.venv/bin/python $PWD/scripts/scripted_answerer.py --mcp-config {mcp_config} --question-file {question_file}"
  .venv/bin/python skills/eval-answer/scripts/run_answers.py --run runs/live1 --set evals/bookshop --local --only bk_revenue_2024 --answerer anthropic:claude-sonnet-4-5 --max-cost-usd 1   # needs ANTHROPIC_API_KEY
  .venv/bin/python skills/eval-answer/scripts/run_answers.py --run runs/live1 --set evals/bookshop --local --answerer claude-code --samples 3 --parallel 4   # needs ANTHROPIC_API_KEY (Claude Code calls the Messages API)
  .venv/bin/python skills/eval-answer/scripts/run_answers.py --run runs/live1 --set evals/bookshop --mcp-url https://publisher.example.com/mcp --mcp-header Authorization=PUBLISHER_TOKEN --publisher-version 0.0.1 --answerer claude-code   # needs a hosted Publisher, PUBLISHER_TOKEN='Bearer ...' and `claude`

A hosted Publisher behind a token: --mcp-header NAME=ENV_VAR sends the header NAME with the value
of the environment variable ENV_VAR on every request (the value never goes on the command line,
into run.json, the ledger or any log; the answerer's MCP configuration refers to it as ${ENV_VAR}
and the answerer gets the variable).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.answer.harness.plan import DEFAULT_PROMPT, SPLITS, parse_answerer
from malloy_evals.core import cli


def _answerer(args: argparse.Namespace) -> str | None:
    from malloy_evals.answer.harness.harness import (
        answerer_problem,  # after parsing: not for --help
    )

    problem = answerer_problem(args.answerer, args.answerer_cmd, args.max_cost_usd)
    if problem:
        return problem
    if args.claude is not None and parse_answerer(args.answerer, args.answerer_cmd).kind != "claude-code":
        return "--claude names the Claude Code to run; it goes with --answerer claude-code only"
    return None


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    cli.add_run_argument(p, help="the run folder (made by new_run.py)")
    cli.add_set_argument(p)
    p.add_argument("--answerer", metavar="ANSWERER",
                   help="claude-code, claude-code:MODEL, or anthropic:MODEL")
    p.add_argument("--answerer-cmd", metavar="TEMPLATE",
                   help="a command that answers like Claude Code (see below); enough on its own")
    p.add_argument("--claude", type=cli.existing_file, metavar="PATH",
                   help="the Claude Code executable for --answerer claude-code (default: the "
                        "version the kit pins, installed by `make setup`)")
    cli.add_endpoint_arguments(p, purpose="answer")
    cli.add_count_argument(p, "--samples", default=1,
                           help="attempts per case (default 1: sample null; K > 1: samples 1..K)")
    cli.add_only_argument(p)
    p.add_argument("--redo", type=cli.split_qids, default=[], metavar="q1,q2",
                   help="answer these cases again though recorded (voids the earlier recording)")
    p.add_argument("--split", choices=SPLITS, default="all",
                   help="which cases: dev, holdout or all (default all)")
    cli.add_count_argument(p, "--parallel", default=1, help="attempts at once (default 1)")
    cli.add_count_argument(p, "--max-turns", default=30,
                           help="turns per attempt before it is cut off, recorded truncated "
                                "(default 30)")
    p.add_argument("--timeout", type=cli.seconds, default=900.0,
                   help="seconds per attempt, counted from the answerer's first output, "
                        "before it is cut off, recorded truncated (default 900)")
    p.add_argument("--max-cost-usd", type=cli.dollars, metavar="X",
                   help="stop once the run's answerers have spent X dollars (earlier sessions "
                        "count); anthropic: before the call that could exceed it; a command: "
                        "between attempts")
    p.add_argument("--prompt", type=cli.existing_file, metavar="FILE",
                   help=f"the answerer's instructions (default {DEFAULT_PROMPT.name} in "
                        "skills/eval-answer/reference/)")
    p.add_argument("--retries", type=cli.count, default=2,
                   help="tries again after a harness failure, per attempt (default 2)")
    cli.add_count_argument(p, "--max-failures", default=4,
                           help="harness failures in a row that stop the run, exit 3 (default 4)")
    cli.add_count_argument(p, "--max-output-mb", default=64,
                           help="a command's stdout beyond this stops it: a harness failure "
                                "(default 64)")
    p.add_argument("--publisher-version", metavar="VERSION", default=None,
                   help="the version the endpoint must report (its MCP serverInfo); another one "
                        "stops the run before any answerer starts (exit 3). The reported version "
                        "is recorded in run.json as publisherVersion either way")
    p.add_argument("--sandbox-bind", action="append", default=[], metavar="PATH",
                   help="one more path the sealed answerer may read (read-only; repeatable); "
                        "refused when it holds a set, a run or the kit's evals/")
    p.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                   help="one more environment variable the sealed answerer gets (repeatable)")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST:PORT",
                   help="one more destination the sealed answerer may connect to, passed "
                        "unread (repeatable); refused for the endpoint's and the model API's "
                        "own ports")
    p.add_argument("--no-sandbox", dest="sandbox", action="store_false",
                   help="run the answerer without bubblewrap: the run reads UNSEALED everywhere")
    cli.add_check(p, _answerer)
    cli.add_json_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.harness.harness import (
        UNSEALED_LINE,
        HarnessOptions,
        render_text,
        run_answers,
    )
    from malloy_evals.core.errors import KitError
    answerer = parse_answerer(args.answerer, args.answerer_cmd)
    options = HarnessOptions(
        answerer=answerer, mcp_url=args.mcp_url, local=args.local, samples=args.samples,
        only=args.only, redo=args.redo, split=args.split, parallel=args.parallel,
        max_turns=args.max_turns, timeout=args.timeout, max_cost_usd=args.max_cost_usd,
        prompt_file=args.prompt, retries=args.retries, max_failures=args.max_failures,
        max_output_mb=args.max_output_mb, sandbox=args.sandbox,
        sandbox_binds=args.sandbox_bind, pass_env=args.pass_env, allow_hosts=args.allow_host,
        publisher_version=args.publisher_version,
        claude=str(args.claude) if args.claude is not None else None)
    if not args.sandbox:
        cli.progress(UNSEALED_LINE)
    try:
        result = run_answers(args.run, args.set_dir, options)
        cli.emit(result, as_json=args.json, render=render_text)
        code = result.exit_code
    except KitError as exc:
        if args.sandbox:
            raise
        cli.progress(f"error: {exc}")  # said here, so that UNSEALED stays the last line
        code = exc.exit_code
    if not args.sandbox:
        cli.progress(UNSEALED_LINE)
    return code


if __name__ == "__main__":
    cli.run(main)
