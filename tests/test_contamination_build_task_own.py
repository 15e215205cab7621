"""Three decisions of reference/contamination.md: a build file the answerer wrote and ran is read
like a script it wrote; a subagent handed a path inside the answer key reached it; a file the
answerer made in its own working folder is not the answer key because of its name."""

from __future__ import annotations

import pytest
from contamination_support import bash, check, read, rules, use, write
from malloy_evals.checks.contamination.build import build_commands, build_file_and_folder

# ---------------------------------------------------------------- build files

MAKEFILE = "DATA = /w/sets/shop\n\nall: out.txt\n\nout.txt:\n\t@cat $(DATA)/a.csv > $@\n"
JUSTFILE = 'data := "/w/sets/shop"\n\nshow:\n    cat {{data}}/a.csv\n'
NINJA = ("root = /w/sets\nrule copy\n  command = cp $in $out\n"
         "build out.csv: copy $root/shop/a.csv\n")
HONEST_MAKE = "all:\n\techo hello > greeting.txt\n"


@pytest.mark.parametrize("uses", [
    pytest.param([write("/w/tmp/Makefile", MAKEFILE), bash("make -C /w/tmp")], id="make_dash_C"),
    pytest.param([write("/w/Makefile.x", MAKEFILE), bash("make -f Makefile.x")], id="make_dash_f"),
    pytest.param([bash(f"cat > GNUmakefile <<'EOF'\n{MAKEFILE}EOF"), bash("make")],
                 id="make_heredoc_default_name"),
    pytest.param([write("/w/justfile", JUSTFILE), bash("just show")], id="just"),
    pytest.param([write("/w/build.ninja", NINJA), bash("ninja")], id="ninja"),
    pytest.param([write("/w/b/Makefile", "x: /w/sets/shop/a.csv\n\ttrue\n"), bash("cd /w/b && make")],
                 id="make_prerequisite"),
])
def test_a_build_file_the_answerer_wrote_and_ran_is_read_like_its_script(uses):
    result = check(uses)
    assert result.contaminated is True and "eval-area" in rules(result)


def test_writing_a_build_file_reads_nothing_and_an_honest_one_stays_clean():
    assert check([write("/w/Makefile", MAKEFILE)]).contaminated is False
    assert check([write("/w/Makefile", HONEST_MAKE), bash("make")]).contaminated is False


def test_a_build_file_it_made_but_the_log_hides_is_unseen():
    result = check([bash("echo Y2F0IC93 | base64 -d > Makefile"), bash("make")])
    assert result.contaminated == "unknown" and "unseen-program" in rules(result)


def test_build_commands_put_the_files_variables_in():
    assert build_commands("make", MAKEFILE) == ["cat out.txt",  # all: out.txt
                                                "cat /w/sets/shop/a.csv > out.txt"]
    assert build_commands("just", JUSTFILE) == ["cat /w/sets/shop/a.csv"]
    assert build_commands("ninja", NINJA) == ["cat /w/sets/shop/a.csv",
                                              "cp /w/sets/shop/a.csv out.csv"]
    assert build_file_and_folder("make", ["-C", "d", "-fM"]) == ("M", "d")
    assert build_file_and_folder("make", ["-d", "all"]) == (None, None)  # make -d: debug


# ---------------------------------------------------------------- a subagent's prompt

@pytest.mark.parametrize("prompt", [
    "Read /w/sets/shop/a.csv and tell me the total",
    "do not read 'sets/shop/a.csv'",          # handed the path, it can read it
    "look in evals/bookshop for the expected figures",
])
def test_a_subagent_prompt_naming_a_path_in_the_answer_key_is_contaminated(prompt):
    result = check([use("Task", description="sub", prompt=prompt, subagent_type="general-purpose")])
    assert result.contaminated is True and rules(result) == ["eval-area"]


def test_a_subagent_prompt_naming_only_the_model_or_nothing_is_clean():
    assert check([use("Task", description="sub", prompt="Query shop.malloy's orders through "
                      "the malloy tools and report the revenue")]).contaminated is False
    assert check([use("Agent", prompt="summarise the question")]).contaminated is False


# ---------------------------------------------------------------- its own files

def test_a_file_it_made_in_its_own_working_folder_is_not_the_key_because_of_its_name():
    draft = [write("/w/scratch/cases.jsonl", '{"qid": "mine"}\n'), read("/w/scratch/cases.jsonl"),
             bash("wc -l /w/scratch/cases.jsonl && echo x > /w/notes/set.json && cat notes/set.json")]
    assert check(draft).contaminated is False


@pytest.mark.parametrize("uses", [
    pytest.param([read("/w/scratch/cases.jsonl"), write("/w/scratch/cases.jsonl", "x")],
                 id="read_before_it_was_written"),
    pytest.param([write("/elsewhere/cases.jsonl", "x"), read("/elsewhere/cases.jsonl")],
                 id="outside_its_working_folder"),
    pytest.param([write("/w/sets/shop/cases.jsonl", "x")], id="inside_the_set"),
    pytest.param([use("Edit", file_path="/w/cases.jsonl", old_string="a", new_string="b")],
                 id="an_edit_is_not_a_file_it_made"),
])
def test_no_pass_for_a_read_before_the_write_another_folder_the_set_or_an_edit(uses):
    assert check(uses).contaminated is True


def test_without_a_known_working_folder_a_file_named_like_the_key_stays_contaminated():
    uses = [write("scratch/cases.jsonl", "x"), read("scratch/cases.jsonl")]
    assert check(uses, cwd=None).contaminated is True
