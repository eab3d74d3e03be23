"""Tool arguments are checked against the tool's full JSON Schema before the env sees them.

jsonschema (draft 2020-12 unless the schema names another) is the arbiter and writes the messages;
fastjsonschema's compiled check answers the common valid case first where its draft 7 means the same.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["argument_errors", "check_schema", "unknown_keywords"]

MAX_REPORTED = 5


# Keywords whose meaning differs between draft 2020-12 (agentenv's default) and draft 7 (the newest
# fastjsonschema compiles), or that draft 7 ignores: a schema using any of them is checked by
# jsonschema alone.
_NOT_DRAFT7 = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
        "prefixItems",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
        "unevaluatedItems",
        "minContains",
        "maxContains",
        "contentSchema",
    }
)


def _draft7_safe(schema: Any) -> bool:
    if isinstance(schema, dict):
        if _NOT_DRAFT7.intersection(schema) or isinstance(schema.get("items"), list):
            return False
        ref = schema.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):  # fastjsonschema would fetch it over the network
            return False
        return all(_draft7_safe(v) for v in schema.values())
    if isinstance(schema, list):
        return all(_draft7_safe(v) for v in schema)
    return True


@dataclass(frozen=True)
class _Compiled:
    full: Any  # jsonschema's validator: the arbiter, and the error messages
    fast: Callable[[Any], Any] | None  # fastjsonschema's compiled check, where it agrees with ``full``


@functools.lru_cache(maxsize=1024)
def _compiled(schema_json: str) -> _Compiled:
    import jsonschema  # imported on first use: it is not needed to load a bundle

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    fast = None
    if _draft7_safe(schema):
        import fastjsonschema

        try:
            # no defaults filled in (that would change the env's arguments), no format checks (jsonschema
            # doesn't assert formats either)
            fast = fastjsonschema.compile(schema, use_default=False, use_formats=False)
        except Exception:  # a construct it does not compile: jsonschema alone
            fast = None
    return _Compiled(cls(schema), fast)


# Tools are usually the same objects episode after episode (an Env class's declared tools), so the
# validator is found by the schema's identity first: no JSON encoding on the hot path.
_by_identity: dict[int, tuple[Mapping[str, Any], _Compiled]] = {}


def _validator(schema: Mapping[str, Any]) -> _Compiled:
    entry = _by_identity.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    validator = _compiled(json.dumps(schema, sort_keys=True))
    if len(_by_identity) > 4096:
        _by_identity.clear()
    _by_identity[id(schema)] = (schema, validator)  # holding the schema keeps its id from being reused
    return validator


# Python's type names, written where JSON Schema's belong
_TYPE_NAMES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "dict": "object",
    "list": "array",
    "none": "null",
    "None": "null",
}
_TYPES = "array, boolean, integer, null, number, object, string"


def check_schema(schema: Mapping[str, Any]) -> str | None:
    """What is wrong with ``schema`` as a tool's argument schema, or None.

    The schema is checked against its metaschema (draft 2020-12 unless ``$schema`` names another) and
    must describe a JSON object. The answer names the schema path and the fix:
    ``at properties.id.type: 'str' is not valid under any of the given schemas; write "string"``.
    """
    if not isinstance(schema, Mapping):
        return f'is a {type(schema).__name__}; write a JSON Schema object ({{"type": "object", ...}})'
    return _schema_problem(json.dumps(schema, sort_keys=True, default=str))


@functools.lru_cache(maxsize=1024)
def _schema_problem(schema_json: str) -> str | None:
    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        path = list(exc.absolute_path)
        return f"at {_where(path)[2:] or '(top)'}: {exc.message}; {_schema_fix(path, exc.instance)}"
    kind = schema.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and kind == ["object"]):
        return f'at type: {kind!r}; a tool\'s arguments are a JSON object: write "type": "object" with properties'
    return None


# words of a schema that are no assertion yet are JSON Schema's own (annotations, identifiers, the core)
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "$vocabulary",
        "$defs",
        "definitions",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "then",
        "else",
    }
)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")


def unknown_keywords(schema: Mapping[str, Any]) -> list[str]:
    """Keywords of ``schema`` (a valid one) that its draft does not know, each as ``PATH: 'word'`` with a likely
    fix: a typo such as ``propertes`` is otherwise ignored, and the arguments go unchecked."""
    return list(_unknown_keywords(json.dumps(schema, sort_keys=True, default=str)))


@functools.lru_cache(maxsize=1024)
def _unknown_keywords(schema_json: str) -> tuple[str, ...]:
    import difflib

    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    known = set(cls.VALIDATORS) | _ANNOTATIONS
    draft = cls.__name__.removeprefix("Draft").removesuffix("Validator")
    draft = {"202012": "2020-12", "201909": "2019-09"}.get(draft, draft)
    found: list[str] = []

    def walk(node: Any, path: list[Any]) -> None:
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                found.append(
                    f"at {_where(path)[2:] or '(top)'}: {key!r} is not a keyword of JSON Schema draft {draft}{hint}"
                )
            elif key in _SCHEMA_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    walk(sub, [*path, key, name])
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                for i, sub in enumerate(value):
                    walk(sub, [*path, key, i])
            elif isinstance(value, dict):  # items, not, if/then/else, additionalProperties, contains...
                walk(value, [*path, key])

    walk(schema, [])
    return tuple(found)


def _schema_fix(path: list[Any], value: Any) -> str:
    keyword = next((p for p in reversed(path) if isinstance(p, str)), "")
    parent = path[-2] if len(path) >= 2 else None
    if parent in ("properties", "patternProperties", "$defs", "definitions"):
        return f'each entry maps a name to a schema, e.g. {{"{path[-1]}": {{"type": "string"}}}}'
    if keyword == "type":
        named = _TYPE_NAMES.get(value) if isinstance(value, str) else None
        return f'write "{named}"' if named else f"use one of the JSON Schema types ({_TYPES}) or a list of them"
    if keyword in ("required", "enum"):
        example = json.dumps([value]) if isinstance(value, str | int | float) else "[...]"
        what = "property names" if keyword == "required" else "allowed values"
        return f"{keyword} is a list of {what}, e.g. {example}"
    return "fix it to follow JSON Schema (draft 2020-12 unless $schema names another)"


def argument_errors(tool: str, schema: Mapping[str, Any], args: Any) -> str | None:
    """Why ``args`` do not fit ``schema`` (one message for the model), or None when they do."""
    if not isinstance(args, dict):
        return f"arguments for tool {tool!r} must be a JSON object, got {type(args).__name__}"
    compiled = _validator(schema)
    if compiled.fast is not None:
        try:
            compiled.fast(args)
            return None  # the common case, in about a microsecond instead of tens
        except Exception:
            pass  # jsonschema decides, and says why: the two differ in edge cases (e.g. 3.0 as an integer)
    errors = sorted(compiled.full.iter_errors(args), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    lines = [f"{_where(e.absolute_path)}: {e.message}" for e in errors[:MAX_REPORTED]]
    more = f" (and {len(errors) - MAX_REPORTED} more)" if len(errors) > MAX_REPORTED else ""
    return f"invalid arguments for tool {tool!r}: " + "; ".join(lines) + more


def _where(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out
