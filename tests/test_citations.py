"""The repository cites only what it ships.

Every tracked file (`git ls-files`) is read for citations of documents, and each must be in the
tree:
- the product contract the kit was first built from is not shipped, so it is never cited by
  name (`SPEC`, `SPEC 5.3`, `SPEC.md`): the rules a reader needs are written in `reference/`;
- a relative Markdown link (`[text](path)`, in a .md file) resolves from the file's own folder,
  as a reader's click would;
- a `.md` path, in backticks or written out with a folder (`reference/judge.md`), names a file
  of the tree: a path with a folder matches the end of a tracked path (so `reference/x.md` said
  inside a skill may mean that skill's reference folder), a bare name matches a tracked file's
  name. Placeholders and patterns (`<set>`, `*`, `{`, `$`) are not paths and are left alone,
  and neither are the files the kit writes into a run folder (`RESULTS.md`, `COMPARE.md`).
  Data files (JSON, JSON lines, CSV) and test code hold paths, not citations: there only the
  contract's name is looked for.

This file is the one place that spells the contract's name out, to test the checker.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

KIT = Path(__file__).resolve().parents[1]

SPEC_NAME = re.compile(r"\bSPEC\b|\bSPEC\.md\b", re.IGNORECASE)
_SPEC_WORD = re.compile(r"\bSPEC\b")              # the upper-case word itself
_SPEC_FILE = re.compile(r"\bspec\.md\b", re.IGNORECASE)
MD_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
TICKED_MD = re.compile(r"`([^`\s]+\.md)(?:#[^`\s]*)?`")
BARE_MD = re.compile(r"(?<![\w/.~-])((?:\.{1,2}/)*[\w.-]+(?:/[\w.-]+)+\.md)\b")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
NOT_A_PATH = re.compile(r"[<>*{}$%]")
SCHEMES = ("http:", "https:", "mailto:", "file:", "data:")
# Files the kit writes into a run or comparison folder: named in the docs, never shipped.
WRITTEN = frozenset({"RESULTS.md", "COMPARE.md"})
# Data and test code: their `.md` strings are paths they make or record, not citations.
PATHS_NOT_CITATIONS = (".json", ".jsonl", ".csv")
THIS_FILE = Path(__file__).resolve().relative_to(KIT).as_posix()


def tracked_files() -> list[str]:
    """The tracked files, as paths relative to the kit (POSIX); the tree's files outside git."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=KIT, capture_output=True, check=False)
    if done.returncode == 0 and done.stdout:
        return sorted(p for p in done.stdout.decode("utf-8").split("\0") if p)
    skip = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache",
            ".pytest_cache", ".hypothesis", ".benchmarks"}
    out = []
    for root, dirs, files in os.walk(KIT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        out += [Path(root, f).relative_to(KIT).as_posix() for f in files]
    return sorted(out)


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class Tree:
    """What counts as in the tree: every tracked path, its names, its folders."""

    def __init__(self, paths: Iterable[str]):
        self.paths = set(paths)
        self.names = {PurePosixPath(p).name for p in self.paths}
        self.dirs = {str(parent) for p in self.paths for parent in PurePosixPath(p).parents}

    def exists(self, relative: str) -> bool:
        norm = os.path.normpath(relative).replace(os.sep, "/")
        return norm in self.paths or norm in self.dirs or norm == "."

    def names_a_file(self, cited: str) -> bool:
        """A cited `.md` path: a bare name is any tracked file's name; a path with a folder is
        the end of a tracked path (leading ./ and ../ dropped)."""
        parts = [s for s in PurePosixPath(cited).parts if s not in (".", "..")]
        if not parts:
            return True
        if parts[-1] in WRITTEN:
            return True
        if len(parts) == 1:
            return parts[0] in self.names
        tail = "/".join(parts)
        return any(p == tail or p.endswith("/" + tail) for p in self.paths)


def citation_problems(name: str, text: str, tree: Tree) -> list[str]:
    """Every citation in `text` (the file `name`, relative to the kit) of what is not in the
    tree, as `name:line: what`."""
    problems: list[str] = []
    folder = PurePosixPath(name).parent
    is_markdown = name.endswith(".md")
    check_paths = not (name.endswith(PATHS_NOT_CITATIONS) or name.startswith("tests/"))
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{name}:{number}"
        for m in _SPEC_WORD.finditer(line):
            problems.append(f"{where}: cites {m.group(0)} (not shipped; cite reference/*.md)")
        for m in _SPEC_FILE.finditer(line):
            problems.append(f"{where}: cites {m.group(0)} (not shipped; cite reference/*.md)")
        if is_markdown:
            for m in MD_LINK.finditer(line):
                target = m.group(1)
                if target.startswith(("#", "/")) or target.lower().startswith(SCHEMES):
                    continue
                path = target.split("#", 1)[0].split("?", 1)[0]
                if path and not NOT_A_PATH.search(path) and not tree.exists(str(folder / path)):
                    problems.append(f"{where}: link to {target}, which is not in the tree")
        if not check_paths:
            continue
        plain = URL.sub(" ", line)
        cited = {m.group(1) for m in TICKED_MD.finditer(plain)}
        cited |= {m.group(1) for m in BARE_MD.finditer(plain)}
        for path in sorted(cited):
            if not NOT_A_PATH.search(path) and not tree.names_a_file(path):
                problems.append(f"{where}: names {path}, which is not in the tree")
    return problems


# ------------------------------------------------------------------------------------------
# the tree


def test_no_tracked_file_cites_a_document_the_tree_does_not_hold():
    paths = tracked_files()
    tree = Tree(paths)
    problems = []
    for name in paths:
        if name == THIS_FILE:
            continue
        text = _text(KIT / name)
        if text is not None:
            problems += citation_problems(name, text, tree)
    assert problems == [], "\n".join(problems)


def test_the_reference_folder_holds_the_rules_the_library_cites():
    for page in ("contamination.md", "scoring.md", "judge.md", "providers.md", "coverage.md",
                 "endpoint.md", "run-summary.md", "library.md", "ledger-schema.md"):
        assert (KIT / "reference" / page).is_file(), page


# ------------------------------------------------------------------------------------------
# the checker, on text made here

TREE = Tree(["reference/judge.md", "reference/schemas/score.schema.json", "README.md",
             "skills/eval-judge/reference/agreement-phrases.md", "skills/eval-judge/SKILL.md",
             "scripts/malloy_evals/judge/verdict.py"])


def problems_in(text: str, name: str = "reference/page.md") -> list[str]:
    """The problems the checker finds in `text`, as if it were the tracked file `name`."""
    return citation_problems(name, text, TREE)


def test_the_contract_cited_by_name_or_section_is_found():
    for text in ("the order of SPEC 5.5", "(SPEC 3 rule 1)", "see SPEC.md", "where SPEC is silent",
                 "read spec.md first"):
        assert problems_in(text, "scripts/x.py"), text


def test_ordinary_words_that_contain_or_resemble_spec_are_not_citations():
    for text in ("UNDERSPECIFIED", "the provider spec", "--judge SPECTRUM", "a SPECIAL case",
                 "specs and specifics", "RESPECT", "INSPECT_MAX_BYTES", "spec.json"):
        assert problems_in(text, "scripts/x.py") == [], text


def test_a_relative_link_resolves_from_the_page_folder():
    assert problems_in("[judge](judge.md) and [schema](schemas/score.schema.json)") == []
    assert problems_in("[root](../README.md#exit-codes)") == []
    assert problems_in("[gone](rules.md)") == [
        "reference/page.md:1: link to rules.md, which is not in the tree"]
    # A link is resolved from the page's folder, not from the kit's root.
    assert problems_in("[wrong base](reference/judge.md)")


def test_urls_anchors_and_placeholders_are_not_checked_as_paths():
    text = ("[site](https://example.com/SOMETHING.md) [top](#layout) "
            "`evals/<set>/README.md` `recordings/*/README.md` https://host/docs/missing.md")
    assert problems_in(text) == []


def test_a_named_md_path_must_be_a_file_of_the_tree():
    assert problems_in("see reference/judge.md", "scripts/x.py") == []
    assert problems_in("`reference/agreement-phrases.md`", "scripts/x.py") == []  # a skill's
    assert problems_in("`SKILL.md` and `README.md`", "scripts/x.py") == []
    assert problems_in("see reference/rules.md", "scripts/x.py") == [
        "scripts/x.py:1: names reference/rules.md, which is not in the tree"]
    assert problems_in("`NOTES.md`", "scripts/x.py") == [
        "scripts/x.py:1: names NOTES.md, which is not in the tree"]


def test_markdown_link_syntax_outside_markdown_files_is_not_a_link():
    assert problems_in("out = f'[{text}]({href})'", "scripts/x.py") == []


def test_files_the_kit_writes_are_named_freely_and_data_holds_paths_not_citations():
    assert problems_in("writes `RESULTS.md` and runs/r1/RESULTS.md, compare/COMPARE.md") == []
    assert problems_in('{"path": "notes/todo.md"}', "evals/x/events.jsonl") == []
    assert problems_in('{"why": "SPEC 5.3"}', "evals/x/events.jsonl")  # the name, everywhere
    assert problems_in("tmp / 'skills/alpha/SKILL.md'", "tests/test_x.py") == []


# ------------------------------------------------------------------------------------------
# SKILL.md files: every path they name resolves from the skill's own folder

# A path a SKILL.md names for a reader: in backticks or as a link target, beginning with one of
# the kit's own folders or `../`. Command lines (backticked with spaces) run from the kit's root,
# and data paths (`evals/...`, `<run>/...`) name what a run or a set holds: neither is a file the
# skill ships beside itself.
SKILL_PATH = re.compile(r"`([^`\s]+)`|\]\(\s*([^)\s#]+)")
SHIPPED_PREFIXES = ("../", "reference/", "scripts/", "skills/")


def skill_path_problems(skill_md: str, text: str, tree: Tree) -> list[str]:
    """Every shipped path a SKILL.md names that does not resolve from its own folder."""
    folder = PurePosixPath(skill_md).parent
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        for m in SKILL_PATH.finditer(line):
            path = (m.group(1) or m.group(2)).split("#", 1)[0]
            if not path.startswith(SHIPPED_PREFIXES) or NOT_A_PATH.search(path):
                continue
            if not tree.exists(str(folder / path)):
                problems.append(f"{skill_md}:{number}: names {path}, which is not at "
                                f"{folder / path} (a plugin installs the skill away from the "
                                "kit's root: name it from the skill's folder)")
    return problems


def test_every_path_a_skill_md_names_resolves_from_the_skills_own_folder():
    paths = tracked_files()
    skills = [n for n in paths if n.startswith("skills/") and n.endswith("/SKILL.md")]
    assert len(skills) == 4  # answer, judge, diagnose, improve
    tree = Tree(paths)
    problems = [p for n in skills
                for p in skill_path_problems(n, (KIT / n).read_text(encoding="utf-8"), tree)]
    assert problems == [], "\n".join(problems)


def test_a_skill_md_path_from_the_kit_root_is_found():
    name = "skills/eval-judge/SKILL.md"
    assert skill_path_problems(name, "see `../../reference/judge.md`", TREE) == []
    assert skill_path_problems(name, "see `reference/agreement-phrases.md`", TREE) == []
    [problem] = skill_path_problems(name, "see `reference/judge.md`", TREE)
    assert problem.startswith(f"{name}:1: names reference/judge.md")
    # Commands and a run's or a set's files are not the skill's.
    assert skill_path_problems(name, "`evals/<set>/cases.jsonl` `runs/r1/RESULTS.md` "
                                     "`.venv/bin/python skills/x/scripts/y.py --set z`", TREE) == []
