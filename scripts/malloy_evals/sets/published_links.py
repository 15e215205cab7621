"""The symbolic links of a published set, carried into its import the way they were published.

A public set often reaches its tables through links: `model/data` and `truth/data` pointing at the
set's own `data/`, or `data` pointing at a package folder elsewhere in the repository it was
published in. The importer copies the set without following any link (core/files.copy_tree),
then decides each link here:

- a link whose target lies inside the published set folder is made again, at the same place in the
  imported set, as a relative link to the same place there (so it reaches the imported copy, never
  the source);
- a link whose target lies outside it is copied (the target's files, read without following a
  further link) only when the caller asked for it (`--copy-linked-data`); otherwise it is left out
  and named, with what to do;
- a link whose target does not exist is left out and named.

Targets are read lexically, one link at a time (`os.readlink`, joined to the link's own folder and
normalised), so a link to a link inside the set is made again as a link to that link.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from malloy_evals.core import files

REMADE = "re-made inside the imported set"
COPIED = "copied (it points outside the published set)"
LEFT_OUT = "left out (it points outside the published set)"
DANGLING = "left out (its target does not exist)"


@dataclass(frozen=True)
class LinkOutcome:
    """One link of the published set and what the import did with it."""

    path: str      # the link, relative to the set folder
    target: str    # what it points to, as written in the link
    action: str    # REMADE, COPIED, LEFT_OUT or DANGLING
    detail: str    # the link made, the folder copied, or what the author can do

    @property
    def carried(self) -> bool:
        return self.action in (REMADE, COPIED)

    def __str__(self) -> str:
        return f"{self.path} -> {self.target}: {self.action}; {self.detail}"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def carry_links(src: Path, dst: Path, links: list[str], *, copy_outside: bool) -> list[LinkOutcome]:
    """Decide every link `copy_tree` skipped (paths relative to `src`), making or copying into
    `dst` what the rules above allow."""
    root = os.path.normpath(os.path.abspath(src))
    real_root = os.path.realpath(src)
    outcomes: list[LinkOutcome] = []
    for rel in sorted(links):
        link = os.path.join(root, rel)
        try:
            written = os.readlink(link)
        except OSError as exc:
            outcomes.append(LinkOutcome(rel, "?", DANGLING, f"cannot be read ({exc.strerror})"))
            continue
        lexical = os.path.normpath(os.path.join(os.path.dirname(link), written))
        # A target reached through the set's real location (a set folder given through a link
        # of its own) is inside too.
        inside = _inside(lexical, root) or _inside(lexical, real_root)
        if not os.path.lexists(lexical):
            outcomes.append(LinkOutcome(rel, written, DANGLING,
                                        f"supply {rel} in the imported set yourself"))
            continue
        if inside:
            base = root if _inside(lexical, root) else real_root
            made = os.path.relpath(lexical, os.path.dirname(os.path.join(base, rel)))
            _make_link(dst, rel, made)
            outcomes.append(LinkOutcome(rel, written, REMADE, f"{rel} -> {made}"))
            continue
        real = os.path.realpath(lexical)
        if not copy_outside:
            outcomes.append(LinkOutcome(
                rel, written, LEFT_OUT,
                f"give --copy-linked-data to copy {real} into it, or put the data at {rel} "
                "yourself"))
            continue
        target = dst / rel
        if os.path.isdir(real):
            # The folder's own links are not followed: they belong to a tree outside the set.
            skipped = files.copy_tree(Path(real), target)
            outcomes.extend(LinkOutcome(f"{rel}/{p}", "?", LEFT_OUT,
                                        "inside a folder copied from outside the set; not "
                                        "followed") for p in skipped.links)
            outcomes.append(LinkOutcome(rel, written, COPIED, f"copied the folder {real}"))
        elif os.path.isfile(real):
            _copy_file(Path(real), dst, rel)
            outcomes.append(LinkOutcome(rel, written, COPIED, f"copied the file {real}"))
        else:
            outcomes.append(LinkOutcome(rel, written, LEFT_OUT,
                                        f"{real} is not a plain file or folder; not copied"))
    return sorted(outcomes, key=lambda o: o.path)


def _make_link(dst: Path, rel: str, target: str) -> None:
    """The link `rel` inside `dst`, pointing at `target` (relative), made in a folder reached
    without following links."""
    where = dst / rel
    with files.folder(where.parent, dst) as dir_fd:
        os.symlink(target, where.name, dir_fd=dir_fd)


def _copy_file(source: Path, dst: Path, rel: str) -> None:
    """A file from outside the set copied to `rel` in `dst`: created exclusively, never through a
    link, streamed (a table may be large)."""
    where = dst / rel
    with files.folder(where.parent, dst) as dir_fd, open(source, "rb") as fh:
        fd = os.open(where.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                     dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(fh, out, 1 << 20)
