"""Which program a simple command runs, what it prints (when the log shows it), and the files
it writes: what lets a script the answerer wrote be read when it runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from malloy_evals.checks.contamination.refs import Ref, to_ref
from malloy_evals.checks.contamination.shell import SUBST, Simple, Word
from malloy_evals.checks.contamination.touches import State

_WRAPPERS = frozenset({"sudo", "env", "time", "nohup", "nice", "command", "exec", "builtin",
                       "stdbuf", "ionice", "timeout", "xargs", "then", "do", "else", "if",
                       "while", "until", "!", "{", "}"})
# Project runners whose `run` subcommand runs the program that follows.
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye"})


def program_of(words: list[Word]) -> tuple[str, list[Word]]:
    """The program a simple command runs (after wrappers and VAR=value), and its arguments."""
    i = 0
    while i < len(words):
        w = words[i]
        if not w.quoted and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w.value):
            i += 1
            continue
        base = w.value.rsplit("/", 1)[-1].lower()
        if base in _RUNNERS and i + 1 < len(words) and words[i + 1].value == "run":
            i += 2  # `uv run x.py`, `poetry run python ...`: the program is what follows
            while i < len(words) and words[i].value.startswith("-"):
                i += 1
            continue
        if base in _WRAPPERS:
            i += 1
            while i < len(words) and words[i].value.startswith("-"):
                i += 1
            if base == "timeout" and i < len(words):
                i += 1  # the duration
            continue
        return base, words[i + 1:]
    return "", []


@dataclass(frozen=True)
class Piped:
    """A command's stdin when it is the far end of a pipe: whether it is, and the text, when the
    log shows what the near end printed (`echo '...' | python3`); None when it was made at run
    time (`base64 -d`, `curl`)."""

    piped: bool = False
    text: str | None = None
    files: tuple[str, ...] = ()  # `cat a.sql | duckdb`: the files the near end printed


NO_PIPE = Piped()


def piped_into(simple: Simple, printed: dict[int, str | None]) -> Piped:
    """What reaches a command's stdin through a pipe: the near end's text when the log shows it,
    and the files it printed when it was a plain `cat FILE...`."""
    near = simple.piped_from
    if near is None:
        return NO_PIPE
    prog, args = program_of(near.words)
    files = tuple(a.value for a in args if not a.value.startswith("-")) if prog == "cat" else ()
    return Piped(True, printed.get(id(near)), files if not any(SUBST in f for f in files) else ())


def printed_output(simple: Simple, state: State, cwd: Ref | None, piped: Piped) -> str | None:
    """What a command prints, when the log shows it: echo and printf of literal words, cat of a
    here-document or of a file the log shows being written, tee passing its input on."""
    prog, args = program_of(simple.words)
    if any(a.dynamic for a in args):
        return None
    values = [a.value for a in args]
    if prog == "echo":
        words = [v for v in values if not re.fullmatch(r"-[neE]+", v)]
        text = " ".join(words)
        return _unescape(text) if any(re.fullmatch(r"-\w*e\w*", v) for v in values) else text
    if prog == "printf":
        if values[:1] == ["-v"]:
            return None  # printf -v VAR: into a variable, not stdout
        return _printf(values[0], values[1:]) if values else None
    if prog == "cat":
        files = [v for v in values if not v.startswith("-")]
        if not files:
            if simple.stdin_text:
                return "\n".join(simple.stdin_text)
            return piped.text if piped.piped else None
        bodies = [state.written.get(to_ref(f, cwd)) for f in files]
        return None if any(b is None for b in bodies) else "\n".join(b for b in bodies if b)
    if prog == "tee":
        return "\n".join(simple.stdin_text) if simple.stdin_text else piped.text
    return None


_ESCAPE_RE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{4}|0?[0-7]{1,3}|[abefnrtv\\'\"])")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"'}


def _unescape(text: str) -> str:
    """Backslash escapes as printf and `echo -e` print them: `\\x63\\141t` is `cat`."""
    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if code[0] in "xu":
            return chr(int(code[1:], 16))
        if code[0].isdigit():
            return chr(int(code, 8) % 256)
        return _SIMPLE_ESCAPES.get(code, code)
    return _ESCAPE_RE.sub(one, text)


def _printf(fmt: str, args: Sequence[str]) -> str:
    """What `printf FMT ARGS` prints: conversions filled from the arguments in turn (`%b`
    unescaping its argument), escapes in the format printed as characters."""
    rest = list(args)

    def fill(m: re.Match[str]) -> str:
        if m.group(1) == "%":
            return "%"
        value = rest.pop(0) if rest else ""
        return _unescape(value) if m.group(1) == "b" else value
    return re.sub(r"%[-+ #0-9.]*([a-zA-Z%])", fill, _unescape(fmt))


def _see_copies(operands: list[str], cwd: Ref | None, state: State) -> None:
    """`cp draft.malloy /tmp/s/shop.malloy`: a copy of files the answerer made is one too (into
    DEST, or DEST/<name> when DEST is a folder)."""
    if len(operands) < 2:
        return
    sources = [to_ref(src, cwd) for src in operands[:-1]]
    if not all(src in state.made for src in sources):
        return
    dest = operands[-1]
    for src_text, src in zip(operands[:-1], sources, strict=True):
        name = src_text.rstrip("/").rsplit("/", 1)[-1]
        for ref in (to_ref(dest, cwd), to_ref(f"{dest.rstrip('/')}/{name}", cwd)):
            state.made.add(ref)
            if src in state.written:
                state.written[ref] = state.written[src]


def only_writes(simple: Simple) -> bool:
    """`cat > f <<EOF` and `tee f <<EOF`: the here-document is text written to a file (a script,
    notes), not paths read; it is read when the file runs."""
    prog, args = program_of(simple.words)
    if prog == "tee":
        return True
    return prog == "cat" and not any(not a.value.startswith("-") for a in args) and any(
        op.startswith(">") for op, _w in simple.redirects)


def made_at_run_time(text: str) -> bool:
    """Whether a word is only run-time text: a substitution, or a variable the log never set."""
    bare = text.strip().strip('"')
    return bool(bare) and (not bare.replace(SUBST, "").strip("/ ")
                           or re.fullmatch(r"\$(?:\{[A-Za-z_]\w*\}|[A-Za-z_]\w*|[@*0-9])", bare)
                           is not None)


def see_writes(simple: Simple, cwd: Ref | None, state: State, piped: Piped) -> None:
    """Files a command creates, and their text when the log shows it: `cat > a.py <<EOF`,
    `echo '...' > a.py`, `printf ... >> a.py`, `... | tee a.py`."""
    prog, args = program_of(simple.words)
    text = printed_output(simple, state, cwd, piped) if prog in ("cat", "echo", "printf", "tee") else None
    targets = [(op, w.value) for op, w in simple.redirects if op.startswith(">")]
    if prog == "tee":
        targets += [(">>" if any(a.value in ("-a", "--append") for a in args) else ">", a.value)
                    for a in args if not a.value.startswith("-")]
    if prog in ("curl", "wget"):
        # a download: the answerer made the file, and its text is not in the log
        values = [a.value for a in args]
        for k, v in enumerate(values[:-1]):
            if v in ("-o", "--output", "-O", "--output-document") and values[k + 1] != "-":
                targets.append((">", values[k + 1]))
    if prog in ("cp", "mv", "install"):
        _see_copies([a.value for a in args if not a.value.startswith("-")], cwd, state)
    for op, target in targets:
        ref = to_ref(target, cwd)
        if op == ">" or op == ">|":
            state.made.add(ref)
        if text is None:
            state.written.pop(ref, None)  # its text now comes from a run the log cannot show
        else:
            earlier = state.written.get(ref, "") if op == ">>" else ""
            state.written[ref] = earlier + ("\n" if earlier else "") + text


# Tools whose printed shell code only sets up the environment (`eval "$(pyenv init -)"`,
# `source <(kubectl completion bash)`): what they print is the tool's, not the answerer's.
_ENV_SETUP_RE = re.compile(
    r"^(?:ssh-agent|gpg-agent|keychain|(?:py|rb|nod|j|go|pl)env\s+(?:init|virtualenv-init)|"
    r"(?:conda|micromamba|mamba)\s+shell\.?\S*\s+hook|\S+\s+shell\s+hook|direnv\s+(?:export|hook)|"
    r"brew\s+shellenv|dircolors|opam\s+env|luarocks\s+path|fnm\s+env|(?:mise|rtx)\s+activate|"
    r"zoxide\s+init|starship\s+init|register-python-argcomplete|\S+\s+completion|"
    r"\S+\s+generate-shell-completion|docker-machine\s+env|minikube\s+docker-env)\b")
# Scripts sourced to set up a shell: an environment's activate, rc and profile files.
ENV_SCRIPT_RE = re.compile(r"(?:^|/)(?:activate(?:\.\w+)?|\.?\w*rc|\.?\w*profile|\.env(?:\.\w+)?|"
                            r"env\.sh)$")


def sets_up_the_environment(words: Sequence[Word]) -> bool:
    """Whether every substitution in these words runs an environment-setup tool."""
    runs = [r for w in words for r in w.runs]
    if not runs:
        return False
    for run in runs:
        text = run.strip()
        head, _, rest = text.partition(" ")
        if not _ENV_SETUP_RE.match((head.rsplit("/", 1)[-1] + " " + rest).strip()):
            return False
    return True
