"""The sealed attempt (skills/eval-hs.answer/reference/harness.md, "Sealed"): an answerer that tries
every escape it can think of reaches none of them; --no-sandbox marks every headline UNSEALED;
without a working bwrap the run refuses to start."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import harness_support as hs
import pytest
from malloy_evals.answer.harness import sandbox
from malloy_evals.core import paths, seal
from malloy_evals.core.errors import UnmeasuredError, UsageError
from malloy_evals.ledger.run import Run
from malloy_evals.llm import standin
from malloy_evals.report import compare, compare_page, figures
from malloy_evals.report.arms import load_arm
from malloy_evals.sets.eval_set import load_set
from malloy_evals.workflow.outputs import RunOutputs

SECRET = "i22-secret-" + uuid.uuid4().hex


def wait_until(check, what: str, ceiling: float = 60.0) -> None:
    """Poll `check` until true; fail naming `what` past a generous ceiling."""
    deadline = time.monotonic() + ceiling
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def live_with(marker: str) -> list[int]:
    """Host processes (not zombies) whose command line holds `marker`."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if (marker.encode() in cmdline.read_bytes() and state not in "ZX"
                    and cmdline.parent.name != str(os.getpid())):
                pids.append(int(cmdline.parent.name))
    return pids


# The escaping answerer: plain Python, no kit code. It writes stream-json with one text block
# and a result line carrying a JSON report of everything it could reach.
ESCAPE = textwrap.dedent('''
    import json, os, sys, time
    TARGETS = {targets}
    WRITES = {writes}
    NEEDLES = {needles}
    SECRET = {secret!r}
    MARKER = {marker!r}
    report = {{"procs": [], "proc_hits": [], "opened": {{}}, "wrote": {{}}, "neighbours": [],
              "secret_in_env": False, "secret_in_proc": False, "grandchild": False}}
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = open(f"/proc/{{pid}}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
        except OSError:
            continue
        report["procs"].append(cmd)
        if any(n in cmd for n in NEEDLES):
            report["proc_hits"].append(cmd)
        try:
            if SECRET.encode() in open(f"/proc/{{pid}}/environ", "rb").read():
                report["secret_in_proc"] = True
        except OSError:
            pass
    for path in TARGETS:
        try:
            if os.path.isdir(path):
                report["opened"][path] = "LISTED " + ",".join(sorted(os.listdir(path)))
            else:
                report["opened"][path] = "READ " + open(path, errors="replace").read(80)
        except OSError as exc:
            report["opened"][path] = "denied " + (exc.strerror or "")
    for path in WRITES:
        try:
            with open(path, "a") as fh:
                fh.write('{{"kind": "score", "verdict": "match"}}\\n')
            report["wrote"][path] = "WROTE"
        except OSError as exc:
            report["wrote"][path] = "denied " + (exc.strerror or "")
    root = os.path.dirname(os.getcwd())
    base = os.path.dirname(root)
    try:
        report["neighbours"] = sorted(e for e in os.listdir(base) if e != os.path.basename(root)
                                      and e.startswith("malloy-evals-attempt-"))
    except OSError:
        pass
    report["secret_in_env"] = any(SECRET in v for v in os.environ.values())
    report["env_names"] = sorted(os.environ)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", MARKER])
        os._exit(0)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not report["grandchild"]:
        for p in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                if MARKER.encode() in open(f"/proc/{{p}}/cmdline", "rb").read():
                    report["grandchild"] = True
            except OSError:
                pass
        time.sleep(0.05)
    {hold}
    text = "REPORT " + json.dumps(report)
    print(json.dumps({{"type": "system", "subtype": "init", "cwd": os.getcwd(),
                      "session_id": "escape", "tools": [], "mcp_servers": []}}), flush=True)
    print(json.dumps({{"type": "assistant", "message": {{"id": "m1", "type": "message",
                      "role": "assistant", "content": [{{"type": "text", "text": text}}]}}}}),
          flush=True)
    print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "result": text,
                      "num_turns": 1, "total_cost_usd": 0}}), flush=True)
''')


def escape_program(tmp_path: Path, *, targets: list[str], writes: list[str], needles: list[str],
                   marker: str, hold: str = "") -> str:
    script = tmp_path / "escape.py"
    script.write_text(ESCAPE.format(targets=json.dumps(targets), writes=json.dumps(writes),
                                    needles=json.dumps(needles), secret=SECRET, marker=marker,
                                    hold=hold))
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --q {{question_file}}"


def reports(run: Run) -> list[dict]:
    """Each recorded attempt's report, read from its own transcript as the run stored it."""
    out = []
    for path in sorted(run.dir.glob("artifacts/*/*/transcript*.jsonl")):
        for line in path.read_text().splitlines():
            obj = json.loads(line)
            if obj.get("type") == "result":
                out.append(json.loads(obj["result"].removeprefix("REPORT ")))
    return out


# ---------------------------------------------------------------- every escape, denied

def test_an_answerer_trying_every_escape_reaches_none_of_them(
        needs_node, tmp_path, capsys, monkeypatch, bookshop_mcp_url):
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None, "bk_revenue_2024": None})
    run = hs.new_run(tmp_path, set_dir, "esc1")
    # Another attempt's folder, as a parallel attempt would leave it, with its question.
    decoy = tmp_path.parent / f"malloy-evals-attempt-decoy{uuid.uuid4().hex[:6]}"
    decoy.mkdir()
    (decoy / "question.txt").write_text("the other attempt's question")
    monkeypatch.setenv("TMPDIR", str(tmp_path.parent))  # attempts are made beside the decoy
    monkeypatch.setenv("I22_HARNESS_SECRET", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)    # not for a command answerer
    marker = "i22-grandchild-" + uuid.uuid4().hex
    targets = [str(set_dir / "cases.jsonl"), str(set_dir), str(set_dir / "truth"),
               str(run.dir), str(run.dir / "harness.jsonl"), str(run.dir / "run.json"),
               str(hs.KIT / "evals" / "bookshop" / "cases.jsonl"), str(hs.KIT / "evals"), str(hs.KIT),
               str(decoy), str(decoy / "question.txt"), "/root", "/work", str(tmp_path)]
    writes = [str(run.dir / "events.jsonl"), str(run.dir / "pwned.txt"),
              str(hs.KIT / "evals" / "pwned.txt"), str(hs.KIT / ".venv" / "pwned.txt"),
              str(hs.SCRIPTED.parent / "pwned.txt")]
    cmd = escape_program(tmp_path, targets=targets, writes=writes, marker=marker,
                         needles=["run_answers", "pytest ", "--ro-bind", str(run.dir), str(set_dir),
                                  str(hs.KIT / "evals")])
    try:
        code, doc, err = hs.answer(["--run", str(run.dir), "--set", str(set_dir), "--mcp-url",
                                 bookshop_mcp_url, "--parallel", "2", "--answerer-cmd", cmd],
                                capsys)
    finally:
        (decoy / "question.txt").unlink()
        decoy.rmdir()
    assert code == 0, err
    assert doc["sandbox"].startswith("bwrap ") and doc["unsealed"] is False
    got = reports(run)
    assert len(got) == 2
    allow = next(t for t in hs.harness_lines(run) if t["event"] == "start")["allow_list"]
    bound = allow["program"] + allow["extra"]
    for r in got:
        # Its own /proc: a handful of its own processes, none of the harness's.
        assert r["procs"] and r["proc_hits"] == [], r["procs"]
        assert len(r["procs"]) < 10, r["procs"]
        assert not r["secret_in_env"] and not r["secret_in_proc"]
        assert "ANTHROPIC_API_KEY" not in r["env_names"] and "I22_HARNESS_SECRET" not in r["env_names"]
        assert set(r["env_names"]) <= {"PATH", "LANG", "TZ", "HOME", "TMPDIR", "PWD"}
        reached = {p: v for p, v in r["opened"].items() if not v.startswith("denied")}
        # A folder is reachable only on the way to the answerer's own program (the mount points
        # bwrap makes for it), and it shows nothing but the way there.
        for p, what in reached.items():
            assert what.startswith("LISTED ") and any(b.startswith(p + "/") for b in bound), (p, what)
            for name in filter(None, what.removeprefix("LISTED ").split(",")):
                assert any(b == f"{p}/{name}" or b.startswith(f"{p}/{name}/") for b in bound), \
                    (p, name)
        assert all(v.startswith("denied") for v in r["wrote"].values()), r["wrote"]
        assert r["neighbours"] == []
        assert r["grandchild"] is True   # it did start, inside
    # Nothing it wrote landed anywhere, and the grandchild died with the attempt.
    assert not (run.dir / "pwned.txt").exists() and not (hs.KIT / "evals" / "pwned.txt").exists()
    assert not (hs.KIT / ".venv" / "pwned.txt").exists()
    assert [e["kind"] for e in hs.ledger(run)].count("score") == 0
    wait_until(lambda: not live_with(marker), "the setsid grandchild to be gone")


def test_kill_9_of_the_harness_mid_attempt_leaves_no_answerer_process(
        needs_node, tmp_path, bookshop_mcp_url):
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None})
    run = hs.new_run(tmp_path, set_dir, "kill1")
    marker = "i22-orphan-" + uuid.uuid4().hex
    # It starts its setsid grandchild, then waits forever: the harness is killed meanwhile.
    cmd = escape_program(tmp_path, targets=[], writes=[], needles=[], marker=marker,
                         hold="time.sleep(3600)")
    proc = subprocess.Popen([sys.executable, str(hs.RUN_ANSWERS), "--run", str(run.dir), "--set",
                             str(set_dir), "--mcp-url", bookshop_mcp_url, "--answerer-cmd", cmd],
                            cwd=hs.KIT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_until(lambda: live_with(marker), "the answerer's grandchild to start", ceiling=120)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        wait_until(lambda: not live_with(marker), "every answerer process to be gone")
        wait_until(lambda: not live_with(str(tmp_path / "escape.py")), "the answerer to be gone")
    finally:
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------- the network, sealed

# The network escaper: plain Python, no kit code. It makes the legal calls (its MCP endpoint's
# tools, the model's Messages route) and every illegal one it can think of, and reports each.
NET_ESCAPE = textwrap.dedent("""
    import http.client, json, os, socket, sys, urllib.parse
    MARKS = {marks}
    config = json.load(open(sys.argv[sys.argv.index("--mcp-config") + 1]))
    mcp = urllib.parse.urlsplit(config["mcpServers"]["malloy"]["url"])
    model = urllib.parse.urlsplit(os.environ.get("ANTHROPIC_BASE_URL", "http://0.0.0.0:1"))
    report = {{"proxy": os.environ.get("HTTPS_PROXY")}}

    def ask(url, method, path, body=None):
        try:
            c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={{"Content-Type": "application/json",
                               "Accept": "application/json, text/event-stream"}})
            r = c.getresponse()
            return [r.status, r.read().decode("utf-8", "replace")[:600]]
        except OSError as exc:
            return ["error", type(exc).__name__ + ": " + str(exc)]

    def tool(name, args):
        return ask(mcp, "POST", mcp.path, {{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                          "params": {{"name": name, "arguments": args}}}})

    def connect(family, address):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(20)
                s.connect(address)
                return "CONNECTED " + s.recv(20).decode()
        except OSError as exc:
            return "error " + type(exc).__name__

    def through_proxy(target):
        proxy = urllib.parse.urlsplit(report["proxy"] or "http://0.0.0.0:1")
        try:
            with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as s:
                s.sendall(("CONNECT " + target + " HTTP/1.1\\r\\n\\r\\n").encode())
                return s.recv(200).decode().split("\\r\\n")[0]
        except OSError as exc:
            return "error " + type(exc).__name__

    scope = {{"environmentName": "samples", "packageName": "bookshop"}}
    report["get_context"] = tool("malloy_getContext", scope)
    report["reload"] = tool("malloy_reloadPackage", scope)
    report["status"] = tool("malloy_getStatus", {{}})
    report["rest"] = ask(mcp, "GET", "/api/v0/environments/samples/packages/bookshop/models")
    report["model"] = ask(model, "POST", "/v1/messages", {{"model": "claude-sonnet-4-5",
        "max_tokens": 64, "messages": [{{"role": "user", "content": MARKS["question"]}}]}})
    report["model_other_route"] = ask(model, "GET", "/v1/models")
    try:
        report["standin_log"] = "READ " + open(MARKS["standin_log"]).read(80)
    except OSError as exc:
        report["standin_log"] = "denied " + (exc.strerror or "")
    report["other_port"] = connect(socket.AF_INET, ("127.0.0.1", MARKS["other_port"]))
    report["allowed_port"] = connect(socket.AF_INET, ("127.0.0.1", MARKS["allowed_port"]))
    report["abstract_socket"] = connect(socket.AF_UNIX, "\\0" + MARKS["abstract"])
    report["outside"] = connect(socket.AF_INET, ("203.0.113.7", 443))
    try:
        socket.getaddrinfo("example.com", 443)
        report["dns"] = "RESOLVED"
    except OSError as exc:
        report["dns"] = "error " + type(exc).__name__
    report["proxy_outside"] = through_proxy("203.0.113.7:443")
    report["proxy_endpoint"] = through_proxy("127.0.0.1:" + str(mcp.port))
    text = "REPORT " + json.dumps(report)
    print(json.dumps({{"type": "system", "subtype": "init", "session_id": "net", "tools": []}}))
    print(json.dumps({{"type": "result", "subtype": "success", "is_error": False,
                      "result": text, "num_turns": 1, "total_cost_usd": 0}}), flush=True)
""")


class _Listener:
    """A listener the answerer must not reach (or, allowed, may): it greets and counts."""

    def __init__(self, family: int = socket.AF_INET, address: object = ("127.0.0.1", 0)):
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen()
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.sendall(b"hello from outside")

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]


def test_a_sealed_answerer_reaches_its_endpoint_and_model_and_nothing_else_on_the_network(
        needs_node, tmp_path, capsys, monkeypatch, bookshop_mcp_url):
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None})
    run = hs.new_run(tmp_path, set_dir, "net1")
    question = "net-escape question " + uuid.uuid4().hex
    script = standin.parse_script({"question": question, "turns": ["scripted reply"]},
                                  tmp_path / "script.json")
    other, allowed = _Listener(), _Listener()
    abstract_name = "i35-abstract-" + uuid.uuid4().hex
    abstract = _Listener(socket.AF_UNIX, "\0" + abstract_name)
    log = tmp_path / "standin-requests.jsonl"
    program = tmp_path / "net_escape.py"
    with standin.serve([script], log_path=log) as server:
        program.write_text(NET_ESCAPE.format(marks=json.dumps({
            "question": question, "standin_log": str(log), "other_port": other.port,
            "allowed_port": allowed.port, "abstract": abstract_name})))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        cmd = (f"{shlex.quote(sys.executable)} {shlex.quote(str(program))} "
               "--mcp-config {mcp_config} --q {question_file}")
        code, _doc, err = hs.answer(
            ["--run", str(run.dir), "--set", str(set_dir), "--mcp-url", bookshop_mcp_url,
             "--pass-env", "ANTHROPIC_BASE_URL", "--allow-host", f"127.0.0.1:{allowed.port}",
             # A destination off this machine, never called: it makes the proxy exist.
             "--allow-host", "api.example.invalid:443", "--answerer-cmd", cmd], capsys)
        standin_requests = list(server.requests)
    for listener in (other, allowed, abstract):
        listener.sock.close()
    assert code == 0, err
    [r] = reports(run)
    # The legal calls work: the endpoint's own tool, the model's Messages route.
    assert r["get_context"][0] == 200 and "bookshop" in r["get_context"][1]
    assert r["model"][0] == 200 and "scripted reply" in r["model"][1]
    # The endpoint's other tools and routes, and the model API's other routes: refused.
    for name in ("reload", "status"):
        assert r[name][0] == 200 and "refuses tools/call" in r[name][1], r[name]
    assert r["rest"][0] == 403 and r["model_other_route"][0] == 403
    assert r["standin_log"].startswith("denied")
    # Another loopback port, an abstract socket, an outside address, a name: nothing there.
    assert r["other_port"] == "error ConnectionRefusedError"
    assert r["abstract_socket"] == "error ConnectionRefusedError"
    assert r["outside"].startswith("error ") and r["dns"].startswith("error ")
    # The allowed host is reached; through the proxy only its destinations would be.
    assert r["allowed_port"] == "CONNECTED hello from outside"
    assert r["proxy"] is not None
    assert r["proxy_outside"].startswith("HTTP/1.1 403") and r["proxy_endpoint"].startswith("HTTP/1.1 403")
    # Seen from outside: the listeners it must not reach were never reached, the stand-in got
    # the one legal call (nothing else landed in its log), and every refusal is in the log.
    assert (other.accepted, abstract.accepted, allowed.accepted) == (0, 0, 1)
    assert [(q["method"], q["path"]) for q in standin_requests] == [("POST", "/v1/messages")]
    [tried] = [t for t in hs.harness_lines(run) if t["event"] == "try"]
    refused = " | ".join(tried["network_refused"])
    assert tried["network_refusals"] == 6
    for said in ("'malloy_reloadPackage'", "'malloy_getStatus'", "GET /api/v0/environments",
                 "GET /v1/models", "CONNECT 203.0.113.7:443", "CONNECT 127.0.0.1:"):
        assert said in refused, (said, refused)
    start = next(t for t in hs.harness_lines(run) if t["event"] == "start")
    routes = [d["route"] for d in start["allow_list"]["network"]["destinations"]]
    assert routes == ["mcp", "model", "allow-host", "allow-host"]
    assert "--unshare-net" in start["allow_list"]["namespaces"]


@pytest.mark.parametrize("flag, said", [
    pytest.param("ENDPOINT", "it is the mcp destination's port", id="the_endpoints_port"),
    pytest.param("MODEL", "it is the model destination's port", id="the_model_apis_port"),
    pytest.param("example.org", "give HOST:PORT", id="no_port"),
])
def test_an_allow_host_on_the_kits_own_ports_or_malformed_is_refused_with_exit_2(
        needs_node, tmp_path, capsys, monkeypatch, bookshop_mcp_url, flag, said):
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None})
    run = hs.new_run(tmp_path, set_dir, "ah1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:47011")
    endpoint_port = bookshop_mcp_url.rsplit(":", 1)[1].split("/")[0]
    value = {"ENDPOINT": f"localhost:{endpoint_port}", "MODEL": "127.0.0.1:47011"}.get(flag, flag)
    code, _doc, err = hs.answer(["--run", str(run.dir), "--set", str(set_dir), "--mcp-url",
                                 bookshop_mcp_url, "--pass-env", "ANTHROPIC_BASE_URL",
                                 "--allow-host", value, "--answerer-cmd", hs.scripted_cmd()],
                                capsys)
    assert code == 2 and f"--allow-host {value}" in err and said in err, err
    assert hs.ledger(run) == [] and "sandbox" not in Run.open(run.dir).info
    # Unsealed there is no network to open.
    code, _doc, err = hs.answer(["--run", str(run.dir), "--set", str(set_dir), "--mcp-url",
                                 bookshop_mcp_url, "--no-sandbox", "--allow-host", "h.example:1",
                                 "--answerer-cmd", hs.scripted_cmd()], capsys)
    assert code == 2 and "--allow-host goes with a sealed run" in err


# ---------------------------------------------------------------- the allow-list

def test_program_binds_of_a_venv_script_are_the_venv_its_python_the_script_and_the_library():
    binds = sandbox.program_binds("command", sys.executable, [str(hs.SCRIPTED), "--x"])
    venv = Path(sys.prefix).resolve()
    base = Path(sys.base_prefix).resolve()
    assert venv in binds and hs.SCRIPTED.resolve() in binds
    assert any(base == b or base.is_relative_to(b) for b in binds)
    assert paths.LIBRARY_DIR in binds and paths.SCHEMAS_DIR in binds
    # Never the kit itself, its evals/ or its tests.
    assert paths.KIT_ROOT not in binds and not any(paths.EVALS_DIR.is_relative_to(b) for b in binds)


def test_program_binds_of_a_node_cli_are_its_install_folder_and_the_node_prefix(tmp_path):
    package = tmp_path / "node_modules" / "@vendor" / "cli"
    package.mkdir(parents=True)
    (package / "package.json").write_text("{}")
    (package / "cli.js").write_text("#!/usr/bin/env sh\necho hi\n")
    (package / "cli.js").chmod(0o755)
    bin_dir = tmp_path / "node_modules" / ".bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(package / "cli.js")
    binds = sandbox.program_binds("claude-code", bin_dir / "claude")
    assert package in binds                      # the CLI's install folder, from its real path
    assert not any(b == tmp_path / "node_modules" for b in binds)
    shell = Path("/bin/sh").resolve()
    assert any(shell.is_relative_to(b) for b in binds)  # its #! interpreter's prefix
    # Inside, it runs by the name it was given, a link to where its files really are.
    pol = sandbox.make_policy("/usr/bin/bwrap", "0.8.0", program=binds, extra=[], protected=[],
                              temp_base=Path("/tmp"), env_names=[])
    assert (str(package / "cli.js"), str(bin_dir / "claude")) in pol.program_links
    assert str(package) in pol.program and str(bin_dir / "claude") not in pol.program


def test_a_protected_folder_inside_a_program_folder_is_hidden_and_one_around_it_refused(tmp_path):
    # An installed package's virtual environment holds the kit's sample sets (site-packages/
    # malloy_evals/kit/evals); its Python runs the scripted answerer, which must not see them.
    venv = tmp_path / "venv"
    evals = venv / "lib" / "site-packages" / "malloy_evals" / "kit" / "evals"
    (evals / "bookshop").mkdir(parents=True)
    (evals / "bookshop" / "cases.jsonl").write_text("{}\n")
    protected = [evals.resolve()]
    pol = sandbox.make_policy("/usr/bin/bwrap", "0.8.0", program=[venv], extra=[],
                              protected=protected, temp_base=Path("/tmp"), env_names=[])
    assert str(venv.resolve()) in pol.program
    assert str(evals.resolve()) in pol.masks
    options = pol.options(workdir=tmp_path / "work", inputs=tmp_path / "in")
    # Bound first, then hidden under an empty folder inside it.
    assert options.index(str(venv.resolve())) < options.index(str(evals.resolve()))
    assert options[options.index(str(evals.resolve())) - 1] == "--tmpfs"
    # A program inside the protected folder is still refused: it would be the set itself.
    with pytest.raises(UsageError, match="lies inside"):
        sandbox.make_policy("/usr/bin/bwrap", "0.8.0", program=[evals / "bookshop"], extra=[],
                            protected=protected, temp_base=Path("/tmp"), env_names=[])


def test_a_sandbox_bind_holding_a_set_a_run_or_evals_is_refused_with_exit_2(tmp_path, capsys):
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None})
    run = hs.new_run(tmp_path, set_dir, "sb1")
    elsewhere = tmp_path / "deep" / "er"
    elsewhere.mkdir(parents=True)
    copy = hs.make_set(elsewhere, {"bk_total_revenue": None}, name="copied")
    for path in (tmp_path, set_dir, run.dir, hs.KIT, hs.KIT / "evals", tmp_path / "deep",
                 copy / "cases.jsonl", Path("/proc/1"), Path("/dev/shm"), Path("/tmp")):
        code, _doc, err = hs.answer(["--run", str(run.dir), "--set", str(set_dir), "--local",
                                  "--sandbox-bind", str(path), "--answerer-cmd", hs.scripted_cmd()],
                                 capsys)
        assert code == 2 and f"--sandbox-bind {path}" in err, (path, err)
    assert not (run.dir / "harness.jsonl").exists()
    fine = tmp_path / "tools"
    fine.mkdir()
    assert sandbox.check_sandbox_binds([fine], [set_dir, run.dir]) == [fine.resolve()]
    (tmp_path / "room" / "attempts").mkdir(parents=True)
    with pytest.raises(UsageError, match="every attempt's folder"):
        sandbox.check_sandbox_binds([tmp_path / "room"], [set_dir],
                                    temp_base=tmp_path / "room" / "attempts")
    # The hs.answer key under another name: a lone copy of cases.jsonl, or a hard link to it.
    (fine / "sub").mkdir()
    os.link(set_dir / "cases.jsonl", fine / "sub" / "notes.txt")
    with pytest.raises(UsageError, match="hard link"):
        sandbox.check_sandbox_binds([fine], [set_dir, run.dir])
    (fine / "sub" / "notes.txt").unlink()
    (fine / "cases.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match="holds a set"):
        sandbox.check_sandbox_binds([fine], [set_dir, run.dir])


def test_pass_env_names_are_checked_and_added_to_the_allow_list():
    names = sandbox.allowed_env_names("command", ["PUBLISHER_TOKEN"])
    assert names[:3] == ["PATH", "LANG", "TZ"] and "PUBLISHER_TOKEN" in names
    assert "ANTHROPIC_API_KEY" not in names
    assert "ANTHROPIC_API_KEY" in sandbox.allowed_env_names("claude-code")
    with pytest.raises(UsageError):
        sandbox.allowed_env_names("command", ["NOT-A-NAME"])
    env = sandbox.sandbox_environment({"PUBLISHER_TOKEN": "t", "OTHER": "o", "PATH": "/x"},
                                      names, path_value="/usr/bin", workdir=Path("/w"))
    assert env == {"PUBLISHER_TOKEN": "t", "PATH": "/usr/bin", "HOME": sandbox.SANDBOX_HOME,
                   "TMPDIR": sandbox.SANDBOX_TMP, "PWD": "/w"}


def test_a_passed_variable_reaches_the_sealed_answerer_and_nothing_else_does(
        needs_node, tmp_path, capsys, monkeypatch, bookshop_mcp_url):
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None})
    run = hs.new_run(tmp_path, set_dir, "pe1")
    monkeypatch.setenv("I22_PASSED", SECRET)
    monkeypatch.setenv("I22_KEPT_OUT", SECRET)
    cmd = escape_program(tmp_path, targets=[], writes=[], needles=[], marker="i22-pe-" + uuid.uuid4().hex)
    code, _doc, err = hs.answer(["--run", str(run.dir), "--set", str(set_dir), "--mcp-url",
                              bookshop_mcp_url, "--pass-env", "I22_PASSED", "--answerer-cmd", cmd],
                             capsys)
    assert code == 0, err
    [r] = reports(run)
    assert "I22_PASSED" in r["env_names"] and "I22_KEPT_OUT" not in r["env_names"]
    start = next(line for line in hs.harness_lines(run) if line["event"] == "start")
    assert "I22_PASSED" in start["allow_list"]["env"]
    assert Run.open(run.dir).info["sandbox"] == start["sandbox"]


# ---------------------------------------------------------------- no bwrap: exit 3

def test_without_bwrap_on_path_the_sandbox_cannot_start():
    with pytest.raises(UnmeasuredError, match="apt-get install bubblewrap"):
        sandbox.find_bwrap({"PATH": "/nonexistent-bin"})


@pytest.mark.parametrize("bwrap, words", [
    ("/nonexistent/bwrap", "apt-get install bubblewrap"),
    ("/bin/false", "--version failed"),      # a program that is not a working bwrap
])
def test_a_missing_or_broken_bwrap_refuses_with_exit_3_unless_no_sandbox(
        tmp_path, capsys, monkeypatch, bwrap, words):
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None})
    run = hs.new_run(tmp_path, set_dir, "nb1")
    monkeypatch.setenv(sandbox.BWRAP_ENV, bwrap)
    code, _doc, err = hs.answer(["--run", str(run.dir), "--set", str(set_dir), "--local",
                              "--answerer-cmd", hs.scripted_cmd()], capsys)
    assert code == 3 and words in err and "--no-sandbox" in err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
    assert hs.ledger(run) == [] and "sandbox" not in Run.open(run.dir).info


# ---------------------------------------------------------------- --no-sandbox: UNSEALED

def test_no_sandbox_marks_the_run_and_every_headline_unsealed(
        needs_node, tmp_path, monkeypatch, bookshop_mcp_url):
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None})
    run = hs.new_run(tmp_path, set_dir, "uns1")
    monkeypatch.setenv(sandbox.BWRAP_ENV, "/nonexistent/bwrap")  # not needed unsealed
    done = subprocess.run([sys.executable, str(hs.RUN_ANSWERS), "--run", str(run.dir), "--set",
                           str(set_dir), "--mcp-url", bookshop_mcp_url, "--no-sandbox",
                           "--answerer-cmd", hs.scripted_cmd()],
                          cwd=hs.KIT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    lines = (done.stderr + done.stdout).strip().splitlines()
    err_lines = done.stderr.strip().splitlines()
    assert err_lines[0].startswith("UNSEALED") and err_lines[-1].startswith("UNSEALED")
    assert "UNSEALED" in done.stdout and lines
    info = Run.open(run.dir).info
    assert info["sandbox"] == seal.NO_SANDBOX
    eval_set = load_set(set_dir)
    written = RunOutputs.load(run.dir, set_dir).write()  # RESULTS.md, summary.json, report.html
    assert written.summary.headline.startswith("UNSEALED")
    assert "**UNSEALED" in Path(written.results_md).read_text()
    assert json.loads(Path(written.summary_json).read_text())["headline"].startswith("UNSEALED")
    page = Path(written.page.path).read_text()
    assert "UNSEALED" in page.split('id="headline"', 1)[1][:400]
    # The comparison: its verdict and headline (COMPARE.md, compare.json) and its page.
    baseline = hs.BOOKSHOP / "runs" / "baseline"
    c = compare.compare_arms(load_arm("base", [baseline], eval_set),
                             load_arm("candidate", [run.dir], eval_set), set_name=eval_set.name)
    assert "UNSEALED" in c.verdict and c.headline[0].startswith("UNSEALED")
    assert "UNSEALED" in compare.render_markdown(c).split("\n")[2]
    doc = c.to_json()
    assert "UNSEALED" in compare_page.render_compare_page(doc).split('id="verdict"', 1)[1][:800]
    # A run answered sealed (or by hand) reads as before.
    assert "UNSEALED" not in figures.summarize(Run.open(baseline), load_set(hs.BOOKSHOP)).headline


def test_a_run_once_answered_unsealed_stays_unsealed(tmp_path):
    assert seal.unsealed_note([("r1", {"sandbox": "bwrap 0.8.0 sha256:" + "0" * 64})]) is None
    assert seal.unsealed_note([("r1", {})]) is None           # answered by hand: not claimed
    note = seal.unsealed_note([("r1", {"sandbox": "none"}), ("r2", {})])
    assert note is not None and note.startswith("UNSEALED") and "r1" in note and "r2" not in note


def test_the_scripted_answerer_works_sealed_and_the_kit_is_hidden(needs_node, tmp_path, capsys,
                                                                  bookshop_mcp_url):
    run = hs.new_run(tmp_path, hs.BOOKSHOP, "sc1")
    code, doc, err = hs.answer(["--run", str(run.dir), "--set", str(hs.BOOKSHOP), "--mcp-url",
                             bookshop_mcp_url, "--only", "bk_total_revenue",
                             "--answerer-cmd", hs.scripted_cmd()], capsys)
    assert code == 0, err
    assert doc["recorded"] == 1 and doc["sandbox"].startswith("bwrap ")
    start = next(line for line in hs.harness_lines(run) if line["event"] == "start")
    bound = start["allow_list"]["program"] + start["allow_list"]["extra"]
    assert str(paths.LIBRARY_DIR) in bound
    assert not any(str(paths.EVALS_DIR).startswith(b) for b in bound + start["allow_list"]["system"])


def test_the_api_loop_has_no_program_to_seal_so_sandbox_flags_are_refused(tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    set_dir = hs.make_set(tmp_path, {"bk_total_revenue": None})
    run = hs.new_run(tmp_path, set_dir, "api1")
    for flags in (["--no-sandbox"], ["--sandbox-bind", str(tmp_path)]):
        code, _doc, err = hs.answer(["--run", str(run.dir), "--set", str(set_dir), "--local",
                                  "--answerer", "anthropic:claude-sonnet-4-5", *flags], capsys)
        assert code == 2 and flags[0] in err and "in-process" in err, err
    assert hs.ledger(run) == []

