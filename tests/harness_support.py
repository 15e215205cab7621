"""Builders the answerer-harness tests share: sets with chosen questions, runs, the scripted
answerer's command line, and run_answers.py called in-process the way `cli.run` calls it."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import KitError
from malloy_evals.ledger.run import Run

KIT = Path(__file__).resolve().parents[1]
BOOKSHOP = KIT / "evals" / "bookshop"
SCRIPTED = KIT / "scripts" / "scripted_answerer.py"
RUN_ANSWERS = KIT / "skills" / "eval-answer" / "scripts" / "run_answers.py"

_spec = importlib.util.spec_from_file_location("run_answers_script", RUN_ANSWERS)
assert _spec is not None and _spec.loader is not None
run_answers_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_answers_script)


def make_set(tmp_path: Path, questions: dict[str, str | None], name: str = "set") -> Path:
    """A set with bookshop's set.json (so the bookshop endpoint serves it) holding the named
    bookshop cases, each with the question given (None keeps the stored one)."""
    d = tmp_path / name
    d.mkdir()
    (d / "set.json").write_text((BOOKSHOP / "set.json").read_text())
    stored = {c["qid"]: c for c in map(json.loads, (BOOKSHOP / "cases.jsonl").read_text().splitlines())}
    lines = []
    for qid, question in questions.items():
        case = dict(stored[qid])
        if question is not None:
            case["question"] = question
        lines.append(json.dumps(case) + "\n")
    (d / "cases.jsonl").write_text("".join(lines))
    return d


def new_run(tmp_path: Path, set_dir: Path, run_id: str = "h1") -> Run:
    return Run.create(tmp_path / f"run-{run_id}", set_dir, "scripted-answerer", run_id=run_id)


def scripted_cmd(*extra: str) -> str:
    """The --answerer-cmd template that runs the kit's scripted answerer (absolute paths)."""
    base = (f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPTED))} --mcp-config {{mcp_config}} "
            "--question-file {question_file} --max-turns {max_turns}")
    return " ".join([base, *extra])


def answer(argv: list[str], capsys: Any) -> tuple[int, dict | None, str]:
    """run_answers.py's main in-process: (exit code, the --json document or None, stderr)."""
    try:
        code = run_answers_script.main([*argv, "--json"])
    except SystemExit as exc:
        code = int(exc.code or 0)
    except KitError as exc:
        code = exc.exit_code
        print(f"error: {exc}", file=sys.stderr)
    out = capsys.readouterr()
    doc = json.loads(out.out) if out.out.strip() else None
    return code, doc, out.err


def ledger(run: Run) -> list[dict]:
    return [json.loads(line) for line in run.events_path.read_text().splitlines() if line.strip()]


def harness_lines(run: Run) -> list[dict]:
    path = run.dir / "harness.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
