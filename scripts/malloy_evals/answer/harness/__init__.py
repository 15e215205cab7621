"""run_answers: put every question of a set to a blind answerer, record each attempt as it ends.

`harness` plans, resumes, budgets and logs; `command` runs a CLI answerer (Claude Code, or any
command writing the same stream-json) in its own process group; `api_loop` is the kit's own
tool-use loop through the `anthropic` SDK; `isolation` makes each attempt's empty working folder,
filtered environment and MCP configuration; `stream` writes Claude Code's stream-json format;
`local` serves the set's model over loopback HTTP for the run.
"""
