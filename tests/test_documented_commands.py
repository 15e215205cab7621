"""Every command line written for people runs as written against the sample set.

The command lines of the three SKILL.md files, README.md, reference/**/*.md,
skills/*/reference/*.md and every script's --help are found (never listed: a new document or
script is covered the day it lands), parsed by the real script's parser, and run in order, one
document at a time, from a scratch copy of the kit's root, so the checkout stays as it was. A
command whose trailing comment says `# needs ...` (an API key, a Publisher, a host's reply),
`# serves ...` or `# rewrites ...` (the checkout itself) is only parsed; `# ... exit 1` says the
exit code a run must give (0 otherwise). README.md ("Command lines in these docs") says the same
to readers. The demo's own line (`scripts/demo.py --keep-going --scratch ../malloy-evals-demo`)
is the session's demo run (conftest.demo_run), made the same way from a scratch copy: its
outcome and its copy are checked here as if it had run in this test's copy.

A `--local` command starts the kit's endpoint over the set's package (serve_local.py over
stdio); here, where the commands run in this process, it connects instead to one endpoint per
package for the module (serve_local.py over loopback HTTP), when its package and data are the
sample set's own: the same real Malloy re-execution, without a Node runner pool compiled anew per
command. Likewise the goldens' re-derivation (verify_goldens.py, promote_golden.py and the drift
check of score_run.py) reads the sample set's truth package through one runtime for the module.
Starting them per command is tested where it is the subject (test_reexecute, test_run_scorer,
test_scoring, test_goldens, and the demo, which runs each step as its own process).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from demo_support import DEMO, DEMO_ARGS
from malloy_evals.answer import reexecute
from malloy_evals.answer.harness.local import serve_model_http
from malloy_evals.endpoint import runner
from malloy_evals.endpoint.package import package_sha
from malloy_evals.endpoint.runner import MalloyRuntime  # the class itself, never the patched name
from malloy_evals.sets.eval_set import EvalSet, load_set
from script_support import (
    KIT,
    LINKED,
    Outcome,
    documents,
    make_scratch,
    option_strings,
    parse_outcome,
    run_outcome,
    run_setup,
    skill_scripts,
)

DOCS = documents()


def _git_status(*paths: str) -> str:
    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *paths],
                          cwd=KIT, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else "(not a git checkout)"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _served(spec: str) -> tuple[str, str, str]:
    """What an endpoint started with `--package ENV/PKG=DIR` answers from: the names, the
    package's sha and a digest of the set's data/ beside it."""
    names, folder = spec.split("=", 1)
    data = hashlib.sha256()
    for path in sorted((Path(folder).parent / "data").rglob("*")):
        if path.is_file():
            data.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return names, package_sha(folder), data.hexdigest()


@pytest.fixture(scope="module")
def sample_endpoints() -> Iterator[Callable[[str], str | None]]:
    """The MCP URL of an endpoint serving what `--package ENV/PKG=DIR` names, when that is the sample
    set's model/ or model-candidate/ over its data (started on first use, stopped after the
    module), else None."""
    sample = load_set(KIT / "evals" / "bookshop")
    sets: dict[tuple[str, str, str], EvalSet] = {}
    for es in (sample, sample.with_model(sample.dir / "model-candidate")):
        sets[_served(es.package_spec)] = es
    urls: dict[tuple[str, str, str], str] = {}
    with contextlib.ExitStack() as stack:
        def url_for(spec: str) -> str | None:
            key = _served(spec)
            if key in sets and key not in urls:
                urls[key] = stack.enter_context(serve_model_http(sets[key]))
            return urls.get(key)
        yield url_for


class _Kept:
    """A runtime the module keeps: a command's close() leaves it running for the next."""

    def __init__(self, runtime: MalloyRuntime) -> None:
        self._runtime = runtime

    def execute(self, *args, **kw) -> dict:
        return self._runtime.execute(*args, **kw)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def sample_truth() -> Iterator[Callable[[Path], _Kept | None]]:
    """A runtime over the sample set's truth package (started on first use, stopped after the
    module) for a truth package with the same files and data, else None."""
    truth = KIT / "evals" / "bookshop" / "truth"
    key = _served(f"truth={truth}")
    kept: list[MalloyRuntime] = []

    def runtime_for(package_dir: Path) -> _Kept | None:
        if _served(f"truth={Path(package_dir).resolve()}") != key:
            return None
        if not kept:
            kept.append(MalloyRuntime(truth, allow=runner.default_allow(truth)))
        return _Kept(kept[0])

    yield runtime_for
    for runtime in kept:
        runtime.close()


@pytest.fixture
def shared_local(monkeypatch, sample_endpoints, sample_truth) -> None:
    """`--local` connects to the module's endpoint for its package instead of starting one, and
    the goldens are re-derived through the module's runtime over the sample's truth package."""
    real = reexecute.connect

    def runtime(package_dir, allow=None, **kw):
        return (not kw and sample_truth(package_dir)) or MalloyRuntime(package_dir, allow, **kw)

    monkeypatch.setattr(runner, "MalloyRuntime", runtime)  # verify_goldens looks it up per call

    def connect(url=None, command=None, **kw):
        if command is not None and "--package" in command:
            shared = sample_endpoints(command[command.index("--package") + 1])
            if shared is not None:
                return real(url=shared, timeout=kw.get("timeout", 120.0))
        return real(url=url, command=command, **kw)

    monkeypatch.setattr(reexecute, "connect", connect)


def test_every_skill_script_shows_at_least_two_command_lines_in_its_help():
    for script in skill_scripts():
        name = script.relative_to(KIT).as_posix()
        runs_it = [c for c in DOCS.get(name, []) if not c.is_setup and c.script()[0] == script]
        assert len(runs_it) >= 2, f"{name}: its --help shows {len(runs_it)} command line(s) of it"


def test_the_documents_hold_command_lines_to_check():
    assert {"README.md", "skills/eval-answer/SKILL.md", "skills/eval-judge/SKILL.md",
            "skills/eval-diagnose/SKILL.md"} <= set(DOCS)


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_documented_command_names_a_kit_script_and_only_flags_it_takes(name):
    for cmd in DOCS[name]:
        if cmd.is_setup:
            continue
        script, args = cmd.script()
        assert script is not None, f"{cmd.where}: names no kit script: {cmd.text}"
        known = option_strings(script)
        unknown = [a for a in args if a.startswith("--") and a.split("=")[0] not in known]
        assert not unknown, f"{cmd.where}: {script.name} takes no {', '.join(unknown)}"


def _runs_the_demo(name: str) -> bool:
    return any(cmd.script() == (DEMO, list(DEMO_ARGS)) for cmd in DOCS[name])


def test_the_session_demo_is_the_line_the_demos_help_documents():
    # Else the demo would run twice: once for the session's readers, once here.
    assert _runs_the_demo(DEMO.relative_to(KIT).as_posix())


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.reads_demo) if _runs_the_demo(name) else name
    for name in sorted(DOCS)])
def test_documented_commands_run_as_written_on_the_sample_set(name, tmp_path, needs_node,
                                                               shared_local, request):
    kit = make_scratch(tmp_path)
    kits = [kit]  # every scratch copy a command of this document ran in
    evals_before = _git_status("evals", "SKILL_INDEX.md")
    for cmd in DOCS[name]:
        if cmd.is_setup:
            outcome = run_setup(cmd, kit)
            assert outcome.code == 0, f"{cmd.where}: {cmd.text}\n{outcome.err}"
            continue
        script, args = cmd.script(kit)
        assert script is not None, f"{cmd.where}: names no kit script: {cmd.text}"
        if cmd.parse_only:
            outcome = parse_outcome(script, args, kit)
            assert outcome.code == 0, f"{cmd.where}: does not parse: {cmd.text}\n{outcome.err}"
            continue
        if (script, args) == (DEMO, list(DEMO_ARGS)):
            demo = request.getfixturevalue("demo_run")
            outcome = Outcome(demo.proc.returncode, demo.proc.stdout, demo.proc.stderr)
            kits.append(demo.kit)
        else:
            outcome = run_outcome(script, args, kit)
        assert outcome.code == cmd.expected_exit, (
            f"{cmd.where}: exit {outcome.code}, documented {cmd.expected_exit}: {cmd.text}\n"
            f"{outcome.err[-2000:]}")
        if "--json" in args:
            json.loads(outcome.out)  # exactly one JSON document on stdout
    assert _git_status("evals", "SKILL_INDEX.md") == evals_before, "a command wrote the checkout"
    # Followed from a real checkout, the docs must leave `git status` clean: new files only
    # under runs/ (ignored), the sample set as committed.
    for copy in kits:
        strays = [p.relative_to(copy).as_posix() for p in copy.iterdir()
                  if p.name not in LINKED + ("evals", "runs")]
        assert not strays, f"{name}: commands wrote outside runs/: {strays}"
        assert _tree(copy / "evals") == _tree(KIT / "evals"), f"{name}: commands changed evals/"
