"""Writing under a folder without following a planted link (hostile input: writes outside a run)."""

from __future__ import annotations

import os

import pytest
from malloy_evals.core import files
from malloy_evals.core.errors import InputError


@pytest.fixture
def places(tmp_path):
    """A run-like root and an outside folder a planted link points into."""
    root, outside = tmp_path / "run", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    return root, outside


def test_new_file_over_a_dangling_link_is_refused_and_nothing_is_written_outside(places):
    root, outside = places
    (root / "verdict.json").symlink_to(outside / "verdict.json")
    with pytest.raises(InputError, match="symbolic link"):
        files.create_new(root / "verdict.json", "{}", root)
    assert not (outside / "verdict.json").exists()


def test_new_file_under_a_linked_folder_is_refused(places):
    root, outside = places
    (root / "artifacts").symlink_to(outside)
    with pytest.raises(InputError, match="artifacts: is a symbolic link"):
        files.create_new(root / "artifacts" / "q1" / "_" / "prediction.csv", "a\n", root)
    assert list(outside.iterdir()) == []


def test_new_file_that_exists_is_kept_or_numbered(places):
    root, _ = places
    first = files.create_new(root / "a" / "x.csv", "1", root)
    assert files.create_new(root / "a" / "x.csv", "2", root) is None
    second = files.create_new(root / "a" / "x.csv", "2", root, number=True)
    assert (first.name, second.name) == ("x.csv", "x.2.csv")
    assert first.read_text() == "1" and second.read_text() == "2"


def test_replace_over_a_link_replaces_the_link_and_leaves_its_target_alone(places):
    root, outside = places
    (outside / "summary.json").write_text("theirs")
    (root / "summary.json").symlink_to(outside / "summary.json")
    files.replace(root / "summary.json", "ours", root)
    assert not (root / "summary.json").is_symlink()
    assert (root / "summary.json").read_text() == "ours"
    assert (outside / "summary.json").read_text() == "theirs"
    assert [p.name for p in root.iterdir()] == ["summary.json"]  # no temporary file left


def test_append_through_a_link_is_refused(places):
    root, outside = places
    (root / "events.jsonl").symlink_to(outside / "events.jsonl")
    with pytest.raises(InputError, match="symbolic link"):
        files.open_append(root / "events.jsonl", root)
    assert not (outside / "events.jsonl").exists()


def test_new_folder_beside_a_link_of_its_name_is_numbered_not_followed(places):
    root, outside = places
    (root / "judge").symlink_to(outside)
    made = files.make_new_dir(root / "judge", root)
    assert made.name == "judge.2" and files.is_real_dir(made)
    assert not files.is_real_dir(root / "judge") and list(outside.iterdir()) == []


def test_a_path_outside_the_root_is_refused(places):
    root, outside = places
    with pytest.raises(InputError, match="outside"):
        files.create_new(outside / "x", "1", root)


def test_numbered_names():
    assert files.numbered("prediction.csv", 2) == "prediction.2.csv"
    assert files.numbered("judge", 3) == "judge.3"
    assert files.numbered("clusters-mechanical.jsonl", 2) == "clusters-mechanical.2.jsonl"


def test_root_reached_through_a_link_the_user_chose_is_fine(places, tmp_path):
    root, _ = places
    (tmp_path / "alias").symlink_to(root)
    files.create_new(tmp_path / "alias" / "a.txt", "1", tmp_path / "alias")
    assert (root / "a.txt").read_text() == "1" and os.path.islink(tmp_path / "alias")



def test_append_to_a_hard_link_of_an_outside_file_is_refused(places):
    root, outside = places
    (outside / "events.jsonl").write_text("theirs\n")
    os.link(outside / "events.jsonl", root / "events.jsonl")
    with pytest.raises(InputError, match="hard link"):
        files.open_append(root / "events.jsonl", root)
    assert (outside / "events.jsonl").read_text() == "theirs\n"


def test_append_to_a_planted_pipe_is_refused_without_blocking(places):
    root, _ = places
    os.mkfifo(root / "events.jsonl")
    with pytest.raises(InputError, match="pipe"):
        files.open_append(root / "events.jsonl", root)


def test_copy_tree_copies_files_and_folders_and_skips_links_and_pipes(places, tmp_path):
    root, outside = places
    (outside / "secret.txt").write_text("outside")
    src = tmp_path / "src"
    (src / "model").mkdir(parents=True)
    (src / "set.json").write_text("{}")
    (src / "model" / "m.malloy").write_text("source: x is y\n")
    (src / "linked.txt").symlink_to(outside / "secret.txt")
    (src / "linked-folder").symlink_to(outside)
    os.mkfifo(src / "model" / "pipe")
    skipped = files.copy_tree(src, root / "copy")
    assert sorted(p.relative_to(root / "copy").as_posix() for p in (root / "copy").rglob("*")) == [
        "model", "model/m.malloy", "set.json"]
    assert (root / "copy" / "model" / "m.malloy").read_text() == "source: x is y\n"
    assert (skipped.links, skipped.special) == (["linked-folder", "linked.txt"], ["model/pipe"])


def test_copy_tree_never_writes_through_a_link_in_the_copys_place(places, tmp_path):
    root, outside = places
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "data" / "t.csv").write_text("a\n1\n")
    (root / "copy").mkdir()
    (root / "copy" / "data").symlink_to(outside)
    with pytest.raises(InputError, match="cannot copy into it"):
        files.copy_tree(src, root / "copy")
    assert list(outside.iterdir()) == []
