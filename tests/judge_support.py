"""Builders shared by the judge tests: a tiny set, a run with attempts, a fake provider, and a
loopback HTTP server that speaks the Messages API (so the real `anthropic` SDK is exercised)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from malloy_evals.ledger.run import Run
from malloy_evals.llm.base import LlmReply, LlmRequest, OneShot
from malloy_evals.sets.eval_set import load_set

MODEL_TEXT = """\
#(doc) One row per order line.
source: order_items is duckdb.table('../data/order_items.csv') extend {
  join_one: books with book_id
  measure: revenue is sum(quantity * unit_price)
  measure: list_value is sum(quantity * books.list_price)
}

#(doc) The catalogue.
source: books is duckdb.table('../data/books.csv') extend {
  primary_key: book_id
  dimension: genre is genre_name
}

source: customers is duckdb.table('../data/customers.csv') extend {
  primary_key: customer_id
}
"""

CASES: list[dict[str, Any]] = [
    {"qid": "q_rev", "question": "What is total revenue?", "tags": ["revenue"],
     "coverage": "covered", "goldenRevision": 2,
     "golden": {"status": "verified", "kind": "scalar", "value": {"revenue": 1234.5, "round": 2},
                "canonicalQuery": "run: items -> { aggregate: revenue is sum(q * p) }",
                "rubric": "PREFERRED: 1,234.50. WRONG: 1,500.00 priced at list price.",
                "mustNotUse": ["list_value", "revenue as a sum of list price"]}},
    {"qid": "q_genre", "question": "Revenue by genre?", "coverage": "covered", "goldenRevision": 1,
     "golden": {"status": "verified", "kind": "rows",
                "value": [{"genre": "Fiction", "revenue": 700.0},
                          {"genre": "History", "revenue": 534.5}],
                "rubric": "PREFERRED: both genres with their revenue. WRONG: list price totals."}},
    {"qid": "q_prov", "question": "A provisional one?", "goldenRevision": 1,
     "golden": {"status": "provisional", "kind": "scalar", "value": {"n": 1}}},
    {"qid": "q_wrongkey", "question": "A doubted one?", "goldenRevision": 1,
     "golden": {"status": "verified_wrong", "kind": "scalar", "value": {"n": 2}}},
    {"qid": "q_nogold", "question": "No golden at all?"},
    {"qid": "q_salary", "question": "What is the average staff salary?", "coverage": "absent",
     "goldenRevision": 1,
     "golden": {"status": "verified", "kind": "unanswerable",
                "rubric": "REQUIRED: the answer says the model holds no staff or salary data."}},
]


def make_set(root: Path, cases: list[dict[str, Any]] | None = None) -> Path:
    """A set folder with set.json, cases.jsonl and a small model file."""
    d = root / "set"
    (d / "model").mkdir(parents=True)
    (d / "set.json").write_text(json.dumps({"name": "tiny", "datasetVersion": 1,
                                            "targetPackage": "tiny",
                                            "targetModelPath": "tiny.malloy"}))
    (d / "cases.jsonl").write_text("\n".join(json.dumps(c) for c in (cases or CASES)) + "\n")
    (d / "model" / "tiny.malloy").write_text(MODEL_TEXT)
    return d


def make_run(root: Path, set_dir: Path, attempts: list[dict[str, Any]],
             run_id: str = "r1") -> Run:
    """A run with the given attempts (defaults filled in: clean, submitted)."""
    run = Run.create(root / "run", load_set(set_dir), "answerer-x", phase="baseline",
                     run_id=run_id)
    events = []
    for a in attempts:
        event = {"kind": "attempt", "sample": None, "phase": "baseline", "submitted": True,
                 "final_query": None, "answer_text": "", "contaminated": False, **a}
        events.append(event)
    run.append(events)
    return run


def write_prediction(run: Run, qid: str, sample: int | None, csv_text: str) -> None:
    """A re-executed prediction as reexecute.py leaves it (the tests do not need Node)."""
    run.write_artifact(qid, sample, "prediction.csv", csv_text)
    rows = max(0, len(csv_text.strip().splitlines()) - 1)
    run.write_artifact(qid, sample, "envelope.json", {"rows": [], "row_count": rows})


def verdict(verdict: str = "match", confidence: int = 9, why: str = "figures agree",
            **extra: Any) -> dict[str, Any]:
    """A judge verdict object in the wire form."""
    return {"why": why, "verdict": verdict, "confidence": confidence,
            "column_pairing": [{"gold": "revenue", "prediction": "revenue"}],
            "gold_status": "verified", "gold_note": None, **extra}


class FakeProvider(OneShot):
    """Answers with scripted replies and records every request (to assert it was not called)."""

    spec = "fake"

    def __init__(self, replies: list[Any] | None = None, model: str = "fake-model"):
        self.model = model
        self.replies = list(replies or [])
        self.requests: list[LlmRequest] = []

    def complete(self, request: LlmRequest) -> LlmReply:
        self.requests.append(request)
        item = self.replies.pop(0) if self.replies else verdict()
        if isinstance(item, Exception):
            raise item
        text = item if isinstance(item, str) else json.dumps(item)
        return LlmReply(text=text, data=item if isinstance(item, dict) else None,
                        source=self.model, request_digest=request.digest(model=self.model), input_tokens=10,
                        output_tokens=5, cost_usd=None)


def message_body(text: str, *, model: str = "claude-haiku-4-5-20251001", input_tokens: int = 1000,
                 output_tokens: int = 200, cache_read: int = 0, cache_write: int = 0) -> dict:
    """A Messages API response body with one text block."""
    return {"id": "msg_test", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      "cache_creation_input_tokens": cache_write,
                      "cache_read_input_tokens": cache_read}}


def error_body(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


class MessagesServer:
    """A loopback Messages API: each POST /v1/messages takes the next scripted (status, body);
    when the script runs out the last entry repeats. Request bodies are kept for assertions."""

    def __init__(self, script: list[tuple[int, dict]]):
        self.script = list(script)
        self.requests: list[dict] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(body)
                server.paths.append(self.path)
                status, payload = (server.script.pop(0) if len(server.script) > 1
                                   else server.script[0])
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def calls(self) -> int:
        return len(self.requests)


@contextmanager
def messages_server(script: list[tuple[int, dict]], monkeypatch: Any) -> Iterator[MessagesServer]:
    """Serve the script on 127.0.0.1 and point the SDK at it (ANTHROPIC_BASE_URL)."""
    srv = MessagesServer(script)
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
