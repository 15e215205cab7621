"""A small shell lexer: words, quotes, pipelines, heredocs and substitutions, never run."""

from __future__ import annotations

from dataclasses import dataclass, field


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
