"""What interpreter code the log shows can reach: recursive walks and globs, shell commands it
runs, and code it assembles at run time (which the log cannot show)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from malloy_evals.checks.contamination.refs import Ref, to_ref
from malloy_evals.checks.contamination.touches import (
    QUOTED_RE,
    READ_PRIMITIVES,
    Sweep,
    glob_split,
)

Lang = str  # "python", "js", "ruby", "perl", "php", "r", "sql" or "other"

_LANG_OF_PROGRAM = {
    **dict.fromkeys(("python", "python2", "python3", "pypy", "pypy3", "ipython"), "python"),
    **dict.fromkeys(("node", "nodejs", "deno", "bun", "tsx", "ts-node"), "js"),
    "ruby": "ruby", "perl": "perl", "php": "php", "rscript": "r", "r": "r",
    **dict.fromkeys(("duckdb", "sqlite3", "psql"), "sql"),
}
_LANG_OF_SUFFIX = {
    ".py": "python", ".js": "js", ".mjs": "js", ".cjs": "js", ".ts": "js", ".rb": "ruby",
    ".pl": "perl", ".php": "php", ".r": "r", ".sql": "sql",
}


def lang_of(program: str = "", script: str = "", body: str = "") -> Lang:
    """The language of code, from the program running it, a script's suffix or its #! line."""
    if program.startswith("python"):
        return "python"
    if program in _LANG_OF_PROGRAM:
        return _LANG_OF_PROGRAM[program]
    first = body.lstrip().split("\n", 1)[0]
    if first.startswith("#!"):
        words = first[2:].replace("/", " ").split()
        for word in reversed(words):
            if word in _LANG_OF_PROGRAM or word.startswith("python"):
                return lang_of(word)
    suffix = "." + script.rsplit(".", 1)[-1].lower() if "." in script else ""
    return _LANG_OF_SUFFIX.get(suffix, "other")


@dataclass
class CodeReading:
    """What one piece of code can reach, read from its text."""

    sweeps: list[Sweep] = field(default_factory=list)   # recursive walks and globs it makes
    unrooted: list[str] = field(default_factory=list)   # walks whose root the text does not give
    shell: list[str] = field(default_factory=list)      # shell commands it runs (os.system, ...)
    writes: list[Ref] = field(default_factory=list)     # files it writes
    dynamic: str | None = None                          # code it builds and runs (exec, eval)
    code: str = ""  # the code without its comment lines
    rest: str = ""  # the same with the walks and globs read above blanked: what else it names


_LIT = r"""(?:[rRbBuUfF]{0,2})(?P<q>['"`])(?P<lit>(?:(?!(?P=q))[^\\\n]|\\.)*)(?P=q)"""
_LIT_RE = re.compile(_LIT)
_ASSIGN_RE = re.compile(
    r"(?:^|;)[ \t]*(?:(?:const|let|var|my|local|our)\s+)?[$@]?(?P<name>[A-Za-z_]\w*)[ \t]*"
    r"(?:=(?![=~])|<-)[ \t]*(?P<rhs>[^\n;]+)", re.MULTILINE)
# Expressions that name the working folder or the home folder.
_CWD_EXPR = re.compile(r"^(?:os\.getcwd\(\)|os\.curdir|(?:pathlib\.)?Path\.cwd\(\)|(?:pathlib\.)?"
                       r"Path\(\s*\)|process\.cwd\(\)|Dir\.pwd|getwd\(\)|Deno\.cwd\(\))")
_HOME_EXPR = re.compile(r"^(?:(?:pathlib\.)?Path\.home\(\)|os\.homedir\(\)|Dir\.home|"
                        r"os\.path\.expanduser\(\s*['\"]~['\"]\s*\)|process\.env\.HOME|"
                        r"os\.environ\[['\"]HOME['\"]\])")
_WRAP_RE = re.compile(r"^(?:(?:pathlib\.)?(?:Pure)?(?:Posix)?Path|os\.path\.(?:abspath|realpath|"
                      r"expanduser|normpath)|File\.expand_path|normalizePath|fs::path)\s*\(\s*")
# Calls that join their arguments into one path.
_JOIN_RE = re.compile(r"^(?:os\.path\.join|posixpath\.join|path\.join|path\.resolve|file\.path|"
                      r"File\.join|joinpath|fs::path)\s*\(\s*")
# Methods that leave a path where it is (`.resolve()`), trimmed off the end of an expression.
_SAME_PATH_RE = re.compile(r"\.\s*(?:resolve|absolute|expanduser|as_posix|toString|normalize)"
                           r"\s*\(\s*\)\s*$")
# Files code writes: the answerer made them, and what is in them is not in the log.
_WRITE_RE = re.compile(
    r"(?<![\w.$])open\s*\((?=[^)]*,\s*(?:mode\s*=\s*)?[rbf]?['\"][^'\"]*[wax])|"
    r"\.\s*write_(?:text|bytes)\s*\(|(?:fs\.)?(?:writeFileSync|writeFile|createWriteStream|"
    r"appendFileSync)\s*\(|File\.(?:write|open)\s*\((?=[^)]*,\s*['\"][wa])")
# Text a shell call runs that is made at run time: decoded, or read from the environment.
_RUNTIME_TEXT = re.compile(
    r"b64decode|decode64|decode_base64|base64|atob\s*\(|Buffer\.from|fromhex|unhexlify|codecs\.|"
    r"zlib\.|\[::-1\]|\bchr\s*\(|fromCharCode|rot13|\.decode\s*\(|\bpack\s*\(|environ|getenv|"
    r"sys\.argv|\binput\s*\(|stdin|process\.env|process\.argv|\bENV\s*\[|\bARGV\b|Sys\.getenv|"
    r"commandArgs", re.IGNORECASE)

# Calls that read every file below their root.
_WALK_RE = re.compile(
    r"(?<![\w.$])(?:(?:os|shutil)\.)?(?:f?walk|copytree|make_archive|Find\.find|find|"
    r"RecursiveDirectoryIterator|list\.dirs|dir_tree|walkSync|readdirp|klaw)\s*\(")
_MAYBE_RECURSIVE_RE = re.compile(r"(?<![\w$])(?:fs\.)?(?:readdir|readdirSync|opendir|list\.files|"
                                 r"dir|dir_ls|cp|cpSync)\s*\(")
_RECURSIVE_FLAG = re.compile(r"recursive\s*[:=]\s*(?:true|TRUE|T\b)|recurse\s*=\s*(?:TRUE|T\b)")
_PY_RECURSIVE = re.compile(r"recursive\s*=\s*True")
_PATH_METHOD_RE = re.compile(r"\.\s*(?P<m>rglob|glob|walk)\s*\(")
_GLOB_CALL_RE = re.compile(r"(?<![\w$])(?:glob\.i?glob|i?glob|glob\.sync|globSync|fs\.globSync|"
                           r"Dir\.glob|new\s+(?:Bun\.)?Glob|fg|fastGlob|fg\.sync)\s*\(|Dir\s*\[")
_SHELL_CALL_RE = re.compile(
    r"(?<![\w])(?:os\.system|os\.popen|subprocess\.(?:run|call|check_call|check_output|Popen|"
    r"getoutput|getstatusoutput)|execSync|execFileSync|spawnSync|spawn|child_process\.exec|"
    r"system|shell_exec|passthru|popen|exec)\s*\(\s*")
_DYNAMIC = {
    "python": re.compile(r"(?<![\w.])(?:exec|eval|compile)\s*\("),
    "js": re.compile(r"(?<![\w.$])eval\s*\(|\bnew\s+Function\s*\(|(?<![\w.$])Function\s*\(|"
                     r"\bvm\.run\w*|\brunIn(?:New|This)Context\b"),
    "ruby": re.compile(r"(?<![\w.])(?:eval|instance_eval|class_eval|module_eval)\b"),
    "perl": re.compile(r"(?<![\w$:>])eval\b(?!\s*\{)"),
    "php": re.compile(r"(?<![\w$])eval\s*\("),
    "r": re.compile(r"\beval\s*\(\s*parse\s*\("),
}


# How far a call's arguments are looked for, and how many calls of one kind are read: code
# past either bound is more than the kit reads, so it is unseen rather than slow.
_CALL_SPAN = 1000
_MAX_CALLS = 500
_MAX_PATH = 4096  # longer "paths" built in code are not followed


def _scan(text: str, start: int, depth: int,
          limit: int = _CALL_SPAN) -> Iterator[tuple[int, str, int]]:
    """Each character of code outside string literals, from `start` for at most `limit`
    characters, with the bracket depth before it."""
    i, n = start, min(len(text), start + limit)
    while i < n:
        c = text[i]
        if c in "'\"`":
            m = _LIT_RE.match(text, i)
            i = m.end() if m else i + 1
            continue
        yield i, c, depth
        depth += 1 if c in "([{" else -1 if c in ")]}" else 0
        i += 1


def _arguments(code: str, start: int) -> list[str]:
    """The top-level arguments of a call whose `(` ends just before `start`."""
    parts: list[str] = []
    begin, end = start, min(len(code), start + _CALL_SPAN)
    for i, c, depth in _scan(code, start, 1):
        if depth == 1 and c in ")]}":
            end = i
            break
        if depth == 1 and c == ",":
            parts.append(code[begin:i].strip())
            begin = i + 1
    parts.append(code[begin:end].strip())
    return [p for p in parts if p]


def _literal(expr: str) -> str | None:
    m = _LIT_RE.fullmatch(expr.strip())
    return m.group("lit") if m else None


def _root(expr: str, names: dict[str, str], depth: int = 0) -> str | None:
    """The path an expression names: a literal, a variable assigned one, the cwd (`.`) or the
    home (`~`), through `Path(...)`-style wrappers, `os.path.join(...)`-style calls, pathlib's `/`
    and string `+`; None when the text does not say."""
    text = re.sub(r"^[A-Za-z_]\w*\s*=(?!=)\s*", "", expr.strip())  # a keyword argument
    text = _SAME_PATH_RE.sub("", text).strip()
    if depth > 8 or not text:
        return None
    if text.startswith("(") and _call_end(text, 1) == len(text):
        return _root(text[1:-1], names, depth + 1)  # (Path('/') / 'repo')
    if _CWD_EXPR.fullmatch(text):
        return "."
    if _HOME_EXPR.fullmatch(text):
        return "~"
    parts = _split_top(text)
    if len(parts) > 1:
        rooted = [_root(part, names, depth + 1) for _op, part in parts]
        pieces = [v for v in rooted if v is not None]
        if len(pieces) < len(rooted):
            return None
        out = ""
        for (op, _part), value in zip(parts, pieces, strict=True):
            out = value if not out else (out + value if op == "+" else
                                         out.rstrip("/") + "/" + value.lstrip("/"))
        return out
    for pattern, joins in ((_JOIN_RE, True), (_WRAP_RE, False)):
        m = pattern.match(text)
        if m and _call_end(text, m.end()) == len(text):
            args = _arguments(text, m.end())
            if not args:
                return "."  # Path() is the cwd
            found = [_root(a, names, depth + 1) for a in (args if joins else args[:1])]
            values = [v for v in found if v is not None]
            if len(values) < len(found):
                return None
            return "/".join([v.rstrip("/") for v in values[:-1]] + values[-1:])
    m = _LIT_RE.fullmatch(text)
    if m:
        lit = m.group("lit")
        if "{" in lit and text[:2].lower() in ("f'", 'f"'):
            # f"{root}/sets": only names the code assigned a path
            filled = re.sub(r"\{(\w+)\}", lambda v: names.get(v.group(1), "\0"), lit)
            return None if "\0" in filled or "{" in filled else filled
        return lit
    return names.get(text)


def _split_top(text: str) -> list[tuple[str, str]]:
    """An expression split on its top-level `/` and `+`: [(operator before, operand), ...]."""
    parts: list[tuple[str, str]] = []
    begin, op = 0, ""
    for i, c, depth in _scan(text, 0, 0, len(text)):
        if c in "/+" and depth == 0 and text[i + 1:i + 2] not in ("/", "=", "+"):
            parts.append((op, text[begin:i].strip()))
            op, begin = c, i + 1
    parts.append((op, text[begin:].strip()))
    return parts if len(parts) > 1 and all(p for _o, p in parts) else [("", text)]


def _pattern_sweep(pattern: str, base: Ref | None, *, recursive: bool = True) -> Sweep:
    """A glob pattern as a sweep from its fixed folder; a non-recursive glob reads `**` as `*`."""
    if not recursive:
        pattern = re.sub(r"\*\*+", "*", pattern)
    fixed, rest = glob_split(pattern, base)
    return Sweep(root=fixed, pattern=rest, kind="glob")


def read_code(code: str, lang: Lang, cwd: Ref | None) -> CodeReading:
    """Walks, globs, shell commands and run-time code in interpreter code (or SQL)."""
    out = CodeReading()
    code = _without_comments(code, lang)
    names: dict[str, str] = {}
    for m in _ASSIGN_RE.finditer(code):
        value = _root(m.group("rhs"), names)
        if value is not None and len(value) <= _MAX_PATH:
            names[m.group("name")] = value
    handled: list[tuple[int, int]] = []  # calls fully read here: they say where they read

    def root_sweep(expr: str | None, what: str, pattern: tuple[str, ...] | None = None,
                   span: tuple[int, int] | None = None) -> None:
        root = _root(expr, names) if expr is not None else None
        if root is None:
            out.unrooted.append(what)
            return
        kind: Literal["glob", "recursive"] = "glob" if pattern is not None else "recursive"
        out.sweeps.append(Sweep(root=to_ref(root, cwd), pattern=pattern, kind=kind))
        if span is not None:
            handled.append(span)

    for m in _calls(_WALK_RE, code, out):
        args = _arguments(code, m.end())
        if "make_archive" in m.group(0):
            # make_archive(base_name, format, root_dir): the archive's name is not what it reads
            keyed = [a for a in args if re.match(r"root_dir\s*=", a)]
            args = keyed or args[2:3] or ["."]
        expr = next((a for a in args if _root(a, names) is not None), args[0] if args else None)
        root_sweep(expr, m.group(0).rstrip("( "), span=(m.start(), _call_end(code, m.end())))
    for m in _calls(_MAYBE_RECURSIVE_RE, code, out):
        args = _arguments(code, m.end())
        if args and any(_RECURSIVE_FLAG.search(a) for a in args[1:]):
            root_sweep(args[0], m.group(0).rstrip("( "),
                       span=(m.start(), _call_end(code, m.end())))
    for m in _calls(_PATH_METHOD_RE, code, out):
        receiver = _receiver(code, m.start())
        args = _arguments(code, m.end())
        pat = _root(args[0], names) if args else None
        at = code.rfind(receiver, 0, m.start()) if receiver else m.start()
        span = (at if at >= 0 else m.start(), _call_end(code, m.end()))
        if m.group("m") == "walk":
            if receiver is not None and receiver != "os":
                root_sweep(receiver, "walk", span=span)
            continue
        if receiver is None or pat is None or receiver in ("glob", "Dir", "fs", "fg"):
            continue
        segs = tuple(s for s in pat.replace("\\", "/").split("/") if s not in ("", "."))
        if m.group("m") == "rglob":
            segs = ("**", *segs)
        root_sweep(receiver, m.group("m"), segs, span=span)
    for m in _calls(_WRITE_RE, code, out):
        if m.group(0).lstrip(".").lstrip().startswith("write_"):
            target = _root(_receiver(code, m.start()) or "", names)
        else:
            args = _arguments(code, m.end())
            target = _root(args[0], names) if args else None
        if target is not None:
            out.writes.append(to_ref(target, cwd))
    called: set[str] = set()
    for m in _calls(_GLOB_CALL_RE, code, out):
        if m.group(0).endswith("["):
            end = code.find("]", m.end())
            args = [code[m.end():end]] if end >= 0 else []
        else:
            args = _arguments(code, m.end())
        pat = _root(args[0], names) if args else None
        if pat is None:
            continue
        called.add(pat)
        # glob('**/*.csv', root_dir='/repo'): the pattern is rooted there
        base_expr = next((a.split("=", 1)[1] for a in args[1:]
                          if re.match(r"(?:root_dir|cwd)\s*[=:]", a)), None)
        base_root = _root(base_expr, names) if base_expr is not None else None
        base = to_ref(base_root, cwd) if base_root is not None else cwd
        # Python's glob reads `**` as `*` unless told recursive=True; every other glob recurses.
        python_glob = lang == "python" and not _PY_RECURSIVE.search(code)
        out.sweeps.append(_pattern_sweep(pat, base, recursive=not python_glob))
        handled.append((m.start(), _call_end(code, m.end())))
    for lit in QUOTED_RE.finditer(code):
        text = next(g for g in lit.groups() if g is not None)
        if "/" in text and re.search(r"[*?]", text) and text not in called:
            # A path pattern anywhere else in code (DuckDB's read_csv('/repo/**/*.csv'), the same
            # inside a Python string): it reads where it is rooted.
            out.sweeps.append(_pattern_sweep(text, cwd))
    if lang in ("python", "js", "ruby", "perl", "php", "r", "other"):
        out.shell.extend(_shell_commands(code, lang, out))
        for m in _calls(_SHELL_CALL_RE, code, out):
            args = _arguments(code, m.end())
            if args and _literal(args[0]) is None and _RUNTIME_TEXT.search(args[0]) and not (
                    lang == "python" and m.group(0).startswith("exec")):
                # os.system(base64.b64decode(...)): a shell runs text made at run time
                out.dynamic = m.group(0).split("(")[0].strip()
    pattern = _DYNAMIC.get(lang)
    if pattern is not None:
        for m in _calls(pattern, code, out):
            args = _arguments(code, m.end()) if m.group(0).rstrip().endswith("(") else []
            if len(args) == 1 and _literal(args[0]) is not None:
                continue  # eval('1 + 2'): the text is in the log
            out.dynamic = m.group(0).strip().rstrip("(").strip()
            break
    rest = list(code)
    for start, end in handled:
        rest[start:end] = " " * (end - start)
    out.code, out.rest = code, "".join(rest)
    return out


_COMMENT_RE = {
    "#": re.compile(r"^\s*#(?!!).*$", re.MULTILINE),
    "//": re.compile(r"^\s*//.*$", re.MULTILINE),
    "--": re.compile(r"^\s*--.*$", re.MULTILINE),
}
_COMMENT_OF = {"python": "#", "ruby": "#", "perl": "#", "r": "#", "js": "//", "php": "//",
               "sql": "--"}


def _without_comments(code: str, lang: Lang) -> str:
    """The code without its whole-line comments (prose about a path is not a read of it)."""
    marker = _COMMENT_OF.get(lang)
    return _COMMENT_RE[marker].sub("", code) if marker else code


def _call_end(code: str, start: int) -> int:
    """The index after the `)` closing a call whose `(` ends just before `start`."""
    for i, c, depth in _scan(code, start, 1):
        if depth == 1 and c in ")]}":
            return i + 1
    return min(len(code), start + _CALL_SPAN)



def _calls(pattern: re.Pattern[str], code: str, out: CodeReading) -> Iterator[re.Match[str]]:
    """The calls a pattern finds, up to _MAX_CALLS; past that the code is unseen."""
    for k, m in enumerate(pattern.finditer(code)):
        if k == _MAX_CALLS:
            out.dynamic = out.dynamic or f"more than {_MAX_CALLS} calls of one kind"
            return
        yield m


def _receiver(code: str, dot: int) -> str | None:
    """The expression a method is called on (`Path('/repo')` in `Path('/repo').rglob(...)`)."""
    j = dot
    while j > 0 and code[j - 1].isspace():
        j -= 1
    end = j
    if j > 0 and code[j - 1] == ")":
        depth, k = 0, j - 1
        while k >= 0:
            if code[k] == ")":
                depth += 1
            elif code[k] == "(":
                depth -= 1
                if depth == 0:
                    break
            k -= 1
        j = max(k, 0)
    start = _name_start(code, j)
    text = code[start:end]
    return text if text and (text[0].isalpha() or text[0] in "_(") else None


def _name_start(code: str, end: int) -> int:
    """Where the dotted name ending at `end` starts."""
    i = end
    while i > 0 and (code[i - 1].isalnum() or code[i - 1] in "_."):
        i -= 1
    return i


def _shell_commands(code: str, lang: Lang, reading: CodeReading) -> list[str]:
    """Shell command lines the code hands to a shell: `os.system('grep -r x /repo')`,
    `subprocess.run(['grep', '-r', 'x', '/repo'])`, `execSync(...)`, Ruby and Perl backticks."""
    out: list[str] = []
    for m in _calls(_SHELL_CALL_RE, code, reading):
        name = m.group(0).split("(")[0].strip()
        if name == "exec" and lang == "python":
            continue  # Python's exec runs Python (a dynamic-code primitive, read elsewhere)
        args = _arguments(code, m.end())
        if not args:
            continue
        first = args[0]
        lit = _literal(first)
        if lit is not None:
            if name in ("spawn", "spawnSync", "execFileSync") and len(args) > 1:
                # spawn('grep', ['-r', 'x', '/repo']): a program and its argument list
                out.append(shlex.join([lit, *[x.group("lit") for x in _LIT_RE.finditer(args[1])]]))
            else:
                out.append(lit)
        elif first.startswith("["):
            items = [x.group("lit") for x in _LIT_RE.finditer(first)]
            if items:
                out.append(shlex.join(items))
    if lang in ("ruby", "perl", "php"):
        out.extend(m.group(1) for m in re.finditer(r"`([^`\n]+)`", code))
        out.extend(m.group(1) for m in re.finditer(r"%x\(([^)\n]+)\)|qx\(([^)\n]+)\)", code)
                   if m.group(1))
    return out


def may_read(code: str) -> str | None:
    """The first file-reading primitive in code (`open`, `readdirSync`, ...), or None."""
    m = READ_PRIMITIVES.search(code)
    return m.group(0).lstrip(".").strip() if m else None
