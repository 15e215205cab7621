"""A small shell lexer: words, quotes, pipelines, heredocs, substitutions and arithmetic, never run."""

from __future__ import annotations

from dataclasses import dataclass, field

# What a command or process substitution stands for inside a word: text made at run time, which
# the log cannot show (`$(base64 -d <<< ...)`, `<(curl ...)`). Never part of a real command.
SUBST = "\x1a"


@dataclass
class Word:
    value: str = ""
    quoted: bool = False   # any part quoted: the shell does not glob-expand it
    glob: bool = False     # an unquoted *, ? or [
    started: bool = False
    dynamic: bool = False  # holds a command or process substitution (its value has SUBST)
    runs: list[str] = field(default_factory=list)  # the command text of each substitution


@dataclass
class Simple:
    """One simple command: its words, redirections and here-document bodies."""

    words: list[Word] = field(default_factory=list)
    redirects: list[tuple[str, Word]] = field(default_factory=list)
    stdin_text: list[str] = field(default_factory=list)
    piped_from: Simple | None = None  # `a | b`: b's stdin is a's stdout


@dataclass
class _Frame:
    """A command interrupted by a substitution (`$(`, `<(`, a backtick) or a group `(`."""

    kind: str                      # "subst", "tick" or "group"
    cur: Simple | None = None
    word: Word | None = None
    pending: list[str] | None = None
    start: int = 0                 # where the substitution's text starts


_OPS = ";&|()`\n"


def _closing(text: str, start: int, depth: int, opener: str = "(", closer: str = ")") -> int:
    """Index just past the closer that brings `depth` open brackets back to zero (quotes
    skipped), or len(text) when it never comes."""
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            j = text.find(c, i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == "\\":
            i += 2
            continue
        if c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _double_quoted(command: str, i: int, out: list[Simple],
                   runs: list[str]) -> tuple[str, int, bool]:
    """The text of a double-quoted string opening at command[i], the index after it, and whether
    it holds a substitution. `$(...)` and backticks inside are lexed on their own (their commands
    run too, and their text goes to `runs`) and stand in the text as SUBST; `$((...))`
    arithmetic is a number."""
    n = len(command)
    j = i + 1
    buf: list[str] = []
    dynamic = False
    while j < n and command[j] != '"':
        c = command[j]
        if c == "\\" and j + 1 < n and command[j + 1] in '"\\$`':
            buf.append(command[j + 1])
            j += 2
            continue
        if command.startswith("$((", j):
            j = _closing(command, j + 3, 2)
            buf.append("0")
            continue
        if command.startswith("$(", j):
            end = _closing(command, j + 2, 1)
            inner = command[j + 2:end - 1] if end <= n else command[j + 2:]
            runs.append(inner)
            out.extend(split_shell(inner))
            buf.append(SUBST)
            dynamic = True
            j = end
            continue
        if c == "`":
            end = command.find("`", j + 1)
            end = n if end < 0 else end
            runs.append(command[j + 1:end])
            out.extend(split_shell(command[j + 1:end]))
            buf.append(SUBST)
            dynamic = True
            j = end + 1
            continue
        buf.append(c)
        j += 1
    return "".join(buf), j + 1, dynamic


def split_shell(command: str) -> list[Simple]:
    """A lenient shell lexer: simple commands with quote-aware words, redirections, heredocs.

    Lists, subshells and substitutions are flattened into a sequence of simple commands; that is
    all the rules need (which programs run, on which paths, from where). A command substitution's
    commands come before the command that uses their output, whose word keeps a SUBST mark where
    the output goes; `a | b` records a as b's `piped_from`. Arithmetic (`$((a/b))`, `((x++))`,
    `$[a/b]`) is a number, never a command or a path.
    """
    out: list[Simple] = []
    cur = Simple()
    word = Word()
    pending_redirect: list[str] = []
    heredocs: list[tuple[str, bool, Simple]] = []
    stack: list[_Frame] = []
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
        word = Word()

    def end_command() -> Simple | None:
        nonlocal cur
        end_word()
        ended = None
        if cur.words or cur.redirects or cur.stdin_text:
            out.append(cur)
            ended = cur
        cur = Simple()
        return ended

    def open_subst(kind: str, start: int) -> None:
        nonlocal cur, word, pending_redirect
        stack.append(_Frame(kind, cur, word, pending_redirect, start))
        cur, word, pending_redirect = Simple(), Word(), []

    def close_subst(end: int) -> None:
        nonlocal cur, word, pending_redirect
        end_command()
        frame = stack.pop()
        assert frame.cur is not None and frame.word is not None and frame.pending is not None
        cur, word, pending_redirect = frame.cur, frame.word, frame.pending
        word.value += SUBST
        word.runs.append(command[frame.start:end])
        word.started = word.dynamic = True

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
            text, i, dynamic = _double_quoted(command, i, out, word.runs)
            word.value += text
            word.quoted = word.started = True
            word.dynamic = word.dynamic or dynamic
            continue
        elif c == "\\":
            if i + 1 < n and command[i + 1] != "\n":
                word.value += command[i + 1]
                word.quoted = word.started = True
            i += 2
            continue
        elif command.startswith("$((", i):
            i = _closing(command, i + 3, 2)
            word.value += "0"
            word.started = True
            continue
        elif command.startswith("$[", i):
            i = _closing(command, i + 2, 1, "[", "]")
            word.value += "0"
            word.started = True
            continue
        elif c == "$" and i + 1 < n and command[i + 1] == "(":
            open_subst("subst", i + 2)
            i += 2
            continue
        elif command.startswith("((", i) and not word.started and not cur.words:
            i = _closing(command, i + 2, 2)  # an arithmetic command: `(( x = a / b ))`
            continue
        elif c in "<>":
            if word.started and word.value.isdigit() and not word.quoted:
                word = Word()  # a file descriptor number (2>)
            else:
                end_word()
            j = i
            while j < n and command[j] in "<>&|-":
                j += 1
            op = command[i:j]
            i = j
            if op in ("<", ">") and i < n and command[i] == "(":
                open_subst("subst", i + 1)  # process substitution: a file made at run time
                i += 1
                continue
            if op.endswith("&") or op.startswith("&"):
                continue  # >&2, <&0: a descriptor, not a file
            base_op = op.rstrip("-") if op.startswith("<<") else op
            pending_redirect.append("<<-" if op == "<<-" else base_op)
            continue
        elif c == "`":
            if stack and stack[-1].kind == "tick":
                close_subst(i)
            else:
                open_subst("tick", i + 1)
        elif c == ")" and stack and stack[-1].kind == "subst":
            close_subst(i)
        elif c == "|":
            piped = not command.startswith("||", i)
            producer = end_command()
            if piped:
                cur.piped_from = producer
                i += 2 if command.startswith("|&", i) else 1
            else:
                i += 2
            continue
        elif c == "(":
            end_command()
            stack.append(_Frame("group"))
        elif c == ")":
            end_command()
            if stack and stack[-1].kind == "group":
                stack.pop()
        elif c in _OPS:
            end_command()
        else:
            word.value += c
            word.started = True
            if c in "*?[":
                word.glob = True
        i += 1
    while stack:
        if stack[-1].kind == "group":
            stack.pop()
        else:
            close_subst(n)  # an unclosed substitution still stands for run-time text
    end_command()
    return out
