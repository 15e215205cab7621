"""Headers a hosted endpoint needs (a Publisher behind a token), each named on the command line
by the environment variable that holds its value: `--mcp-header Authorization=PUBLISHER_TOKEN`.

The value is read from the environment when a connection is made and never kept, printed or
written: the variable is declared secret to core/redact.py, so its value (and the token of a
`Bearer TOKEN` value) is blanked in everything the kit writes. What a run records, and what a
sealed answerer's MCP configuration holds, is the variable's name (`${PUBLISHER_TOKEN}`).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping

from malloy_evals.core.errors import UnmeasuredError
from malloy_evals.core.redact import declare_secret_variables, redact_url

_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")   # an HTTP token
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# host -> header name -> the environment variable holding its value
_REGISTERED: dict[str, dict[str, str]] = {}


def parse_header_arg(text: str) -> tuple[str, str]:
    """`NAME=ENV_VAR` -> (NAME, ENV_VAR); ValueError saying what is wrong (a value given in
    place of a variable's name included: the value never goes on a command line)."""
    name, sep, variable = text.partition("=")
    if not sep or not _HEADER_NAME.match(name):
        raise ValueError(f"{text.split('=', 1)[0]!r}: give NAME=ENV_VAR, a header name and the "
                         "environment variable holding its value")
    if not _VARIABLE.match(variable):
        raise ValueError(f"{name}=...: after '=' comes the NAME of an environment variable "
                         "holding the value (never the value itself)")
    return name, variable


def _host(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}"


def use_header_variables(url: str, variables: Mapping[str, str]) -> None:
    """Send these headers (name -> variable) on every MCP and REST request to `url`'s host, from
    now on in this process; their values become secrets to redaction."""
    declare_secret_variables(variables.values())
    _REGISTERED.setdefault(_host(url), {}).update(variables)


def header_variables(url: str) -> dict[str, str]:
    """The header name -> environment variable pairs registered for `url`'s host."""
    return dict(_REGISTERED.get(_host(url), {}))


def headers_for(url: str) -> dict[str, str]:
    """The headers to send to `url`, their values read from the environment now."""
    out = {}
    for name, variable in header_variables(url).items():
        value = os.environ.get(variable)
        if not value:
            raise UnmeasuredError(f"the header {name} for {redact_url(url)} reads ${variable}, "
                                  "which is not set in the environment (export it; its value "
                                  "is the header's whole value)")
        out[name] = value
    return out


def as_references(variables: Mapping[str, str]) -> dict[str, str]:
    """The headers as an MCP configuration writes them: each value a `${VAR}` reference the
    client expands from its own environment."""
    return {name: "${" + variable + "}" for name, variable in variables.items()}
