"""What a tool use touches: paths, sweeps (recursive reads) and scripts, and the helpers that find them in arguments."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

from malloy_evals.checks.contamination.refs import Ref, to_ref

# Input keys, by what their values are.
PATH_KEYS = frozenset({
    "file_path", "filepath", "path", "paths", "notebook_path", "filename", "file", "files",
    "dir", "directory", "dirname", "folder", "target_file", "target_directory", "target",
    "source", "destination", "dest", "root", "relative_workspace_path", "absolute_path",
    "modelpath", "model_path", "packagename", "package_name", "package", "projectname",
    "project_name", "project", "uri", "repo_path", "repository_path", "repo_root",
    "root_path", "base_path", "workspace_path", "project_path",
})
MODEL_PATH_KEYS = frozenset({"modelpath", "model_path"})
# Free-text inputs of a reading tool that are the tool's own code or prose, never its target.
PROSE_KEYS = frozenset({"content", "new_string", "old_string", "file_text", "new_source", "text",
                         "prompt", "description", "new_str", "old_str", "plan"})
CWD_KEYS = frozenset({"cwd", "workdir", "working_directory", "workingdirectory"})
URL_KEYS = frozenset({"url", "urls", "uri", "href", "endpoint"})
COMMAND_KEYS = frozenset({"command", "cmd", "commands", "script"})
GLOB_KEYS = frozenset({"pattern", "patterns", "glob"})
GREP_FILTER_KEYS = frozenset({"glob", "include", "includes", "file_pattern"})

# File types a filtered recursive read (grep --include, Grep glob=) might still pull gold from.
SENSITIVE_SAMPLES = (
    "cases.jsonl", "set.json", "events.jsonl", "judge-regressions.jsonl",
    "judge-calibration.jsonl", "run.json", "golden.csv", "x.csv", "x.tsv", "x.json", "x.jsonl",
    "x.malloy", "x.malloynb", "x.md", "x.txt", "x.parquet", "x.yaml", "x.yml", "x.sql",
    "x.duckdb", "x.db",
)


# ------------------------------------------------------------------------ what a use touches

@dataclass(frozen=True)
class Touch:
    """A path one tool use names: where it resolves and how sure we are it is a path."""

    text: str
    ref: Ref
    path_like: bool          # a real path argument (vs a word spotted inside code or a query)
    url: bool = False        # the path part of a URL: needles only, never the file system
    model_exempt: bool = False  # carried by an MCP call: the server resolves it (rule 2)
    base: Ref | None = None  # the cwd it was resolved against

    @property
    def needle_segs(self) -> tuple[str, ...]:
        """The segments needles are matched on: the path without the cwd's own folders.

        A session whose cwd happens to sit under a folder called `runs` or `evals` must not make
        every path it touches a hit; what the tool use reaches below (or above) its cwd counts.
        Climbing above the cwd (`ls ..`) keeps the folder reached.
        """
        base = self.base
        if base is None or not base.absolute or not self.ref.absolute:
            return self.ref.segs
        common = 0
        for a, b in zip(base.segs, self.ref.segs, strict=False):
            if a != b:
                break
            common += 1
        if common >= len(self.ref.segs):
            return self.ref.segs[-1:]
        return self.ref.segs[common:]


@dataclass(frozen=True)
class Sweep:
    """A recursive read (or listing) rooted at a folder, optionally narrowed by a glob."""

    root: Ref
    pattern: tuple[str, ...] | None  # glob segments below the root; None: everything below
    filters: tuple[str, ...] = ()    # name filters (grep --include, Grep glob); () = any file
    excludes: tuple[str, ...] = ()   # folder names skipped (grep --exclude-dir)
    max_depth: int | None = None     # find -maxdepth
    kind: Literal["recursive", "glob", "ls-glob"] = "recursive"


@dataclass(frozen=True)
class Script:
    """Code run from a folder: inline (we see it) or a script file (we may not)."""

    cwd: Ref | None
    primitive: str | None            # the read primitive found; None when the code is not seen
    roots: tuple[Ref, ...] = ()      # folder literals the code names (os.walk('/repo'))


@dataclass
class Seen:
    """What one tool use names, gathered before the rules look at it."""

    touches: list[Touch] = field(default_factory=list)
    sweeps: list[Sweep] = field(default_factory=list)
    scripts: list[Script] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)  # programs made at run time (`| base64 -d | sh`)


@dataclass
class State:
    """What carries from one tool use to the next: the shell's cwd and files the answerer wrote."""

    cwd: Ref | None
    written: dict[Ref, str] = field(default_factory=dict)  # file -> the text the log shows in it
    made: set[Ref] = field(default_factory=set)  # files the answerer created (Write, `>`, tee)
    env: dict[str, str] = field(default_factory=dict)  # shell variables set so far
    links: dict[Ref, list[Ref]] = field(default_factory=dict)  # link -> where it may point


URL_RE = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*)://([^\s'\"<>()\[\]{}\\,;|`]*)")
QUOTED_RE = re.compile(r"'([^'\s]+)'|\"([^\"\s]+)\"|`([^`\s]+)`")
_RUN_RE = re.compile(r"[A-Za-z0-9_.~\-/*?+@%\[\]]+")
_FILE_LIKE_RE = re.compile(r"^[\w.\-*?]*\w\.[A-Za-z0-9*?]{1,12}$")
_GLOB_CHARS = re.compile(r"[*?\[]")
# What lets code read files (rule 3 of reference/contamination.md), plus ways to run a shell
# that could.
READ_PRIMITIVES = re.compile(
    r"\bopen\b|\bread\w*|\w+_read\w*|\.read\w*|\bglob\b|\bglob\w*|\brglob\b|\bwalk\b|"
    r"\blistdir\b|\bscandir\b|\biterdir\b|\breaddir\w*|\bfs\.|\bsubprocess\b|\bos\.system\b|"
    r"\bpopen\b|\bspawn\w*|\bexecSync\b|\bchild_process\b|\bDeno\.\w*read|\bfile\(|\bFile\.",
    re.IGNORECASE)


def _url_touch(scheme: str, rest: str, base: Ref | None, exempt: bool) -> Touch:
    if scheme.lower() == "file":
        return Touch(text=f"{scheme}://{rest}", ref=to_ref("/" + rest.lstrip("/"), base), base=base,
                     path_like=True, model_exempt=exempt)
    path = rest.split("/", 1)[1] if "/" in rest else ""
    path = unquote(re.split(r"[?#]", path, maxsplit=1)[0])  # models/sub%2Fshop.malloy
    return Touch(text=f"{scheme}://{rest}", ref=to_ref("/" + path), path_like=True, url=True,
                 model_exempt=exempt)


def embedded(text: str, base: Ref | None, *, literals_path_like: bool,
              exempt: bool = False, runs: bool = True) -> list[Touch]:
    """Path-like tokens inside free text (inline code, a JSON body, a query).

    URLs give their path part; quoted literals without spaces are candidates; so is any run of
    path characters holding a `/` or looking like a file name (`cases.jsonl`).
    """
    text = text.replace("\\/", "/")
    out: list[Touch] = []
    for m in URL_RE.finditer(text):
        out.append(_url_touch(m.group(1), m.group(2), base, exempt))
    text = URL_RE.sub(" ", text)
    for m in QUOTED_RE.finditer(text):
        lit = next(g for g in m.groups() if g is not None)
        out.append(Touch(text=lit, ref=to_ref(lit.lstrip("@"), base), base=base,
                         path_like=literals_path_like or "/" in lit, model_exempt=exempt))
    for m in _RUN_RE.finditer(text) if runs else ():
        run = m.group(0).strip(".")
        if run and ("/" in run or _FILE_LIKE_RE.match(run)):
            out.append(Touch(text=run, ref=to_ref(run.lstrip("@"), base), base=base, path_like="/" in run,
                             model_exempt=exempt))
    return out


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from strings_in(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def keyed(value: Any, keys: frozenset[str]) -> Iterator[str]:
    """String values under any of `keys`, at any depth (MultiEdit, nested MCP arguments)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and k.lower() in keys:
                yield from strings_in(v)
            elif isinstance(v, (dict, list)):
                yield from keyed(v, keys)
    elif isinstance(value, list):
        for v in value:
            yield from keyed(v, keys)


def path_touch(text: str, base: Ref | None, exempt: bool = False) -> Touch:
    cleaned = text.strip().replace("\\", "/")
    return Touch(text=text, ref=to_ref(cleaned, base), base=base, path_like=True, model_exempt=exempt)


def glob_split(pattern: str, base: Ref | None) -> tuple[Ref, tuple[str, ...]]:
    """A glob's fixed folder (resolved) and the pattern segments below it."""
    cleaned = pattern.strip().replace("\\", "/")
    parts = cleaned.split("/")
    fixed: list[str] = []
    for i, part in enumerate(parts):
        if _GLOB_CHARS.search(part):
            rest = tuple(p.lower() for p in parts[i:] if p not in ("", "."))
            prefix = "/".join(fixed)
            if not prefix.strip("/"):
                prefix = "/" if cleaned.startswith("/") else "."
            return to_ref(prefix, base), rest
        fixed.append(part)
    return to_ref(cleaned, base), ()
