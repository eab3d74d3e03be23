"""Tool schemas in the two forms verl wants: the full JSON Schema for the chat template, and verl's
typed property schema (``OpenAIFunctionToolSchema``: type, description, enum per property) for its
tool parsers. Plain dicts: importing this module does not import verl."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentenv.env import Tool

__all__ = ["parse_tools", "property_type", "typed_schema"]


def parse_tools(tools_json: str) -> list[Tool]:
    """Read a row's ``extra_info.tools`` (a JSON list of OpenAI function tools, as the writer writes it)."""
    data = json.loads(tools_json)
    if not isinstance(data, list):
        raise ValueError(f"extra_info.tools is a JSON {type(data).__name__}, not a list of tools")
    return [Tool.from_dict(t.get("function", t)) for t in data]


def property_type(schema: Mapping[str, Any]) -> str | list[str]:
    """The type verl's parsers should convert a property's value to.

    A nullable type (``["string", "null"]``) is its one non-null type, since the parsers read
    ``null`` first anyway; a union keeps its types as a list, which qwen3_coder converts with
    ``ast.literal_eval`` (a number stays a number, a word stays a string).
    """
    found: list[str] = []

    def collect(node: Mapping[str, Any]) -> None:
        kind = node.get("type")
        if isinstance(kind, str):
            found.append(kind)
        elif isinstance(kind, Sequence):
            found.extend(str(k) for k in kind)
        for key in ("anyOf", "oneOf"):
            for option in node.get(key) or ():
                if isinstance(option, Mapping):
                    collect(option)
        if kind is None and not any(node.get(k) for k in ("anyOf", "oneOf")):
            if "enum" in node:
                found.extend(_enum_types(node["enum"]))
            elif "properties" in node:
                found.append("object")
            elif "items" in node:
                found.append("array")

    collect(schema)
    types = [t for t in dict.fromkeys(found) if t != "null"]
    if not types:
        return "string"
    return types[0] if len(types) == 1 else types


def _enum_types(values: Sequence[Any]) -> list[str]:
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return [names.get(type(v), "string") for v in values]


def typed_schema(tool: Tool) -> dict[str, Any]:
    """``tool`` as verl's typed ``OpenAIFunctionToolSchema`` dict (what its tool parsers read)."""
    params = tool.parameters or {}
    properties: dict[str, Any] = {}
    for name, prop in (params.get("properties") or {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        typed: dict[str, Any] = {"type": property_type(prop)}
        if isinstance(prop.get("description"), str):
            typed["description"] = prop["description"]
        if isinstance(prop.get("enum"), list):
            typed["enum"] = list(prop["enum"])
        properties[name] = typed
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": {"type": "object", "properties": properties, "required": list(params.get("required") or [])},
        },
    }
