"""What a shell command reads: programs, git, awk and sed, interpreters, globs and links."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from malloy_evals.checks.contamination.build import (
    BUILD_TOOLS,
    build_commands,
    build_file_and_folder,
)
from malloy_evals.checks.contamination.code import Lang, lang_of, may_read, read_code
from malloy_evals.checks.contamination.programs import (
    ENV_SCRIPT_RE,
    NO_PIPE,
    Piped,
    made_at_run_time,
    only_writes,
    piped_into,
    printed_output,
    program_of,
    see_writes,
    sets_up_the_environment,
)
from malloy_evals.checks.contamination.refs import Ref, below, implied_home, to_ref
from malloy_evals.checks.contamination.shell import SUBST, Simple, Word, split_shell
from malloy_evals.checks.contamination.touches import (
    SENSITIVE_SAMPLES,
    URL_RE,
    Script,
    Seen,
    State,
    Sweep,
    Touch,
    embedded,
    glob_split,
)

_NO_PATH_ARGS = frozenset({"echo", "printf", "true", "false", ":", "export", "set", "unset",
                           "sleep", "exit", "return", "let", "read", "local", "declare",
                           "typeset", "readonly", "shift", "wait"})
# Programs that send their stdin to a socket (a hand-written HTTP request).
_SOCKETS = frozenset({"nc", "ncat", "netcat", "socat", "telnet"})
# Builtins that run a shell script in the current shell.
_SOURCES = frozenset({"source", "."})
_GREP_LIKE = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "ack-grep"})
_INTERPRETERS = frozenset({"python", "python3", "python2", "pypy", "pypy3", "node", "nodejs",
                           "deno", "bun", "ruby", "perl", "php", "rscript", "r", "julia",
                           "duckdb", "sqlite3", "psql", "lua", "tsx", "ts-node", "osascript",
                           "ipython", "uv", "pwsh", "powershell"})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "fish"})
_SQL_CLIENTS = frozenset({"duckdb", "sqlite3", "psql"})
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


def see_shell(command: str, cwd: Ref | None, state: State, seen: Seen,
               depth: int = 0) -> Ref | None:
    """Analyse one shell command string; returns the cwd it leaves behind (`cd`)."""
    if cwd is not None and cwd.absolute:
        # `$(pwd)/sets/x` and "$PWD/sets/x" name the cwd: the lexer would otherwise split them.
        here = cwd.text()
        command = _PWD_SUBST_RE.sub(lambda _m: here, command)
        state.env["PWD"] = here
    simples = split_shell(command)
    # `echo sets/shop/a.csv | xargs cat`: what echo prints becomes the paths xargs reads.
    feeds_xargs = any(w.value.rsplit("/", 1)[-1] == "xargs" for s in simples for w in s.words)
    printed: dict[int, str | None] = {}  # what each command writes to stdout, when the log shows it
    # `cat <<EOF | tee a.py`: cat only hands its here-document to tee, which writes it
    into_tee = {id(s.piped_from) for s in simples if s.piped_from and program_of(s.words)[0] == "tee"}
    for simple in simples:
        _expand_variables(simple, state.env)
        piped = piped_into(simple, printed)
        cwd = _see_simple(simple, cwd, state, seen, depth, feeds_xargs, piped,
                          writes_only=only_writes(simple) or id(simple) in into_tee)
        printed[id(simple)] = printed_output(simple, state, cwd, piped)
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


def _expand_variables(simple: Simple, env: dict[str, str]) -> None:
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


def _carries_mcp(simple: Simple) -> bool:
    """A JSON-RPC `tools/call` posted to an `/mcp` URL: an MCP call riding on the shell."""
    text = " ".join([w.value for w in simple.words] + simple.stdin_text)
    if "tools/call" not in text:
        return False
    return any(re.search(r"/mcp(?:[/?#]|$)", m.group(2)) for m in URL_RE.finditer(text))


def _see_simple(simple: Simple, cwd: Ref | None, state: State, seen: Seen,
                depth: int, feeds_xargs: bool = False, piped: Piped = NO_PIPE, *,
                writes_only: bool = False) -> Ref | None:
    exempt = _carries_mcp(simple)
    see_writes(simple, cwd, state, piped)
    for _op, target in simple.redirects:
        seen.touches.append(Touch(text=target.value, ref=to_ref(target.value, cwd), base=cwd,
                                  path_like=True, model_exempt=exempt))
        if target.glob:
            fixed, rest = glob_split(target.value, cwd)
            seen.sweeps.append(Sweep(root=fixed, pattern=rest, kind="glob"))
    if not writes_only:
        for body in simple.stdin_text:
            seen.touches.extend(embedded(body, cwd, literals_path_like=True, exempt=exempt))
    for w in simple.words:
        m = re.match(r"^[A-Za-z_][A-Za-z0-9_]*=(.+)$", w.value)
        if m and not w.quoted:
            seen.touches.extend(_word_touches(m.group(1), cwd, exempt))
    prog, args = program_of(simple.words)
    if not prog:
        return cwd
    head = next((w for w in simple.words if w.value.rsplit("/", 1)[-1].lower() == prog), None)
    if head is not None and made_at_run_time(head.value):
        # `$CMD x`, `$(printf ...) x`: which program runs is not in the log.
        seen.unseen.append(f"program {head.value.replace(SUBST, '$(...)')}")
        return cwd
    if head is not None and "/" in head.value:
        seen.touches.append(Touch(text=head.value, ref=to_ref(head.value, cwd), base=cwd, path_like=True,
                                  model_exempt=exempt))
    if prog in ("cd", "pushd"):
        folder = next((a.value for a in args if not a.value.startswith("-")), "~")
        if folder == "-" or SUBST in folder or (folder.startswith("~") and cwd is not None
                                                and implied_home(cwd) is None):
            return cwd  # back to a folder (or a home) the log does not show: keep what we know
        seen.touches.append(Touch(text=folder, ref=to_ref(folder, cwd), base=cwd, path_like=True))
        return to_ref(folder, cwd)
    if prog in _NO_PATH_ARGS and not (feeds_xargs and prog in ("echo", "printf")):
        return cwd
    if prog in _SOCKETS:
        # `printf 'GET /api/.../models/shop.malloy HTTP/1.0\r\n\r\n' | nc host 4000`: a fetch
        for text in [piped.text or "", *simple.stdin_text]:
            seen.touches.extend(embedded(text, None, literals_path_like=True))
    if prog in ("ln", "link"):
        _remember_link(args, cwd, state)
    if prog == "git" and args:
        sub = next((a.value for a in args if not a.value.startswith("-")), "")
        if sub == "grep" and args[0].value == "grep":
            prog, args = "git-grep", args[1:]
        else:
            _see_git(args, cwd, seen, exempt)
    if prog == "eval":
        if not sets_up_the_environment([a for a in args if a.dynamic]):
            _see_program(" ".join(a.value for a in args), "eval", "shell", cwd, state, seen, depth)
        return cwd
    if prog in _SHELLS:
        inline = _inline_code(prog, args)
        if inline is not None:
            _see_program(inline, f"{prog} -c", "shell", cwd, state, seen, depth)
            return cwd  # a `cd` inside does not persist
    # Which words are paths: all but options, a grep's pattern and option values.
    pattern_index = _pattern_index(prog, args)
    value_opts = _VALUE_OPTS.get(prog, frozenset())
    path_args: list[Word] = []
    # An option's own value is a pattern or a number, not a path: only operands are read.
    for k, w, role in _roles(args, value_opts):
        v = w.value
        if role == _OPTION and "=" in v:
            opt, value = v.split("=", 1)
            # --regexp=PAT is a pattern; --exclude-dir=evals names what is NOT read.
            names_a_read = opt not in value_opts or opt in ("--include", "--glob", "--iglob")
            if names_a_read and not opt.startswith(("--exclude", "--ignore")):
                seen.touches.extend(_word_touches(value, cwd, exempt))
        if role != _OPERAND:
            continue
        if k == pattern_index:
            _see_program_text(prog, v, cwd, seen, exempt)
            continue
        path_args.append(w)
        for expanded in brace_expand(v) if not w.quoted and "{" in v else [v]:
            seen.touches.extend(_word_touches(expanded, cwd, exempt))
    _sweeps_for(prog, args, path_args, cwd, seen)
    for w in path_args:
        if w.glob and not w.quoted:
            for expanded in brace_expand(w.value):
                fixed, rest = glob_split(expanded, cwd)
                seen.sweeps.append(Sweep(root=fixed, pattern=rest,
                                         kind="ls-glob" if prog in ("ls", "du", "tree") else "glob"))
    if prog in BUILD_TOOLS:
        _see_build(prog, args, cwd, state, seen, depth)
    elif prog in _INTERPRETERS or prog in _SHELLS or prog.startswith("python") or prog in _SOURCES:
        _see_interpreter(prog, args, simple, cwd, state, seen, piped, depth)
    elif head is not None and ("/" in head.value or head.value.endswith((".sh", ".py"))):
        _see_script_file(head.value, cwd, state, seen, [a.value for a in args], depth)
    return cwd


def _see_program(text: str, how: str, lang: Lang, cwd: Ref | None, state: State, seen: Seen,
                 depth: int, argv: Sequence[str] = (), *, touch: bool = False) -> None:
    """Program text handed to a shell or an interpreter: read it when the log shows it, else the
    program is unseen (`sh -c "$CMD"`, `eval "$(...)"`, `python3 -c "$(curl ...)"`)."""
    if SUBST in text or made_at_run_time(text):
        seen.unseen.append(f"{how} {text.strip().replace(SUBST, '$(...)')[:60]}".strip())
        return
    if depth >= 4:
        return
    if lang == "shell":
        see_shell(text, cwd, state, seen, depth + 1)
    else:
        _see_code(text, lang, cwd, state, seen, depth, argv, touch=touch)


_GIT_VALUE_OPTS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
# git subcommands that print file contents (diffs, blobs) from the whole tree unless narrowed.
_GIT_CONTENT = frozenset({"show", "diff", "diff-tree", "diff-index", "diff-files", "format-patch",
                          "whatchanged", "range-diff"})
_GIT_LOG_CONTENT = ("-p", "-u", "--patch", "--stat", "--name-only", "--name-status", "--numstat",
                    "--raw", "--full-diff", "-S", "-G", "--follow")
_REV_PATH_RE = re.compile(r"^[^\s:/]*:(?!/)(.+)$")


def _see_git(args: list[Word], cwd: Ref | None, seen: Seen, exempt: bool) -> str:
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


def _see_program_text(prog: str, text: str, cwd: Ref | None, seen: Seen, exempt: bool) -> None:
    """The script operand of awk or sed, which can read files itself: awk's `getline < "f"` and
    `system()`, sed's `r FILE` / `R FILE` and `e`. Its regexes are not paths (`/evals/`); only
    quoted literals (awk) and `r` operands (sed) are."""
    if prog in ("awk", "gawk", "mawk", "nawk"):
        seen.touches.extend(embedded(text, cwd, literals_path_like=False, exempt=exempt,
                                      runs=False))
        m = re.search(r"\bgetline\b|\bsystem\s*\(|\|\s*getline|\bclose\s*\(", text)
        if m:
            roots = tuple(t.ref for t in embedded(text, cwd, literals_path_like=True, runs=False)
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
        if URL_RE.match(value):
            return embedded(value, cwd, literals_path_like=True, exempt=exempt)
        out.append(Touch(text=value, ref=to_ref(value.lstrip("@"), cwd), base=cwd, path_like=True,
                         model_exempt=exempt))
    # Code and JSON bodies carry paths inside them (python -c "open('evals/x')").
    out.extend(embedded(value, cwd, literals_path_like=True, exempt=exempt))
    return out


def _pattern_index(prog: str, args: list[Word]) -> int | None:
    """Where a command's pattern or script operand is (grep's pattern, sed's and awk's script,
    jq's filter): its first operand, unless an option (-e, -f) supplied it."""
    if prog not in _PATTERN_FIRST:
        return None
    if any(w.value in ("--files", "--type-list") for w in args):
        return None  # `rg --files DIR` lists files and takes no pattern
    supplied = tuple(o + "=" for o in _SUPPLIES_PATTERN)
    for k, w, role in _roles(args, _VALUE_OPTS.get(prog, frozenset()) | _FILE_OPTS):
        if role == _OPTION and (w.value in _SUPPLIES_PATTERN or w.value.startswith(supplied)):
            return None
        if role == _OPERAND:
            return k
    return None


_OPTION, _VALUE, _OPERAND = "option", "value", "operand"


def _roles(args: list[Word], value_opts: frozenset[str]) -> Iterator[tuple[int, Word, str]]:
    """Each argument with its role: an option (`-r`, `--regexp=PAT`), the value of the option
    before it (one of `value_opts`, written apart), or an operand. The one reading of a
    command's options that finding its paths and finding its pattern share."""
    takes_value = False
    for k, w in enumerate(args):
        if takes_value:
            takes_value = False
            yield k, w, _VALUE
        elif w.value.startswith("-") and len(w.value) > 1:
            takes_value = w.value in value_opts
            yield k, w, _OPTION
        else:
            yield k, w, _OPERAND


def _opt_values(args: list[Word], names: tuple[str, ...]) -> list[str]:
    """Values of options such as `--include=*.py`, `--include '*.py'`, `-g '*.py'`."""
    out: list[str] = []
    for k, w in enumerate(args):
        for name in names:
            if w.value == name and k + 1 < len(args):
                out.append(args[k + 1].value)
            elif w.value.startswith(name + "="):
                out.append(w.value.split("=", 1)[1])
    return out


def _sweeps_for(prog: str, args: list[Word], path_args: list[Word], cwd: Ref | None,
                seen: Seen) -> None:
    """Recursive reads and listings a program makes over its operands (rule 3)."""
    here = cwd or Ref(False, ())
    values = [a.value for a in args]
    short = "".join(v[1:] for v in values if v.startswith("-") and not v.startswith("--"))

    def roots(operands: list[Word]) -> list[Ref]:
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
        operands: list[Word] = []
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


def _inline_code(prog: str, args: list[Word]) -> str | None:
    """The code given on the command line (`python -c CODE`, `node -e CODE`, `bash -lc CMD`)."""
    flags = _INLINE_FLAGS | ({"-r"} if prog == "php" else set())
    for k, w in enumerate(args):
        v = w.value
        if v in flags or re.match(r"^-[A-Za-z]*c$", v):
            return args[k + 1].value if k + 1 < len(args) else None
    return None


def _see_interpreter(prog: str, args: list[Word], simple: Simple, cwd: Ref | None,
                     state: State, seen: Seen, piped: Piped = NO_PIPE, depth: int = 0) -> None:
    """The program a shell or an interpreter runs: inline code (-c, -e), a here-document, text
    piped in, a redirected file or a script file. A program the log cannot show (piped from
    `base64 -d`, a process substitution) is unseen; one it shows is read."""
    shell = prog in _SHELLS or prog in _SOURCES
    lang: Lang = "shell" if shell else lang_of(prog)
    operands = [a for a in args if not a.value.startswith("-")]
    script = operands[0] if operands and not (operands[0].value == "-" and not shell) else None
    code_parts: list[str] = []
    if not shell:
        inline = _inline_code(prog, args)
        if inline is not None:
            if SUBST in inline or made_at_run_time(inline):
                _see_program(inline, f"{prog} -c", lang, cwd, state, seen, depth)
                return
            code_parts.append(inline)
            script = None
        if prog in _SQL_CLIENTS:
            # their operands are a database and SQL text; the program is never a script file
            code_parts.extend(a.value for a in args if not a.value.startswith("-")
                              and any(ch.isspace() for ch in a.value))
            script = None
    if script is not None and script.dynamic:
        if not (prog in _SOURCES and sets_up_the_environment([script])):
            _see_program(script.value, f"{prog} <(...)", lang, cwd, state, seen, depth)
        return
    if prog in _SOURCES and script is not None and ENV_SCRIPT_RE.search(script.value) and not (
            {to_ref(script.value, cwd)} & (state.made | set(state.written))):
        return  # `source .venv/bin/activate`, `. ~/.bashrc`: setting up the shell
    for body in simple.stdin_text:
        if shell:
            _see_program(body, prog, "shell", cwd, state, seen, depth)
        else:
            code_parts.append(body)
    redirect = next((w for op, w in simple.redirects if op == "<"), None)
    if redirect is not None:
        known = state.written.get(to_ref(redirect.value, cwd))
        if known is not None:
            redirect = None
            code_parts.append(known)
        elif to_ref(redirect.value, cwd) in state.made:
            seen.unseen.append(f"{redirect.value}, written at run time")
            return
    if script is None and not code_parts and redirect is None and piped.piped:
        if piped.text is None and piped.files:
            for name in piped.files:  # `cat q.sql | duckdb`: as if it ran q.sql
                _see_script_file(name, cwd, state, seen, (), depth, lang=lang)
            return
        if piped.text is None:
            seen.unseen.append(f"a program piped into {prog}")
            return
        _see_program(piped.text, f"| {prog}", lang, cwd, state, seen, depth, touch=True)
        return
    if shell:
        if script is not None:
            _see_script_file(script.value, cwd, state, seen, [a.value for a in operands[1:]],
                             depth, lang="shell")
        elif code_parts:
            _see_program("\n".join(code_parts), f"{prog} <", "shell", cwd, state, seen, depth)
        elif redirect is not None:
            seen.scripts.append(Script(cwd=cwd, primitive=None))  # `bash < s.sh`, s.sh unseen
        return
    if code_parts or redirect is not None:
        _see_code("\n".join(code_parts), lang, cwd, state, seen, depth,
                  redirected=redirect is not None)
        return
    if prog in _SQL_CLIENTS:
        seen.scripts.append(Script(cwd=cwd, primitive=None))  # SQL typed at a terminal
        return
    values = [a.value for a in args]
    if "-m" in values:
        module = values[values.index("-m") + 1] if values.index("-m") + 1 < len(values) else ""
        if module not in _TOOL_MODULES:
            seen.scripts.append(Script(cwd=cwd, primitive=None))  # a module: its code is not here
        return
    if prog == "uv" and values and values[0] != "run":
        return  # `uv pip install x`, `uv venv`: package management, not the answerer's code
    if script is None:
        if not args:
            seen.scripts.append(Script(cwd=cwd, primitive=None))  # a program from the terminal
        return  # `python3 --version`
    _see_script_file(script.value, cwd, state, seen, [a.value for a in operands[1:]], depth,
                     lang=lang)


def _see_build(prog: str, args: list[Word], cwd: Ref | None, state: State, seen: Seen,
               depth: int) -> None:
    """`make`, `just`, `ninja`: the build file they run (named with -f, else the tool's default
    names, in the folder -C gives) is read like a script the answerer wrote, its recipes as shell
    commands run from that folder; a build file it made whose text the log hides is unseen, and
    one the log never shows is a script that may read."""
    named, folder = build_file_and_folder(prog, [a.value for a in args])
    run_in = to_ref(folder, cwd) if folder else cwd
    for name in [named] if named else list(BUILD_TOOLS[prog]):
        ref = to_ref(name, run_in)
        body = state.written.get(ref)
        if body is not None:
            if depth < 4:
                for line in build_commands(prog, body):
                    see_shell(line, run_in, state, seen, depth + 1)
            return
        if ref in state.made:
            seen.unseen.append(f"{name}, written at run time")
            return
    seen.scripts.append(Script(cwd=run_in, primitive=None))


def _see_script_file(script: str, cwd: Ref | None, state: State, seen: Seen,
                     argv: Sequence[str] = (), depth: int = 0, lang: Lang = "other") -> None:
    """A script file: what the answerer wrote into it, when the log shows it, is read as code run
    from the cwd (its paths are reads, wherever the script lives); else the script is unseen."""
    ref = to_ref(script, cwd)
    body = state.written.get(ref)
    if body is None:
        if ref in state.made:
            # `base64 -d > p.py && python3 p.py`: the answerer made it, the log hides its text
            seen.unseen.append(f"{script}, written at run time")
        else:
            seen.scripts.append(Script(cwd=cwd, primitive=None))
        return
    first = body.lstrip().split("\n", 1)[0]
    if lang == "shell" or script.endswith((".sh", ".bash")) or (
            first.startswith("#!") and first.rstrip().endswith("sh")):
        if depth < 4:
            see_shell(body, cwd, state, seen, depth + 1)
        return
    if lang == "other":
        lang = lang_of(script=script, body=body)
    _see_code(body, lang, cwd, state, seen, depth, argv, touch=True)


def _see_code(code: str, lang: Lang, cwd: Ref | None, state: State, seen: Seen, depth: int,
              argv: Sequence[str] = (), *, redirected: bool = False, touch: bool = False) -> None:
    """Interpreter code the log shows: its recursive walks and globs (rule 3, wherever it runs),
    the shell commands it runs, code it builds at run time (unseen), and, when it can read
    files, a script that may read from its cwd and the folders it names (`script-may-read`).
    `touch`: its path literals are reads too (a script file's body; inline code's are read as
    the command's words already)."""
    reading = read_code(code, lang, cwd)
    seen.sweeps.extend(reading.sweeps)
    for ref in reading.writes:
        state.made.add(ref)  # open('x.py', 'w'): made, and its text is not in the log
        state.written.pop(ref, None)
    for text in reading.shell:
        if depth < 4:
            see_shell(text, cwd, state, seen, depth + 1)
    if reading.dynamic:
        seen.unseen.append(f"{reading.dynamic}(...)")
    if touch:
        seen.touches.extend(embedded(reading.code, cwd, literals_path_like=True, runs=False))
    primitive = (may_read(reading.code) or ("<" if redirected else None)
                 or next(iter(reading.unrooted), None))
    if primitive:
        # What else it names may be read: not the walks and globs whose reach is known above.
        roots = [t.ref for t in embedded(reading.rest, cwd, literals_path_like=True) if not t.url]
        roots += [to_ref(a, cwd) for a in argv if a and not a.startswith("-")]
        seen.scripts.append(Script(cwd=cwd, primitive=primitive, roots=tuple(roots)))


# ------------------------------------------------------------------------------------ links

def _through_link(ref: Ref, links: dict[Ref, list[Ref]]) -> list[Ref]:
    """Where a path may really be when it runs through a link the answerer made earlier."""
    out: list[Ref] = []
    for link, targets in links.items():
        n = len(link.segs)
        if link.segs and ref.absolute == link.absolute and ref.segs[:n] == link.segs:
            out.extend(Ref(t.absolute, t.segs + ref.segs[n:]) for t in targets)
    return out


def follow_links(seen: Seen, links: dict[Ref, list[Ref]]) -> None:
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


def _remember_link(args: list[Word], cwd: Ref | None, state: State) -> None:
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
class Target:
    """Something a read must not reach: a protected folder or the model file."""

    label: str
    ref: Ref
    is_file: bool


def sweep_reaches(sweep: Sweep, target: Target, model_names: Sequence[str]) -> bool:
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
                  target: Target, model_names: Sequence[str]) -> bool:
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


def _filter_admits(pattern: str, target: Target, model_names: Sequence[str]) -> bool:
    """Whether a name filter (`*.py`, `cases.*`) could let a read take a file from the target.

    The target's contents may not be on this machine, so a filter is judged by the kinds of
    file a set, a run or a model holds: `*.py` cannot reach gold, `*.csv` or `*.jsonl` can. A
    name without an extension (a folder name, a type name) is assumed to admit.
    """
    pat = pattern.strip().lower().lstrip("!")
    if "/" in pat:
        pat = pat.rsplit("/", 1)[-1] or "*"
    names = list(model_names) if target.is_file else list(SENSITIVE_SAMPLES) + list(model_names)
    extensions = {name.rsplit(".", 1)[-1] for name in names}
    for expanded in brace_expand(pat):
        if "." not in expanded.strip("*"):
            return True
        if any(fnmatch.fnmatchcase(name, expanded) for name in names):
            return True
        if expanded.rsplit(".", 1)[-1] in extensions:
            return True  # `*.csv`, `orders.csv`: a data or gold file could have that name
    return False


def brace_expand(pattern: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    out: list[str] = []
    for option in m.group(1).split(","):
        out.extend(brace_expand(pattern[:m.start()] + option + pattern[m.end():]))
    return out
