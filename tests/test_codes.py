"""The cause-code table of eval-diagnose/SKILL.md, its one parser, and the coverage startup check."""

from __future__ import annotations

import runpy

import pytest
from malloy_evals.core import cli, codes, paths, vocab
from malloy_evals.core.errors import InputError, UnmeasuredError

CHECK_COVERAGE = paths.KIT_ROOT / "skills" / "eval-answer" / "scripts" / "check_coverage.py"


def _table_copy(tmp_path, old: str, new: str):
    """A copy of the real SKILL.md with one substring replaced, for the loader to read."""
    text = paths.skill_md("eval-diagnose").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "SKILL.md"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_shipped_table_has_spec_8_codes_with_their_owners():
    table = codes.load_codes()
    expected = {"MISSING": "model", "AMBIGUOUS": "model", "RULE_UNWRITTEN": "model",
                "UNDERSPECIFIED": "dataset", "NOT-RETURNED": "model"}
    assert {c: table[c].owner for c in expected} == expected


def test_shipped_table_uses_every_owner_and_component():
    table = codes.load_codes()
    assert {c.owner for c in table.values()} == set(vocab.OWNERS)
    assert {c.component for c in table.values()} == set(vocab.COMPONENTS)


def test_every_gap_verdict_is_a_row_and_modelled_is_not():
    table = codes.check_gap_verdicts()
    assert set(codes.GAP_VERDICTS) <= set(table)
    assert codes.MODELLED not in table
    assert set(codes.COVERAGE_VERDICTS) == {codes.MODELLED, *codes.GAP_VERDICTS}


def test_every_code_has_the_schema_pattern():
    assert all(vocab.is_cause_code_shaped(c) for c in codes.load_codes())


def test_row_with_unknown_owner_names_file_and_line(tmp_path):
    path = _table_copy(tmp_path, "| `LOW-RANK` | get_context/model | model |",
                       "| `LOW-RANK` | get_context/model | engine |")
    with pytest.raises(InputError) as exc:
        codes.load_codes(path)
    assert exc.value.path == str(path) and exc.value.line is not None
    assert "engine" in exc.value.message


def test_duplicate_code_is_refused(tmp_path):
    path = _table_copy(tmp_path, "| `LOW-RANK` |", "| `MISSING` |")
    with pytest.raises(InputError, match="twice"):
        codes.load_codes(path)


def test_file_without_table_is_refused(tmp_path):
    path = tmp_path / "SKILL.md"
    path.write_text("# no table here\n| `lower` | x | y | z |\n", encoding="utf-8")
    with pytest.raises(InputError, match="no cause-code table"):
        codes.load_codes(path)


def test_renamed_gap_code_fails_startup_check_naming_it(tmp_path):
    path = _table_copy(tmp_path, "| `RULE_UNWRITTEN` |", "| `RULE-UNWRITTEN` |")
    with pytest.raises(UnmeasuredError, match="RULE_UNWRITTEN"):
        codes.check_gap_verdicts(path)


def test_renamed_gap_code_makes_check_coverage_exit_3_naming_it(tmp_path, monkeypatch, capsys):
    path = _table_copy(tmp_path, "| `AMBIGUOUS` |", "| `UNRESOLVED` |")
    monkeypatch.setattr(codes, "TABLE_PATH", path)
    main = runpy.run_path(str(CHECK_COVERAGE), run_name="check_coverage")["main"]
    with pytest.raises(SystemExit) as exc:
        cli.run(main, ["--set", str(tmp_path), "--model", str(tmp_path), "--reader", "replay"])
    assert exc.value.code == 3
    err = capsys.readouterr().err
    assert "AMBIGUOUS" in err and "Traceback" not in err


def test_render_table_round_trips_through_the_parser():
    table = codes.load_codes()
    assert codes.parse_codes(codes.render_table(table)) == table


def test_skill_front_matter_names_the_skill_and_says_what_it_never_does():
    text = paths.skill_md("eval-diagnose").read_text(encoding="utf-8")
    head = text.split("---")[1]
    assert "name: eval-diagnose" in head
    assert "Use after a run is scored" in head and "Never scores" in head


def test_skill_commands_name_scripts_that_exist():
    text = paths.skill_md("eval-diagnose").read_text(encoding="utf-8")
    for name in ("diagnose", "cluster_failures"):
        assert f"skills/eval-diagnose/scripts/{name}.py" in text
        assert paths.skill_script(name) is not None
