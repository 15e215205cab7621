"""The command lines the kit prints for people parse against the real scripts' parsers.

A renamed flag or script must fail here, not in front of a user following a hint.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from malloy_evals.core import commands
from malloy_evals.core.commands import Command, Mention, Placeholder
from script_support import KIT, option_strings, parse_outcome, script_by_path

SET = "evals/bookshop"
RUN = "evals/bookshop/runs/baseline"

# What a reader would put in place of each placeholder, as real paths in the sample set.
FILLED = {
    "<run>": RUN,
    "<model>": "claude-haiku-4-5",
    "<dir>": "evals/bookshop/model",
    "<provider>": "replay",
    "<replies.jsonl>": "evals/bookshop/recordings/judge/_authored.jsonl",
    "<new-transcript.jsonl>": "evals/bookshop/transcripts/baseline/bk_total_revenue.jsonl",
    "<new-host-log.json>": "evals/bookshop/set.json",
    "<new-answer.md>": "evals/bookshop/README.md",
    "(--local | --mcp-url URL)": "--local",
    "evals/<set>": SET,
    "<another run of the base arm>": "evals/bookshop/runs/baseline-2",
    "<qid>": "bk_total_revenue",
    "<match|near_match|no_match>": "no_match",
    "<why>": "counts shipped orders only",
    "<name>": "Dana Reyes",
    "<answerer>": "claude-code",
    "<transcript.jsonl>": "evals/bookshop/transcripts/baseline/bk_total_revenue.jsonl",
}


def filled(cmd: Command) -> list[str]:
    """The command's arguments with every placeholder filled in."""
    out = []
    for arg in cmd.args:
        if isinstance(arg, Placeholder):
            for hole, value in FILLED.items():
                arg = arg.replace(hole, value)
            assert "<" not in arg, f"no filling for placeholder {arg!r}"
        out.append(str(arg))
    return out


def assert_parses(cmd: Command) -> None:
    script = script_by_path(cmd.script)
    assert script is not None, f"{cmd.script} is not a kit script"
    outcome = parse_outcome(script, filled(cmd))
    assert outcome.code == 0, f"{cmd}\n{outcome.err}"


PRINTED = [
    pytest.param(commands.rerecord("judge", "calib.bk_total_revenue.echo", SET), id="rerecord-calibration"),
    pytest.param(commands.rerecord("judge", "regress.fx1", SET), id="rerecord-regression"),
    pytest.param(commands.rerecord("judge", "baseline.bk_total_revenue._", SET), id="rerecord-run"),
    pytest.param(commands.rerecord("judge", "baseline.bk_total_revenue._", None), id="rerecord-no-set"),
    pytest.param(commands.rerecord("coverage", "cov.bk_total_revenue", SET), id="rerecord-coverage"),
    pytest.param(commands.rerecord("diagnose", "diag.x", SET), id="rerecord-diagnose"),
    pytest.param(commands.author_by_hand("judge", SET, None), id="by-hand-judge"),
    pytest.param(commands.author_by_hand("coverage", SET, Path(FILLED["<replies.jsonl>"])),
                 id="by-hand-coverage"),
    pytest.param(commands.author_by_hand("diagnose", SET, None), id="by-hand-diagnose"),
    pytest.param(commands.record_attempt(RUN, SET, "bk_total_revenue", None), id="re-record"),
    pytest.param(commands.record_attempt(RUN, SET, "bk_total_revenue", 2, host_log=True),
                 id="re-record-host-log"),
    pytest.param(commands.rescore(RUN, SET, ["q2", "q1"], judge_spec="replay", endpoint="--local"),
                 id="rescore"),
    pytest.param(commands.rescore(RUN, SET, ["q1"], judge_spec="host", endpoint=None),
                 id="rescore-host"),
    pytest.param(commands.rescore(RUN, SET, ["q1"], judge_spec=None,
                                  endpoint=commands.endpoint_flag("http://127.0.0.1:4040/mcp", False)),
                 id="rescore-mcp-url"),
    pytest.param(commands.reexecute(RUN, SET, "bk_total_revenue", None), id="reexecute"),
    pytest.param(commands.score_retrieval(RUN, SET), id="score-retrieval"),
    pytest.param(commands.diagnose(RUN, SET), id="diagnose"),
    pytest.param(commands.diagnose_near_matches(RUN, SET, ["bk_channel_mix", "bk_avg_price_paid"]),
                 id="diagnose-near-matches"),
    pytest.param(commands.build_skill_index(), id="build-skill-index"),
    pytest.param(commands.host_emit(RUN, SET, "bk_total_revenue", 2), id="host-emit"),
    pytest.param(commands.score_run(RUN, SET), id="score-run"),
    pytest.param(commands.score_run(RUN, None, endpoint="--local"), id="score-run-no-set"),
    pytest.param(commands.score_run(RUN, SET, judge_spec="host", endpoint="--local"),
                 id="score-run-host"),
    pytest.param(commands.host_ingest(RUN, SET, endpoint="--local"), id="host-ingest"),
    pytest.param(commands.answer_run(RUN, SET), id="answer-run"),
    pytest.param(commands.record_first(RUN, SET), id="record-first"),
    pytest.param(commands.verify_goldens(SET), id="verify-goldens"),
    pytest.param(commands.validate_set(SET), id="validate-set"),
    pytest.param(commands.promote_all(SET), id="promote-all"),
    pytest.param(commands.promote_attested(SET), id="promote-attested"),
    pytest.param(commands.settle(RUN, SET, "bk_units_per_order#2"), id="settle"),
    pytest.param(commands.measure_noise([RUN], SET, commands.BAND_FILE), id="measure-noise-one-run"),
    pytest.param(commands.measure_noise([RUN, "evals/bookshop/runs/baseline-2"], SET,
                                        "runs/band.json", only_common_cases=True),
                 id="measure-noise"),
]


@pytest.mark.parametrize("cmd", PRINTED)
def test_every_printed_command_parses_against_its_script(cmd):
    assert_parses(cmd)


def test_every_mention_names_a_script_that_takes_its_flags():
    mentions = [v for v in vars(commands).values() if isinstance(v, Mention)]
    assert mentions
    for mention in mentions:
        script = script_by_path(commands.script_path(mention.name))
        assert script is not None
        assert set(mention.flags) <= option_strings(script), mention


def test_a_path_with_a_space_is_quoted_and_a_placeholder_is_not():
    cmd = commands.record_attempt("/tmp/my runs/r1", SET, "q1", None)
    assert str(cmd) == (".venv/bin/python skills/eval-answer/scripts/record_attempt.py --run "
                        "'/tmp/my runs/r1' --set evals/bookshop --qid q1 "
                        "--transcript <new-transcript.jsonl>")


def test_a_run_typed_from_another_folder_is_printed_so_it_works_from_the_kit_root(tmp_path,
                                                                                  monkeypatch):
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    cmd = commands.reexecute("runs", SET, "q1", None)
    assert cmd.args[:2] == ("--run", str(tmp_path / "runs"))
    monkeypatch.chdir(KIT)
    assert commands.reexecute("runs", SET, "q1", None).args[:2] == ("--run", "runs")


def test_a_renamed_script_is_a_programmer_error_not_a_stale_hint():
    with pytest.raises(ValueError, match="no kit script named 'score_runs'"):
        commands.command("score_runs", "--run", "x")


def test_a_role_without_a_rerecording_command_says_so():
    assert commands.rerecord("answerer", "k", SET) is None
