"""What a toolset offers: the tools it gets from each env, its check against the bundle, its key."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from agentenv.env import Tool
from agentenv.specs import BASH_TOOL, EnvSpec, Toolset

__all__ = ["KEY_HASH", "check_toolset", "effective_names", "effective_tools", "key_name"]

# A toolset key is a readable name and a short hash of what the toolset offers: tasks share a key exactly
# when they offer the same tools, and people can tell keys apart in `agentenv tasks`, logs and TRL's names.
KEY_HASH = 8
KEY_NAME_MAX = 48


def effective_names(env: EnvSpec, toolset: Toolset, tools: list[Tool] | None) -> list[str] | None:
    """The names of the tools ``toolset`` gets from ``env``, or None when only a deploy can tell."""
    if tools is None:
        return None
    names = [t.name for t in tools]
    role_tools = set(env.roles[toolset.role]) if env.roles is not None else set(names)
    role_tools |= set(toolset.allow.get(env.name, []))
    role_tools -= set(toolset.deny.get(env.name, []))
    return [n for n in names if n in role_tools]


def effective_tools(env: EnvSpec, toolset: Toolset, tools: list[Tool]) -> list[Tool]:
    """Filter an env's tools (as listed by a live instance) down to what ``toolset`` offers."""
    keep = set(effective_names(env, toolset, tools) or ())
    return [t for t in tools if t.name in keep]


def check_toolset(
    toolset: Toolset,
    envs: Mapping[str, EnvSpec],
    env_tools: Mapping[str, list[Tool] | None],
    problems: list[tuple[tuple[str | int, ...], str]],
) -> str:
    """Check ``toolset`` against the bundle's envs (problems appended); return its key (``mail@assistant-3f9c2a1b``)."""
    effective: dict[str, list[str] | None] = {}
    for i, env_name in enumerate(toolset.envs):
        if env_name not in envs:
            known = ", ".join(sorted(envs)) or "none"
            problems.append((("toolset", "envs", i), f"unknown env {env_name!r}; the bundle's envs: {known}"))
            continue
        env = envs[env_name]
        if env.roles is not None and toolset.role not in env.roles:
            roles = ", ".join(sorted(env.roles))
            problems.append((("toolset", "role"), f"env {env_name!r} has no role {toolset.role!r}; its roles: {roles}"))
            continue
        effective[env_name] = effective_names(env, toolset, env_tools.get(env_name))
    for change in ("deny", "allow"):
        for env_name, names in getattr(toolset, change).items():
            if env_name not in toolset.envs:
                problems.append(
                    (
                        ("toolset", change, env_name),
                        f"env {env_name!r} is not in this toolset's envs ({', '.join(toolset.envs) or 'none'}); "
                        "add it or drop the change",
                    )
                )
                continue
            tools = env_tools.get(env_name)
            if tools is None:
                continue  # only a deploy can tell; checked when an episode starts
            have = {t.name for t in tools}
            for j, tool_name in enumerate(names):
                if tool_name not in have:
                    problems.append(
                        (
                            ("toolset", change, env_name, j),
                            f"{change} names tool {tool_name!r}, which env {env_name!r} does not have; "
                            f"its tools: {', '.join(sorted(have))}",
                        )
                    )
    seen: dict[str, str] = {}
    for env_name, names in effective.items():
        for tool_name in names or ():
            if tool_name in seen or (toolset.bash and tool_name == BASH_TOOL):
                other = seen.get(tool_name, "bash: true")
                problems.append(
                    (
                        ("toolset", "envs"),
                        f"tool {tool_name!r} is offered by both {other!r} and {env_name!r}; deny it in one of them",
                    )
                )
            seen[tool_name] = env_name
    unknown = any(names is None for names in effective.values())
    canonical = {
        "envs": [envs[n].canonical() for n in toolset.envs if n in envs],
        # the role and the access changes only choose tools: they matter for the key when the
        # tools are not known up front (two roles that end with the same tools share a key)
        "role": toolset.role if unknown else None,
        "tools": effective,
        "changes": {
            n: {"deny": sorted(toolset.deny.get(n, [])), "allow": sorted(toolset.allow.get(n, []))}
            for n, names in effective.items()
            if names is None
        },
        "bash": toolset.bash,
    }
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:KEY_HASH]
    return f"{_readable(canonical, toolset, env_tools)}-{digest}"


def _readable(canonical: Mapping[str, Any], toolset: Toolset, env_tools: Mapping[str, list[Tool] | None]) -> str:
    """A toolset's name as people read it, from what its key hashes (so one key has one name): its envs, bash,
    and the tools an env holds back (``ok-without-add``, ``mail-without-delete_email``, ``ok+bash``). Where only a
    deploy can list an env's tools, the access changes and the role stand in for them."""
    effective: Mapping[str, list[str] | None] = canonical["tools"]
    name = "+".join(effective) + ("+bash" if toolset.bash else "") or "no-envs"
    for env_name, names in effective.items():
        if names is not None:
            held_back = [t.name for t in env_tools.get(env_name) or () if t.name not in names]
            name += "".join(f"-without-{t}" for t in held_back)
        else:
            name += "".join(f"-without-{t}" for t in canonical["changes"][env_name]["deny"])
            name += "".join(f"-with-{t}" for t in canonical["changes"][env_name]["allow"])
    if canonical["role"] is not None:
        name += f"@{canonical['role']}"
    return name if len(name) <= KEY_NAME_MAX else name[: KEY_NAME_MAX - 3] + "..."


def key_name(key: str) -> str:
    """The readable part of a toolset key (``mail@assistant-3f9c2a1b`` -> ``mail@assistant``)."""
    return key.rsplit("-", 1)[0]
