"""Which attempts a diagnosis looks at: every attempt lands in exactly one bucket, so narrowing never shrinks the denominator."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from malloy_evals.core.errors import UsageError
from malloy_evals.core.vocab import is_contaminated, null_reason_head
from malloy_evals.ledger.events import AttemptKey, effective_verdict, well_formed_key

ROLE = "diagnose"
# What this script writes into an issue's `diagnosed_by`; a re-run voids live issues carrying it,
# and nothing else (only this script's own earlier issues).
DIAGNOSED_BY = "diagnose.py"
SELECTABLE_VERDICTS = ("no_match", "near_match", "needs_human")
SPLITS = ("dev", "holdout", "all")
PARALLEL = 4  # diagnoser calls in flight at once
ANSWER_CHARS = 4000
GOLDEN_ROWS = 50
RETURNED_IDS = 25

# Exclusion reasons, spelled once.
R_CONTAMINATED = "contaminated"
R_UNSCORED = "unscored"
R_HOLDOUT = "holdout"
R_SPLIT = "not in --split"
R_VERDICT = "verdict not selected"
R_NOT_NAMED = "not named in --only"
R_LIMIT = "beyond the limit"
R_NOT_IN_SET = "not in the set"

# --------------------------------------------------------------------------- selection

@dataclass(frozen=True)
class Bucketed:
    """One attempt and the bucket it landed in; `reason` says why when excluded."""

    qid: str
    sample: int | None
    verdict: str | None
    reason: str | None = None
    phase: str | None = None

    @property
    def key(self) -> AttemptKey:
        """The attempt's key in the ledger (and in the live view)."""
        # phase as the attempt event held it (None when it named none), never made up here.
        return AttemptKey(self.qid, self.sample, self.phase)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Selection:
    """Every attempt of the run in exactly one bucket."""

    failed: list[Bucketed]
    passed: list[Bucketed]
    retrieval_only: list[Bucketed]   # passed, but a needed entity never arrived: diagnosed too
    excluded: list[Bucketed]

    @property
    def total(self) -> int:
        return len(self.failed) + len(self.passed) + len(self.retrieval_only) + len(self.excluded)

    @property
    def selected(self) -> list[Bucketed]:
        """The attempts to diagnose: failures first, then passes with a retrieval miss."""
        return self.failed + self.retrieval_only

    @property
    def selected_qids(self) -> list[str]:
        return list(dict.fromkeys(b.qid for b in self.selected))

    def excluded_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(null_reason_head(b.reason) for b in self.excluded).items()))

    @property
    def non_passing(self) -> int:
        """The denominator of "how much was diagnosed": failures plus every excluded attempt that
        was not a pass. Narrowing moves attempts between buckets, never out of this count."""
        return len(self.failed) + sum(1 for b in self.excluded if b.verdict != "match")

    def to_json(self) -> dict[str, Any]:
        return {"attempts": self.total, "failed": len(self.failed), "passed": len(self.passed),
                "retrieval_only": len(self.retrieval_only), "excluded": len(self.excluded),
                "non_passing": self.non_passing, "selected_cases": self.selected_qids,
                "excluded_by_reason": self.excluded_by_reason(),
                "excluded_attempts": [{"qid": b.qid, "sample": b.sample, "verdict": b.verdict,
                                       "reason": b.reason} for b in self.excluded]}


def verdicts_problem(verdicts: Iterable[str]) -> str | None:
    """What is wrong with a --verdicts list, or None: each must be one a diagnosis can select."""
    bad = [v for v in verdicts if v not in SELECTABLE_VERDICTS]
    return f"--verdicts: {', '.join(bad)} not one of {', '.join(SELECTABLE_VERDICTS)}" if bad \
        else None


def select_cases(events: Iterable[Mapping[str, Any]], cases: Mapping[str, str], *,
                 verdicts: Iterable[str] = ("no_match",), split: str = "dev",
                 only: Iterable[str] | None = None, limit: int | None = None,
                 retrieval_misses: Mapping[AttemptKey, bool] | None = None) -> Selection:
    """Put every attempt of a run's live events into exactly one bucket
    (skills/eval-diagnose/reference/selection.md).

    Args:
        events: the run's live events (voids applied).
        cases: qid -> split of the set's cases.
        retrieval_misses: attempt key -> True when a needed entity never reached the answerer
            (retrieval recall below 1); a passing attempt with a miss is `retrieval_only`.

    Order of the rules, first that applies: not in the set, contaminated, unscored, outside the
    split, pass (retrieval-only or passed), verdict not selected, failed. Then `only` and `limit`
    move failures and retrieval-only passes they drop into `excluded`, so the counts stay whole.
    `limit` counts cases (one packet per case); `limit=0` selects nothing.
    """
    verdicts = tuple(verdicts)
    problem = verdicts_problem(verdicts)
    if problem:
        raise UsageError(problem)
    if split not in SPLITS:
        raise UsageError(f"--split {split!r}: one of {', '.join(SPLITS)}")
    if limit is not None and limit < 0:
        raise UsageError("--limit must be 0 or more")
    misses = retrieval_misses or {}
    attempts: dict[AttemptKey, dict[str, Any]] = {}
    scores: dict[AttemptKey, dict[str, Any]] = {}
    humans: dict[AttemptKey, dict[str, Any]] = {}  # a person's settled verdicts
    for e in events:
        kind = e.get("kind")
        key = well_formed_key(e)
        if key is None:
            continue
        if kind == "human_verdict":
            humans[key] = dict(e)
            continue
        if kind not in ("attempt", "score"):
            continue
        (attempts if kind == "attempt" else scores)[key] = dict(e)  # the latest live one wins
        attempts.setdefault(key, {})
    failed: list[Bucketed] = []
    passed: list[Bucketed] = []
    retrieval_only: list[Bucketed] = []
    excluded: list[Bucketed] = []
    for key, attempt in attempts.items():
        qid, sample, phase = key
        score = scores.get(key)
        # The judge's verdict, or the person's who settled it (the one rule, ledger.events).
        verdict = effective_verdict(score, humans.get(key), attempt or None).verdict
        if qid not in cases:
            excluded.append(Bucketed(qid, sample, verdict, R_NOT_IN_SET, phase))
        elif (is_contaminated(attempt.get("contaminated"))
              or (score is not None and (is_contaminated(score.get("contaminated"))
                                         or score.get("reason") == "contaminated"))):
            excluded.append(Bucketed(qid, sample, verdict, R_CONTAMINATED, phase))
        elif score is None or verdict is None:
            why = "no score event" if score is None else (score.get("reason") or "null verdict")
            excluded.append(Bucketed(qid, sample, None, f"{R_UNSCORED}: {why}", phase))
        elif split != "all" and cases[qid] != split:
            reason = R_HOLDOUT if cases[qid] == "holdout" else f"{R_SPLIT}: {cases[qid]}"
            excluded.append(Bucketed(qid, sample, verdict, reason, phase))
        elif verdict == "match":
            (retrieval_only if misses.get(key) else passed).append(
                Bucketed(qid, sample, verdict, None, phase))
        elif verdict not in verdicts:
            excluded.append(Bucketed(qid, sample, verdict, f"{R_VERDICT}: {verdict}", phase))
        else:
            failed.append(Bucketed(qid, sample, verdict, None, phase))
    if only is not None:
        named = set(only)
        failed, dropped_f = _partition(failed, lambda b: b.qid in named)
        retrieval_only, dropped_r = _partition(retrieval_only, lambda b: b.qid in named)
        excluded += [_with_reason(b, R_NOT_NAMED) for b in dropped_f + dropped_r]
    if limit is not None:
        kept_qids = list(dict.fromkeys(b.qid for b in failed + retrieval_only))[:limit]
        keep = set(kept_qids)
        failed, dropped_f = _partition(failed, lambda b: b.qid in keep)
        retrieval_only, dropped_r = _partition(retrieval_only, lambda b: b.qid in keep)
        excluded += [_with_reason(b, f"{R_LIMIT}: --limit {limit}") for b in dropped_f + dropped_r]
    return Selection(failed, passed, retrieval_only, excluded)


def _partition(items: list[Bucketed], keep: Callable[[Bucketed], bool]
               ) -> tuple[list[Bucketed], list[Bucketed]]:
    return [b for b in items if keep(b)], [b for b in items if not keep(b)]


def _with_reason(b: Bucketed, reason: str) -> Bucketed:
    return Bucketed(b.qid, b.sample, b.verdict, reason, b.phase)
