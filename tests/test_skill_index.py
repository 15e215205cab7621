"""SKILL_INDEX.md is generated from the skills' front matter, which is checked, and never goes stale."""

from __future__ import annotations

from pathlib import Path

import pytest
from malloy_evals.core import paths
from malloy_evals.core.errors import InputError
from malloy_evals.core.skill_index import (
    MAX_DESCRIPTION,
    build_index,
    check_front_matter,
    collect,
    read_front_matter,
)

GOOD = "Decides whether X. Use when asked whether an answer was right. Never edits the model."


def write_skill(root: Path, folder: str, front: str | None) -> Path:
    d = root / "skills" / folder
    d.mkdir(parents=True)
    if front is not None:
        (d / "SKILL.md").write_text(front + "\n# body\n")
    return d / "SKILL.md"


def fm(name: str, description: str = GOOD) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---"


def test_index_in_the_repository_is_current():
    # Regenerates from whatever skills/*/SKILL.md exist now and compares with the committed file.
    result = build_index(paths.KIT_ROOT, check=True)
    assert not result.stale, "SKILL_INDEX.md is stale: run .venv/bin/python scripts/build_skill_index.py"


@pytest.mark.parametrize("skill_md", sorted(paths.SKILLS_DIR.glob("*/SKILL.md")),
                         ids=lambda p: p.parent.name)
def test_repository_skill_front_matter_is_valid(skill_md):
    assert check_front_matter(skill_md.parent.name, read_front_matter(skill_md)) == []


def test_build_writes_an_index_listing_every_skill_by_name(tmp_path):
    write_skill(tmp_path, "zeta", fm("zeta"))
    write_skill(tmp_path, "alpha", fm("alpha", "Scores. Use when told to. Never edits | pipes."))
    result = build_index(tmp_path)
    assert result.written and result.problems == []
    text = (tmp_path / "SKILL_INDEX.md").read_text()
    assert text.index("[`alpha`](skills/alpha/SKILL.md)") < text.index("[`zeta`]")
    assert "Never edits \\| pipes." in text


def test_check_reports_stale_after_a_description_changes(tmp_path):
    md = write_skill(tmp_path, "alpha", fm("alpha"))
    build_index(tmp_path)
    assert not build_index(tmp_path, check=True).stale
    md.write_text(fm("alpha", "Changed. Use when needed. Never anything else.") + "\n")
    result = build_index(tmp_path, check=True)
    assert result.stale and result.exit_code == 1


def test_check_never_writes(tmp_path):
    write_skill(tmp_path, "alpha", fm("alpha"))
    build_index(tmp_path, check=True)
    assert not (tmp_path / "SKILL_INDEX.md").exists()


def test_name_must_equal_the_folder(tmp_path):
    write_skill(tmp_path, "alpha", fm("beta"))
    _, problems = collect(tmp_path / "skills")
    assert problems == ["skills/alpha/SKILL.md: name: 'beta' must equal the folder name 'alpha'"]


@pytest.mark.parametrize("description, problem", [
    ("", "description: missing"),
    ("x" * (MAX_DESCRIPTION + 1) + " Use when. Never.", "more than 1024"),
    ("Decides things. Never edits.", "does not say when to use"),
    ("Decides things. Use when asked.", "does not say what the skill never does"),
])
def test_description_is_checked(description, problem):
    problems = check_front_matter("a", {"name": "a", "description": description})
    assert any(problem in p for p in problems)


def test_missing_skill_md_is_a_problem(tmp_path):
    (tmp_path / "skills" / "alpha").mkdir(parents=True)
    assert collect(tmp_path / "skills")[1] == ["skills/alpha/SKILL.md: missing"]


def test_file_without_front_matter_names_line_one(tmp_path):
    md = write_skill(tmp_path, "alpha", "# no front matter")
    with pytest.raises(InputError, match=":1: no front matter"):
        read_front_matter(md)


def test_invalid_yaml_names_its_line(tmp_path):
    md = write_skill(tmp_path, "alpha", "---\nname: alpha\ndescription: [unclosed\n---")
    with pytest.raises(InputError, match="not valid YAML"):
        read_front_matter(md)
    assert collect(tmp_path / "skills")[1][0].startswith("skills/alpha/SKILL.md:")
