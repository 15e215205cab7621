"""The model surface a coverage reader sees: the compiled inventory of a local or served package."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.core.errors import KitError, UnmeasuredError
from malloy_evals.core.redact import redact_url
from malloy_evals.endpoint.mcp_client import PublisherRest
from malloy_evals.endpoint.package import package_sha
from malloy_evals.endpoint.runner import MalloyRuntime, default_allow, runtime_missing_reason

# A doc longer than this is cut in the inventory: the reader needs what an entity is, not a page,
# and a model with hundreds of documented columns must still fit one prompt.
DOC_CHARS = 320
SOURCE_DOC_CHARS = 800


# search(text, limit) -> ranked entity records {kind, source, name, ...}, as the runtime returns them.
Search = Callable[[str, int], list[dict]]


@dataclass(frozen=True)
class ModelView:
    """What was read of the model: the inventory (or the text), its sha, and how it was read."""

    compiled_surface: str     # "read" or "not read: <why>"
    text: str                 # the inventory when read, else the model source text
    model_sha256: str | None  # sha256 over the model files (or the served source texts)
    source: str               # the folder, or "<publisher-url> <env>/<pkg>"
    surface: dict | None = None  # the compiled surface (runtime.describe() shape) when read
    # The runtime's search over this model, kept open only when the inventory is too large for one
    # prompt (each case then gets the part it needs); `close` stops it.
    search: Search | None = field(default=None, compare=False)
    close: Callable[[], None] | None = field(default=None, compare=False)

    @property
    def entity_ids(self) -> frozenset[str] | None:
        """Every entity id of the compiled inventory; None when the surface was not read."""
        return entity_ids(self.surface) if self.surface is not None else None


def _one_line(text: Any, limit: int) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _entity_line(kind: str, source: str, item: dict) -> str:
    name = item.get("name", "?")
    extra = item.get("type") or item.get("relationship")
    head = f"  {kind}:{source}:{name}" + (f" ({extra})" if extra else "")
    doc = _one_line(item.get("doc"), DOC_CHARS)
    return f"{head}: {doc}" if doc else f"{head}: (undocumented)"


def inventory(surface: dict) -> str:
    """The compiled surface (runtime.describe()) as the reader's inventory: one line per entity.

    Every kind is listed with its doc cut to one line; implicitly exposed table columns appear as
    undocumented dimensions, which is why the compiled surface beats the text
    (reference/coverage.md).
    """
    lines: list[str] = []
    for model in surface.get("models") or []:
        lines.append(f"model {model.get('path', '?')}")
        for src in model.get("sources") or []:
            sname = src.get("name", "?")
            doc = _one_line(src.get("doc"), SOURCE_DOC_CHARS)
            lines.append(f"source:{sname}" + (f": {doc}" if doc else ""))
            for kind, key in (("dimension", "dimensions"), ("measure", "measures"),
                              ("view", "views"), ("join", "joins")):
                for item in src.get(key) or []:
                    lines.append(_entity_line(kind, sname, item))
        for query in model.get("queries") or []:
            lines.append(_entity_line("query", str(query.get("source") or ""), query))
    return "\n".join(lines)


def entity_ids(surface: dict) -> frozenset[str]:
    """The ids `kind:source:name` of every entity the inventory lists (the ids a reader may name)."""
    ids: set[str] = set()
    for model in surface.get("models") or []:
        for src in model.get("sources") or []:
            sname = src.get("name", "?")
            ids.add(f"source:{sname}:{sname}")
            for kind, key in (("dimension", "dimensions"), ("measure", "measures"),
                              ("view", "views"), ("join", "joins")):
                ids.update(f"{kind}:{sname}:{item.get('name', '?')}" for item in src.get(key) or [])
        ids.update(f"query:{q.get('source') or ''}:{q.get('name', '?')}"
                   for q in model.get("queries") or [])
    return frozenset(ids)


def source_blocks(surface: dict) -> dict[str, list[str]]:
    """Each source's part of the inventory, in the inventory's own lines (its line, its entities,
    then the named queries over it), keyed `<model path>\x00<source>`: what a narrowed inventory
    is assembled from."""
    blocks: dict[str, list[str]] = {}
    for model in surface.get("models") or []:
        path = str(model.get("path", "?"))
        for src in model.get("sources") or []:
            sname = src.get("name", "?")
            doc = _one_line(src.get("doc"), SOURCE_DOC_CHARS)
            lines = [f"source:{sname}" + (f": {doc}" if doc else "")]
            for kind, key in (("dimension", "dimensions"), ("measure", "measures"),
                              ("view", "views"), ("join", "joins")):
                lines += [_entity_line(kind, sname, item) for item in src.get(key) or []]
            blocks[f"{path}\x00{sname}"] = lines
        for query in model.get("queries") or []:
            key = f"{path}\x00{query.get('source') or ''}"
            blocks.setdefault(key, [f"source:{query.get('source') or ''}"]).append(
                _entity_line("query", str(query.get("source") or ""), query))
    return blocks


def model_files(model_dir: Path) -> list[Path]:
    """Every .malloy file under a package folder, in a stable order."""
    return sorted(p for p in Path(model_dir).rglob("*.malloy") if p.is_file())


def model_text(model_dir: Path) -> tuple[str, str]:
    """(text, sha256): every .malloy file, each under a `-- <path>` header; the sha is over the
    same bytes, so two folders with the same files in the same places share it."""
    parts = []
    for path in model_files(model_dir):
        rel = path.relative_to(model_dir).as_posix()
        parts.append(f"-- {rel}\n{path.read_text(encoding='utf-8', errors='replace')}")
    text = "\n".join(parts)
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()


def _describe_errors(surface: dict) -> str | None:
    errors = surface.get("errors") or []
    if not errors:
        return None
    first = errors[0]
    if isinstance(first, dict):
        where = first.get("path") or first.get("model") or ""
        msg = first.get("message") or first.get("error") or json.dumps(first)
        first = f"{where}: {msg}" if where else str(msg)
    return _one_line(f"compile error: {first}" + (f" (+{len(errors) - 1} more)"
                                                  if len(errors) > 1 else ""), 300)


def read_local_model(model_dir: Path, *, describe: Callable[[Path], dict] | None = None,
                     search_over: int | None = None) -> ModelView:
    """Compile a local package with the kit's runtime and read its surface; on any failure the
    reason goes into `compiledSurface` and the reader gets the model text instead.

    When the inventory is longer than `search_over` characters the runtime stays open, and the
    view carries its search (and `close`), so each case can be given the part it needs."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise UnmeasuredError(f"{model_dir}: no such model folder")
    text, _ = model_text(model_dir)
    # The report's modelSha256 is the same digest as a run's modelSha and the served package's
    # sourceContentSha, so a coverage report and a run over one model can be matched by it.
    sha = package_sha(model_dir)
    if not text:
        raise UnmeasuredError(f"{model_dir}: no .malloy files")
    runtime: MalloyRuntime | None = None
    try:
        if describe is None:
            runtime = _start_runtime(model_dir)
            surface = runtime.describe()
        else:
            surface = describe(model_dir)
    except KitError as exc:
        _stop(runtime)
        return ModelView(f"not read: {_one_line(str(exc), 300)}", text, sha, str(model_dir))
    problem = _describe_errors(surface)
    inv = inventory(surface) if problem is None else ""
    if problem is not None or not inv.strip():
        _stop(runtime)
        why = problem or "the compiled model has no sources"
        return ModelView(f"not read: {why}", text, sha, str(model_dir))
    if runtime is None or search_over is None or len(inv) <= search_over:
        _stop(runtime)
        return ModelView("read", inv, sha, str(model_dir), surface)
    kept = runtime
    return ModelView("read", inv, sha, str(model_dir), surface,
                     search=lambda text, limit: kept.search(text, limit), close=kept.close)


def _start_runtime(model_dir: Path) -> MalloyRuntime:
    """One runner: the model is compiled once, and the cases' searches (quick, asked from the
    reader's threads) wait their turn on it rather than start a second runner."""
    reason = runtime_missing_reason()
    if reason is not None:
        raise UnmeasuredError(reason)
    return MalloyRuntime(model_dir, allow=default_allow(model_dir), pool_size=1)


def _stop(runtime: MalloyRuntime | None) -> None:
    if runtime is not None:
        runtime.close()


def _annotation_doc(annotations: Any) -> str:
    """The `#(doc)` text of Malloy annotations as the Publisher serves them ([{value}, ...])."""
    parts = []
    for a in annotations or []:
        value = a.get("value") if isinstance(a, dict) else a
        if isinstance(value, str) and value.lstrip().startswith("#(doc)"):
            parts.append(value.lstrip()[len("#(doc)"):].strip())
    return " ".join(parts)


def _type_name(value: Any) -> str | None:
    """Malloy's served type (`{"kind": "number_type"}` or a string) as describe() names it."""
    if isinstance(value, dict):
        value = value.get("kind") or value.get("type")
    return value.removesuffix("_type") if isinstance(value, str) else None


def surface_from_source_infos(model_path: str, source_infos: Any, queries: Any) -> dict:
    """A served model's `sourceInfos` (a JSON string or a list) in the shape of runtime.describe()."""
    if isinstance(source_infos, str):
        try:
            source_infos = json.loads(source_infos)
        except ValueError:
            source_infos = []
    sources = []
    for info in source_infos or []:
        if not isinstance(info, dict):
            continue
        fields = ((info.get("schema") or {}).get("fields")) or []
        by_kind: dict[str, list[dict]] = {"dimension": [], "measure": [], "view": [], "join": []}
        for f in fields:
            if isinstance(f, dict) and f.get("kind") in by_kind:
                item = {"name": f.get("name"), "doc": _annotation_doc(f.get("annotations"))}
                if f.get("kind") in ("dimension", "measure"):
                    item["type"] = _type_name(f.get("type"))
                if f.get("kind") == "join":
                    item["relationship"] = f.get("relationship")
                by_kind[f["kind"]].append(item)
        sources.append({"name": info.get("name"), "doc": _annotation_doc(info.get("annotations")),
                        "dimensions": by_kind["dimension"], "measures": by_kind["measure"],
                        "views": by_kind["view"], "joins": by_kind["join"]})
    named = [{"name": q.get("name"), "source": q.get("sourceName") or q.get("source"),
              "doc": q.get("doc") or _annotation_doc(q.get("annotations"))}
             for q in queries or [] if isinstance(q, dict)]
    return {"path": model_path, "sources": sources, "queries": named}


def _served_sha(rest: Any, environment: str, package: str) -> str | None:
    """The package's `sourceContentSha` (a run's modelSha), when the server reports one."""
    try:
        info = rest.package(environment, package)
    except KitError:
        return None  # the digest of the source texts stands in
    sha = info.get("sourceContentSha") if isinstance(info, dict) else None
    return sha if isinstance(sha, str) and sha else None


def read_served_model(publisher_url: str, environment: str, package: str) -> ModelView:
    """A served package over the Publisher REST API: each model's source text and compiled
    `sourceInfos` (reference/coverage.md). No compiled sources means `not read`, and the reader
    gets the text."""

    rest = PublisherRest(publisher_url)
    listing = rest.models(environment, package)
    if isinstance(listing, dict):
        listing = listing.get("models") or []
    paths_ = sorted(path for m in listing or [] if isinstance(m, dict) and (path := m.get("path")))
    where = f"{redact_url(publisher_url)} {environment}/{package}"  # reported: no credentials
    if not paths_:
        raise UnmeasuredError(f"{where}: the server lists no models")
    texts, models, problems = [], [], []
    for path in paths_:
        doc = rest.model(environment, package, path)
        texts.append(f"-- {path}\n{doc.get('sourceText') or ''}")
        infos = doc.get("sourceInfos")
        if infos:
            models.append(surface_from_source_infos(path, infos, doc.get("queries")))
        else:
            problems.append(f"{path}: no compiled sourceInfos")
    text = "\n".join(texts)
    sha = _served_sha(rest, environment, package) or hashlib.sha256(text.encode("utf-8")).hexdigest()
    inv = inventory({"models": models}) if models and not problems else ""
    if inv.strip():
        return ModelView("read", inv, sha, where, {"models": models})
    why = "; ".join(problems) or "the server returned no compiled sources"
    return ModelView(f"not read: {_one_line(why, 300)}", text, sha, where)
