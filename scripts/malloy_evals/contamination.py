"""Whether an answerer's host tool uses show it reached the answers (SPEC 5.1).

A contaminated attempt gets no verdict: it saw the set, the goldens, an earlier run or the model
file it was meant to reach only through the Publisher's tools. The decision is mechanical, over
the host's own log of tool uses (never the answerer's account of itself), with four rules:

1. `eval-area`: a file, search, shell or fetch tool (or an MCP call naming a path) touches a
   protected folder (`--set`, `--run`) or a needle (`evals/`, `cases.jsonl`, ...), matched on
   normalised path segments; listing counts; an MCP call naming the truth package hits.
2. `model-file`: a file, search or shell tool reads the model file under test. An MCP call's
   `modelPath` is exempt (the server resolves it), and so is a shell command that posts a
   JSON-RPC `tools/call` to an `/mcp` URL.
3. `recursive-read`: a recursive read (grep -r, rg, find, tar, cp -r, a shell glob, the Grep and
   Glob tools) from a folder that contains a protected folder or the model file.
   `script-may-read`: inline code or a script, run from such a folder, that can read files: the
   verdict is "unknown" unless a definite rule decided it.
4. `under-report`: the answerer reported more calls than the host logged.
No log at all is "unknown" (`no-log`). Both "unknown" and true count as contaminated everywhere.

Paths in the log resolve against the log's cwd (and the `cd`s and variables the shell set);
when the cwd is not known, relative paths on both sides are compared as relative to the same
unknown folder, and a recursive read from `.` is taken to reach an absolute protected folder. A
relative `--set`/`--run` that exists on this machine is protected both where the log's cwd puts
it and where it is here. Needles are matched on what a path reaches below (or above) the cwd,
never on the cwd's own folders, so a session run under `/ci/runs/...` is not voided wholesale.
Shell commands are read by a small lexer (quotes, pipelines, heredocs, substitutions), never run.

Where SPEC 5.1 is silent, these are the choices (each has a test):
- A link the answerer made (`ln -s TARGET LINK`) is followed: a later read through LINK is a read
  of TARGET. Unquoted brace words (`cat {sets,x}/a.csv`) and Glob patterns are brace-expanded.
  Words that `echo`/`printf` pipe into `xargs` are paths.
- git: `REV:PATH` names PATH under the repository top, which may be the cwd or any folder above
  it; `git log -p` (or --stat, -S, ...), `git show`/`git diff` without `REV:PATH`, `git stash
  show`, `ls-files`, `ls-tree` and `archive` print from the whole tree (a pathspec after `--`
  narrows them). An MCP git tool (`git_show`, `git_diff`, `git_log`) reads its repo_path the same
  way.
- awk and sed scripts are not paths, but what they read is: awk's quoted literals, and `getline`
  or `system()` (code that can read: rule 3); sed's `r FILE` / `R FILE` and `e`.
- `fd` lists everything under its roots; `locate` the whole file system; an MCP
  `directory_tree` its root. `~` whose home the cwd does not reveal is a folder of unknown place.
- The `modelPath` exemption belongs to Publisher tools: another MCP server's tool (filesystem,
  database, notes) that names the model file in a path or a query literal reads it. A reading
  tool's string literals count (a SQL `read_csv('/repo/sets/x.csv')`); prose fields (`prompt`,
  `content`, `description`) and web searches do not.
- `python -m pip|venv|ensurepip|json.tool` and `uv pip|venv|add|sync` manage packages, so they are
  not code that may read the set; `python -m` of anything else is.
- `$PWD`, `$(pwd)` and `${VAR:-default}` are expanded; a script written with `tee <<EOF` is read
  when it runs; code whose absolute string literal is the start of a protected path
  (`'/w/se' + 'ts'`) may read it, wherever it runs (`script-may-read`).
- Not decided here: a Publisher `getModel`-style tool called with a `modelPath` returns model text
  but is exempt by SPEC rule 2; a subagent's (Task) own tool uses count only as the host logs them.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from .errors import EXIT_FINDING, EXIT_OK, InputError, UsageError
from .toollog import ToolLog, ToolUse, read_tool_uses

Rule = Literal["eval-area", "model-file", "recursive-read", "script-may-read", "under-report",
               "no-log"]
Verdict = bool | Literal["unknown"]

# The eval area's default needles (SPEC 5.1 rule 1); --gold-path / --eval-path add to these.
DEFAULT_NEEDLES: tuple[str, ...] = (
    "evals/", "gold/", "cases.jsonl", "set.json", "events.jsonl", "judge-regressions",
    "judge-calibration", "recordings/", "runs/",
)
MIN_NEEDLE_CHARS = 3

# Rules that decide "contaminated: true"; the others can only make the verdict "unknown".
_DEFINITE_RULES = frozenset({"eval-area", "model-file", "recursive-read", "under-report"})


@dataclass(frozen=True)
class Reason:
    """Why an attempt is (or may be) contaminated: which rule, which tool use, what it touched."""

    rule: Rule
    tool_use_index: int | None  # 0-based position in the log's tool uses; None for log-wide rules
    tool: str | None            # the tool's name as logged
    needle: str | None          # the needle, protected path, model file or read primitive matched


@dataclass(frozen=True)
class ContaminationResult:
    """The verdict over one attempt's host log (SPEC 5.1)."""

    contaminated: Verdict
    reasons: list[Reason]
    host_tool_uses: int | None  # every tool use the host logged, MCP included; None: no log
    reported_calls: int | None  # what the answerer reported (flag over log); None: unknown

    @property
    def exit_code(self) -> int:
        # "unknown" counts as contaminated in every aggregate, so it is a finding too.
        return EXIT_OK if self.contaminated is False else EXIT_FINDING


# ------------------------------------------------------------------------------------ paths

class Ref(NamedTuple):
    """A normalised path: absolute or relative, lower-cased segments, `.` gone, `..` folded."""

    absolute: bool
    segs: tuple[str, ...]

    def text(self) -> str:
        body = "/".join(self.segs)
        if self.absolute and not (self.segs and self.segs[0] == "~"):
            return "/" + body
        return body or "."


def to_ref(path: str, base: Ref | None = None) -> Ref:
    """Normalise a path, resolving a relative one against `base` when the base is known."""
    text = path.strip()
    if text.lower().startswith("file://"):
        text = text[7:]
        if text.startswith("localhost/"):
            text = text[9:]
    if (text == "~" or text.startswith("~/")) and base is not None and _home(base):
        text = "/" + "/".join(_home(base)) + text[1:]
    # /proc/self/root is `/` and /proc/self/cwd the cwd (any pid, as the shell's own): aliases.
    proc = re.match(r"^/proc/(?:self|thread-self|\d+)/(root|cwd)(?=/|$)", text)
    if proc:
        rest = text[proc.end():]
        if proc.group(1) == "root":
            text = rest or "/"
        elif base is not None:
            text = base.text().rstrip("/") + (rest or "/")
        else:
            text = "." + rest
    absolute = text.startswith(("/", "~"))
    raw = [s for s in text.split("/") if s not in ("", ".")]
    if not absolute and base is not None:
        absolute, raw = base.absolute, list(base.segs) + raw
    segs: list[str] = []
    for seg in raw:
        if seg == "..":
            if segs and segs[-1] != ".." and segs[-1] != "~":
                segs.pop()
            elif not absolute:
                segs.append("..")
            # `..` above an absolute root stays at the root
        else:
            segs.append(seg.lower())
    return Ref(absolute, tuple(segs))


def _home(base: Ref) -> tuple[str, ...] | None:
    """The home folder a cwd such as /home/alice/repo or /Users/alice/repo implies, if any."""
    segs = base.segs
    if base.absolute and len(segs) >= 2 and segs[0] in ("home", "users"):
        return segs[:2]
    if base.absolute and segs[:1] == ("root",):
        return segs[:1]
    return None


def _named(ref: Ref) -> tuple[str, ...]:
    """A relative path's segments after its leading `..`s."""
    segs = ref.segs
    while segs and segs[0] == "..":
        segs = segs[1:]
    return segs


def _find(seq: tuple[str, ...], sub: tuple[str, ...]) -> int:
    """Index of `sub` as a contiguous run inside `seq`, or -1."""
    if not sub:
        return -1
    for i in range(len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    return -1


def is_under(path: Ref, folder: Ref) -> bool:
    """Whether `path` is `folder` or inside it.

    Both absolute, or both relative to the same unknown cwd: a plain prefix test. A relative path
    against an absolute folder (cwd unknown) hits when it starts with the folder's last two or more
    segments (`evals/bookshop/x` against `/repo/evals/bookshop`); an absolute path against a
    relative folder hits when it holds the folder's segments in a row. A path under a home folder
    the log does not reveal (`~/repo/x`) is like a relative one: the home may be anywhere.
    """
    path, folder = _unhome(path, folder), _unhome(folder, path)
    if path.absolute == folder.absolute:
        return path.segs[:len(folder.segs)] == folder.segs
    if folder.absolute:  # relative path, cwd unknown
        if path.segs[:1] == ("..",):
            return False
        return any(len(folder.segs) >= k and path.segs[:k] == folder.segs[-k:]
                   for k in range(2, len(folder.segs) + 1))
    return _find(path.segs, _named(folder)) >= 0 and folder.segs[:1] != ("..",)


_UNKNOWN_DEPTH = None


def _unhome(ref: Ref, other: Ref) -> Ref:
    """`~/...` whose home the log did not reveal, compared with a path outside any `~`: the home
    could be any folder, so the part below it is compared as a path relative to an unknown
    folder."""
    if ref.absolute and ref.segs[:1] == ("~",) and other.segs[:1] != ("~",):
        return Ref(False, ref.segs[1:])
    return ref


def below(root: Ref, target: Ref) -> tuple[str, ...] | None | Literal[False]:
    """The target's segments under `root` when `root` is the target or a folder above it.

    False: not above it. None: above it, but how far is unknown (a relative root such as `.`
    when the cwd is unknown and the target absolute: any folder might be the cwd, so a
    recursive read from it is taken to reach the target; likewise `~` when the home is unknown).
    """
    root, target = _unhome(root, target), _unhome(target, root)
    if root.absolute == target.absolute:
        if root.segs[:1] == ("..",) and target.segs[:1] != ("..",):
            return _UNKNOWN_DEPTH  # `..` is above the unknown cwd, hence above the target too
        if target.segs[:len(root.segs)] == root.segs:
            return target.segs[len(root.segs):]
        return False
    if not root.absolute:  # relative root, absolute target, cwd unknown
        named = _named(root)
        if not named:
            return _UNKNOWN_DEPTH
        at = _find(target.segs, named)
        return target.segs[at + len(named):] if at >= 0 else False
    return False  # an absolute root says nothing about a target relative to an unknown cwd


# ---------------------------------------------------------------------------------- needles

@dataclass(frozen=True)
class Needle:
    """A name in the eval area, matched on whole path segments (fnmatch within a segment)."""

    text: str                # as given
    segs: tuple[str, ...]    # lower-cased pattern segments
    kind: Literal["dir", "file", "stem"]

    def hits(self, segs: tuple[str, ...], *, path_like: bool) -> bool:
        """Whether a path's segments contain this needle.

        A folder needle (`evals/`) hits any segment of that name; a file needle (`cases.jsonl`)
        hits a segment of that exact name; a needle without an extension hits a segment of that
        name or that stem (`judge-regressions.jsonl`). A lone word that is not known to be a path
        (`'gold'` in a query) never hits a folder needle: only real path arguments do.
        """
        if self.kind == "dir" and len(segs) == 1 and not path_like:
            return False
        n = len(self.segs)
        for i in range(len(segs) - n + 1):
            if all(fnmatch.fnmatchcase(segs[i + j], self.segs[j]) for j in range(n - 1)):
                last = segs[i + n - 1]
                if fnmatch.fnmatchcase(last, self.segs[-1]):
                    return True
                if self.kind == "stem" and fnmatch.fnmatchcase(last.split(".", 1)[0], self.segs[-1]):
                    return True
        return False


def make_needle(text: str, *, check_length: bool = True) -> Needle:
    """Parse a needle; one shorter than 3 characters without `/` and `.` is a usage error."""
    cleaned = text.strip().replace("\\", "/")
    if check_length and len(cleaned.replace("/", "").replace(".", "")) < MIN_NEEDLE_CHARS:
        raise UsageError(f"needle {text!r} is too short to mean anything (under "
                         f"{MIN_NEEDLE_CHARS} characters without '/' and '.'): it would void "
                         "every attempt")
    is_dir = cleaned.endswith(("/", "/**"))
    segs = [s.lower() for s in cleaned.split("/") if s not in ("", ".")]
    while segs and segs[-1] == "**":
        segs.pop()
        is_dir = True
    while segs and segs[0] == "**":
        segs.pop(0)  # matching is anywhere in the path already
    if not segs:
        raise UsageError(f"needle {text!r} names no path segment")
    if is_dir:
        kind: Literal["dir", "file", "stem"] = "dir"
    elif "." in segs[-1].strip(".*"):
        kind = "file"
    else:
        kind = "stem"
    return Needle(text=text, segs=tuple(segs), kind=kind)


# ------------------------------------------------------------------------- tool kinds

ToolKind = Literal["mcp", "shell", "fetch", "grep", "glob", "list", "file", "other"]

_PUBLISHER_KEYS = frozenset({
    "getcontext", "executequery", "getstatus", "reloadpackage", "listpackages", "listprojects",
    "listmodels", "getmodel", "compilemodel", "searchmalloydocs", "searchdatabaseschema",
})
_SHELL_WORDS = frozenset({"bash", "shell", "sh", "zsh", "terminal", "powershell", "pwsh", "cmd"})
_SHELL_NAMES = frozenset({"runterminalcmd", "executecommand", "runcommand", "localshell",
                          "execcommand", "runshellcommand", "shellcommand", "containerexec"})
_FILE_WORDS = frozenset({"read", "write", "edit", "multiedit", "notebookread", "notebookedit",
                         "view", "file", "files", "cat", "open", "create", "str", "replace",
                         "move", "copy", "delete", "mkdir", "rm", "head", "tail", "stat"})
_FETCH_WORDS = frozenset({"webfetch", "fetch", "http", "curl", "browse", "url", "download"})
_TREE_NAMES = ("directorytree", "tree")
_LIST_NAMES = frozenset({"ls", "listdir", "listdirectory", "listfiles", "directorytree", "tree",
                         "listallowed", "dirlist"})


def _words(name: str) -> set[str]:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return {w for w in re.split(r"[^a-z0-9]+", snake.lower()) if w}


def _split_tool(name: str) -> tuple[str, str]:
    """(server, bare tool name) of `mcp__server__tool`; ("", name) for a host tool."""
    if not name.startswith("mcp__"):
        return "", name
    parts = name.split("__", 2)
    return (parts[1], parts[2]) if len(parts) == 3 else ("", parts[-1])


def is_publisher_tool(name: str) -> bool:
    """Whether a tool is the Publisher's (malloy_*, or any tool of a publisher/malloy server):
    the only MCP tools whose paths the rule-2 exemption covers wholesale."""
    server, bare = _split_tool(name)
    key = re.sub(r"[^a-z0-9]", "", bare.lower())
    return key.startswith("malloy") or key in _PUBLISHER_KEYS or (
        bool(server) and any(w in _words(server) for w in ("publisher", "malloy")))


def tool_kind(name: str) -> ToolKind:
    """What a host tool can do, from its name (Claude Code's names and common others)."""
    prefixed = name.startswith("mcp__")
    _server, bare = _split_tool(name)
    key = re.sub(r"[^a-z0-9]", "", bare.lower())
    words = _words(bare)
    if is_publisher_tool(name):
        return "mcp"
    if words & _SHELL_WORDS or key in _SHELL_NAMES:
        return "shell"
    if "grep" in words or "ripgrep" in words or key in ("searchfiles", "grepsearch", "rg"):
        return "grep"
    if "glob" in words or key in ("filesearch", "findfiles", "globfiles"):
        return "glob"
    if key in _LIST_NAMES:
        return "list"
    if words & _FETCH_WORDS:
        return "fetch"
    if words & _FILE_WORDS:
        return "file"
    return "mcp" if prefixed else "other"


# Input keys, by what their values are.
_PATH_KEYS = frozenset({
    "file_path", "filepath", "path", "paths", "notebook_path", "filename", "file", "files",
    "dir", "directory", "dirname", "folder", "target_file", "target_directory", "target",
    "source", "destination", "dest", "root", "relative_workspace_path", "absolute_path",
    "modelpath", "model_path", "packagename", "package_name", "package", "projectname",
    "project_name", "project", "uri", "repo_path", "repository_path", "repo_root",
    "root_path", "base_path", "workspace_path", "project_path",
})
_MODEL_PATH_KEYS = frozenset({"modelpath", "model_path"})
# Free-text inputs of a reading tool that are the tool's own code or prose, never its target.
_PROSE_KEYS = frozenset({"content", "new_string", "old_string", "file_text", "new_source", "text",
                         "prompt", "description", "new_str", "old_str", "plan"})
_CWD_KEYS = frozenset({"cwd", "workdir", "working_directory", "workingdirectory"})
_URL_KEYS = frozenset({"url", "urls", "uri", "href", "endpoint"})
_COMMAND_KEYS = frozenset({"command", "cmd", "commands", "script"})
_GLOB_KEYS = frozenset({"pattern", "patterns", "glob"})
_GREP_FILTER_KEYS = frozenset({"glob", "include", "includes", "file_pattern"})

# File types a filtered recursive read (grep --include, Grep glob=) might still pull gold from.
_SENSITIVE_SAMPLES = (
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
class _Seen:
    """What one tool use names, gathered before the rules look at it."""

    touches: list[Touch] = field(default_factory=list)
    sweeps: list[Sweep] = field(default_factory=list)
    scripts: list[Script] = field(default_factory=list)


@dataclass
class _State:
    """What carries from one tool use to the next: the shell's cwd and files the answerer wrote."""

    cwd: Ref | None
    written: dict[Ref, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # shell variables set so far
    links: dict[Ref, list[Ref]] = field(default_factory=dict)  # link -> where it may point


_URL_RE = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*)://([^\s'\"<>()\[\]{}\\,;|`]*)")
_QUOTED_RE = re.compile(r"'([^'\s]+)'|\"([^\"\s]+)\"|`([^`\s]+)`")
_RUN_RE = re.compile(r"[A-Za-z0-9_.~\-/*?+@%\[\]]+")
_FILE_LIKE_RE = re.compile(r"^[\w.\-*?]*\w\.[A-Za-z0-9*?]{1,12}$")
_GLOB_CHARS = re.compile(r"[*?\[]")
# What lets code read files (SPEC 5.1 rule 3), plus ways to run a shell that could.
_READ_PRIMITIVES = re.compile(
    r"\bopen\b|\bread\w*|\w+_read\w*|\.read\w*|\bglob\b|\bglob\w*|\brglob\b|\bwalk\b|"
    r"\blistdir\b|\bscandir\b|\biterdir\b|\breaddir\w*|\bfs\.|\bsubprocess\b|\bos\.system\b|"
    r"\bpopen\b|\bspawn\w*|\bexecSync\b|\bchild_process\b|\bDeno\.\w*read|\bfile\(|\bFile\.",
    re.IGNORECASE)


def _url_touch(scheme: str, rest: str, base: Ref | None, exempt: bool) -> Touch:
    if scheme.lower() == "file":
        return Touch(text=f"{scheme}://{rest}", ref=to_ref("/" + rest.lstrip("/"), base), base=base,
                     path_like=True, model_exempt=exempt)
    path = rest.split("/", 1)[1] if "/" in rest else ""
    path = re.split(r"[?#]", path, maxsplit=1)[0]
    return Touch(text=f"{scheme}://{rest}", ref=to_ref("/" + path), path_like=True, url=True,
                 model_exempt=exempt)


def _embedded(text: str, base: Ref | None, *, literals_path_like: bool,
              exempt: bool = False, runs: bool = True) -> list[Touch]:
    """Path-like tokens inside free text (inline code, a JSON body, a query).

    URLs give their path part; quoted literals without spaces are candidates; so is any run of
    path characters holding a `/` or looking like a file name (`cases.jsonl`).
    """
    text = text.replace("\\/", "/")
    out: list[Touch] = []
    for m in _URL_RE.finditer(text):
        out.append(_url_touch(m.group(1), m.group(2), base, exempt))
    text = _URL_RE.sub(" ", text)
    for m in _QUOTED_RE.finditer(text):
        lit = next(g for g in m.groups() if g is not None)
        out.append(Touch(text=lit, ref=to_ref(lit.lstrip("@"), base), base=base,
                         path_like=literals_path_like or "/" in lit, model_exempt=exempt))
    for m in _RUN_RE.finditer(text) if runs else ():
        run = m.group(0).strip(".")
        if run and ("/" in run or _FILE_LIKE_RE.match(run)):
            out.append(Touch(text=run, ref=to_ref(run.lstrip("@"), base), base=base, path_like="/" in run,
                             model_exempt=exempt))
    return out


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def _keyed(value: Any, keys: frozenset[str]) -> Iterator[str]:
    """String values under any of `keys`, at any depth (MultiEdit, nested MCP arguments)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and k.lower() in keys:
                yield from _strings(v)
            elif isinstance(v, (dict, list)):
                yield from _keyed(v, keys)
    elif isinstance(value, list):
        for v in value:
            yield from _keyed(v, keys)


def _path_touch(text: str, base: Ref | None, exempt: bool = False) -> Touch:
    cleaned = text.strip().replace("\\", "/")
    return Touch(text=text, ref=to_ref(cleaned, base), base=base, path_like=True, model_exempt=exempt)


def _glob_split(pattern: str, base: Ref | None) -> tuple[Ref, tuple[str, ...]]:
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


def _see(use: ToolUse, state: _State) -> _Seen:
    """Everything one tool use names, by tool kind."""
    seen = _Seen()
    name = use.name or ""
    kind = tool_kind(name) if name else "other"
    data = use.input
    if not isinstance(data, dict):
        # A malformed entry is still evidence: read every string in it as free text.
        for text in _strings(data):
            seen.touches.extend(_embedded(text, state.cwd, literals_path_like=True))
        return seen
    cwd = state.cwd
    for value in _keyed(data, _CWD_KEYS):
        seen.touches.append(_path_touch(value, cwd))
        cwd = to_ref(value, cwd)
    words = _words(_split_tool(name)[1])
    if "git" in words and words & {"show", "diff", "log"} and not is_publisher_tool(name):
        # A git tool (mcp__git__git_show) prints contents from the whole repository it names.
        for value in list(_keyed(data, _PATH_KEYS)) or ["."]:
            seen.sweeps.append(Sweep(root=to_ref(value.replace("\\", "/"), cwd), pattern=None))
    if kind == "mcp":
        _see_mcp(data, cwd, seen, publisher=is_publisher_tool(name))
        return seen
    for value in _keyed(data, _URL_KEYS):
        seen.touches.extend(_embedded(value, cwd, literals_path_like=True)
                            or [Touch(text=value, ref=to_ref(value), path_like=True, url=True)])
    path_values = list(_keyed(data, _PATH_KEYS - {"uri"}))
    for value in path_values:
        seen.touches.append(_path_touch(value, cwd))
    if kind == "shell":
        for command in _command_texts(data):
            cwd = _see_shell(command, cwd, state, seen)
        state.cwd = cwd
    elif kind == "grep":
        roots = path_values or ["."]
        filters = tuple(_keyed(data, _GREP_FILTER_KEYS))
        if isinstance(data.get("type"), str) and data["type"].strip():
            filters += (f"*.{data['type'].strip()}",)
        for root in roots:
            seen.sweeps.append(Sweep(root=to_ref(root.replace("\\", "/"), cwd), pattern=None,
                                     filters=filters))
        for value in filters:
            seen.touches.append(Touch(text=value, ref=to_ref(value), path_like=False))
    elif kind == "glob":
        root = to_ref(path_values[0].replace("\\", "/"), cwd) if path_values else cwd or Ref(False, ())
        for given in _keyed(data, _GLOB_KEYS):
            for pattern in _brace_expand(given):  # the Glob tool expands `{a,b}`
                fixed, rest = _glob_split(pattern, root)
                seen.touches.append(Touch(text=given, ref=to_ref(pattern.replace("\\", "/"), root),
                                          base=root, path_like=True))
                seen.sweeps.append(Sweep(root=fixed, pattern=rest, kind="glob"))
    elif kind == "list" and re.sub(r"[^a-z]", "", name.lower()).endswith(_TREE_NAMES):
        # A tree tool lists everything below its root (MCP filesystem's directory_tree).
        for value in path_values or ["."]:
            seen.sweeps.append(Sweep(root=to_ref(value.replace("\\", "/"), cwd), pattern=None))
    elif kind == "file":
        _remember_written(data, path_values, cwd, state)
    if kind in ("file", "fetch") and not words & {"write", "edit", "create", "todo",
                                                 "multiedit", "replace", "web"}:
        # A reading tool's other inputs (a SQL query: read_csv('/repo/sets/x.csv')) name paths
        # in string literals; its prose fields do not.
        for key, value in data.items():
            lowered = key.lower() if isinstance(key, str) else ""
            if lowered in _PATH_KEYS | _URL_KEYS | _CWD_KEYS | _PROSE_KEYS:
                continue
            for text in _strings(value):
                seen.touches.extend(_embedded(text, cwd, literals_path_like=False, runs=False))
    return seen


def _see_mcp(data: dict[str, Any], cwd: Ref | None, seen: _Seen, *, publisher: bool = True) -> None:
    """An MCP call: its path-ish arguments, URLs, and quoted literals in its other text.

    Package-relative paths (`modelPath: bookshop.malloy`) are not resolved against the host's cwd:
    the server resolves them. A `modelPath`, and everything a Publisher tool names, is exempt from
    rule 2 (SPEC 5.1); another server's tool (a filesystem or database server) reading the model
    file through a `path` or a query literal is a file tool reading it.
    """
    path_keys = _PATH_KEYS | _URL_KEYS
    for key_set, exempt in ((_MODEL_PATH_KEYS, True), (path_keys - _MODEL_PATH_KEYS, publisher)):
        for value in _keyed(data, key_set):
            if _URL_RE.search(value):
                seen.touches.extend(_embedded(value, None, literals_path_like=True, exempt=exempt))
            else:
                seen.touches.append(_path_touch(value, None, exempt=exempt))
    for key, value in data.items():
        if isinstance(key, str) and key.lower() in path_keys:
            continue
        for text in _strings(value):
            # A query's words are not paths (`gold/total` divides two fields): only URLs and
            # string literals count.
            seen.touches.extend(_embedded(text, None, literals_path_like=False, exempt=publisher,
                                          runs=False))


def _command_texts(data: dict[str, Any]) -> Iterator[str]:
    for key, value in data.items():
        if not (isinstance(key, str) and key.lower() in _COMMAND_KEYS):
            continue
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            yield shlex.join(value)  # argv form (["bash", "-lc", "..."])
        else:
            yield from _strings(value)


def _remember_written(data: dict[str, Any], paths: list[str], cwd: Ref | None,
                      state: _State) -> None:
    """Keep what the answerer wrote, so a script it runs later can be read for file access."""
    body = [v for k in ("content", "file_text", "new_string", "new_str", "new_source", "text")
            for v in ([data[k]] if isinstance(data.get(k), str) else [])]
    for edit in data.get("edits") or []:
        if isinstance(edit, dict) and isinstance(edit.get("new_string"), str):
            body.append(edit["new_string"])
    if not body:
        return
    for value in paths:
        ref = to_ref(value.replace("\\", "/"), cwd)
        state.written[ref] = state.written.get(ref, "") + "\n" + "\n".join(body)


# ------------------------------------------------------------------------------------ shell

@dataclass
class _Word:
    value: str = ""
    quoted: bool = False   # any part quoted: the shell does not glob-expand it
    glob: bool = False     # an unquoted *, ? or [
    started: bool = False


@dataclass
class _Simple:
    """One simple command: its words, redirections and here-document bodies."""

    words: list[_Word] = field(default_factory=list)
    redirects: list[tuple[str, _Word]] = field(default_factory=list)
    stdin_text: list[str] = field(default_factory=list)


_OPS = ";&|()`\n"


def split_shell(command: str) -> list[_Simple]:
    """A lenient shell lexer: simple commands with quote-aware words, redirections, heredocs.

    Pipelines, lists, subshells and command substitutions are flattened into a sequence of simple
    commands; that is all the rules need (which programs run, on which paths, from where).
    """
    out: list[_Simple] = []
    cur = _Simple()
    word = _Word()
    pending_redirect: list[str] = []
    heredocs: list[tuple[str, bool, _Simple]] = []
    i, n = 0, len(command)

    def end_word() -> None:
        nonlocal word
        if word.started:
            if pending_redirect:
                op = pending_redirect.pop()
                if op in ("<<", "<<-"):
                    heredocs.append((word.value, op == "<<-", cur))
                elif op == "<<<":
                    cur.stdin_text.append(word.value)
                else:
                    cur.redirects.append((op, word))
            else:
                cur.words.append(word)
        word = _Word()

    def end_command() -> None:
        nonlocal cur
        end_word()
        if cur.words or cur.redirects or cur.stdin_text:
            out.append(cur)
        cur = _Simple()

    while i < n:
        c = command[i]
        if c == "\n":
            end_command()
            i += 1
            while heredocs:
                delim, strip_tabs, owner = heredocs.pop(0)
                body: list[str] = []
                while i < n:
                    j = command.find("\n", i)
                    line = command[i:] if j < 0 else command[i:j]
                    i = n if j < 0 else j + 1
                    if (line.lstrip("\t") if strip_tabs else line).strip() == delim:
                        break
                    body.append(line)
                owner.stdin_text.append("\n".join(body))
            continue
        if c in " \t\r":
            end_word()
        elif c == "#" and not word.started:
            j = command.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c == "'":
            j = command.find("'", i + 1)
            j = n if j < 0 else j
            word.value += command[i + 1:j]
            word.quoted = word.started = True
            i = j + 1
            continue
        elif c == '"':
            j = i + 1
            buf = []
            while j < n and command[j] != '"':
                if command[j] == "\\" and j + 1 < n and command[j + 1] in '"\\$`':
                    j += 1
                buf.append(command[j])
                j += 1
            word.value += "".join(buf)
            word.quoted = word.started = True
            i = j + 1
            continue
        elif c == "\\":
            if i + 1 < n and command[i + 1] != "\n":
                word.value += command[i + 1]
                word.quoted = word.started = True
            i += 2
            continue
        elif c == "$" and i + 1 < n and command[i + 1] == "(":
            end_command()
            i += 2
            continue
        elif c in "<>":
            if word.started and word.value.isdigit() and not word.quoted:
                word = _Word()  # a file descriptor number (2>)
            else:
                end_word()
            j = i
            while j < n and command[j] in "<>&|-":
                j += 1
            op = command[i:j]
            i = j
            if op.startswith(("<(", ">(")) or i < n and command[i] == "(":
                end_command()
                i += 1 if i < n and command[i] == "(" else 0
                continue
            if op.endswith("&") or op.startswith("&"):
                continue  # >&2, <&0: a descriptor, not a file
            base_op = op.rstrip("-") if op.startswith("<<") else op
            pending_redirect.append("<<-" if op == "<<-" else base_op)
            continue
        elif c in _OPS:
            end_command()
        else:
            word.value += c
            word.started = True
            if c in "*?[":
                word.glob = True
        i += 1
    end_command()
    return out


_WRAPPERS = frozenset({"sudo", "env", "time", "nohup", "nice", "command", "exec", "builtin",
                       "stdbuf", "ionice", "timeout", "xargs", "then", "do", "else", "if",
                       "while", "until", "!", "{", "}"})
_NO_PATH_ARGS = frozenset({"echo", "printf", "true", "false", ":", "export", "set", "unset",
                           "sleep", "exit", "return"})
_GREP_LIKE = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "ack-grep"})
_INTERPRETERS = frozenset({"python", "python3", "python2", "pypy", "pypy3", "node", "nodejs",
                           "deno", "bun", "ruby", "perl", "php", "rscript", "r", "julia",
                           "duckdb", "sqlite3", "psql", "lua", "tsx", "ts-node", "osascript",
                           "ipython", "uv", "pwsh", "powershell"})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "fish"})
_INLINE_FLAGS = frozenset({"-c", "-e", "--eval", "-p", "--print", "-E", "--command",
                           "-command", "--execute", "-cmd"})
# `python -m X` for these runs a packaging or stdin tool, not code that walks the cwd.
_TOOL_MODULES = frozenset({"pip", "venv", "ensurepip", "virtualenv", "json.tool"})
_ARCHIVE_EXT = (".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tar.xz", ".zip", ".7z", ".tbz2")
# Commands whose first operand is a pattern or a script, not a path, unless an option gave it.
_PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "ack-grep",
                            "git-grep", "sed", "gsed", "awk", "gawk", "mawk", "nawk", "jq", "yq"})
_SUPPLIES_PATTERN = ("-e", "-f", "--regexp", "--file", "--expression", "--from-file")
_FILE_OPTS = frozenset({"-f", "--file", "--from-file"})  # their value is a file: still a path
_GREP_VALUE_OPTS = frozenset({"-e", "-m", "-A", "-B", "-C", "-d", "-D", "--regexp", "--max-count",
                              "--context", "--include", "--exclude", "--exclude-dir", "-g",
                              "--glob", "-t", "--type", "-T", "--type-not", "-M", "-j",
                              "--max-columns", "--threads", "--iglob", "-E", "--encoding"})
# Options whose next word is their value (a pattern, a number, a separator): not a path.
_VALUE_OPTS: dict[str, frozenset[str]] = {
    **{g: _GREP_VALUE_OPTS for g in ("grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack",
                                     "ack-grep", "git-grep")},
    **{a: frozenset({"-F", "-v", "--field-separator", "--assign"})
       for a in ("awk", "gawk", "mawk", "nawk")},
    **{d: frozenset({"-e", "--expression", "-l", "--line-length"}) for d in ("sed", "gsed")},
    "jq": frozenset({"--arg", "--argjson", "--indent"}),
}


def _program(words: list[_Word]) -> tuple[str, list[_Word]]:
    """The program a simple command runs (after wrappers and VAR=value), and its arguments."""
    i = 0
    while i < len(words):
        w = words[i]
        if not w.quoted and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w.value):
            i += 1
            continue
        base = w.value.rsplit("/", 1)[-1].lower()
        if base in _WRAPPERS:
            i += 1
            while i < len(words) and words[i].value.startswith("-"):
                i += 1
            if base == "timeout" and i < len(words):
                i += 1  # the duration
            continue
        return base, words[i + 1:]
    return "", []


def _see_shell(command: str, cwd: Ref | None, state: _State, seen: _Seen,
               depth: int = 0) -> Ref | None:
    """Analyse one shell command string; returns the cwd it leaves behind (`cd`)."""
    if cwd is not None and cwd.absolute:
        # `$(pwd)/sets/x` and "$PWD/sets/x" name the cwd: the lexer would otherwise split them.
        command = _PWD_SUBST_RE.sub(lambda _m: cwd.text(), command)
        state.env["PWD"] = cwd.text()
    simples = split_shell(command)
    # `echo sets/shop/a.csv | xargs cat`: what echo prints becomes the paths xargs reads.
    feeds_xargs = any(w.value.rsplit("/", 1)[-1] == "xargs" for s in simples for w in s.words)
    for simple in simples:
        _expand_variables(simple, state.env)
        cwd = _see_simple(simple, cwd, state, seen, depth, feeds_xargs)
        if cwd is not None and cwd.absolute:
            state.env["PWD"] = cwd.text()
    return cwd


# $VAR, ${VAR}, and ${VAR:-default} / ${VAR-default} / ${VAR:=default} (the default is used when
# the session never set VAR).
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-=]([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_PWD_SUBST_RE = re.compile(r"\$\(\s*pwd\s*\)|`\s*pwd\s*`")


def _var_value(m: re.Match[str], env: dict[str, str]) -> str:
    name = m.group(1) or m.group(3)
    if name in env:
        return env[name]
    return m.group(2) if m.group(2) is not None else m.group(0)


def _expand_variables(simple: _Simple, env: dict[str, str]) -> None:
    """Substitute variables the session set earlier (`D=/repo/evals; cat $D/x`), then record
    this command's own assignments."""
    def sub(text: str) -> str:
        return _VAR_RE.sub(lambda m: _var_value(m, env), text)

    for w in simple.words:
        w.value = sub(w.value)
    for _op, w in simple.redirects:
        w.value = sub(w.value)
    words = simple.words[1:] if simple.words and simple.words[0].value == "export" else simple.words
    for w in words:
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", w.value)
        if not m:
            break
        env[m.group(1)] = m.group(2)


def _carries_mcp(simple: _Simple) -> bool:
    """A JSON-RPC `tools/call` posted to an `/mcp` URL: an MCP call riding on the shell."""
    text = " ".join([w.value for w in simple.words] + simple.stdin_text)
    if "tools/call" not in text:
        return False
    return any(re.search(r"/mcp(?:[/?#]|$)", m.group(2)) for m in _URL_RE.finditer(text))


def _see_simple(simple: _Simple, cwd: Ref | None, state: _State, seen: _Seen,
                depth: int, feeds_xargs: bool = False) -> Ref | None:
    exempt = _carries_mcp(simple)
    for op, target in simple.redirects:
        seen.touches.append(Touch(text=target.value, ref=to_ref(target.value, cwd), base=cwd,
                                  path_like=True, model_exempt=exempt))
        if op.startswith(">") and simple.stdin_text:
            # `cat > a.py <<EOF ... EOF`: the script's text is in the log after all
            state.written[to_ref(target.value, cwd)] = "\n".join(simple.stdin_text)
        if target.glob:
            fixed, rest = _glob_split(target.value, cwd)
            seen.sweeps.append(Sweep(root=fixed, pattern=rest, kind="glob"))
    for body in simple.stdin_text:
        seen.touches.extend(_embedded(body, cwd, literals_path_like=True, exempt=exempt))
    for w in simple.words:
        m = re.match(r"^[A-Za-z_][A-Za-z0-9_]*=(.+)$", w.value)
        if m and not w.quoted:
            seen.touches.extend(_word_touches(m.group(1), cwd, exempt))
    prog, args = _program(simple.words)
    if not prog:
        return cwd
    head = next((w for w in simple.words if w.value.rsplit("/", 1)[-1].lower() == prog), None)
    if head is not None and "/" in head.value:
        seen.touches.append(Touch(text=head.value, ref=to_ref(head.value, cwd), base=cwd, path_like=True,
                                  model_exempt=exempt))
    if prog in ("cd", "pushd"):
        target = next((a.value for a in args if not a.value.startswith("-")), "~")
        if target == "-" or (target.startswith("~") and cwd is not None and _home(cwd) is None):
            return cwd  # back to a folder (or a home) the log does not show: keep what we know
        seen.touches.append(Touch(text=target, ref=to_ref(target, cwd), base=cwd, path_like=True))
        return to_ref(target, cwd)
    if prog in _NO_PATH_ARGS and not (feeds_xargs and prog in ("echo", "printf")):
        return cwd
    if prog in ("ln", "link"):
        _remember_link(args, cwd, state)
    if prog == "tee" and simple.stdin_text:
        # `tee /tmp/r.py <<EOF ... EOF` writes a script as surely as `cat > /tmp/r.py` does.
        for w in args:
            if not w.value.startswith("-"):
                state.written[to_ref(w.value, cwd)] = "\n".join(simple.stdin_text)
    if prog == "git" and args:
        sub = next((a.value for a in args if not a.value.startswith("-")), "")
        if sub == "grep" and args[0].value == "grep":
            prog, args = "git-grep", args[1:]
        else:
            _see_git(args, cwd, seen, exempt)
    if prog in _SHELLS:
        inline = _inline_code(prog, args)
        if inline is not None and depth < 4:
            _see_shell(inline, cwd, state, seen, depth + 1)  # a `cd` inside does not persist
            return cwd
    # Which words are paths: all but options, a grep's pattern and option values.
    pattern_index = _pattern_index(prog, args)
    value_opts = _VALUE_OPTS.get(prog, frozenset())
    path_args: list[_Word] = []
    skip_next = False
    for k, w in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        v = w.value
        if v.startswith("-") and len(v) > 1:
            if "=" in v:
                opt, value = v.split("=", 1)
                # --regexp=PAT is a pattern; --exclude-dir=evals names what is NOT read.
                names_a_read = opt not in value_opts or opt in ("--include", "--glob", "--iglob")
                if names_a_read and not opt.startswith(("--exclude", "--ignore")):
                    seen.touches.extend(_word_touches(value, cwd, exempt))
            elif v in value_opts:
                skip_next = True  # the option's value is a pattern or a number, not a path
            continue
        if k == pattern_index:
            _see_program_text(prog, v, cwd, seen, exempt)
            continue
        path_args.append(w)
        for expanded in _brace_expand(v) if not w.quoted and "{" in v else [v]:
            seen.touches.extend(_word_touches(expanded, cwd, exempt))
    _sweeps_for(prog, args, path_args, cwd, seen)
    for w in path_args:
        if w.glob and not w.quoted:
            for expanded in _brace_expand(w.value):
                fixed, rest = _glob_split(expanded, cwd)
                seen.sweeps.append(Sweep(root=fixed, pattern=rest,
                                         kind="ls-glob" if prog in ("ls", "du", "tree") else "glob"))
    if prog in _INTERPRETERS or prog in _SHELLS or prog.startswith("python"):
        _see_interpreter(prog, args, simple, cwd, state, seen)
    elif head is not None and ("/" in head.value or head.value.endswith((".sh", ".py"))):
        _see_script_file(head.value, cwd, state, seen)
    return cwd


_GIT_VALUE_OPTS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
# git subcommands that print file contents (diffs, blobs) from the whole tree unless narrowed.
_GIT_CONTENT = frozenset({"show", "diff", "diff-tree", "diff-index", "diff-files", "format-patch",
                          "whatchanged", "range-diff"})
_GIT_LOG_CONTENT = ("-p", "-u", "--patch", "--stat", "--name-only", "--name-status", "--numstat",
                    "--raw", "--full-diff", "-S", "-G", "--follow")
_REV_PATH_RE = re.compile(r"^[^\s:/]*:(?!/)(.+)$")


def _see_git(args: list[_Word], cwd: Ref | None, seen: _Seen, exempt: bool) -> str:
    """A git command: paths in `REV:PATH` objects, and what prints contents from the whole tree
    (`git log -p`, `git show`, `git diff`, `git ls-files`, `git archive`). Returns the subcommand.

    `REV:PATH` names a path from the repository's top, which may be the cwd or any folder above
    it, so the path is tried under each (`REV:./PATH` is relative to the cwd)."""
    root = cwd
    sub_at = None
    k = 0
    while k < len(args):
        v = args[k].value
        if v in _GIT_VALUE_OPTS:
            if v == "-C" and k + 1 < len(args):
                root = to_ref(args[k + 1].value, root)
            k += 2
            continue
        if not v.startswith("-"):
            sub_at = k
            break
        k += 1
    if sub_at is None:
        return ""
    sub, rest = args[sub_at].value, args[sub_at + 1:]
    values = [a.value for a in rest]
    has_object_path = False
    for v in values:
        m = _REV_PATH_RE.match(v)
        if m and not v.startswith("-"):
            has_object_path = True
            path = m.group(1)
            bases: list[Ref | None] = [root]
            if root is not None and not path.startswith(("./", "../")):
                bases += [Ref(root.absolute, root.segs[:i]) for i in range(len(root.segs))]
            for base in bases:
                seen.touches.append(Touch(text=v, ref=to_ref(path, base), base=root,
                                          path_like=True, model_exempt=exempt))
    here = root or Ref(False, ())
    narrowed = [to_ref(v, root) for v in values[values.index("--") + 1:]] if "--" in values else []
    reads_tree = (sub in ("ls-files", "archive", "ls-tree")
                  or (sub in _GIT_CONTENT and not has_object_path)
                  or (sub == "log" and any(v.startswith(_GIT_LOG_CONTENT) for v in values))
                  or (sub == "stash" and values[:1] == ["show"]))
    if reads_tree:
        for ref in narrowed or [here]:
            seen.sweeps.append(Sweep(root=ref, pattern=None))
    return sub


_SED_READ_RE = re.compile(r"(?:^|[;{}\n])\s*(?:[0-9$]+|/[^/\n]*/)?(?:,\s*(?:[0-9$]+|/[^/\n]*/))?"
                          r"\s*[rR]\s+([^;}\n]+)")


def _see_program_text(prog: str, text: str, cwd: Ref | None, seen: _Seen, exempt: bool) -> None:
    """The script operand of awk or sed, which can read files itself: awk's `getline < "f"` and
    `system()`, sed's `r FILE` / `R FILE` and `e`. Its regexes are not paths (`/evals/`); only
    quoted literals (awk) and `r` operands (sed) are."""
    if prog in ("awk", "gawk", "mawk", "nawk"):
        seen.touches.extend(_embedded(text, cwd, literals_path_like=False, exempt=exempt,
                                      runs=False))
        m = re.search(r"\bgetline\b|\bsystem\s*\(|\|\s*getline|\bclose\s*\(", text)
        if m:
            roots = tuple(t.ref for t in _embedded(text, cwd, literals_path_like=True, runs=False)
                          if not t.url)
            seen.scripts.append(Script(cwd=cwd, primitive=m.group(0).strip(), roots=roots))
    elif prog in ("sed", "gsed"):
        for m in _SED_READ_RE.finditer(text):
            seen.touches.append(Touch(text=m.group(1).strip(), ref=to_ref(m.group(1).strip(), cwd),
                                      base=cwd, path_like=True, model_exempt=exempt))
        if re.search(r"(?:^|[;{}\n])\s*(?:[0-9$]+|/[^/\n]*/)?\s*e(?:\s|$|;)", text) or re.search(
                r"s(.).*?\1.*?\1[gpIi0-9]*e", text):
            seen.scripts.append(Script(cwd=cwd, primitive="sed e"))


def _word_touches(value: str, cwd: Ref | None, exempt: bool) -> list[Touch]:
    out = []
    if value and not any(ch.isspace() for ch in value):
        if _URL_RE.match(value):
            return _embedded(value, cwd, literals_path_like=True, exempt=exempt)
        out.append(Touch(text=value, ref=to_ref(value.lstrip("@"), cwd), base=cwd, path_like=True,
                         model_exempt=exempt))
    # Code and JSON bodies carry paths inside them (python -c "open('evals/x')").
    out.extend(_embedded(value, cwd, literals_path_like=True, exempt=exempt))
    return out


def _pattern_index(prog: str, args: list[_Word]) -> int | None:
    """Where a command's pattern or script operand is (grep's pattern, sed's and awk's script,
    jq's filter): its first operand, unless an option (-e, -f) supplied it."""
    if prog not in _PATTERN_FIRST:
        return None
    if any(w.value in ("--files", "--type-list") for w in args):
        return None  # `rg --files DIR` lists files and takes no pattern
    value_opts = _VALUE_OPTS.get(prog, frozenset())
    skip = False
    for k, w in enumerate(args):
        if skip:
            skip = False
            continue
        v = w.value
        if v in _SUPPLIES_PATTERN or v.startswith(tuple(o + "=" for o in _SUPPLIES_PATTERN)):
            return None
        if v.startswith("-") and len(v) > 1:
            skip = v in value_opts or v in _FILE_OPTS
            continue
        return k
    return None


def _opt_values(args: list[_Word], names: tuple[str, ...]) -> list[str]:
    """Values of options such as `--include=*.py`, `--include '*.py'`, `-g '*.py'`."""
    out: list[str] = []
    for k, w in enumerate(args):
        for name in names:
            if w.value == name and k + 1 < len(args):
                out.append(args[k + 1].value)
            elif w.value.startswith(name + "="):
                out.append(w.value.split("=", 1)[1])
    return out


def _sweeps_for(prog: str, args: list[_Word], path_args: list[_Word], cwd: Ref | None,
                seen: _Seen) -> None:
    """Recursive reads and listings a program makes over its operands (rule 3)."""
    here = cwd or Ref(False, ())
    values = [a.value for a in args]
    short = "".join(v[1:] for v in values if v.startswith("-") and not v.startswith("--"))

    def roots(operands: list[_Word]) -> list[Ref]:
        return [to_ref(w.value, cwd) for w in operands if not (w.glob and not w.quoted)] \
            or ([here] if not operands else [])

    if prog in ("grep", "egrep", "fgrep", "zgrep"):
        recursive = ("r" in short or "R" in short or "--recursive" in values
                     or "--dereference-recursive" in values
                     or any(v in ("-d", "--directories") for v in values) and "recurse" in values
                     or "--directories=recurse" in values)
        if not recursive:
            return
        includes = tuple(_opt_values(args, ("--include",)))
        excludes = tuple(_opt_values(args, ("--exclude-dir",)))
        for root in roots(path_args):
            seen.sweeps.append(Sweep(root=root, pattern=None, filters=includes, excludes=excludes))
    elif prog in ("rg", "ag", "ack", "ack-grep", "git-grep"):
        globs = _opt_values(args, ("-g", "--glob", "--iglob", "-G"))
        includes = tuple(g for g in globs if not g.startswith("!"))
        excludes = tuple(g.lstrip("!").strip("/").rstrip("*").rstrip("/") for g in globs
                         if g.startswith("!"))
        types = _opt_values(args, ("-t", "--type"))
        includes += tuple(f"*.{t}" for t in types)
        for root in roots(path_args):
            seen.sweeps.append(Sweep(root=root, pattern=None, filters=includes, excludes=excludes))
    elif prog == "find":
        operands: list[_Word] = []
        for w in args:
            if w.value.startswith("-") or w.value in ("(", "!", ")"):
                break
            operands.append(w)
        filters = tuple(_opt_values(args, ("-name", "-iname", "-path", "-ipath", "-wholename",
                                           "-regex", "-iregex")))
        depth = _opt_values(args, ("-maxdepth",))
        max_depth = int(depth[0]) if depth and depth[0].isdigit() else None
        for root in roots(operands) or [here]:
            seen.sweeps.append(Sweep(root=root, pattern=None, filters=filters,
                                     max_depth=max_depth))
    elif prog in ("fd", "fdfind"):
        # `fd PATTERN [ROOT...]` lists every name below its roots (the cwd by default).
        operands = [w for w in path_args if not w.value.startswith("-")]
        for root in roots(operands[1:]):
            seen.sweeps.append(Sweep(root=root, pattern=None))
    elif prog in ("locate", "plocate", "mlocate", "slocate"):
        seen.sweeps.append(Sweep(root=Ref(True, ()), pattern=None))  # the whole file system
    elif prog in ("ls", "dir", "exa", "eza", "lsd"):
        if "R" in short or "--recursive" in values or "--tree" in values:
            for root in roots(path_args):
                seen.sweeps.append(Sweep(root=root, pattern=None))
    elif prog in ("tree", "du") and (prog == "tree" or "a" in short or "--all" in values):
        for root in roots(path_args):
            seen.sweeps.append(Sweep(root=root, pattern=None))
    elif prog in ("tar", "bsdtar", "gtar"):
        first = values[0] if values else ""
        if re.match(r"^-?[A-Za-z]*[cru]", first) or any(v in ("--create", "--append", "--update")
                                                        for v in values):
            sources = [w for w in path_args if not w.value.lower().endswith(_ARCHIVE_EXT)
                       and w.value != first.lstrip("-")]
            for root in roots(sources):
                seen.sweeps.append(Sweep(root=root, pattern=None))
    elif prog in ("zip", "7z", "7za"):
        if prog == "zip" and not ("r" in short or "--recurse-paths" in values):
            return
        sources = path_args[1:] if prog == "zip" else path_args[2:]
        for root in roots(sources):
            seen.sweeps.append(Sweep(root=root, pattern=None))
    elif prog in ("cp", "rsync", "scp", "rclone"):
        recursive = ("r" in short or "R" in short or "a" in short or "--recursive" in values
                     or "--archive" in values or prog == "rclone")
        if recursive and len(path_args) >= 2:
            for root in roots(path_args[:-1]):
                seen.sweeps.append(Sweep(root=root, pattern=None))


def _inline_code(prog: str, args: list[_Word]) -> str | None:
    """The code given on the command line (`python -c CODE`, `node -e CODE`, `bash -lc CMD`)."""
    flags = _INLINE_FLAGS | ({"-r"} if prog == "php" else set())
    for k, w in enumerate(args):
        v = w.value
        if v in flags or re.match(r"^-[A-Za-z]*c$", v):
            return args[k + 1].value if k + 1 < len(args) else None
    return None


def _see_interpreter(prog: str, args: list[_Word], simple: _Simple, cwd: Ref | None,
                     state: _State, seen: _Seen) -> None:
    """Inline code (-c, -e, a here-document) or a script file run by an interpreter."""
    if prog in _SHELLS:
        # A shell's program is shell: read it as one, from a here-document or a known script.
        script = next((a.value for a in args if not a.value.startswith("-")), None)
        bodies = list(simple.stdin_text)
        if script is not None:
            known = state.written.get(to_ref(script, cwd))
            if known is None:
                seen.scripts.append(Script(cwd=cwd, primitive=None))
            else:
                bodies.append(known)
        for body in bodies:
            _see_shell(body, cwd, state, seen, depth=1)
        return
    code_parts: list[str] = []
    inline = _inline_code(prog, args)
    if inline is not None:
        code_parts.append(inline)
    if prog in ("duckdb", "sqlite3", "psql"):
        code_parts.extend(a.value for a in args if not a.value.startswith("-")
                          and any(ch.isspace() for ch in a.value))
    code_parts.extend(simple.stdin_text)
    redirected = any(op.startswith("<") for op, _ in simple.redirects)
    if code_parts or redirected:
        code = "\n".join(code_parts)
        m = _READ_PRIMITIVES.search(code)
        if m or redirected:
            primitive = m.group(0).lstrip(".") if m else "<"
            roots = tuple(t.ref for t in _embedded(code, cwd, literals_path_like=True)
                          if not t.url)
            seen.scripts.append(Script(cwd=cwd, primitive=primitive.strip(), roots=roots))
        return
    values = [a.value for a in args]
    if "-m" in values:
        module = values[values.index("-m") + 1] if values.index("-m") + 1 < len(values) else ""
        if module not in _TOOL_MODULES:
            seen.scripts.append(Script(cwd=cwd, primitive=None))  # a module: its code is not here
        return
    if prog == "uv" and values and values[0] != "run":
        return  # `uv pip install x`, `uv venv`: package management, not the answerer's code
    script = next((a.value for a in args if not a.value.startswith("-")), None)
    if script is None:
        if not args:
            seen.scripts.append(Script(cwd=cwd, primitive=None))  # a program piped in
        return  # `python3 --version`
    _see_script_file(script, cwd, state, seen)


def _see_script_file(script: str, cwd: Ref | None, state: _State, seen: _Seen) -> None:
    """A script file: read what the answerer wrote into it when the log shows it, else unseen."""
    body = state.written.get(to_ref(script, cwd))
    if body is None:
        seen.scripts.append(Script(cwd=cwd, primitive=None))
        return
    first = body.lstrip().split("\n", 1)[0]
    if script.endswith((".sh", ".bash")) or (first.startswith("#!") and first.rstrip().endswith("sh")):
        _see_shell(body, cwd, state, seen, depth=1)
        return
    m = _READ_PRIMITIVES.search(body)
    if m:
        roots = tuple(t.ref for t in _embedded(body, cwd, literals_path_like=True) if not t.url)
        seen.scripts.append(Script(cwd=cwd, primitive=m.group(0).lstrip("."), roots=roots))


# ------------------------------------------------------------------------------------ links

def _through_link(ref: Ref, links: dict[Ref, list[Ref]]) -> list[Ref]:
    """Where a path may really be when it runs through a link the answerer made earlier."""
    out: list[Ref] = []
    for link, targets in links.items():
        n = len(link.segs)
        if link.segs and ref.absolute == link.absolute and ref.segs[:n] == link.segs:
            out.extend(Ref(t.absolute, t.segs + ref.segs[n:]) for t in targets)
    return out


def _follow_links(seen: _Seen, links: dict[Ref, list[Ref]]) -> None:
    """Add, for every path a use names through a link it made (`ln -s /repo/sets /tmp/x`, then
    `cat /tmp/x/shop/a.csv`), the path the link leads to: a read through a link is a read of
    its target."""
    if not links:
        return
    for touch in list(seen.touches):
        for ref in _through_link(touch.ref, links):
            seen.touches.append(Touch(text=touch.text, ref=ref, path_like=touch.path_like,
                                      url=touch.url, model_exempt=touch.model_exempt,
                                      base=touch.base))
    for sweep in list(seen.sweeps):
        for ref in _through_link(sweep.root, links):
            seen.sweeps.append(Sweep(root=ref, pattern=sweep.pattern, filters=sweep.filters,
                                     excludes=sweep.excludes, max_depth=sweep.max_depth,
                                     kind=sweep.kind))
    for script in list(seen.scripts):
        if script.cwd is not None:
            for ref in _through_link(script.cwd, links):
                seen.scripts.append(Script(cwd=ref, primitive=script.primitive,
                                           roots=script.roots))


def _remember_link(args: list[_Word], cwd: Ref | None, state: _State) -> None:
    """`ln [-s] TARGET LINK` (or `ln -s TARGET DIR/`): remember where the link leads. A relative
    target is taken both against the cwd and against the link's folder (where ln resolves it)."""
    operands = [a.value for a in args if not a.value.startswith("-")]
    if len(operands) < 2:
        return
    target, link = operands[0], operands[-1]
    link_ref = to_ref(link, cwd)
    targets = [to_ref(target, cwd)]
    if not target.startswith(("/", "~")) and link_ref.segs:
        targets.append(to_ref(target, Ref(link_ref.absolute, link_ref.segs[:-1])))
    name = target.rstrip("/").rsplit("/", 1)[-1]
    for ref in (link_ref, to_ref(f"{link.rstrip('/')}/{name}", cwd) if name else None):
        if ref is not None and ref.segs:
            state.links.setdefault(ref, []).extend(t for t in targets if t not in
                                                   state.links.get(ref, []))


# ------------------------------------------------------------------------------------ rules

@dataclass(frozen=True)
class _Target:
    """Something a read must not reach: a protected folder or the model file."""

    label: str
    ref: Ref
    is_file: bool


def _reaches(sweep: Sweep, target: _Target, model_names: Sequence[str]) -> bool:
    """Whether a recursive read or glob from `sweep.root` can reach the target."""
    rel = below(sweep.root, target.ref)
    if rel is False:
        return False
    if rel is not None and sweep.excludes and any(
            fnmatch.fnmatchcase(seg, ex.lower()) for seg in rel for ex in sweep.excludes if ex):
        return False
    if sweep.pattern is not None and sweep.kind in ("glob", "ls-glob"):
        if not _glob_reaches(sweep.pattern, rel, ls=sweep.kind == "ls-glob", target=target,
                             model_names=model_names):
            return False
    elif rel is not None and sweep.max_depth is not None and len(rel) > sweep.max_depth:
        return False  # find -maxdepth 1 from the repo root lists evals/, never what is inside
    if sweep.filters:
        return any(_filter_admits(f, target, model_names) for f in sweep.filters)
    return True


def _glob_reaches(pattern: tuple[str, ...], rel: tuple[str, ...] | None, *, ls: bool,
                  target: _Target, model_names: Sequence[str]) -> bool:
    """Whether a glob (segments below its fixed folder) can match the target or a file in it.

    `rel` is the target's path below that folder (None: above it, depth unknown). Segments past
    the target's own path only narrow which files inside it match, so the last one is judged as
    a name filter: `**/*.py` cannot reach a set's gold, `**/*.csv` can.
    """
    if not pattern:
        return True
    if "**" in pattern:
        if rel is not None:
            head = pattern[:pattern.index("**")]
            if not all(fnmatch.fnmatchcase(rel[i], head[i])
                       for i in range(min(len(head), len(rel)))):
                return False
        tail = pattern[-1]
        return tail == "**" or _filter_admits(tail, target, model_names)
    if rel is None:
        return False
    for i, pat in enumerate(pattern):
        if i >= len(rel):
            return _filter_admits(pattern[-1], target, model_names)
        if not fnmatch.fnmatchcase(rel[i], pat):
            return False
    # The glob matches a folder above the target: `ls */` lists what is in it.
    return len(pattern) == len(rel) or (ls and len(pattern) == len(rel) - 1)


def _filter_admits(pattern: str, target: _Target, model_names: Sequence[str]) -> bool:
    """Whether a name filter (`*.py`, `cases.*`) could let a read take a file from the target.

    The target's contents may not be on this machine, so a filter is judged by the kinds of
    file a set, a run or a model holds: `*.py` cannot reach gold, `*.csv` or `*.jsonl` can. A
    name without an extension (a folder name, a type name) is assumed to admit.
    """
    pat = pattern.strip().lower().lstrip("!")
    if "/" in pat:
        pat = pat.rsplit("/", 1)[-1] or "*"
    names = list(model_names) if target.is_file else list(_SENSITIVE_SAMPLES) + list(model_names)
    extensions = {name.rsplit(".", 1)[-1] for name in names}
    for expanded in _brace_expand(pat):
        if "." not in expanded.strip("*"):
            return True
        if any(fnmatch.fnmatchcase(name, expanded) for name in names):
            return True
        if expanded.rsplit(".", 1)[-1] in extensions:
            return True  # `*.csv`, `orders.csv`: a data or gold file could have that name
    return False


def _brace_expand(pattern: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    out: list[str] = []
    for option in m.group(1).split(","):
        out.extend(_brace_expand(pattern[:m.start()] + option + pattern[m.end():]))
    return out


@dataclass(frozen=True)
class _Protect:
    """Everything the rules compare against, resolved once."""

    needles: tuple[Needle, ...]
    folders: tuple[_Target, ...]
    models: tuple[_Target, ...]
    model_names: tuple[str, ...]


def _model_match(touch: Touch, model: _Target) -> bool:
    ref = touch.ref
    if ref.segs and model.ref.segs and ref.segs[-1] == model.ref.segs[-1]:
        return True  # the file's name, wherever it is said to be
    return ref == model.ref


def _names_model(ref: Ref, model: Ref) -> bool:
    """Whether a path names the model file exactly (a relative one as a tail of its path)."""
    if ref.absolute or not ref.segs:
        return ref == model
    return model.segs[-len(ref.segs):] == ref.segs


def _rule_hits(index: int, use: ToolUse, seen: _Seen, protect: _Protect) -> list[Reason]:
    """The reasons one tool use gives, at most one per rule."""
    tool = use.name
    reasons: list[Reason] = []
    kind = tool_kind(tool) if tool else "other"

    def add(rule: Rule, needle: str) -> None:
        if not any(r.rule == rule for r in reasons):
            reasons.append(Reason(rule=rule, tool_use_index=index, tool=tool, needle=needle))

    for touch in seen.touches:
        if touch.model_exempt and any(_names_model(touch.ref, m.ref) for m in protect.models):
            continue  # an MCP call's modelPath naming the model under test: the server's business
        for needle in protect.needles:
            if needle.hits(touch.needle_segs, path_like=touch.path_like):
                add("eval-area", needle.text)
                break
        if not touch.url and not (kind == "mcp" and not touch.ref.absolute):
            for folder in protect.folders:
                if is_under(touch.ref, folder.ref):
                    add("eval-area", folder.label)
                    break
        if not touch.model_exempt and not touch.url:
            for model in protect.models:
                if _model_match(touch, model):
                    add("model-file", model.label)
                    break
    targets = protect.folders + protect.models
    for sweep in seen.sweeps:
        for target in targets:
            if _reaches(sweep, target, protect.model_names):
                add("recursive-read", target.label)
                break
    if not reasons:
        for script in seen.scripts:
            roots = ((script.cwd or Ref(False, ())),) + script.roots
            if any(below(root, t.ref) is not False or _spells_start_of(root, t.ref)
                   for root in roots for t in targets):
                add("script-may-read", script.primitive or "unseen script")
    return reasons


def _spells_start_of(literal: Ref, target: Ref) -> bool:
    """Whether code's absolute literal is the first characters of a protected path
    (`'/w/se' + 'ts/shop'`): a path built by pieces starts with one."""
    if not (literal.absolute and target.absolute and literal.segs) or literal.segs[0] == "~":
        return False
    return target.text().startswith(literal.text())


def _targets(text: str, base: Ref | None, *, is_file: bool) -> list[_Target]:
    """A protected path as the log sees it (a relative one resolved against the log's cwd) and,
    when it is relative and exists on this machine, also where it is here: a session recorded
    here from a scratch folder still reads the set at its real place."""
    cleaned = text.replace("\\", "/")
    refs = [to_ref(cleaned, base)]
    local = Path(text)
    if not local.is_absolute() and local.exists():
        refs.append(to_ref(str(local.resolve())))
    return [_Target(label=text, ref=ref, is_file=is_file) for ref in dict.fromkeys(refs)]


def _protection(set_dir: str | Path | None, run_dir: str | Path | None,
                model_paths: Iterable[str | Path], truth_package: str | None,
                gold_paths: Iterable[str], eval_paths: Iterable[str],
                base: Ref | None) -> _Protect:
    """Needles (defaults plus extras, each length-checked), protected folders and model files."""
    extras = [make_needle(str(p)) for p in [*gold_paths, *eval_paths]]
    needles = [make_needle(n, check_length=False) for n in DEFAULT_NEEDLES] + extras
    if truth_package and len(truth_package.strip().strip("/.")) >= MIN_NEEDLE_CHARS:
        needles.append(make_needle(truth_package.strip().strip("/") , check_length=False))
    folders = [t for p in (set_dir, run_dir) if p is not None and str(p).strip()
               for t in _targets(str(p).strip(), base, is_file=False)]
    models = [t for p in model_paths if str(p).strip()
              for t in _targets(str(p).strip(), base, is_file=True) if t.ref.segs]
    names = [t.ref.segs[-1] for t in models]
    return _Protect(needles=tuple(needles), folders=tuple(folders), models=tuple(models),
                    model_names=tuple(dict.fromkeys(names)))


def read_set_pins(set_dir: str | Path) -> tuple[str | None, str | None]:
    """(truth package name, model file path) from set.json, when the set folder is here."""
    path = Path(set_dir) / "set.json"
    if not path.is_file():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(path, getattr(exc, "lineno", None), f"cannot read set.json: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(path, None, "set.json: expected an object")
    truth = data.get("truthPackage") if isinstance(data.get("truthPackage"), str) else None
    model = data.get("targetModelPath") if isinstance(data.get("targetModelPath"), str) else None
    model_file = f"{str(set_dir).rstrip('/')}/model/{model}" if model else None
    return truth, model_file


def check_contamination(
    tool_uses: Sequence[ToolUse] | None = None,
    *,
    log: str | Path | ToolLog | None = None,
    set_dir: str | Path | None,
    run_dir: str | Path | None = None,
    model_paths: Iterable[str | Path] = (),
    truth_package: str | None = None,
    gold_paths: Iterable[str] = (),
    eval_paths: Iterable[str] = (),
    reported_calls: int | None = None,
    cwd: str | None = None,
) -> ContaminationResult:
    """Decide whether one attempt's host tool uses show contamination (SPEC 5.1).

    Args:
        tool_uses: every host tool use, in order; None (and no `log`) when there is no log:
            the verdict is "unknown".
        log: instead of `tool_uses`, a host log or transcript (a path, or one already read);
            its cwd and reportedCalls fill `cwd` and `reported_calls` when those are not given.
        set_dir, run_dir: protected folders, as paths that need not exist here; relative ones
            resolve against `cwd` (the log's) when it is known.
        model_paths: the model file(s) under test.
        truth_package: the truth package's name; an MCP call naming it hits rule 1.
        gold_paths, eval_paths: needles added to the defaults (never replacing them).
        reported_calls: the calls the answerer reported (rule 4).
        cwd: the log's working directory.
    Raises:
        UsageError: a needle too short to mean anything (exit 2).
        InputError: the log or set.json cannot be read (exit 3).

    When the set folder is on this machine, set.json supplies the truth package's name (unless
    given) and the model file under test (`<set>/model/<targetModelPath>`).
    """
    if log is not None:
        read = log if isinstance(log, ToolLog) else read_tool_uses(log)
        tool_uses = read.tool_uses
        cwd = cwd or read.cwd
        reported_calls = read.reported_calls if reported_calls is None else reported_calls
    model_paths = list(model_paths)
    if set_dir is not None:
        truth, model_file = read_set_pins(set_dir)
        truth_package = truth_package or truth
        if model_file:
            model_paths.append(model_file)
    base = to_ref(cwd) if cwd else None
    if base is not None and not base.absolute:
        base = None  # a relative "cwd" says nothing about where the session ran
    protect = _protection(set_dir, run_dir, model_paths, truth_package, gold_paths, eval_paths,
                          base)
    if tool_uses is None:
        return ContaminationResult(contaminated="unknown",
                                   reasons=[Reason("no-log", None, None, None)],
                                   host_tool_uses=None, reported_calls=reported_calls)
    state = _State(cwd=base)
    home = _home(base) if base is not None else None
    if home:
        state.env["HOME"] = "/" + "/".join(home)
    reasons: list[Reason] = []
    for index, use in enumerate(tool_uses):
        seen = _see(use, state)
        _follow_links(seen, state.links)
        reasons.extend(_rule_hits(index, use, seen, protect))
    host = len(tool_uses)
    if reported_calls is not None and reported_calls > host:
        reasons.append(Reason("under-report", None, None,
                              f"reported_calls {reported_calls} > host_tool_uses {host}"))
    verdict: Verdict
    if any(r.rule in _DEFINITE_RULES for r in reasons):
        verdict = True
    elif reasons:
        verdict = "unknown"
    else:
        verdict = False
    return ContaminationResult(contaminated=verdict, reasons=reasons, host_tool_uses=host,
                               reported_calls=reported_calls)


def render_text(result: ContaminationResult) -> str:
    """A short human reading of a result."""
    verdict = {True: "CONTAMINATED", False: "clean", "unknown": "UNKNOWN (counts as contaminated)"}
    lines = [(f"{verdict[result.contaminated]}: host_tool_uses={result.host_tool_uses} "
             f"reported_calls={result.reported_calls}")]
    for r in result.reasons:
        where = f"#{r.tool_use_index} {r.tool}" if r.tool_use_index is not None else "log"
        lines.append(f"  {r.rule}: {where}" + (f" -> {r.needle}" if r.needle else ""))
    return "\n".join(lines)


__all__ = ["DEFAULT_NEEDLES", "ContaminationResult", "Needle", "Reason", "Ref",
           "check_contamination", "is_under", "make_needle", "read_set_pins", "render_text",
           "split_shell", "to_ref", "tool_kind"]
