"""A provider drafts the model change: one request (the blind evidence and the model's text), one
reply of exact find-and-replace edits, applied to a copy of the checkpointed model.

The request never holds a golden, a rubric, a canonical query or another arm's answer: only
what `evidence.json` holds (the issue, the questions, the baseline's own answers and calls) and
the model files. The reply is `{reasoning, summary, edits: [{file, find, replace}]}`; `find`
must occur exactly once in `file` (an empty `find` with a new `file` creates it). A reply that
breaks the shape is refused, never half applied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core import paths
from malloy_evals.core.errors import InputError, UsageError
from malloy_evals.improve.journal import Journal, slug
from malloy_evals.improve.model import copy_folder, folder_digest, text_files, unified_diff
from malloy_evals.llm.base import LlmRequest, NoReply, Provider, ask, sha256_text

PROMPT_FILE = "drafter-prompt.md"
EVIDENCE_FILE = "evidence.json"

REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["reasoning", "summary", "edits"],
    "additionalProperties": False,
    "properties": {
        "reasoning": {"type": "string"},
        "summary": {"type": "string"},
        "edits": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["file", "find", "replace"],
            "additionalProperties": False,
            "properties": {"file": {"type": "string"}, "find": {"type": "string"},
                           "replace": {"type": "string"}}}},
    },
}


def prompt_path() -> Path:
    """The drafter's instructions, beside the skill's SKILL.md."""
    return paths.KIT_ROOT / "skills" / "eval-improve" / "reference" / PROMPT_FILE


def draft_key(issue_id: str) -> str:
    """The recording key of a draft: `improve.<issue slug>`."""
    return f"improve.{slug(issue_id)}"


def build_request(journal: Journal) -> LlmRequest:
    """The drafter's one request: its instructions, the blind evidence, the model's files."""
    template = prompt_path().read_text(encoding="utf-8")
    evidence = json.loads((journal.dir / EVIDENCE_FILE).read_text(encoding="utf-8"))
    model = text_files(journal.dir / journal.started["checkpoint"]["copy"])
    body = ("## Evidence\n\n```json\n" + json.dumps(evidence, indent=2, ensure_ascii=False)
            + "\n```\n\n## The model's files\n\n"
            + "\n\n".join(f"### {rel}\n\n```\n{text}\n```" for rel, text in sorted(model.items())))
    return LlmRequest(role="improve", key=draft_key(journal.started["issue"]["issue_id"]),
                      system=template, messages=[{"role": "user", "content": body}],
                      output_schema=REPLY_SCHEMA, prompt_version=sha256_text(template),
                      max_tokens=8192)


def _edits(data: Any) -> list[dict[str, str]] | str:
    """The reply's edits, or why the reply is refused."""
    if not isinstance(data, dict) or not isinstance(data.get("edits"), list) or not data["edits"]:
        return "the reply has no edits list"
    out = []
    for i, e in enumerate(data["edits"]):
        if not isinstance(e, dict) or not all(isinstance(e.get(k), str)
                                              for k in ("file", "find", "replace")):
            return f"edits[{i}] is not {{file, find, replace}} strings"
        rel = Path(e["file"])
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            return f"edits[{i}].file {e['file']!r} is not a path inside the model folder"
        out.append({"file": rel.as_posix(), "find": e["find"], "replace": e["replace"]})
    return out


def apply_edits(source: Path, target: Path, edits: list[dict[str, str]]) -> None:
    """Copy `source` to `target` and apply the edits there (InputError naming the first edit that
    does not apply; `target` is then removed)."""
    copy_folder(source, target)
    try:
        for i, e in enumerate(edits):
            path = target / e["file"]
            if not e["find"]:
                if path.exists():
                    raise InputError(path, None, f"edits[{i}]: an empty find creates a file, and "
                                                 "this one exists")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(e["replace"], encoding="utf-8")
                continue
            text = path.read_text(encoding="utf-8") if path.is_file() else None
            if text is None:
                raise InputError(path, None, f"edits[{i}]: no such file in the model")
            n = text.count(e["find"])
            if n != 1:
                raise InputError(path, None, f"edits[{i}]: its find text occurs {n} times; it "
                                             "must occur exactly once")
            path.write_text(text.replace(e["find"], e["replace"]), encoding="utf-8")
    except BaseException:
        copy_folder(source, target)  # never leave half a draft
        raise


@dataclass(frozen=True)
class DraftResult:
    """improve.py draft: the candidate folder written from a provider's reply."""

    journal: str
    out: str
    digest: str
    source: str          # who drafted: a model id, hand-authored, host
    summary: str
    diff: str
    written: bool = True   # False: no reply yet (host emit / ingest) or a dry run
    exit_code: int = 0


def draft_change(journal_dir: str | Path, provider: Provider, out: str | Path) -> DraftResult:
    """Ask the provider for the change and write the candidate into `out` (a new folder beside
    the model, so its relative data paths resolve as the model's do)."""
    journal = Journal.open(journal_dir)
    target = Path(out)
    model_dir = Path(journal.started["model_dir"])
    if target.resolve() == model_dir.resolve():
        raise UsageError("--out is the model folder itself: a draft goes to a folder of its own "
                         "(edit the model in place by hand, not through a draft)")
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"--out {target}: exists and is not empty")
    reply = ask(provider, build_request(journal))
    if isinstance(reply, NoReply):
        # A host's emit (the request waits beside the journal), an ingest with no reply yet, or
        # a dry run: nothing is written, and that is not a failure.
        return DraftResult(str(journal.dir), str(target), "", provider.spec, reply.why, "",
                           written=False)
    edits = _edits(reply.data if reply.data is not None else _parse(reply.text))
    if isinstance(edits, str):
        raise InputError(None, None, f"the drafter's reply is refused: {edits}")
    checkpoint = journal.dir / journal.started["checkpoint"]["copy"]
    apply_edits(checkpoint, target, edits)
    summary = str((reply.data or {}).get("summary") or "")
    return DraftResult(str(journal.dir), str(target), folder_digest(target), reply.source,
                       summary, unified_diff(checkpoint, target))


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def render_draft(r: DraftResult) -> str:
    if not r.written:
        return f"no draft written ({r.summary})"
    lines = [f"draft by {r.source} written to {r.out} (digest {r.digest[:12]}): {r.summary}"]
    lines += ["  " + x for x in r.diff.splitlines()]
    lines.append(f"next: improve.py check, then improve.py gate --candidate-model {r.out}")
    return "\n".join(lines)
