"""What a blind answerer gets: a fresh empty folder, its inputs beside it, a filtered
environment, an MCP configuration naming only the endpoint, and only the Publisher's tools."""

from __future__ import annotations

import json
import os

from malloy_evals.answer.harness import isolation


def test_environment_loses_every_variable_naming_a_protected_folder(tmp_path):
    kit, set_dir = "/home/me/malloy-evals", "/home/me/malloy-evals/evals/bookshop"
    protected = isolation.protected_paths(kit, set_dir)
    env = isolation.child_environment({
        "PATH": f"{kit}/.venv/bin:/usr/local/bin:/usr/bin",
        "HOME": "/home/me",
        "SET_PATH": f"{set_dir}/cases.jsonl",
        "MALLOY_EVALS_RUN": "r1",
        "VIRTUAL_ENV": "/elsewhere/venv",
        "OLDPWD": "/somewhere",
        "PWD": kit,
        "ANTHROPIC_API_KEY": "sk-kept-for-the-answerer",
    }, protected, tmp_path)
    assert env == {"PATH": "/usr/local/bin:/usr/bin", "HOME": "/home/me", "PWD": str(tmp_path),
                   "ANTHROPIC_API_KEY": "sk-kept-for-the-answerer"}


def test_a_list_variable_made_only_of_protected_entries_goes_whole(tmp_path):
    protected = isolation.protected_paths("/kit")
    env = isolation.child_environment({"PYTHONUSERBASE": "/kit/a:/kit/b"}, protected, tmp_path)
    assert "PYTHONUSERBASE" not in env


def test_attempt_space_is_empty_holds_the_question_byte_for_byte_and_is_removed(tmp_path):
    question = "Revenue in 2024?\n  (exactly as stored)  "
    with isolation.attempt_space(isolation.protected_paths(tmp_path), question=question,
                                 prompt="P", mcp_url="http://127.0.0.1:1/mcp") as space:
        assert list(space.workdir.iterdir()) == []
        assert space.question_file.read_bytes() == question.encode()
        assert json.loads(space.mcp_config.read_text()) == {
            "mcpServers": {"malloy": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}}
        assert not str(space.root).startswith(str(tmp_path))
        assert "bk_" not in space.root.name  # no case id in the folder's name
        root = space.root
    assert not root.exists()


def test_temp_folder_inside_a_protected_folder_is_not_used(tmp_path, monkeypatch):
    inside = tmp_path / "kit" / "tmp"
    inside.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(inside))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # forget the cached temporary folder
    with isolation.attempt_space(isolation.protected_paths(tmp_path / "kit"), question="q",
                                 prompt="p", mcp_url="u") as space:
        assert not str(space.root).startswith(str(tmp_path))


def test_answerers_get_the_publisher_query_tools_only():
    listed = ["malloy_executeQuery", "malloy_getContext", "malloy_getStatus",
              "malloy_reloadPackage", "malloy_searchDocs", "malloy_compile"]
    assert isolation.answerer_tools(listed) == ["malloy_executeQuery", "malloy_getContext",
                                                "malloy_searchDocs"]
    assert isolation.claude_tool_name("malloy_getContext") == "mcp__malloy__malloy_getContext"
    assert isolation.withheld_tools(listed) == ["malloy_getStatus", "malloy_reloadPackage",
                                                "malloy_compile"]


def test_protected_paths_include_the_resolved_form_of_a_link(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    assert {str(link), str(real)} <= set(isolation.protected_paths(link))
