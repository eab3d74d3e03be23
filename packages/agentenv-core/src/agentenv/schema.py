"""Tool arguments are checked against the tool's full JSON Schema before the env sees them."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["argument_errors", "check_schema"]

MAX_REPORTED = 5


@functools.lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Any:
    import jsonschema  # imported on first use: it is not needed to load a bundle

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


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
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
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
