"""What one get_context exchange asked for and what it delivered, in the shape the ledger keeps.

Two payload generations exist (reference/endpoint.md). The older one answers `{results: [...]}`,
one tier of environments, packages, sources or ranked entities `{kind, name, source, ..., doc}`;
the newer one answers typed searches with `{sources: [{source_info, entities: [{entity_id, name,
entity_type, relevance, matched_targets}]}], retrieval}`. Both become the `ranked_summary` of a
`tool_call` event: `{entity_ids, hits, result_count, doc_tokens}`, with ids minted once, here, as
`kind:source:name`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from malloy_evals.core import jsonl
from malloy_evals.core.vocab import ENTITY_KINDS

# Keys whose string values are documentation the answerer reads (doc tokens come from
# returned source and entity docs, never from names or resource ids).
_DOC_KEYS = frozenset({"doc", "docs", "documentation", "description", "summary", "one_line_summary"})

# An identifier with at least one underscore: a one-word name is never "delivered by docs", by
# design, because ordinary prose would deliver it by accident.
_DOC_TOKEN = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?![A-Za-z0-9_])")

_STATED_ID = re.compile(r"^(source|dimension|measure|view|query|join):[^:]*:.+$")


def entity_id(kind: str, source: str | None, name: str) -> str:
    """The one place an entity id is minted: `kind:source:name`; a source is
    `source:<name>:<name>`, and an entity whose source is unknown keeps an empty middle part."""
    kind = kind.lower()
    if kind == "source" and not source:
        source = name
    return f"{kind}:{source or ''}:{name}"


# ---------------------------------------------------------------- the request side

def search_targets(arguments: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The targets (`"<type>: <text>"`) and target shapes (`{type, has_text}`) of one call.

    A plain `query` string asks every kind, so it is recorded as the target type `any`.
    A typed target without text keeps its shape (it still asks for its kind) but adds no target.
    """
    targets: list[str] = []
    shapes: list[dict[str, Any]] = []
    query = arguments.get("query")
    if isinstance(query, str) and query.strip():
        targets.append(f"any: {query.strip()}")
        shapes.append({"type": "any", "has_text": True})
    raw = arguments.get("search_targets", arguments.get("searchTargets"))
    if isinstance(raw, list):
        for item in raw:
            text: Any  # a typed target's text is whatever the client sent
            if isinstance(item, str):
                text, kind = item, "any"
            elif isinstance(item, dict):
                kind = str(item.get("target_type") or item.get("targetType") or item.get("type") or "any")
                text = item.get("search_text", item.get("searchText", item.get("text")))
            else:
                continue
            kind = kind.strip().lower() or "any"
            has_text = isinstance(text, str) and bool(text.strip())
            shapes.append({"type": kind, "has_text": has_text})
            if has_text:
                targets.append(f"{kind}: {text.strip()}")
    return targets, shapes


def call_scopes(arguments: dict[str, Any]) -> list[Any] | None:
    """The scopes a call named: the typed form's `scopes`, else the older environment/package pair."""
    scopes = arguments.get("scopes")
    if isinstance(scopes, list):
        return scopes
    env = arguments.get("environmentName")
    pkg = arguments.get("packageName")
    if env or pkg:
        scope = {"environment": env, "package": pkg}
        return [{k: v for k, v in scope.items() if v is not None}]
    return None


# ---------------------------------------------------------------- the response side

def parse_json_text(text: str) -> Any | None:
    """The JSON (object or array) held in a text block, also when a host put a label such as
    `[Resource from publisher at <uri>]` first; None when there is none."""
    try:
        return jsonl.loads(text)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    # Try each opening bracket in turn: the label itself may start with one.
    for m in re.finditer(r"[{\[]", text):
        try:
            value, _end = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(value, (dict, list)):
            return value
    return None


def result_payload(content: Any) -> Any | None:
    """The JSON payload of an MCP tool result, however the host stored it: a string, a list of
    blocks with `resource.text` (the Publisher's block at content[0]) or `text`, or a dict."""
    if isinstance(content, dict):
        if "content" in content and not ({"results", "sources", "rows"} & content.keys()):
            return result_payload(content["content"])
        if content.get("type") == "resource":
            return result_payload(content.get("resource", {}).get("text"))
        if content.get("type") == "text":
            return result_payload(content.get("text"))
        return content
    if isinstance(content, str):
        return parse_json_text(content)
    if isinstance(content, list):
        for block in content:
            value = result_payload(block)
            if isinstance(value, dict):
                return value
    return None


def result_error(content: Any) -> str:
    """The server's message for a failed call: the `error` of its JSON block, else its text."""
    payload = result_payload(content)
    if isinstance(payload, dict) and payload.get("error"):
        error = payload["error"]
        return error if isinstance(error, str) else json.dumps(error, ensure_ascii=False)
    return " ".join(_texts(content)).strip() or "error"


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            yield from _texts(block)
    elif isinstance(content, dict):
        if isinstance(content.get("text"), str):
            yield content["text"]
        elif isinstance(content.get("resource"), dict) and isinstance(content["resource"].get("text"), str):
            yield content["resource"]["text"]


def retrieval_mode(payload: Any) -> str | None:
    """The response's own `retrieval` field (semantic / lexical / indexing / error); None when the
    server named none, as the older generation never does."""
    if isinstance(payload, dict) and isinstance(payload.get("retrieval"), str):
        return payload["retrieval"]
    return None


def ranked_summary(payload: Any) -> dict[str, Any]:
    """Everything retrieval scoring needs from one get_context response.

    `entity_ids` keeps response order without repeats; `hits` has one row per returned entity
    with its flattened `position` (an index, not a rank); `result_count` is how many result cards
    the response held (tiers without entities included); `doc_tokens` are the identifiers with
    an underscore found in returned docs.
    """
    hits: list[dict[str, Any]] = []
    result_count = 0
    if isinstance(payload, dict) and isinstance(payload.get("sources"), list):
        for card in payload["sources"]:
            if not isinstance(card, dict):
                continue
            result_count += 1
            source = _source_name(card)
            if source:
                hits.append(_hit(entity_id("source", source, source), card.get("relevance")))
            for entity in card.get("entities") or []:
                if not isinstance(entity, dict):
                    continue
                result_count += 1
                eid = _new_entity_id(entity, source)
                if eid:
                    hits.append(_hit(eid, entity.get("relevance")))
    results: list[Any] = []
    if isinstance(payload, dict):
        if isinstance(payload.get("results"), list):
            results.extend(payload["results"])
        if isinstance(payload.get("targets"), list):
            # An older per-target grouping of the same result cards.
            for target in payload["targets"]:
                if isinstance(target, dict) and isinstance(target.get("results"), list):
                    results.extend(target["results"])
    for item in results:
        if not isinstance(item, dict):
            continue
        result_count += 1
        eid = _old_entity_id(item)
        if eid:
            hits.append(_hit(eid, item.get("relevance", item.get("score"))))
    seen: set[str] = set()
    ids: list[str] = []
    for position, hit in enumerate(hits):
        hit["position"] = position
        if hit["entity_id"] not in seen:
            seen.add(hit["entity_id"])
            ids.append(hit["entity_id"])
    return {"entity_ids": ids, "hits": hits, "result_count": result_count,
            "doc_tokens": doc_tokens(payload)}


def served_revision(payload: Any) -> str | None:
    """A `servedRevision` the server put in its answer, wherever it sits; None when absent."""
    for key, value in _walk_items(payload):
        if key in ("servedRevision", "served_revision") and isinstance(value, (str, int)):
            return str(value)
    return None


def doc_tokens(payload: Any) -> list[str]:
    """Identifiers with at least one underscore in the docs of a payload, first occurrence order."""
    seen: dict[str, None] = {}
    for key, value in _walk_items(payload):
        if key in _DOC_KEYS:
            for text in _strings(value):
                for token in _DOC_TOKEN.findall(text):
                    seen.setdefault(token, None)
    return list(seen)


def _source_name(card: dict[str, Any]) -> str | None:
    info = got if isinstance(got := card.get("source_info"), dict) else {}
    rid = got if isinstance(got := info.get("resource_id"), dict) else {}
    for value in (rid.get("source"), info.get("name"), info.get("source"), card.get("name")):
        if isinstance(value, str) and value:
            return value
    return None


def _new_entity_id(entity: dict[str, Any], source: str | None) -> str | None:
    # A stated id in the kit's own form is kept; anything else (a server-private id) is re-minted
    # from type, source and name so ids compare with the set's expectedEntities.
    stated = entity.get("entity_id")
    if isinstance(stated, str) and _STATED_ID.match(stated):
        return stated
    name = entity.get("name")
    kind = str(entity.get("entity_type") or entity.get("kind") or "").lower()
    if isinstance(name, str) and name and kind:
        return entity_id(kind, entity.get("source") or source, name)
    return stated if isinstance(stated, str) and stated else None


def _old_entity_id(item: dict[str, Any]) -> str | None:
    kind = str(item.get("kind") or "").lower()
    name = item.get("name")
    if kind in ENTITY_KINDS and isinstance(name, str) and name:
        source = got if isinstance(got := item.get("source"), str) else None
        return entity_id(kind, source, name)
    stated = item.get("entityId")
    return stated if isinstance(stated, str) and _STATED_ID.match(stated) else None


def _hit(eid: str, relevance: Any) -> dict[str, Any]:
    return {"entity_id": eid,
            "relevance": relevance if isinstance(relevance, (int, float)) and not isinstance(relevance, bool) else None}


def _walk_items(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk_items(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk_items(value)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []
