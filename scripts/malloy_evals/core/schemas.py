"""Loading and checking the kit's JSON Schemas (Draft 2020-12) in `reference/schemas/`.

Every schema is registered under its file name, so `{"$ref": "defs.schema.json#/$defs/verdict"}`
resolves without network access. `validate` returns problems as data, each naming the dotted field
(`golden.kind`, `expectedEntities.required[0]`); `check` raises `SchemaViolation` for writers.

Unknown fields are problems with `unknown=True`: the ledger writer treats them as errors, while
the set loader and the validators report them as warnings (reference/ledger-schema.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from malloy_evals.core import paths, vocab
from malloy_evals.core.errors import InputError
from malloy_evals.core.words import shown

if TYPE_CHECKING:  # imported when a schema is first checked: a script's --help never needs them
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError
    from referencing import Registry

SUFFIX = ".schema.json"


@dataclass(frozen=True)
class Problem:
    """One way an object breaks its schema: the dotted field path and what is wrong there."""

    field: str          # dotted path, `[i]` for list items; "" for the object itself
    message: str
    unknown: bool = False  # an unknown field: an error when writing, a warning when reading

    def __str__(self) -> str:
        # A field name is a key from outside: one holding a line break or another control
        # character is quoted, so a message stays the one line it promises.
        shown = self.field if self.field.isprintable() else repr(self.field)
        return f"{shown}: {self.message}" if self.field else self.message


class SchemaViolation(InputError):
    """An object failed its schema; the message names the schema and the first bad field."""

    def __init__(self, schema: str, problems: list[Problem], path: str | Path | None = None,
                 line: int | None = None):
        self.schema = schema
        self.problems = problems
        first = problems[0] if problems else Problem("", "invalid")
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(path, line, f"{schema}: {first}{more}")


def schema_names() -> list[str]:
    """Names of every schema in reference/schemas (`score`, `case`, `defs`, ...)."""
    return sorted(p.name.removesuffix(SUFFIX) for p in paths.SCHEMAS_DIR.glob(f"*{SUFFIX}"))


def _normalise(name: str) -> str:
    return name.removesuffix(SUFFIX).removesuffix(".json")


@cache
def _registry() -> Registry:
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    resources = []
    for name in schema_names():
        with (paths.SCHEMAS_DIR / f"{name}{SUFFIX}").open(encoding="utf-8") as fh:
            contents = json.load(fh)
        resources.append((f"{name}{SUFFIX}",
                          Resource.from_contents(contents, default_specification=DRAFT202012)))
    return Registry().with_resources(resources)


def schema(name: str) -> dict[str, Any]:
    """The parsed schema called `name` (with or without `.schema.json`)."""
    key = f"{_normalise(name)}{SUFFIX}"
    try:
        return _registry()[key].contents
    except LookupError:
        raise KeyError(f"no schema named {name!r}; one of: {', '.join(schema_names())}") from None


def _inline(node: Any, home: str) -> Any:
    """A copy of a schema with `$ref`s to defs.schema.json (and `#/...` refs inside defs) inlined.

    Purely for speed: jsonschema resolves a `$ref` on every use, which made validating a large
    ledger about a third slower. Refs to other files (case -> golden) stay refs for the registry.
    """
    if isinstance(node, list):
        return [_inline(v, home) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if not (isinstance(ref, str) and (ref.startswith("defs.schema.json#/$defs/")
                                      or (ref.startswith("#/$defs/") and home == "defs"))):
        return {k: _inline(v, home) for k, v in node.items()}
    target = _inline(schema("defs")["$defs"][ref.rsplit("/", 1)[1]], "defs")
    rest = {k: _inline(v, home) for k, v in node.items() if k != "$ref"}
    return {"allOf": [target, rest]} if rest else target


@cache
def _validator(name: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(_inline(schema(name), name), registry=_registry())


def field_path(parts: Any) -> str:
    """`golden.kind`, `expectedEntities.requiredAnyOf[0][1]` from a jsonschema path deque."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _join(base: str, key: str) -> str:
    return f"{base}.{key}" if base else key


def _unknown_keys(error: ValidationError) -> list[str]:
    """The keys an additionalProperties failure is about (jsonschema reports them in one error)."""
    declared = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
    patterns = error.schema.get("patternProperties", {}) if isinstance(error.schema, dict) else {}
    instance = error.instance if isinstance(error.instance, dict) else {}
    return [k for k in instance
            if k not in declared and not any(re.search(p, k) for p in patterns)]


def _leaves(errors: Any) -> list[ValidationError]:
    """The innermost branch failures under an anyOf (through nested anyOf and $ref)."""
    out: list[ValidationError] = []
    for e in errors:
        out.extend(_leaves(e.context) if e.context else [e])
    return out


def _keyword_value(error: ValidationError) -> Any:
    """The schema's value for the keyword that failed: always set on an error the validator
    raised (the stubs also allow an error built by hand without one)."""
    return error.validator_value


def _message(error: ValidationError) -> str:
    """jsonschema's message, made specific where its default is vague (anyOf over a $ref'd enum)."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        # Say what would have been accepted rather than "not valid under any of the given schemas".
        allowed: list[str] = []
        for e in _leaves(error.context):
            if e.validator == "enum":
                allowed += [shown(v) for v in _keyword_value(e)]
            elif e.validator == "const":
                allowed.append(shown(e.validator_value))
            elif e.validator == "pattern":
                allowed.append(f"a string matching {e.validator_value}")
            elif e.validator == "type":
                allowed.append(f"type {e.validator_value}")
            else:
                allowed.append(e.message)
        if allowed:
            return f"{shown(error.instance)} is not one of: {', '.join(dict.fromkeys(allowed))}"
    # jsonschema quotes values as Python does (`None is not of type 'object'`); a person reads
    # the JSON file, where that value is written `null`.
    if error.validator == "type":
        types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return f"{shown(error.instance)} is not of type {', '.join(map(repr, types))}"
    if error.validator == "enum":
        return f"{shown(error.instance)} is not one of [{', '.join(map(shown, _keyword_value(error)))}]"
    if error.validator == "const":
        return f"{shown(error.instance)} is not {shown(error.validator_value)}"
    return error.message


def _problems(errors: Any) -> list[Problem]:
    out: list[Problem] = []
    for error in errors:
        where = field_path(error.absolute_path)
        if error.validator == "additionalProperties" and error.validator_value is False:
            for key in _unknown_keys(error):
                out.append(Problem(_join(where, str(key)), "unknown field", unknown=True))
            continue
        if error.validator == "required":
            # Name the missing key itself, so the message reads `golden.kind: required`.
            missing = re.match(r"'(.*)' is a required property", error.message)
            if missing:
                out.append(Problem(_join(where, missing.group(1)), "required field missing"))
                continue
        message = _message(error)
        if len(message) > 300:  # a long bad value is quoted in full by jsonschema
            message = message[:297] + "..."
        out.append(Problem(where, message))
    return out


# --------------------------------------------------------------------------------------------
# A fast yes/no check for the subset of JSON Schema the kit's schemas use. jsonschema spends
# 0.25-1 ms per ledger event; this answers "valid" in microseconds, and only when it says
# "invalid" does jsonschema run to name the fields. tests/test_schemas.py checks that both agree.

Check = Callable[[Any], bool]
_ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "default", "$comment"}
_TYPES: dict[str, Check] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


class _Uncompilable(Exception):
    """A keyword the fast checker does not know: that schema always takes the jsonschema path."""


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality as jsonschema's enum/const use it: true and 1 differ, 1 and 1.0 do not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return type(a) is type(b) and a == b
    raise _Uncompilable("enum of containers")


def _compile(node: Any, home: str) -> Check:
    """A function deciding whether a value is valid against `node` (a schema inside file `home`)."""
    if node is True:
        return lambda v: True
    if node is False:
        return lambda v: False
    if not isinstance(node, dict):
        raise _Uncompilable(repr(node))
    checks: list[Check] = []
    for key, arg in node.items():
        if key in _ANNOTATIONS:
            continue
        checks.append(_keyword(key, arg, node, home))
    if len(checks) == 1:
        return checks[0]

    def every(v: Any) -> bool:
        for c in checks:  # a plain loop: cheaper than all() over a generator, called per value
            if not c(v):
                return False
        return True
    return every


def _keyword(key: str, arg: Any, node: dict[str, Any], home: str) -> Check:
    """The check for one keyword of a schema object."""
    if key == "$ref":
        if arg.startswith("#/$defs/"):
            target, name = schema(home)["$defs"][arg.rsplit("/", 1)[1]], home
        elif "#" in arg:
            file, _, pointer = arg.partition("#")
            name = _normalise(file)
            target = schema(name)["$defs"][pointer.rsplit("/", 1)[1]]
        else:
            name = _normalise(arg)
            target = schema(name)
        return _compile(target, name)
    if key == "type":
        types = [_TYPES[t] for t in (arg if isinstance(arg, list) else [arg])]
        if len(types) == 1:
            return types[0]

        def any_type(v: Any) -> bool:
            for t in types:
                if t(v):
                    return True
            return False
        return any_type
    if key == "enum":
        values = list(arg)
        for x in values:
            _json_equal(x, x)  # refuse containers up front
        if all(x is None or type(x) is str for x in values):
            # Strings and null only (every enum the kit has): a set lookup, same answers.
            strings, null = frozenset(x for x in values if x is not None), None in values
            return lambda v: (type(v) is str and v in strings) or (null and v is None)
        return lambda v: not isinstance(v, (dict, list)) and any(_json_equal(v, x) for x in values)
    if key == "const":
        _json_equal(arg, arg)
        return lambda v: not isinstance(v, (dict, list)) and _json_equal(v, arg)
    if key == "pattern":
        rx = re.compile(arg)
        return lambda v: not isinstance(v, str) or rx.search(v) is not None
    if key in ("minimum", "maximum"):
        bound = arg
        ok = (lambda v: v >= bound) if key == "minimum" else (lambda v: v <= bound)
        return lambda v: not _TYPES["number"](v) or ok(v)
    if key == "minLength":
        return lambda v: not isinstance(v, str) or len(v) >= arg
    if key == "minItems":
        return lambda v: not isinstance(v, list) or len(v) >= arg
    if key == "items":
        item = _compile(arg, home)
        return lambda v: not isinstance(v, list) or all(map(item, v))
    if key == "required":
        names = frozenset(arg)
        return lambda v: not isinstance(v, dict) or v.keys() >= names
    if key == "properties":
        props = [(k, _compile(sub, home)) for k, sub in arg.items()]

        def each_property(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            for k, c in props:
                if k in v and not c(v[k]):
                    return False
            return True
        return each_property
    if key == "additionalProperties":
        if "patternProperties" in node:
            raise _Uncompilable("patternProperties")
        declared = set(node.get("properties", {}))
        if arg is False:
            return lambda v: not isinstance(v, dict) or v.keys() <= declared
        extra = _compile(arg, home)
        return lambda v: not isinstance(v, dict) or all(extra(x) for k, x in v.items()
                                                        if k not in declared)
    if key in ("anyOf", "allOf"):
        subs = [_compile(sub, home) for sub in arg]
        if key == "anyOf":
            return lambda v: any(c(v) for c in subs)
        return lambda v: all(c(v) for c in subs)
    if key == "if":
        cond = _compile(arg, home)
        then = _compile(node.get("then", True), home)
        other = _compile(node.get("else", True), home)
        return lambda v: then(v) if cond(v) else other(v)
    if key in ("then", "else"):
        return lambda v: True  # decided together with "if"
    raise _Uncompilable(key)


@cache
def _fast(name: str) -> Check | None:
    """The fast checker of schema `name`, or None when it uses a keyword the checker lacks."""
    try:
        return _compile(schema(name), name)
    except _Uncompilable:
        return None


def is_valid(name: str, obj: Any) -> bool:
    """Whether `obj` is valid against schema `name` (fast; the same answer as `validate(...) == []`)."""
    name = _normalise(name)
    fast = _fast(name)
    try:
        if fast is not None:
            return fast(obj)
    except (TypeError, RecursionError):  # e.g. a comparison the checker did not foresee
        pass
    return _validator(name).is_valid(obj)


def validate(name: str, obj: Any) -> list[Problem]:
    """Every way `obj` breaks the schema `name`, ordered by field; [] when it is valid."""
    name = _normalise(name)
    if is_valid(name, obj):
        return []
    problems = sorted(set(_problems(_validator(name).iter_errors(obj))),
                      key=lambda p: (p.field, len(p.message), p.message))
    # A field that fails a type check in two branches (the general shape and a kind-specific
    # one) is one mistake: report the narrowest type once.
    typed: set[str] = set()
    kept = []
    for problem in problems:
        if " is not of type " in problem.message:
            if problem.field in typed:
                continue
            typed.add(problem.field)
        kept.append(problem)
    return sorted(kept, key=lambda p: (p.field, p.message))


# Files people author: an unknown field there is kept and warned about, never refused,
# so a set written for another harness loads. Everything the kit writes is closed.
OPEN_SCHEMAS = frozenset({"set", "case", "golden", "judge_regression", "judge_calibration"})


def check(name: str, obj: Any) -> None:
    """Raise SchemaViolation, naming the field, unless `obj` is valid against schema `name`.

    For the authored set files (OPEN_SCHEMAS) unknown fields do not raise; `validate` lists them.
    """
    name = _normalise(name)
    problems = validate(name, obj)
    if name in OPEN_SCHEMAS:
        problems = [p for p in problems if not p.unknown]
    if problems:
        raise SchemaViolation(name, problems)


def validate_event(event: Any) -> list[Problem]:
    """Problems of one ledger event against the schema of its `kind` (an unknown kind is one)."""
    if not isinstance(event, dict):
        return [Problem("", f"an event must be a JSON object, not {type(event).__name__}")]
    kind = event.get("kind")
    if kind not in vocab.EVENT_KINDS:
        return [Problem("kind", f"{kind!r} is not one of {list(vocab.EVENT_KINDS)}")]
    return validate(kind, event)


def check_event(event: Any) -> None:
    """Raise SchemaViolation naming the field unless `event` is valid for its kind."""
    problems = validate_event(event)
    if problems:
        kind = event.get("kind") if isinstance(event, dict) else None
        raise SchemaViolation(kind if kind in vocab.EVENT_KINDS else "event", problems)


def known_fields(name: str) -> set[str]:
    """The top-level properties schema `name` declares."""
    return set(schema(name).get("properties", {}))


# --------------------------------------------------------------------------------------------
# walking schemas (for reference/ledger-schema.md and its agreement test)

@dataclass(frozen=True)
class FieldSpec:
    """One documented field of a schema: its dotted path, whether required, its enum (if any)."""

    path: str                      # `ranked_summary.hits[].entity_id` for nested fields
    required: bool
    enum: tuple[Any, ...] | None   # the allowed values without null, or None when not an enumeration
    nullable: bool
    prop: dict[str, Any]


def _resolve(prop: Any, local: dict[str, Any]) -> Any:
    """Follow `$ref`s to defs.schema.json or to the schema's own `$defs` (other files stay refs)."""
    while isinstance(prop, dict) and "$ref" in prop:
        ref = prop["$ref"]
        if ref.startswith("defs.schema.json#/$defs/"):
            prop = schema("defs")["$defs"][ref.rsplit("/", 1)[1]]
        elif ref.startswith("#/$defs/"):
            prop = local["$defs"][ref.rsplit("/", 1)[1]]
        else:
            return prop
    return prop


def _branches(prop: Any, local: dict[str, Any]) -> list[Any]:
    prop = _resolve(prop, local)
    if isinstance(prop, dict) and "anyOf" in prop:
        return [b for sub in prop["anyOf"] for b in _branches(sub, local)]
    return [prop]


def _enum_and_null(prop: Any, local: dict[str, Any]) -> tuple[tuple[Any, ...] | None, bool]:
    values: list[Any] = []
    found, nullable = False, False
    for b in _branches(prop, local):
        if not isinstance(b, dict):
            continue
        if "enum" in b:
            found = True
            values += [v for v in b["enum"] if v is not None]
            nullable |= None in b["enum"]
        types = b.get("type")
        if types == "null" or (isinstance(types, list) and "null" in types):
            nullable = True
    return (tuple(values) if found else None), nullable


def field_specs(name: str) -> list[FieldSpec]:
    """Every field of schema `name`, nested objects and list items included, in declaration order."""
    root = schema(name)

    def walk(node: dict[str, Any], prefix: str) -> list[FieldSpec]:
        out: list[FieldSpec] = []
        required = set(node.get("required", []))
        for key, prop in node.get("properties", {}).items():
            path = prefix + key
            enum, nullable = _enum_and_null(prop, root)
            out.append(FieldSpec(path, key in required, enum, nullable, prop))
            target = _resolve(prop, root)
            if not isinstance(target, dict) or "$ref" in target:
                continue
            if "properties" in target and "$ref" not in prop:
                out += walk(target, path + ".")
            items = target.get("items")
            if isinstance(items, dict) and "properties" in items:
                out += walk(items, path + "[].")
        return out

    return walk(root, "")
