"""Helpers shared by the contamination tests: a repository at /w holding the set at /w/sets/shop
(no default needle in that path, so rule 1 by folder and rule 3 are tested on their own) and
the model under test at /w/pkg/shop.malloy."""

from __future__ import annotations

from typing import Any

from malloy_evals.checks.contamination.rules import ContaminationResult, check_contamination
from malloy_evals.checks.toollog import ToolUse

CWD = "/w"
SET = "/w/sets/shop"
MODEL = "/w/pkg/shop.malloy"


def use(name: str, **inputs: Any) -> ToolUse:
    return ToolUse(name=name, input=inputs)


def bash(command: str) -> ToolUse:
    return use("Bash", command=command, description="run it")


def read(path: str) -> ToolUse:
    return use("Read", file_path=path)


def write(path: str, content: str) -> ToolUse:
    return use("Write", file_path=path, content=content)


def check(uses: list[ToolUse] | None, **kwargs: Any) -> ContaminationResult:
    kwargs.setdefault("set_dir", SET)
    kwargs.setdefault("model_paths", [MODEL])
    kwargs.setdefault("cwd", CWD)
    return check_contamination(uses, **kwargs)


def rules(result: ContaminationResult) -> list[str]:
    return [r.rule for r in result.reasons]
