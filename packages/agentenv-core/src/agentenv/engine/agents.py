"""Agent kinds: how a task's deployed agents are launched (the records the ``agentenv_agent_kinds`` hook yields).

An agent is a program that owns its loop: it gets a prompt, calls its model endpoint (and the episode's
tools over MCP), and ends with a reply. A kind turns an ``AgentSpec`` (``agents:`` in bundle.yaml) and an
``AgentRequest`` (the turn's prompt, the endpoint, the MCP server, the agent's folders) into a ``Launch``:
plain data (argv, environment, files to write, where the reply is read), so that a runner can start it as a
local process (``agentenv.engine.agentproc``) or, in a later plugin, in a sandbox.

The core's own kind is ``process``: any command line::

    agents:
      solver:
        kind: process
        command: [python, "{bundle}/agents/solve.py", "{prompt}"]
        resume: [python, "{bundle}/agents/solve.py", --resume, "{prompt}"]   # later turns (default: command)
        reply: stdout                       # or a file the agent writes, relative to its working folder
        env: {MY_OPTION: "1"}
        dialect: openai                     # the API the program speaks: openai or anthropic

``python`` as the program runs the interpreter agentenv runs on. The placeholders ``{bundle}``,
``{prompt}``, ``{system}``, ``{turn}``, ``{workdir}``, ``{model}``, ``{base_url}`` and ``{mcp_url}`` are
filled in; the same values are in the environment as ``AGENTENV_*`` variables, with the endpoint also as
``OPENAI_BASE_URL``/``OPENAI_API_KEY`` (or ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentenv.errors import AgentEnvError
from agentenv.launch import AgentRequest, Dialect, Endpoint, Launch, McpServer
from agentenv.plugins.records import Problem

if TYPE_CHECKING:
    from agentenv.specs import AgentSpec

__all__ = [
    "AgentRequest",
    "Endpoint",
    "Launch",
    "McpServer",
    "chat",
    "python_argv",
]

# --- the process kind -----------------------------------------------------------------------------------

PLACEHOLDERS = ("bundle", "prompt", "system", "turn", "workdir", "model", "base_url", "mcp_url")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
_NAMED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # a {name} in a command: a placeholder, or a typo of one
_PROCESS_FIELDS = {"command", "resume", "reply", "env", "dialect"}


def python_argv(argv: Iterable[str]) -> tuple[str, ...]:
    """``argv`` with a leading ``python``/``python3`` replaced by the interpreter agentenv runs on."""
    out = list(argv)
    if out and out[0] in {"python", "python3"}:
        out[0] = sys.executable
    return tuple(out)


def _fill(value: str, request: AgentRequest) -> str:
    values = {
        "bundle": str(request.bundle_dir),
        "prompt": request.prompt_with_system,
        "system": request.system,
        "turn": str(request.turn),
        "workdir": str(request.workdir),
        "model": request.endpoint.model,
        "base_url": request.endpoint.base_url,
        "mcp_url": request.mcp.url if request.mcp else "",
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], value)


def agent_environment(request: AgentRequest, dialect: Dialect = "openai") -> dict[str, str]:
    """The ``AGENTENV_*`` variables every agent gets, and its endpoint the way OpenAI or Anthropic clients read it."""
    endpoint = request.endpoint
    key = endpoint.api_key or "none"  # clients refuse an empty key; an endpoint without one ignores it
    env = {
        "AGENTENV_ROLE": request.role,
        "AGENTENV_TURN": str(request.turn),
        "AGENTENV_PROMPT": request.prompt,
        "AGENTENV_SYSTEM": request.system,
        "AGENTENV_MODEL": endpoint.model,
        "AGENTENV_BASE_URL": endpoint.base_url,
        "AGENTENV_API_KEY": key,
    }
    if request.mcp is not None:
        env["AGENTENV_MCP_URL"] = request.mcp.url
        env["AGENTENV_MCP_TOKEN"] = request.mcp.token
    if dialect == "anthropic":
        env.update(ANTHROPIC_BASE_URL=endpoint.root, ANTHROPIC_API_KEY=key)
    else:
        env.update(OPENAI_BASE_URL=endpoint.openai_base, OPENAI_API_KEY=key, OPENAI_MODEL=endpoint.model)
    return env


def process_launch(request: AgentRequest) -> Launch:
    """Any program: `command` (and `resume` for later turns) with `{prompt}` and the other placeholders filled
    in; the endpoint in `OPENAI_*` (or `ANTHROPIC_*`) and `AGENTENV_*`; the reply is its output or the file
    `reply` names."""
    options = request.spec.options
    command = options.get("resume") if request.resume and options.get("resume") else options["command"]
    reply = str(options.get("reply") or "stdout")
    extra = {str(k): str(v) for k, v in (options.get("env") or {}).items()}
    env = {**agent_environment(request, options.get("dialect") or "openai"), **extra}
    return Launch(
        argv=python_argv(_fill(str(part), request) for part in command),
        env=env,
        reply_file=None if reply == "stdout" else reply,
    )


def process_check(spec: AgentSpec, bundle_dir: Path) -> list[str | Problem]:
    options = spec.options
    problems: list[str | Problem] = [
        f"unknown field {name!r}; a process agent takes {', '.join(sorted(_PROCESS_FIELDS))}"
        for name in sorted(set(options) - _PROCESS_FIELDS)
    ]
    for name in ("command", "resume"):
        value = options.get(name)
        if value is None and name == "resume":
            continue
        if not isinstance(value, list) or not value or not all(isinstance(p, str | int | float) for p in value):
            problems.append(f"'{name}' must be the program and its arguments as a list (command: [python, agent.py])")
            continue
        for i, part in enumerate(value):
            for unknown in sorted({m for m in _NAMED.findall(str(part)) if m not in PLACEHOLDERS}):
                known = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                problems.append(Problem((name, i), f"unknown placeholder {{{unknown}}}; the placeholders are {known}"))
    if options.get("dialect", "openai") not in ("openai", "anthropic"):
        problems.append(f"dialect {options['dialect']!r}: write openai or anthropic (the API the program speaks)")
    if not isinstance(options.get("env", {}), dict):
        problems.append("'env' must map variable names to values")
    return problems


def process_missing(spec: AgentSpec, bundle_dir: Path) -> str | None:
    import shutil

    command = spec.options.get("command") or []
    program = python_argv([str(command[0])])[0] if command else ""
    if program and "{" not in program and shutil.which(program) is None and not Path(program).is_file():
        return f"program {program!r} of agent {spec.name!r} is not installed (not on PATH)"
    return None


# --- asking a configured endpoint (judges, user simulators) ----------------------------------------------


def _loopback(url: str) -> bool:
    from urllib.parse import urlparse

    from agentenv.hosts import is_loopback

    return is_loopback(urlparse(url).hostname or "")


async def chat(
    endpoint: Endpoint, messages: list[dict[str, str]], *, timeout: float = 120.0, max_tokens: int = 1024
) -> str:
    """Ask ``endpoint`` one chat turn (``messages`` in OpenAI form) and return the reply's text.

    Raises ``AgentEnvError`` naming the endpoint when it cannot be reached or answers an error.
    """
    import httpx

    headers: dict[str, str] = {}
    if endpoint.dialect == "anthropic":
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        url = endpoint.root + "/v1/messages"
        body: dict[str, Any] = {
            "model": endpoint.model,
            "max_tokens": max_tokens,
            "messages": [m for m in messages if m["role"] != "system"],
            **({"system": system} if system else {}),
        }
        headers["anthropic-version"] = "2023-06-01"
        if endpoint.api_key:
            headers["x-api-key"] = endpoint.api_key
    else:
        url = endpoint.openai_base + "/chat/completions"
        body = {"model": endpoint.model, "messages": messages, "max_tokens": max_tokens}
        if endpoint.api_key:
            headers["Authorization"] = f"Bearer {endpoint.api_key}"
    try:
        # no proxy for a loopback endpoint (a proxy from the environment could not reach it)
        async with httpx.AsyncClient(timeout=timeout, trust_env=not _loopback(url)) as client:
            response = await client.post(url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise AgentEnvError(f"model endpoint {url} ({endpoint.model}) could not be reached: {exc!r}") from None
    if response.status_code >= 400:
        raise AgentEnvError(
            f"model endpoint {url} ({endpoint.model}) answered HTTP {response.status_code}: {response.text[:300]}"
        )
    data = response.json()
    if endpoint.dialect == "anthropic":
        return "".join(part.get("text", "") for part in data.get("content") or [] if isinstance(part, dict))
    return str(((data.get("choices") or [{}])[0].get("message") or {}).get("content") or "")
