#!/usr/bin/env python3
"""Close the loop on one model-owned issue: checkpoint, propose a change, gate it, accept or roll back.

Subcommands, in the order a journal goes through them (each resumable: run it again and it does
only what the journal says is left):
  start     checkpoint the set's model/ (a git commit when it lives in a repository, and always a
            copy with its digest) and write the journal and the blind evidence (exit 0; 3 when
            the issue is unknown, not open or not owned by the model)
  draft     a provider drafts the change into a new folder beside model/ (anthropic:, host,
            hand:FILE, replay)
  check     the checks alone, before any spending: compiles, writes no golden figure, computes
            no golden value out of no data (each added or changed definition evaluated on the
            set's data and its variants), leaves the set alone (exit 0 may go to the gate; 1
            refused, every reason listed)
  gate      checks, then answers the targets and a seeded guard sample on the candidate, blind,
            scores them, compares with the baseline against the A/A band, decides (exit 0
            accept; 1 reject, with the reasons; --dry-run plans and estimates the cost)
  accept    the gated change into model/ (and a commit), the issue marked fixed (exit 1 refused)
  rollback  model/ restored to the checkpoint byte for byte (exit 1 refused)

Examples (a copy of the sample set, its baseline scored and diagnosed, the refunds issue, a
hand-authored draft, and the gate planned for the scripted answerer as make demo runs it):
  mkdir -p runs
  cp -r evals/bookshop runs/imp
  .venv/bin/python skills/eval-answer/scripts/check_coverage.py --set runs/imp --model runs/imp/model --reader replay --out runs/imp-coverage.json
  .venv/bin/python skills/eval-answer/scripts/score_run.py --run runs/imp/runs/baseline --set runs/imp --judge replay --local --coverage runs/imp-coverage.json
  .venv/bin/python skills/eval-diagnose/scripts/diagnose.py --run runs/imp/runs/baseline --set runs/imp --diagnoser replay
  .venv/bin/python skills/eval-improve/scripts/improve.py start --set runs/imp --run runs/imp/runs/baseline --issue baseline:refund-rule-unwritten-for-returned-orders --journal runs/imp/journal
  .venv/bin/python skills/eval-improve/scripts/improve.py draft --journal runs/imp/journal --drafter hand:evals/bookshop/improve/drafts.jsonl --out runs/imp/model-refunds
  .venv/bin/python skills/eval-improve/scripts/improve.py check --set runs/imp --candidate-model runs/imp/model-refunds --journal runs/imp/journal
  .venv/bin/python skills/eval-improve/scripts/improve.py gate --journal runs/imp/journal --candidate-model runs/imp/model-refunds --aa-runs runs/imp/runs/baseline runs/imp/runs/baseline-2 --judge replay --answerer-cmd "$PWD/.venv/bin/python $PWD/scripts/scripted_answerer.py --mcp-config {mcp_config} --question-file {question_file}" --guard 3 --run-id improve-refunds --allow-different-set --allow-different-retrieval --dry-run
  .venv/bin/python skills/eval-improve/scripts/improve.py rollback --journal runs/imp/journal
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # skills/, which holds find_library
import find_library  # noqa: F401 (the kit's library made importable, or how to install it)
from malloy_evals.core import cli
from malloy_evals.llm.select import add_provider_arguments


def _journal(p: argparse.ArgumentParser) -> None:
    p.add_argument("--journal", required=True, type=cli.existing_dir, metavar="DIR",
                   help="the improve journal folder start wrote")


def _answerer_check(args: argparse.Namespace) -> str | None:
    if getattr(args, "subcommand", None) != "gate":
        return None
    from malloy_evals.answer.harness.harness import (
        answerer_problem,  # after parsing: not for --help
    )

    problem = answerer_problem(args.answerer, args.answerer_cmd, args.max_cost_usd)
    if problem:
        return problem
    if args.band is None and not args.aa_runs:
        return "the gate needs the A/A band: --band FILE, or --aa-runs RUN RUN"
    return None


def build_parser() -> cli.ScriptParser:
    p = cli.parser(__doc__)
    sub = p.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    subs: dict[str, cli.ScriptParser] = {}

    s = sub.add_parser("start", help="checkpoint the model and open a journal for one issue")
    cli.add_set_argument(s)
    cli.add_run_argument(s, help="the scored, diagnosed baseline run that filed the issue")
    s.add_argument("--issue", required=True, metavar="ID", help="the issue id (diagnose.py)")
    s.add_argument("--journal", type=Path, metavar="DIR",
                   help="where the journal goes (default <run>/improve/<issue>/)")
    cli.add_json_flag(s)

    d = sub.add_parser("draft", help="a provider drafts the change into a new folder")
    _journal(d)
    add_provider_arguments(d, "--drafter")
    d.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="the candidate folder to write, beside model/")
    cli.add_json_flag(d)

    c = sub.add_parser("check", help="the checks on a change alone, before any spending")
    cli.add_set_argument(c)
    c.add_argument("--candidate-model", required=True, type=cli.existing_dir, metavar="DIR")
    c.add_argument("--journal", type=cli.existing_dir, metavar="DIR",
                   help="also check the set against the digests start recorded")
    cli.add_json_flag(c)

    g = sub.add_parser("gate", help="answer, score, compare and decide")
    _journal(g)
    g.add_argument("--candidate-model", required=True, type=cli.existing_dir, metavar="DIR")
    g.add_argument("--band", type=cli.existing_file, metavar="FILE",
                   help="the A/A band measure_noise.py wrote")
    g.add_argument("--aa-runs", nargs=2, type=cli.existing_dir, default=[], metavar="RUN",
                   help="or two runs of the baseline arm: the band is measured into the journal")
    g.add_argument("--answerer", metavar="ANSWERER",
                   help="claude-code, claude-code:MODEL, or anthropic:MODEL")
    g.add_argument("--answerer-cmd", metavar="TEMPLATE",
                   help="a command that answers like Claude Code (run_answers.py --help)")
    add_provider_arguments(g, "--judge", host=False)
    cli.add_count_argument(g, "--samples", default=1, help="attempts per case (default 1)")
    cli.add_count_argument(g, "--guard", default=4,
                           help="cases the baseline passed, answered again as the regression "
                                "guard (default 4)", minimum=0)
    g.add_argument("--seed", type=cli.count, default=0, help="the guard sample's seed (default 0)")
    cli.add_count_argument(g, "--parallel", default=1, help="attempts at once (default 1)")
    cli.add_count_argument(g, "--max-turns", default=30, help="turns per attempt (default 30)")
    g.add_argument("--timeout", type=cli.seconds, default=900.0,
                   help="seconds per attempt (default 900)")
    g.add_argument("--prompt", type=cli.existing_file, metavar="FILE",
                   help="the answerer's instructions (default: eval-answer's answerer-prompt.md)")
    g.add_argument("--run-id", metavar="ID", help="the gate run's id (names its judge recordings)")
    g.add_argument("--allow-different-set", action="store_true",
                   help="compare with a baseline made over another revision of the set's files "
                        "(cases whose golden or question changed are left out)")
    g.add_argument("--allow-different-retrieval", action="store_true",
                   help="compare with a baseline answered with another retrieval mode or "
                        "Publisher version")
    cli.add_json_flag(g)

    for name, help_ in (("accept", "the gated change into the model; the issue marked fixed"),
                        ("rollback", "the model restored to the checkpoint byte for byte")):
        a = sub.add_parser(name, help=help_)
        _journal(a)
        cli.add_json_flag(a)
    subs.update(start=s, draft=d, check=c, gate=g)
    cli.add_check(p, _answerer_check)
    # argparse parses a subcommand with parse_known_args: its own checks (the provider flags'
    # combinations) run here, with the whole command line.
    cli.add_check(p, lambda args: next((problem for check in getattr(
        subs.get(args.subcommand), "checks", []) if (problem := check(args))), None))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from malloy_evals.answer.harness.plan import parse_answerer
    from malloy_evals.improve.checks import check_change, render_check
    from malloy_evals.improve.draft import draft_change, render_draft
    from malloy_evals.improve.gate import GateOptions, render_gate, run_gate
    from malloy_evals.improve.journal import Journal
    from malloy_evals.improve.steps import accept, render_step, rollback, start
    from malloy_evals.llm.select import provider_from_args
    from malloy_evals.sets.eval_set import load_set
    if args.subcommand == "start":
        result = start(args.set_dir, args.run, args.issue, args.journal)
        cli.emit(result, as_json=args.json, render=render_step)
        return result.exit_code
    if args.subcommand == "draft":
        started = Journal.open(args.journal).started
        drafter = provider_from_args(args, "drafter", role="improve",
                                     set_dir=Path(started["set_dir"]), host_dir=args.journal)
        drafted = draft_change(args.journal, drafter, args.out)
        cli.emit(drafted, as_json=args.json, render=render_draft)
        return drafted.exit_code
    if args.subcommand == "check":
        # With the journal, the change is read against the checkpoint (an in-place edit of
        # model/ is then a change too) and the set against the digests start recorded.
        started = Journal.open(args.journal).started if args.journal else None
        checked = check_change(
            load_set(args.set_dir), args.candidate_model,
            started=started["set_digests"] if started else None,
            baseline_model=args.journal / started["checkpoint"]["copy"] if started else None)
        cli.emit(checked, as_json=args.json, render=render_check)
        return checked.exit_code
    if args.subcommand == "gate":
        started = Journal.open(args.journal).started
        judge = provider_from_args(args, "judge", role="judge", set_dir=Path(started["set_dir"]))
        options = GateOptions(
            answerer=parse_answerer(args.answerer, args.answerer_cmd), judge=judge,
            judge_spec=args.judge, band=args.band, aa_runs=list(args.aa_runs),
            samples=args.samples, guard=args.guard, seed=args.seed, parallel=args.parallel,
            max_turns=args.max_turns, timeout=args.timeout, prompt_file=args.prompt,
            max_cost_usd=args.max_cost_usd, dry_run=args.dry_run, run_id=args.run_id,
            allow_different_set=args.allow_different_set,
            allow_different_retrieval=args.allow_different_retrieval)
        gated = run_gate(args.journal, args.candidate_model, options)
        cli.emit(gated, as_json=args.json, render=render_gate)
        return gated.exit_code
    step = accept(args.journal) if args.subcommand == "accept" else rollback(args.journal)
    cli.emit(step, as_json=args.json, render=render_step)
    return step.exit_code


if __name__ == "__main__":
    cli.run(main)
