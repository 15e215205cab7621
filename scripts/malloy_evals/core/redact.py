"""Secrets out: the one redaction every boundary where outside text enters the kit applies.

Outside text is anything the kit did not write: a transcript or host log, tool arguments and
results, an answer, a provider's error message, a URL given on the command line, the values of
this machine's environment. A `Redactor` reads an input once (`learn`), collecting every secret
it can recognise:

- by its shape: API keys (`sk-...`, GitHub, Slack, AWS key ids, Google `AIza...`), bearer and
  basic credentials, JSON Web Tokens, PEM private keys;
- by the name, flag or place that carries it: a JSON member or `NAME=value` whose name says KEY,
  TOKEN, SECRET or PASSWORD, `aws_secret_access_key VALUE`, `--api-key VALUE`, the password of a
  URL (`postgres://app:PW@host`), a secret-named URL parameter (`?api_key=...`);
- by being the value of a secret-named environment variable of this process;

and then blanks each of those values at every occurrence (`text`, `json`), in that input and in
everything derived from it: the password of `postgres://app:PW@...` is blanked also where `PW`
stands alone in an error message or in the answer. Ordinary text (hashes, ids, qids, Malloy and
SQL, figures) has none of these shapes and is left alone. `redact(text)` is the short form for a
text that is its own whole input.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"
# A value learned from a name or place shorter than this is too likely to be ordinary text
# ("1", "true", "admin") to blank at every occurrence; the place itself is still blanked.
MIN_LEARNED = 6
MIN_ENV_SECRET = 8  # environment values: "1" or "true" under a secret name are settings, not secrets

_SECRET_WORD = r"[A-Za-z0-9_.-]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL)[A-Za-z0-9_.-]*"
SECRET_NAME = re.compile(r"(?i)^" + _SECRET_WORD + r"$")

# Secrets by shape. Group 1 (when the pattern has one) is the secret; otherwise the whole match.
_SHAPES: list[re.Pattern[str]] = [
    re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"),                          # Anthropic, OpenAI and alike
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),                     # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),                   # Slack
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),                    # AWS access key ids
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),                          # Google API keys
    re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),       # Stripe secret keys
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),                       # GitLab
    re.compile(r"\bnpm_[A-Za-z0-9]{30,}"),                           # npm
    re.compile(r"\bpypi-[A-Za-z0-9_-]{40,}"),                        # PyPI
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),                            # Hugging Face
    re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),     # SendGrid
    re.compile(r"\bdop_v1_[a-f0-9]{40,}"),                           # DigitalOcean
    re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/]+"),  # Slack webhooks
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----.*?-----END [A-Z0-9 ]*PRIVATE KEY"
               r"[A-Z ]*-----", re.DOTALL),
    re.compile(r"(?i)\b(?:bearer|basic)\s+([A-Za-z0-9._~+/=-]{8,})"),
    # The password of a URL's user part: scheme://user:PASSWORD@host
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^/\s:@'\"<>]*:([^@/\s'\"<>]+)@"),
    # A secret-named URL parameter: ?api_key=..., &token=..., &sig=...
    re.compile(r"(?i)[?&](?:[a-z0-9_.-]*(?:key|token|secret|password|passwd|sig|signature|auth)"
               r"[a-z0-9_.-]*)=([^&#\s'\"<>]+)"),
]

# Secrets by the name that carries them.
_NAMED: list[re.Pattern[str]] = [
    # JSON, possibly escaped inside another JSON string: "some_api_key": "value".
    re.compile(r'(?i)(?:\\*")' + _SECRET_WORD + r'(?:\\*")\s*:\s*(?:\\*")((?:[^"\\]|\\[^"])+)(?=\\*")'),
    # NAME=value on a command line or in a .env file (no spaces: `a_key = 3` is Malloy, not env);
    # a quoted value runs to its closing quote.
    re.compile(r"(?i)\b" + _SECRET_WORD + r"=(?:\\?\"([^\"\\]*)\\?\"|'([^']*)'|([^\s\"'\\&;,]+))"),
    # Credentials files and CLIs: `aws_secret_access_key = VALUE`, `aws_session_token VALUE`.
    re.compile(r"(?i)\baws_(?:secret_access_key|session_token|secret_key)[\"']?\s*[=:]?\s*[\"']?"
               r"([A-Za-z0-9/+=._-]{8,})"),
    # Headers: `X-Api-Key: VALUE`, `X-Auth-Token: VALUE` (a value with letters and digits, as
    # tokens have; `authentication: required` is prose).
    re.compile(r"(?i)\b[\w-]*(?:api[_-]?key|token|secret|auth)[\w-]*\s*:\s*"
               r"(?=[A-Za-z0-9._~+/=-]*\d)(?=[A-Za-z0-9._~+/=-]*[A-Za-z])([A-Za-z0-9._~+/=-]{8,})"),
    # Flags: --api-key VALUE, --password=VALUE, --token VALUE.
    re.compile(r"(?i)(?<![\w-])--?(?:[a-z0-9]+-)*(?:api-?key|key|token|secret|password|passwd)"
               r"(?:=|\s+)(?!-)([^\s\"'&;,]+)"),
]


# What every match of each pattern above holds, lower-cased (any one of): a text holding none of
# them cannot match, so the pattern is not run over it. Redaction runs over every field of every
# page and event; most text holds no secret, and these substring tests are what it then costs.
_SHAPE_HINTS: list[tuple[str, ...]] = [
    ("sk-",), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), ("github_pat_",), ("xox",),
    ("akia", "asia"), ("aiza",), ("_live_", "_test_"), ("glpat-",), ("npm_",), ("pypi-",),
    ("hf_",), ("sg.",), ("dop_v1_",), ("hooks.slack.com/services/",), ("eyj",),
    ("private key",), ("bearer", "basic"), ("://",), ("=",),
]
_SECRET_WORDS = ("key", "token", "secret", "passw", "passphrase", "credential")
_NAMED_HINTS: list[tuple[str, ...]] = [
    _SECRET_WORDS, _SECRET_WORDS, ("aws_",), ("key", "token", "secret", "auth"),
    ("key", "token", "secret", "passw"),
]
assert len(_SHAPE_HINTS) == len(_SHAPES) and len(_NAMED_HINTS) == len(_NAMED)


class _Hints:
    """Every hint word of a pattern list found in one scan of a text: a lookahead alternation,
    longest words first, finds a word at each place it starts; a shorter word starting at the
    same place is a prefix of the one found, so each found word brings the hint words inside it.
    The words found are then exactly those `w in text` finds, at one regex pass a text."""

    def __init__(self, hints: list[tuple[str, ...]]) -> None:
        words = sorted({w for group in hints for w in group}, key=len, reverse=True)
        self.scan = re.compile("(?=(" + "|".join(map(re.escape, words)) + "))")
        self.inside = {w: frozenset(u for u in words if u in w) for w in words}
        self.groups = [frozenset(group) for group in hints]


_HINTS: dict[int, _Hints] = {}


def _live(patterns: list[re.Pattern[str]], hints: list[tuple[str, ...]],
          text: str) -> list[re.Pattern[str]]:
    """The patterns that can match `text` (see the hints above). Only ASCII text is filtered:
    case-blind matching also pairs some other letters with ASCII ones (the long s with `s`)."""
    if not text.isascii():
        return patterns
    scan = _HINTS.get(id(hints))
    if scan is None:
        scan = _HINTS[id(hints)] = _Hints(hints)
    found: set[str] = set()
    for word in set(scan.scan.findall(text.lower())):
        found |= scan.inside[word]
    if not found:
        return []
    return [p for p, words in zip(patterns, scan.groups, strict=True) if not words.isdisjoint(found)]


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    return SECRET_NAME.match(name) is not None


def _groups(match: re.Match[str]) -> list[str]:
    found = [g for g in match.groups() if g]
    return found or [match.group(0)]


# Environment variables this process was told hold secrets whatever their names say (the
# variable a `--mcp-header NAME=ENV_VAR` reads): their values are blanked like secret-named ones.
_DECLARED: set[str] = set()


def declare_secret_variables(names: Iterable[str]) -> None:
    """Treat the values of these environment variables as secrets from now on, in every
    Redactor this process makes (the header values of a hosted Publisher)."""
    _DECLARED.update(names)


class Redactor:
    """The secrets of one input, and their removal from everything derived from it."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        env = os.environ if environ is None else environ
        self.secrets: set[str] = {v for k, v in env.items()
                                  if _secret_name(k) and len(v.strip()) >= MIN_ENV_SECRET}
        self._ordered: list[str] | None = None
        for name in _DECLARED:
            value = env.get(name) or ""
            self._add(value, minimum=1)
            # `Bearer TOKEN`: the token alone is blanked too, wherever it stands.
            scheme, _, token = value.strip().partition(" ")
            if token and scheme.isalpha():
                self._add(token, minimum=1)

    def _add(self, value: str, minimum: int = MIN_LEARNED) -> None:
        value = value.strip()
        if len(value) >= minimum and value != REDACTED and not value.isdigit():
            self.secrets.add(value)
            # The same secret written inside a JSON string has its quotes and slashes escaped.
            escaped = json.dumps(value)[1:-1]
            if escaped != value:
                self.secrets.add(escaped)
            self._ordered = None

    def learn(self, text: str | None) -> Redactor:
        """Collect the secrets `text` shows (by shape, name, flag or place); returns self."""
        if not text:
            return self
        for pattern in _live(_SHAPES, _SHAPE_HINTS, text):
            # A whole-match shape (a prefixed key, a JWT) is a secret at any length; a value found
            # by its place (a URL's password, a bearer token) must be long enough to be one.
            minimum = MIN_LEARNED if pattern.groups else 1
            for m in pattern.finditer(text):
                for g in _groups(m):
                    self._add(g, minimum)
        for pattern in _live(_NAMED, _NAMED_HINTS, text):
            for m in pattern.finditer(text):
                for g in _groups(m):
                    self._add(g)
        return self

    def learn_json(self, value: Any, key: str | None = None) -> Redactor:
        """Collect the secrets of a parsed JSON value: a string under a secret-sounding name is a
        secret whole, every string is read by `learn` (JSON nested in a string included)."""
        if isinstance(value, Mapping):
            for k, v in value.items():
                self.learn_json(v, str(k))
        elif isinstance(value, list):
            for v in value:
                self.learn_json(v, key)
        elif isinstance(value, str):
            if key is not None and SECRET_NAME.match(key):
                self._add(value)
            self.learn(value)
        return self

    def learn_all(self, texts: Iterable[str | None]) -> Redactor:
        for t in texts:
            self.learn(t)
        return self

    def text(self, text: str) -> str:
        """`text` with every learned secret and every secret-shaped string blanked."""
        if not text:
            return text
        if self._ordered is None:  # longest first, so a secret containing another goes whole
            self._ordered = sorted(self.secrets, key=len, reverse=True)
        for value in self._ordered:
            if value in text:
                text = text.replace(value, REDACTED)
        for pattern in _live(_SHAPES, _SHAPE_HINTS, text):
            text = pattern.sub(_blank, text)
        return text

    def json(self, value: Any, key: str | None = None) -> Any:
        """A parsed JSON value with secrets blanked: a non-empty string under a secret-sounding
        name whole, every other string by `text`."""
        if isinstance(value, Mapping):
            return {k: self.json(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v, key) for v in value]
        if isinstance(value, str):
            if key is not None and SECRET_NAME.match(key) and value:
                return REDACTED
            return self.text(value)
        return value

    def copy_text(self, text: str) -> str:
        """A copy of an outside file (transcript, host log, answer), line by line: what `text`
        blanks, plus the values of secret-named names and flags written in it; a line that is
        JSON stays JSON. It over-redacts rather than leak: the copy is evidence, not data."""
        out: list[str] = []
        for line in text.splitlines():
            try:
                value = json.loads(line) if line.strip() else None
            except ValueError:
                value = None
            if value is None:
                out.append(self._named(self.text(line)))
            else:
                out.append(json.dumps(self._named_json(self.json(value)), ensure_ascii=False))
        return "\n".join(out) + ("\n" if text.endswith("\n") else "")

    def _named(self, text: str) -> str:
        for pattern in _live(_NAMED, _NAMED_HINTS, text):
            text = pattern.sub(_blank, text)
        return text

    def _named_json(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self._named_json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._named_json(v) for v in value]
        return self._named(value) if isinstance(value, str) else value


def _blank(match: re.Match[str]) -> str:
    """The match with its secret group(s) (or all of it) replaced by REDACTED."""
    text = match.group(0)
    start = match.start(0)
    spans = [match.span(i) for i in range(1, (match.re.groups or 0) + 1) if match.group(i)]
    if not spans:
        return REDACTED
    out, pos = [], 0
    for a, b in spans:
        out.append(text[pos:a - start])
        out.append(REDACTED)
        pos = b - start
    out.append(text[pos:])
    return "".join(out)


def redact(text: str) -> str:
    """`text` as its own whole input: its secrets (and this machine's) blanked wherever they occur."""
    return Redactor().learn(text).text(text)


def redact_url(url: str) -> str:
    """A URL safe to print and to keep: the password of its user part and any secret-named
    parameter blanked (`http://user:[REDACTED]@host/mcp?api_key=[REDACTED]`)."""
    return redact(url)
