"""The command lines the kit prints for people: re-record hints, repair commands, next steps.

Every printed command is built here, from the flag names core/cli defines, so a renamed flag or
script cannot leave a stale hint behind: tests/test_commands.py parses each one against the real
script's parser. From a checkout a command runs from the kit's root (`.venv/bin/python
skills/...`); from an installed package it is the console command (`malloy-evals score_run ...`),
run from wherever the user is. A part the kit cannot know (`<run>`, `<model>`) is a Placeholder,
printed as it is and never quoted.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from malloy_evals.core import cli, paths
from malloy_evals.core.redact import redact_url

PYTHON = ".venv/bin/python"
CONSOLE = "malloy-evals"

# The flag that names each role's provider, in the script of that role.
PROVIDER_FLAG = {"judge": "--judge", "coverage": "--reader", "diagnose": "--diagnoser"}


class Placeholder(str):
    """A part of a printed command the reader fills in (`<run>`): printed as is, never quoted."""


RUN_DIR = Placeholder("<run>")
MODEL = Placeholder("<model>")
MODEL_DIR = Placeholder("<dir>")
PROVIDER = Placeholder("<provider>")
REPLIES = Placeholder("<replies.jsonl>")
NEW_TRANSCRIPT = Placeholder("<new-transcript.jsonl>")
NEW_HOST_LOG = Placeholder("<new-host-log.json>")
NEW_ANSWER = Placeholder("<new-answer.md>")
ENDPOINT_CHOICE = Placeholder(f"({cli.LOCAL} | {cli.MCP_URL} URL)")
ANY_SET = Placeholder("evals/<set>")
ANY_RUN = Placeholder("<another run of the base arm>")
QID = Placeholder("<qid>")
ANSWERER = Placeholder("<answerer>")
TRANSCRIPT = Placeholder("<transcript.jsonl>")
SETTLE_VERDICT = Placeholder("<match|near_match|no_match>")
WHY = Placeholder("<why>")
PERSON = Placeholder("<name>")
BAND_FILE = Placeholder("runs/noise-band.json")  # a suggested name, the reader's to change


@dataclass(frozen=True)
class Command:
    """One printed command: a kit script (path from the kit's root) and its arguments."""

    script: str
    args: tuple[str, ...]

    def argv(self) -> list[str]:
        if paths.FROM_CHECKOUT:
            return [PYTHON, self.script, *self.args]
        return [CONSOLE, Path(self.script).stem, *self.args]

    def __str__(self) -> str:
        return " ".join(a if isinstance(a, Placeholder) else shlex.quote(a) for a in self.argv())


@dataclass(frozen=True)
class Mention:
    """A script named in running text with the flags that matter (`score_retrieval.py --append`);
    the test checks that the script exists and takes every flag."""

    name: str
    flags: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " ".join([Path(script_path(self.name)).name, *self.flags])


def script_path(name: str) -> str:
    """A kit script's path from the kit's root: a skill script by name, else scripts/<name>.py."""
    found = paths.skill_script(name)
    path = found if found is not None else paths.KIT_ROOT / "scripts" / f"{name}.py"
    if not path.is_file():
        raise ValueError(f"no kit script named {name!r}")  # a programmer error: a renamed script
    return path.relative_to(paths.KIT_ROOT).as_posix()


def command(name: str, *args: str | Path | None) -> Command:
    """A command for script `name`; None arguments are left out, paths made text."""
    return Command(script_path(name), tuple(
        a if isinstance(a, str) else str(a) for a in args if a is not None))


def from_kit_root(label: str | Path) -> str:
    """`label` when it names the same place from the kit's root as from here, else absolute.

    The printed commands start `.venv/bin/python skills/...`, so they run from the kit's root;
    `runs/r1` typed in another folder would point somewhere else there. From an installed package
    they are `malloy-evals ...` commands, run from here: `label` as it is."""
    label = str(label)
    path = Path(label)
    if path.is_absolute() or label.startswith("<") or not paths.FROM_CHECKOUT:
        return label
    here = path.resolve()
    return label if (paths.KIT_ROOT / path).resolve() == here else str(here)


def provider_from_kit_root(spec: str | None) -> str | None:
    """`hand:FILE` / `replay:DIR` with the path made to work from the kit's root."""
    if not spec:
        return spec
    kind, sep, arg = spec.partition(":")
    if kind in ("hand", "replay") and sep and arg:
        return f"{kind}:{from_kit_root(arg)}"
    return spec


def _place(path: str | Path) -> str:
    """A run or set path for a printed command: placeholders as they are, else from the root."""
    return path if isinstance(path, Placeholder) else from_kit_root(path)


def _set(set_dir: str | Path | None) -> str:
    return _place(set_dir) if set_dir else ANY_SET


def endpoint_flag(mcp_url: str | None, local: bool) -> str:
    """How a command line named its endpoint, for the commands printed after it (a URL's
    credentials blanked: printed commands end up in logs and RESULTS.md)."""
    return cli.LOCAL if local else f"{cli.MCP_URL} {redact_url(str(mcp_url))}"


def _endpoint_args(flag: str | None) -> list[str]:
    return shlex.split(flag) if flag else [ENDPOINT_CHOICE]


def rerecord(role: str, key: str, set_dir: str | Path | None) -> Command | None:
    """The command that re-records one recording key of a role with a live provider."""
    s = _set(set_dir)
    live = (PROVIDER_FLAG.get(role, "--judge"), Placeholder(f"anthropic:{MODEL}"), "--record")
    if role == "judge":
        if key.startswith("calib."):
            return command("calibrate_judge", cli.SET, s, *live)
        if key.startswith("regress."):
            return command("check_judge", cli.SET, s, *live)
        return command("score_run", cli.RUN, RUN_DIR, cli.SET, s, *live, "--rescore", cli.LOCAL)
    if role == "coverage":
        return command("check_coverage", cli.SET, s, "--model", MODEL_DIR, *live)
    if role == "diagnose":
        return command("diagnose", cli.RUN, RUN_DIR, cli.SET, s, *live)
    return None


def author_by_hand(role: str, set_dir: str | Path | None, replies: str | Path | None) -> Command:
    """The command that regenerates a role's hand-authored recordings through its own code path."""
    s = _set(set_dir)
    source = from_kit_root(replies) if replies is not None else REPLIES
    hand = Placeholder(f"hand:{source}") if isinstance(source, Placeholder) else f"hand:{source}"
    if role == "coverage":
        return command("check_coverage", cli.SET, s, "--model", MODEL_DIR,
                       PROVIDER_FLAG[role], hand, "--record")
    if role == "diagnose":
        return command("diagnose", cli.RUN, RUN_DIR, cli.SET, s, PROVIDER_FLAG[role], hand,
                       "--record")
    return command("author_recordings", cli.SET, s, "--replies", source)


def record_attempt(run_dir: str | Path, set_dir: str | Path, qid: str, sample: int | None, *,
                   host_log: bool = False) -> Command:
    """Re-record one attempt: from a new transcript, or a new host log and answer."""
    source = (("--host-log", NEW_HOST_LOG, "--answer-file", NEW_ANSWER) if host_log
              else ("--transcript", NEW_TRANSCRIPT))
    return command("record_attempt", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), cli.QID, qid,
                   *((cli.SAMPLE, str(sample)) if sample is not None else ()), *source)


def answer_run(run_dir: str | Path, set_dir: str | Path) -> Command:
    """Answer every case of a run with an answerer (the step after new_run.py)."""
    return command("run_answers", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), cli.LOCAL,
                   "--answerer", ANSWERER)


def record_first(run_dir: str | Path, set_dir: str | Path) -> Command:
    """Record one answer a session already made into a run (the other way to fill it)."""
    return command("record_attempt", cli.RUN, _place(run_dir), cli.SET, _place(set_dir),
                   cli.QID, QID, "--transcript", TRANSCRIPT)


def rescore(run_dir: str | Path, set_dir: str | Path, qids: Sequence[str], *,
            judge_spec: str | None, endpoint: str | None) -> Command:
    """Re-score chosen attempts of a run. A host judge re-scores in two steps; the first
    (--emit) is the one to print."""
    judge = [judge_spec or PROVIDER] + (["--emit"] if judge_spec == "host" else [])
    return command("score_run", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), "--judge", *judge,
                   *_endpoint_args(endpoint), cli.ONLY, ",".join(qids), "--rescore")


def reexecute(run_dir: str | Path, set_dir: str | Path, qid: str, sample: int | None) -> Command:
    """Re-execute one attempt's final query through the kit's own endpoint."""
    return command("reexecute", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), cli.QID, qid,
                   *((cli.SAMPLE, str(sample)) if sample is not None else ()), cli.LOCAL)


def host_emit(run_dir: str | Path, set_dir: str | Path, qid: str, sample: int | None) -> Command:
    """Write one attempt's judge request for a host subagent (the step before --ingest)."""
    return command("score_attempt", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), cli.QID, qid,
                   *((cli.SAMPLE, str(sample)) if sample is not None else ()),
                   "--judge", "host", "--emit", cli.LOCAL)


def score_run(run_dir: str | Path, set_dir: str | Path | None, *,
              endpoint: str | None = None, judge_spec: str | None = None) -> Command:
    """Score a run (its unscored attempts and stale scores), with the judge that scored it
    (`judge_spec`), else the judge left to the reader. A host judge's first step is --emit."""
    judge = [judge_spec or PROVIDER] + (["--emit"] if judge_spec == "host" else [])
    return command("score_run", cli.RUN, _place(run_dir), cli.SET, _set(set_dir), "--judge",
                   *judge, *_endpoint_args(endpoint))


def host_ingest(run_dir: str | Path, set_dir: str | Path | None, *,
                endpoint: str | None = None) -> Command:
    """Score the attempts whose host replies are in (the step after --judge host --emit)."""
    return command("score_run", cli.RUN, _place(run_dir), cli.SET, _set(set_dir), "--judge",
                   "host", "--ingest", *_endpoint_args(endpoint))


def verify_goldens(set_dir: str | Path | None) -> Command:
    """Re-derive a set's goldens from its truth package (any set's, when no set is known)."""
    return command("verify_goldens", cli.SET, _set(set_dir))


def validate_set(set_dir: str | Path) -> Command:
    """Validate a set folder."""
    return command("validate_set", _place(set_dir))


def promote_all(set_dir: str | Path) -> Command:
    """Promote every provisional value golden of a set that re-derives from its truth package."""
    return command("promote_golden", cli.SET, _place(set_dir), "--all")


def promote_attested(set_dir: str | Path) -> Command:
    """Promote a criteria or unanswerable golden on a person's word."""
    return command("promote_golden", cli.SET, _place(set_dir), cli.QID, QID, "--attest", "--by",
                   PERSON)


def settle(run_dir: str | Path, set_dir: str | Path, target: str) -> Command:
    """Record a person's verdict on one attempt of the review queue (`qid` or `qid#sample`)."""
    return command("review", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), "--settle", target,
                   "--verdict", SETTLE_VERDICT, "--why", WHY, "--by", PERSON)


def measure_noise(run_dirs: Sequence[str | Path], set_dir: str | Path, out: str | Path, *,
                  only_common_cases: bool = False) -> Command:
    """Measure the A/A noise band of runs of one arm (a placeholder asks for a second run when
    only one is known)."""
    runs = [_place(d) for d in run_dirs] or [RUN_DIR]
    if len(runs) < 2:
        runs.append(ANY_RUN)
    return command("measure_noise", "--runs", *runs, cli.SET, _place(set_dir), "--out",
                   _place(out), "--only-common-cases" if only_common_cases else None)


def score_retrieval(run_dir: str | Path, set_dir: str | Path) -> Command:
    """Score a run's retrieval and write its retrieval_score events."""
    return command("score_retrieval", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), "--append")


def diagnose(run_dir: str | Path, set_dir: str | Path) -> Command:
    """Diagnose a scored run's failures (the provider is the reader's to choose)."""
    return command("diagnose", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), "--diagnoser",
                   PROVIDER)


def diagnose_near_matches(run_dir: str | Path, set_dir: str | Path, qids: Sequence[str]) -> Command:
    """Diagnose near_matches stable across arms as coverage findings (review.py routes them)."""
    return command("diagnose", cli.RUN, _place(run_dir), cli.SET, _place(set_dir), "--diagnoser",
                   PROVIDER, "--verdicts", "near_match", cli.ONLY, ",".join(qids) or QID)


def build_skill_index() -> Command:
    """Regenerate SKILL_INDEX.md."""
    return command("build_skill_index")


# Scripts named in running text (a summary's warning, a next step).
SCORE_RETRIEVAL_APPEND = Mention("score_retrieval", ("--append",))
CHECK_COVERAGE = Mention("check_coverage")
SCORE_RUN = Mention("score_run")
REPORT_COVERAGE = Mention("report", ("--coverage",))
DIAGNOSE = Mention("diagnose")
NEW_RUN = Mention("new_run")


def this_command() -> str:
    """The command line this process was started with, as it runs again from the kit's root, or
    from here as the console command of an installed package (the command that resumes an
    interrupted run_answers)."""
    script = sys.argv[0] if sys.argv else "<script>"
    if not paths.FROM_CHECKOUT:
        return shlex.join([CONSOLE, Path(script).stem, *sys.argv[1:]])
    return shlex.join([PYTHON, from_kit_root(script), *sys.argv[1:]])
