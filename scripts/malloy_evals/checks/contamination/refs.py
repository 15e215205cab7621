"""Paths as a tool log names them: normalised segments, home and cwd, needles."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Literal, NamedTuple

from malloy_evals.core.errors import UsageError

MIN_NEEDLE_CHARS = 3


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
    home = implied_home(base) if base is not None else None
    if (text == "~" or text.startswith("~/")) and home:
        text = "/" + "/".join(home) + text[1:]
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


def implied_home(base: Ref) -> tuple[str, ...] | None:
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
