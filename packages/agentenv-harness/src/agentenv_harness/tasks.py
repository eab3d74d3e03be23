"""Which tasks of a bundle a harness can train on, and the dataset TRL iterates: one prompt row per task.

A task is left out, with a warning naming it and why, when it deploys no solver, when its judge or user
simulator points at the policy (or is the policy's own engine and model: a judge that is its solver),
when a key variable of theirs is unset, or when an agent it deploys is not installed here. Nothing a
left-out task alone needs stops the others.

TRL hands the session factory only a row's prompt, so each row names its task in its system message:
``agentenv task: BUNDLE/TASK``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from agentenv.bundle import Bundle, Task, load_bundle
from agentenv.errors import AgentEnvError
from agentenv.logs import warn_once
from agentenv.plugins import AgentKind
from agentenv.specs import POLICY, AgentSpec, EndpointSpec

__all__ = ["TASK_LINE", "LeftOut", "load", "plan", "prompt_rows", "solver_for", "task_of_prompt"]

log = logging.getLogger("agentenv_harness")

TASK_LINE: Final = "agentenv task: {bundle}/{task}"
_TASK_LINE = re.compile(r"^agentenv task: (?P<bundle>[^/\s]+)/(?P<task>\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class LeftOut:
    """A task a harness does not train on, and why."""

    task_id: str
    reason: str


def load(bundle: str | Path | Bundle) -> Bundle:
    """The bundle itself, or the one loaded (and checked) from its folder."""
    return bundle if isinstance(bundle, Bundle) else load_bundle(bundle)


def solver_for(bundle: Bundle, agent: str | None) -> AgentSpec | None:
    """The agent ``agent`` names: one of the bundle's ``agents:``, else an agent kind with its default options.

    None for no swap; ``AgentEnvError`` naming both lists when it is neither.
    """
    if agent is None:
        return None
    if agent in bundle.agents:
        return bundle.agents[agent]
    kinds = bundle.plugin_set.agent_kinds() if bundle.plugin_set else {}
    if agent in kinds and agent != "process":
        return AgentSpec(name=agent, kind=agent)
    if agent == "process":  # a kind with no program of its own: the command is the author's
        raise AgentEnvError(
            "--agent process: a process agent is a program of yours; declare it under agents: in bundle.yaml "
            "(solver: {kind: process, command: [python, '{bundle}/agents/solve.py', '{prompt}']}) and pass its name "
            "(--agent solver); agentenv init --full writes one"
        )
    raise AgentEnvError(
        f"no agent {agent!r}: bundle {bundle.name!r} has agents {', '.join(sorted(bundle.agents)) or 'none'} and "
        f"the installed agent kinds are {', '.join(sorted(k for k in kinds if k != 'process')) or 'none'}"
    )


def _same_engine(endpoint: EndpointSpec, engine: tuple[str, str] | None) -> bool:
    if engine is None:
        return False
    url, model = engine
    root = re.sub(r"/v1/?$", "", url.rstrip("/"))
    return re.sub(r"/v1/?$", "", endpoint.base_url) == root and endpoint.model == model


def _why_left_out(
    bundle: Bundle,
    task: Task,
    solver: AgentSpec | None,
    kinds: Mapping[str, AgentKind],
    engine: tuple[str, str] | None,
    environ: Mapping[str, str],
) -> str | None:
    step = task.deployed("solver")
    if solver is None:
        if step is None or step.agent is None:
            return "it deploys no solver (add the deploy step {agent: NAME, role: solver})"
        if step.endpoint != POLICY:
            return "its solver calls a configured endpoint, not the policy (give it endpoint: policy)"
        solver = bundle.agents[step.agent]
    others: list[tuple[str, Any]] = []
    for role in ("user", "judge"):
        other = task.deployed(role)
        if other is not None:
            others.append((f"its {role} step", other.endpoint))
    for turn in task.turns:
        for verifier in turn.verifiers:
            if verifier.kind == "judge" and isinstance(verifier.params.get("endpoint"), dict):
                others.append((f"its judge {verifier.id!r}", EndpointSpec.model_validate(verifier.params["endpoint"])))
    for who, endpoint in others:
        if endpoint == POLICY:
            return f"{who} points at the policy (only a solver may call the model being trained)"
        if _same_engine(endpoint, engine):
            return f"{who} is its solver: it asks {endpoint.model} at {endpoint.base_url}, the model being trained"
        if endpoint.key_var and not environ.get(endpoint.key_var):
            return f"{who} reads its key from ${endpoint.key_var}, which is not set"
    user = task.deployed("user")
    for agent in [solver, *([bundle.agents[user.agent]] if user is not None and user.agent else [])]:
        kind = kinds.get(agent.kind)
        if kind is None:
            return f"agent {agent.name!r} is of kind {agent.kind!r}, which no installed plugin provides"
        missing = kind.missing(agent, bundle.path)
        if missing:
            return missing
    return None


def plan(
    bundle: Bundle,
    *,
    split: str | None = None,
    agent: str | None = None,
    engine: tuple[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[Task], list[LeftOut]]:
    """The tasks to train on (of ``split``, or all) and those left out, each left-out task warned about once.

    ``agent`` swaps every task's solver; ``engine`` is the policy's (URL, model), so a judge on it is caught.
    """
    solver = solver_for(bundle, agent)
    kinds = bundle.plugin_set.agent_kinds() if bundle.plugin_set else {}
    tasks = list(bundle.split(split)) if split is not None else list(bundle.tasks)
    kept, left = [], []
    for task in tasks:
        reason = _why_left_out(bundle, task, solver, kinds, engine, os.environ if environ is None else environ)
        if reason is None:
            kept.append(task)
            continue
        left.append(LeftOut(task.id, reason))
        warn_once(
            log,
            f"left-out:{bundle.path}:{task.id}:{reason}",
            "task %r of bundle %r is left out of harness training: %s",
            task.id,
            bundle.name,
            reason,
        )
    return kept, left


def refuse_empty(bundle: Bundle, split: str | None, left: list[LeftOut]) -> AgentEnvError:
    """The error for a bundle (or split) with no task to train."""
    where = f"split {split!r} of bundle {bundle.name!r}" if split else f"bundle {bundle.name!r}"
    reasons = "".join(f"\n  - {item.task_id}: {item.reason}" for item in left[:20])
    more = f"\n  (+{len(left) - 20} more)" if len(left) > 20 else ""
    return AgentEnvError(f"{where} has no task to train with the harness{':' if left else ''}{reasons}{more}")


def prompt_rows(bundle: str | Path | Bundle, split: str | None = None, *, agent: str | None = None) -> Any:
    """The dataset for TRL's harness worker: a ``datasets.Dataset`` with a row per task to train.

    Columns: ``prompt`` (a system message naming the task, then its first prompt), ``task_id``, ``split``.
    Raises ``AgentEnvError`` when no task is left to train.
    """
    from datasets import Dataset

    loaded = load(bundle)
    tasks, left = plan(loaded, split=split, agent=agent)
    if not tasks:
        raise refuse_empty(loaded, split, left)
    rows = []
    for task in tasks:
        line = TASK_LINE.format(bundle=loaded.name, task=task.id)
        system = f"{line}\n{task.system}" if task.system else line
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": task.turns[0].prompt}]
        rows.append({"prompt": prompt, "task_id": task.id, "split": task.split})
    return Dataset.from_list(rows)


def task_of_prompt(prompt: Any, bundle: Bundle) -> str:
    """The task id a row's prompt names; ``AgentEnvError`` when it names none or another bundle's task."""
    if isinstance(prompt, list):
        text = "\n".join(
            str(m.get("content") or "") for m in prompt if isinstance(m, dict) and m.get("role") == "system"
        )
    else:
        text = str(prompt)
    found = _TASK_LINE.search(text)
    if found is None:
        raise AgentEnvError(
            "the prompt names no task (its system message has no 'agentenv task: BUNDLE/TASK' line); build the "
            "dataset with agentenv_harness.prompt_rows(bundle)"
        )
    if found["bundle"] != bundle.name:
        raise AgentEnvError(
            f"the prompt names task {found['task']!r} of bundle {found['bundle']!r}, but this factory serves bundle "
            f"{bundle.name!r}; build the dataset and the factory from the same bundle"
        )
    return found["task"]
