"""The generated methods, rendered the way TRL shows them to the model: transformers' get_json_schema."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from agentenv.client.taskapi import tasks_and_tools
from agentenv.errors import AgentEnvError
from agentenv_trl import AgentEnv
from agentenv_trl.demo import tool_methods
from transformers.utils import get_json_schema

from tests.support.trl import ARITH, FAKE, INBOX

# The keywords get_json_schema can write; an argument using only these is expressible.
EXPRESSIBLE = {"type", "enum", "items", "anyOf", "oneOf", "description"}


def expressible(schema: dict[str, Any]) -> bool:
    if not set(schema) <= EXPRESSIBLE:
        return False
    subs = [schema["items"]] if isinstance(schema.get("items"), dict) else []
    subs += schema.get("anyOf", []) + schema.get("oneOf", [])
    return all(expressible(s) for s in subs)


def alternatives(schema: dict[str, Any]) -> list[str]:
    """The schema's meaning, with its spelling normalised: a type list, anyOf/oneOf and nullable all become one set
    of alternatives; descriptions are left out (they are compared on their own)."""
    schema = {k: v for k, v in schema.items() if k not in ("description", "title")}
    out: list[str] = []
    if schema.pop("nullable", False):
        out.append(json.dumps({"type": "null"}))
    options = schema.pop("anyOf", None) or schema.pop("oneOf", None)
    if options:
        for option in options:
            out += alternatives({**schema, **option})
        return sorted(set(out))
    kinds = schema.get("type")
    if isinstance(kinds, list):
        for kind in kinds:
            out += alternatives({**schema, "type": kind})
        return sorted(set(out))
    if isinstance(schema.get("items"), dict):
        schema["items"] = alternatives(schema["items"])
    if "enum" in schema:
        schema["enum"] = sorted(json.dumps(v) for v in schema["enum"])
    out.append(json.dumps(schema, sort_keys=True))
    return sorted(set(out))


@functools.cache
def served_and_rendered(bundle: Path) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """For every tool of every toolset: (tool name, the server's schema, what get_json_schema renders)."""
    with AgentEnv.local(bundle) as env:
        _, served = tasks_and_tools(env.shared, list(env.info.splits))  # the server's own listing
        out = []
        for cls in env.environments.values():
            rendered = {m.__name__: get_json_schema(m)["function"] for m in tool_methods(cls())}
            assert set(rendered) == {t.name for t in served[cls._toolset_key]} | {"end_turn"}
            for tool in served[cls._toolset_key]:
                out.append((tool.name, tool.parameters, rendered[tool.name]))
        return out


@pytest.mark.parametrize("bundle", [FAKE, INBOX, ARITH], ids=["fake", "inbox", "arith"])
def test_get_json_schema_renders_the_servers_schema_for_every_expressible_argument(bundle: Path) -> None:
    compared = 0
    for tool, served, rendered in served_and_rendered(bundle):
        params = rendered["parameters"]
        assert sorted(params.get("required", [])) == sorted(served.get("required", [])), tool
        assert set(params["properties"]) == set(served.get("properties", {})), tool
        for arg, schema in served.get("properties", {}).items():
            if not expressible(schema):
                continue
            got = params["properties"][arg]
            assert alternatives(got) == alternatives(schema), f"{tool}.{arg}: {got} != {schema}"
            if "description" in schema:
                assert got["description"] == " ".join(schema["description"].split()), f"{tool}.{arg}"
            compared += 1
    assert compared > 0


def test_the_fake_nested_tool_covers_basic_enum_array_optional_and_union_arguments() -> None:
    rendered = {tool: r for tool, _, r in served_and_rendered(FAKE)}["nested"]["parameters"]["properties"]
    assert rendered["order"] == {"type": "string", "enum": ["asc", "desc"], "description": "Sort order."}
    assert rendered["labels"] == {"type": "array", "items": {"type": "string"}, "description": "Labels to add."}
    assert rendered["note"] == {"type": "string", "nullable": True, "description": "An optional note."}
    assert rendered["score"] == {"type": ["integer", "string"], "description": "A number or a word."}


def test_a_nested_object_argument_is_a_dict_whose_description_names_each_field_and_its_type() -> None:
    rendered = {tool: r for tool, _, r in served_and_rendered(FAKE)}["nested"]["parameters"]["properties"]
    assert rendered["filter"]["type"] == "object"
    text = rendered["filter"]["description"]
    assert text.startswith("What to match.")
    for field in ("sender (string, required)", "after (integer", "tags (array of"):
        assert field in text
    assert "Who sent it" in text and "minimum 0" in text and '"work" or "home"' in text


def test_keywords_get_json_schema_cannot_write_are_spelled_out_in_the_description() -> None:
    rendered = {tool: r for tool, _, r in served_and_rendered(FAKE)}["nested"]["parameters"]["properties"]
    assert rendered["limit"]["type"] == "integer"
    assert rendered["limit"]["description"] == "How many. Minimum 1, maximum 10."


def test_end_turn_is_offered_with_every_toolset() -> None:
    with AgentEnv.local(FAKE) as env:
        for cls in env.environments.values():
            end_turn = get_json_schema(cls().end_turn)["function"]
            assert end_turn["parameters"]["required"] == ["reply"]
            assert end_turn["parameters"]["properties"]["reply"]["type"] == "string"


ODD_ENV = """
from agentenv import Env, tool

EMPTY = {"type": "object", "properties": {}}


class Odd(Env):
    @tool(EMPTY, name="read-email")
    def read(self):
        "Read."
        return "x"

    @tool({"type": "object", "properties": {"class": {"type": "string"}}}, name="lookup")
    def lookup(self, **args):
        "Look up."
        return "y"

    @tool(EMPTY, name="end_turn")
    def finish(self):
        "Finish."
        return "z"

    @tool(EMPTY, name="fine")
    def fine(self):
        "Fine."
        return "ok"
"""


def test_names_trl_cannot_call_fail_when_the_factory_is_built_naming_each(tmp_path: Path) -> None:
    (tmp_path / "odd_env.py").write_text(ODD_ENV)
    (tmp_path / "bundle.yaml").write_text(
        "name: odd\nsplits: [train]\nenvs:\n  odd: {kind: python, target: odd_env:Odd}\n"
        "defaults:\n  toolset: {envs: [odd]}\ntasks: tasks/*.yaml\n"
    )
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text(
        "id: t\nsplit: train\nturns:\n- prompt: Hi.\n  verifiers: [{id: a, kind: contains, answer: x}]\n"
    )
    with AgentEnv.local(tmp_path) as env, pytest.raises(AgentEnvError) as error:
        _ = env.factory
    message = str(error.value)
    assert "'read-email': not a Python identifier" in message
    assert "argument 'class' of tool 'lookup': a Python keyword" in message
    assert "'end_turn': clashes with the environment's own end_turn()" in message
    assert "'fine'" not in message
    assert "deny" in message  # the fix
