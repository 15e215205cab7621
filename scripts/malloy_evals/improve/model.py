"""The model folder under improvement: its digest, its checkpoint, restoring it, and a change's diff.

A checkpoint is always a byte-for-byte copy inside the journal (`checkpoint/`) with the digest of
the folder it copied; when the model lives in a git repository, the checkpoint is also a commit
there (the model's own paths only, so nothing else a person had staged is swept in). Rollback
restores the copy, then checks the digest: the folder is byte for byte what it was at start.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from malloy_evals.core.errors import InputError, UnmeasuredError

CHECKPOINT_DIR = "checkpoint"
# Files a change is read from: the Malloy sources and the package's own text files.
TEXT_SUFFIXES = (".malloy", ".malloynb", ".json", ".md", ".txt", ".yaml", ".yml")


def _entries(folder: Path) -> list[tuple[str, Path]]:
    """Every entry below `folder` (relative posix path, path), sorted; links not followed."""
    out = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(names) + [d for d in dirs if (Path(root) / d).is_symlink()]:
            path = Path(root) / name
            out.append((path.relative_to(folder).as_posix(), path))
    return sorted(out)


def folder_digest(folder: str | Path) -> str:
    """sha256 over every file's relative path and bytes (a link: its target text), sorted."""
    d = Path(folder)
    if not d.is_dir():
        raise InputError(d, None, "not a folder")
    h = hashlib.sha256()
    for rel, path in _entries(d):
        h.update(rel.encode("utf-8") + b"\0")
        if path.is_symlink():
            h.update(b"link\0" + os.readlink(path).encode("utf-8", "surrogateescape"))
        else:
            h.update(b"file\0" + path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def text_files(folder: Path) -> dict[str, str]:
    """Relative path -> text of the folder's text files (what a diff and the checks read)."""
    out = {}
    for rel, path in _entries(folder):
        if path.is_symlink() or not rel.endswith(TEXT_SUFFIXES):
            continue
        try:
            out[rel] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return out


def unified_diff(before: Path, after: Path) -> str:
    """The change from `before` to `after` as a unified diff over their text files."""
    a, b = text_files(before), text_files(after)
    chunks: list[str] = []
    for rel in sorted(set(a) | set(b)):
        if a.get(rel) == b.get(rel):
            continue
        chunks.extend(difflib.unified_diff(
            (a.get(rel) or "").splitlines(keepends=True), (b.get(rel) or "").splitlines(keepends=True),
            fromfile=f"a/{rel}" if rel in a else "/dev/null",
            tofile=f"b/{rel}" if rel in b else "/dev/null"))
    return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)


def added_lines(diff: str) -> list[str]:
    """The lines a diff adds (without the leading `+`)."""
    return [line[1:] for line in diff.splitlines() if line.startswith("+")
            and not line.startswith("+++")]


def copy_folder(source: Path, target: Path) -> None:
    """Replace `target` with a byte-for-byte copy of `source` (links copied as links)."""
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, symlinks=True)


def restore_into(source: Path, target: Path) -> None:
    """Make the folder `target` hold exactly what `source` holds, keeping `target` itself (a
    repository's working tree keeps its folder): files not in `source` are removed."""
    wanted = {rel for rel, _ in _entries(source)}
    for rel, path in reversed(_entries(target)):
        if rel not in wanted:
            path.unlink()
    for root, dirs, _names in os.walk(target, topdown=False):
        for d in dirs:
            p = Path(root) / d
            if not p.is_symlink() and not any(p.iterdir()):
                p.rmdir()
    for rel, path in _entries(source):
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        if path.is_symlink():
            os.symlink(os.readlink(path), dest)
        else:
            shutil.copy2(path, dest)


# ---------------------------------------------------------------------------------------------
# git, when the model lives in a repository


@dataclass(frozen=True)
class GitRepo:
    """The repository a model folder lives in."""

    root: Path
    pathspec: str   # the model folder relative to the root

    def _git(self, *args: str, check: bool = True) -> str:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        proc = subprocess.run(["git", "-C", str(self.root), *args], capture_output=True,
                              text=True, check=False, env=env)
        if check and proc.returncode != 0:
            raise UnmeasuredError(f"git {' '.join(args[:2])} in {self.root} failed: "
                                  f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
        return proc.stdout.strip()

    def head(self) -> str | None:
        out = self._git("rev-parse", "--verify", "-q", "HEAD", check=False)
        return out or None

    def dirty(self) -> bool:
        """Whether the model folder differs from HEAD (untracked files included)."""
        return bool(self._git("status", "--porcelain", "--untracked-files=all", "--",
                              self.pathspec))

    def commit(self, message: str) -> str:
        """Commit the model folder's state (its paths only) and return HEAD; when nothing
        changed, HEAD as it is."""
        if self.dirty() or self.head() is None:
            self._git("add", "-A", "--", self.pathspec)
            identity = []
            if not self._git("config", "user.email", check=False):
                identity = ["-c", "user.name=malloy-evals improve",
                            "-c", "user.email=improve@localhost"]
            self._git(*identity, "commit", "-q", "--allow-empty", "-m", message, "--",
                      self.pathspec)
        head = self.head()
        assert head is not None
        return head


def git_repo(folder: Path) -> GitRepo | None:
    """The git repository `folder` lives in, or None (no git, or not in a work tree)."""
    if shutil.which("git") is None:
        return None
    proc = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    root = Path(proc.stdout.strip()).resolve()
    rel = folder.resolve().relative_to(root).as_posix()
    return GitRepo(root, rel or ".")
