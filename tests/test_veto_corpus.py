"""Every decided must-not-use case of the kit's own corpora, run and compared with its expected
decision, and the query text read as the pinned Malloy lexer reads it.

The corpora: the sample set's mustNotUse entries against every final query of its recorded runs
and of the transcripts they were recorded from (expected: runs/EXPECTED.json's
must_not_use_hits, through the model each run was answered against); the judge calibration
entries (a known_right answer is never vetoed, a known_wrong one that commits a mustNotUse entry
is) and the regression fixtures a person settled as anything but no_match (a veto would have
made them no_match); the public-loop fixture's scored run; and the veto tests' tables
(veto_support.py). A change that moves one decision fails here with every case it moved.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import RUNTIME_NODE_MODULES
from malloy_evals.answer.transcripts import build_attempt, parse_transcript
from malloy_evals.checks.model_definitions import read_definitions
from malloy_evals.checks.must_not_use import RESERVED_WORDS, Definitions, check_must_not_use
from malloy_evals.sets.eval_set import load_set
from veto_support import (
    ALLOWED_INSIDE,
    KEYWORDS_IN_THE_TEXT,
    KEYWORDS_THROUGH_THE_MODEL,
    LOOKALIKE_SPELLINGS,
    NOT_THROUGH_THE_MODEL,
    ONLY_IN_NOISE,
    PRESENCE,
    QUOTE_IN_ANNOTATION,
    READ_AS_MALLOY_LEXES,
    SHOP_DEFINITIONS,
    SPELLED_WITH_BLANKS,
    THROUGH_THE_MODEL,
)

KIT = Path(__file__).resolve().parents[1]
BOOKSHOP = KIT / "evals" / "bookshop"
PUBLIC = KIT / "tests" / "fixtures" / "public_loop"
LEXER = RUNTIME_NODE_MODULES / "@malloydata" / "malloy" / "dist" / "lang" / "lib" / "Malloy" / "MalloyLexer.js"


def _vetoes(query: str | None, entries: list[str], definitions: Definitions | str | None = None,
            allowed_in: dict[str, list[str]] | None = None) -> list[str]:
    return sorted(check_must_not_use(query, entries, definitions=definitions,
                                     allowed_in=allowed_in).hits)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _model(folder: Path, model_path: str) -> Definitions:
    definitions = read_definitions(folder, model_path)
    assert isinstance(definitions, Definitions), definitions  # the corpus is decided with it
    return definitions


# ---------------------------------------------------------------- the sample set's recorded runs

def _sample_run_cases() -> list[tuple[str, str | None, list[str], Definitions, list[str]]]:
    """(label, final query, the case's entries, the model answered against, expected hits) for
    every attempt of every recorded run, and for the final query of every transcript it was
    recorded from."""
    eval_set = load_set(BOOKSHOP)
    expected = json.loads((BOOKSHOP / "runs" / "EXPECTED.json").read_text())["runs"]
    models = {"model": _model(BOOKSHOP / "model", eval_set.target_model_path),
              "model-candidate": _model(BOOKSHOP / "model-candidate", eval_set.target_model_path)}
    out = []
    for run, doc in expected.items():
        # The candidate run was answered against the candidate model (EXPECTED.json's `about`).
        definitions = models["model-candidate" if run == "candidate" else "model"]
        attempts = {(e["qid"], e["sample"]): e for e in _lines(BOOKSHOP / "runs" / run / "events.jsonl")
                    if e["kind"] == "attempt"}
        for want in doc["attempts"]:
            entries = eval_set.case(want["qid"]).must_not_use
            hits = sorted(want.get("must_not_use_hits") or [])
            attempt = attempts[(want["qid"], want["sample"])]
            out.append((f"{run}/{want['qid']}", attempt["final_query"], entries, definitions, hits))
            transcript = BOOKSHOP / "transcripts" / run / f"{want['qid']}.jsonl"
            if want["sample"] is None and transcript.is_file():
                final = build_attempt(parse_transcript(transcript)).attempt["final_query"]
                out.append((f"transcripts/{run}/{want['qid']}", final, entries, definitions, hits))
    return out


def test_the_sample_runs_final_queries_are_vetoed_as_expected_json_says(needs_node):
    cases = _sample_run_cases()
    assert len(cases) >= 100  # four runs and their transcripts: the corpus is all there
    wrong = [(label, hits, _vetoes(query, entries, definitions))
             for label, query, entries, definitions, hits in cases
             if _vetoes(query, entries, definitions) != hits]
    assert wrong == [], "(case, expected hits, decided hits)"


# ---------------------------------------------------------------- judge fixtures with queries

def _fixture_cases() -> list[tuple[str, str | None, list[str], str, list[str] | None]]:
    """(label, query, entries, what is expected, the entries that must veto or None) for the
    judge calibration and regression fixtures that decide a veto."""
    out = []
    for set_dir in (BOOKSHOP, PUBLIC / "set"):
        eval_set = load_set(set_dir)
        calibration = set_dir / "judge-calibration.jsonl"
        for entry in _lines(calibration) if calibration.is_file() else []:
            entries = eval_set.case(entry["qid"]).must_not_use
            commits = entry["commits"] if isinstance(entry["commits"], list) else [entry["commits"]]
            committed = sorted(c.split(":", 1)[1].strip() for c in commits
                               if c.startswith("mustNotUse:"))
            for answer, must in (("known_right", []), ("known_wrong", committed or None)):
                given = entry[answer]
                query = given.get("final_query") if isinstance(given, dict) else None
                out.append((f"{set_dir.name}/calibration/{entry['qid']}/{answer}", query,
                            entries, answer, must))
        for fixture in _lines(set_dir / "judge-regressions.jsonl"):
            if fixture["verdict"] == "no_match" or fixture["qid"] not in eval_set.cases:
                continue  # a no_match needs no veto; another verdict rules one out
            out.append((f"{set_dir.name}/regressions/{fixture['fixtureId']}",
                        fixture["prediction"].get("final_query"),
                        eval_set.case(fixture["qid"]).must_not_use, fixture["verdict"], []))
    return out


def test_judge_fixtures_that_carry_queries_are_vetoed_only_where_their_verdict_allows(needs_node):
    models = {BOOKSHOP.name: _model(BOOKSHOP / "model", "bookshop.malloy"),
              "set": _model(PUBLIC / "set" / "model", "nursery.malloy")}
    cases = _fixture_cases()
    assert sum(1 for *_, must in cases if must is not None) >= 10
    wrong = []
    for label, query, entries, what, must in cases:
        hits = _vetoes(query, entries, models[label.split("/")[0]])
        if must is None:  # commits a rubric clause: whatever it is, it is no veto's business
            continue
        if hits != must:
            wrong.append((label, what, must, hits))
    assert wrong == [], "(fixture, what it is, expected hits, decided hits)"


def test_the_public_loop_runs_recorded_veto_decisions_hold(needs_node):
    eval_set = load_set(PUBLIC / "set")
    definitions = _model(PUBLIC / "set" / "model", eval_set.target_model_path)
    events = _lines(PUBLIC / "run" / "events.jsonl")
    queries = {e["qid"]: e.get("final_query") for e in events if e["kind"] == "attempt"}
    decided = [(e["qid"], sorted(e["must_not_use_hits"])) for e in events
               if e["kind"] == "score" and isinstance(e.get("must_not_use_hits"), list)]
    assert decided
    assert [(qid, _vetoes(queries[qid], eval_set.case(qid).must_not_use, definitions))
            for qid, _hits in decided] == decided


# ---------------------------------------------------------------- the veto tests' tables

def _values(table: list[Any]) -> list[tuple[str, tuple[Any, ...]]]:
    return [(p.id, tuple(p.values)) for p in table]


def test_every_table_of_the_veto_tests_is_decided_as_it_says():
    wrong = []
    for name, rows, decide in (
            ("PRESENCE", PRESENCE, lambda q, e, hit: (_vetoes(q, [e]) == [e]) == hit),
            ("SPELLED_WITH_BLANKS", SPELLED_WITH_BLANKS,
             lambda q: _vetoes(q, ["books.list_price"]) == ["books.list_price"]),
            ("LOOKALIKE_SPELLINGS", LOOKALIKE_SPELLINGS, lambda q: _vetoes(q, ["books.list_price"]) == []),
            ("ONLY_IN_NOISE", ONLY_IN_NOISE, lambda q: _vetoes(q, ["books.list_price"]) == []),
            ("QUOTE_IN_ANNOTATION", QUOTE_IN_ANNOTATION,
             lambda q: _vetoes(q, ["list_price"]) == ["list_price"]),
            ("READ_AS_MALLOY_LEXES", READ_AS_MALLOY_LEXES,
             lambda q, hit: (_vetoes(q, ["list_price"]) == ["list_price"]) == hit),
            ("KEYWORDS_IN_THE_TEXT", KEYWORDS_IN_THE_TEXT,
             lambda q, e, hit: (_vetoes(q, [e]) == [e]) == hit),
            ("KEYWORDS_THROUGH_THE_MODEL", KEYWORDS_THROUGH_THE_MODEL,
             lambda q, e, hit: (_vetoes(q, [e], SHOP_DEFINITIONS) == [e]) == hit),
            ("THROUGH_THE_MODEL", THROUGH_THE_MODEL,
             lambda q, e, path: check_must_not_use(q, [e], definitions=SHOP_DEFINITIONS).paths
             == {e: path}),
            ("NOT_THROUGH_THE_MODEL", NOT_THROUGH_THE_MODEL,
             lambda q, e: _vetoes(q, [e], SHOP_DEFINITIONS) == []),
            ("ALLOWED_INSIDE", ALLOWED_INSIDE,
             lambda q, allowed, verdict: (_vetoes(q, ["shipped_at"], SHOP_DEFINITIONS,
                                                  {"shipped_at": allowed}) == ["shipped_at"])
             == (verdict == "hit"))):
        wrong += [f"{name}[{case_id}]" for case_id, values in _values(rows) if not decide(*values)]
    assert wrong == []


# ---------------------------------------------------------------- the text, as Malloy lexes it
# The veto reads a query's text itself (comments, strings, annotations, backticks, keywords), so
# the next reading that drifts from Malloy's is caught against the pinned Malloy lexer: on
# generated queries, an entry vetoes exactly when Malloy's tokens hold it as a field path.

_LEX_JS = """
const { CharStreams } = require('antlr4ts');
const { MalloyLexer } = require(process.env.MALLOY_LEXER);
const vocab = MalloyLexer.VOCABULARY;
const lex = (text) => {
  const lexer = new MalloyLexer(CharStreams.fromString(text));
  lexer.removeErrorListeners();
  return lexer.getAllTokens().map((t) => [vocab.getSymbolicName(t.type), t.text]);
};
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const words = new Set(input.words);
for (let i = 0; i <= vocab.maxTokenType; i++) {
  for (const n of [vocab.getSymbolicName(i), vocab.getLiteralName(i)]) {
    if (n) words.add(n.replace(/'/g, '').toLowerCase());
  }
}
const reserved = [...words].filter((w) => /^[a-z_][a-z0-9_]*$/.test(w)).filter((w) => {
  const toks = lex(w);
  return toks.length === 1 && toks[0][0] !== 'IDENTIFIER' && toks[0][1] === w
    && lex(w.toUpperCase())[0][0] === toks[0][0];
});
process.stdout.write(JSON.stringify({ reserved: reserved.sort(), tokens: input.texts.map(lex) }));
"""


def _malloy_lexer(tmp_path: Path, texts: list[str], words: list[str]) -> dict[str, Any]:
    script = tmp_path / "lex.cjs"
    script.write_text(_LEX_JS, encoding="utf-8")
    done = subprocess.run(["node", str(script)], input=json.dumps({"texts": texts, "words": words}),
                          capture_output=True, text=True, timeout=300, check=False,
                          env={"NODE_PATH": str(RUNTIME_NODE_MODULES), "MALLOY_LEXER": str(LEXER),
                               "PATH": "/usr/local/bin:/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _field_paths(tokens: list[list[str]]) -> list[list[str]]:
    """The identifier paths Malloy's tokens hold: names (bare or backticked) joined by dots;
    comments and blanks between tokens skipped, as the parser skips them."""
    paths: list[list[str]] = []
    current: list[str] = []
    after_dot = False
    for kind, text in tokens:
        if kind in ("WHITESPACE", "COMMENT_TO_EOL", "BLOCK_COMMENT"):
            continue
        if kind in ("IDENTIFIER", "BQ_STRING") and (not current or after_dot):
            current.append(text.strip("`"))
            after_dot = False
        elif kind == "DOT" and current and not after_dot:
            after_dot = True
        else:
            if current:
                paths.append(current)
            current = [text.strip("`")] if kind in ("IDENTIFIER", "BQ_STRING") else []
            after_dot = False
    return [*paths, current] if current else paths


def _malloy_uses(paths: list[list[str]], entry: str) -> bool:
    """Whether a path (or its start: `books.list_price.sum`) ends in the entry's segments."""
    want = entry.split(".")
    return any(path[:k][-len(want):] == want for path in paths for k in range(len(want), len(path) + 1))


def _generated_queries(n: int, seed: int = 20261202) -> list[str]:
    rng = random.Random(seed)
    fields = ["list_price", "books.list_price", "order_items.books.list_price", "`list_price`",
              "books . list_price", "books\n  .list_price", "`books`.`list_price`", "shipped_at",
              "orders.shipped_at", "books./* c */list_price", "books. -- c\n list_price", "status",
              "revenue", "`date`", "`year`"]
    forms = ["{f}", "{f}.sum()", "sum({f})", "{f} * 1.5", "{f} > 0", "{f} = 'list_price'",
             "{f} is not null", "{f} ? @2024 for 1 year", "{f}::date", "year({f})", "{f}.month",
             "{f} ~ r'x#y'", '{f} = "shipped_at"', "{f} {{ where: status = 'x' }}"]
    noise = ["", "", "", " -- list_price\n", " // shipped_at\n", " /* list_price */ ",
             "\n  # bar_chart list_price\n  ", "\n#(doc) shipped_at\n", "\n#| note\nlist_price\n|#\n",
             "\n  #| note\nlist_price\n|#\n  shipped_at\n  |#\n", "\n##| doc\nshipped_at\n|##\n",
             ' """ list_price """ ', "\n", "`list_price`"]

    def statement() -> str:
        keyword = rng.choice(["aggregate", "group_by", "where", "select", "order_by", "calculate"])
        value = rng.choice(forms).format(f=rng.choice(fields))
        if keyword in ("aggregate", "group_by", "calculate"):
            return f"{keyword}: n{rng.randint(0, 9)} is {value}"
        if keyword == "order_by":
            return f"order_by: {rng.choice(fields)} {rng.choice(['desc', 'asc', ''])}"
        return f"{keyword}: {value}"

    out = []
    for _ in range(n):
        body = rng.choice(noise).join(statement() for _ in range(rng.randint(1, 3)))
        head = rng.choice(["", "# bar_chart\n", "#| x\n|#\n", "-- c\n", "##! experimental\n"])
        out.append(f"{head}run: {rng.choice(['orders', 'books'])} -> {{\n  {body}\n}}"
                   f"{rng.choice(['', ' -> { select: * }', rng.choice(noise)])}")
    return out


def test_the_veto_reads_a_query_as_the_pinned_malloy_lexer_does(tmp_path, needs_node):
    texts = _generated_queries(1500)
    lexed = _malloy_lexer(tmp_path, texts, sorted(RESERVED_WORDS))
    # The reserved words are Malloy's own: the list the veto keeps is the pinned lexer's.
    assert sorted(RESERVED_WORDS) == lexed["reserved"]
    entries = ["list_price", "books.list_price", "shipped_at", "orders.shipped_at", "date", "year"]
    wrong = []
    for text, tokens in zip(texts, lexed["tokens"], strict=True):
        paths = _field_paths(tokens)
        for entry in entries:
            if (_vetoes(text, [entry]) == [entry]) != _malloy_uses(paths, entry):
                wrong.append((entry, text))
    assert wrong[:5] == [], f"{len(wrong)} reading(s) differ from Malloy's"


@pytest.mark.parametrize("word", sorted(RESERVED_WORDS))
def test_a_reserved_word_names_no_field_unless_backticked(word):
    assert _vetoes(f"run: t -> {{ where: x ? {word} }}", [word]) == []
    assert _vetoes(f"run: t -> {{ where: `{word}` > 0 }}", [word]) == [word]
    assert _vetoes(f"run: t -> {{ where: t.`{word.upper()}` > 0 }}", [word.upper()]) == [word.upper()]
