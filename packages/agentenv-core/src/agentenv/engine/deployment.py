"""Deployments: the envs of one toolset, created, listed and deployed: what an episode plays on.

An episode makes its own at ``start`` or is handed one deployed ahead of it (``agentenv serve --warm N``). A
deploy never sees the task (an env takes its ``config`` from bundle.yaml), so any deployment of a toolset serves
any task of that toolset. What a task needs of its own (a repository at the task's commit, the task's fixture
rows) comes in **setup**, an optional, fast step of the env API run for every episode after the deploy: a python
env defines ``setup(self, task)`` (``agentenv.Env.setup``); a subprocess or container env with ``setup: true``
in bundle.yaml is sent ``{"op": "setup", "task": {"id", "split", "metadata"}}``. A deployment is played once:
its episode tears it down.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
from collections.abc import Callable
from typing import Any

from agentenv.bundle import BASH_TOOL, Bundle, Task, effective_tools
from agentenv.engine.bash import DEFAULT_BASH
from agentenv.engine.threads import ToolThreads, default_pool
from agentenv.engine.verifiers import runs_on_loop
from agentenv.env import Env, Tool
from agentenv.errors import EnvCrashed
from agentenv.plugins import Plugins, plugins

__all__ = ["Deployment", "deploy_failure"]

log = logging.getLogger("agentenv.deployment")  # the name users configure; kept when the module moved


class Deployment:
    """The envs of ``task``'s toolset: ``await create()`` (make them, list their tools), ``await deploy()``,
    ``await setup(task)`` per episode, ``await teardown()`` once (also when nothing was deployed)."""

    def __init__(
        self,
        bundle: Bundle,
        task: Task,
        *,
        plugin_set: Plugins | None = None,
        threads: ToolThreads | None = None,
        teardown_timeout: float = 300.0,
    ) -> None:
        self.bundle = bundle
        self.toolset = bundle.toolset(task)
        self.toolset_key = bundle.toolset_key(task)
        self._named = task.id  # the task its problems are said of (any task of the toolset has them)
        self._plugins = plugin_set or bundle.plugin_set or plugins()
        self.threads = threads or default_pool()
        self.teardown_timeout = max(teardown_timeout, 30.0)
        self.envs: dict[str, Any] = {}
        self.tools: list[Tool] = []
        self.owner: dict[str, str] = {}  # tool name -> the env that offers it
        self.deployed = False
        self.current = ""  # the env deploying or setting up now (the one a failure names)
        self.deploy_seconds = 0.0
        self._torn_down = False

    async def create(self) -> None:
        """Make the envs and list what the toolset offers of their tools (raises when they cannot be made)."""
        specs = {name: self.bundle.envs[name] for name in self.toolset.envs}
        if self.toolset.bash:  # the bundle's own bash env (its sandbox and limits) or the default one
            specs[BASH_TOOL] = self.bundle.envs.get(BASH_TOOL, DEFAULT_BASH)
        for name, spec in specs.items():
            self.envs[name] = self._plugins.env_kinds()[spec.kind].create(spec, self.bundle.path)
        for name, env in self.envs.items():
            listed = await _maybe_await(env.tools())
            listed = [t if isinstance(t, Tool) else Tool.from_dict(t) for t in listed]
            self._check_access(name, listed)
            for t in effective_tools(specs[name], self.toolset, listed):
                if t.name in self.owner:
                    both = f"{self.owner[t.name]!r} and {name!r}"
                    raise EnvCrashed(f"tool {t.name!r} is offered by both {both}; deny it in one of them")
                self.owner[t.name] = name
                self.tools.append(t)

    def _check_access(self, env_name: str, listed: list[Tool]) -> None:
        have = {t.name for t in listed}
        for change in ("deny", "allow"):
            for tool_name in getattr(self.toolset, change).get(env_name, []):
                if tool_name not in have:
                    raise EnvCrashed(
                        f"task {self._named!r} {change}s tool {tool_name!r}, which env {env_name!r} "
                        f"does not have; its tools: {', '.join(sorted(have))}"
                    )

    async def deploy(self) -> None:
        """Deploy every env, in the toolset's order (the caller sets the deadline)."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            for name, env in self.envs.items():
                self.current = name
                await self._run(env.deploy)
        finally:
            self.deploy_seconds += loop.time() - began
        self.deployed = True

    async def setup(self, task: Task) -> None:
        """Run each env's setup step for ``task``, where it has one."""
        for name, env in self.envs.items():
            step = _setup_of(env)
            if step is not None:
                self.current = name
                await self._run(step, task)

    def alive(self) -> bool:
        """False once an env's program is known to have exited (a deployment kept ready is then replaced)."""
        return all(getattr(env, "alive", _always)() for env in self.envs.values())

    async def teardown(self) -> None:
        """Tear every env down, once; a teardown that fails or overruns is logged and the others still run."""
        if self._torn_down:
            return
        self._torn_down = True
        for name, env in self.envs.items():
            try:
                await asyncio.wait_for(self._run(env.teardown), self.teardown_timeout)
            except Exception:
                log.exception("teardown of env %r (toolset %s) failed", name, self.toolset_key)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Await ``fn`` on the loop when it is async; run it on the pool when it may block."""
        if runs_on_loop(fn):
            return await fn(*args)
        return await _maybe_await(await self.threads.run(fn, *args))


def deploy_failure(exc: Exception, deadline: float, env: str) -> tuple[str, str, str]:
    """The fault-table row (kind, stage, message) of a deploy (or setup) that raised ``exc`` in env ``env``."""
    if isinstance(exc, TimeoutError):
        return "deadline", "deploy", f"deploy took longer than its deadline ({deadline:g} s): env {env!r} was deploying"
    # out of file descriptors, processes or memory: the host's state, not the env's (replayed elsewhere)
    scarce = isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM)
    return "out_of_resources" if scarce else "deploy", "deploy", f"env {env!r}: {type(exc).__name__}: {exc}"


def _setup_of(env: Any) -> Callable[..., Any] | None:
    if isinstance(env, Env):
        return env.setup if type(env).setup is not Env.setup else None  # the base's no-op costs no thread hop
    step = getattr(env, "setup", None)
    return step if callable(step) else None


def _always() -> bool:
    return True


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
