"""Tool arguments are checked against the tool's full JSON Schema before the env sees them."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["argument_errors", "check_schema"]

MAX_REPORTED = 5


@functools.lru_cache(maxsize=1024)
def _compiled(schema_json: str) -> Any:
    import jsonschema  # imported on first use: it is not needed to load a bundle

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


# Tools are usually the same objects episode after episode (an Env class's declared tools), so the
# validator is found by the schema's identity first: no JSON encoding on the hot path.
_by_identity: dict[int, tuple[Mapping[str, Any], Any]] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    entry = _by_identity.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    validator = _compiled(json.dumps(schema, sort_keys=True))
    if len(_by_identity) > 4096:
        _by_identity.clear()
    _by_identity[id(schema)] = (schema, validator)  # holding the schema keeps its id from being reused
    return validator


def check_schema(schema: Mapping[str, Any]) -> str | None:
    """What is wrong with ``schema`` as a JSON Schema, or None."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return exc.message
    return None


def argument_errors(tool: str, schema: Mapping[str, Any], args: Any) -> str | None:
    """Why ``args`` do not fit ``schema`` (one message for the model), or None when they do."""
    if not isinstance(args, dict):
        return f"arguments for tool {tool!r} must be a JSON object, got {type(args).__name__}"
    validator = _validator(schema)
    if validator.is_valid(args):
        return None
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    lines = [f"{_where(e.absolute_path)}: {e.message}" for e in errors[:MAX_REPORTED]]
    more = f" (and {len(errors) - MAX_REPORTED} more)" if len(errors) > MAX_REPORTED else ""
    return f"invalid arguments for tool {tool!r}: " + "; ".join(lines) + more


def _where(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out
