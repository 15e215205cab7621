#!/bin/sh
# One timed call of run_answers.py (benchmarks/README.md): a fresh run folder, then the kit's
# scripted answerer over the bookshop cases named in $2 (comma-separated), $1 at a time, through
# --local (the endpoint is started and stopped inside the call). Run it from the kit's root:
#   farm-bench -n 3 --timeout 300 --vs "benchmarks/bench_run_answers.sh 2 $CASES" -- benchmarks/bench_run_answers.sh 1 $CASES
set -e
K=$(pwd)
R=$(mktemp -d /tmp/bench-run-answers-XXXX)
rmdir "$R"
"$K/.venv/bin/python" "$K/skills/eval-answer/scripts/new_run.py" --set "$K/evals/bookshop" --out "$R" --answerer-model scripted >/dev/null
"$K/.venv/bin/python" "$K/skills/eval-answer/scripts/run_answers.py" --run "$R" --set "$K/evals/bookshop" --local --parallel "$1" --only "$2" \
  --answerer-cmd "$K/.venv/bin/python $K/scripts/scripted_answerer.py --mcp-config {mcp_config} --question-file {question_file}" >/dev/null 2>&1
rm -rf "$R"
