"""The kit as a package and as a plugin, tried as a new user would, outside the checkout.

The sdist is built from this checkout and the wheel from that sdist (so both must carry the kit),
offline, with the dev environment's setuptools. The wheel goes into a fresh virtual environment
in a scratch folder, installed by pip with no index: its four dependencies (and theirs) are the
ones the dev environment already has, given to the new environment by a `.pth` file naming a
folder of links to exactly those distributions, found from the wheel's own Requires-Dist. pip
checks the wheel's requirements against them, and the checkout's library is nowhere on the new
environment's path. Built once per run, whichever worker asks first.

A wheel missing a file fails here twice over: the wheel is compared with every tracked file of
the kit, and the installed scripts are run (--help, validate, a re-execution that installs the
Node runtime into a scratch user cache from the pinned lockfile).
"""

from __future__ import annotations

import email
import fcntl
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from demo_support import shared_root
from malloy_evals.core import cli, paths
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

KIT = Path(__file__).resolve().parents[1]
LIBRARY = "scripts/malloy_evals/"
KIT_IN_WHEEL = "malloy_evals/kit/"
# Tracked files that stay in the repository: how the kit is developed, tested and released.
NOT_SHIPPED = (".ci/", ".claude-plugin/", ".gitignore", "MANIFEST.in", "Makefile", "README.md",
               "SKILL_INDEX.md", "benchmarks/", "pyproject.toml", "setup.py", "tests/")
TIMEOUT_S = 600  # a ceiling for a loaded machine; every command here ends by itself
QID = "bk_total_revenue"


@dataclass(frozen=True)
class Installed:
    """The wheel installed in a fresh virtual environment outside the checkout."""

    wheel: Path
    venv: Path
    console: Path          # venv/bin/malloy-evals
    kit: Path              # the kit inside the installed package
    work: Path             # an empty folder to run commands from

    def run(self, *args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.console), *args], cwd=cwd or self.work,
                              env=env or clean_env(), capture_output=True, text=True,
                              timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would point a child at the checkout, and a fixed
    width for argparse's help."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "COLUMNS": "100", **extra}


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=clean_env(), stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"


def requirement_closure(roots: Iterable[str]) -> dict[str, metadata.Distribution]:
    """The distributions of this environment that `roots` (Requires-Dist lines) need, their
    extras and markers as pip reads them, by canonical name."""
    found: dict[str, metadata.Distribution] = {}
    extras: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in roots]
    todo = [r for r in todo if r.marker is None or r.marker.evaluate({"extra": ""})]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found and set(req.extras) <= extras[name]:
            continue
        extras[name] = extras.get(name, set()) | set(req.extras)
        found[name] = dist = metadata.distribution(req.name)
        for line in dist.requires or []:
            child = Requirement(line)
            if child.marker is None or any(child.marker.evaluate({"extra": e})
                                           for e in ("", *extras[name])):
                todo.append(child)
    return found


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(meta)).get_all("Requires-Dist") or []


def link_dependencies(wheel: Path, folder: Path) -> list[str]:
    """A folder of links to the top-level files of every distribution the wheel needs (their
    .dist-info included, so pip sees them installed); the names linked."""
    folder.mkdir(parents=True)
    for dist in requirement_closure(wheel_requirements(wheel)).values():
        assert dist.files is not None, f"{dist.metadata['Name']} has no RECORD"
        base = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files if not str(f).startswith("..")}:
            if not (folder / top).exists():
                (folder / top).symlink_to(base / top)
    return sorted(p.name for p in folder.iterdir())


def _build(root: Path) -> Installed:
    dist, work, source = root / "dist", root / "work", root / "source"
    dist.mkdir()
    work.mkdir()
    # The sdist from the checkout's tracked files as they are now (PEP 517's hook, offline),
    # then the wheel from the sdist alone. Built from a copy: setuptools stages the sdist's tree
    # and its egg-info in the folder it builds from, and the checkout must stay untouched while
    # other tests read its status.
    for name in tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(KIT / name, source / name)
    build_sdist = "import sys; from setuptools import build_meta as b; b.build_sdist(sys.argv[1])"
    _run([sys.executable, "-c", build_sdist, str(dist)], source)
    [sdist] = dist.glob("*.tar.gz")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "--quiet", "-w", str(dist), str(sdist)], work)
    [wheel] = dist.glob("*.whl")
    venv = root / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    _run([base_python, "-m", "venv", "--without-pip", str(venv)], work)
    [site] = venv.glob("lib/python*/site-packages")
    link_dependencies(wheel, root / "dependencies")
    (site / "dependencies-of-the-test.pth").write_text(str(root / "dependencies") + "\n")
    # This environment's pip installs into the new one (--python): no index, no cache.
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
          "--no-index", "--no-cache-dir", "--quiet", str(wheel)], work)
    return Installed(wheel=wheel, venv=venv, console=venv / "bin" / "malloy-evals",
                     kit=site / "malloy_evals" / "kit", work=work)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel built and installed once per run (the first worker to ask builds it; the
    others wait on the lock and reuse it)."""
    root = shared_root(tmp_path_factory.getbasetemp())
    folder = root / "package"
    with open(root / "package.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "ready.json").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            built = _build(folder)
            (folder / "ready.json").write_text(json.dumps({"wheel": str(built.wheel)}))
    wheel = Path(json.loads((folder / "ready.json").read_text())["wheel"])
    [site] = (folder / "venv").glob("lib/python*/site-packages")
    return Installed(wheel=wheel, venv=folder / "venv", console=folder / "venv/bin/malloy-evals",
                     kit=site / "malloy_evals" / "kit", work=folder / "work")


# ---------------------------------------------------------------- what the wheel holds

def tracked_files() -> list[str]:
    done = subprocess.run(["git", "ls-files", "-z"], cwd=KIT, capture_output=True, check=True)
    return [n for n in done.stdout.decode().split("\0") if n and (KIT / n).is_file()]


def missing_from_wheel(tracked: Iterable[str], in_wheel: Iterable[str]) -> list[str]:
    """Tracked files of the kit the wheel lacks: the library's at their package path, every
    other one (not in NOT_SHIPPED) under malloy_evals/kit/."""
    have = set(in_wheel)
    missing = []
    for name in tracked:
        if name.startswith(NOT_SHIPPED):
            continue
        want = (name.removeprefix("scripts/") if name.startswith(LIBRARY)
                else KIT_IN_WHEEL + name)
        if want not in have:
            missing.append(name)
    return missing


def test_a_file_left_out_of_the_wheel_is_named():
    tracked = ["scripts/malloy_evals/core/paths.py", "reference/schemas/run.schema.json",
               "evals/bookshop/set.json", "tests/test_cli.py", "README.md"]
    wheel = ["malloy_evals/core/paths.py", "malloy_evals/kit/evals/bookshop/set.json"]
    assert missing_from_wheel(tracked, wheel) == ["reference/schemas/run.schema.json"]


def test_the_wheel_holds_every_tracked_file_of_the_kit(installed):
    with zipfile.ZipFile(installed.wheel) as z:
        names = z.namelist()
    # A new top-level file or folder is either shipped (MANIFEST.in) or named in NOT_SHIPPED.
    assert missing_from_wheel(tracked_files(), names) == []
    assert not [n for n in names if "node_modules" in n or "__pycache__" in n
                or n.startswith(KIT_IN_WHEEL + "tests/")]
    for pinned in ("package.json", "package-lock.json", "runner.mjs"):
        assert f"malloy_evals/endpoint/node_runner/{pinned}" in names


# ---------------------------------------------------------------- the installed scripts

def test_the_installed_console_lists_every_script_and_refuses_an_unknown_one(installed):
    probe = subprocess.run([str(installed.venv / "bin" / "python"), "-c",
                            "import malloy_evals; print(malloy_evals.__file__)"],
                           cwd=installed.work, env=clean_env(), capture_output=True, text=True,
                           timeout=TIMEOUT_S, check=False)
    assert probe.stdout.strip() == str(installed.kit.parent / "__init__.py")  # not the checkout's
    listed = installed.run("--help")
    assert listed.returncode == 0, listed.stderr
    names = sorted(cli.console_scripts())
    assert len(names) > 30
    shown = [line.split()[0] for line in listed.stdout.splitlines() if line.startswith("  ")]
    assert sorted(shown) == names
    unknown = installed.run("no_such_script")
    assert unknown.returncode == 2 and "no script named 'no_such_script'" in unknown.stderr
    assert installed.run().returncode == 2


def test_every_installed_script_prints_the_same_help_as_from_the_checkout(installed):
    scripts = cli.console_scripts()

    def both(name: str) -> tuple[str, subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        from_wheel = installed.run(name, "--help")
        from_checkout = subprocess.run([sys.executable, str(scripts[name]), "--help"], cwd=KIT,
                                       env=clean_env(), capture_output=True, text=True,
                                       timeout=TIMEOUT_S, check=False)
        return name, from_wheel, from_checkout

    with ThreadPoolExecutor(max_workers=2) as pool:
        for name, from_wheel, from_checkout in pool.map(both, sorted(scripts)):
            assert from_wheel.returncode == from_checkout.returncode == 0, (name, from_wheel.stderr)
            assert from_wheel.stdout == from_checkout.stdout, name


def _without_dirs(doc: dict) -> dict:
    return {**doc, "runs": [{k: v for k, v in r.items() if k != "dir"} for r in doc["runs"]]}


def test_validate_from_the_installed_wheel_reports_a_sample_run_as_the_checkout_does(installed):
    run = installed.kit / "evals" / "bookshop" / "runs" / "baseline"
    not_a_run = installed.work / "empty"
    not_a_run.mkdir(exist_ok=True)
    ok = installed.run("validate", str(run), "--json")
    assert ok.returncode == 0, ok.stderr
    checkout = subprocess.run([sys.executable, "skills/eval-answer/scripts/validate.py",
                               "evals/bookshop/runs/baseline", "--json"], cwd=KIT,
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert _without_dirs(json.loads(ok.stdout)) == _without_dirs(json.loads(checkout.stdout))
    finding = installed.run("validate", str(not_a_run), "--json")
    assert finding.returncode == 1 and json.loads(finding.stdout)["ok"] is False
    usage = installed.run("validate", str(installed.work / "nowhere"))
    assert usage.returncode == 2 and "no such folder" in usage.stderr


def _lockfile_versions() -> dict[str, str]:
    lock = json.loads((paths.RUNTIME_SOURCE / "package-lock.json").read_text())
    return {key.removeprefix("node_modules/"): entry["version"]
            for key, entry in lock["packages"].items()
            if key.startswith("node_modules/") and "/node_modules/" not in key}


def test_a_reexecution_installs_the_node_runtime_into_the_user_cache_from_the_pinned_lockfile(
        installed, needs_node, tmp_path):
    # npm offline: the packages come from npm's cache (`make setup` filled it), never the network.
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "cache"), npm_config_offline="true")
    runs = tmp_path / "runs"
    shutil.copytree(installed.kit / "evals" / "bookshop" / "runs" / "baseline", runs / "baseline")
    shutil.copytree(KIT / "evals" / "bookshop" / "runs" / "baseline", runs / "checkout")
    done = installed.run("reexecute", "--run", str(runs / "baseline"), "--set",
                         str(installed.kit / "evals" / "bookshop"), "--qid", QID, "--local",
                         "--json", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "ok" and result["row_count"] == 1
    runtime = tmp_path / "cache" / "malloy-evals" / "node-runtime"
    [folder] = [p for p in runtime.iterdir() if p.is_dir()]  # beside it, its install's lock
    assert f"installing the Node Malloy runtime into {folder}" in done.stderr
    assert (folder / ".installed").is_file() and (folder / "runner.mjs").is_file()
    # Every package is the version the lockfile pins; Claude Code is left out until asked for.
    pinned = _lockfile_versions()
    installed_here = {}
    for manifest in (folder / "node_modules").glob("*/package.json"):
        installed_here[manifest.parent.name] = json.loads(manifest.read_text())["version"]
    for manifest in (folder / "node_modules").glob("@*/*/package.json"):
        installed_here[f"{manifest.parent.parent.name}/{manifest.parent.name}"] = \
            json.loads(manifest.read_text())["version"]
    assert installed_here and all(pinned[name] == v for name, v in installed_here.items())
    assert "@malloydata/malloy" in installed_here and "@anthropic-ai/claude-code" not in installed_here
    assert not list(installed.venv.rglob("node_modules"))  # nothing written into site-packages
    # The same rows as the checkout re-executes for the same attempt.
    checkout = subprocess.run([sys.executable, "skills/eval-answer/scripts/reexecute.py", "--run",
                               str(runs / "checkout"), "--set", "evals/bookshop", "--qid", QID,
                               "--local", "--json"], cwd=KIT, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
    assert checkout.returncode == 0, checkout.stderr
    prediction = Path(result["prediction_path"])
    assert (runs / "baseline" / prediction).read_text() == \
        (runs / "checkout" / prediction).read_text()
    again = installed.run("setup_runtime", "--json", env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["installed_now"] == []


def test_without_node_the_runtime_says_how_to_get_it_with_exit_3(installed, tmp_path):
    env = clean_env(PATH=str(installed.venv / "bin"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = installed.run("setup_runtime", env=env)
    assert done.returncode == 3
    assert "node is not on PATH" in done.stderr and "nodejs.org" in done.stderr
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------- the plugin's copy of the skills

def _plugin_copy(dest: Path) -> Path:
    """What the Claude Code plugin cache holds: the skills/ folder alone."""
    shutil.copytree(KIT / "skills", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.parametrize("script", sorted((KIT / "skills").glob("*/scripts/*.py")),
                         ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_skill_scripts_in_the_plugin_copy_use_the_library_the_python_has(tmp_path, script):
    copy = _plugin_copy(tmp_path / "plugin")
    target = copy / script.relative_to(KIT / "skills")
    probe = ("import runpy, sys\n"
             f"sys.argv = [{str(target)!r}, '--help']\n"
             "try:\n"
             f"    runpy.run_path({str(target)!r}, run_name='__main__')\n"
             "except SystemExit:\n"
             "    pass\n"
             "print(sys.modules['malloy_evals'].__file__)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, env=clean_env(), timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {script.name}")
    assert done.stdout.splitlines()[-1] == str(paths.LIBRARY_DIR / "__init__.py")


def test_a_plugin_script_without_the_library_runs_through_the_malloy_evals_command(
        installed, tmp_path):
    # A pipx or uv tool install: the library lives in its own environment, the command on PATH.
    copy = _plugin_copy(tmp_path / "plugin")
    bare = tmp_path / "bare"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(bare)], check=True, timeout=TIMEOUT_S)
    script = copy / "eval-answer" / "scripts" / "validate.py"
    run = str(installed.kit / "evals" / "bookshop" / "runs" / "baseline")
    with_command = clean_env(PATH=f"{installed.venv / 'bin'}{os.pathsep}/usr/bin:/bin")
    done = subprocess.run([str(bare / "bin" / "python"), str(script), run, "--json"],
                          cwd=tmp_path, env=with_command, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    usage = subprocess.run([str(bare / "bin" / "python"), str(script), str(tmp_path / "nowhere")],
                           cwd=tmp_path, env=with_command, capture_output=True, text=True,
                           timeout=TIMEOUT_S, check=False)
    assert usage.returncode == 2  # the same exit codes: the same script ran
    without = subprocess.run([str(bare / "bin" / "python"), str(script), run],
                             cwd=tmp_path, env=clean_env(PATH="/usr/bin:/bin"),
                             capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert without.returncode == 3 and without.stdout == ""
    [line] = without.stderr.splitlines()
    assert "malloy-evals package is not installed" in line and "pipx install malloy-evals" in line
