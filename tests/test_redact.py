"""The one redaction: a corpus of secret shapes that must go, and ordinary text that must stay."""

from __future__ import annotations

import json
import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from malloy_evals.core.redact import REDACTED, Redactor, redact, redact_url

PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
       "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
       "-----END RSA PRIVATE KEY-----")
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")

# (text holding the secret, the secret itself): every secret must be gone from the redaction.
SECRETS = [
    pytest.param("key sk-ant-api03-" + "A1b2C3d4" * 4, "sk-ant-api03-" + "A1b2C3d4" * 4, id="anthropic"),
    pytest.param("token ghp_" + "a" * 36, "ghp_" + "a" * 36, id="github"),
    pytest.param("xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij", id="slack"),
    pytest.param("id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE", id="aws-key-id"),
    pytest.param("aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                 "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", id="aws-secret-space"),
    pytest.param("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                 "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", id="aws-secret-ini"),
    pytest.param("maps key AIzaSyA-1234567890abcdefghijklmnopqrstu", "AIzaSyA-1234567890abcdefghijklmnopqrstu",
                 id="google"),
    pytest.param(f"Authorization: Bearer {JWT}", JWT, id="bearer-jwt"),
    pytest.param(f"the token was {JWT} yesterday", JWT, id="bare-jwt"),
    pytest.param("Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==", "dXNlcjpwYXNzd29yZDEyMw==", id="basic"),
    pytest.param(f"key file:\n{PEM}\n", "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
                 id="pem"),
    pytest.param(json.dumps({"key": PEM}), "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
                 id="pem-in-json"),
    pytest.param("postgres://app:Tr0ub4dor3@db.internal:5432/shop", "Tr0ub4dor3", id="db-url-password"),
    pytest.param("https://publisher.example/mcp?api_key=abcd1234efgh5678", "abcd1234efgh5678",
                 id="url-api-key"),
    pytest.param("https://x.example/p?sig=Zm9vYmFyYmF6cXV4&v=1", "Zm9vYmFyYmF6cXV4", id="url-signature"),
    pytest.param("export WAREHOUSE_TOKEN=plain-value-77", "plain-value-77", id="env-assignment"),
    pytest.param("DB_PASSWORD='hunter2 x' ./run", "hunter2 x", id="quoted-assignment"),
    pytest.param('{"client_secret": "zq8-plain-secret"}', "zq8-plain-secret", id="json-member"),
    pytest.param("mytool --api-key abcdefgh12345 --verbose", "abcdefgh12345", id="flag"),
    pytest.param("mytool --password=CorrectHorse9", "CorrectHorse9", id="flag-equals"),
    pytest.param("stripe sk_live_51HabcdEFGHijklMNOPqr", "sk_live_51HabcdEFGHijklMNOPqr", id="stripe"),
    pytest.param("glpat-abcdefghij1234567890", "glpat-abcdefghij1234567890", id="gitlab"),
    pytest.param("hf_abcdefghijklmnopqrstuvwxyz123456", "hf_abcdefghijklmnopqrstuvwxyz123456",
                 id="huggingface"),
    pytest.param("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGX\n-----END PGP PRIVATE KEY BLOCK-----",
                 "lQOYBGX", id="pgp-block"),
    pytest.param("X-Api-Key: 9f8e7d6c5b4a3f2e1d", "9f8e7d6c5b4a3f2e1d", id="header"),
    pytest.param("redis://:S3cretRedisPw@cache:6379/0", "S3cretRedisPw", id="url-password-no-user"),
    pytest.param("Server=db;User Id=app;Password=Adm1nPass!;", "Adm1nPass!", id="ado-connection"),
]

# Ordinary text the kit keeps: none of it may change.
ORDINARY = [
    pytest.param("rubric_sha 3f786850e387550fdab836ed7e6dc881de23001b2d5c1a3e9b3f2c1a0e9d8c7b", id="sha256"),
    pytest.param("event 28f50a28a8fb46ca828be24c6427a791 at 2026-11-30T13:10:23.985Z", id="event-id"),
    pytest.param("qid bk_total_revenue sample 3 phase baseline", id="qid"),
    pytest.param("run: orders -> { where: sort_key = 3; aggregate: revenue; order_by: revenue desc }",
                 id="malloy"),
    pytest.param("source: customers is duckdb.table('../data/customers.csv') extend { primary_key: "
                 "customer_id }", id="malloy-model"),
    pytest.param("SELECT count(*) AS n FROM '../data/orders.csv' as base WHERE status='shipped'", id="sql"),
    pytest.param("Revenue is $90,963.84 (2,162 orders; 95% CI 38.6-81.5%)", id="figures"),
    pytest.param("artifacts/bk_total_revenue/_/judge.2/request.json", id="path"),
    pytest.param("http://127.0.0.1:4040/mcp and https://docs.malloydata.dev/documentation/", id="plain-urls"),
    pytest.param("The password requirement and the api key rotation are documented.", id="prose"),
    pytest.param("Bearer of bad news", id="bearer-word"),
    pytest.param("authentication: required; token: none given", id="header-like-prose"),
    pytest.param('{"verdict": "match", "confidence": 9, "why": "figures agree"}', id="verdict-json"),
]


@pytest.mark.parametrize("text, secret", SECRETS)
def test_secret_shape_is_redacted(text, secret):
    out = redact(text)
    assert secret not in out and REDACTED in out


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_untouched(text):
    assert redact(text) == text


def test_a_secret_seen_once_is_redacted_wherever_it_stands_alone():
    secrets = Redactor().learn("DATABASE_URL=postgres://app:Tr0ub4dor3@db:5432/shop")
    assert secrets.text("login failed for password Tr0ub4dor3") == f"login failed for password {REDACTED}"
    assert secrets.json({"givens": {"note": "pw Tr0ub4dor3"}}) == {"givens": {"note": f"pw {REDACTED}"}}


def test_secret_named_json_member_is_redacted_whole_even_without_a_shape():
    secrets = Redactor().learn_json({"givens": {"api_key": "short1"}})
    assert secrets.json({"api_key": "short1"}) == {"api_key": REDACTED}
    assert secrets.text("sent short1 to the server") == f"sent {REDACTED} to the server"


def test_values_of_secret_named_environment_variables_are_redacted():
    secrets = Redactor({"WAREHOUSE_API_KEY": "plainvalue-no-known-shape-42", "HOME": "/root",
                        "DEBUG_TOKEN": "1"})
    assert secrets.text("got plainvalue-no-known-shape-42 from /root") == f"got {REDACTED} from /root"
    assert secrets.text("level 1") == "level 1"  # "1" under a secret name is a setting


def test_url_keeps_its_host_and_loses_its_credentials():
    assert redact_url("http://bob:Sup3rSecret@h.example:4040/mcp?api_key=abcdef123456&x=1") == (
        f"http://bob:{REDACTED}@h.example:4040/mcp?api_key={REDACTED}&x=1")


def test_transcript_copy_stays_json_and_blanks_named_values():
    secrets = Redactor({})
    line = json.dumps({"command": "FOO_SECRET=abc cmd", "out": {"github_token": "ghx-plain"}})
    copy = secrets.copy_text(line + "\n")
    assert json.loads(copy) == {"command": f"FOO_SECRET={REDACTED} cmd",
                                "out": {"github_token": REDACTED}}


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200))
def test_redaction_is_stable_and_never_reveals_what_it_learned(text):
    secrets = Redactor({}).learn(text)
    once = secrets.text(text)
    assert secrets.text(once) == once
    for value in secrets.secrets:
        assert value not in once or value in REDACTED


def test_the_fast_path_finds_what_the_full_scan_finds():
    # Patterns are skipped for a text that holds none of their words; a case-blind match on a
    # non-ASCII letter (the long s, which matches `s`) must still be found.
    for text in ("ſecret=Hunter2Hunter2 here", "X-AUTH-TOKEN: abc123def456", "PASSWD=Swordfish99",
                 "Bearer abcdefghijkl", "postgres://app:Pw0rdHidden77@db/x"):
        assert redact(text) != text, text


PIECES = st.sampled_from(["sk-", "ghp_", "AKIA", "AIza", "eyJ", "Bearer ", "://u:", "@h/", "?api_key=",
                          "token", "SECRET", "passwd", "--key ", "aws_secret_access_key ", "=",
                          "ſ", "K", "ı", ":", '"', "\\", " ", "abcdefghij", "0123456789", "x" * 20])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(PIECES | st.text(max_size=6), max_size=14))
def test_skipping_patterns_that_cannot_match_never_changes_what_is_redacted(parts):
    from malloy_evals.core import redact as r

    text = "".join(parts)
    fast = (Redactor({}).learn(text).text(text), Redactor({}).learn(text).copy_text(text))
    live = r._live
    r._live = lambda patterns, hints, t: patterns  # every pattern over every text
    try:
        full = (Redactor({}).learn(text).text(text), Redactor({}).learn(text).copy_text(text))
    finally:
        r._live = live
    assert fast == full


def test_the_one_scan_for_hint_words_finds_what_a_substring_test_of_each_word_finds():
    # The filter that skips patterns whose hint words a text lacks scans a text once for every
    # word (review cards blank tens of thousands of fields); it must pick exactly the patterns
    # the plain `word in text` test picks, overlapping and nested words included.
    from malloy_evals.core import redact as r

    def plain(patterns, hints, text):
        if not text.isascii():
            return patterns
        low = text.lower()
        return [p for p, words in zip(patterns, hints, strict=True)
                if any(w in low for w in words)]

    rng = random.Random(3)
    words = sorted({w for group in r._SHAPE_HINTS + r._NAMED_HINTS for w in group})
    alphabet = string.ascii_letters + string.digits + "_-.=:/ é"
    for _ in range(20_000):
        text = "".join(rng.choice(words) if rng.random() < 0.3 else "".join(
            rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(0, 6)))
        text = text.upper() if rng.random() < 0.3 else text
        for patterns, hints in ((r._SHAPES, r._SHAPE_HINTS), (r._NAMED, r._NAMED_HINTS)):
            assert r._live(patterns, hints, text) == plain(patterns, hints, text), text
