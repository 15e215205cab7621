"""What every script shares: the argument parser, the one-JSON-document output, the exit-code wrapper.

A skill script parses its flags with `parser(__doc__)`, calls one library function, hands the
result to `emit`, and returns an exit code; `run(main)` turns kit errors into one stderr line.
`malloy-evals <script-name> ...` (the console command) runs the very same skill script file.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import runpy
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path, PurePath
from typing import Any

from malloy_evals.core import paths
from malloy_evals.core.errors import EXIT_USAGE, KitError


def parser(doc: str | None, **kwargs: Any) -> argparse.ArgumentParser:
    """An ArgumentParser whose description is the script's first docstring line and whose epilog
    is the rest of the docstring (the real command lines)."""
    text = (doc or "").strip()
    first, _, rest = text.partition("\n")
    return argparse.ArgumentParser(
        description=first.strip(),
        epilog=rest.strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
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
    """Print a result: one JSON document with --json, else the human rendering."""
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
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def run(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> None:
    """Call a script's main and exit with its code; kit errors become one stderr line, no traceback."""
    try:
        code = main(argv)
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        code = 0
    sys.exit(code if isinstance(code, int) else 0)


def console_main(argv: Sequence[str] | None = None) -> None:
    """`malloy-evals <script-name> [args]`: run the skill script of that name, exactly as by path."""
    args = list(sys.argv[1:] if argv is None else argv)
    names = sorted(p.stem for p in paths.SKILLS_DIR.glob("*/scripts/*.py") if not p.stem.startswith("_"))
    if not args or args[0] in ("-h", "--help"):
        print("usage: malloy-evals <script-name> [args ...]\n\nscripts:\n  " + "\n  ".join(names))
        sys.exit(0 if args else EXIT_USAGE)
    script = paths.skill_script(args[0])
    if script is None:
        print(f"error: no script named {args[0]!r}; one of: {', '.join(names)}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    sys.argv = [str(script), *args[1:]]
    runpy.run_path(str(script), run_name="__main__")


def existing_dir(value: str) -> Path:
    """argparse type: a folder that must exist (a missing one is a usage error)."""
    path = Path(value)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: not a folder")
    return path


def existing_file(value: str) -> Path:
    """argparse type: a file that must exist (a missing one is a usage error)."""
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: not a file")
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


def bounded(parse: Callable[[str], Any], what: str, *, minimum: float | None = None,
            above: float | None = None) -> Callable[[str], Any]:
    """An argparse type: `parse` the value (int or float), refusing in words one that is not
    `what`, below `minimum`, or not above `above` (`--timeout 0`, `--samples 0`)."""
    def convert(value: str) -> Any:
        try:
            number = parse(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
        if minimum is not None and not number >= minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum:g}")
        if above is not None and not number > above:
            raise argparse.ArgumentTypeError(f"{value} is not more than {above:g}")
        return number
    return convert


def add_attempt_arguments(p: argparse.ArgumentParser) -> None:
    """--run, --set (as `set_dir`), --qid and --sample: how every attempt-scoped script names its
    attempt, with the same meaning and checks everywhere."""
    p.add_argument("--run", required=True, type=Path, help="the run folder (holds run.json)")
    p.add_argument("--set", required=True, type=Path, dest="set_dir", metavar="SET",
                   help="the set folder (holds set.json and cases.jsonl)")
    p.add_argument("--qid", required=True, help="the case the attempt answers")
    p.add_argument("--sample", type=count, default=None,
                   help="the attempt's sample number (omit for a case answered once)")


def split_qids(value: str) -> list[str]:
    """argparse type for `--only q1,q2`."""
    return [q.strip() for q in value.split(",") if q.strip()]


def add_model_argument(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """--model DIR: another package folder standing in for the set's model/ (a candidate model),
    the same meaning in every script that serves the model or shows it to the judge."""
    p.add_argument("--model", type=existing_dir, metavar="DIR", default=None,
                   help=help or "use this Malloy package folder instead of the set's model/: "
                                "served by --local, shown to the judge, pinned as the run's "
                                "modelSha (e.g. evals/bookshop/model-candidate)")


def check_model_argument(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse --model beside --mcp-url (exit 2): a remote server decides which model it serves."""
    if getattr(args, "model", None) is not None and getattr(args, "mcp_url", None):
        p.error("--model names a local package folder for --local; with --mcp-url the server "
                "decides which model it serves")
