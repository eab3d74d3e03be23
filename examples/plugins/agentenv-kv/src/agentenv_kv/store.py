"""The env behind ``kind: kv``: a key-value store that starts from the env's ``config.seed`` in every episode."""

from __future__ import annotations

from agentenv import Env, ToolError, tool

KEY = {"type": "string", "minLength": 1, "description": "The key."}


class KvStore(Env):
    """Text values by key. Nothing leaks across episodes: each deploy starts from the seed."""

    def deploy(self) -> None:
        self.data: dict[str, str] = dict(self.config.get("seed") or {})

    @tool({"type": "object", "properties": {"key": KEY}, "required": ["key"], "additionalProperties": False})
    def get(self, key: str) -> str:
        """The value stored under a key."""
        if key not in self.data:
            raise ToolError(f"no key {key!r}; the keys are: {', '.join(sorted(self.data)) or 'none'}")
        return self.data[key]

    @tool(
        {
            "type": "object",
            "properties": {"key": KEY, "value": {"type": "string", "description": "The new value."}},
            "required": ["key", "value"],
            "additionalProperties": False,
        }
    )
    def put(self, key: str, value: str) -> str:
        """Store a value under a key (replacing what was there)."""
        self.data[key] = value
        return "ok"

    @tool({"type": "object", "properties": {"key": KEY}, "required": ["key"], "additionalProperties": False})
    def delete(self, key: str) -> str:
        """Remove a key."""
        if self.data.pop(key, None) is None:
            raise ToolError(f"no key {key!r}")
        return "ok"

    @tool({"type": "object", "properties": {}, "additionalProperties": False})
    def keys(self) -> list[str]:
        """Every key, sorted."""
        return sorted(self.data)
