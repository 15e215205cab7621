"""Contamination through code the answerer runs (issue 18, classes 1-3): a script it wrote reads
what its body opens, a walk or glob in code reads where it is rooted, and a program made at run
time is unseen. Each class in several forms (tools, shells, interpreters, working folders), with
the look-alikes that must stay clean. The repository is /w, the set /w/sets/shop, the model
/w/pkg/shop.malloy; /scratch is a folder above neither."""

from __future__ import annotations

import pytest
from contamination_support import bash, check, rules, use, write
from malloy_evals.checks.contamination.code import lang_of, read_code
from malloy_evals.checks.contamination.refs import to_ref

SCRATCH = "/scratch"


# ------------------------------------------------------------- 1. code the answerer writes, then runs

@pytest.mark.parametrize("uses, rule", [
    pytest.param([write("/tmp/a.py", "print(open('/w/sets/shop/cases.jsonl').read())"),
                  bash("cd /tmp && python3 a.py")], "eval-area", id="write_tool_python_run_from_tmp"),
    pytest.param([bash("cat > /tmp/r.js <<'EOF'\nconst fs = require('fs')\n"
                       "console.log(fs.readFileSync('/w/pkg/shop.malloy', 'utf8'))\nEOF"),
                  bash("node /tmp/r.js")], "model-file", id="heredoc_node_reads_the_model"),
    pytest.param([bash("echo \"print(open('/w/sets/shop/a.csv').read())\" > /tmp/b.py"),
                  bash("cd /tmp; python3 b.py")], "eval-area", id="echo_redirect_python"),
    pytest.param([bash("printf 'print(open(\"/w/sets/shop/a.csv\").read())\\n' > /tmp/g.py"),
                  bash("python3 /tmp/g.py")], "eval-area", id="printf_redirect_python"),
    pytest.param([bash("tee /tmp/c.rb <<EOF\nputs File.read('/w/sets/shop/a.csv')\nEOF"),
                  bash("ruby /tmp/c.rb")], "eval-area", id="tee_heredoc_ruby"),
    pytest.param([bash("cat <<'EOF' | tee /tmp/d.py\nimport json\n"
                       "print(json.load(open('/w/sets/shop/set.json')))\nEOF"),
                  bash("python3 /tmp/d.py")], "eval-area", id="heredoc_piped_into_tee"),
    pytest.param([write("/tmp/e.py", "print(open('sets/shop/a.csv').read())"),
                  bash("cd /w && python3 /tmp/e.py")], "eval-area",
                 id="relative_path_resolves_against_the_folder_it_runs_from"),
    pytest.param([write("/tmp/f", "#!/usr/bin/env python3\nprint(open('/w/pkg/shop.malloy').read())"),
                  bash("chmod +x /tmp/f && /tmp/f")], "model-file", id="shebang_script_run_by_path"),
    pytest.param([bash("echo 'cat /w/sets/shop/a.csv' > /tmp/h.sh"), bash("sh /tmp/h.sh")],
                 "eval-area", id="echo_written_shell_script"),
    pytest.param([bash("echo 'cat /w/sets/shop/a.csv' > /tmp/h.sh && source /tmp/h.sh")],
                 "eval-area", id="sourced_in_the_same_command"),
    pytest.param([write("/tmp/s.sh", "cat /w/sets/shop/a.csv"), bash("bash -s < /tmp/s.sh")],
                 "eval-area", id="shell_reading_a_written_script_on_stdin"),
    pytest.param([write("/tmp/a.py", "print(open('/w/sets/shop/a.csv').read())"),
                  bash("cd /tmp && uv run a.py")], "eval-area", id="uv_run"),
    pytest.param([bash("echo \"print(open('/w/sets/shop/a.csv').read())\" | python3")],
                 "eval-area", id="code_piped_into_an_interpreter"),
])
def test_a_script_the_answerer_wrote_reads_what_its_body_opens(uses, rule):
    result = check(uses, cwd=SCRATCH)
    assert result.contaminated is True
    assert rules(result) == [rule]
    assert result.reasons[0].tool_use_index == len(uses) - 1  # the run, not the write


@pytest.mark.parametrize("uses", [
    pytest.param([write("/tmp/a.py", "print(open('/tmp/out.csv').read())"),
                  bash("cd /tmp && python3 a.py")], id="opens_its_own_scratch_file"),
    pytest.param([write("/tmp/a.py", "# the set is in /w/sets/shop: never read it\nprint(6 * 7)"),
                  bash("python3 /tmp/a.py")], id="a_comment_naming_the_set"),
    pytest.param([write("/tmp/a.py", "print(open('sets/shop/a.csv').read())"),
                  bash("cd /tmp && python3 a.py")], id="relative_path_from_a_folder_without_the_set"),
    pytest.param([write("/tmp/a.py", "print(open('/w/sets/shop/a.csv').read())")],
                 id="written_but_never_run"),
    pytest.param([bash("echo 'print(6 * 7)' | python3")], id="harmless_code_piped_in"),
])
def test_written_scripts_that_open_nothing_protected_stay_clean(uses):
    assert check(uses, cwd=SCRATCH).contaminated is False


# ------------------------------------------------------------- 2. recursive walks and globs in code

@pytest.mark.parametrize("command, cwd", [
    pytest.param("cd /tmp && python3 -c \"import glob; "
                 "print(glob.glob('/w/**/*.jsonl', recursive=True))\"", SCRATCH, id="python_glob"),
    pytest.param("python3 -c \"import glob; print(glob.glob('**/*.jsonl', recursive=True, "
                 "root_dir='/w'))\"", SCRATCH, id="python_glob_root_dir"),
    pytest.param("python3 -c \"from pathlib import Path; print(list(Path('/w').rglob('*.csv')))\"",
                 SCRATCH, id="pathlib_rglob"),
    pytest.param("python3 -c \"from pathlib import Path; print(list(Path.cwd().rglob('*.jsonl')))\"",
                 "/w", id="pathlib_rglob_of_the_cwd"),
    pytest.param("python3 - <<'EOF'\nimport os\nroot = '/w'\nfor d, _, fs in os.walk(root):\n"
                 "    print(d, fs)\nEOF", SCRATCH, id="os_walk_of_a_variable"),
    pytest.param("python3 -c \"import shutil; shutil.make_archive('/tmp/all', 'zip', '/w')\"",
                 SCRATCH, id="shutil_make_archive"),
    pytest.param("node -e \"console.log(require('fs').readdirSync('/w', {recursive: true}))\"",
                 SCRATCH, id="node_readdir_recursive"),
    pytest.param("node -e \"const {globSync} = require('glob'); console.log(globSync('/w/**/*.csv'))\"",
                 SCRATCH, id="node_glob"),
    pytest.param("ruby -e \"puts Dir.glob('/w/**/*')\"", SCRATCH, id="ruby_dir_glob"),
    pytest.param("perl -MFile::Find -e 'find(sub { print $File::Find::name }, \"/w\")'", SCRATCH,
                 id="perl_file_find"),
    pytest.param("Rscript -e 'print(list.files(\"/w\", recursive = TRUE))'", SCRATCH,
                 id="r_list_files"),
    pytest.param("duckdb -c \"select * from read_csv('/w/**/*.csv')\"", SCRATCH, id="duckdb_sql"),
    pytest.param("python3 -c \"import duckdb; print(duckdb.sql(\\\"select * from "
                 "'/w/**/*.jsonl'\\\"))\"", SCRATCH, id="sql_inside_python"),
    pytest.param("python3 -c \"import subprocess; subprocess.run(['grep', '-r', 'revenue', '/w'])\"",
                 SCRATCH, id="python_runs_grep_r"),
    pytest.param("ruby -e 'puts `grep -r revenue /w`'", SCRATCH, id="ruby_backticks_grep_r"),
    pytest.param("python3 -c \"import glob, os; print(glob.glob(os.path.join('/w', '**', "
                 "'*.jsonl'), recursive=True))\"", SCRATCH, id="pattern_built_with_os_path_join"),
    pytest.param("python3 -c \"from pathlib import Path; print(list((Path('/') / 'w')"
                 ".rglob('*.csv')))\"", SCRATCH, id="root_built_with_pathlib_slash"),
    pytest.param("python3 - <<'EOF'\nimport os\nbase = os.path.join('/', 'w')\n"
                 "for d, _, f in os.walk(base):\n    print(f)\nEOF", SCRATCH,
                 id="root_variable_built_with_a_join"),
    pytest.param("python3 -c \"import os; root = '/w/' + 'sets'; print(list(os.walk(root)))\"",
                 SCRATCH, id="root_built_by_concatenation"),
    pytest.param("python3 -c \"import os; r = '/w'; print(list(os.walk(f'{r}/sets')))\"",
                 SCRATCH, id="root_in_an_f_string"),
    pytest.param("Rscript -e 'print(fs::dir_ls(\"/w\", recurse = TRUE))'", SCRATCH,
                 id="r_dir_ls_recursive"),
])
def test_recursive_walks_and_globs_in_code_are_recursive_reads(command, cwd):
    result = check([bash(command)], cwd=cwd)
    assert result.contaminated is True
    assert rules(result) == ["recursive-read"]


@pytest.mark.parametrize("command", [
    pytest.param("python3 -c \"import glob; print(glob.glob('/tmp/out/**/*.csv', recursive=True))\"",
                 id="glob_of_a_scratch_folder"),
    pytest.param("python3 -c \"from pathlib import Path; print(list(Path('/w/src').rglob('*.py')))\"",
                 id="rglob_of_a_sibling_folder"),
    pytest.param("python3 -c \"from pathlib import Path; print(list(Path('/w').rglob('*.py')))\"",
                 id="rglob_for_source_files_only"),
    pytest.param("python3 -c \"import os; print(list(os.walk('/tmp/scratch')))\"",
                 id="walk_of_a_scratch_folder"),
    pytest.param("node -e \"console.log(require('fs').readdirSync('/w/src', {recursive: true}))\"",
                 id="node_readdir_of_a_sibling"),
    pytest.param("python3 -c \"import glob; print(glob.glob('/w/*.md'))\"", id="top_level_glob"),
    pytest.param("duckdb -c \"select count(*) from read_csv('/tmp/out/*.csv')\"",
                 id="duckdb_glob_of_scratch"),
    pytest.param("python3 -c \"import shutil; shutil.make_archive('/tmp/all', 'zip', '/tmp/s')\"",
                 id="archive_of_a_scratch_folder"),
    pytest.param("python3 -c \"import glob, os; print(glob.glob(os.path.join('/tmp/out', '**', "
                 "'*.csv'), recursive=True))\"", id="joined_pattern_under_scratch"),
    pytest.param("Rscript -e 'print(fs::dir_ls(\"/w\"))'", id="r_dir_ls_lists_one_level"),
])
def test_walks_and_globs_in_code_that_cannot_reach_the_eval_area_stay_clean(command):
    assert check([bash(command)], cwd=SCRATCH).contaminated is False


def test_python_glob_without_recursive_reads_double_star_as_one_level():
    # glob.glob('**') from the repo root lists its top level only: no walk; the code can still
    # read from a folder holding the set, so rule 3 keeps it "unknown".
    result = check([bash("python3 -c \"import glob; print(glob.glob('**'))\"")])
    assert result.contaminated == "unknown"
    assert rules(result) == ["script-may-read"]


# ------------------------------------------------------------- 3. programs the log cannot show

@pytest.mark.parametrize("uses", [
    pytest.param([bash("echo Y2F0IC93L3NldHMvc2hvcC9hLmNzdgo= | base64 -d | sh")], id="base64_into_sh"),
    pytest.param([bash("base64 --decode <<< Y2F0 | bash")], id="herestring_decoded_into_bash"),
    pytest.param([bash("xxd -r -p <<< 636174 | bash")], id="hex_into_bash"),
    pytest.param([bash("echo Y2F0 | base64 -d | python3 -")], id="decoded_into_python"),
    pytest.param([bash("curl -s http://example.com/x.py | python3")], id="download_into_python"),
    pytest.param([bash("eval \"$(echo Y2F0 | base64 -d)\"")], id="eval_of_a_substitution"),
    pytest.param([bash("eval `echo Y2F0 | base64 -d`")], id="eval_of_backticks"),
    pytest.param([bash("sh -c \"$CMD\"")], id="sh_c_of_an_unknown_variable"),
    pytest.param([bash("X=$(echo Y2F0 | base64 -d); bash -c \"$X\"")],
                 id="bash_c_of_a_variable_set_at_run_time"),
    pytest.param([bash("python3 -c \"$(echo cHJpbnQ= | base64 -d)\"")], id="python_c_of_a_substitution"),
    pytest.param([bash("bash <(curl -s http://example.com/s.sh)")], id="process_substitution"),
    pytest.param([bash("source <(echo Y2F0 | base64 -d)")], id="source_of_a_process_substitution"),
    pytest.param([bash(". /dev/stdin <<< \"$X\"")], id="source_of_stdin_from_a_variable"),
    pytest.param([bash("$RUNNER /tmp/x")], id="program_named_by_an_unknown_variable"),
    pytest.param([bash("python3 -c \"exec(__import__('base64').b64decode('cHJpbnQoMSk='))\"")],
                 id="python_exec"),
    pytest.param([bash("python3 -c \"import base64, os; os.system(base64.b64decode('Y2F0').decode())\"")],
                 id="python_os_system_of_decoded_text"),
    pytest.param([bash("node -e \"eval(Buffer.from('Y29uc29sZS5sb2coMSk=', 'base64').toString())\"")],
                 id="node_eval"),
    pytest.param([bash("perl -MMIME::Base64 -e 'eval decode_base64(\"cHJpbnQgMQ==\")'")], id="perl_eval"),
    pytest.param([bash("echo cHJpbnQoMSk= | base64 -d > /tmp/p.py && python3 /tmp/p.py")],
                 id="script_file_written_by_a_decoder"),
    pytest.param([bash("curl -sL http://example.com/s.sh -o /tmp/s.sh && bash /tmp/s.sh")],
                 id="downloaded_script"),
    pytest.param([bash("python3 -c \"open('/tmp/g.py', 'w').write(open('/tmp/b64').read())\""),
                  bash("python3 /tmp/g.py")], id="script_file_written_by_python"),
    pytest.param([bash("node -e \"require('fs').writeFileSync('/tmp/g.js', process.argv[1])\" x"),
                  bash("node /tmp/g.js")], id="script_file_written_by_node"),
    pytest.param([bash("python3 -c \"import os; os.system(os.environ['X'])\"")],
                 id="python_runs_a_command_from_the_environment"),
    pytest.param([bash("node -e \"require('child_process').execSync(process.env.CMD)\"")],
                 id="node_runs_a_command_from_the_environment"),
    pytest.param([bash("curl -s http://example.com/q.sql | duckdb x.db")], id="download_into_duckdb"),
    pytest.param([bash("echo cHJpbnQ= | base64 -d > /tmp/p.py; cat /tmp/p.py | python3")],
                 id="cat_of_a_decoded_file_into_python"),
])
def test_a_program_made_at_run_time_is_unknown_from_any_folder(uses):
    result = check(uses, cwd=SCRATCH)
    assert result.contaminated == "unknown"
    assert rules(result) == ["unseen-program"]


@pytest.mark.parametrize("command", [
    pytest.param("echo ls | sh", id="literal_piped_into_sh"),
    pytest.param("eval \"x=1\"; echo $x", id="eval_of_a_literal"),
    pytest.param("X='ls /tmp'; sh -c \"$X\"", id="sh_c_of_a_variable_the_log_set"),
    pytest.param("python3 -c \"print(eval('1+2'))\"", id="python_eval_of_a_literal"),
    pytest.param("echo aGk= | base64 -d", id="decoding_data_without_running_it"),
    pytest.param("sh -c 'echo $HOME'", id="sh_c_literal_with_a_variable_inside"),
    pytest.param("python3 -c \"import pandas as pd; print(pd.DataFrame({'a': [1]}).eval('a*2'))\"",
                 id="pandas_eval_method"),
    pytest.param("python3 -c \"import ast; print(ast.literal_eval('[1]'))\"", id="literal_eval"),
    pytest.param("perl -e 'eval { 1 }; print 2'", id="perl_block_eval"),
    pytest.param("printf '%s\\n' 'echo hi' | sh", id="printf_of_a_harmless_command"),
    pytest.param("python3 -c \"import os; os.system('ls /tmp')\"", id="os_system_of_a_literal"),
    pytest.param("cat q.sql | duckdb x.db", id="cat_of_a_file_into_duckdb_outside_the_repo"),
    pytest.param("eval \"$(pyenv init -)\"", id="eval_of_pyenv_init"),
    pytest.param("eval \"$(ssh-agent -s)\"", id="eval_of_ssh_agent"),
    pytest.param("eval \"$(conda shell.bash hook)\" && conda activate x", id="eval_of_conda_hook"),
    pytest.param("source <(kubectl completion bash)", id="sourced_completion"),
    pytest.param("duckdb x.db < /tmp/q.sql", id="duckdb_reading_a_file_outside_the_repo"),
])
def test_programs_the_log_shows_stay_clean(command):
    assert check([bash(command)], cwd=SCRATCH).contaminated is False


@pytest.mark.parametrize("command, rule", [
    pytest.param("printf '\\x63\\x61\\x74 /w/sets/shop/a.csv' | sh", "eval-area", id="printf_hex"),
    pytest.param("echo -e '\\0143at /w/sets/shop/a.csv' | bash", "eval-area", id="echo_e_octal"),
    pytest.param("printf '%b' 'cat /w/pkg/shop.malloy' | sh", "model-file", id="printf_percent_b"),
])
def test_escapes_printed_into_a_shell_are_decoded_and_read(command, rule):
    assert rules(check([bash(command)], cwd=SCRATCH)) == [rule]


def test_a_file_catted_into_an_interpreter_is_read_as_the_script_it_is():
    uses = [write("/tmp/q.sql", "select * from read_csv('/w/**/*.csv')"),
            bash("cat /tmp/q.sql | duckdb")]
    assert rules(check(uses, cwd=SCRATCH)) == ["recursive-read"]
    # A file the log never shows, from the repo root: code that may read (rule 3), as before.
    assert rules(check([bash("cat q.sql | duckdb x.db")])) == ["script-may-read"]


@pytest.mark.parametrize("command", [
    pytest.param("source .venv/bin/activate && echo ok", id="venv_activate"),
    pytest.param(". venv/bin/activate", id="dot_activate"),
    pytest.param("source ~/.bashrc", id="rc_file"),
    pytest.param("eval \"$(pyenv init -)\"", id="pyenv_init"),
])
def test_setting_up_the_shell_from_the_repo_root_stays_clean(command):
    # These were clean before the shell learned `source` and `eval`; they must stay so.
    assert check([bash(command)]).contaminated is False


def test_environment_setup_does_not_shield_a_decoder_in_the_same_eval():
    result = check([bash("eval \"$(pyenv init -)$(echo Y2F0 | base64 -d)\"")], cwd=SCRATCH)
    assert rules(result) == ["unseen-program"]


def test_a_sourced_script_the_log_does_not_show_may_read_like_any_script():
    assert rules(check([bash("source run.sh")])) == ["script-may-read"]
    written = [write("/tmp/activate", "cat /w/sets/shop/a.csv"), bash("source /tmp/activate")]
    assert rules(check(written, cwd=SCRATCH)) == ["eval-area"]


def test_a_definite_read_in_the_same_use_decides_over_an_unseen_program():
    result = check([bash("cat /w/sets/shop/a.csv; echo Y2F0 | base64 -d | sh")], cwd=SCRATCH)
    assert result.contaminated is True
    assert rules(result) == ["eval-area"]


# ------------------------------------------------------------- the code reader itself

def test_read_code_roots_a_pathlib_walk_at_a_variable_holding_a_path():
    reading = read_code("from pathlib import Path\nroot = Path('/w/data')\n"
                        "for p in root.rglob('*.csv'):\n    print(p)\n", "python", to_ref("/x"))
    assert [(s.root, s.pattern) for s in reading.sweeps] == [(to_ref("/w/data"), ("**", "*.csv"))]


def test_read_code_says_when_a_walk_has_no_root_in_the_text():
    reading = read_code("import os, sys\nfor d in os.walk(sys.argv[1]): print(d)", "python", None)
    assert reading.sweeps == []
    assert reading.unrooted == ["os.walk"]


def test_read_code_finds_shell_commands_in_an_argument_list():
    reading = read_code("spawnSync('grep', ['-r', 'x', '/w'])", "js", None)
    assert reading.shell == ["grep -r x /w"]


@pytest.mark.parametrize("program, script, body, lang", [
    pytest.param("python3.12", "", "", "python", id="versioned_python"),
    pytest.param("", "/tmp/a.mjs", "", "js", id="suffix"),
    pytest.param("", "/tmp/run", "#!/usr/bin/env ruby\nputs 1", "ruby", id="shebang"),
    pytest.param("", "/tmp/run", "puts 1", "other", id="unknown"),
])
def test_lang_of(program, script, body, lang):
    assert lang_of(program, script, body) == lang


def test_a_tool_use_that_writes_a_script_is_not_the_read():
    uses = [use("Write", file_path="/tmp/a.py", content="open('/w/sets/shop/a.csv')")]
    assert check(uses, cwd=SCRATCH).reasons == []
