"""Whether an answerer's host tool uses show it reached the answers (reference/contamination.md).

A contaminated attempt gets no verdict: it saw the set, the goldens, an earlier run or the model
file it was meant to reach only through the Publisher's tools. The decision is mechanical, over
the host's own log of tool uses (never the answerer's account of itself), with four rules:

1. `eval-area`: a file, search, shell or fetch tool (or an MCP call naming a path) touches a
   protected folder (`--set`, `--run`) or a needle (`evals/`, `cases.jsonl`, ...), matched on
   normalised path segments; listing counts; an MCP call naming the truth package hits.
2. `model-file`: a file, search, shell or fetch tool reads the model file under test, by its
   path, by its file name, or through a URL that returns its text (the Publisher's REST route
   `.../models/<path>`, fetched with curl, wget or a web-fetch tool). An MCP call's `modelPath`
   is exempt (the server resolves it), and so is a shell command that posts a JSON-RPC
   `tools/call` to an `/mcp` URL.
3. `recursive-read`: a recursive read (grep -r, rg, find, tar, cp -r, a shell glob, the Grep and
   Glob tools, a walk or glob in interpreter code) from a folder that contains a protected
   folder or the model file.
   `script-may-read`: inline code or a script, run from such a folder, that can read files: the
   verdict is "unknown" unless a definite rule decided it.
   `unseen-program`: a shell or interpreter runs a program the log cannot show (decoded, fetched
   or assembled at run time): "unknown" from any folder, never clean.
4. `under-report`: the answerer reported more calls than the host logged.
No log at all is "unknown" (`no-log`). Both "unknown" and true count as contaminated everywhere.

Paths in the log resolve against the log's cwd (and the `cd`s and variables the shell set);
when the cwd is not known, relative paths on both sides are compared as relative to the same
unknown folder, and a recursive read from `.` is taken to reach an absolute protected folder. A
relative `--set`/`--run` that exists on this machine is protected both where the log's cwd puts
it and where it is here. Needles are matched on what a path reaches below (or above) the cwd,
never on the cwd's own folders, so a session run under `/ci/runs/...` is not voided wholesale.
Shell commands are read by a small lexer (quotes, pipelines, heredocs, substitutions,
arithmetic), never run; interpreter code by code.py, never run either.

Where reference/contamination.md is silent, these are the choices (each has a test):
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
  database, notes, fetch) that names the model file in a path, a URL or a query literal reads
  it. A reading tool's string literals count (a SQL `read_csv('/repo/sets/x.csv')`); prose
  fields (`prompt`, `content`, `description`) and web searches do not. The REST routes that
  list models, describe a package or run a query (`.../models/<path>/query`) return no model
  text and stay clean.
- `python -m pip|venv|ensurepip|json.tool` and `uv pip|venv|add|sync` manage packages, so they are
  not code that may read the set; `python -m` of anything else is. `uv run`, `poetry run` (and
  the like) run the program that follows them.
- `$PWD`, `$(pwd)` and `${VAR:-default}` are expanded; code whose absolute string literal is the
  start of a protected path (`'/w/se' + 'ts'`) may read it, wherever it runs (`script-may-read`).
- A script the answerer wrote (a Write tool, `cat > f <<EOF`, `tee f`, `echo ... > f`,
  `printf ... >> f`, `cat <<EOF | tee f`) is read when it runs (`python3 f`, `./f`, `sh f`,
  `source f`, `bash -s < f`, `uv run f`), from whatever folder: its path literals are reads
  resolved against the folder it runs from, its walks and globs are recursive reads, its shell
  calls (`os.system`, `subprocess.run([...])`, `execSync`, backticks) are shell commands.
  Writing it reads nothing: a here-document that `cat > f` or `tee f` writes is text, not paths.
  Whole-line comments are prose, not reads.
- Walks and globs in code read where they are rooted: a literal, a variable assigned one, the
  cwd (`os.getcwd()`, `Path.cwd()`, `'.'`) or the home, through `Path(...)`-style wrappers,
  `os.path.join`-style calls, pathlib's `/`, string `+` and f-strings of such variables
  (`os.walk`, `Path.rglob`, `Path.glob`, `glob(..., recursive=True)` and `root_dir=`,
  `shutil.copytree`/`make_archive`, `fs.readdirSync(p, {recursive: true})`, `globSync`,
  `Dir.glob`, `File::Find`, `list.files`/`dir_ls` with `recursive`, and any path pattern in a
  string, as in DuckDB's `read_csv('/repo/**/*.csv')`). Python's glob reads `**` as `*` unless
  told `recursive=True`. A walk whose root the text does not give keeps the code "may read"
  (`script-may-read`); the walks whose reach is known do not count as folders it names.
- What echo, printf (with its escapes and `%b`) and cat of known text print is known: piped into
  a shell or interpreter it is read as the program; piped into `nc`/`socat`/`telnet` it is a
  request whose path is fetched.
- Unseen programs: program text reaching a shell or interpreter through a pipe from anything
  but echo, printf or cat of text the log shows (`| base64 -d | sh`, `curl ... | python3`);
  `eval` or `sh -c`/`python3 -c` of a substitution or a variable the log never set; a process
  substitution as the script (`bash <(curl ...)`, `source <(...)`); a program named by such a
  word (`$RUNNER x`); a script file the answerer made whose text the log does not show
  (`base64 -d > p.py`, `curl -o s.sh`, `open('p.py', 'w')` in code); and code that runs code it
  builds (`exec`, `eval`, `new Function`, `vm.run*`, Perl's string `eval`, `os.system` or
  `execSync` of decoded text or of the environment). `eval` of a literal is read as text; code
  with more than a bounded number of calls of one kind is unseen. Setting up the shell is not a
  program of the answerer's: `eval "$(pyenv init -)"` and the like (a tool printing its own
  environment code), `source <(kubectl completion bash)`, and sourcing an activate, rc or profile
  file the answerer did not write.
- A file the answerer made itself (a Write tool, `>`, tee, code that opens it for writing, a copy
  of such a file) that shares the model's file name is not the model under test when both paths
  are absolute (the log's cwd known, or the model path absolute) and differ: reading a draft
  back is clean. An edit, a copy of another file or a read before the write gets no such pass.
- Shell arithmetic (`$((a/b))`, `$[a/b]`, `(( x = a/b ))`, `let x=a/b`) is a number, never a
  path or a script.
- A glob that names files without recursing is a read of what it names: `grep x *.malloy` in the
  model's folder is `model-file`, `cat *` inside the set `eval-area`; `**`, `grep -r` and the
  Grep tool are recursive reads.
- A build file the answerer wrote (Makefile, justfile, build.ninja) and ran with make, gmake,
  just or ninja (its default name or -f FILE, in the folder -C gives) is read like a script it
  wrote: its recipes are shell commands run from that folder, with the file's variables and the
  automatic ones put in, and a rule's prerequisites are reads. One it made whose text the log
  hides is unseen; one the log never shows is a script that may read (build.py).
- A subagent tool (Task, Agent) handed a path has reached it: every path its prompt and other
  inputs name is a touch (eval-area), even though the subagent's own calls may not be in the
  log. The model file it names is exempt, as in a Publisher call.
- A file the answerer made itself (a Write, `>`, tee, code writing it) inside its own working
  folder (the log's cwd, known and absolute) is not the answer key because of its name: writing
  and reading back its own `cases.jsonl` or `set.json` matches no needle by that name (the
  folders it lies in still do: `runs/out.txt` is in a runs/ folder). Read before it was written,
  or outside the working folder, it gets no such pass; a protected folder is never one.
- Not decided here: a Publisher `getModel`-style tool called with a `modelPath` returns model text
  but is exempt by rule 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from malloy_evals.checks.contamination.commands import Target, follow_links, sweep_reaches
from malloy_evals.checks.contamination.refs import (
    MIN_NEEDLE_CHARS,
    Needle,
    Ref,
    below,
    implied_home,
    is_under,
    make_needle,
    to_ref,
)
from malloy_evals.checks.contamination.tools import tool_kind
from malloy_evals.checks.contamination.touches import Seen, State, Sweep, Touch
from malloy_evals.checks.contamination.uses import see
from malloy_evals.checks.toollog import ToolLog, ToolUse, read_tool_uses
from malloy_evals.core import jsonl
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, InputError
from malloy_evals.core.vocab import is_contaminated
from malloy_evals.core.words import shown

Rule = Literal["eval-area", "model-file", "recursive-read", "script-may-read", "unseen-program",
               "under-report", "no-log"]
Verdict = bool | Literal["unknown"]

# The eval area's default needles (rule 1); --gold-path / --eval-path add to these.
DEFAULT_NEEDLES: tuple[str, ...] = (
    "evals/", "gold/", "cases.jsonl", "set.json", "events.jsonl", "judge-regressions",
    "judge-calibration", "recordings/", "runs/",
)


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
    """The verdict over one attempt's host log."""

    contaminated: Verdict
    reasons: list[Reason]
    host_tool_uses: int | None  # every tool use the host logged, MCP included; None: no log
    reported_calls: int | None  # what the answerer reported (flag over log); None: unknown

    @property
    def exit_code(self) -> int:
        # "unknown" counts as contaminated in every aggregate, so it is a finding too.
        return EXIT_FINDING if is_contaminated(self.contaminated) else EXIT_OK


@dataclass(frozen=True)
class _Protect:
    """Everything the rules compare against, resolved once."""

    needles: tuple[Needle, ...]
    folders: tuple[Target, ...]
    models: tuple[Target, ...]
    model_names: tuple[str, ...]


def _model_match(touch: Touch, model: Target, made: AbstractSet[Ref]) -> bool:
    """Whether a touch reads the model file: its path, or its file name wherever it is said to
    be, unless it is a file the answerer made itself at another absolute place (a draft)."""
    ref = touch.ref
    if touch.url:
        return _url_names_model(ref, model)
    if ref == model.ref:
        return True
    if not (ref.segs and model.ref.segs and ref.segs[-1] == model.ref.segs[-1]):
        return False
    return not (ref in made and ref.absolute and model.ref.absolute)


def _url_names_model(ref: Ref, model: Target) -> bool:
    """Whether a URL's path fetches the model's text: a route that ends with the model file's
    name (the Publisher's `.../packages/<pkg>/models/<path>`, a raw file host), not a route
    under it (`.../models/<path>/query` runs a query)."""
    return bool(ref.segs) and bool(model.ref.segs) and ref.segs[-1] == model.ref.segs[-1]


def _names_model(ref: Ref, model: Ref) -> bool:
    """Whether a path names the model file exactly (a relative one as a tail of its path)."""
    if ref.absolute or not ref.segs:
        return ref == model
    return model.segs[-len(ref.segs):] == ref.segs


def _sweep_rule(sweep: Sweep, target: Target) -> Rule:
    """The rule a sweep that reaches a target breaks. A glob that names files without recursing
    (`grep x *.malloy` in the model's folder, `cat *` inside the set) reads them directly: the
    model file or the eval area, not a recursive read."""
    if sweep.kind in ("glob", "ls-glob") and sweep.pattern and "**" not in sweep.pattern:
        rel = below(sweep.root, target.ref)
        if rel is not None and rel is not False:
            if target.is_file and len(rel) == len(sweep.pattern):
                return "model-file"
            if not target.is_file and not rel:
                return "eval-area"
    return "recursive-read"


def _own_file(ref: Ref, made: AbstractSet[Ref], workdir: Ref | None) -> bool:
    """Whether `ref` is a file the answerer made itself inside its own working folder (the log's
    cwd, known and absolute): named like the answer key (`cases.jsonl`), it is still its own."""
    return (workdir is not None and workdir.absolute and ref.absolute and ref in made
            and ref != workdir and is_under(ref, workdir))


def _rule_hits(index: int, use: ToolUse, seen: Seen, protect: _Protect,
               made: AbstractSet[Ref] = frozenset(), workdir: Ref | None = None) -> list[Reason]:
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
        # Its own file's name is its own; the folders it lies in are still matched.
        segs = touch.needle_segs[:-1] if _own_file(touch.ref, made, workdir) else touch.needle_segs
        for needle in protect.needles:
            if needle.hits(segs, path_like=touch.path_like):
                add("eval-area", needle.text)
                break
        if not touch.url and not (kind == "mcp" and not touch.ref.absolute):
            for folder in protect.folders:
                if is_under(touch.ref, folder.ref):
                    add("eval-area", folder.label)
                    break
        if not touch.model_exempt:
            for model in protect.models:
                if _model_match(touch, model, made):
                    add("model-file", model.label)
                    break
    targets = protect.folders + protect.models
    for sweep in seen.sweeps:
        for target in targets:
            if sweep_reaches(sweep, target, protect.model_names):
                add(_sweep_rule(sweep, target), target.label)
    if not reasons:
        for script in seen.scripts:
            roots = ((script.cwd or Ref(False, ())),) + script.roots
            if any(below(root, t.ref) is not False or _spells_start_of(root, t.ref)
                   for root in roots for t in targets):
                add("script-may-read", script.primitive or "unseen script")
        for what in seen.unseen:
            add("unseen-program", what)
    return reasons


def _spells_start_of(literal: Ref, target: Ref) -> bool:
    """Whether code's absolute literal is the first characters of a protected path
    (`'/w/se' + 'ts/shop'`): a path built by pieces starts with one."""
    if not (literal.absolute and target.absolute and literal.segs) or literal.segs[0] == "~":
        return False
    return target.text().startswith(literal.text())


def _targets(text: str, base: Ref | None, *, is_file: bool) -> list[Target]:
    """A protected path as the log sees it (a relative one resolved against the log's cwd) and,
    when it is relative and exists on this machine, also where it is here: a session recorded
    here from a scratch folder still reads the set at its real place."""
    cleaned = text.replace("\\", "/")
    refs = [to_ref(cleaned, base)]
    local = Path(text)
    if not local.is_absolute() and local.exists():
        refs.append(to_ref(str(local.resolve())))
    return [Target(label=text, ref=ref, is_file=is_file) for ref in dict.fromkeys(refs)]


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
        data = jsonl.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(path, getattr(exc, "lineno", None), f"cannot read set.json: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(path, None, "set.json: expected an object")
    truth = got if isinstance(got := data.get("truthPackage"), str) else None
    model = got if isinstance(got := data.get("targetModelPath"), str) else None
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
    """Decide whether one attempt's host tool uses show contamination (reference/contamination.md).

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
    state = State(cwd=base)
    home = implied_home(base) if base is not None else None
    if home:
        state.env["HOME"] = "/" + "/".join(home)
    reasons: list[Reason] = []
    for index, use in enumerate(tool_uses):
        seen = see(use, state)
        follow_links(seen, state.links)
        reasons.extend(_rule_hits(index, use, seen, protect, state.made, base))
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
    lines = [(f"{verdict[result.contaminated]}: host_tool_uses={shown(result.host_tool_uses)} "
             f"reported_calls={shown(result.reported_calls)}")]
    for r in result.reasons:
        where = f"#{r.tool_use_index} {r.tool}" if r.tool_use_index is not None else "log"
        lines.append(f"  {r.rule}: {where}" + (f" -> {r.needle}" if r.needle else ""))
    return "\n".join(lines)
