"""The real Claude Code, end to end and offline: the CLI the kit pins, talking to the model
stand-in on loopback (its turns from model scripts), its tool calls really executed.

As the answerer (run_answers.py --answerer claude-code): what the model is offered, the init
line, the calls on the kit's endpoint, a tool the CLI refuses, the recorded and scored attempt,
another version recorded in run.json. Reaching for the answer key with the CLI's own Bash, Read,
Grep and Glob, flagged from the real transcript. As the host: the kit installed as a plugin (its
skills/ folder alone copied into the plugin cache), every skill listed in the init line; the
judge's host protocol run as eval-judge's SKILL.md writes it, through the CLI's Bash tool."""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import stat
import threading
from pathlib import Path

from claude_support import (
    CLAUDE,
    cli_env,
    init_line,
    model_server,
    result_text,
    run_claude,
    tool_results,
    write_script,
)
from harness_support import BOOKSHOP, KIT, answer, harness_lines, ledger, new_run
from malloy_evals.answer.harness import claude_cli
from malloy_evals.llm.select import make_provider
from malloy_evals.sets.eval_set import load_set
from malloy_evals.workflow.outputs import RunOutputs
from malloy_evals.workflow.run_scorer import score_run
from script_support import make_scratch

QID = "bk_total_revenue"
QUERY = "run: order_items -> { aggregate: revenue }"
SCOPE = {"environmentName": "samples", "packageName": "bookshop"}
PUBLISHER = ["mcp__malloy__malloy_executeQuery", "mcp__malloy__malloy_getContext"]


def _question(qid: str = QID) -> str:
    return load_set(BOOKSHOP).case(qid).question


def _answer_turns() -> list:
    """Look the measure up, run it, try a shell the harness refuses, answer with the query."""
    return [
        {"text": "Let me find the revenue measure.",
         "tool_use": {"name": "mcp__malloy__malloy_getContext",
                      "input": {**SCOPE, "query": "total revenue"}}},
        {"tool_use": {"name": "mcp__malloy__malloy_executeQuery",
                      "input": {**SCOPE, "modelPath": "bookshop.malloy", "query": QUERY}}},
        {"tool_use": {"name": "Bash", "input": {"command": "ls /"}}},
        f"Total revenue is $90,963.84.\n\n```malloy\n{QUERY}\n```",
    ]


def _attempts(run) -> list[dict]:
    return [e for e in ledger(run) if e["kind"] == "attempt"]


def _transcript(run, attempt: dict) -> list[dict]:
    text = (run.dir / attempt["transcript_path"]).read_text()
    return [json.loads(line) for line in text.splitlines()]


# ---------------------------------------------------------------- the answerer

def test_real_claude_code_answers_offered_only_the_publisher_tools_and_is_scored(
        needs_claude, needs_node, tmp_path, capsys, monkeypatch):
    script = write_script(tmp_path / "scripts", "rev", _question(), _answer_turns())
    run = new_run(tmp_path, BOOKSHOP, "cc1")
    with model_server([script], tmp_path / "home", monkeypatch) as server:
        code, doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--local",
                                 "--only", QID, "--answerer", "claude-code:claude-sonnet-4-5"],
                                capsys)
        answered = server.answered()
    assert code == 0, err
    assert doc["recorded"] == 1 and doc["failed"] == 0
    # Every request the CLI made offered the model the endpoint's two Publisher tools and
    # nothing else: no built-in tool, no ToolSearch, no deferred-tool placeholder.
    assert len(answered) == 4 and all(sorted(r["tools"]) == PUBLISHER for r in answered)
    assert [r["path"] for r in server.requests] == ["/v1/messages"] * 4  # no side traffic

    [attempt] = _attempts(run)
    assert attempt["submitted"] is True and attempt["final_query"] == QUERY
    assert (attempt["n_get_context"], attempt["n_execute"]) == (1, 1)
    assert attempt["contaminated"] is False and attempt["num_turns"] == 4
    lines = _transcript(run, attempt)
    init = init_line(lines)
    assert sorted(init["tools"]) == PUBLISHER
    assert init["mcp_servers"] == [{"name": "malloy", "status": "connected", "source": "dynamic"}]
    assert init["permissionMode"] == "dontAsk" and init["skills"] == []
    assert not init["cwd"].startswith(str(KIT))
    info = json.loads(run.info_path.read_text())
    assert info["claudeCodeVersion"] == init["claude_code_version"]
    assert init["claude_code_version"] == claude_cli.pinned_version()
    assert f"claude-code: Claude Code {info['claudeCodeVersion']} (the kit's pinned install)" in err
    results = tool_results(lines)
    # The endpoint's real rows came back to the model; the refused shell call came back as an
    # error result naming the tool, and nothing ran.
    assert "90963.84" in result_text(results["toolu_s0t1u0"])
    refused = results["toolu_s0t2u0"]
    assert refused["is_error"] is True
    assert "No such tool available: Bash" in result_text(refused)

    replies = tmp_path / "judge.jsonl"
    replies.write_text(json.dumps({"key": f"cc1.{QID}._", "replies": [
        {"why": "re-executed revenue equals the golden", "verdict": "match", "confidence": 9,
         "column_pairing": {}, "gold_status": "verified", "gold_note": ""}]}) + "\n")
    judge = make_provider(f"hand:{replies}", role="judge", set_dir=BOOKSHOP)
    scored = score_run(RunOutputs.load(run.dir, BOOKSHOP), judge=judge,
                       judge_spec=f"hand:{replies}", local=True, progress=lambda _m: None)
    assert {o.qid: o.verdict for o in scored.outcomes} == {QID: "match"}


def test_a_claude_other_than_the_pinned_one_is_recorded_in_run_json(
        needs_claude, needs_node, tmp_path, capsys, monkeypatch):
    # --claude PATH: a wrapper that says it is another version, the real CLI behind it.
    wrapper = tmp_path / "bin" / "claude"
    wrapper.parent.mkdir()
    wrapper.write_text(f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "2.0.77 (Claude Code)"; exit 0; fi
exec {shlex.quote(str(CLAUDE.resolve()))} "$@"
""")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    script = write_script(tmp_path / "scripts", "rev", _question(), _answer_turns())
    run = new_run(tmp_path, BOOKSHOP, "cc2")
    base = ["--run", str(run.dir), "--set", str(BOOKSHOP), "--local", "--only", QID,
            "--answerer", "claude-code"]
    with model_server([script], tmp_path / "home", monkeypatch):
        # Sealed, the wrapper sees only its own file: the CLI it runs is bound in by hand.
        installed = CLAUDE.resolve().parents[1]
        code, doc, err = answer([*base, "--claude", str(wrapper), "--sandbox-bind",
                                 str(installed)], capsys)
        assert code == 0, err
        assert json.loads(run.info_path.read_text())["claudeCodeVersion"] == "2.0.77"
        assert f"the kit pins {claude_cli.pinned_version()}" in err and doc["recorded"] == 1
        # The same run, answered again by the pinned CLI: refused, one run, one answerer.
        code, _doc, err = answer([*base, "--redo", QID], capsys)
    assert code == 2 and "answered by Claude Code 2.0.77;" in err
    assert len(_attempts(run)) == 1


def test_a_turn_the_script_does_not_have_is_refused_and_logged_as_a_harness_failure(
        needs_claude, needs_node, tmp_path, capsys, monkeypatch):
    # The script stops after its first call: the CLI's next request has no scripted turn, the
    # stand-in refuses it (400), and the CLI's error result is a harness failure, not an attempt.
    script = write_script(tmp_path / "scripts", "short", _question(), _answer_turns()[:1])
    run = new_run(tmp_path, BOOKSHOP, "cc3")
    with model_server([script], tmp_path / "home", monkeypatch) as server:
        code, doc, _err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--local",
                                  "--only", QID, "--answerer", "claude-code", "--retries", "0",
                                  "--max-failures", "1"], capsys)
        refused = [r for r in server.requests if r["status"] == 400]
    assert code == 3 and doc["failed"] == 1 and _attempts(run) == []
    assert refused and all("no scripted turn" in r["refused"] for r in refused)
    [failure] = [o["failure"] for o in doc["outcomes"]]
    assert "the answerer reported an error" in failure and "400 stand-in" in failure


def test_sealed_claude_code_reaches_the_real_api_only_as_a_connect_through_the_gateway(
        needs_claude, needs_node, tmp_path, capsys, monkeypatch, bookshop_mcp_url):
    # No ANTHROPIC_BASE_URL: the CLI calls https://api.anthropic.com, through the proxy inside the
    # sandbox, and the gateway goes on through the harness's own proxy, here a recorder on
    # loopback that refuses every CONNECT (so nothing leaves this machine).
    seen: list[bytes] = []
    recorder = socket.create_server(("127.0.0.1", 0))

    def refuse_all() -> None:
        while True:
            try:
                conn, _ = recorder.accept()
            except OSError:
                return
            with conn:
                seen.append(conn.recv(4096).split(b"\r\n", 1)[0])
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=refuse_all, daemon=True).start()
    run = new_run(tmp_path, BOOKSHOP, "cc4")
    (tmp_path / "home").mkdir()
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-key")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{recorder.getsockname()[1]}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "0")  # one refusal ends the session
    code, doc, err = answer(["--run", str(run.dir), "--set", str(BOOKSHOP), "--mcp-url",
                             bookshop_mcp_url, "--only", QID, "--answerer", "claude-code", "--pass-env",
                             "CLAUDE_CODE_MAX_RETRIES", "--retries", "0", "--max-failures", "1"],
                            capsys)
    recorder.close()
    assert code == 3 and doc["failed"] == 1 and _attempts(run) == [], err
    assert seen and set(seen) == {b"CONNECT api.anthropic.com:443 HTTP/1.1"}
    start = next(line for line in harness_lines(run) if line["event"] == "start")
    model = [d for d in start["allow_list"]["network"]["destinations"] if d["route"] == "model"]
    assert model == [{"route": "model", "scheme": "https", "address": "api.anthropic.com:443",
                      "via": "proxy CONNECT"}]
    assert "HTTPS_PROXY" in start["allow_list"]["network"]["proxy_env"]


# ---------------------------------------------------------------- reaching for the key

def test_bash_read_grep_and_glob_reaching_for_the_key_are_flagged_from_the_real_transcript(
        needs_claude, needs_node, tmp_path, capsys, monkeypatch):
    # Unsealed: a command answerer running the real CLI with its own file and shell tools allowed,
    # so the tools really run and really find the key; the contamination check reads the
    # transcript the CLI wrote.
    set_dir = tmp_path / "bookshop"
    shutil.copytree(BOOKSHOP, set_dir)
    cases = set_dir / "cases.jsonl"
    turns = [
        {"tool_use": [{"name": "Bash", "input": {"command": f"cat {cases}"}},
                      {"name": "Read", "input": {"file_path": str(cases)}}]},
        {"tool_use": [{"name": "Grep", "input": {"pattern": "golden", "path": str(set_dir)}},
                      {"name": "Glob", "input": {"pattern": "**/*.jsonl", "path": str(set_dir)}}]},
        "Total revenue is $90,963.84.",
    ]
    script = write_script(tmp_path / "scripts", "leak", _question(), turns)
    tools = "Bash,Read,Grep,Glob"
    command = (f"{shlex.quote(str(CLAUDE))} -p \"$(cat {{question_file}})\" --output-format "
               f"stream-json --verbose --mcp-config {{mcp_config}} --strict-mcp-config --tools "
               f"{tools} --allowedTools {tools} --permission-mode dontAsk")
    base = ["--set", str(set_dir), "--local", "--only", QID, "--answerer-cmd", command]
    unsealed, sealed = new_run(tmp_path, set_dir, "leak1"), new_run(tmp_path, set_dir, "leak2")
    with model_server([script], tmp_path / "home", monkeypatch):
        monkeypatch.setenv("ENABLE_TOOL_SEARCH", "false")
        code, _doc, err = answer(["--run", str(unsealed.dir), *base, "--no-sandbox"], capsys)
        assert code == 0, err
        # The same script sealed: the CLI (bound in by hand) and its settings passed through.
        sealed_code, _doc, sealed_err = answer(
            ["--run", str(sealed.dir), *base, "--sandbox-bind", str(CLAUDE.resolve().parents[1]),
             *[f"--pass-env={n}" for n in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
                                          "ENABLE_TOOL_SEARCH")]], capsys)
    [attempt] = _attempts(unsealed)
    assert attempt["contaminated"] is True and "contaminated" in err
    lines = _transcript(unsealed, attempt)
    assert sorted(init_line(lines)["tools"])[:4] == ["Bash", "Glob", "Grep", "Read"]
    results = {k: result_text(v) for k, v in tool_results(lines).items()}
    # Unsealed the tools ran and found the key: the shell and the read returned the golden, the
    # searches found the file.
    assert '"golden"' in results["toolu_s0t0u0"] and '"golden"' in results["toolu_s0t0u1"]
    assert str(cases) in results["toolu_s0t1u0"] and str(cases) in results["toolu_s0t1u1"]
    reasons = attempt["contamination_reasons"]
    assert {r["tool"] for r in reasons} == {"Bash", "Read", "Grep", "Glob"}
    # Sealed, the same calls find nothing: the set is not there to read. The reach is still in
    # the transcript, so the attempt is flagged all the same.
    assert sealed_code == 0, sealed_err
    [sealed_attempt] = _attempts(sealed)
    sealed_results = {k: result_text(v) for k, v in
                      tool_results(_transcript(sealed, sealed_attempt)).items()}
    assert len(sealed_results) == 4
    assert not any('"golden"' in text or f"{cases}\n" in text + "\n"
                   for text in sealed_results.values()), sealed_results
    assert sealed_attempt["contaminated"] is True


# ---------------------------------------------------------------- the kit as a plugin

PLUGIN_CACHE_CEILING = 1_000_000  # bytes: the skills and their thin scripts, a few hundred KB


def _tree_size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_the_kit_loads_as_a_plugin_and_lists_its_four_skills(needs_claude, tmp_path, monkeypatch):
    script = write_script(tmp_path / "scripts", "hi", "Which skills do you have?", ["Three."])
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    with model_server([script], home, monkeypatch) as server:
        env = cli_env(server, home)
        done, lines = run_claude(["-p", "Which skills do you have?", "--output-format",
                                  "stream-json", "--verbose", "--plugin-dir", str(KIT / "skills")],
                                 cwd=work, env=env)
        assert done.returncode == 0, done.stderr
        skills = init_line(lines)["skills"]
        # Installed with the CLI's own plugin commands from this checkout as it is (.venv and
        # node_modules included): the marketplace's plugin is skills/, all the CLI copies.
        installed = run_claude(["plugin", "install", "malloy-evals", "--marketplace", str(KIT)],
                               cwd=work, env=env)[0]
        listed = run_claude(["plugin", "list"], cwd=work, env=env)[0]
        _done, lines = run_claude(["-p", "Which skills do you have?", "--output-format",
                                   "stream-json", "--verbose"], cwd=work, env=env)
    kit_skills = sorted(p.parent.name for p in (KIT / "skills").glob("*/SKILL.md"))
    assert kit_skills == ["eval-answer", "eval-diagnose", "eval-improve", "eval-judge"]
    for skill in kit_skills:
        assert f"malloy-evals:{skill}" in skills
        assert f"malloy-evals:{skill}" in init_line(lines)["skills"]
    assert installed.returncode == 0, installed.stderr
    assert "malloy-evals@malloy-evals" in listed.stdout
    record = json.loads((home / ".claude" / "plugins" / "installed_plugins.json").read_text())
    [entry] = record["plugins"]["malloy-evals@malloy-evals"]
    cache = Path(entry["installPath"])
    # The plugin cache holds the skills and their scripts: no .venv, no node_modules, no library.
    copied = {p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file()}
    assert {f"{s}/SKILL.md" for s in kit_skills} | {"find_library.py"} <= copied
    assert not any(part in (".venv", "node_modules", "malloy_evals", "evals")
                   for name in copied for part in name.split("/"))
    assert _tree_size(cache) < PLUGIN_CACHE_CEILING


# ---------------------------------------------------------------- the host's judge protocol

def test_the_host_judge_protocol_runs_as_written_from_inside_claude_code(
        needs_claude, needs_node, tmp_path, monkeypatch):
    # eval-judge's SKILL.md, "As a host": emit, a subagent writes the reply file the request
    # names, ingest. Here the CLI's Bash tool runs each command exactly as the SKILL.md gives it,
    # from the kit's root (a scratch copy, so the checkout stays clean).
    kit = make_scratch(tmp_path)
    score = ("mkdir -p runs && cp -r evals/bookshop/runs/baseline runs/ && "
             ".venv/bin/python skills/eval-answer/scripts/score_attempt.py --run runs/baseline "
             f"--set evals/bookshop --qid {QID} --judge host")
    reply_path = kit / "runs" / "baseline" / "artifacts" / QID / "_" / "judge" / "reply.json"
    verdict = {"why": "The re-executed revenue 90963.84 equals the golden at cents.",
               "verdict": "match", "confidence": 9, "column_pairing": {"revenue": "revenue"},
               "gold_status": "verified", "gold_note": ""}
    slow = 900_000  # ms: the emit step starts the kit's endpoint and re-executes
    question = "Judge the baseline attempt at bk_total_revenue with the host protocol."
    turns = [
        {"tool_use": {"name": "Bash", "input": {"command": f"{score} --emit --local",
                                                "timeout": slow}}},
        {"tool_use": {"name": "Bash", "input": {
            "command": f"cat > {reply_path} <<'EOF'\n{json.dumps(verdict)}\nEOF"}}},
        {"tool_use": {"name": "Bash", "input": {
            "command": ".venv/bin/python skills/eval-answer/scripts/score_attempt.py --run "
                       f"runs/baseline --set evals/bookshop --qid {QID} --judge host --ingest "
                       "--json", "timeout": slow}}},
        "Scored: match.",
    ]
    script = write_script(tmp_path / "scripts", "host", question, turns)
    with model_server([script], tmp_path / "home", monkeypatch) as server:
        done, lines = run_claude(["-p", question, "--output-format", "stream-json", "--verbose",
                                  "--plugin-dir", str(KIT), "--tools", "Bash",
                                  "--allowedTools", "Bash", "--permission-mode", "dontAsk"],
                                 cwd=kit, env=cli_env(server, tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    results = {k: result_text(v) for k, v in tool_results(lines).items()}
    assert "emitted" in results["toolu_s0t0u0"] and str(reply_path) in results["toolu_s0t0u0"]
    ingested = json.loads(results["toolu_s0t2u0"])
    assert ingested["verdict"] == "match" and ingested["qid"] == QID
    events = [json.loads(line) for line in
              (kit / "runs" / "baseline" / "events.jsonl").read_text().splitlines()]
    [scored] = [e for e in events if e["kind"] == "score"]
    assert scored["verdict"] == "match" and scored["qid"] == QID
