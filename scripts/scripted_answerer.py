#!/usr/bin/env python3
"""A deterministic stand-in for an answerer agent: the same stream-json Claude Code writes, no model.

It really connects to the MCP endpoint named in a Claude Code `--mcp-config` file, asks
get_context for the environments, then for entities matching the question, runs one Malloy
query with execute_query, and answers with the figure and the query in a ```malloy block,
writing every step to stdout as stream-json (init line with cwd, assistant and user turns with
tool_use and tool_result, a result line with usage, cost and turns). What it queries comes from
a plan keyed by the exact question: the bookshop sample set's plan is built in (it answers some
cases right and walks into one trap on purpose); --plan FILE adds others (JSON {question:
{search, query, answer} or {search, refuse}}); an unplanned question gets the first measure
get_context returns. run_answers.py runs it through --answerer-cmd.

Modes, for testing the harness (--mode, or `[scripted:MODE]` anywhere in the question):
answer (default), hang (waits forever, ignoring SIGTERM, with a sleeping child; it writes its
session, one get_context call, only once that child runs, so its first output says it is ready
and a harness limit counted from that output is all hang), crash (exits 1
mid-session), flood (endless output), error (a result line reporting an API error), noise (lines
that are not JSON), read (reads --read PATH, or `[scripted:read=PATH]`, with a Read tool use it
reports, whether or not the file could be read, then answers). --env-out FILE writes the cwd, its
entries and the environment it got (a path the answerer can write: run it with --no-sandbox).

Examples (run_answers.py --answerer-cmd runs it for you; by hand, serve the model first, and write
mcp.json as {"mcpServers": {"malloy": {"type": "http", "url": "http://127.0.0.1:4040/mcp"}}}):
  .venv/bin/python skills/eval-answer/scripts/serve_local.py --package samples/bookshop=evals/bookshop/model --http 4040   # serves until stopped
  .venv/bin/python scripts/scripted_answerer.py --mcp-config mcp.json --question "What is the shop's total revenue across all the data we have?"   # needs the server above and mcp.json
  .venv/bin/python scripts/scripted_answerer.py --mcp-config mcp.json --question-file q.txt --mode hang --pid-file pids.txt   # needs mcp.json and q.txt; hangs until killed
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the library, runnable by path

from malloy_evals.answer.harness.stream import StreamJson, Usage, tool_result_content
from malloy_evals.endpoint.mcp_client import McpClient, ToolResult, canonical_tool_name, connect

MODES = ("answer", "hang", "crash", "flood", "error", "noise", "read")
_MARKER = re.compile(r"\[scripted:([a-z]+)(?:=([^\]]+))?\]")

# The bookshop sample set (evals/bookshop), by exact question. Two right answers, one that
# filters 2024 by ship_date (a trap the case's mustNotUse vetoes) and one right refusal.
BOOKSHOP_PLAN: dict[str, dict[str, str]] = {
    "What is the shop's total revenue across all the data we have?": {
        "search": "total revenue",
        "query": "run: order_items -> { aggregate: revenue }",
        "answer": "Total revenue across all the data is ${value:,.2f}: the revenue measure, "
                  "quantity times the price paid on shipped and pending orders.",
    },
    "Show me revenue for each book genre.": {
        "search": "revenue by genre",
        "query": "run: order_items -> { group_by: books.genre; aggregate: revenue }",
        "answer": "Revenue per genre:\n\n{table}",
    },
    "How much revenue did we make in 2024?": {
        "search": "revenue 2024",
        "query": "run: order_items -> { where: orders.ship_date ? @2024; aggregate: revenue }",
        "answer": "Revenue in 2024 was ${value:,.2f}.",
    },
    "What is our profit margin on book sales?": {
        "search": "profit margin cost",
        "refuse": "The model cannot answer this: it records what customers paid for each copy "
                  "(unit_price) and the books' list prices, but nothing about what the books "
                  "cost the shop, so there is no cost to subtract and no margin to compute.",
    },
}


def _markdown_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    def cell(value: Any) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


class Session:
    """One scripted session: the stream writer, the MCP client and the turn count."""

    def __init__(self, writer: StreamJson, client: McpClient | None, tools: list[str],
                 cost_per_turn: float, max_turns: int):
        self.writer = writer
        self.client = client
        self.tools = tools
        self.cost_per_turn = cost_per_turn
        self.max_turns = max_turns
        self.turns = 0
        self.usage = Usage()
        self.started = time.monotonic()

    def say(self, content: list[dict[str, Any]]) -> None:
        self.turns += 1
        usage = {"input_tokens": 200 * self.turns, "output_tokens": len(json.dumps(content)) // 4}
        self.usage.add(usage)
        self.writer.assistant(content, message_id=f"msg_scripted_{self.turns:02d}", usage=usage)

    def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """One tool_use turn through the endpoint, with its result written back."""
        assert self.client is not None
        name = next((t for t in self.tools if canonical_tool_name(t) == tool), tool)
        use_id = f"toolu_scripted_{self.turns + 1:02d}"
        self.say([{"type": "tool_use", "id": use_id, "name": f"mcp__malloy__{name}",
                   "input": arguments}])
        result = self.client.call(name, arguments)
        self.writer.tool_results([{"tool_use_id": use_id, "content": tool_result_content(result),
                                   "is_error": result.is_error}])
        return result

    def out_of_turns(self) -> bool:
        return self.turns >= self.max_turns

    def finish(self, subtype: str, answer: str | None, *, is_error: bool | None = None) -> None:
        cost = round(self.cost_per_turn * self.turns, 6)
        self.writer.result(subtype=subtype, answer=answer, num_turns=self.turns,
                           duration_ms=int((time.monotonic() - self.started) * 1000),
                           usage=self.usage, cost_usd=cost, is_error=is_error)


def _mcp_server(config_path: Path, server: str | None) -> tuple[str, dict[str, str]]:
    """The endpoint's URL and headers from an --mcp-config file, each `${VAR}` in a header
    expanded from this process's environment (as Claude Code expands them)."""
    servers = json.loads(config_path.read_text(encoding="utf-8"))["mcpServers"]
    name = server or next(iter(servers))
    headers = {str(k): re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                              lambda m: os.environ.get(m.group(1), ""), str(v))
               for k, v in (servers[name].get("headers") or {}).items()}
    return str(servers[name]["url"]), headers


def _answer(session: Session, question: str, plan: dict[str, dict[str, str]]) -> None:
    """The normal session: environments, entities, one query, the answer."""
    step = plan.get(question, {})
    first = session.call("get_context", {}).payload or {}
    env_card: dict[str, Any] = next(
        (r for r in first.get("results", []) if r.get("kind") == "environment"), {})
    env = env_card.get("name")
    package = (env_card.get("packages") or [None])[0]
    if session.out_of_turns():
        return session.finish("error_max_turns", None)
    found = session.call("get_context", {"environmentName": env, "packageName": package,
                                         "query": step.get("search", question)}).payload or {}
    if session.out_of_turns():
        return session.finish("error_max_turns", None)
    if "refuse" in step:
        session.say([{"type": "text", "text": step["refuse"]}])
        return session.finish("success", step["refuse"])
    results = found.get("results", [])
    model_path = next((r.get("modelPath") for r in results if r.get("modelPath")), None)
    query, template = step.get("query"), step.get("answer")
    if query is None:
        measure = next((r for r in results if r.get("kind") == "measure"), None)
        if measure is None:
            text = "I could not find a measure in the model that answers this question."
            session.say([{"type": "text", "text": text}])
            return session.finish("success", text)
        query = f"run: {measure['source']} -> {{ aggregate: {measure['name']} }}"
        template = f"The {measure['name']} is {{value}}."
    executed = session.call("execute_query", {"environmentName": env, "packageName": package,
                                              "modelPath": model_path, "query": query})
    if session.out_of_turns():
        return session.finish("error_max_turns", None)
    rows = (executed.payload or {}).get("rows") or []
    if executed.is_error or not rows:
        text = "The query failed, so I have no figure to give."
    else:
        first_value = next(iter(rows[0].values()), None)
        text = (template or "{value}").format(value=first_value, table=_markdown_table(rows))
    text += f"\n\n```malloy\n{query}\n```"
    session.say([{"type": "text", "text": text}])
    session.finish("success", text)


def _misbehave(mode: str, session: Session) -> int:
    """crash: exit 1 before any result; flood: write until stopped; error: an API error result."""
    if mode == "crash":
        print("Traceback (most recent call last):\nRuntimeError: scripted crash",
              file=sys.stderr, flush=True)
        return 1
    if mode == "flood":
        block = {"type": "text", "text": "x" * 65536}
        while True:
            session.say([block])
    session.finish("success", "API Error: 529 overloaded", is_error=True)
    return 1


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                epilog=doc[doc.index("Examples"):],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mcp-config", required=True, type=Path, help="Claude Code --mcp-config file")
    q = p.add_mutually_exclusive_group(required=True)
    q.add_argument("--question-file", type=Path, help="the question, exactly as stored")
    q.add_argument("--question", help="the question text itself")
    p.add_argument("--server", help="which server of the config (default the first)")
    p.add_argument("--mode", choices=MODES, help="default: [scripted:MODE] in the question, else answer")
    p.add_argument("--max-turns", type=int, default=30, help="turns before error_max_turns")
    p.add_argument("--plan", type=Path, help="more planned questions (JSON)")
    p.add_argument("--cost-per-turn", type=float, default=0.0, help="dollars reported per turn")
    p.add_argument("--read", type=Path, help="the file read mode reads")
    p.add_argument("--pid-file", type=Path, help="hang mode writes its pid and its child's here")
    p.add_argument("--env-out", type=Path, help="write cwd, its entries and the environment here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    question = args.question if args.question is not None else \
        args.question_file.read_text(encoding="utf-8")
    marker = _MARKER.search(question)
    mode = args.mode or (marker.group(1) if marker else "answer")
    read_path = args.read or (Path(marker.group(2)) if marker and marker.group(2) else None)
    if args.env_out is not None:
        args.env_out.write_text(json.dumps({"cwd": os.getcwd(), "entries": sorted(os.listdir()),
                                            "env": dict(os.environ), "argv": sys.argv}),
                                encoding="utf-8")
    plan = dict(BOOKSHOP_PLAN)
    if args.plan is not None:
        plan.update(json.loads(args.plan.read_text(encoding="utf-8")))

    # Hang mode holds its lines until it is ready to hang (the module doc says why).
    out: Any = io.StringIO() if mode == "hang" else sys.stdout
    writer = StreamJson(out, session_id="scripted-" + hashlib.sha256(
        question.encode()).hexdigest()[:12], model="scripted-answerer")
    if mode == "noise":
        print("this answerer prints prose, not stream-json", flush=True)
        return 0
    if mode in ("crash", "flood", "error"):
        # Misbehaviour needs no endpoint: start the session, then fail the way the mode says.
        writer.init(cwd=os.getcwd(), tools=[], mcp_servers=[])
        return _misbehave(mode, Session(writer, None, [], args.cost_per_turn, args.max_turns))
    try:
        url, headers = _mcp_server(args.mcp_config, args.server)
        client = connect(url=url, timeout=60, headers=headers)
        tools = client.list_tools()
    except ModuleNotFoundError as exc:  # the interpreter, not the server: say which package
        print(f"scripted_answerer: the Python package {exc.name!r} is missing in "
              f"{sys.executable}; run the answerer with the kit's .venv/bin/python",
              file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a stand-in reports and exits like a CLI would
        print(f"scripted_answerer: cannot reach the MCP server: {exc}", file=sys.stderr)
        return 2
    writer.init(cwd=os.getcwd(), tools=[f"mcp__malloy__{t}" for t in tools],
                mcp_servers=[{"name": "malloy", "status": "connected"}])
    session = Session(writer, client, tools, args.cost_per_turn, args.max_turns)
    try:
        if mode == "hang":
            session.call("get_context", {})
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            if args.pid_file is not None:
                args.pid_file.write_text(f"{os.getpid()} {child.pid}\n", encoding="utf-8")
            sys.stdout.write(out.getvalue())
            sys.stdout.flush()
            while True:
                time.sleep(60)
        if mode == "read" and read_path is not None:
            # Reported whether or not it could be read (sealed, the set is not there to read):
            # the attempt is what it tried, as Claude Code's Read reports a missing file.
            try:
                text, failed = read_path.read_text(encoding="utf-8", errors="replace"), False
            except OSError as exc:
                text, failed = f"cannot read {read_path}: {exc.strerror}", True
            session.say([{"type": "tool_use", "id": "toolu_scripted_read", "name": "Read",
                          "input": {"file_path": str(read_path)}}])
            writer.tool_results([{"tool_use_id": "toolu_scripted_read", "is_error": failed,
                                  "content": [{"type": "text", "text": text[:200]}]}])
        _answer(session, question, plan)
        return 0
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
