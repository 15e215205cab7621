"""A hosted Publisher behind a token: --mcp-header NAME=ENV_VAR sends the header, reads its value
from the environment only, never writes it anywhere; a sealed answerer gets the variable and an
MCP configuration that refers to it as ${VAR}; --publisher-version pins what the server reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import skip_without_node
from hosted_support import bearer_proxy
from test_mcp_server import _serve_http, _stop

KIT = Path(__file__).resolve().parents[1]
SCRIPTS = KIT / "skills" / "eval-answer" / "scripts"
TOKEN = "hosted-test-token-7f3a9c21e5"   # no known shape: only the declared variable finds it
VAR = "MALLOY_PUB_AUTH"                  # not secret-named either


@pytest.fixture(scope="module")
def hosted(tmp_path_factory):
    skip_without_node()
    proc, port = _serve_http("--set", str(KIT / "evals" / "bookshop"))
    try:
        with bearer_proxy(port, TOKEN) as (proxy_port, seen):
            yield f"http://127.0.0.1:{proxy_port}/mcp", seen
    finally:
        _stop(proc)


def _run(*args: str, env_value: str | None = f"Bearer {TOKEN}") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != VAR}
    if env_value is not None:
        env[VAR] = env_value
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=KIT,
                          env=env, check=False, timeout=600)


def test_the_header_reaches_the_endpoint_and_its_value_is_never_printed(hosted):
    url, seen = hosted
    done = _run(str(SCRIPTS / "check_findable.py"), "--set", "evals/bookshop", "--mcp-url", url,
                "--mcp-header", f"Authorization={VAR}", "--only", "bk_total_revenue", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["findable"] == 1
    assert f"Bearer {TOKEN}" in seen
    assert TOKEN not in done.stdout + done.stderr


def test_without_the_header_the_hosted_endpoint_refuses_and_the_script_says_it_could_not(hosted):
    url, _ = hosted
    done = _run(str(SCRIPTS / "check_findable.py"), "--set", "evals/bookshop", "--mcp-url", url,
                "--only", "bk_total_revenue")
    assert done.returncode == 3
    assert "401" in done.stderr or "Unauthorized" in done.stderr or "could not connect" in done.stderr


@pytest.mark.parametrize("flag, why", [
    (f"Authorization=Bearer {TOKEN}", "the NAME of an environment variable"),
    ("Authorization", "give NAME=ENV_VAR"),
])
def test_a_value_on_the_command_line_is_refused_before_anything_runs(flag, why):
    done = _run(str(SCRIPTS / "check_findable.py"), "--set", "evals/bookshop", "--mcp-url",
                "http://127.0.0.1:9/mcp", "--mcp-header", flag)
    assert done.returncode == 2 and why in done.stderr
    assert TOKEN not in done.stderr


def test_an_unset_variable_cannot_measure_and_a_header_with_local_is_a_usage_error(hosted):
    url, _ = hosted
    unset = _run(str(SCRIPTS / "check_findable.py"), "--set", "evals/bookshop", "--mcp-url", url,
                 "--mcp-header", f"Authorization={VAR}", env_value=None)
    assert unset.returncode == 3 and f"${VAR}, which is not set" in unset.stderr
    local = _run(str(SCRIPTS / "check_findable.py"), "--set", "evals/bookshop", "--local",
                 "--mcp-header", f"Authorization={VAR}")
    assert local.returncode == 2 and "--mcp-header goes with --mcp-url" in local.stderr


def test_a_sealed_answerer_answers_through_the_token_and_nothing_keeps_its_value(hosted, tmp_path):
    url, seen = hosted
    run = tmp_path / "hosted-run"
    made = _run(str(SCRIPTS / "new_run.py"), "--set", "evals/bookshop", "--out", str(run),
                "--answerer-model", "scripted-answerer", "--run-id", "hosted1")
    assert made.returncode == 0, made.stderr
    answerer = (f"{sys.executable} {KIT / 'scripts' / 'scripted_answerer.py'} "
                "--mcp-config {mcp_config} --question-file {question_file}")
    before = len(seen)
    done = _run(str(SCRIPTS / "run_answers.py"), "--run", str(run), "--set", "evals/bookshop",
                "--mcp-url", url, "--mcp-header", f"Authorization={VAR}", "--publisher-version",
                "0.0.1", "--only", "bk_total_revenue", "--answerer-cmd", answerer)
    assert done.returncode == 0, done.stderr
    info = json.loads((run / "run.json").read_text())
    assert info["publisherVersion"] == "0.0.1"
    assert info["mcpHeaders"] == {"Authorization": f"${VAR}"}
    attempts = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()
                if json.loads(line)["kind"] == "attempt"]
    assert len(attempts) == 1 and attempts[0]["submitted"] is True
    # The answerer (a child with the variable and a ${VAR} configuration) reached the endpoint
    # with the token, and no file of the run holds it.
    assert seen[before:].count(f"Bearer {TOKEN}") >= 3
    for path in run.rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace"), path
    assert TOKEN not in done.stdout + done.stderr
    # A pin the server does not report stops the run before any answerer starts.
    wrong = _run(str(SCRIPTS / "run_answers.py"), "--run", str(run), "--set", "evals/bookshop",
                 "--mcp-url", url, "--mcp-header", f"Authorization={VAR}", "--publisher-version",
                 "9.9.9", "--redo", "bk_total_revenue", "--only", "bk_total_revenue",
                 "--answerer-cmd", answerer)
    assert wrong.returncode == 3 and "reports version 0.0.1; --publisher-version pins 9.9.9" in wrong.stderr


def test_the_mcp_configuration_refers_to_the_variable(tmp_path):
    from malloy_evals.answer.harness import isolation
    config = isolation.mcp_config("https://pub.example.com/mcp", {"Authorization": VAR})
    assert config["mcpServers"]["malloy"]["headers"] == {"Authorization": "${" + VAR + "}"}
