"""What run_answers will do before it does anything: the answerer, the attempts, the budget, the log.

Pure decisions live here (which attempts a command still owes, what an answerer spec means, how
much the run has spent); harness.py runs them. The rules are written out for people in
skills/eval-answer/reference/harness.md.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from malloy_evals.core import files, jsonl, paths
from malloy_evals.core.errors import UsageError
from malloy_evals.core.words import attempt_label
from malloy_evals.ledger.events import now
from malloy_evals.sets.eval_set import EvalSet

HARNESS_LOG = "harness.jsonl"
HARNESS_LOCK = "harness.lock"
DEFAULT_PROMPT = paths.SKILLS_DIR / "eval-answer" / "reference" / "answerer-prompt.md"
SPLITS = ("dev", "holdout", "all")
# The prompt's own placeholders, filled from set.json so one prompt file serves every set.
PROMPT_FIELDS = ("environment", "package", "model_path")

AnswererKind = Literal["claude-code", "command", "anthropic"]


@dataclass(frozen=True)
class AnswererSpec:
    """Who answers: `claude-code[:<model>]`, an --answerer-cmd template, or `anthropic:<model>`."""

    kind: AnswererKind
    model: str | None = None
    template: str | None = None

    @property
    def label(self) -> str:
        """How the harness log and the output name it."""
        if self.kind == "command":
            return "--answerer-cmd"
        return f"{self.kind}:{self.model}" if self.model else self.kind


def parse_answerer(spec: str | None, command: str | None) -> AnswererSpec:
    """The answerer the flags name; a missing, unknown or conflicting choice is a usage error.

    `--answerer-cmd` alone means "this command is the answerer"; beside `--answerer claude-code`
    it takes Claude Code's place; beside any other answerer it is a contradiction."""
    if command is not None:
        if not command.strip():
            raise UsageError("--answerer-cmd is empty")
        if spec is not None and spec.split(":", 1)[0] != "claude-code":
            raise UsageError(f"--answerer-cmd replaces claude-code; it cannot go with --answerer {spec}")
        return AnswererSpec("command", template=command)
    if spec is None:
        raise UsageError("say who answers: --answerer claude-code, --answerer anthropic:<model>, "
                         "or --answerer-cmd 'COMMAND {question_file} ...'")
    kind, _, model = spec.partition(":")
    if kind == "claude-code":
        return AnswererSpec("claude-code", model=model or None)
    if kind == "anthropic":
        if not model:
            raise UsageError("--answerer anthropic needs a model: anthropic:<model>")
        return AnswererSpec("anthropic", model=model)
    raise UsageError(f"unknown answerer {spec!r}: use claude-code[:<model>], anthropic:<model>, "
                     "or --answerer-cmd")


def render_prompt(template: str, eval_set: EvalSet) -> str:
    """The answerer prompt with `{environment}`, `{package}` and `{model_path}` filled in from
    set.json; any other brace (a Malloy example) is left as written."""
    values = {"environment": eval_set.environment, "package": eval_set.target_package,
              "model_path": eval_set.target_model_path}
    for name in PROMPT_FIELDS:
        template = template.replace("{" + name + "}", values[name])
    return template


# ---------------------------------------------------------------- the attempts

@dataclass(frozen=True)
class PlannedAttempt:
    """One attempt the command owes: its key, the question exactly as stored, and whether it
    replaces a recorded attempt (--redo)."""

    qid: str
    sample: int | None
    question: str
    redo: bool = False

    @property
    def label(self) -> str:
        return attempt_label(self.qid, self.sample)


@dataclass(frozen=True)
class Plan:
    """The attempts to run, in set order (samples inside each case), and those already recorded."""

    todo: list[PlannedAttempt]
    skipped: list[tuple[str, int | None]]  # recorded earlier: resumed past


def plan_attempts(eval_set: EvalSet, recorded: set[tuple[str, int | None]], *, samples: int,
                  only: list[str] | None, redo: list[str], split: str) -> Plan:
    """Every (case, sample) the flags select, minus those already recorded unless redone.

    With one sample an attempt's sample is null (as record_attempt.py makes it); with K > 1 the
    samples are 1..K. A run that holds the other kind for a selected case is refused: null and
    numbered samples of one case would count it twice."""
    selected = [c for c in eval_set.cases.values()
                if (only is None or c.qid in only)
                and (split == "all" or (c.raw.get("split") or "dev") == split)]
    chosen = {c.qid for c in selected}
    outside = [q for q in redo if q not in chosen]
    if outside:
        raise UsageError(f"--redo {','.join(outside)}: not among the cases this command answers "
                         "(check --only and --split)")
    sample_numbers: list[int | None] = [None] if samples == 1 else list(range(1, samples + 1))
    for case in selected:
        other = [s for (q, s) in recorded if q == case.qid and (s is None) != (samples == 1)]
        if other:
            held = "null samples" if other[0] is None else "numbered samples"
            raise UsageError(f"{case.qid}: the run holds {held} of it; --samples {samples} would "
                             "add the other kind beside them (use the run's own --samples, or "
                             "a new run)")
    todo: list[PlannedAttempt] = []
    skipped: list[tuple[str, int | None]] = []
    for case in selected:
        for sample in sample_numbers:
            key = (case.qid, sample)
            if key in recorded and case.qid not in redo:
                skipped.append(key)
                continue
            todo.append(PlannedAttempt(case.qid, sample, case.question, redo=key in recorded))
    return Plan(todo, skipped)


# ---------------------------------------------------------------- money

@dataclass
class Budget:
    """--max-cost-usd over the whole run, shared by the worker threads.

    `spent` starts at what the run already cost (earlier sessions included). The API loop asks
    `take(most)` before each call and `settle`s it after; a command answerer's cost, known only
    when it ends, is `add`ed, and `exhausted` is checked before the next attempt starts."""

    limit: float | None
    spent: float = 0.0
    reserved: float = 0.0
    unknown: int = 0              # attempts whose cost nobody reported
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, most: float) -> bool:
        with self.lock:
            if self.limit is not None and self.spent + self.reserved + most > self.limit:
                return False
            self.reserved += most
            return True

    def settle(self, most: float, spent: float | None) -> None:
        with self.lock:
            self.reserved = max(0.0, self.reserved - most)
            self._count(spent)

    def add(self, spent: float | None) -> None:
        with self.lock:
            self._count(spent)

    def _count(self, spent: float | None) -> None:
        if spent is None:
            self.unknown += 1
        else:
            self.spent += spent

    def exhausted(self) -> bool:
        with self.lock:
            return self.limit is not None and self.spent >= self.limit


def run_spend(attempts: list[dict[str, Any]], log_lines: list[dict[str, Any]]) -> float:
    """Dollars the run's answerers have spent so far: every live attempt's cost, plus what the
    harness's failed or stopped tries cost (harness.jsonl); unknown costs count as nothing."""
    total = sum(a["cost_usd"] for a in attempts if isinstance(a.get("cost_usd"), (int, float)))
    total += sum(line["cost_usd"] for line in log_lines
                 if line.get("event") == "try" and line.get("outcome") != "recorded"
                 and isinstance(line.get("cost_usd"), (int, float)))
    return float(total)


# ---------------------------------------------------------------- harness.jsonl

class HarnessLog:
    """`<run>/harness.jsonl`: one JSON line per session start, try and stop, appended whole."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / HARNESS_LOG
        self._lock = threading.Lock()

    def read(self) -> list[dict[str, Any]]:
        """Earlier lines, tolerantly (a torn or foreign line is skipped: this is a log)."""
        if not self.path.is_file():
            return []
        out: list[dict[str, Any]] = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                obj = jsonl.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"at": now(), "event": event, **fields}, ensure_ascii=False) + "\n"
        with self._lock:
            fd = files.open_append(self.path, self.path.parent)  # never through a link
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
