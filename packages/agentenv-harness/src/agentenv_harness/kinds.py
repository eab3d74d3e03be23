"""Coding-agent CLIs as agent kinds: ``claude-code``, ``codex``, ``opencode`` and ``mini-swe-agent``.

Each is pointed at its endpoint the way that CLI expects (claude-code speaks Anthropic's Messages API,
codex OpenAI's Responses API, opencode and mini-swe-agent chat completions; the capture proxy answers
all of them), runs without asking for permissions in its own HOME and working folder, and takes the
episode's tools over MCP (mini-swe-agent has only its shell). Options every kind takes::

    agents:
      solver:
        kind: claude-code
        command: /opt/agents/bin/claude     # the executable (default: the CLI's name on PATH)
        args: [--verbose]                   # more arguments
        env: {SOME_OPTION: "1"}             # more environment
        max_turns: 30                       # claude-code's own limit of model turns (default 30)
        tools: [Bash, Read, Edit]           # claude-code's built-in tools it may use (default: all)
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentenv import sandbox
from agentenv.engine import agent_environment
from agentenv.launch import AgentRequest, Launch
from agentenv.plugins import AgentKind
from agentenv.specs import AgentSpec

__all__ = ["HARNESS_AGENT_KINDS"]

_COMMON = {"command", "args", "env", "max_turns"}
_DEFAULT_COMMAND = {"claude-code": "claude", "codex": "codex", "opencode": "opencode", "mini-swe-agent": "mini"}


def _command(spec: AgentSpec) -> str:
    return str(spec.options.get("command") or _DEFAULT_COMMAND[spec.kind])


def _program(spec: AgentSpec) -> str:
    """The executable's absolute path (found on this process's PATH): the agent starts in a folder of its own."""
    command = _command(spec)
    found = shutil.which(command)
    return str(Path(found).resolve()) if found else command


def _args(spec: AgentSpec) -> list[str]:
    return [str(a) for a in spec.options.get("args") or []]


def _env(request: AgentRequest, dialect: str, own: dict[str, str]) -> dict[str, str]:
    extra = {str(k): str(v) for k, v in (request.spec.options.get("env") or {}).items()}
    return {**agent_environment(request, dialect), **own, **extra}  # type: ignore[arg-type]


def _checker(allowed: set[str]) -> Any:
    def check(spec: AgentSpec, bundle_dir: Path) -> Iterable[str]:
        options = spec.options
        for name in sorted(set(options) - allowed):
            yield f"unknown field {name!r}; a {spec.kind} agent takes {', '.join(sorted(allowed))}"
        if "command" in options and not isinstance(options["command"], str):
            yield "'command' is the path of the executable (a string)"
        for name in ("args", "tools"):
            if name in options and not (
                isinstance(options[name], list) and all(isinstance(a, str) for a in options[name])
            ):
                yield f"'{name}' must be a list of strings"
        if "env" in options and not isinstance(options["env"], dict):
            yield "'env' must map variable names to values"
        if "max_turns" in options and (not isinstance(options["max_turns"], int) or options["max_turns"] < 1):
            yield "'max_turns' must be a whole number of 1 or more"

    return check


def _missing(spec: AgentSpec, bundle_dir: Path) -> str | None:
    command = _command(spec)
    if shutil.which(command) is None and not Path(command).is_file():
        install = {
            "claude-code": "npm install -g @anthropic-ai/claude-code",
            "codex": "npm install -g @openai/codex",
            "opencode": "npm install -g opencode-ai",
            "mini-swe-agent": "pip install mini-swe-agent",
        }[spec.kind]
        return f"agent {spec.name!r} needs {command!r} ({spec.kind}), which is not on PATH: {install}"
    return None


# --- claude-code --------------------------------------------------------------------------------------


def _claude(request: AgentRequest) -> Launch:
    """Claude Code (`claude -p`), speaking Anthropic's Messages API to its endpoint; the episode's tools over MCP
    (`--mcp-config`); `--continue` on later turns."""
    spec, options = request.spec, request.spec.options
    argv = [
        _program(spec),
        "-p",
        "--model",
        request.endpoint.model,
        "--output-format",
        "text",
        "--permission-mode",
        "bypassPermissions",
        "--max-turns",
        str(options.get("max_turns", 30)),
    ]
    files: dict[str, str] = {}
    allowed = [str(t) for t in options.get("tools") or []]
    if allowed:
        argv += ["--tools", ",".join(allowed)]
    if request.mcp is not None:
        config = {
            "mcpServers": {request.mcp.name: {"type": "http", "url": request.mcp.url, "headers": request.mcp.headers}}
        }
        files[".agentenv/mcp.json"] = json.dumps(config)
        argv += ["--mcp-config", str(request.home / ".agentenv" / "mcp.json")]
        allowed.append(f"mcp__{request.mcp.name}")
    argv.append("--strict-mcp-config")  # only the episode's MCP server, never one from a config it finds
    if allowed:
        argv += ["--allowedTools", ",".join(allowed)]
    if request.system and not request.resume:
        argv += ["--append-system-prompt", request.system]
    if request.resume:
        argv.append("--continue")
    env = {
        **_sandboxed(spec),
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ENABLE_TOOL_SEARCH": "false",  # offer the episode's MCP tools to the model, not behind a search tool
    }
    # the prompt on stdin: --mcp-config and --allowedTools take several values and would swallow it
    return Launch(tuple([*argv, *_args(spec)]), _env(request, "anthropic", env), files, stdin=request.prompt)


# --- codex --------------------------------------------------------------------------------------------


def _codex(request: AgentRequest) -> Launch:
    """OpenAI's Codex CLI (`codex exec`), speaking the Responses API to its endpoint; the episode's tools over MCP;
    `exec resume --last` on later turns."""
    spec, endpoint = request.spec, request.endpoint
    settings = {
        "model_provider": "agentenv",
        "model": endpoint.model,
        "model_providers.agentenv.name": "agentenv",
        "model_providers.agentenv.base_url": endpoint.openai_base,
        "model_providers.agentenv.env_key": "AGENTENV_API_KEY",
        "model_providers.agentenv.wire_api": "responses",
        "model_providers.agentenv.supports_websockets": False,
    }
    if request.mcp is not None:
        settings[f"mcp_servers.{request.mcp.name}.url"] = request.mcp.url
        settings[f"mcp_servers.{request.mcp.name}.bearer_token_env_var"] = "AGENTENV_MCP_TOKEN"
    argv = [_program(spec), "exec", *(["resume", "--last"] if request.resume else [])]
    argv += [
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--output-last-message",
        str(request.workdir / ".agentenv-codex-reply"),
    ]
    for key, value in settings.items():
        argv += ["-c", f"{key}={json.dumps(value)}"]  # TOML values: JSON strings and booleans read the same
    argv += [*_args(spec), request.prompt_with_system]
    env = {"CODEX_HOME": str(request.home / ".codex")}
    return Launch(tuple(argv), _env(request, "openai", env), reply_file=".agentenv-codex-reply")


# --- opencode -----------------------------------------------------------------------------------------


def _opencode_reply(text: str) -> str:
    """The agent's last text part, from ``opencode run --format json`` events (one JSON object per line)."""
    parts: dict[str, str] = {}
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        part = event.get("part") if isinstance(event, dict) else None
        if isinstance(part, dict) and part.get("type") == "text":
            parts[str(part.get("messageID") or part.get("id"))] = str(part.get("text") or "")
    return list(parts.values())[-1].strip() if parts else ""


def _opencode(request: AgentRequest) -> Launch:
    """opencode (`opencode run --format json`), speaking chat completions to its endpoint; the episode's tools over
    MCP; `--continue` on later turns."""
    spec, endpoint = request.spec, request.endpoint
    model = f"agentenv/{endpoint.model}"
    config: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "agentenv": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "agentenv",
                "options": {"baseURL": endpoint.openai_base, "apiKey": endpoint.api_key or "none"},
                "models": {endpoint.model: {"name": endpoint.model, "tool_call": True}},
            }
        },
        "model": model,
        "small_model": model,
        "permission": "allow",
        "autoupdate": False,
        "share": "disabled",
    }
    if request.mcp is not None:
        config["mcp"] = {
            request.mcp.name: {
                "type": "remote",
                "url": request.mcp.url,
                "headers": request.mcp.headers,
                "enabled": True,
            }
        }
    argv = [_program(spec), "run", "--model", model, "--format", "json", *(["--continue"] if request.resume else [])]
    argv += [*_args(spec), "--", request.prompt_with_system]
    env = {
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }
    return Launch(tuple(argv), _env(request, "openai", env), parse_reply=_opencode_reply)


# --- mini-swe-agent -----------------------------------------------------------------------------------


def _mini_reply(text: str) -> str:
    """What mini-swe-agent submitted, from its trajectory file (else its last message)."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()
    submission = (data.get("info") or {}).get("submission") if isinstance(data, dict) else None
    if submission:
        return str(submission).strip()
    messages = data.get("messages") or [] if isinstance(data, dict) else []
    return str((messages[-1] or {}).get("content") or "").strip() if messages else ""


def _mini(request: AgentRequest) -> Launch:
    """mini-swe-agent (`mini`), speaking chat completions through litellm; its shell only (no MCP); its reply is
    what it submits."""
    spec, endpoint = request.spec, request.endpoint
    argv = [
        _program(spec),
        "-y",
        "--exit-immediately",
        "-m",
        f"openai/{endpoint.model}",
        "-t",
        request.prompt_with_system,
        "-o",
        str(request.workdir / ".agentenv-mini.traj.json"),
    ]
    env = {
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",  # a self-hosted model has no price
        "OPENAI_API_BASE": endpoint.openai_base,  # what litellm reads
    }
    return Launch(
        tuple([*argv, *_args(spec)]),
        _env(request, "openai", env),
        reply_file=".agentenv-mini.traj.json",
        parse_reply=_mini_reply,
    )


HARNESS_AGENT_KINDS = (
    AgentKind("claude-code", _claude, _checker(_COMMON | {"tools"}), _missing, dialect="anthropic"),
    AgentKind("codex", _codex, _checker(_COMMON - {"max_turns"}), _missing),
    AgentKind("opencode", _opencode, _checker(_COMMON - {"max_turns"}), _missing),
    AgentKind("mini-swe-agent", _mini, _checker(_COMMON - {"max_turns"}), _missing, mcp=False),
)


def _sandboxed(spec: AgentSpec) -> dict[str, str]:
    """``IS_SANDBOX=1`` (claude-code's bypassPermissions as root) only where the agent's sandbox isolates it (the
    backend its ``sandbox.backend`` names, else the one in force): a CLI is never told it is sandboxed when it is not
    (with ``--no-sandbox`` it runs, and refuses, as itself)."""
    return {"IS_SANDBOX": "1"} if sandbox.current(spec.sandbox.backend).isolates_processes else {}
