"""The part of a large model's inventory one case needs: its concepts, found by the runtime's
search, and the sources they live on.

A model whose whole inventory does not fit one reader prompt is not read whole. Each concept the
case names (`requiresConcepts`; the question itself when it names none) is searched the way the
Publisher's get_context ranks entities, and the reader gets the sources holding the hits, each
whole (every dimension, measure, view and join, so a competing candidate on the same source is
still in view), best-ranked first, for as long as they fit; a source that no longer fits whole is
given by its own line and the entities found on it. Small models never come here: they keep the
whole inventory, and with it the requests their recordings were made for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from malloy_evals.answer.coverage.surface import source_blocks

# Hits kept per concept: enough to bring in the near misses a reader must rule out, few enough
# that a handful of concepts name a few dozen sources at most.
SEARCH_HITS = 25
# The most a narrowed inventory carries. Below the reader's hard limit on purpose: readers were
# measured to drift toward MODELLED above about 100 KB of model text, and a narrowed inventory
# has no reason to go near that.
NARROWED_CHARS = 100_000
HOW = ("the whole inventory has {full} characters, over the reader's limit of {limit}: each case "
       "gets at most {budget} characters, the sources holding what the runtime's search finds for "
       "its concepts (the question when it names none), {hits} hits per concept, each source whole "
       "while it fits, best-ranked first; a source that does not fit whole is given by its line and "
       "the entities found on it")


@dataclass(frozen=True)
class CaseInventory:
    """What one case's reader sees of a large model, and how it was chosen (for the report)."""

    text: str
    searched: list[str]                                   # the search texts, in order
    sources: list[str] = field(default_factory=list)      # sources given whole
    partial_sources: list[str] = field(default_factory=list)  # given by their line and hits only
    left_out: list[str] = field(default_factory=list)     # sources with hits that did not fit
    entities_found: int = 0                               # distinct entities the search returned

    def to_json(self) -> dict[str, Any]:
        return {"chars": len(self.text), "searched": self.searched, "sources": self.sources,
                "partial_sources": self.partial_sources, "left_out": self.left_out,
                "entities_found": self.entities_found}


def search_texts(concepts: list[str], question: str) -> list[str]:
    """What is searched for a case: each named concept, else the question."""
    named = [c.strip() for c in concepts if isinstance(c, str) and c.strip()]
    return named or [question]


def _hit_id(hit: dict) -> tuple[str, str] | None:
    """(source, entity id) of one search hit; None for what the inventory does not list."""
    kind, source, name = hit.get("kind"), hit.get("source"), hit.get("name")
    if not all(isinstance(v, str) and v for v in (kind, source, name)):
        return None
    return str(source), f"{kind}:{source}:{name}"


def _ranked(hit_lists: list[list[dict]]) -> tuple[list[str], dict[str, list[str]]]:
    """Sources in rank order, taking each concept's hits in turn (so every concept's best source
    comes before any concept's second), and the entity ids found on each."""
    order: dict[str, None] = {}
    found: dict[str, dict[str, None]] = {}
    for rank in range(max((len(h) for h in hit_lists), default=0)):
        for hits in hit_lists:
            if rank < len(hits) and (ids := _hit_id(hits[rank])) is not None:
                source, eid = ids
                order.setdefault(source, None)
                found.setdefault(source, {})[eid] = None
    return list(order), {s: list(ids) for s, ids in found.items()}


def narrow(surface: dict, search: Callable[[str, int], list[dict]], concepts: list[str],
           question: str, limit: int) -> CaseInventory:
    """The case's part of the inventory, at most `limit` (and NARROWED_CHARS) characters."""
    limit = min(limit, NARROWED_CHARS)
    texts = search_texts(concepts, question)
    sources, found = _ranked([search(t, SEARCH_HITS) for t in texts])
    blocks: dict[str, tuple[str, list[str]]] = {}
    for key, source_lines in source_blocks(surface).items():
        path, _, name = key.partition("\x00")
        blocks.setdefault(name, (path, source_lines))
    lines: list[str] = []
    used = 0
    whole: list[str] = []
    partial: list[str] = []
    left_out: list[str] = []
    current_model = None
    for name in sources:
        if name not in blocks:
            continue
        path, block = blocks[name]
        header = [] if path == current_model else [f"model {path}"]
        wanted = set(found.get(name, []))
        candidates = [(whole, header + block),
                      (partial, header + [block[0]] + [ln for ln in block[1:] if _line_id(ln) in wanted])]
        for bucket, part in candidates:
            size = sum(len(x) + 1 for x in part)
            if used + size <= limit:
                lines += part
                used += size
                bucket.append(name)
                current_model = path
                break
        else:
            left_out.append(name)
    return CaseInventory("\n".join(lines), texts, whole, partial, left_out,
                         sum(len(ids) for ids in found.values()))


def _line_id(line: str) -> str:
    """The entity id an inventory line starts with (`  measure:orders:revenue (number): ...`)."""
    head = line.strip().split(" ", 1)[0]
    return head.removesuffix(":")


def how_narrowed(full_chars: int, limit: int) -> str:
    """The report's one sentence on how a large model's inventory was narrowed."""
    return HOW.format(full=full_chars, limit=limit, budget=min(limit, NARROWED_CHARS),
                      hits=SEARCH_HITS)
