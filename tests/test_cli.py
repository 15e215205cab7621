"""The shared script plumbing: the console command, one-line progress, exit codes, JSON output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from malloy_evals.core import cli
from malloy_evals.core.errors import InputError, UsageError

KIT = Path(__file__).resolve().parents[1]
CONSOLE = Path(sys.executable).parent / "malloy-evals"


def test_console_command_runs_the_skill_script_of_that_name():
    assert CONSOLE.exists() or shutil.which("malloy-evals"), "pip install -e . installs it"
    via_console = subprocess.run([str(CONSOLE), "validate_set", "evals/bookshop", "--json"],
                                 cwd=KIT, capture_output=True, text=True, timeout=600, check=False)
    by_path = subprocess.run([sys.executable, "skills/eval-answer/scripts/validate_set.py",
                              "evals/bookshop", "--json"],
                             cwd=KIT, capture_output=True, text=True, timeout=600, check=False)
    assert via_console.returncode == by_path.returncode == 0
    assert json.loads(via_console.stdout) == json.loads(by_path.stdout)


def test_console_command_with_an_unknown_script_is_a_usage_error_listing_the_scripts():
    proc = subprocess.run([str(CONSOLE), "no_such_script"], cwd=KIT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 2
    assert "no script named 'no_such_script'" in proc.stderr and "score_run" in proc.stderr


class _SlowStream:
    """A stderr whose every write gives other threads the chance to write in between, as a
    terminal or pipe under load does: print() would then split a line from its newline."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        time.sleep(0.0005)
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_progress_lines_from_many_threads_never_run_into_each_other(monkeypatch):
    stream = _SlowStream()
    monkeypatch.setattr(sys, "stderr", stream)

    def burst(n: int) -> None:
        for i in range(40):
            cli.progress(f"worker {n} line {i}")

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = "".join(stream.parts).splitlines()
    assert len(lines) == 6 * 40
    assert all(re.fullmatch(r"worker \d line \d+", line) for line in lines)


def test_input_error_becomes_one_line_naming_file_and_line_with_exit_3(capsys):
    def main(argv):
        raise InputError("cases.jsonl", 17, "golden.kind: 'scalr' is not one of [...]")

    with pytest.raises(SystemExit) as exc:
        cli.run(main, [])
    assert exc.value.code == 3
    assert capsys.readouterr().err == "error: cases.jsonl:17: golden.kind: 'scalr' is not one of [...]\n"


def test_usage_error_exits_2():
    def main(argv):
        raise UsageError("give exactly one of --mcp-url URL or --local")

    with pytest.raises(SystemExit) as exc:
        cli.run(main, [])
    assert exc.value.code == 2


@dataclass(frozen=True)
class _Result:
    path: Path
    tags: frozenset[str]


def test_emit_json_is_one_document_with_paths_and_sets_made_plain(capsys):
    cli.emit(_Result(Path("runs/r1"), frozenset({"b", "a"})), as_json=True)
    assert json.loads(capsys.readouterr().out) == {"path": "runs/r1", "tags": ["a", "b"]}


@pytest.mark.parametrize("value, message", [
    pytest.param("abc", "'abc' is not a whole number", id="word"),
    pytest.param("-1", "-1 is negative", id="negative"),
])
def test_count_type_refuses_in_words(value, message):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=message):
        cli.count(value)


@pytest.mark.parametrize("kind, value, message", [
    pytest.param(cli.at_least_one, "0", "0: must be at least 1", id="zero-repeats"),
    pytest.param(cli.dollars, "-0.5", "-0.5: must be 0 or more", id="negative-dollars"),
    pytest.param(cli.dollars, "nan", "nan: must be 0 or more", id="nan-dollars"),
    pytest.param(cli.seconds, "0", "0: must be more than 0 seconds", id="zero-seconds"),
    pytest.param(cli.port, "70000", "70000: a port is 1 to 65535", id="port-too-high"),
    pytest.param(cli.http_url, "127.0.0.1:4040/mcp", "expected http://HOST:PORT", id="no-scheme"),
    pytest.param(cli.http_url, "http://127.0.0.1:99999/mcp", "the port is not a number",
                 id="bad-port"),
    # Drift fixed: `--only ,` named nothing and was taken as "every case".
    pytest.param(cli.split_qids, " , ", "names nothing", id="empty-only"),
])
def test_shared_types_refuse_in_words(kind, value, message):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=message):
        kind(value)


def test_existing_dir_and_file_say_which_kind_of_thing_is_wrong(tmp_path):
    import argparse

    (tmp_path / "f.json").write_text("{}")
    with pytest.raises(argparse.ArgumentTypeError, match="no such folder"):
        cli.existing_dir(str(tmp_path / "nope"))
    with pytest.raises(argparse.ArgumentTypeError, match="f.json: not a folder"):
        cli.existing_dir(str(tmp_path / "f.json"))
    with pytest.raises(argparse.ArgumentTypeError, match="a folder, not a file"):
        cli.existing_file(str(tmp_path))
    assert cli.existing_file(str(tmp_path / "f.json")) == tmp_path / "f.json"


def test_a_registered_check_is_a_usage_error_after_parsing(capsys):
    p = cli.parser("Doc line.")
    p.add_argument("--a")
    p.add_argument("--b")
    cli.add_check(p, lambda args: "--a goes with --b" if (args.a is None) != (args.b is None)
                  else None)
    assert p.parse_args(["--a", "1", "--b", "2"]).a == "1"
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["--a", "1"])
    assert exc.value.code == 2 and "--a goes with --b" in capsys.readouterr().err


def test_a_check_on_a_plain_parser_is_refused_rather_than_skipped():
    import argparse

    with pytest.raises(TypeError, match="cli.parser"):
        cli.add_check(argparse.ArgumentParser(), lambda args: "never runs")


def test_endpoint_required_as_a_function_of_the_other_flags(capsys):
    p = cli.parser(None)
    p.add_argument("--ingest", action="store_true")
    cli.add_endpoint_arguments(p, required=lambda args: not args.ingest)
    assert p.parse_args(["--ingest"]).local is False
    assert p.parse_args(["--mcp-url", "http://127.0.0.1:4040/mcp"]).mcp_url.endswith("/mcp")
    with pytest.raises(SystemExit) as exc:
        p.parse_args([])
    assert exc.value.code == 2 and cli.ENDPOINT_NEEDED in capsys.readouterr().err


def test_a_name_the_input_does_not_have_is_exit_3_naming_the_file():
    cli.check_known(["q1"], {"q1", "q2"}, where="cases.jsonl")
    cli.check_known(None, set(), where="cases.jsonl")
    with pytest.raises(InputError) as exc:
        cli.check_known(["q1", "q9"], {"q1"}, where="cases.jsonl")
    assert exc.value.exit_code == 3
    assert str(exc.value) == "cases.jsonl: --only names qids not in the set: q9"


# The SDKs a script needs only to talk to a server or the API; importing them cost `--help` about
# a second (serve_local.py imported the MCP server, which imported the SDK at the top).
SDKS = ("mcp", "mcp_types", "anthropic", "pydantic", "starlette", "httpx")


def test_no_script_imports_an_sdk_to_answer_help():
    scripts = sorted(KIT.glob("skills/*/scripts/*.py")) + sorted(KIT.glob("scripts/*.py"))
    probe = (
        "import contextlib, io, runpy, sys\n"
        f"for path in {[str(p) for p in scripts]!r}:\n"
        "    sys.argv = [path, '--help']\n"
        "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "        runpy.run_path(path, run_name='__main__')\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SDKS!r}))\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=KIT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert len(scripts) > 20


# What a script's --help may import: the core, and the few modules that define shared flags or
# the values a parser offers (choices, defaults, types). Everything that does the work (the
# ledger's readers, scoring, the judge, reports, workflows) and jsonschema is imported after the
# command line is parsed, so --help answers without them (issue 30, start-up).
PARSING_MODULES = {
    "malloy_evals.llm.base", "malloy_evals.llm.select",          # --judge / --diagnoser flags
    "malloy_evals.judge.doctrine",                              # --judge-retries, --judge-samples
    "malloy_evals.report.stats",                                # --seed / --resamples defaults
    "malloy_evals.diagnose.selection",                          # --split choices, --verdicts
    "malloy_evals.answer.harness.plan",                         # --answerer, --split, the prompt
    "malloy_evals.ledger.events", "malloy_evals.ledger.public_loop", "malloy_evals.ledger.ties",
    "malloy_evals.sets.eval_set", "malloy_evals.sets.scaffold",  # new_set's default folder
    "malloy_evals.checks.contamination.refs",                   # --needle's type
    "malloy_evals.endpoint.mcp_server", "malloy_evals.endpoint.package",
    "malloy_evals.endpoint.runner",                             # serve_local's --package, budget
    "malloy_evals.endpoint.runtime_install",                    # the runner's (stdlib only)
}
HEAVY = ("jsonschema", "referencing", "yaml", *SDKS)


def _parsing_module(name: str) -> bool:
    parts = name.split(".")
    return (name in PARSING_MODULES or parts[:2] == ["malloy_evals", "core"]
            or len(parts) <= 2 or name + ".__init__" in PARSING_MODULES
            or any(m.startswith(name + ".") for m in PARSING_MODULES))


def test_every_help_imports_only_what_parsing_needs():
    scripts = sorted(KIT.glob("skills/*/scripts/*.py"))
    # One child: before each script the kit's modules and the heavy packages are forgotten, so
    # each --help is seen importing everything it needs by itself.
    probe = (
        "import contextlib, io, json, runpy, sys\n"
        f"heavy = {HEAVY!r}\n"
        "out = {}\n"
        f"for path in {[str(p) for p in scripts]!r}:\n"
        "    for name in [m for m in sys.modules if m.split('.')[0] in ('malloy_evals', *heavy)]:\n"
        "        del sys.modules[name]\n"
        "    before = set(sys.modules)\n"
        "    sys.argv = [path, '--help']\n"
        "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "        runpy.run_path(path, run_name='__main__')\n"
        "    out[path] = sorted(set(sys.modules) - before)\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=KIT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    imported = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(imported) == len(scripts) > 20
    for path, modules in imported.items():
        assert "malloy_evals.core.cli" in modules, path  # the probe saw the script's own imports
        heavy = [m for m in modules if m.split(".")[0] in HEAVY]
        kit = [m for m in modules if m.startswith("malloy_evals") and not _parsing_module(m)]
        assert (heavy, kit) == ([], []), f"{Path(path).name} --help imports {heavy + kit}"
