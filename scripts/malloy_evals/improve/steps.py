"""improve.py's start, accept and rollback: the checkpoint, the blind evidence, and the end of a
journal. Each step reads the journal first and does only what it has not done yet, so running
it again after an interrupt finishes the job (skills/eval-improve/reference/improve.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, InputError, UsageError
from malloy_evals.diagnose.issues import open_issues
from malloy_evals.improve.checks import GoldenCells, golden_cells, set_digests
from malloy_evals.improve.draft import EVIDENCE_FILE
from malloy_evals.improve.gate import ACCEPT
from malloy_evals.improve.journal import JOURNAL_FILE, Journal, slug
from malloy_evals.improve.model import (
    CHECKPOINT_DIR,
    copy_folder,
    folder_digest,
    git_repo,
    restore_into,
)
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.sets.eval_set import EvalSet, load_set
from malloy_evals.workflow.outputs import RunOutputs

# Owners whose issues a model change may fix (the cause-code table's model owner).
MODEL_OWNERS = ("model",)
WITHHELD = "[withheld: a golden figure]"


@dataclass(frozen=True)
class StepResult:
    """What start, accept or rollback did, and where the journal stands."""

    step: str
    journal: str
    stage: str
    done: bool                       # False: refused (the reasons say why)
    reasons: list[str]
    details: dict[str, Any] = field(default_factory=dict)
    resumed: bool = False

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.done else EXIT_FINDING


def default_journal(run_dir: str | Path, issue_id: str) -> Path:
    """Where start puts a journal unless told: `<run>/improve/<issue slug>/`."""
    return Path(run_dir) / "improve" / slug(issue_id)


# ---------------------------------------------------------------------------------------------
# The blind evidence


_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def _scrub(text: Any, cells: GoldenCells) -> Any:
    """`text` with every figure equal to a golden's (at its precision) withheld."""
    if not isinstance(text, str):
        return text

    def swap(m: re.Match[str]) -> str:
        value = float(m.group(0).replace(",", ""))
        for f in cells.figures:
            if f.decimals is not None and round(value * 10 ** f.decimals) == \
                    round(f.value * 10 ** f.decimals) and len(m.group(0).strip("-")) >= 3:
                return WITHHELD
        return m.group(0)
    return _NUMBER.sub(swap, text)


def blind_evidence(view: LiveView, run: Run, eval_set: EvalSet, issue: Mapping[str, Any]
                   ) -> dict[str, Any]:
    """What the change may be made from: the issue and, per case, the question and the baseline
    answer's own words, queries and get_context calls. No golden, rubric, canonical query or
    judge's reasoning (which quotes the golden); any golden figure left in a text is withheld."""
    cells = golden_cells(eval_set)
    cases = []
    for qid in issue.get("qids") or []:
        attempts = []
        for a in view.attempts():
            if a.get("qid") != qid:
                continue
            key = run.key(qid, a.get("sample"))
            score = view.score(key) or {}
            calls = []
            for c in view.tool_calls(key):
                if c.get("tool") == "get_context":
                    summary = c.get("ranked_summary") or {}
                    calls.append({"tool": "get_context", "targets": c.get("targets"),
                                  "returned": (summary.get("entity_ids") or [])[:15],
                                  "error": c.get("error")})
                else:
                    calls.append({"tool": c.get("tool"), "query": c.get("query"),
                                  "error": c.get("error")})
            attempts.append({"sample": a.get("sample"), "verdict": score.get("verdict"),
                             "answer": _scrub(a.get("answer_text"), cells),
                             "final_query": a.get("final_query"), "calls": calls})
        case = eval_set.cases.get(qid)
        cases.append({"qid": qid, "question": case.question if case else None,
                      "attempts": attempts})
    return {"issue": {k: _scrub(issue.get(k), cells) for k in
                      ("issue_id", "qids", "primary_code", "contributing_codes", "component",
                       "owner", "diagnosis", "evidence", "severity", "sufficiency")},
            "cases": cases,
            "withheld": "goldens, rubrics, canonical queries, the judge's reasoning and every "
                        "other run's answers: a change is made blind to the answers"}


# ---------------------------------------------------------------------------------------------
# start


def _issue(view: LiveView, issue_id: str, run_dir: Path) -> dict[str, Any]:
    events = view.events
    issue = next((e for e in reversed(events) if e.get("kind") == "issue"
                  and e.get("issue_id") == issue_id), None)
    if issue is None:
        known = [str(e.get("issue_id")) for e in events if e.get("kind") == "issue"]
        raise InputError(run_dir / "events.jsonl", None,
                         f"no live issue {issue_id!r} (issues: {', '.join(known) or 'none'})")
    return issue


def start(set_dir: str | Path, run_dir: str | Path, issue_id: str,
          journal_dir: str | Path | None = None) -> StepResult:
    """Checkpoint the model, write the blind evidence and the journal's improve_started."""
    eval_set = load_set(set_dir)
    run = Run.open(run_dir)
    journal_path = Path(journal_dir) if journal_dir else default_journal(run.dir, issue_id)
    if (journal_path / JOURNAL_FILE).is_file():
        journal = Journal.open(journal_path)
        s = journal.started
        if s["issue"]["issue_id"] != issue_id or Path(s["baseline_run"]["dir"]) != run.dir:
            raise UsageError(f"{journal_path} already holds the journal of issue "
                             f"{s['issue']['issue_id']} on {s['baseline_run']['dir']}")
        return StepResult("start", str(journal.dir), journal.stage(), True, [],
                          _started_details(journal), resumed=True)
    view = run.view()
    issue = _issue(view, issue_id, run.dir)
    if issue.get("owner") not in MODEL_OWNERS:
        raise InputError(run.dir / "events.jsonl", None,
                         f"issue {issue_id} is owned by {issue.get('owner')}, not the model: "
                         "eval-improve changes the model only")
    if issue_id not in {i["issue_id"] for i in open_issues(view.events)}:
        raise InputError(run.dir / "events.jsonl", None, f"issue {issue_id} is not open")
    model_dir = eval_set.dir / "model"
    if not model_dir.is_dir():
        raise InputError(eval_set.dir, None, "the set has no model/ folder to improve")
    journal_path.mkdir(parents=True, exist_ok=True)
    checkpoint = journal_path / CHECKPOINT_DIR
    copy_folder(model_dir, checkpoint)
    digest = folder_digest(model_dir)
    if folder_digest(checkpoint) != digest:
        raise InputError(model_dir, None, "changed while it was being checkpointed; start again")
    repo = git_repo(model_dir)
    commit = repo.commit(f"eval-improve: checkpoint before {issue_id}") if repo else None
    evidence = blind_evidence(view, run, eval_set, issue)
    (journal_path / EVIDENCE_FILE).write_text(json.dumps(evidence, indent=2, ensure_ascii=False)
                                              + "\n", encoding="utf-8")
    journal = Journal.create(journal_path, {
        "kind": "improve_started", "set_dir": str(eval_set.dir.resolve()),
        "set_name": eval_set.name, "model_dir": str(model_dir.resolve()),
        "baseline_run": {"dir": str(run.dir), "run_id": run.run_id},
        "issue": {"issue_id": issue_id, "qids": list(issue.get("qids") or []),
                  "primary_code": issue.get("primary_code"), "owner": issue.get("owner"),
                  "diagnosis": _scrub(issue.get("diagnosis"), golden_cells(eval_set))},
        "checkpoint": {"copy": CHECKPOINT_DIR, "digest": digest,
                       "git_root": str(repo.root) if repo else None, "git_commit": commit},
        "set_digests": set_digests(eval_set), "evidence": EVIDENCE_FILE})
    return StepResult("start", str(journal.dir), journal.stage(), True, [],
                      _started_details(journal))


def _started_details(journal: Journal) -> dict[str, Any]:
    s = journal.started
    return {"issue": s["issue"], "model_dir": s["model_dir"], "checkpoint": s["checkpoint"],
            "evidence": str(journal.dir / s["evidence"]), "baseline_run": s["baseline_run"]}


# ---------------------------------------------------------------------------------------------
# accept and rollback


def _gated(journal: Journal) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The latest change_proposed and its gate_decided (None when not gated)."""
    proposed = journal.latest("change_proposed")
    return proposed, journal.after("gate_decided", proposed) if proposed else None


def accept(journal_dir: str | Path) -> StepResult:
    """Put the gated candidate in the model folder, commit it (git), mark the issue fixed."""
    journal = Journal.open(journal_dir)
    s = journal.started
    model_dir = Path(s["model_dir"])
    done = journal.latest("accepted")
    if done is not None:
        return StepResult("accept", str(journal.dir), journal.stage(), True, [], done, resumed=True)
    if journal.latest("rolled_back") is not None:
        return StepResult("accept", str(journal.dir), journal.stage(), False,
                          ["this journal was rolled back; start a new one"])
    proposed, decided = _gated(journal)
    if proposed is None or decided is None:
        return StepResult("accept", str(journal.dir), journal.stage(), False,
                          ["no gate decision yet: run improve.py gate first"])
    if decided["decision"] != ACCEPT:
        return StepResult("accept", str(journal.dir), journal.stage(), False,
                          [f"the gate rejected this change: {r}" for r in decided["reasons"]])
    candidate = Path(proposed["candidate"])
    digest = decided["digest"]
    now_model = folder_digest(model_dir)
    if candidate.resolve() != model_dir.resolve():
        if now_model not in (digest, s["checkpoint"]["digest"]):
            return StepResult("accept", str(journal.dir), journal.stage(), False,
                              [(f"the model folder {model_dir} changed since the checkpoint "
                               f"(digest {now_model[:12]}); it holds work the gate never saw")])
        if not candidate.is_dir() or folder_digest(candidate) != digest:
            return StepResult("accept", str(journal.dir), journal.stage(), False,
                              [(f"the candidate {candidate} changed since the gate (digest "
                               f"{digest[:12]} gated); gate it again")])
        if now_model != digest:
            restore_into(candidate, model_dir)
            if folder_digest(model_dir) != digest:
                raise InputError(model_dir, None, "the candidate could not be copied into it "
                                                  "byte for byte; nothing was committed")
    elif now_model != digest:
        return StepResult("accept", str(journal.dir), journal.stage(), False,
                          [(f"the model changed since the gate (digest {now_model[:12]}, gated "
                           f"{digest[:12]}); gate it again")])
    repo = git_repo(model_dir)
    commit = repo.commit(f"eval-improve: {s['issue']['issue_id']} fixed "
                         f"({decided['summary']})") if repo else None
    run = Run.open(s["baseline_run"]["dir"])
    passing = decided.get("passing_attempt_ids") or []
    # An accept interrupted after it marked the issue finds its own mark and does not mark twice.
    status = next((e for e in reversed(run.view().events) if e.get("kind") == "issue_status"
                   and e.get("issue_id") == s["issue"]["issue_id"] and e.get("status") == "fixed"
                   and (e.get("passing_attempt_ids") or []) == passing), None)
    if status is None:
        status = run.append_event({"kind": "issue_status", "issue_id": s["issue"]["issue_id"],
                                   "status": "fixed", "passing_attempt_ids": passing})
    # The baseline's outputs say which issues are open: rewritten by their one owner.
    RunOutputs.load(run.dir, Path(s["set_dir"])).write()
    event = journal.append({"kind": "accepted", "change_id": proposed["event_id"],
                            "digest": digest, "git_commit": commit,
                            "issue_status_event_id": status["event_id"],
                            "passing_attempt_ids": passing})
    return StepResult("accept", str(journal.dir), journal.stage(), True, [], event)


def rollback(journal_dir: str | Path) -> StepResult:
    """Restore the model folder to the checkpoint, byte for byte (refused when it holds work the
    journal never saw)."""
    journal = Journal.open(journal_dir)
    s = journal.started
    model_dir = Path(s["model_dir"])
    done = journal.latest("rolled_back")
    if done is not None:
        return StepResult("rollback", str(journal.dir), journal.stage(), True, [], done,
                          resumed=True)
    checkpoint = journal.dir / s["checkpoint"]["copy"]
    want = s["checkpoint"]["digest"]
    if folder_digest(checkpoint) != want:
        raise InputError(checkpoint, None, "the checkpoint copy no longer matches its digest: "
                                           "it cannot restore the model byte for byte")
    proposed, decided = _gated(journal)
    known = {want}
    if proposed is not None:
        known.add(proposed["digest"])
    now_model = folder_digest(model_dir)
    if now_model not in known:
        return StepResult("rollback", str(journal.dir), journal.stage(), False,
                          [(f"the model folder {model_dir} changed since the gate (digest "
                           f"{now_model[:12]}, none the journal knows): restoring would lose that "
                           "work; save it elsewhere first")])
    if now_model != want:
        restore_into(checkpoint, model_dir)
    restored = folder_digest(model_dir)
    if restored != want:
        raise InputError(model_dir, None, "could not be restored to the checkpoint byte for byte")
    repo = git_repo(model_dir)
    commit = None
    if repo is not None and repo.dirty():
        commit = repo.commit(f"eval-improve: roll back the change for {s['issue']['issue_id']}")
    reason = (decided["reasons"] if decided and decided.get("reasons") else
              ["rolled back by hand" if not decided else "rolled back after acceptance"])
    event = journal.append({"kind": "rolled_back",
                            "change_id": proposed["event_id"] if proposed else None,
                            "digest": restored, "git_commit": commit, "reasons": reason})
    return StepResult("rollback", str(journal.dir), journal.stage(), True, [], event)


def render_step(r: StepResult) -> str:
    """What improve.py start / accept / rollback print."""
    if not r.done:
        return "\n".join([f"{r.step}: REFUSED"] + [f"  - {x}" for x in r.reasons])
    again = " (already done; nothing changed)" if r.resumed else ""
    d = r.details
    if r.step == "start":
        cp = d.get("checkpoint") or {}
        commit = cp.get("git_commit")
        where = f"git commit {str(commit)[:12]}" if commit else "a copy"
        return (f"started {d['issue']['issue_id']}{again}: journal {r.journal}; model "
                f"{d['model_dir']} checkpointed as {where} (digest {cp.get('digest', '')[:12]})\n"
                f"targets: {', '.join(d['issue']['qids'])}\n"
                f"read the evidence: {d['evidence']}\n"
                "next: write the smallest change, then improve.py check and improve.py gate")
    if r.step == "accept":
        commit = d.get("git_commit")
        return (f"accepted{again}: the change is in the model"
                + (f" (git commit {commit[:12]})" if commit else "")
                + f"; issue marked fixed by {len(d.get('passing_attempt_ids') or [])} passing "
                  "attempt(s)")
    return (f"rolled back{again}: the model is byte for byte the checkpoint (digest "
            f"{str(d.get('digest'))[:12]})"
            + "".join(f"\n  - {x}" for x in d.get("reasons") or []))
