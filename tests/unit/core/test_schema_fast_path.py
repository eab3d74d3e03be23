"""Argument checks: the compiled fast path and jsonschema (the arbiter) agree on every verdict."""

from __future__ import annotations

import copy

import pytest
from agentenv.schema import _validator, argument_errors

NESTED = {
    "type": "object",
    "properties": {
        "filter": {
            "type": "object",
            "properties": {"sender": {"type": "string"}, "after": {"type": "integer", "minimum": 0}},
            "required": ["sender"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
        "score": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "mode": {"type": "string", "default": "fast"},
        "when": {"type": "string", "format": "date-time"},
    },
    "required": ["filter"],
    "additionalProperties": False,
}
TUPLE_2020 = {"type": "object", "properties": {"pair": {"type": "array", "prefixItems": [{"type": "integer"}],
                                                        "items": False}}}  # fmt: skip
DEPENDENT = {"type": "object", "dependentRequired": {"a": ["b"]}}
# Python's True == 1: JSON Schema tells booleans from numbers, so must the fast path
BOOLS = {"type": "object", "properties": {"n": {"enum": [1, 2]}, "z": {"const": 0}, "k": {"const": [1]}}}

CASES = [
    (NESTED, {"filter": {"sender": "dana"}}, True),
    (NESTED, {"filter": {"sender": "dana", "after": 3}, "tags": ["a", "b"], "score": None}, True),
    (NESTED, {"filter": {"sender": "dana"}, "score": 3.0}, True),  # 2020-12: 3.0 is an integer
    (NESTED, {"filter": {"sender": "dana"}, "when": "not a date"}, True),  # formats are not asserted
    (NESTED, {}, False),
    (NESTED, {"filter": {"sender": 7}}, False),
    (NESTED, {"filter": {"sender": "a", "after": -1}}, False),
    (NESTED, {"filter": {"sender": "a", "cc": "b"}}, False),
    (NESTED, {"filter": {"sender": "a"}, "tags": ["c"]}, False),
    (NESTED, {"filter": {"sender": "a"}, "tags": ["a", "a", "b"]}, False),
    (NESTED, {"filter": {"sender": "a"}, "score": True}, False),
    (NESTED, {"filter": {"sender": "a"}, "extra": 1}, False),
    (TUPLE_2020, {"pair": [1]}, True),
    (TUPLE_2020, {"pair": ["x"]}, False),  # draft 7 ignores prefixItems: only jsonschema can say this
    (TUPLE_2020, {"pair": [1, 2]}, False),
    (DEPENDENT, {"a": 1, "b": 2}, True),
    (DEPENDENT, {"a": 1}, False),
    (BOOLS, {"n": 1, "z": 0, "k": [1]}, True),
    (BOOLS, {"n": True}, False),
    (BOOLS, {"z": False}, False),
    (BOOLS, {"k": [True]}, False),
]


@pytest.mark.parametrize(("schema", "args", "valid"), CASES)
def test_the_verdict_is_jsonschemas(schema, args, valid):
    assert _validator(schema).full.is_valid(args) is valid  # the arbiter, as a check on the case itself
    assert (argument_errors("t", schema, args) is None) is valid


def test_the_fast_path_is_compiled_for_draft_7_schemas_and_not_for_2020_12_only_keywords():
    assert _validator(NESTED).fast is not None
    assert _validator(TUPLE_2020).fast is None
    assert _validator(DEPENDENT).fast is None
    assert _validator({"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}}).fast is None


def test_checking_arguments_never_fills_in_defaults():
    args = {"filter": {"sender": "dana"}}
    before = copy.deepcopy(args)
    assert argument_errors("t", NESTED, args) is None
    assert args == before  # "mode" has a default; the env gets exactly what the model sent


def test_an_invalid_call_still_gets_jsonschemas_message():
    message = argument_errors("t", NESTED, {"filter": {"sender": "a", "after": -1}})
    assert message == "invalid arguments for tool 't': $.filter.after: -1 is less than the minimum of 0"
