"""Deploy ahead (``build_app(warm=N)``, ``agentenv serve --warm N``): deployed, never-played envs kept ready.

For each toolset of the bundle the server keeps up to ``N`` deployments (``agentenv.engine.deployment``) deployed before
any rollout asks, so a rollout's start takes one and its first tool call waits only for the task's setup step,
not for the deploy. ``N`` is fixed per toolset (not sized from demand: a trainer's demand is its batch, which the
person starting the server knows). What is kept ready:

- is played once: its episode tears it down, and the server deploys another in the background;
- counts against capacity: sessions plus ready deployments (and those deploying) stay within
  ``max_concurrent_envs``; a session that arrives when that is full is admitted by tearing down a ready one
  (``evict``), so deploying ahead never turns a session away. Refills also wait for room in the file descriptors;
- is handed out only deployed and alive: one whose deploy fails is torn down and deployed again (after a pause
  that doubles with each failure in a row, up to ``MAX_PAUSE``); one whose program exited meanwhile is replaced;
- is torn down at shutdown (``close``), with the sessions' episodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from agentenv.bundle import Bundle, Task
from agentenv.engine import Deployment, ToolThreads, deploy_failure

__all__ = ["Ahead"]

log = logging.getLogger("agentenv.server")

MAX_PAUSE = 30.0


@dataclass(eq=False)
class _Toolset:
    task: Task  # a task of the toolset: deployments are made from it (any task of the toolset would do)
    ready: deque[Deployment] = field(default_factory=deque)
    deploying: set[asyncio.Task[None]] = field(default_factory=set)  # a task leaves it when done, however it ends
    failures: int = 0  # deploys failed in a row


class Ahead:
    """Up to ``warm`` ready deployments per toolset of ``bundle`` (see the module docstring)."""

    def __init__(
        self, bundle: Bundle, warm: int, *, threads: ToolThreads, deploy_timeout: float, room: Callable[[], int]
    ) -> None:
        self.bundle = bundle
        self.warm = warm
        self.threads = threads
        self.deploy_timeout = deploy_timeout
        self.room = room  # how many more envs the server has room for now (sessions, ready ones and descriptors)
        self.toolsets = {key: _Toolset(tasks[0]) for key, tasks in bundle.by_toolset().items()} if warm > 0 else {}
        self.taken = 0  # rollouts that started on a ready deployment
        self.missed = 0  # rollouts that found none ready and deployed their own
        self.failed = 0  # deploys ahead that failed (and were replaced)
        self._tasks: set[asyncio.Task[None]] = set()  # deploys and teardowns running
        self._deploys: set[asyncio.Task[None]] = set()  # the deploys alone: cancelled at close (teardowns never are)
        self._closed = False

    @property
    def held(self) -> int:
        """Ready deployments and those deploying: what counts against capacity."""
        return sum(len(t.ready) + len(t.deploying) for t in self.toolsets.values())

    def take(self, key: str) -> Deployment | None:
        """A ready deployment of toolset ``key`` (the caller plays it once and tears it down), or None."""
        toolset = self.toolsets.get(key)
        if toolset is None:
            return None
        found = None
        while toolset.ready:
            candidate = toolset.ready.popleft()
            if candidate.alive():
                found = candidate
                break
            log.warning("a deployment kept ready for toolset %s had exited; it is replaced", key)
            self._spawn(candidate.teardown())
        self.taken += found is not None
        self.missed += found is None
        self.fill()
        return found

    def evict(self) -> bool:
        """Make room for a session: tear down a ready deployment (the fullest toolset's), else stop a deploy ahead;
        False when there is neither."""
        fullest = max(self.toolsets.values(), key=lambda t: len(t.ready), default=None)
        if fullest is not None and fullest.ready:
            self._spawn(fullest.ready.pop().teardown())
            return True
        deploying = next((t for t in self._deploys if not t.cancelling()), None)
        if deploying is None:
            return False
        deploying.cancel()  # its teardown runs as it ends
        for toolset in self.toolsets.values():
            toolset.deploying.discard(deploying)  # it holds no room from now on
        return True

    def fill(self) -> None:
        """Start deploys until each toolset has ``warm`` ready or deploying, as far as the room goes (round robin)."""
        if self._closed or not self.toolsets:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # not on the server's loop yet: its start-up fills
        room = self.room()
        while room > 0:
            short = [t for t in self.toolsets.values() if len(t.ready) + len(t.deploying) < self.warm]
            if not short:
                return
            for toolset in short[:room]:
                task = self._spawn(self._deploy(toolset))
                task.add_done_callback(toolset.deploying.discard)
                toolset.deploying.add(task)
                self._deploys.add(task)
            room -= min(room, len(short))

    async def _deploy(self, toolset: _Toolset) -> None:
        deployment = Deployment(self.bundle, toolset.task, threads=self.threads, teardown_timeout=self.deploy_timeout)
        ok = False
        try:
            if toolset.failures:
                await asyncio.sleep(min(MAX_PAUSE, 0.5 * 2 ** (toolset.failures - 1)))
            async with asyncio.timeout(self.deploy_timeout):
                await deployment.create()
                await deployment.deploy()
            ok = not self._closed
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed += 1
            toolset.failures += 1
            kind, _, message = deploy_failure(exc, self.deploy_timeout, deployment.current)
            log.warning(
                "a deploy ahead for toolset %s failed (%s: %s); deploying another",
                deployment.toolset_key,
                kind,
                message,
            )
        finally:
            toolset.deploying.discard(asyncio.current_task())  # type: ignore[arg-type]  # ready now, or no longer held
            if ok:
                toolset.failures = 0
                toolset.ready.append(deployment)
            else:
                await asyncio.shield(deployment.teardown())
        self.fill()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        for held in (self._tasks, self._deploys):
            task.add_done_callback(held.discard)
        self._tasks.add(task)
        return task

    async def close(self) -> None:
        """Stop deploying ahead and tear down every ready deployment (at shutdown)."""
        self._closed = True
        if self.toolsets:
            log.info(
                "deploy ahead: %d rollout(s) started on a ready deployment, %d found none ready, %d deploy(s) "
                "ahead failed",
                self.taken,
                self.missed,
                self.failed,
            )
        for task in self._deploys:
            task.cancel()  # its own teardown runs as it ends
        ready = [d for t in self.toolsets.values() for d in t.ready]
        for toolset in self.toolsets.values():
            toolset.ready.clear()
        await asyncio.gather(*self._tasks, *(d.teardown() for d in ready), return_exceptions=True)

    def describe(self) -> str:
        """A line for the start-up log."""
        if not self.warm:
            return "no deploy ahead"
        return f"deploying ahead: {self.warm} ready per toolset ({len(self.toolsets)} toolset(s))"
