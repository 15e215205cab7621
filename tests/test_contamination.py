"""check_contamination: each rule and edge case as scenario -> verdict and rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from contamination_support import CWD, MODEL, SET, bash, check, read, rules, use
from fuzz_support import FUZZ, mutated_transcript, reads_or_refuses
from hypothesis import given, settings
from hypothesis import strategies as st
from malloy_evals.checks.contamination.refs import is_under, make_needle, to_ref
from malloy_evals.checks.contamination.rules import (
    DEFAULT_NEEDLES,
    check_contamination,
    render_text,
)
from malloy_evals.checks.contamination.shell import SUBST, split_shell
from malloy_evals.checks.contamination.tools import tool_kind
from malloy_evals.checks.toollog import ToolUse
from malloy_evals.core.errors import UsageError

SCRIPT = Path(__file__).resolve().parents[1] / "skills" / "eval-answer" / "scripts" / "check_contamination.py"


GET_CONTEXT = use("mcp__publisher__malloy_getContext", query="revenue by month")
EXECUTE = use("mcp__publisher__malloy_executeQuery", projectName="samples", packageName="shop",
              modelPath="shop.malloy", query="run: orders -> { aggregate: revenue }")


# ------------------------------------------------------------------ the public skill's scenarios

def test_only_mcp_calls_with_matching_report_is_clean():
    result = check([GET_CONTEXT, EXECUTE], reported_calls=2)
    assert result.contaminated is False
    assert result.reasons == []
    assert result.host_tool_uses == 2
    assert result.exit_code == 0


def test_read_of_gold_csv_is_contaminated_naming_gold():
    result = check([read("results/gold/beaver_full/dw_5261.csv")])
    assert result.contaminated is True
    assert result.reasons[0].needle == "gold/"


def test_curl_to_evals_api_is_contaminated():
    result = check([bash("curl -s http://127.0.0.1:4000/api/v0/evals/cases/abc")])
    assert result.contaminated is True
    assert rules(result) == ["eval-area"]


def test_read_of_model_file_under_test_is_contaminated():
    result = check([read("pkg/orders.malloy")], model_paths=["pkg/orders.malloy"])
    assert result.contaminated is True
    assert rules(result) == ["model-file"]


def test_mcp_model_path_naming_the_model_is_not_contamination():
    call = use("malloy_executeQuery", modelPath="storefront.malloy", query="run: x -> y")
    result = check([call], model_paths=["pkg/storefront.malloy"])
    assert result.contaminated is False


def test_custom_gold_paths_extend_the_defaults_rather_than_replace_them():
    result = check([read("results/gold/x/dw_1.csv")], gold_paths=["evals/**", "results/gold/**"])
    assert result.contaminated is True


def test_read_of_an_earlier_runs_ledger_is_contaminated():
    result = check([read("evals/beaver/runs/r1/events.jsonl")])
    assert result.contaminated is True


def test_reporting_more_calls_than_the_host_logged_is_contaminated():
    result = check([GET_CONTEXT], reported_calls=9)
    assert result.contaminated is True
    assert rules(result) == ["under-report"]
    assert "reported_calls 9" in result.reasons[0].needle


# ------------------------------------------------------------------ rule 1: the eval area

@pytest.mark.parametrize("uses, needle", [
    pytest.param([read("evals/x")], "evals/", id="evals_folder_segment"),
    pytest.param([bash("cat ../evals/./cases.jsonl")], "evals/", id="dot_segments_normalised"),
    pytest.param([read("/data/judge-regressions.jsonl")], "judge-regressions",
                 id="stem_needle_matches_file_of_that_stem"),
    pytest.param([read("notes/judge-calibration")], "judge-calibration", id="stem_needle_bare"),
    pytest.param([read("/tmp/cases.jsonl")], "cases.jsonl", id="cases_file_anywhere"),
    pytest.param([bash("cat /tmp/x/set.json")], "set.json", id="set_json_in_shell"),
    pytest.param([read("/tmp/recordings/judge/a.json")], "recordings/", id="recordings_folder"),
    pytest.param([read("/W/EVALS/a.csv")], "evals/", id="case_insensitive"),
    pytest.param([bash("python -c \"open('evals/x/cases.jsonl').read()\"")], "evals/",
                 id="path_inside_quoted_inline_code"),
    pytest.param([bash("git show HEAD:evals/shop/q.csv")], "evals/",
                 id="path_after_revision_colon"),
    pytest.param([use("WebFetch", url="http://127.0.0.1:4000/api/v0/evals/cases/q1",
                      prompt="read it")], "evals/", id="webfetch_url_path"),
    pytest.param([bash("echo hi > runs/out.txt")], "runs/", id="redirect_target"),
    pytest.param([bash("ls runs")], "runs/", id="listing_a_needle_folder"),
    pytest.param([use("LS", path="/w/evals")], "evals/", id="ls_tool_listing"),
    pytest.param([use("Glob", pattern="**/cases.jsonl")], "cases.jsonl", id="glob_for_cases"),
    pytest.param([use("Grep", pattern="x", path="src", glob="cases.jsonl")], "cases.jsonl",
                 id="grep_glob_filter_naming_cases"),
    pytest.param([bash("cd evals && ls")], "evals/", id="cd_into_needle"),
    pytest.param([bash("[ -f evals/x/cases.jsonl ] && echo yes")], "evals/", id="existence_probe"),
    pytest.param([bash("D=/w/sets"), bash("cat ${D}/shop/x")], SET, id="variable_set_earlier"),
    pytest.param([use("read_file", path="evals/a.json")], "evals/", id="other_host_read_tool"),
    pytest.param([use("shell", command=["bash", "-lc", "cat evals/x.csv"])], "evals/",
                 id="argv_list_command"),
    pytest.param([use("mcp__fs__read_text_file", path="/w/evals/q.json")], "evals/",
                 id="mcp_tool_that_reads_files"),
    pytest.param([ToolUse(name="", input="cat evals/x/cases.jsonl")], "evals/",
                 id="malformed_entry_still_scanned"),
])
def test_touching_a_needle_is_contaminated(uses, needle):
    result = check(uses)
    assert result.contaminated is True
    assert result.reasons[0].rule == "eval-area"
    assert result.reasons[0].needle == needle


@pytest.mark.parametrize("uses", [
    pytest.param([read("medievals/x")], id="medievals_is_not_evals"),
    pytest.param([read("evals_2021/x")], id="evals_2021_is_not_evals"),
    pytest.param([read("src/evals.py")], id="evals_py_file"),
    pytest.param([read("/tmp/judge-regressions-old.txt")], id="longer_stem"),
    pytest.param([read("/tmp/my_cases.jsonl")], id="longer_file_name"),
    pytest.param([bash("grep -n 'evals/' src/app.py")], id="grep_pattern_is_not_a_path"),
    pytest.param([bash("echo evals/ runs/")], id="echo_arguments_are_not_paths"),
    pytest.param([bash("curl 'http://h/api?next=evals/'")], id="url_query_is_not_its_path"),
    pytest.param([use("mcp__publisher__malloy_executeQuery", modelPath="shop.malloy",
                      query="run: customers -> { where: tier = 'gold' }")],
                 id="gold_string_in_a_query"),
    pytest.param([use("TodoWrite", todos=[{"content": "check evals/ later", "status": "pending"}])],
                 id="todo_text_is_not_a_path"),
    pytest.param([use("Read", file_path="/w/src/app.py")], id="ordinary_source_file"),
])
def test_similar_names_and_non_paths_are_clean(uses):
    assert check(uses).contaminated is False


def test_protected_set_folder_that_does_not_exist_here_still_protects():
    result = check([read("/data/sets/shop/data/orders.csv")], set_dir="/data/sets/shop")
    assert result.contaminated is True
    assert result.reasons[0].needle == "/data/sets/shop"


def test_relative_set_resolves_against_the_logs_cwd():
    result = check([read("/w/sets/shop/data/orders.csv")], set_dir="sets/shop")
    assert result.contaminated is True


def test_relative_set_elsewhere_than_the_logs_cwd_is_not_hit():
    assert check([read("/other/sets/shop/a.csv")], set_dir="sets/shop").contaminated is False


def test_relative_read_resolves_against_the_logs_cwd():
    assert check([read("sets/shop/data/orders.csv")]).contaminated is True


def test_cd_in_one_shell_call_carries_to_the_next():
    result = check([bash("cd /w/sets"), bash("cat shop/data/orders.csv")])
    assert result.contaminated is True
    assert result.reasons[0].tool_use_index == 1


def test_run_folder_is_protected():
    result = check([read("/w/out/r7/prediction.csv")], run_dir="/w/out/r7")
    assert result.contaminated is True
    assert result.reasons[0].needle == "/w/out/r7"


def test_mcp_call_naming_the_truth_package_is_contaminated():
    call = use("mcp__publisher__malloy_executeQuery", packageName="shop_truth",
               modelPath="truth.malloy", query="run: orders -> { aggregate: revenue }")
    result = check([call], truth_package="shop_truth")
    assert result.contaminated is True
    assert result.reasons[0].needle == "shop_truth"


def test_mcp_call_naming_a_protected_path_is_contaminated():
    call = use("mcp__publisher__malloy_getContext", modelPath="/w/sets/shop/truth/truth.malloy")
    assert check([call]).contaminated is True


def test_mcp_package_relative_model_path_is_not_resolved_against_cwd():
    # modelPath is relative to the served package; the host's cwd says nothing about it.
    call = use("mcp__publisher__malloy_executeQuery", modelPath="sets/shop/x.malloy", query="q")
    assert check([call]).contaminated is False


# ------------------------------------------------------------------ rule 2: the model file

@pytest.mark.parametrize("uses", [
    pytest.param([bash("cat pkg/shop.malloy")], id="cat_relative"),
    pytest.param([bash("head -50 shop.malloy")], id="by_file_name"),
    pytest.param([use("Grep", pattern="measure:", path="/w/pkg/shop.malloy")], id="grep_tool_on_it"),
    pytest.param([use("NotebookRead", notebook_path="/w/pkg/shop.malloy")], id="notebook_read"),
    pytest.param([bash("python3 -c \"print(open('/w/pkg/shop.malloy').read())\"")],
                 id="inline_code_opening_it"),
])
def test_reading_the_model_file_with_a_host_tool_is_contaminated(uses):
    result = check(uses)
    assert result.contaminated is True
    assert "model-file" in rules(result)


def test_model_file_from_set_json_is_protected(tmp_path):
    set_dir = tmp_path / "shop"
    set_dir.mkdir()
    (set_dir / "set.json").write_text(json.dumps({
        "name": "shop", "datasetVersion": 1, "targetPackage": "shop",
        "targetModelPath": "store.malloy", "truthPackage": "shop_truth"}))
    log = tmp_path / "log.json"
    log.write_text(json.dumps({"toolUses": [{"name": "Read", "input": {"file_path": "/x/store.malloy"}}]}))
    out = _run_cli("--log", str(log), "--set", str(set_dir), "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["reasons"][0]["rule"] == "model-file"


MCP_OVER_CURL = ("curl -s -X POST http://127.0.0.1:4000/mcp -H 'content-type: application/json' "
                 "-d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                 "{\"name\":\"malloy_executeQuery\",\"arguments\":{\"modelPath\":\"shop.malloy\","
                 "\"query\":\"run: orders -> { aggregate: revenue }\"}}}'")


def test_shell_posting_an_mcp_tools_call_is_an_mcp_call_for_the_model_rule():
    assert check([bash(MCP_OVER_CURL)]).contaminated is False


def test_shell_mcp_call_does_not_shield_a_read_chained_after_it():
    result = check([bash(MCP_OVER_CURL + " && cat shop.malloy")])
    assert rules(result) == ["model-file"]


def test_shell_mcp_call_naming_the_truth_package_still_hits_rule_one():
    command = MCP_OVER_CURL.replace('"modelPath"', '"packageName\\":\\"shop_truth\\",\\"modelPath"')
    command = command.replace("\\\"", "\"")
    assert check([bash(command)], truth_package="shop_truth").contaminated is True


# ------------------------------------------------------------------ rule 3: recursive reads

@pytest.mark.parametrize("uses", [
    pytest.param([bash("grep -rn revenue .")], id="grep_rn_from_repo_root"),
    pytest.param([bash("grep -R revenue")], id="grep_R_without_path_reads_cwd"),
    pytest.param([bash("rg revenue")], id="rg_recursive_by_default"),
    pytest.param([bash("rg --files /w")], id="rg_files_lists_everything"),
    pytest.param([bash("grep -rn x . --include='*.jsonl'")], id="include_that_admits_gold"),
    pytest.param([bash("find . -type f -exec cat {} +")], id="find_exec"),
    pytest.param([bash("find /w")], id="find_lists_everything_below"),
    pytest.param([bash("shopt -s globstar; cat **")], id="cat_globstar"),
    pytest.param([bash("cat */*/*")], id="cat_star_star_star"),
    pytest.param([bash("tar czf /tmp/all.tgz .")], id="tar_of_repo"),
    pytest.param([bash("cp -r . /tmp/copy")], id="cp_r_of_repo"),
    pytest.param([bash("ls -R")], id="ls_recursive"),
    pytest.param([bash("bash -c 'grep -r x .'")], id="nested_shell"),
    pytest.param([bash("cd /w && git grep revenue")], id="git_grep"),
    pytest.param([use("Grep", pattern="revenue")], id="grep_tool_rooted_at_cwd"),
    pytest.param([use("Grep", pattern="revenue", path="/w", glob="*.csv")],
                 id="grep_tool_filter_admits_data"),
    pytest.param([use("Glob", pattern="**/*.csv")], id="glob_tool_recursive"),
    pytest.param([use("Glob", pattern="**/*.malloy")], id="glob_tool_for_the_model"),
    pytest.param([use("Glob", pattern="*/shop/*", path="/w/sets/..")], id="glob_reaching_set"),
    pytest.param([bash("grep -r 'measure:' /w/pkg")], id="folder_holding_the_model_file"),
])
def test_recursive_read_over_a_folder_holding_the_eval_area_is_contaminated(uses):
    result = check(uses)
    assert result.contaminated is True
    assert rules(result) == ["recursive-read"]


@pytest.mark.parametrize("uses", [
    pytest.param([bash("grep -rn revenue src")], id="grep_r_of_a_sibling_folder"),
    pytest.param([bash("grep -rn x . --include='*.py'")], id="include_that_excludes_gold"),
    pytest.param([bash("grep -r --exclude-dir=sets --exclude-dir=pkg x .")], id="exclude_dir"),
    pytest.param([bash("grep -r --exclude-dir=evals --exclude-dir=sets --exclude-dir=pkg x .")],
                 id="excluded_needle_folder_is_not_touched"),
    pytest.param([bash("grep --regexp=evals/ -n src/app.py")], id="regexp_option_is_a_pattern"),
    pytest.param([bash("find . -name '*.py' -exec wc -l {} +")], id="find_name_filter"),
    pytest.param([bash("find . -maxdepth 1")], id="find_maxdepth_1"),
    pytest.param([bash("cat *.md")], id="top_level_glob"),
    pytest.param([bash("cp -r src /tmp/src")], id="cp_r_of_sibling"),
    pytest.param([bash("grep -n revenue notes.txt")], id="non_recursive_grep"),
    pytest.param([use("Grep", pattern="revenue", path="src")], id="grep_tool_sibling_root"),
    pytest.param([use("Glob", pattern="src/**/*.py")], id="glob_tool_under_sibling"),
    pytest.param([use("Glob", pattern="**/*.py")], id="glob_tool_recursive_for_source_files"),
    pytest.param([bash("ls */*/*.py")], id="shell_glob_for_source_files"),
    pytest.param([use("Grep", pattern="x", path="/w", type="py")], id="grep_tool_type_filter"),
])
def test_recursive_read_that_cannot_reach_the_eval_area_is_clean(uses):
    assert check(uses).contaminated is False


def test_recursive_read_from_a_scratch_workspace_is_clean():
    assert check([bash("grep -rn revenue .")], cwd="/scratch").contaminated is False


def test_grep_from_cwd_with_unknown_cwd_and_relative_set_is_contaminated():
    # Both relative to the same unknown folder: `.` holds sets/shop.
    result = check([bash("grep -rn x .")], cwd=None, set_dir="sets/shop", model_paths=[])
    assert result.contaminated is True


def test_grep_of_sibling_with_unknown_cwd_and_relative_set_is_clean():
    result = check([bash("grep -rn x src")], cwd=None, set_dir="sets/shop", model_paths=[])
    assert result.contaminated is False


# ------------------------------------------------------------------ rule 3: script-may-read

@pytest.mark.parametrize("uses, needle", [
    pytest.param([bash("python3 -c \"import json; print(json.load(open('data.json')))\"")],
                 "open", id="inline_python_open"),
    pytest.param([bash("node -e \"console.log(require('fs').readdirSync('.'))\"")], "readdirsync",
                 id="inline_node_fs"),
    pytest.param([bash("python3 - <<'EOF'\nimport os\nfor f in os.listdir('.'):\n    print(f)\nEOF")],
                 "listdir", id="heredoc_python_listdir"),
    pytest.param([bash("python3 analyze.py")], "unseen script", id="script_file_not_in_log"),
    pytest.param([use("Write", file_path="/w/tmp/a.py", content="import glob\nprint(glob.glob('**'))"),
                  bash("python3 tmp/a.py")], "glob", id="script_written_earlier_reads"),
    pytest.param([bash("python3 < /tmp/prog.py")], "<", id="input_redirection"),
])
def test_code_that_can_read_run_from_a_folder_holding_the_set_is_unknown(uses, needle):
    result = check(uses)
    assert result.contaminated == "unknown"
    assert rules(result) == ["script-may-read"]
    assert result.reasons[0].needle.lower() == needle
    assert result.exit_code == 1


@pytest.mark.parametrize("uses, cwd", [
    pytest.param([bash("python3 -c \"print(2 + 2)\"")], CWD, id="inline_code_without_reads"),
    pytest.param([bash("python3 -c \"print(open('a.txt').read())\"")], "/scratch",
                 id="reads_from_a_scratch_folder"),
    pytest.param([use("Write", file_path="/w/tmp/a.py", content="print(6 * 7)"),
                  bash("python3 tmp/a.py")], CWD, id="script_written_earlier_without_reads"),
    pytest.param([bash("cat > /w/tmp/b.py <<'EOF'\nprint(6 * 7)\nEOF"), bash("python3 tmp/b.py")],
                 CWD, id="script_written_by_heredoc_without_reads"),
])
def test_code_that_cannot_reach_the_set_is_clean(uses, cwd):
    assert check(uses, cwd=cwd).contaminated is False


def test_inline_code_walking_an_absolute_folder_above_the_set_is_a_recursive_read():
    # Was "unknown" (code naming a folder above the set); a walk is a recursive read rooted
    # where it is rooted, wherever the code runs (issue 18, class 2).
    result = check([bash("python3 -c \"import os; print(list(os.walk('/w')))\"")], cwd="/scratch")
    assert result.contaminated is True
    assert rules(result) == ["recursive-read"]


def test_heredoc_code_walking_the_cwd_that_holds_the_set_is_a_recursive_read():
    # Was "unknown" (code that can read, run from the repo root): os.walk('.') is rooted there.
    uses = [bash("python3 - <<'EOF'\nimport os\nfor r, d, f in os.walk('.'):\n    print(f)\nEOF")]
    result = check(uses)
    assert result.contaminated is True
    assert rules(result) == ["recursive-read"]


def test_rule_one_in_the_same_session_decides_over_script_may_read():
    result = check([bash("python3 analyze.py"), read("/w/sets/shop/cases.jsonl")])
    assert result.contaminated is True
    assert rules(result) == ["script-may-read", "eval-area"]


def test_script_may_read_is_not_reported_when_the_same_use_touched_the_set():
    result = check([bash("python3 -c \"print(open('sets/shop/a.csv').read())\"")])
    assert result.contaminated is True
    assert rules(result) == ["eval-area"]


# ------------------------------------------------------------------ rule 4 and the log itself

def test_under_report_counts_mcp_tool_uses_as_host_tool_uses():
    result = check([GET_CONTEXT, EXECUTE, EXECUTE], reported_calls=3)
    assert result.contaminated is False
    assert result.host_tool_uses == 3


def test_no_log_is_unknown_and_a_finding():
    result = check(None)
    assert result.contaminated == "unknown"
    assert rules(result) == ["no-log"]
    assert result.host_tool_uses is None
    assert result.exit_code == 1


def test_empty_log_is_clean():
    result = check([])
    assert result.contaminated is False
    assert result.host_tool_uses == 0


def test_reasons_name_the_tool_use_by_index_and_tool():
    result = check([GET_CONTEXT, EXECUTE, use("Read", file_path="evals/a/cases.jsonl")])
    assert [(r.tool_use_index, r.tool) for r in result.reasons] == [(2, "Read")]


@pytest.mark.parametrize("needle", [
    pytest.param(".", id="dot"), pytest.param("./", id="dot_slash"), pytest.param("ab", id="two"),
    pytest.param("./a/", id="one_char_segment"), pytest.param("", id="empty"),
    pytest.param("a.b", id="two_chars_with_dot"),
])
def test_needle_shorter_than_three_characters_is_refused(needle):
    with pytest.raises(UsageError):
        check([], gold_paths=[needle])


def test_three_character_needle_is_accepted():
    assert check([read("/tmp/abc/x")], eval_paths=["abc/"]).contaminated is True


# ------------------------------------------------------------------ building blocks

@pytest.mark.parametrize("path, folder, expected", [
    pytest.param("/w/sets/shop/a", "/w/sets/shop", True, id="inside"),
    pytest.param("/w/sets/shop", "/w/sets/shop", True, id="the_folder_itself"),
    pytest.param("/w/sets/shopping", "/w/sets/shop", False, id="prefix_is_not_segment"),
    pytest.param("sets/shop/a", "/w/sets/shop", True, id="relative_tail_of_two"),
    pytest.param("shop/a", "/w/sets/shop", False, id="relative_tail_of_one_is_too_weak"),
    pytest.param("/x/sets/shop/a", "sets/shop", True, id="absolute_holding_relative"),
])
def test_is_under(path, folder, expected):
    assert is_under(to_ref(path), to_ref(folder)) is expected


def test_to_ref_folds_dot_and_dotdot():
    assert to_ref("../evals/./cases.jsonl").segs == ("..", "evals", "cases.jsonl")
    assert to_ref("a/../b", to_ref("/w")) == to_ref("/w/b")


@pytest.mark.parametrize("name, kind", [
    ("Bash", "shell"), ("Read", "file"), ("Write", "file"), ("Edit", "file"), ("LS", "list"),
    ("Glob", "glob"), ("Grep", "grep"), ("WebFetch", "fetch"), ("NotebookRead", "file"),
    ("mcp__publisher__malloy_executeQuery", "mcp"), ("malloy_getContext", "mcp"),
    ("mcp__filesystem__read_file", "file"), ("Task", "other"), ("WebSearch", "other"),
    ("run_terminal_cmd", "shell"),
])
def test_tool_kind(name, kind):
    assert tool_kind(name) == kind


def test_split_shell_keeps_quoted_words_and_heredoc_bodies():
    simple = split_shell("cd /a && python3 - <<'EOF' | head\nprint('x; y')\nEOF\n")
    assert [w.value for w in simple[0].words] == ["cd", "/a"]
    assert [w.value for w in simple[1].words] == ["python3", "-"]
    assert simple[1].stdin_text == ["print('x; y')"]
    assert [w.value for w in simple[2].words] == ["head"]


def test_default_needles_are_spec_5_1():
    assert set(DEFAULT_NEEDLES) == {"evals/", "gold/", "cases.jsonl", "set.json", "events.jsonl",
                                    "judge-regressions", "judge-calibration", "recordings/",
                                    "runs/"}
    assert make_needle("judge-regressions").kind == "stem"


# ------------------------------------------------------------------ the script

def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, check=False)


def _write_log(tmp_path: Path, uses: list[dict[str, Any]], **extra: Any) -> Path:
    log = tmp_path / "log.json"
    log.write_text(json.dumps({"toolUses": uses, **extra}))
    return log


def test_cli_clean_log_exits_0_with_the_spec_keys(tmp_path):
    log = _write_log(tmp_path, [{"name": "mcp__publisher__malloy_getContext", "input": {}}],
                     reportedCalls=1, cwd="/scratch")
    out = _run_cli("--log", str(log), "--set", SET, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"contaminated", "reasons", "host_tool_uses", "reported_calls"}
    assert doc["contaminated"] is False and doc["host_tool_uses"] == 1


def test_cli_contaminated_log_exits_1_with_reason_keys(tmp_path):
    log = _write_log(tmp_path, [{"tool": "Bash", "args": {"command": "grep -rn x ."}}], cwd="/w")
    out = _run_cli("--log", str(log), "--set", SET, "--json")
    assert out.returncode == 1
    reason = json.loads(out.stdout)["reasons"][0]
    assert set(reason) == {"rule", "tool_use_index", "tool", "needle"}
    assert reason == {"rule": "recursive-read", "tool_use_index": 0, "tool": "Bash", "needle": SET}


def test_cli_reported_calls_flag_overrides_the_log(tmp_path):
    log = _write_log(tmp_path, [{"name": "Read", "input": {"file_path": "/scratch/a"}}],
                     reportedCalls=1)
    out = _run_cli("--log", str(log), "--set", SET, "--reported-calls", "5", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["reported_calls"] == 5


def test_cli_without_log_is_unknown_exit_1():
    out = _run_cli("--set", SET, "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["contaminated"] == "unknown"


def test_cli_short_needle_exits_2(tmp_path):
    log = _write_log(tmp_path, [])
    out = _run_cli("--log", str(log), "--set", SET, "--gold-path", ".", "--json")
    assert out.returncode == 2
    assert out.stdout == ""
    assert "too short" in out.stderr


def test_cli_unreadable_log_exits_3_naming_the_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "system"}\nnot json\n{"type": "result"}\n')
    out = _run_cli("--log", str(bad), "--set", SET, "--json")
    assert out.returncode == 3
    assert "bad.jsonl:2" in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_reads_a_stream_json_transcript_with_its_cwd(tmp_path):
    lines = [
        {"type": "system", "subtype": "init", "cwd": "/w", "session_id": "s"},
        {"type": "assistant", "message": {"id": "m1", "content": [
            {"type": "tool_use", "id": "t1", "name": "Grep", "input": {"pattern": "revenue"}}]}},
        {"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}},
        {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2},
    ]
    log = tmp_path / "t.jsonl"
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out = _run_cli("--log", str(log), "--set", "sets/shop", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["reasons"][0]["rule"] == "recursive-read"


def test_cli_help_shows_real_command_lines():
    out = _run_cli("--help")
    assert out.returncode == 0
    assert "check_contamination.py --log" in out.stdout


def test_division_in_a_query_is_not_a_path():
    call = use("mcp__publisher__malloy_executeQuery", modelPath="shop.malloy",
               query="run: t -> { aggregate: share is gold/total, r is runs/total }")
    assert check([call]).contaminated is False


def test_string_literal_path_in_a_query_is_contaminated():
    call = use("mcp__publisher__malloy_executeQuery", modelPath="shop.malloy",
               query="run: duckdb.table('../evals/shop/cases.jsonl') -> { select: * }")
    assert check([call]).contaminated is True


# ------------------------------------------------------------------ robustness

SHELL_ALPHABET = st.sampled_from(list("ab/.*?'\"\\$(){}|;&<>=- \n#`~") + [
    "grep -r ", "cd ", "<<EOF\n", "EOF", "python3 -c ", "evals", "sets/shop", "find . ",
    "http://h/mcp", "tools/call", "$(", "2>&1", "-exec ", "cat ", "**", "$((", "))", "<(",
    "$[", "eval ", "| sh", "| python3", "base64 -d", "echo ", "> a.py", "tee ", "let ",
    "os.walk('", "glob('", "exec(", "\x1a"])


@settings(max_examples=300, deadline=None)
@given(st.lists(SHELL_ALPHABET, max_size=40).map("".join))
def test_any_shell_command_gives_a_verdict_without_raising(command):
    result = check([bash(command)])
    assert result.contaminated in (True, False, "unknown")
    assert result.host_tool_uses == 1


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=3), max_leaves=10),
       st.sampled_from(["Read", "Bash", "Grep", "Glob", "LS", "WebFetch", "mcp__p__malloy_x", ""]))
def test_any_tool_input_gives_a_verdict_without_raising(data, name):
    result = check([ToolUse(name=name, input=data)])
    assert result.contaminated in (True, False, "unknown")


def test_mcp_model_path_inside_the_set_folder_is_not_contamination():
    # The sample layout keeps the package under test inside the set (evals/<set>/model/).
    call = use("mcp__publisher__malloy_executeQuery", modelPath="/w/evals/shop/model/shop.malloy",
               query="run: orders -> { aggregate: revenue }")
    result = check([call], set_dir="/w/evals/shop", model_paths=["/w/evals/shop/model/shop.malloy"])
    assert result.contaminated is False


def test_read_of_the_model_inside_the_set_folder_is_contaminated():
    result = check([read("/w/evals/shop/model/shop.malloy")], set_dir="/w/evals/shop",
                   model_paths=["/w/evals/shop/model/shop.malloy"])
    assert rules(result) == ["eval-area", "model-file"]


@pytest.mark.parametrize("command", [
    pytest.param("sed 's/gold/silver/g' /tmp/a.txt", id="sed_script"),
    pytest.param("sed -e 's/runs/x/' /tmp/a.txt", id="sed_e_script"),
    pytest.param("awk -F/ '/evals/ {print $2}' /tmp/a.txt", id="awk_program"),
    pytest.param("jq '.runs/2' /tmp/a.json", id="jq_filter"),
])
def test_scripts_given_to_sed_awk_jq_are_not_paths(command):
    assert check([bash(command)]).contaminated is False


def test_grep_pattern_file_is_still_a_path():
    assert check([bash("grep -f /tmp/evals/p.txt /tmp/a.txt")]).contaminated is True


@pytest.mark.parametrize("command, contaminated", [
    pytest.param("find . -name 'orders.csv'", True, id="data_file_name_could_be_in_the_set"),
    pytest.param("find . -name truth", True, id="folder_name_could_be_in_the_set"),
    pytest.param("find . -name 'app.py'", False, id="source_file_name"),
    pytest.param("find . -name '*.{ts,tsx}'", False, id="brace_source_extensions"),
    pytest.param("find . -name '*.{ts,csv}'", True, id="brace_with_a_data_extension"),
])
def test_find_name_filters(command, contaminated):
    assert check([bash(command)]).contaminated is contaminated


@pytest.mark.parametrize("uses, contaminated", [
    pytest.param([bash("bash <<'EOF'\ngrep -rn x .\nEOF")], True, id="heredoc_shell_grep"),
    pytest.param([use("Write", file_path="/w/s.sh", content="#!/bin/bash\ncat sets/shop/a.csv\n"),
                  bash("bash s.sh")], True, id="written_shell_script_read_as_shell"),
    pytest.param([use("Write", file_path="/w/s.sh", content="echo hi\n"), bash("./s.sh")], False,
                 id="written_shell_script_without_reads"),
    pytest.param([bash("python3 --version")], False, id="interpreter_version"),
    pytest.param([bash("python3 -s -c 'print(1)'")], False, id="python_flag_before_c"),
])
def test_shell_scripts_are_read_as_shell(uses, contaminated):
    assert check(uses).contaminated is contaminated


def test_a_cwd_under_a_folder_called_runs_does_not_make_every_path_a_hit():
    ws = "/ci/runs/job42/ws"
    uses = [read(f"{ws}/notes.txt"), bash("cat notes.txt && ls"), use("Glob", pattern="*.md")]
    assert check(uses, cwd=ws).contaminated is False


def test_climbing_above_the_cwd_into_a_needle_folder_hits():
    assert check([bash("ls ..")], cwd="/x/evals/sub").contaminated is True


def test_log_path_supplies_tool_uses_cwd_and_reported_calls(tmp_path):
    log = tmp_path / "log.json"
    log.write_text(json.dumps({"toolUses": [{"name": "Bash", "input": {"command": "grep -r x ."}}],
                               "reportedCalls": 4, "cwd": "/w"}))
    result = check_contamination(log=log, set_dir=SET)
    assert result.contaminated is True
    assert result.reported_calls == 4
    assert rules(result) == ["recursive-read", "under-report"]


def test_set_json_on_this_machine_names_truth_package_and_model(tmp_path):
    set_dir = tmp_path / "shop"
    set_dir.mkdir()
    (set_dir / "set.json").write_text(json.dumps({
        "name": "shop", "datasetVersion": 1, "targetPackage": "shop",
        "targetModelPath": "store.malloy", "truthPackage": "shop_truth"}))
    truth_call = use("mcp__publisher__malloy_executeQuery", packageName="shop_truth", query="q")
    assert check([truth_call], set_dir=set_dir, model_paths=[]).contaminated is True
    assert rules(check([bash("cat /x/store.malloy")], set_dir=set_dir, model_paths=[])) == ["model-file"]


def test_relative_set_that_exists_here_is_protected_where_it_is_too(tmp_path, monkeypatch):
    (tmp_path / "evals" / "shop").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    # The answerer ran in a scratch folder; the set is at its real place on this machine.
    result = check([bash(f"grep -rn revenue {tmp_path}")], set_dir="evals/shop", cwd="/scratch",
                   model_paths=[])
    assert result.contaminated is True
    assert rules(result) == ["recursive-read"]


@pytest.mark.parametrize("command", [
    pytest.param("cat ~/repo/sets/shop/a.csv", id="tilde"),
    pytest.param("cat $HOME/repo/sets/shop/a.csv", id="home_variable"),
])
def test_home_folder_is_inferred_from_the_cwd(command):
    result = check([bash(command)], cwd="/home/al/repo", set_dir="/home/al/repo/sets/shop")
    assert result.contaminated is True


# ------------------------------------------------------------------ adversarial review
# Each scenario here slipped through (false negative) or voided an honest attempt (false
# positive) before the review; the module docstring says what was chosen where the rules are silent.

@pytest.mark.parametrize("uses", [
    pytest.param([bash("ln -s sets /tmp/x"), bash("cat /tmp/x/shop/a.csv")],
                 id="relative_symlink_to_the_sets_parent_then_read"),
    pytest.param([bash("ln -s /w /tmp/r"), read("/tmp/r/sets/shop/a.csv")],
                 id="symlink_to_the_repo_then_read_tool"),
    pytest.param([bash("ln -s /w/pkg /tmp/p && cat /tmp/p/shop.malloy")],
                 id="symlink_then_model_file_in_one_command"),
    pytest.param([bash("ln -s /w /tmp/r"), bash("grep -rn revenue /tmp/r")],
                 id="recursive_read_through_a_symlink"),
    pytest.param([bash("cat {sets,x}/shop/a.csv")], id="brace_expansion_of_the_set_folder"),
    pytest.param([bash("cat sets/{shop,x}/a.csv")], id="brace_expansion_inside_the_path"),
    pytest.param([use("Glob", pattern="{sets,x}/**")], id="glob_tool_with_braces"),
    pytest.param([bash("echo sets/shop/a.csv | xargs cat")], id="echo_piped_into_xargs"),
    pytest.param([bash("git log -p")], id="git_log_patch_from_repo_root"),
    pytest.param([bash("git log --stat")], id="git_log_stat_lists_set_files"),
    pytest.param([bash("git diff HEAD~5")], id="git_diff_of_whole_tree"),
    pytest.param([bash("git show")], id="git_show_last_commit"),
    pytest.param([bash("git -C /w log -p")], id="git_dash_C_log_patch"),
    pytest.param([bash("cd sets && git show HEAD:./shop/a.csv")], id="git_object_path_from_cwd"),
    pytest.param([bash("cd /w/src && git show HEAD:sets/shop/a.csv")],
                 id="git_object_path_from_the_repo_top_above_the_cwd"),
    pytest.param([bash("awk 'BEGIN{while((getline l < \"sets/shop/a.csv\")>0) print l}'")],
                 id="awk_getline_from_a_literal"),
    pytest.param([bash("sed -n 'r sets/shop/a.csv' /dev/null")], id="sed_r_command"),
    pytest.param([use("mcp__filesystem__directory_tree", path="/w")], id="mcp_directory_tree"),
    pytest.param([bash("fd csv")], id="fd_from_repo_root"),
    pytest.param([bash("locate a.csv")], id="locate_searches_everything"),
    pytest.param([use("mcp__git__git_show", repo_path="/w", revision="HEAD")], id="mcp_git_show"),
    pytest.param([use("mcp__sqlite__read_query",
                      query="select * from read_csv('/w/sets/shop/a.csv')")],
                 id="sql_literal_in_a_reading_mcp_tool"),
])
def test_evasive_reads_of_the_eval_area_are_contaminated(uses):
    assert check(uses).contaminated is True


@pytest.mark.parametrize("uses", [
    pytest.param([use("mcp__notes__lookup", path=MODEL)], id="other_mcp_server_path"),
    pytest.param([use("mcp__notes__lookup", uri=f"file://{MODEL}")], id="other_mcp_server_uri"),
    pytest.param([use("mcp__duckdb__query", sql=f"select * from '{MODEL}'")],
                 id="database_server_query_literal"),
])
def test_a_non_publisher_mcp_tool_reading_the_model_file_is_contaminated(uses):
    result = check(uses)
    assert result.contaminated is True
    assert rules(result) == ["model-file"]


def test_publisher_model_path_stays_exempt_even_when_absolute():
    call = use("mcp__publisher__malloy_executeQuery", modelPath=MODEL,
               query="run: orders -> { aggregate: revenue }")
    assert check([call]).contaminated is False


def test_grep_r_of_an_unknown_home_may_hold_the_repo():
    # The cwd /w reveals no home folder, so `~` could be above the set.
    assert check([bash("grep -rn revenue ~")]).contaminated is True


def test_read_under_an_unknown_home_matching_the_sets_tail_is_contaminated():
    assert check([bash("cat ~/w/sets/shop/a.csv")]).contaminated is True


@pytest.mark.parametrize("uses", [
    pytest.param([bash("python -m pip install pandas")], id="python_m_pip"),
    pytest.param([bash("python3 -m venv .venv")], id="python_m_venv"),
    pytest.param([bash("uv pip install duckdb")], id="uv_pip"),
    pytest.param([bash("echo '{}' | python -m json.tool")], id="json_tool_on_stdin"),
    pytest.param([bash("git status"), bash("git log --oneline -5")], id="git_without_contents"),
    pytest.param([bash("git show HEAD:README.md")], id="git_show_of_one_other_file"),
    pytest.param([bash("git diff --stat -- src")], id="git_diff_narrowed_to_a_sibling"),
    pytest.param([bash("git diff")], id="git_diff_in_a_scratch_repo"),
    pytest.param([bash("awk -F, '{s+=$3} END {print s}' /tmp/out.csv")], id="awk_sum"),
    pytest.param([bash("awk '$1 == \"gold\" {print}' /tmp/x.txt")], id="awk_word_gold"),
    pytest.param([bash("sed -n '1,5p' /tmp/x.txt")], id="sed_print_lines"),
    pytest.param([bash("sed 's/revenue/r x/' /tmp/a.txt")], id="sed_substitution_with_r"),
    pytest.param([bash("find /tmp/scratch -name '*.csv' | xargs wc -l")], id="xargs_of_scratch"),
    pytest.param([bash("ln -s /tmp/scratch/a /tmp/b && cat /tmp/b")], id="own_symlink"),
    pytest.param([bash("cat {a,b}.txt")], id="brace_of_own_files"),
    pytest.param([use("mcp__filesystem__directory_tree", path="/tmp/scratch")],
                 id="tree_of_scratch"),
    pytest.param([use("WebSearch", query="malloy 'evals/' gold runs")], id="web_search"),
    pytest.param([use("Read", file_path="/tmp/medievals/notes.txt")], id="medievals_folder"),
    pytest.param([use("mcp__publisher__malloy_executeQuery", modelPath="shop.malloy",
                      query="run: orders -> { aggregate: runs is count(), gold is sum(gold_amt) }")],
                 id="malloy_fields_named_runs_and_gold"),
])
def test_honest_tool_uses_from_the_repo_root_are_clean(uses):
    cwd = "/tmp/scratch" if uses[0].input.get("command") == "git diff" else CWD
    assert check(uses, cwd=cwd).contaminated is False


def test_inline_code_reading_only_scratch_files_from_the_repo_root_is_still_unknown():
    # Rule 3 decides this: code that can read, run from a folder holding the set, is
    # "unknown" even when the one path it names is the answerer's own scratch file.
    result = check([bash("python -c \"print(open('/tmp/scratch/out.csv').read())\"")])
    assert result.contaminated == "unknown"


@pytest.mark.parametrize("command", [
    pytest.param("cat ${X:-sets}/shop/a.csv", id="variable_default_value"),
    pytest.param('cat "$PWD/sets/shop/a.csv"', id="pwd_variable"),
    pytest.param("cat $(pwd)/sets/shop/a.csv", id="pwd_substitution"),
    pytest.param("cat `pwd`/sets/shop/a.csv", id="pwd_backticks"),
    pytest.param("cd sets && cat $PWD/shop/a.csv", id="pwd_after_cd"),
    pytest.param('ln -s "$(pwd)/sets" /tmp/s && cat /tmp/s/shop/a.csv', id="symlink_via_pwd"),
])
def test_paths_built_from_the_cwd_or_variable_defaults_are_resolved(command):
    assert check([bash(command)]).contaminated is True


def test_pwd_of_an_honest_file_stays_clean():
    assert check([bash("cat $(pwd)/notes.txt && echo $PWD")]).contaminated is False


@pytest.mark.parametrize("uses", [
    pytest.param([use("ExitPlanMode", plan="1. Never open `sets/shop/a.csv` or 'runs/'")],
                 id="plan_text"),
    pytest.param([use("AskUserQuestion", questions=[{"question": "Use 'runs/' or not?"}])],
                 id="question_to_the_user"),
])
def test_paths_in_prose_of_non_reading_tools_are_not_reads(uses):
    assert check(uses).contaminated is False


def test_code_building_a_protected_path_from_pieces_outside_the_repo_is_unknown():
    # Regression: run from /tmp, `open('/w/se' + 'ts/shop/a.csv')` named no folder above the set.
    result = check([bash("cd /tmp && python3 -c \"print(open('/w/se'+'ts/shop/a.csv').read())\"")])
    assert result.contaminated == "unknown"
    assert rules(result) == ["script-may-read"]


def test_script_written_with_tee_is_read_when_it_runs():
    uses = [bash("tee /tmp/r.py <<'EOF'\nprint(open('/w/se' + 'ts/shop/a.csv').read())\nEOF"),
            bash("cd /tmp && python3 /tmp/r.py")]
    result = check(uses)
    assert result.contaminated == "unknown"
    assert [r.tool_use_index for r in result.reasons] == [1]


def test_code_outside_the_repo_reading_its_own_files_is_clean():
    assert check([bash("cd /tmp && python3 -c \"print(open('/tmp/x.csv').read())\"")]
                 ).contaminated is False


@pytest.mark.parametrize("path", [
    pytest.param("/proc/self/root/w/sets/shop/a.csv", id="proc_self_root"),
    pytest.param("/proc/self/cwd/sets/shop/a.csv", id="proc_self_cwd"),
    pytest.param("/proc/1234/cwd/sets/shop/a.csv", id="proc_pid_cwd"),
])
def test_proc_aliases_of_root_and_cwd_are_resolved(path):
    assert check([read(path)]).contaminated is True
    assert check([bash(f"cat {path}")]).contaminated is True


def test_text_rendering_says_null_for_an_unknown_reported_count():
    # Issue 16 item 12: the text said `reported_calls=None`.
    text = render_text(check([GET_CONTEXT, EXECUTE]))
    assert text.startswith("clean: host_tool_uses=2 reported_calls=null")


# ------------------------------------------------------------------ issue 18, classes 4-7
# Classes 1-3 (code the answerer runs) are in test_contamination_code.py.

REST_MODEL = "http://127.0.0.1:4000/api/v0/environments/samples/packages/shop/models/shop.malloy"


@pytest.mark.parametrize("uses", [
    pytest.param([bash(f"curl -s {REST_MODEL}")], id="curl"),
    pytest.param([bash(f"wget -qO- '{REST_MODEL}'")], id="wget"),
    pytest.param([bash(f"http GET {REST_MODEL}")], id="httpie"),
    pytest.param([bash(f"curl -s '{REST_MODEL}?reload=true' | jq -r .sourceText")], id="query_string"),
    pytest.param([bash(f"curl -s {REST_MODEL.rsplit('/', 1)[0]}/sub%2Fshop.malloy")],
                 id="url_encoded_model_path"),
    pytest.param([bash("curl -s $BASE/api/v0/environments/samples/packages/shop/models/shop.malloy")],
                 id="base_url_in_an_unknown_variable"),
    pytest.param([use("WebFetch", url=REST_MODEL, prompt="show me the model")], id="webfetch_tool"),
    pytest.param([use("mcp__fetch__fetch", url=REST_MODEL)], id="fetch_server_mcp_tool"),
    pytest.param([bash(f"python3 -c \"import urllib.request as u; print(u.urlopen('{REST_MODEL}').read())\"")],
                 id="python_urlopen"),
    pytest.param([bash("printf 'GET /api/v0/environments/samples/packages/shop/models/shop.malloy "
                       "HTTP/1.0\\r\\n\\r\\n' | nc 127.0.0.1 4000")], id="raw_http_through_nc"),
])
def test_fetching_the_model_source_through_a_rest_route_reads_the_model_file(uses):
    result = check(uses, cwd="/scratch")
    assert result.contaminated is True
    assert rules(result) == ["model-file"]


@pytest.mark.parametrize("uses", [
    pytest.param([bash(f"curl -s {REST_MODEL.rsplit('/', 1)[0]}")], id="list_of_models"),
    pytest.param([bash(f"curl -s -X POST {REST_MODEL}/query -d '{{\"query\": \"run: orders -> by_status\"}}'")],
                 id="query_route_returns_rows"),
    pytest.param([bash("curl -s http://127.0.0.1:4000/api/v0/environments/samples/packages/shop")],
                 id="package_metadata"),
    pytest.param([bash("printf 'GET /api/v0/status HTTP/1.0\\r\\n\\r\\n' | nc 127.0.0.1 4000")],
                 id="raw_http_status"),
    pytest.param([EXECUTE], id="publisher_mcp_tool_stays_exempt"),
])
def test_rest_routes_that_do_not_return_the_model_text_stay_clean(uses):
    assert check(uses, cwd="/scratch").contaminated is False


@pytest.mark.parametrize("uses, cwd", [
    pytest.param([use("Write", file_path="/tmp/scratch/shop.malloy", content="source: x is y"),
                  bash("cat /tmp/scratch/shop.malloy")], "/scratch", id="write_tool_then_cat"),
    pytest.param([bash("cat > /tmp/s/shop.malloy <<'EOF'\nsource: a is b\nEOF"),
                  read("/tmp/s/shop.malloy")], "/scratch", id="heredoc_then_read_tool"),
    pytest.param([bash("mkdir -p /tmp/s && cd /tmp/s && echo 'source: a is b' > shop.malloy"),
                  bash("cd /tmp/s && grep source shop.malloy")], "/scratch",
                 id="echo_redirect_then_relative_grep"),
    pytest.param([use("Write", file_path="/tmp/d/shop.malloy", content="x"),
                  use("Edit", file_path="/tmp/d/shop.malloy", old_string="x", new_string="y"),
                  bash("malloy-cli compile /tmp/d/shop.malloy")], "/scratch", id="write_edit_compile"),
    pytest.param([use("Write", file_path="shop.malloy", content="x"), read("/w/work/shop.malloy")],
                 "/w/work", id="relative_write_from_a_known_cwd"),
    pytest.param([use("Write", file_path="/tmp/draft.malloy", content="x"),
                  bash("cp /tmp/draft.malloy /tmp/s/shop.malloy && cat /tmp/s/shop.malloy")],
                 "/scratch", id="a_copy_of_its_own_draft"),
    pytest.param([use("Write", file_path="/tmp/shop.malloy", content="x"),
                  bash("mkdir -p /tmp/s && cp /tmp/shop.malloy /tmp/s/ && cat /tmp/s/shop.malloy")],
                 "/scratch", id="its_draft_copied_into_a_folder"),
    pytest.param([bash("python3 -c \"open('/tmp/s/shop.malloy', 'w').write('source: a is b')\""),
                  read("/tmp/s/shop.malloy")], "/scratch", id="a_draft_written_by_code"),
])
def test_a_draft_with_the_models_file_name_the_answerer_wrote_is_not_the_model(uses, cwd):
    assert check(uses, cwd=cwd).contaminated is False


@pytest.mark.parametrize("uses, kwargs", [
    pytest.param([use("Write", file_path="/tmp/s/shop.malloy", content="x"), bash("cat /w/pkg/shop.malloy")],
                 {}, id="the_real_model_after_a_draft"),
    pytest.param([bash("cat /other/shop.malloy")], {}, id="a_same_named_file_it_did_not_write"),
    pytest.param([use("Write", file_path=MODEL, content="x")], {}, id="writing_over_the_model"),
    pytest.param([use("Edit", file_path="/tmp/x/shop.malloy", old_string="a", new_string="b")], {},
                 id="editing_a_file_it_did_not_write"),
    pytest.param([read("/tmp/s/shop.malloy"), use("Write", file_path="/tmp/s/shop.malloy", content="x")],
                 {}, id="read_before_the_write"),
    pytest.param([bash("cp /other/shop.malloy /tmp/s/shop.malloy && cat /tmp/s/shop.malloy")], {},
                 id="a_copy_of_a_file_it_did_not_write"),
    pytest.param([use("Write", file_path="shop.malloy", content="x"), read("shop.malloy")],
                 {"cwd": None, "model_paths": ["pkg/shop.malloy"]}, id="relative_model_and_unknown_cwd"),
])
def test_a_file_named_like_the_model_is_still_the_model_unless_the_log_shows_it_written(uses, kwargs):
    result = check(uses, **kwargs)
    assert result.contaminated is True
    assert "model-file" in rules(result)


@pytest.mark.parametrize("command", [
    pytest.param("echo $((1843*100/12290))", id="arithmetic_expansion"),
    pytest.param("x=$(( a/b )); echo $x", id="assigned_arithmetic"),
    pytest.param("echo \"share: $(( 100*n/total ))%\"", id="arithmetic_in_double_quotes"),
    pytest.param("let x=a/b", id="let"),
    pytest.param("let 'x = a / b'", id="let_quoted"),
    pytest.param("(( r = a / b )); echo $r", id="arithmetic_command"),
    pytest.param("echo $[1843/12290]", id="old_arithmetic"),
    pytest.param("bash -c 'echo $(( 7/2 ))'", id="arithmetic_in_a_nested_shell"),
    pytest.param("zsh -c 'print $(( 1843.0 / 12290 ))'", id="zsh_float_arithmetic"),
    pytest.param("echo \"scale=4; 1843/12290\" | bc", id="bc"),
    pytest.param("expr 1843 \\* 100 / 12290", id="expr"),
])
def test_shell_arithmetic_is_not_a_script_run(command):
    result = check([bash(command)])
    assert result.contaminated is False
    assert result.reasons == []


def test_arithmetic_does_not_hide_a_read_after_it():
    assert rules(check([bash("echo $((1/1)) && cat sets/shop/a.csv")])) == ["eval-area"]


@pytest.mark.parametrize("uses, cwd, expected", [
    pytest.param([bash("cd /w/pkg && grep measure *.malloy")], CWD, ["model-file"],
                 id="grep_glob_in_the_model_folder"),
    pytest.param([bash("grep -n measure /w/pkg/*.malloy")], "/scratch", ["model-file"],
                 id="absolute_glob_of_the_model_folder"),
    pytest.param([use("Glob", pattern="*.malloy", path="/w/pkg")], "/scratch", ["model-file"],
                 id="glob_tool_in_the_model_folder"),
    pytest.param([bash("cd /w/sets/shop && head -1 *.jsonl")], CWD, ["eval-area"],
                 id="glob_inside_the_set"),
    pytest.param([bash("cat /w/sets/shop/*")], "/scratch", ["eval-area"], id="star_inside_the_set"),
    pytest.param([bash("grep -r measure /w/pkg")], "/scratch", ["recursive-read"],
                 id="a_real_recursive_grep_keeps_its_label"),
    pytest.param([bash("cd /w/pkg && grep -n measure **/*.malloy")], CWD, ["recursive-read"],
                 id="globstar_is_recursive"),
])
def test_reasons_name_the_rule_that_really_fired(uses, cwd, expected):
    assert rules(check(uses, cwd=cwd)) == expected


def test_split_shell_keeps_a_substitution_inside_its_word_and_runs_its_commands_first():
    simples = split_shell("cat $(echo a | base64 -d) /w/x")
    assert [[w.value for w in s.words] for s in simples] == [
        ["echo", "a"], ["base64", "-d"], ["cat", SUBST, "/w/x"]]
    assert simples[1].piped_from is simples[0]
    assert simples[2].words[1].dynamic and simples[2].piped_from is None


def test_split_shell_reads_arithmetic_as_a_number_and_keeps_pipes_apart_from_or():
    simples = split_shell("echo $((10/3)) | tr 3 x || (( n++ ))")
    assert [[w.value for w in s.words] for s in simples] == [["echo", "0"], ["tr", "3", "x"]]
    assert simples[1].piped_from is simples[0]

# Regressions (hostile input): a transcript whose `type` is an object died with a traceback and
# exit 1, which reads as "contaminated"; a mutated transcript must be checked or refused.
def test_cli_refuses_a_transcript_line_whose_type_is_an_object_with_exit_3(tmp_path):
    log = tmp_path / "t.jsonl"
    log.write_text(json.dumps({"type": "system", "cwd": "/w"}) + "\n"
                   + json.dumps({"type": {"a": 1}}) + "\n")
    out = _run_cli("--log", str(log), "--set", SET)
    assert out.returncode == 3 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"error: {log}:2: type: expected a string, got dict"


BOOKSHOP = Path(__file__).resolve().parents[1] / "evals" / "bookshop"


@FUZZ
@given(data=st.data())
def test_mutated_transcript_is_checked_or_refused_in_one_line(tmp_path_factory, data):
    path = mutated_transcript(data, tmp_path_factory.mktemp("fuzz"))
    result = reads_or_refuses(lambda: check_contamination(log=path, set_dir=BOOKSHOP), path)
    assert result is None or result.contaminated in (True, False, "unknown")
