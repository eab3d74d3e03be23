"""Burner: a tool that spends a fixed slice of CPU (thread CPU time, so waiting for a core does not count)."""

from __future__ import annotations

import time

from agentenv import Env, tool


class Burner(Env):
    """One tool, burn(ms): spins until this thread has used ``ms`` milliseconds of CPU."""

    @tool(
        {
            "type": "object",
            "properties": {"ms": {"type": "number", "minimum": 0, "maximum": 1000}},
            "required": ["ms"],
            "additionalProperties": False,
        }
    )
    def burn(self, ms: float) -> str:
        """Burn ms milliseconds of CPU."""
        end = time.thread_time() + ms / 1000
        spins = 0
        while time.thread_time() < end:
            spins += 1
        return f"burned {ms:g} ms ({spins} spins)"
