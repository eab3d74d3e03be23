"""What an agent kind is handed and what it returns: the endpoint, the episode's MCP server, the request, the launch.

An agent kind (the ``agentenv_agent_kinds`` hook) turns an ``AgentRequest`` into a ``Launch``: plain data (argv,
environment, files to write, where the reply is read), so that a runner can start it as a local process or in a
sandbox. The engine's runner is ``agentenv.engine.agentproc``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agentenv.errors import AgentEnvError

if TYPE_CHECKING:
    from agentenv.specs import AgentSpec, EndpointSpec
    from agentenv.wire import Tool

__all__ = ["AgentRequest", "Dialect", "Endpoint", "Launch", "McpServer"]

Dialect = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class Endpoint:
    """A model endpoint ready to call: ``base_url`` as configured (an OpenAI base ends in ``/v1``), the model,
    the key (None when the endpoint takes none) and the API it speaks."""

    base_url: str
    model: str
    api_key: str | None = None
    dialect: Dialect = "openai"

    @classmethod
    def of(cls, spec: EndpointSpec, environ: Mapping[str, str] | None = None) -> Endpoint:
        """Resolve a configured endpoint, reading its key from ``$key_var`` now; an unset variable is refused."""
        key = None
        if spec.key_var:
            key = (os.environ if environ is None else environ).get(spec.key_var) or None
            if key is None:
                raise AgentEnvError(
                    f"${spec.key_var} is not set, but the key for {spec.base_url} ({spec.model}) is read from it: "
                    f"export {spec.key_var}=<key>"
                )
        return cls(spec.base_url, spec.model, key, spec.dialect)

    @property
    def root(self) -> str:
        """The base URL without a trailing ``/v1`` (Anthropic clients add their own ``/v1/messages``)."""
        return re.sub(r"/v1/?$", "", self.base_url.rstrip("/"))

    @property
    def openai_base(self) -> str:
        """The OpenAI-style base URL (ending in ``/v1``)."""
        return self.root + "/v1"


@dataclass(frozen=True)
class McpServer:
    """The episode's tools served over MCP (streamable HTTP): its URL, the bearer token it requires, a name."""

    url: str
    token: str
    name: str = "env"

    @property
    def headers(self) -> dict[str, str]:
        """The HTTP headers a client sends."""
        return {"Authorization": f"Bearer {self.token}"}


@dataclass(frozen=True)
class AgentRequest:
    """What a kind's ``launch`` gets: the agent's spec, its role, this turn's prompt, its endpoint and folders.

    ``turn`` counts from 0; ``resume`` is True on a later turn of the same conversation (the agent's own
    state, in ``home`` and ``workdir``, is still there). ``mcp`` is the episode's tools (None when it has
    none or the agent is not a solver). ``workdir`` is where it works, ``home`` its own HOME.
    """

    spec: AgentSpec
    role: str
    prompt: str
    system: str
    turn: int
    endpoint: Endpoint
    workdir: Path
    home: Path
    bundle_dir: Path
    mcp: McpServer | None = None
    tools: tuple[Tool, ...] = ()

    @property
    def resume(self) -> bool:
        """Whether this continues the conversation of an earlier turn."""
        return self.turn > 0

    @property
    def prompt_with_system(self) -> str:
        """The system prompt and the prompt as one text, for agents that take no system prompt of their own."""
        return f"{self.system}\n\n{self.prompt}" if self.system and not self.resume else self.prompt


@dataclass(frozen=True)
class Launch:
    """How to start one agent run: plain data, so a runner may start it here or elsewhere.

    ``argv`` is the program and its arguments; ``env`` is added to the runner's clean environment (HOME is
    the agent's own); ``files`` are written before it starts (a relative path is under HOME); ``stdin`` is
    sent on its standard input. The reply is its standard output, or the file ``reply_file`` (relative to
    the working folder); ``parse_reply`` turns that text into the reply (default: stripped).
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    stdin: str | None = None
    reply_file: str | None = None
    parse_reply: Callable[[str], str] | None = None
