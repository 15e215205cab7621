"""Writing files under a folder without ever following a link planted there.

A run folder holds files other programs wrote (transcripts, host replies, anything a user or an
answerer left in it). A symbolic link among them, even a dangling one, must never turn a write of
the kit's into a write somewhere else. Every writer under a run goes through this module:

- folders are walked one component at a time from the root (`root`: the run folder), each opened
  with O_NOFOLLOW relative to the one before, and created when missing; a component that is a
  link (or not a folder) stops the write with an InputError naming it;
- a new file is created exclusively (O_CREAT | O_EXCL, which never follows a link either);
- a file that is rewritten (run.json, summary.json, RESULTS.md, a page) is written to a fresh
  temporary file beside it and renamed over it (a rename replaces a link, never writes through it);
- an append (events.jsonl) opens the file with O_NOFOLLOW, and refuses one with another hard
  link (a second name of a file that may live elsewhere) or that is not a plain file.

The root itself is taken as given: a run folder reached through a link the user chose is fine.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from malloy_evals.core.errors import InputError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
LINK_MESSAGE = "is a symbolic link or not a folder: the kit never writes through a link (remove it)"


def _parts(path: Path, root: Path) -> list[str]:
    """`path`'s components below `root`; refuses a path outside it or with `..` in it."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        raise InputError(path, None, f"is outside {root}; the kit writes only inside it") from None
    parts = list(rel.parts)
    if any(p in ("..", ".", "") for p in parts):
        raise InputError(path, None, "is not a plain path below its folder")
    return parts


def clipped(text: str, limit: int = 80) -> str:
    """A name from outside quoted in a message, cut to `limit` characters."""
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


def inside(root: Path, relative: str, where: str) -> Path:
    """`relative` (a path recorded in a file) resolved under `root`, links followed; InputError
    when it holds a NUL byte, is absolute, cannot be resolved, or lands outside `root` (`where`
    names the root in the message: "the run folder", "the set folder"). The one containment rule
    for paths the kit reads from its own folders."""
    shown = clipped(relative)
    if "\x00" in relative:
        raise InputError(relative, None, f"{shown} is not a file name (it holds a NUL byte)")
    if Path(relative).is_absolute():
        raise InputError(relative, None, f"{shown} must be relative to {where}")
    try:
        base = Path(root).resolve()
        target = (base / relative).resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise InputError(relative, None, f"{shown} cannot be resolved: "
                                        f"{getattr(exc, 'strerror', None) or exc}") from None
    if not target.is_relative_to(base):
        raise InputError(relative, None, f"{shown} is outside {where}")
    return target


@contextlib.contextmanager
def folder(directory: Path, root: Path | None = None, *, create: bool = True) -> Iterator[int]:
    """An fd of `directory`, reached from `root` (default: the directory itself) one component at
    a time without following links, creating missing ones when `create`."""
    directory = Path(directory)
    root = Path(root) if root is not None else directory
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(root, None, f"cannot be opened as a folder: {exc.strerror}") from None
    walked = Path(root)
    try:
        for name in _parts(directory, root):
            walked = walked / name
            try:
                child = _open_dir(name, fd, create)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise InputError(walked, None, LINK_MESSAGE) from None
                raise InputError(walked, None, f"cannot be opened: {exc.strerror}") from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_dir(name: str, dir_fd: int, create: bool) -> int:
    """Open the folder `name` inside `dir_fd` without following a link, making it when missing."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # another writer may make it at the same moment
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _write_all(fd: int, payload: bytes, sync: bool = True) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]
    if sync:
        os.fsync(fd)


def _bytes(data: bytes | str) -> bytes:
    # backslashreplace: a lone surrogate (no UTF-8 form) is written as its \\uXXXX escape, which
    # inside a JSON string is that same character; every other character is plain UTF-8.
    return data.encode("utf-8", "backslashreplace") if isinstance(data, str) else bytes(data)


def numbered(name: str, n: int) -> str:
    """`prediction.csv` -> `prediction.2.csv`; `judge` -> `judge.2` (n >= 2)."""
    base, dot, ext = name.partition(".")
    return f"{base}.{n}{dot}{ext}" if dot else f"{name}.{n}"


def create_new(path: Path, data: bytes | str, root: Path | None = None, *,
               number: bool = False, sync: bool = True) -> Path | None:
    """Create `path` with `data`, never overwriting and never through a link.

    An existing `path` gives None, or with `number`, the next free `x.2.ext`, `x.3.ext`, ...
    (the path written is returned). A link in `path`'s place is refused, not taken as "exists".
    `sync` flushes the file to disk before returning (evidence a later step relies on).
    """
    path = Path(path)
    payload = _bytes(data)
    with folder(path.parent, root if root is not None else path.parent) as dir_fd:
        n = 1
        while True:
            name = path.name if n == 1 else numbered(path.name, n)
            try:
                fd = os.open(name, _NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd)
            except FileExistsError:
                if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    raise InputError(path.parent / name, None, LINK_MESSAGE) from None
                if not number:
                    return None
                n += 1
                continue
            try:
                _write_all(fd, payload, sync)
            finally:
                os.close(fd)
            return path.parent / name


def replace(path: Path, data: bytes | str, root: Path | None = None, *,
            sync: bool = True) -> Path:
    """Write `path` whole: a fresh temporary file beside it, renamed over it (readers never see
    half a file, and a link in its place is replaced, never written through). `sync: False`
    skips flushing it to disk first (a page among thousands that is written again on demand)."""
    path = Path(path)
    payload = _bytes(data)
    with folder(path.parent, root if root is not None else path.parent) as dir_fd:
        tmp = f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        fd = os.open(tmp, _NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd)
        try:
            _write_all(fd, payload, sync)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    return path


def make_new_dir(path: Path, root: Path, *, number: bool = True) -> Path:
    """Create the folder `path` (or `x.2`, `x.3`, ... when taken), never through a link."""
    path = Path(path)
    with folder(path.parent, root) as dir_fd:
        n = 1
        while True:
            name = path.name if n == 1 else numbered(path.name, n)
            try:
                os.mkdir(name, 0o755, dir_fd=dir_fd)
            except FileExistsError:
                if not number:
                    raise InputError(path, None, "already exists") from None
                n += 1
                continue
            return path.parent / name


def open_append(path: Path, root: Path) -> int:
    """An fd of `path` opened for reading and appending (created when missing), never through a
    link; the caller closes it."""
    path = Path(path)
    with folder(path.parent, root, create=False) as dir_fd:
        try:
            fd = os.open(path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC | os.O_NONBLOCK, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InputError(path, None, LINK_MESSAGE) from None
            raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        # A hard link is a second name for a file that may live outside the run (a FIFO or a
        # device is no ledger either): appending to it would write there.
        os.close(fd)
        raise InputError(path, None, "is not a plain file of its own (a hard link, a pipe or a "
                                     "device): the kit never appends to one")
    os.set_blocking(fd, True)
    return fd


@dataclass(frozen=True)
class CopySkipped:
    """What copy_tree left out: symbolic links (never followed) and entries that are not plain
    files or folders (a pipe, a socket, a device), by path relative to the source."""

    links: list[str]
    special: list[str]


def copy_tree(source: Path, target: Path) -> CopySkipped:
    """Copy the folder `source` into the folder `target` (made when missing; both roots taken as
    given) without following a link on either side: each folder below is opened relative to its
    parent without following links, each file is read without following a link and created
    exclusively. Links and special files are skipped and returned, never copied."""
    skipped = CopySkipped([], [])
    Path(target).mkdir(parents=True, exist_ok=True)
    src_fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with folder(Path(target)) as dst_fd:
            _copy_level(src_fd, dst_fd, Path(), skipped)
    except OSError as exc:  # something appeared in the copy's place meanwhile (a link included)
        raise InputError(target, None, f"cannot copy into it: {exc.strerror or exc}") from None
    finally:
        os.close(src_fd)
    skipped.links.sort()
    skipped.special.sort()
    return skipped


def _copy_level(src_fd: int, dst_fd: int, rel: Path, skipped: CopySkipped) -> None:
    for entry in sorted(os.scandir(src_fd), key=lambda e: e.name):
        where = str(rel / entry.name)
        if entry.is_symlink():
            skipped.links.append(where)
        elif entry.is_dir(follow_symlinks=False):
            child_src = os.open(entry.name, _DIR_FLAGS, dir_fd=src_fd)
            try:
                child_dst = _open_dir(entry.name, dst_fd, create=True)
                try:
                    _copy_level(child_src, child_dst, rel / entry.name, skipped)
                finally:
                    os.close(child_dst)
            finally:
                os.close(child_src)
        elif not (entry.is_file(follow_symlinks=False) and _copy_file(entry.name, src_fd, dst_fd)):
            skipped.special.append(where)


def _copy_file(name: str, src_fd: int, dst_fd: int) -> bool:
    """Copy one plain file between two folder fds; False (nothing written) when it is not one."""
    fd_in = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                    dir_fd=src_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd_in).st_mode):  # swapped for a pipe since it was listed
            return False
        os.set_blocking(fd_in, True)
        fd_out = os.open(name, _NEW_FILE_FLAGS, 0o644, dir_fd=dst_fd)
        try:
            while os.sendfile(fd_out, fd_in, None, 1 << 20):
                pass
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)
    return True


def is_real_dir(path: Path) -> bool:
    """True for a folder that is not a link (a link to a folder is False)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def cannot_write(path: Path, *, append: bool = False) -> str | None:
    """Why the kit could not write `path` now (None when it could), checked without writing it,
    so a command that makes several writes can check them all before it makes any: a rewrite
    (`replace`) needs a folder it may create files in and no folder in the file's place; an
    append (`append=True`) needs a plain file it may write."""
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        return f"{parent}: not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent}: not writable"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISDIR(st.st_mode):
        return f"{path}: a folder stands where the file goes"
    if append and not stat.S_ISREG(st.st_mode):
        return f"{path}: not a plain file"
    if append and not os.access(path, os.W_OK):
        return f"{path}: not writable"
    return None
