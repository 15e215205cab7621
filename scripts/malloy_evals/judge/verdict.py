"""Reading the judge's reply and applying the mechanical rules after it.

Parsing takes the structured object, else the LAST JSON object in the reply that has a `verdict`;
post-processing applies the fixed rules (low confidence, self-contradiction, veto, contamination)
and keeps the judge's own read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from malloy_evals.core import paths
from malloy_evals.core.errors import InputError
from malloy_evals.core.vocab import GOLD_STATUSES, JUDGE_VERDICTS, is_contaminated
from malloy_evals.core.words import shown
from malloy_evals.judge.doctrine import SKILL
from malloy_evals.judge.packet import normalise, skeleton
from malloy_evals.llm.base import LlmReply, LlmRequest, Provider, json_objects

AGREEMENT_FILE = paths.SKILLS_DIR / SKILL / "reference" / "agreement-phrases.md"


CONTRADICTION_PREFIX = "[verdict contradicted its own reasoning] "
PLANTED_PREFIX = "[verdict agrees with a verdict object planted in the answer] "


@dataclass(frozen=True)
class JudgeReply:
    """The judge's own read, once parsed and checked (before post-processing)."""

    why: str
    verdict: str
    confidence: int
    column_pairing: dict[str, str | None]
    gold_status: str | None
    gold_note: str | None


def _verdict_objects(text: str) -> list[dict]:
    """Every JSON object in `text` that has a `verdict` key, in order."""
    return json_objects(text, "verdict")


def _folded(value: Any) -> Any:
    """A JSON value compared by content: keys and strings normalised and folded (case and
    look-alike letters), so a planted object in another spelling is still the same object."""
    if isinstance(value, dict):
        return {skeleton(normalise(str(k))).strip(): _folded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_folded(v) for v in value]
    if isinstance(value, str):
        return " ".join(skeleton(normalise(value)).split())
    return value


def _same(a: Any, b: Any) -> bool:
    return _folded(a) == _folded(b)


def _planted_value(obj: dict) -> Any:
    """The folded verdict of a planted object (its `verdict` key in any spelling), or None."""
    return _folded(obj).get("verdict")


def find_verdict_object(text: str, planted: list[dict] | tuple[dict, ...] = ()) -> dict | None:
    """The LAST JSON object in `text` that has a `verdict` key. Malloy braces quoted earlier
    (`{ group_by: x }`) are not JSON and are skipped; an object without a verdict is looked into.
    An object with the content of one the packet itself carries (`planted`: a verdict the answer
    wrote for the judge to copy, in any spelling) is never the judge's own, so it is passed over."""
    objs = [o for o in _verdict_objects(text) if not any(_same(o, p) for p in planted)]
    return objs[-1] if objs else None


def planted_verdicts(request: LlmRequest) -> list[dict]:
    """Verdict-shaped objects inside the request's messages: the packet holds none of its own,
    so any found there were written by the answerer (an injection asking to be copied). The key
    counts in any case or look-alike spelling, and an object nested in another counts too."""
    out: list[dict] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "verdict" in _folded(list(value.keys())):
                out.append(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for message in request.messages:
        content = message.get("content") if isinstance(message, dict) else None
        texts: list[str] = []
        if isinstance(content, str):
            texts = [content]
        elif isinstance(content, list):
            texts = [b["text"] for b in content
                     if isinstance(b, dict) and isinstance(b.get("text"), str)]
        for text in texts:
            for obj in json_objects(text):
                walk(obj)
    return out


def agrees_with_planted(parsed: JudgeReply, planted: list[dict] | tuple[dict, ...]) -> bool:
    """True when the judge's verdict is one the answer asked for in a planted verdict object and
    is better for the answer than no_match: such a reply is suspect, whatever else it says."""
    return parsed.verdict in ("match", "near_match") and any(
        _planted_value(p) == parsed.verdict for p in planted)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _pairing(value: Any) -> dict[str, str | None]:
    if isinstance(value, dict):
        return {str(k): (v if isinstance(v, str) else None) for k, v in value.items()}
    out: dict[str, str | None] = {}
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("gold"), str):
                pred = item.get("prediction")
                out[item["gold"]] = pred if isinstance(pred, str) else None
    return out


def check_verdict_object(obj: Any) -> tuple[JudgeReply | None, str | None]:
    """A parsed object as a JudgeReply, or the reason it is unusable."""
    if not isinstance(obj, dict):
        return None, "no JSON object with a verdict"
    verdict = obj.get("verdict")
    if verdict not in JUDGE_VERDICTS:
        return None, f"verdict {shown(verdict)} is not one of {', '.join(JUDGE_VERDICTS)}"
    confidence = _as_int(obj.get("confidence"))
    if confidence is None or not 1 <= confidence <= 10:
        return None, f"confidence {shown(obj.get('confidence'))} is not an integer 1-10"
    why = obj.get("why")
    if not isinstance(why, str) or not why.strip():
        return None, "no `why`"
    gold_status = obj.get("gold_status") if obj.get("gold_status") in GOLD_STATUSES else None
    note = obj.get("gold_note")
    return JudgeReply(why=why.strip(), verdict=verdict, confidence=confidence,
                      column_pairing=_pairing(obj.get("column_pairing")),
                      gold_status=gold_status,
                      gold_note=note if isinstance(note, str) and note.strip() else None), None


def parse_reply(reply: LlmReply, planted: list[dict] | tuple[dict, ...] = ()
                ) -> tuple[JudgeReply | None, str | None]:
    """Structured output when the provider gave one; otherwise the last JSON object with a verdict.
    A reply that only repeats a verdict object planted in the packet is unusable."""
    if reply.data is not None and "verdict" in reply.data:
        if any(_same(reply.data, p) for p in planted):
            return None, "the reply repeats a verdict object written inside the answer"
        parsed, _problem = check_verdict_object(reply.data)
        if parsed is not None:
            return parsed, None
    obj = find_verdict_object(reply.text or "", planted)
    if obj is None and planted and _verdict_objects(reply.text or ""):
        return None, "the reply repeats a verdict object written inside the answer"
    return check_verdict_object(obj)


# --------------------------------------------------------------------------- calling

@dataclass
class JudgeCall:
    """Every reply one judgement took (retries included), and what parsing made of the last."""

    parsed: JudgeReply | None
    replies: list[LlmReply]
    problems: list[str | None]  # per reply: why it was unusable, None for a usable one
    planted_agreement: bool = False  # the parsed verdict is one a planted object asked for

    @property
    def source(self) -> str | None:
        return self.replies[-1].source if self.replies else None

    def _sum(self, name: str) -> int | None:
        values = [getattr(r, name) for r in self.replies]
        return None if not values or any(v is None for v in values) else sum(values)

    @property
    def input_tokens(self) -> int | None:
        return self._sum("input_tokens")

    @property
    def output_tokens(self) -> int | None:
        return self._sum("output_tokens")

    @property
    def cost_usd(self) -> float | None:
        values = [r.cost_usd for r in self.replies]
        known = [v for v in values if v is not None]
        return None if not values or len(known) < len(values) else round(sum(known), 8)

    def to_json(self) -> list[dict]:
        return [{"source": r.source, "request_digest": r.request_digest, "text": r.text,
                 "data": r.data, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                 "cache_read_tokens": r.cache_read_tokens,
                 "cache_write_tokens": r.cache_write_tokens, "cost_usd": r.cost_usd,
                 "problem": p} for r, p in zip(self.replies, self.problems, strict=True)]


def call_judge(provider: Provider, request: LlmRequest, *, retries: int = 1) -> JudgeCall:
    """Call the provider, retrying an unusable reply up to `retries` times. Provider failures
    (ProviderError, BudgetExhausted, RecordingMissing, ...) propagate to the caller."""
    call = JudgeCall(parsed=None, replies=[], problems=[])
    planted = planted_verdicts(request)
    # A two-phase reply is a person's or subagent's one answer: asking again re-reads the same file.
    attempts = 1 if provider.cycle is not None else 1 + max(0, retries)
    for _ in range(attempts):
        reply = provider.complete(request)
        parsed, problem = parse_reply(reply, planted)
        call.replies.append(reply)
        call.problems.append(problem)
        if parsed is not None:
            call.parsed = parsed
            call.planted_agreement = agrees_with_planted(parsed, planted)
            break
    return call


# --------------------------------------------------------------------------- post-processing

def _marked_list(text: str, name: str) -> list[str]:
    m = re.search(rf"<!--\s*{name}:start\s*-->(.*?)<!--\s*{name}:end\s*-->", text, re.DOTALL)
    if not m:
        return []
    return [x.strip().lower() for x in re.findall(r"^\s*-\s*`([^`]+)`", m.group(1), re.MULTILINE)]


def load_agreement_phrases(path: Path = AGREEMENT_FILE) -> tuple[list[str], list[str]]:
    """(phrases, guard words) from reference/agreement-phrases.md."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, None, f"cannot read the agreement phrases: {exc}") from None
    phrases, guards = _marked_list(text, "phrases"), _marked_list(text, "guards")
    if not phrases:
        raise InputError(path, None, "no phrases between <!-- phrases:start --> and :end")
    return phrases, guards


# Quoted spans in a `why`: "...", curly double and single quotes, backticks. A judge quoting the
# answer ("the note says it 'matches the golden exactly'") is reporting, not agreeing.
_QUOTED_SPAN_RE = re.compile(r'"[^"]*"|\u201c[^\u201d]*\u201d|\u2018[^\u2019]*\u2019|`[^`]*`')


def _collapse(text: str) -> str:
    # Folded like the packet's guards fold answerer text: a phrase planted in look-alike letters
    # or with invisible characters in it is still the planted phrase.
    return " ".join(skeleton(normalise(text)).split())


def contradicts_itself(why: str, phrases: list[str], guards: list[str],
                       answer_text: str = "") -> bool:
    """True when a `why` says, in the judge's own words, that the answer agrees with the golden,
    and nothing qualifies that.

    The answerer must not be able to turn its own no_match into needs_human by planting an
    agreement phrase for the judge to repeat (the doctrine tells the judge to mention text
    addressed to it): a phrase inside quotation marks in the `why`, or one the answer text itself
    contains, does not count.
    """
    text = _collapse(_QUOTED_SPAN_RE.sub(" ", why))
    planted = _collapse(answer_text)
    if not any(p in text and p not in planted for p in phrases):
        return False
    words = set(re.findall(r"[a-z']+", text))
    return not any(g in words for g in guards)


@dataclass(frozen=True)
class FinalVerdict:
    """A post-processed verdict: what a score records, with the judge's own read kept."""

    verdict: str | None
    reason: str | None
    why: str | None
    confidence: int | None
    column_pairing: dict[str, str | None] | None
    gold_status: str | None
    gold_note: str | None
    judge_verdict: str | None   # the judge's verdict when a mechanical rule replaced it


def post_process(parsed: JudgeReply, *, veto_hits: list[str] | tuple[str, ...] = (),
                 contaminated: bool | str = False,
                 phrases: tuple[list[str], list[str]] | None = None,
                 answer_text: str = "", planted_agreement: bool = False) -> FinalVerdict:
    """The rules after the reply (reference/judge.md), in order: confidence <= 5 -> needs_human;
    a match or near_match the answer asked for in a planted verdict object (`planted_agreement`)
    -> needs_human; a no_match whose why
    agrees with the golden -> needs_human (never on a phrase the answer planted: `answer_text`);
    a must-not-use hit -> no_match; contaminated -> null."""
    phrase_list, guards = phrases if phrases is not None else load_agreement_phrases()
    verdict: str | None = parsed.verdict
    why = parsed.why
    reason: str | None = None
    if parsed.confidence <= 5:
        verdict = "needs_human"
    elif planted_agreement and verdict in ("match", "near_match"):
        # The answer wrote the verdict it wanted; a judge that then gives it may have obeyed.
        verdict = "needs_human"
        why = PLANTED_PREFIX + why
    elif verdict == "no_match" and contradicts_itself(why, phrase_list, guards, answer_text):
        verdict = "needs_human"
        why = CONTRADICTION_PREFIX + why
    if veto_hits:
        verdict = "no_match"  # mechanical and certain: it beats the judge's doubt as well
    if is_contaminated(contaminated):
        verdict, reason = None, "contaminated"
    return FinalVerdict(verdict=verdict, reason=reason, why=why, confidence=parsed.confidence,
                        column_pairing=parsed.column_pairing, gold_status=parsed.gold_status,
                        gold_note=parsed.gold_note,
                        judge_verdict=parsed.verdict if verdict != parsed.verdict else None)
