"""The sealed attempt: bubblewrap (`bwrap`) around every command answerer, from an allow-list.

An answerer started inside the sandbox sees the system folders read-only (`/usr`, `/etc` and the
merged-usr links), its own program read-only (`program_binds`), the attempt's inputs read-only
and its working folder read-write, a fresh empty `/tmp` with `HOME` inside it, a fresh `/proc`
showing only its own processes, and nothing else. It runs in new PID, IPC and UTS namespaces with
every capability dropped, in a new session, and dies with the harness (`--die-with-parent`):
when the attempt's first process ends, the PID namespace ends and every process it started goes
with it. Its environment is an allow-list too (`allowed_env_names`). So is its network: a
namespace of its own (`--unshare-net`), whose only ways out are the run's destinations
(network.py), reached through the relay inside (netrelay.py, run by a Python the sandbox
binds) and the try's gateway outside (gateway.py). The rules, and why each holds, are in
skills/eval-answer/reference/harness.md.

`SandboxPolicy` is decided once per run (what is bound, which variables pass, where the network
leads); its `digest` names that allow-list in run.json, and `argv` wraps one attempt's command
in it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from malloy_evals.answer.harness import netrelay
from malloy_evals.answer.harness.network import NetworkAllowList
from malloy_evals.core import paths
from malloy_evals.core.errors import UnmeasuredError, UsageError

# A path to the bwrap executable, used instead of looking `bwrap` up on PATH (how a machine
# with bubblewrap elsewhere points the harness at it, and how the tests take it away).
BWRAP_ENV = "MALLOY_EVALS_BWRAP"
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install " \
               "bubblewrap), or run unsealed with --no-sandbox"
API_LOOP = "api-loop"        # ... of a run answered in-process by anthropic:MODEL (no program)

# The system folders every answerer gets read-only. /bin, /sbin and /lib* are links into /usr on
# a merged-usr system (then recreated as links) or folders of their own (then bound).
SYSTEM_DIRS = ("/usr", "/etc")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SANDBOX_TMP = "/tmp"
SANDBOX_HOME = "/tmp/home"
NAMESPACE_FLAGS = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
                   "--die-with-parent", "--new-session", "--cap-drop", "ALL")
# The relay (netrelay.py) runs first inside: standard library only, isolated from the
# environment and site-packages, by whichever Python the sandbox already shows (RELAY_PYTHONS,
# then the harness's own, bound for it when nothing else is).
RELAY_SCRIPT = Path(netrelay.__file__).resolve()
RELAY_INSIDE = "/run/malloy-evals/netrelay.py"   # where it is bound: no path of the kit's shows
RELAY_FLAGS = ("-I", "-S")
RELAY_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")

# Variables every sealed answerer gets from the harness (when set there); the answerer spec and
# --pass-env add to them. HOME, PWD and TMPDIR are set to the sandbox's own folders.
BASE_ENV = ("PATH", "LANG", "TZ")
SPEC_ENV = {"claude-code": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
            "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Interpreters whose first file argument is the program (the script) they run.
_INTERPRETER = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|node|nodejs|deno|bun|perl[0-9.]*|"
                          r"ruby[0-9.]*|php[0-9.]*|Rscript|bash|sh|dash|zsh|ksh|lua[0-9.]*)$")
# A set's and a run's files: a folder holding any of them is never bound, nor any folder above.
SET_MARKERS = ("set.json", "cases.jsonl")
RUN_MARKERS = ("run.json",)
# The kit's library, as a script of the kit's own (the scripted answerer) imports it: its code,
# and the schemas it reads its vocabularies from at import. Neither holds a set, a run or a key.
KIT_LIBRARY = (paths.LIBRARY_DIR, paths.SCHEMAS_DIR)
KERNEL_DIRS = ("/proc", "/sys", "/dev")   # never bound from the host, whatever asks
WALK_LIMIT = 100_000          # entries a --sandbox-bind folder is searched for a set or a run


# ---------------------------------------------------------------- bubblewrap itself

def find_bwrap(env: Mapping[str, str] | None = None) -> str:
    """The bwrap executable: $MALLOY_EVALS_BWRAP when set, else `bwrap` on PATH. Missing, it is
    an UnmeasuredError (exit 3) saying how to install it."""
    env = os.environ if env is None else env
    named = env.get(BWRAP_ENV)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        raise UnmeasuredError(f"the sandbox needs bubblewrap, and {BWRAP_ENV}={named} is not an "
                              f"executable file; {INSTALL_HINT}")
    found = shutil.which("bwrap", path=env.get("PATH"))
    if found is None:
        raise UnmeasuredError(f"the sandbox needs bubblewrap (bwrap), which is not on PATH; "
                              f"{INSTALL_HINT}")
    return found


def bwrap_version(bwrap: str) -> str:
    """`0.8.0`: the version bwrap reports, checked by making one throwaway sandbox with the
    namespaces every attempt gets (a kernel that refuses them fails here, exit 3)."""
    try:
        said = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30,
                              check=False)
        probe = subprocess.run([bwrap, "--ro-bind", "/", "/", *NAMESPACE_FLAGS, "--", "true"],
                               capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UnmeasuredError(f"{bwrap} could not be run ({exc}); {INSTALL_HINT}") from None
    words = said.stdout.split()
    if said.returncode != 0 or not words:
        raise UnmeasuredError(f"{bwrap} --version failed (exit {said.returncode}); is it "
                              f"bubblewrap? {INSTALL_HINT}")
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
        raise UnmeasuredError(f"bubblewrap cannot make a sandbox on this machine ({why}): user "
                              "namespaces may be refused (allow them, e.g. sysctl "
                              "kernel.unprivileged_userns_clone=1, or install bwrap setuid), or "
                              "run unsealed with --no-sandbox")
    return words[-1]


# ---------------------------------------------------------------- what the answerer's program is

def _nearest_with(start: Path, name: str, stop: int = 6) -> Path | None:
    """The nearest folder at or above `start` holding `name`, looking up `stop` levels."""
    for folder in [start, *start.parents][:stop]:
        if (folder / name).is_file():
            return folder
    return None


def _shebang(path: Path) -> list[str]:
    """The words of a script's `#!` line, or [] for a binary or an unreadable file."""
    try:
        with path.open("rb") as fh:
            head = fh.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    return head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()


def _interpreter_binds(named: Path, search_path: str | None) -> list[Path]:
    """An interpreter's read-only folders: its prefix (the folder above its `bin/`) and, for a
    virtual environment's Python, the environment (and the prefix its pyvenv.cfg names)."""
    out: list[Path] = []
    real = named.resolve()
    for exe in (named.absolute(), real):
        venv = exe.parent.parent
        if (venv / "pyvenv.cfg").is_file():
            out.append(venv)
            home = _pyvenv_home(venv / "pyvenv.cfg")
            if home is not None:
                out.append(home.parent if home.name == "bin" else home)
    out.append(real.parent.parent if real.parent.name == "bin" else real.parent)
    return out


def _pyvenv_home(cfg: Path) -> Path | None:
    try:
        for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                return Path(value.strip()).resolve()
    except OSError:
        return None
    return None


def _resolve(word: str, search_path: str | None) -> Path | None:
    found = word if "/" in word else shutil.which(word, path=search_path)
    return Path(found).absolute() if found and os.path.exists(found) else None


def program_binds(kind: str, program: str | Path, args: Sequence[str] = (), *,
                  search_path: str | None = None) -> list[Path]:
    """The read-only folders and files that make up the answerer's own program.

    `kind` is the answerer spec's kind (`claude-code`, `command`); `program` is its executable as
    resolved (the `claude` path, or the command's first word); `args` are the words after it.
    An executable is bound by its real path (the path it was named by comes too: make_policy
    recreates the link on the way inside, since the command runs it by that name); a script's
    interpreter (its `#!` line, or an
    interpreter named as the command) by its prefix or virtual environment, and the script file
    itself. For `claude-code` the CLI's install folder (the package holding its real path) comes
    too, and the Node runtime its `#!` names. A script inside the kit's scripts/ folder also gets
    the kit's library (`KIT_LIBRARY`), which it imports: program code, never a set or a run.
    """
    named = _resolve(str(program), search_path)
    if named is None:
        raise UsageError(f"the answerer's program {program} is not found (on PATH or as a path)")
    real = named.resolve()
    binds = [real, named]
    scripts: list[Path] = []
    bang = _shebang(real)
    if bang:
        interp = bang[1] if Path(bang[0]).name == "env" and len(bang) > 1 else bang[0]
        found = _resolve(interp, search_path)
        if found is not None:
            binds += [found.resolve(), *_interpreter_binds(found, search_path)]
        scripts += [real, named]
    elif _INTERPRETER.match(real.name) or _INTERPRETER.match(named.name):
        binds += _interpreter_binds(named, search_path)
        script = next((a for a in args if not a.startswith("-")), None)
        if script is not None and os.path.isfile(script):
            scripts += [Path(script).resolve(), Path(script).absolute()]
    if kind == "claude-code":
        package = _nearest_with(real.parent, "package.json")
        binds.append(package if package is not None else real.parent)
    binds += scripts
    library_home = paths.LIBRARY_DIR.parent
    if any(s.is_relative_to(library_home) for s in scripts):
        binds += KIT_LIBRARY
    return _distinct(binds)


def command_program(template: str, search_path: str | None) -> tuple[str, list[str]]:
    """The program an --answerer-cmd template runs first, and the words after it: leading
    `NAME=value` assignments, `exec` and `env` are skipped. Programs run later in a pipeline
    must be system ones, or added with --sandbox-bind."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise UsageError(f"--answerer-cmd: {exc}") from None
    i = 0
    while i < len(words) and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i])
                              or words[i] in ("exec", "env", "command")):
        i += 1
    if i >= len(words):
        raise UsageError("--answerer-cmd names no program")
    return words[i], words[i + 1:]


def _distinct(items: Iterable[Path]) -> list[Path]:
    """Paths in order, each once, and none inside another already kept (a bound folder covers
    what it holds)."""
    kept: list[Path] = []
    for p in items:
        if any(p == k or p.is_relative_to(k) for k in kept):
            continue
        kept = [k for k in kept if not k.is_relative_to(p)]
        kept.append(p)
    return kept


# ---------------------------------------------------------------- what must never be reachable

def _within(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def _marked(folder: Path) -> str | None:
    """`a set` / `a run` when `folder` holds any of a set's or a run's files."""
    if any((folder / m).is_file() for m in SET_MARKERS):
        return "a set"
    if any((folder / m).is_file() for m in RUN_MARKERS):
        return "a run"
    return None


def protected_inodes(protected: Sequence[Path]) -> frozenset[tuple[int, int]]:
    """(device, inode) of every file in the protected folders (up to WALK_LIMIT entries each):
    a hard link to one, under any name and anywhere, is the same file."""
    out: set[tuple[int, int]] = set()
    for root in protected:
        seen = 0
        for folder, _dirs, names in os.walk(root):
            for name in names:
                seen += 1
                try:
                    st = os.stat(os.path.join(folder, name), follow_symlinks=False)
                except OSError:
                    continue
                out.add((st.st_dev, st.st_ino))
            if seen > WALK_LIMIT:
                break
    return frozenset(out)


def exposure(path: Path, protected: Sequence[Path], *, walk: bool,
             inodes: frozenset[tuple[int, int]] = frozenset()) -> str | None:
    """Why binding `path` would show the answerer what it must not see, or None.

    It would when `path` holds a protected folder (the kit's evals/, the set, the run) or lies
    inside one; when it or a folder above it holds a set's or a run's file (set.json,
    cases.jsonl, run.json); when it is a hard link to a protected file (`inodes`); or (`walk`)
    when any of these is found anywhere below it (searched up to WALK_LIMIT entries; a bigger
    folder is refused: bind a narrower one)."""
    path = path.resolve()
    for p in protected:
        if _within(p, path):
            return f"it contains {p}"
        if _within(path, p):
            return f"it lies inside {p}"
    for folder in [path, *path.parents] if path.is_dir() else list(path.parents):
        kind = _marked(folder)
        if kind is not None:
            return f"{folder} holds {kind}'s files"
    if path.is_file():
        if path.name in SET_MARKERS + RUN_MARKERS:
            return f"it is a set's or a run's file ({path.name})"
        st = path.stat()
        if (st.st_dev, st.st_ino) in inodes:
            return "it is a hard link to a file of the set or the run"
    if not walk or not path.is_dir():
        return None
    seen = 0
    stack = [path]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        seen += len(entries)
        if seen > WALK_LIMIT:
            return (f"it holds more than {WALK_LIMIT} entries, too many to check for a set or a "
                    "run (bind a narrower folder)")
        for e in entries:
            if e.name in SET_MARKERS + RUN_MARKERS:
                return f"it contains a set's or a run's file at {e.path}"
            if inodes and e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                if (st.st_dev, st.st_ino) in inodes:
                    return f"it contains a hard link to a file of the set or the run at {e.path}"
        stack += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    return None


def kernel_view(path: Path) -> str | None:
    """Why a path under /proc, /sys or /dev is never given: the host's processes (their
    environments, their folders through /proc/PID/root) and devices, past every other rule."""
    real = path.resolve()
    for top in KERNEL_DIRS:
        if _within(real, Path(top)) or _within(Path(top), real):
            return f"{top} is the host's own (its processes, their files and environments)"
    return None


def check_sandbox_binds(binds: Sequence[str | Path], protected: Sequence[Path],
                        temp_base: Path | None = None) -> list[Path]:
    """The --sandbox-bind paths, resolved; each must exist, show no set, run or evals/, hold
    none of the attempts' folders (`temp_base`) and no part of /proc, /sys or /dev (UsageError,
    exit 2, naming the path)."""
    out: list[Path] = []
    inodes = protected_inodes(protected) if binds else frozenset()
    for given in binds:
        path = Path(given)
        if not path.is_absolute():
            raise UsageError(f"--sandbox-bind {given}: give an absolute path")
        if not path.exists():
            raise UsageError(f"--sandbox-bind {given}: no such file or folder")
        why = kernel_view(path) or exposure(path, protected, walk=True, inodes=inodes)
        if why is None and temp_base is not None and _within(temp_base.resolve(), path.resolve()):
            why = f"it contains {temp_base}, where every attempt's folder is made"
        if why is not None:
            raise UsageError(f"--sandbox-bind {given}: refused, {why}; the answerer must never "
                             "see a set, a run or the kit's evals/")
        out.append(path.resolve())
    return out


# ---------------------------------------------------------------- the environment

def allowed_env_names(kind: str, pass_env: Sequence[str] = ()) -> list[str]:
    """The variables a sealed answerer gets from the harness's environment: PATH, LANG, TZ, what
    its kind needs (ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL for claude-code), and every name in
    `pass_env` (--pass-env, and names the plan adds, such as a hosted endpoint's header
    variable). A name that is not a variable name is a UsageError."""
    for name in pass_env:
        if not _ENV_NAME.match(name):
            raise UsageError(f"--pass-env {name!r}: not an environment variable name")
    return list(dict.fromkeys([*BASE_ENV, *SPEC_ENV.get(kind, ()), *pass_env]))


def sandbox_environment(base: Mapping[str, str], names: Sequence[str], *,
                        path_value: str | None, workdir: Path) -> dict[str, str]:
    """The sealed answerer's whole environment: the allowed names that are set in `base`
    (`path_value` in place of PATH: the harness's PATH without entries naming the kit, the set
    or the run), HOME and TMPDIR inside the sandbox's own /tmp, PWD its working folder."""
    env = {n: base[n] for n in names if n in base and n != "PATH"}
    if path_value:
        env["PATH"] = path_value
    env.update(HOME=SANDBOX_HOME, TMPDIR=SANDBOX_TMP, PWD=str(workdir))
    return env


# ---------------------------------------------------------------- the policy

@dataclass(frozen=True)
class SandboxPolicy:
    """What every sealed attempt of one run may see, decided before the first attempt."""

    bwrap: str
    version: str
    system: tuple[str, ...]               # folders bound read-only at the same path
    links: tuple[tuple[str, str], ...]    # (target, link) recreated inside
    program: tuple[str, ...]              # the answerer's program, read-only, by real path
    extra: tuple[str, ...]                # --sandbox-bind, read-only
    masks: tuple[str, ...]                # protected paths inside a bound folder: hidden
    env_names: tuple[str, ...]
    program_links: tuple[tuple[str, str], ...] = ()  # (target, link): how the program is named
    relay: tuple[str, ...] = ()           # the relay's command: its Python, flags, RELAY_INSIDE
    relay_binds: tuple[str, ...] = ()     # its Python's, when nothing else binds one (read-only)
    network: NetworkAllowList = field(default_factory=NetworkAllowList)  # where it may connect

    def allow_list(self) -> dict[str, object]:
        """The allow-list as data (harness.jsonl's start line holds it; the digest is of it)."""
        return {"system": list(self.system), "links": [list(x) for x in self.links],
                "program": list(self.program), "extra": list(self.extra),
                "program_links": [list(x) for x in self.program_links],
                "masks": list(self.masks), "env": list(self.env_names),
                "tmp": SANDBOX_TMP, "home": SANDBOX_HOME, "namespaces": list(NAMESPACE_FLAGS),
                "network": {"destinations": self.network.describe(),
                            "proxy_env": sorted(self.network.proxy_environment()),
                            "relay": list(self.relay), "relay_binds": list(self.relay_binds),
                            "relay_script": [str(RELAY_SCRIPT), RELAY_INSIDE]},
                "attempt": ["inputs read-only", "workdir read-write", "sockets read-only"]}

    def with_network(self, network: NetworkAllowList) -> SandboxPolicy:
        """This policy with the run's destinations, known once the endpoint is up."""
        return replace(self, network=network)

    def command(self, argv: Sequence[str], relay_config: Path | None) -> list[str]:
        """The command the sandbox runs: the answerer's own, behind the relay when it has
        ways out (`relay_config`, written by the try's gateway)."""
        if relay_config is None:
            return list(argv)
        return [*self.relay, str(relay_config), "--", *argv]

    @property
    def digest(self) -> str:
        doc = json.dumps(self.allow_list(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(doc.encode("utf-8")).hexdigest()

    @property
    def label(self) -> str:
        """run.json's `sandbox`: `bwrap 0.8.0 sha256:<digest of the allow-list>`."""
        return f"bwrap {self.version} sha256:{self.digest}"

    def options(self, *, workdir: Path, inputs: Path, sockets: Path | None = None) -> list[str]:
        """bwrap's options for one attempt in `workdir` (the command follows them, after `--`);
        `sockets` is the try's gateway folder (its Unix sockets and the relay's configuration).
        `command.run_child` hands them over through `--args FD`: the sandbox's pid 1, whose
        command line the answerer can read, then shows the command it runs, no more."""
        out: list[str] = []
        for folder in self.system:
            out += ["--ro-bind", folder, folder]
        for target, link in self.links:
            out += ["--symlink", target, link]
        out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP, "--dir", SANDBOX_HOME]
        for item in (*self.program, *self.relay_binds, *self.extra):
            out += ["--ro-bind", item, item]
        if self.relay:
            out += ["--ro-bind", str(RELAY_SCRIPT), RELAY_INSIDE]
        for target, link in self.program_links:
            out += ["--symlink", target, link]
        for mask in self.masks:
            out += (["--tmpfs", mask] if os.path.isdir(mask)
                    else ["--ro-bind", "/dev/null", mask])
        out += ["--ro-bind", str(inputs), str(inputs), "--bind", str(workdir), str(workdir)]
        if sockets is not None:
            out += ["--ro-bind", str(sockets), str(sockets)]
        out += ["--chdir", str(workdir), *NAMESPACE_FLAGS]
        return out

    def argv(self, command: Sequence[str], *, workdir: Path, inputs: Path,
             sockets: Path | None = None, relay_config: Path | None = None) -> list[str]:
        """The whole bwrap command line for one attempt (for people and benchmarks; the
        harness passes the options through a pipe instead)."""
        return [self.bwrap, *self.options(workdir=workdir, inputs=inputs, sockets=sockets), "--",
                *self.command(command, relay_config)]


def system_binds() -> tuple[list[str], list[tuple[str, str]]]:
    """The system folders present here, and the merged-usr links to recreate. A resolver
    configuration that is a link out of /etc (systemd-resolved's /run/...) comes with them, so
    the answerer can still look up the model API's name."""
    folders = [d for d in SYSTEM_DIRS if os.path.isdir(d)]
    resolv = os.path.realpath("/etc/resolv.conf")
    if os.path.isfile(resolv) and not any(_within(Path(resolv), Path(d)) for d in folders):
        folders.append(resolv)
    links: list[tuple[str, str]] = []
    for name in SYSTEM_LINKS:
        if os.path.islink(name):
            links.append((os.readlink(name), name))
        elif os.path.isdir(name):
            folders.append(name)
    return folders, links


def make_policy(bwrap: str, version: str, *, program: Sequence[Path], extra: Sequence[Path],
                protected: Sequence[Path], temp_base: Path, env_names: Sequence[str]) -> SandboxPolicy:
    """The run's policy. A program path that would expose a protected folder (one inside it, or
    beside a set's or a run's files) is a UsageError (exit 2); a protected folder (or the
    attempts' temporary folder) that happens to lie inside a system folder or a bound program
    folder is hidden under an empty one (the kit's evals/ inside the virtual environment of an
    installed package, whose Python runs the scripted answerer). Program paths are
    bound by their real paths; one named through a link (`node_modules/.bin/claude`, a folder
    linked into a scratch copy) gets that link recreated inside, so the program runs by the
    name it was given and still finds its files where they really are."""
    inodes = protected_inodes(protected)
    for item in program:
        real_item = item.resolve()
        exposed = [p for p in protected if not _within(Path(p).resolve(), real_item)
                   or Path(p).resolve() == real_item]  # those inside it are masked below
        why = kernel_view(item) or exposure(item, exposed, walk=False, inodes=inodes)
        if why is not None:
            raise UsageError(f"the answerer's program {item} cannot be given to the sandbox: "
                             f"{why}")
    folders, links = system_binds()
    real = _distinct(p.resolve() for p in program)
    inside = [Path(f).resolve() for f in folders] + real + [Path(x) for _t, x in links]
    named = {}
    for p in program:
        first = _first_link(p.absolute())
        if first is not None and not any(_within(first, b) for b in inside):
            named[str(first)] = os.path.realpath(first)
    python, relay_binds = relay_python([Path(f).resolve() for f in folders] + real)
    for item in relay_binds:
        why = kernel_view(item) or exposure(item, protected, walk=False, inodes=inodes)
        if why is not None:
            raise UsageError(f"the sandbox's network relay needs {item}, which cannot be given "
                             f"to the sandbox: {why}")
    bound = [Path(f).resolve() for f in folders] + real + relay_binds + list(extra)
    hidden = list(protected)
    if temp_base.resolve() != Path(SANDBOX_TMP):
        hidden.append(temp_base.resolve())
    masks = sorted({str(p) for p in hidden if p.exists()
                    and any(_within(p, b) and p != b for b in bound)})
    return SandboxPolicy(bwrap=bwrap, version=version, system=tuple(folders), links=tuple(links),
                         program=tuple(str(p) for p in real),
                         extra=tuple(str(p) for p in extra), masks=tuple(masks),
                         env_names=tuple(env_names),
                         program_links=tuple((t, k) for k, t in sorted(named.items())),
                         relay=(str(python), *RELAY_FLAGS, RELAY_INSIDE),
                         relay_binds=tuple(str(p) for p in relay_binds))


def _python_prefix(real: Path) -> Path:
    return real.parent.parent if real.parent.name == "bin" else real.parent


def relay_python(bound: Sequence[Path]) -> tuple[Path, list[Path]]:
    """The Python that runs the relay inside, and what must be bound for it beyond `bound` (the
    system folders and the program): the harness's own or a system Python that `bound` already
    shows (its executable and its prefix, where its standard library lives), else the harness's
    own with its prefix bound read-only. (The relay script is bound at RELAY_INSIDE.)"""
    own = Path(sys.executable).resolve()
    for candidate in (own, *(Path(p) for p in RELAY_PYTHONS)):
        if not candidate.is_file():
            continue
        real = candidate.resolve()
        if all(any(_within(p, b) for b in bound) for p in (real, _python_prefix(real))):
            return real, []
    return own, [_python_prefix(own)]


def _first_link(path: Path) -> Path | None:
    """The first component of an absolute path that is a symbolic link, or None."""
    for part in [*reversed(path.parents), path][1:]:
        if part.is_symlink():
            return part
    return None
