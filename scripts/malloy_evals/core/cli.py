"""What every script shares: the argument parser, the one-JSON-document output, the exit-code wrapper.

A skill script parses its flags with `parser(__doc__)`, calls one library function, hands the
result to `emit`, and returns an exit code; `run(main)` turns kit errors into one stderr line.
`malloy-evals <script-name> ...` (the console command) runs the very same skill script file.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import difflib
import enum
import json
import runpy
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import urlsplit

from malloy_evals.core import headers, paths
from malloy_evals.core.errors import EXIT_USAGE, InputError, KitError, UsageError
from malloy_evals.core.findings import Ignored, ignored_lines
from malloy_evals.core.redact import redact
from malloy_evals.core.terminal import SafeStream

Check = Callable[[argparse.Namespace], str | None]


class ScriptParser(argparse.ArgumentParser):
    """An ArgumentParser that decides the whole command line before a script touches anything.

    argparse checks flags and types (the path and count types below run here); then every check a
    shared builder registered with `add_check` runs, for what argparse cannot say (a flag that
    only goes with another). Each mistake exits 2 with one usage line, before the script looks
    for a run, a set, Node, a key or an endpoint (the exit-code table in README.md)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checks: list[Check] = []

    def add_check(self, check: Check) -> None:
        """Run `check(args)` after parsing; a string it returns is the usage error."""
        self.checks.append(check)

    # Narrower than argparse's overloads (always a Namespace back): what every script calls.
    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        for check in self.checks:
            problem = check(parsed)
            if problem:
                self.error(problem)
        return parsed


def parser(doc: str | None, **kwargs: Any) -> ScriptParser:
    """A ScriptParser whose description is the script's first docstring line and whose epilog
    is the rest of the docstring (the real command lines)."""
    text = (doc or "").strip()
    first, _, rest = text.partition("\n")
    return ScriptParser(
        description=first.strip(),
        epilog=rest.strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )


def add_check(p: argparse.ArgumentParser, check: Check) -> None:
    """Register a post-parse usage check (the parser must come from `parser()`)."""
    if not isinstance(p, ScriptParser):
        raise TypeError("build the script's parser with cli.parser(__doc__): a plain "
                        "ArgumentParser would skip this check")
    p.add_check(check)


def checked_by(check: Callable[[str], Any]) -> Callable[[str], str]:
    """An argparse type from a library check that raises UsageError: the value, checked when the
    command line is read (so the mistake is exit 2 before anything else runs)."""
    def convert(value: str) -> str:
        try:
            check(value)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    return convert


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(JSON, action="store_true",
                   help="print exactly one JSON document on stdout (progress and warnings go to stderr)")


def to_jsonable(value: Any) -> Any:
    """Dataclasses, paths, enums, sets and tuples turned into plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_json"):
            return to_jsonable(value.to_json())
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(to_jsonable(v) for v in value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value


def dumps(value: Any, *, indent: int | None = 2) -> str:
    return json.dumps(to_jsonable(value), indent=indent, ensure_ascii=False)


def emit(result: Any, *, as_json: bool, render: Callable[[Any], str] | None = None) -> None:
    """Print a result: one JSON document with --json, else the human rendering. A result that
    read a ledger says on stderr, one line each and then the count, every live verdict it did
    not count and why (its `ignored`), whatever the output."""
    ignored = result.get("ignored") if isinstance(result, dict) else getattr(result, "ignored", None)
    for line in ignored_lines([i for i in ignored or () if isinstance(i, Ignored)]):
        progress(line)
    if as_json:
        sys.stdout.write(dumps(result) + "\n")
    else:
        text = render(result) if render else dumps(result)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


_PROGRESS_LOCK = threading.Lock()


def progress(message: str) -> None:
    """A progress or warning line: always stderr, so stdout stays one JSON document.

    One write per line under a lock: print() writes the text and the newline separately, and
    lines from worker threads (score_run, check_coverage) then run into each other."""
    with _PROGRESS_LOCK:
        sys.stderr.write(redact(message) + "\n")
        sys.stderr.flush()


def run(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> None:
    """Call a script's main and exit with its code; kit errors become one stderr line, no traceback."""
    for stream in (sys.stdout, sys.stderr):
        # Text from outside may hold a lone surrogate, which has no UTF-8 form: print its
        # \\uXXXX escape (valid inside a JSON string) rather than die on it.
        with contextlib.suppress(AttributeError, ValueError):
            # A TextIO has no reconfigure in the stubs; a replaced stream without one is skipped.
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    # Every line a script prints, error lines included, goes through the one terminal
    # sanitiser: text from outside shows its control characters escaped (core/terminal.py).
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(sys.stdout), SafeStream(sys.stderr)
    try:
        code = main(argv)
    except KitError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        code = 0
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        sys.stdout, sys.stderr = saved
    sys.exit(code if isinstance(code, int) else 0)


# The kit's own tools the console runs besides the skill scripts (scripts/<name>.py).
CONSOLE_TOOLS = ("demo",)


def console_scripts() -> dict[str, Path]:
    """What `malloy-evals NAME` runs: every skill script by its name, and the kit's tools."""
    found = {p.stem: p for p in sorted(paths.SKILLS_DIR.glob("*/scripts/*.py"))
             if not p.stem.startswith("_")}
    for name in CONSOLE_TOOLS:
        tool = paths.KIT_ROOT / "scripts" / f"{name}.py"
        if tool.is_file():
            found.setdefault(name, tool)
    return found


def _summary(script: Path) -> str:
    """The first line of a script's docstring (what its --help says first)."""
    try:
        doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, ValueError):
        return ""
    return doc.strip().split("\n", 1)[0]


def console_help(scripts: dict[str, Path]) -> str:
    """`malloy-evals --help`: every script the console runs, by skill, with its first line."""
    out = ["usage: malloy-evals <script> [args ...]", "",
           "Runs one of the kit's scripts exactly as by path from a checkout (the same flags,",
           "--json and exit codes); `malloy-evals <script> --help` shows its flags."]
    groups: dict[str, list[str]] = {}
    width = max(map(len, scripts), default=0)
    for name, script in sorted(scripts.items()):
        group = (script.parents[1].name if script.parent.name == "scripts"
                 and script.parents[1].parent == paths.SKILLS_DIR else "the kit's own tools")
        groups.setdefault(group, []).append(f"  {name.ljust(width)}  {_summary(script)}")
    for group, lines in sorted(groups.items(), key=lambda g: (g[0].startswith("the "), g[0])):
        out += ["", f"{group}:", *lines]
    return "\n".join(out) + "\n"


def console_main(argv: Sequence[str] | None = None) -> None:
    """`malloy-evals <script-name> [args]`: run the skill script (or kit tool) of that name,
    exactly as by path. `--help` lists them (exit 0); no name, or one that is not there, is a
    usage error (exit 2)."""
    args = list(sys.argv[1:] if argv is None else argv)
    scripts = console_scripts()
    if not args or args[0] in ("-h", "--help"):
        (sys.stdout if args else sys.stderr).write(console_help(scripts))
        sys.exit(0 if args else EXIT_USAGE)
    # `setup-runtime` and `setup_runtime` name the same script: a name is typed both ways.
    script = scripts.get(args[0].removesuffix(".py").replace("-", "_"))
    if script is None:
        near = nearest_hint([args[0]], sorted(scripts))
        print(f"error: no script named {args[0]!r}{near}; `malloy-evals --help` lists them: "
              f"{', '.join(sorted(scripts))}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    sys.argv = [str(script), *args[1:]]
    runpy.run_path(str(script), run_name="__main__")


# ---------------------------------------------------------------------------------------------
# The shared flags: one spelling, one type, one exit code per mistake. The printed command lines
# of core/commands.py use these same names.

RUN = "--run"
SET = "--set"
QID = "--qid"
SAMPLE = "--sample"
ONLY = "--only"
LOCAL = "--local"
MCP_URL = "--mcp-url"
MCP_HEADER = "--mcp-header"
JSON = "--json"


def existing_dir(value: str) -> Path:
    """argparse type: a folder that must exist (a missing one is a usage error, exit 2)."""
    path = Path(value)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value}: no such folder")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: not a folder")
    return path


def existing_file(value: str) -> Path:
    """argparse type: a file that must exist (a missing one is a usage error, exit 2)."""
    path = Path(value)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: a folder, not a file")
    return path


def count(value: str) -> int:
    """argparse type: a whole number, 0 or more, refused in words (not as the function's name)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


def at_least_one(value: str) -> int:
    """argparse type: a whole number, 1 or more (repeats, samples, workers)."""
    number = count(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return number


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None


def dollars(value: str) -> float:
    """argparse type: an amount of money, 0 or more."""
    amount = _number(value)
    if not amount >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{value}: must be 0 or more")
    return amount


def seconds(value: str) -> float:
    """argparse type: a duration in seconds, more than 0."""
    amount = _number(value)
    if not amount > 0:
        raise argparse.ArgumentTypeError(f"{value}: must be more than 0 seconds")
    return amount


def split_qids(value: str) -> list[str]:
    """argparse type for `--only q1,q2`: a comma-separated list naming at least one."""
    names = [q.strip() for q in value.split(",") if q.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{value!r} names nothing (q1,q2)")
    return names


def http_url(value: str) -> str:
    """argparse type: an http(s)://HOST[:PORT][/PATH] address (a Publisher, an MCP endpoint)."""
    parsed = urlsplit(value)
    try:
        parsed.port  # noqa: B018 (reading it validates it)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value}: the port is not a number 1-65535") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise argparse.ArgumentTypeError(f"{value}: expected http://HOST:PORT[/PATH]")
    return value


def port(value: str) -> int:
    """argparse type: a TCP port, 1 to 65535."""
    number = count(value)
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError(f"{value}: a port is 1 to 65535")
    return number


def add_run_argument(p: argparse.ArgumentParser, *, help: str = "the run folder (holds run.json)",
                     required: bool = True, matched_only: bool = False) -> None:
    """--run: a run folder that must exist (exit 2; one without run.json is exit 3 when opened).
    `matched_only`: the path is only compared with others (the contamination check), so it need
    not exist."""
    p.add_argument(RUN, required=required, type=Path if matched_only else existing_dir,
                   metavar="RUN", help=help)


def add_set_argument(p: argparse.ArgumentParser, *,
                     help: str = "the set folder (holds set.json and cases.jsonl)",
                     required: bool = True, matched_only: bool = False) -> None:
    """--set (as `set_dir`): a set folder that must exist (exit 2; one that cannot be read is exit
    3 when loaded). `matched_only` as for --run."""
    p.add_argument(SET, required=required, type=Path if matched_only else existing_dir,
                   dest="set_dir", metavar="SET", help=help)


def add_attempt_arguments(p: argparse.ArgumentParser) -> None:
    """--run, --set (as `set_dir`), --qid and --sample: how every attempt-scoped script names its
    attempt, with the same meaning and checks everywhere. A qid or sample that is not in the set
    or run is exit 3 (found when the run is read), never a usage error."""
    add_run_argument(p)
    add_set_argument(p)
    p.add_argument(QID, required=True, help="the case the attempt answers")
    p.add_argument(SAMPLE, type=count, default=None,
                   help="the attempt's sample number (omit for a case answered once)")


def add_only_argument(p: argparse.ArgumentParser, *, what: str = "cases") -> None:
    """--only q1,q2 (as `only`, a list): a name that is not in the set or run is exit 3."""
    p.add_argument(ONLY, type=split_qids, default=None, metavar="q1,q2",
                   help=f"only these {what} (comma-separated)")


def add_coverage_argument(p: argparse.ArgumentParser, *, use: str) -> None:
    """--coverage REPORT: a check_coverage.py report file (one that is not there is exit 2; one
    that cannot be read is exit 3). `use` says what the script does with it."""
    p.add_argument("--coverage", type=existing_file, default=None, metavar="REPORT",
                   help=f"a check_coverage.py report (its --out file): {use}")


def distinct_folders(*flags: str, why: str) -> Check:
    """A usage check: no folder named twice across `flags` (nargs="+" folder flags such as
    `--base` and `--candidate`, or `--runs`); `why` is the usage error."""
    dests = [f.lstrip("-").replace("-", "_") for f in flags]

    def check(args: argparse.Namespace) -> str | None:
        given = [Path(v).resolve() for d in dests for v in (getattr(args, d, None) or [])]
        return why if len(set(given)) != len(given) else None

    return check


def add_count_argument(p: argparse.ArgumentParser, flag: str, *, default: int | None,
                       help: str, minimum: int = 1) -> None:
    """A count flag (`--repeat`, `--samples`, `--parallel`, `--limit`): 0 or more, or at least
    1; anything else is exit 2."""
    if minimum not in (0, 1):
        raise ValueError("a count is 0 or more, or 1 or more")
    p.add_argument(flag, type=count if minimum == 0 else at_least_one, default=default,
                   metavar="N", help=help)


ENDPOINT_NEEDED = f"give {LOCAL} or {MCP_URL} URL: where to re-execute"


def add_endpoint_arguments(p: argparse.ArgumentParser, *,
                           required: bool | Callable[[argparse.Namespace], bool] = True,
                           purpose: str = "re-execute") -> None:
    """--local | --mcp-url URL: where queries run. Exclusive; `required` (or, as a function of the
    parsed flags, required when it says so: score_attempt.py --ingest needs none) makes giving
    neither a usage error."""
    where = p.add_mutually_exclusive_group()
    where.add_argument(MCP_URL, type=http_url, metavar="URL",
                       help=f"{purpose} through this MCP endpoint (a Publisher, or serve_local.py "
                            "--http), e.g. http://127.0.0.1:4040/mcp")
    where.add_argument(LOCAL, action="store_true",
                       help=f"{purpose} through the kit's own endpoint over the set's model/ "
                            "package (started and stopped here)")

    p.add_argument(MCP_HEADER, type=checked_by(_header_arg), action="append", default=None,
                   metavar="NAME=ENV_VAR",
                   help=f"with {MCP_URL}: send the header NAME on every request to that host, its "
                        "value read from the environment variable ENV_VAR (never from the command "
                        "line; never printed or written); repeatable, e.g. "
                        "Authorization=PUBLISHER_TOKEN with PUBLISHER_TOKEN='Bearer ...'")

    def needs_endpoint(args: argparse.Namespace) -> str | None:
        needed = required(args) if callable(required) else required
        return ENDPOINT_NEEDED if needed and not (args.local or args.mcp_url) else None

    if required:
        add_check(p, needs_endpoint)
    add_check(p, _register_headers)


def _header_arg(text: str) -> tuple[str, str]:
    try:
        return headers.parse_header_arg(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _register_headers(args: argparse.Namespace) -> str | None:
    """--mcp-header goes with --mcp-url, and is registered for the URL's host (every connection
    this process makes there sends it)."""
    pairs = [headers.parse_header_arg(t) for t in getattr(args, "mcp_header", None) or []]
    if not pairs:
        return None
    if not getattr(args, "mcp_url", None):
        return f"{MCP_HEADER} goes with {MCP_URL} (a hosted endpoint); {LOCAL} needs none"
    # An unset variable is found when a connection is made (exit 3, like a missing API key).
    headers.use_header_variables(args.mcp_url, dict(pairs))
    return None


def require_one_endpoint(mcp_url: str | None, local: bool) -> None:
    """The library's own guard for callers that are not scripts: exactly one endpoint."""
    if bool(mcp_url) == bool(local):
        raise UsageError(f"give exactly one of {LOCAL} or {MCP_URL} URL")


def check_known(names: Sequence[str] | None, known: Iterable[Any], *, where: str | Path | None,
                what: str = "qids not in the set", flag: str = ONLY) -> None:
    """A name given on the command line that the set or run does not have is exit 3 (the input
    cannot be measured as asked), naming the file looked in: `--only names qids not in the set:
    q9`."""
    if not names:
        return
    have = set(known)
    unknown = [n for n in names if n not in have]
    if unknown:
        raise InputError(where, None, f"{flag} names {what}: {', '.join(unknown)}"
                         + nearest_hint(unknown, sorted(str(k) for k in have)))


def nearest_hint(unknown: Sequence[str], known: Sequence[str], *, n: int = 3) -> str:
    """`; nearest: bk_total_revenue, bk_revenue` for names nobody has: the closest known ones,
    so a typo is one glance from its fix (empty when nothing is close)."""
    near: list[str] = []
    for name in unknown:
        near += [k for k in difflib.get_close_matches(name, known, n=n, cutoff=0.6)
                 if k not in near]
    return f"; nearest: {', '.join(near[:n * len(unknown)])}" if near else ""


def add_model_argument(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """--model DIR: another package folder standing in for the set's model/ (a candidate model),
    the same meaning in every script that serves the model or shows it to the judge. Beside
    --mcp-url it is a usage error (exit 2): a remote server decides which model it serves."""
    p.add_argument("--model", type=existing_dir, metavar="DIR", default=None,
                   help=help or "use this Malloy package folder instead of the set's model/: "
                                "served by --local, shown to the judge, pinned as the run's "
                                "modelSha (e.g. evals/bookshop/model-candidate)")
    add_check(p, _model_without_mcp_url)


MODEL_WITH_MCP_URL = ("--model names a local package folder for --local; with --mcp-url the "
                      "server decides which model it serves")


def _model_without_mcp_url(args: argparse.Namespace) -> str | None:
    if getattr(args, "model", None) is not None and getattr(args, "mcp_url", None):
        return MODEL_WITH_MCP_URL
    return None
