"""One exit code per mistake, in every script (the table in README.md, "Exit codes").

Scripts are found, never listed. Each mistake starts from a command line the script documents
in its --help (shared flags pointed at the scratch copy of the sample set), which must parse as
it is; then the one mistake is made and the exit code checked: 2 for a wrong command line,
decided before anything is opened, 3 for a qid or sample the set or run does not have.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from malloy_evals.core import cli
from script_support import (
    KIT,
    build_parser,
    docstring_commands,
    kit_scripts,
    make_scratch,
    parse_outcome,
    run_outcome,
    run_setup,
    skill_scripts,
)

# Paths these scripts only compare with the paths an answerer's session touched: they need not
# exist, so a missing one is not a usage error.
MATCHED_ONLY = {"check_contamination.py": {"run", "set_dir"}}

# Where the shared flags point in a scratch copy of the kit.
SHARED_VALUES = {"run": "evals/bookshop/runs/baseline", "set_dir": "evals/bookshop",
                 "qid": "bk_total_revenue"}
PATH_TYPES = (cli.existing_dir, cli.existing_file)
NUMBER_TYPES = (cli.count, cli.at_least_one, cli.port, cli.seconds, cli.dollars)


def _actions(script: Path) -> list[argparse.Action]:
    return [a for a in build_parser(script)._actions if not isinstance(a, argparse._HelpAction)]


def _option(script: Path, flag: str) -> argparse.Action | None:
    return next((a for a in _actions(script) if flag in a.option_strings), None)


def _replace(argv: list[str], action: argparse.Action, value: str) -> list[str]:
    """argv with every value given to `action` (by any of its spellings) replaced."""
    out = list(argv)
    for i, token in enumerate(out[:-1]):
        if token in action.option_strings:
            out[i + 1] = value
    return out


def _without(argv: list[str], action: argparse.Action) -> list[str]:
    """argv with `action`'s flag (and its value, if it takes one) left out."""
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in action.option_strings:
            skip = action.nargs != 0
        else:
            out.append(token)
    return out


@dataclass(frozen=True)
class Base:
    """A command line of the script's --help, pointed at the scratch copy, that parses there."""

    argv: list[str]
    runs: bool  # the docs say it runs here (else only parse mistakes on it: a server)


_SET_UP: set[tuple[Path, str]] = set()  # (scratch copy, setup line) already run there


def _base(script: Path, cwd: Path, must_have: str | None = None, *,
          runnable: bool = False) -> Base:
    """The first command line of the script's --help that parses in the scratch copy once its
    shared flags point at the sample set (and that uses `must_have`, when given). The --help's
    own setup lines (`mkdir -p runs`, `cp -r evals/bookshop/runs/baseline runs/`) run first, so
    a base may name the copies they make."""
    tried = []
    for cmd in docstring_commands(script):
        if not cmd.is_setup or (cwd, cmd.text) in _SET_UP:  # the copies it made are still there
            continue
        if run_setup(cmd, cwd).code != 0:
            pytest.fail(f"{cmd.where}: {cmd.text} fails in the scratch copy")
        _SET_UP.add((cwd, cmd.text))
    for cmd in docstring_commands(script):
        found, argv = cmd.script()
        if found != script or (runnable and cmd.parse_only) \
                or (must_have and must_have not in argv):
            continue
        for action in _actions(script):
            if action.dest in SHARED_VALUES and action.option_strings:
                argv = _replace(argv, action, SHARED_VALUES[action.dest])
        tried.append(argv)
        if parse_outcome(script, argv, cwd).code == 0:
            return Base(argv, not cmd.parse_only)
    pytest.fail(f"{script.name}: no example in its --help"
                + (f" uses {must_have}" if must_have else "") + f" and parses here; tried {tried}")


def _partners(script: Path, flag: str) -> list[argparse.Action]:
    """The flags that exclude `flag` (its mutually exclusive group)."""
    parser = build_parser(script)
    for group in parser._mutually_exclusive_groups:
        names = [s for a in group._group_actions for s in a.option_strings]
        if flag in names:
            return [a for a in group._group_actions if flag not in a.option_strings]
    return []


def _cases(select) -> list:
    """pytest params (script, detail) for every script where `select(script)` names details."""
    params = []
    for script in kit_scripts():
        for detail in select(script):
            label = detail if isinstance(detail, str) else detail[0]
            params.append(pytest.param(script, detail, id=f"{script.name}:{label}"))
    return params


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scratch copy of the kit for every usage error: a command line refused with exit 2 is
    refused before anything is opened, so it writes nothing (_assert_usage_error checks that),
    and the tests can share the copy."""
    return make_scratch(tmp_path_factory.mktemp("usage"))


@pytest.fixture
def own_scratch(tmp_path: Path) -> Path:
    """A scratch copy of the kit for one test whose command runs past its command line."""
    return make_scratch(tmp_path)


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` (links to the kit not followed), with its size and mtime."""
    found = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(folder, name))
            found[os.path.join(folder, name)] = (st.st_size, st.st_mtime_ns)
    return found


def _assert_usage_error(script: Path, base: Base, argv: list[str], cwd: Path,
                        said: str) -> None:
    """Exit 2, nothing on stdout, no traceback, and the message names the mistake (`said`), so
    the test cannot pass on some other usage error; and nothing in the scratch copy written.
    The script's main() runs (only parsing, for a base that serves until stopped)."""
    before = _files(cwd)
    outcome = run_outcome(script, argv, cwd) if base.runs else parse_outcome(script, argv, cwd)
    shown = f"{script.name} {' '.join(argv)}"
    assert outcome.code == 2, f"{shown}: exit {outcome.code}, not 2\n{outcome.err}"
    after = _files(cwd)
    assert after == before, f"{shown}: refused, yet wrote " + ", ".join(
        sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p)))
    assert said in outcome.err, f"{shown}: the message does not say {said!r}\n{outcome.err}"
    assert outcome.out == "" and "Traceback" not in outcome.err


# ------------------------------------------------------------------------- exit 2: usage


def _path_flags(script: Path) -> list[str]:
    matched = MATCHED_ONLY.get(script.name, set())
    return [a.option_strings[0] if a.option_strings else a.dest for a in _actions(script)
            if a.type in PATH_TYPES and a.dest not in matched]


@pytest.mark.parametrize("script, flag", _cases(_path_flags))
def test_a_path_argument_that_does_not_exist_is_exit_2(script, flag, scratch):
    # Drift fixed: score_attempt.py, reexecute.py, judge.py, diagnose.py and others exited 3.
    base = _base(script, scratch)
    argv = list(base.argv)
    if flag.startswith("--"):
        if flag not in argv:  # an optional path the example does not give: give it instead
            for partner in _partners(script, flag):
                argv = _without(argv, partner)
            argv += [flag, "placeholder"]
        argv = _replace(argv, _option(script, flag), "no/such/path")
    else:  # a positional folder: the first one given
        first = next(a for a in argv if not a.startswith("-"))
        argv = [("no/such/path" if a == first else a) for a in argv]
    _assert_usage_error(script, base, argv, scratch, "no/such/path: no such")


@pytest.mark.parametrize("script, flag", _cases(
    lambda s: [f for f in _path_flags(s) if f in ("--run", "--set")]))
def test_a_run_or_set_that_is_a_file_is_exit_2(script, flag, scratch):
    base = _base(script, scratch, flag)
    argv = _replace(base.argv, _option(script, flag), "evals/bookshop/set.json")
    _assert_usage_error(script, base, argv, scratch, "set.json: not a folder")


@pytest.mark.parametrize("script", kit_scripts(), ids=lambda s: s.name)
def test_an_unknown_flag_is_exit_2(script, scratch):
    base = _base(script, scratch)
    _assert_usage_error(script, base, base.argv + ["--no-such-flag"], scratch,
                        "unrecognized arguments: --no-such-flag")


def _set_value(base: Base, script: Path, flag: str, value: str) -> list[str]:
    """The base with `flag` given `value` (added when the base does not give it)."""
    if flag in base.argv:
        return _replace(base.argv, _option(script, flag), value)
    return base.argv + [flag, value]


def _numbers(script: Path) -> list[str]:
    """Every flag that takes a number: the kit's types, and (in a skill script) a bare int or
    float, which the test below then catches letting -1 through."""
    bare = (int, float) if script in skill_scripts() else ()
    return [a.option_strings[0] for a in _actions(script) if a.type in NUMBER_TYPES + bare]


@pytest.mark.parametrize("script, flag", _cases(_numbers))
def test_a_negative_count_is_exit_2(script, flag, scratch):
    # Drift fixed: `diagnose.py --limit -1` was refused after parsing, `--parallel`, `--samples`,
    # `--concurrency` and `--max-cost-usd` took any integer.
    base = _base(script, scratch)
    _assert_usage_error(script, base, _set_value(base, script, flag, "-1"), scratch,
                        f"argument {flag}")


@pytest.mark.parametrize("script, flag", _cases(
    lambda s: [a.option_strings[0] for a in _actions(s) if a.type is cli.at_least_one]))
def test_zero_where_at_least_one_is_needed_is_exit_2(script, flag, scratch):
    # Drift fixed: `check_judge.py --repeat 0` was 3 while `check_coverage.py --repeat 0` was 2.
    base = _base(script, scratch)
    _assert_usage_error(script, base, _set_value(base, script, flag, "0"), scratch,
                        f"argument {flag}: 0: must be at least 1")


def _endpoint(script: Path) -> list[str]:
    return ["endpoint"] if _option(script, cli.LOCAL) and _option(script, cli.MCP_URL) else []


@pytest.mark.parametrize("script, what", _cases(_endpoint))
def test_local_and_mcp_url_together_is_exit_2(script, what, scratch):
    base = _base(script, scratch, cli.LOCAL)
    _assert_usage_error(script, base, base.argv + [cli.MCP_URL, "http://127.0.0.1:4040/mcp"],
                        scratch, "not allowed with argument")


@pytest.mark.parametrize("script, what", _cases(_endpoint))
def test_an_endpoint_left_out_where_one_is_needed_is_exit_2(script, what, scratch):
    # Drift fixed: score_attempt.py decided this after opening the run and the set.
    base = _base(script, scratch, cli.LOCAL)
    _assert_usage_error(script, base, _without(base.argv, _option(script, cli.LOCAL)), scratch,
                        cli.ENDPOINT_NEEDED)


@pytest.mark.parametrize("script, url", _cases(
    lambda s: ["not-a-url", "http://127.0.0.1:99999/mcp"] if _endpoint(s) else []))
def test_a_malformed_mcp_url_is_exit_2(script, url, scratch):
    base = _base(script, scratch, cli.LOCAL)
    argv = _without(base.argv, _option(script, cli.LOCAL)) + [cli.MCP_URL, url]
    _assert_usage_error(script, base, argv, scratch, f"argument --mcp-url: {url}")


def _required(script: Path) -> list[str]:
    return [a.option_strings[0] for a in _actions(script) if a.required and a.option_strings]


@pytest.mark.parametrize("script, flag", _cases(_required))
def test_a_missing_required_flag_is_exit_2(script, flag, scratch):
    base = _base(script, scratch)
    _assert_usage_error(script, base, _without(base.argv, _option(script, flag)), scratch,
                        f"the following arguments are required: {flag}")


def _provider_flags(script: Path) -> list[str]:
    return [f for f in ("--judge", "--reader", "--diagnoser") if _option(script, f)]


@pytest.mark.parametrize("spec", ["anthropic:", "bogus", "hand:no/such/replies.jsonl",
                                  "replay:no/such/dir"])
@pytest.mark.parametrize("script, flag", _cases(_provider_flags))
def test_a_provider_that_names_nothing_is_exit_2(script, flag, spec, scratch):
    base = _base(script, scratch, flag)
    _assert_usage_error(script, base, _replace(base.argv, _option(script, flag), spec), scratch,
                        f"argument {flag}")


def _host_scripts(script: Path) -> list[str]:
    return [f for f in _provider_flags(script) if _option(script, "--emit")]


def _neither_emit_nor_ingest(script: Path, argv: list[str]) -> list[str]:
    return _without(_without(argv, _option(script, "--emit")), _option(script, "--ingest"))


@pytest.mark.parametrize("script, flag", _cases(_host_scripts))
def test_emit_without_the_host_provider_is_exit_2(script, flag, scratch):
    # Drift fixed: --emit with another provider was silently ignored.
    base = _base(script, scratch, flag)
    argv = _neither_emit_nor_ingest(script, _replace(base.argv, _option(script, flag), "replay"))
    _assert_usage_error(script, base, argv + ["--emit"], scratch, "--emit and --ingest go with")


@pytest.mark.parametrize("script, flag", _cases(_host_scripts))
def test_the_host_provider_without_emit_or_ingest_is_exit_2(script, flag, scratch):
    base = _base(script, scratch, flag)
    argv = _neither_emit_nor_ingest(script, _replace(base.argv, _option(script, flag), "host"))
    _assert_usage_error(script, base, argv, scratch, "host needs --emit or --ingest")


def test_every_run_and_set_flag_is_checked_or_declared_matched_only():
    # The drift this file exists for: --run and --set were declared twenty times with three
    # types (score_run --run /nope exited 2, score_attempt 3).
    for script in kit_scripts():
        for action in _actions(script):
            if action.dest in ("run", "set_dir", "run_dirs") \
                    and action.dest not in MATCHED_ONLY.get(script.name, set()):
                assert action.type in PATH_TYPES, f"{script.name} {action.dest}: {action.type}"


def test_every_number_a_skill_script_takes_has_a_kit_type():
    # A bare int or float lets -1 through (`--repeat -1`); the kit's types refuse it in words.
    for script in skill_scripts():
        for action in _actions(script):
            assert action.type not in (int, float), \
                f"{script.name} {action.option_strings}: use cli.count / at_least_one / port / " \
                "seconds / dollars"


# ------------------------------------------------------------------- exit 3: not measurable


def _qid_flags(script: Path) -> list[str]:
    # Skill scripts only: a tool's --only may name something else (make_sample_runs: runs).
    return [f for f in (cli.QID, cli.ONLY) if script in skill_scripts() and _option(script, f)]


@pytest.mark.parametrize("script, flag", _cases(_qid_flags))
def test_a_qid_the_set_or_run_does_not_have_is_exit_3_naming_it(script, flag, own_scratch,
                                                                 needs_node):
    # Drift fixed: diagnose.py and check_coverage.py --only said 2; check_judge.py --only said 0
    # and calibrate_judge.py --only 3 without naming it.
    if any(flag in c.argv and not c.parse_only for c in docstring_commands(script)):
        base = _base(script, own_scratch, flag, runnable=True)
    else:  # an optional --only no example gives
        base = _base(script, own_scratch, runnable=True)
    argv = _set_value(base, script, flag, "no_such_case")
    outcome = run_outcome(script, argv, own_scratch)
    assert outcome.code == 3, f"{script.name} {' '.join(argv)}: exit {outcome.code}\n{outcome.err}"
    assert "no_such_case" in outcome.err and "Traceback" not in outcome.err


# record_attempt.py records the attempt: a sample the run does not have yet is what it adds.
RECORDS_ATTEMPTS = {"record_attempt.py"}


@pytest.mark.parametrize("script, flag", _cases(
    lambda s: [cli.SAMPLE] if _option(s, cli.SAMPLE) and cli.QID in _qid_flags(s)
    and s.name not in RECORDS_ATTEMPTS else []))
def test_a_sample_the_run_does_not_have_is_exit_3(script, flag, own_scratch, needs_node):
    base = _without(_base(script, own_scratch, cli.QID, runnable=True).argv,
                    _option(script, cli.SAMPLE))
    outcome = run_outcome(script, base + [cli.SAMPLE, "7"], own_scratch)
    assert outcome.code == 3, f"{script.name} {' '.join(base)} --sample 7: exit {outcome.code}\n{outcome.err}"
    assert "Traceback" not in outcome.err


def test_the_scratch_copy_leaves_the_checkout_alone(scratch):
    assert scratch.resolve() != KIT and (scratch / "evals").is_dir() and \
        not (scratch / "evals").is_symlink()
