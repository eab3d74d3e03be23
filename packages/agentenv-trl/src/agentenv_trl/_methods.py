"""A tool's JSON Schema as a Python method that transformers' ``get_json_schema`` renders back.

TRL shows the model what ``get_json_schema`` makes of each environment method: the type hints give the
types, the Google docstring the descriptions. The hints are chosen so that the rendering is the
server's schema wherever transformers can express it (basic types, enums, arrays, optional and union
arguments). What it can't express (an object's own properties, numeric bounds, patterns, defaults) is
spelled out in the argument's description; the server still validates the full schema.
"""

from __future__ import annotations

import inspect
import json
import keyword
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Union

from agentenv.env import Tool
from agentenv.errors import AgentEnvError

__all__ = ["RESERVED", "build_method", "check_names", "describe"]

# The methods TRL treats specially (reset, get_reward) and the one agentenv adds (end_turn).
RESERVED = frozenset({"reset", "get_reward", "end_turn"})

_SCALARS = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
_JSON_SCALAR = (str, int, float, bool, type(None))
# Words transformers' docstring parser cuts a section at, wherever they appear in the text.
_SECTION = re.compile(r"\b(Args|Returns|Raises):")
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)
_SPELLED = {
    "minimum": "minimum {}",
    "maximum": "maximum {}",
    "exclusiveMinimum": "greater than {}",
    "exclusiveMaximum": "less than {}",
    "multipleOf": "a multiple of {}",
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "pattern": "matching the regex {}",
    "format": "format {}",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "minProperties": "at least {} fields",
    "maxProperties": "at most {} fields",
}


def check_names(tools: Iterable[Tool], where: str) -> None:
    """Refuse tool and argument names TRL can't call, naming each (``where`` says which toolset)."""
    problems = []
    for tool in tools:
        why = _bad_name(tool.name)
        if why is None and tool.name in RESERVED:
            why = f"clashes with the environment's own {tool.name}()"
        if why is not None:
            problems.append(f"tool {tool.name!r}: {why}")
            continue
        for arg in _properties(tool.parameters):
            why = _bad_name(arg)
            if why is None and arg == "self":
                why = "clashes with the method's receiver (self)"
            if why is not None:
                problems.append(f"argument {arg!r} of tool {tool.name!r}: {why}")
    if problems:
        raise AgentEnvError(
            f"{where} has names TRL can't call as Python methods: {'; '.join(problems)}. Rename them in the env, "
            "or deny those tools in the tasks' toolset (toolset: {deny: {ENV: [TOOL]}})"
        )


def _bad_name(name: str) -> str | None:
    if not name.isidentifier():
        return "not a Python identifier"
    if keyword.iskeyword(name):
        return "a Python keyword"
    if name.startswith("_"):
        return "starts with '_' (TRL skips private methods)"
    return None


def _properties(schema: Mapping[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return dict(props) if isinstance(props, Mapping) else {}


def build_method(tool: Tool, call: Callable[[Any, str, dict[str, Any]], Any]) -> Callable[..., Any]:
    """A method named after ``tool`` whose signature, hints and docstring render its schema.

    Calling it runs ``call(self, tool.name, kwargs)`` with exactly the arguments the model gave, so an
    omitted optional argument stays omitted and the server's own defaults and validation apply.
    """
    name = tool.name
    required = set(tool.parameters.get("required") or ())
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints: dict[str, Any] = {}
    lines = []
    props = _properties(tool.parameters)
    # required arguments first: a Python signature can't put a defaulted parameter before one without
    for arg in sorted(props, key=lambda a: a not in required):
        schema = props[arg] if isinstance(props[arg], Mapping) else {}
        hint, notes = _hint(schema)
        hints[arg] = hint
        default = inspect.Parameter.empty if arg in required else None
        params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        lines.append(f"    {arg}: {_arg_text(schema, notes)}")
    doc = _text(tool.description) or f"The {name} tool."
    if lines:
        doc += "\n\nArgs:\n" + "\n".join(lines)

    def method(self: Any, **kwargs: Any) -> Any:
        return call(self, name, kwargs)

    method.__name__ = name
    method.__qualname__ = name
    method.__doc__ = doc
    method.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    # no return hint: transformers would render it into every prompt, and the answer is always text
    method.__annotations__ = hints
    return method


def _text(text: str | None) -> str:
    """One line of text the docstring parser reads back unchanged."""
    out = " ".join(str(text or "").split())
    out = _SECTION.sub(r"\1 :", out)  # "Returns:" inside a description would end the Args section
    if _CHOICES.search(out):
        out += "."  # a trailing "(choices: ...)" would be read as an enum
    return out


def _arg_text(schema: Mapping[str, Any], notes: list[str]) -> str:
    # transformers needs a description for every argument; without one, the type says what there is to say
    text = _text(schema.get("description")) or _sentence(describe(schema))
    if notes:
        text = f"{_sentence(text)} {_sentence(', '.join(notes))}"
    return text


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


# ---------------------------------------------------------------------------------------------
# JSON Schema -> type hint (and the notes for what the hint can't carry)
# ---------------------------------------------------------------------------------------------


def _hint(schema: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """The type hint that renders ``schema``, and notes for the keywords it can't render."""
    notes = _constraints(schema)
    if "const" in schema and isinstance(schema["const"], _JSON_SCALAR):
        return Literal[schema["const"]], notes  # type: ignore[valid-type]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        if all(isinstance(v, _JSON_SCALAR) for v in enum):
            return Literal[tuple(enum)], notes  # type: ignore[valid-type]
        return Any, [f"one of {', '.join(_value(v) for v in enum)}", *notes]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            parts = [_hint(o if isinstance(o, Mapping) else {}) for o in options]
            notes += [n for _, sub in parts for n in sub]
            return _union([h for h, _ in parts]), notes
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        rest = {k: v for k, v in schema.items() if k != "type"}
        parts = [_hint({**rest, "type": k}) for k in kind]
        return _union([h for h, _ in parts]), _unique([n for _, sub in parts for n in sub])
    if kind is None and "properties" in schema:
        kind = "object"
    if kind in _SCALARS:
        return _SCALARS[kind], notes
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping) and items:
            item, item_notes = _hint(items)
            if item_notes:
                notes.insert(0, f"each item: {'; '.join(item_notes)}")
            return list[item], notes  # type: ignore[valid-type]
        if "prefixItems" in schema:
            notes.insert(0, f"items in order: {', '.join(describe(i) for i in schema['prefixItems'])}")
        if schema.get("uniqueItems"):
            notes.append("no duplicates")
        return list, notes
    if kind == "object":
        props = _properties(schema)
        if props:
            return dict, [_fields(schema), *notes]
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            value, value_notes = _hint(extra)
            if value_notes:
                notes.insert(0, f"each value: {'; '.join(value_notes)}")
            return dict[str, value], notes  # type: ignore[valid-type]
        return dict, notes
    return Any, notes


def _union(hints: list[Any]) -> Any:
    return hints[0] if len(hints) == 1 else Union[tuple(hints)]  # noqa: UP007 (a runtime-built union)


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) or not value.isidentifier() else value


def _fields(schema: Mapping[str, Any]) -> str:
    """``An object with fields: name (type, required): description; ...`` for a nested object."""
    required = set(schema.get("required") or ())
    parts = []
    for field, sub in _properties(schema).items():
        sub = sub if isinstance(sub, Mapping) else {}
        tags = [describe(sub)] + (["required"] if field in required else [])
        tags += _constraints(sub)
        text = f"{field} ({', '.join(tags)})"
        if _text(sub.get("description")):
            text += f": {_text(sub.get('description')).rstrip('.')}"
        parts.append(text)
    closed = " and no others" if schema.get("additionalProperties") is False else ""
    return f"an object with the fields: {'; '.join(parts)}{closed}"


def _constraints(schema: Mapping[str, Any]) -> list[str]:
    out = [fmt.format(_value(schema[k])) for k, fmt in _SPELLED.items() if k in schema]
    if "default" in schema:
        out.append(f"default {_value(schema['default'])}")
    return out


def describe(schema: Any) -> str:
    """A short phrase for the type ``schema`` describes (``array of string``, ``"asc" or "desc"``)."""
    if not isinstance(schema, Mapping):
        return "any value"
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return " or ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return " or ".join(describe(o) for o in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        rest = {k: v for k, v in schema.items() if k != "type"}
        return " or ".join(describe({**rest, "type": k}) for k in kind)
    if kind is None and "properties" in schema:
        kind = "object"
    if kind == "array":
        items = schema.get("items")
        return f"array of {describe(items)}" if isinstance(items, Mapping) and items else "array"
    if kind == "object":
        props = _properties(schema)
        return f"object with {', '.join(props)}" if props else "object"
    return str(kind) if isinstance(kind, str) else "any value"
