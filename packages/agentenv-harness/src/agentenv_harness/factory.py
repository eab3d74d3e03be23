"""``AgentEnvSessionFactory``: OpenEnv's ``ResourceSessionFactory`` for TRL's harness rollouts on a bundle.

TRL's ``HarnessRolloutWorker`` builds the factory in its rollout process (pass it as
``functools.partial(AgentEnvSessionFactory, BUNDLE, llm_url=..., model=...)``; TRL adds ``sampling=``) and,
per rollout, calls ``create(prompt)``, ``wait_for_completion()``, ``fetch_training_trace()``, ``verify()``
and ``close()`` from its pool threads. Each session runs its task's solver agent against the capture proxy
under a key of its own; the episode (in this process, or on an agentenv server with ``env_url``) scores it
with the task's verifiers and reward rule. A run that fails is unscored: ``fetch_training_trace`` raises
``EpisodeLost`` (which TRL counts as an unscorable rollout, never as a broken capture), ``verify`` gives
reward None.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentenv.bundle import Bundle, Task
from agentenv.client import Session, Shared
from agentenv.errors import AgentEnvError, EpisodeLost
from agentenv.launch import Endpoint
from agentenv.local import Here
from agentenv.wire import Failure

from ._threads import BackgroundLoop
from ._version import check_openenv, check_trl
from .capture import CaptureProxy, policy_model, require_tokens
from .play import Play, PlayReport
from .tasks import load, plan, refuse_empty, solver_for, task_of_prompt

if TYPE_CHECKING:
    from openenv.core.harness import TrainingTrace, VerifyResult

check_openenv()  # before OpenEnv is imported: a version outside the range is named with the fix
check_trl()
from agentenv_server import import_openenv  # noqa: E402

import_openenv()  # without its Gradio UI (seconds of import nobody here uses)
from openenv.core.harness import ResourceSession, ResourceSessionFactory, ToolResult  # noqa: E402

from ._api import check_internals  # noqa: E402

check_internals()  # every OpenEnv (and, under TRL, TRL) internal the harness leans on, before a session starts

__all__ = ["AgentEnvSession", "AgentEnvSessionFactory"]

log = logging.getLogger("agentenv_harness")


class AgentEnvSessionFactory(ResourceSessionFactory["AgentEnvSession"]):
    """Harness rollouts of ``bundle``'s tasks: each runs the task's own solver agent through the capture proxy.

    ``llm_url`` and ``model`` are the trainer's engine (vLLM served with token ids and processed log-probs:
    checked here unless ``check_llm=False``) and its base model; with ``lora_name`` (TRL's ``trl-policy``) a
    rollout samples the newest ``{lora_name}-vN`` the engine lists when it starts, for all of its calls.
    ``sampling`` is what TRL passes. ``agent`` swaps every task's solver (an agent of the bundle, or an agent
    kind); ``split`` keeps one split. ``env_url`` plays the episodes on an agentenv server (its token in
    ``$env_token_var``) instead of in this process. ``deadline`` bounds a rollout in seconds (TRL waits
    without one); ``max_model_calls`` caps its model calls (0: no cap); ``max_concurrent`` the rollouts that
    run at once (the others wait). Tasks that cannot be trained here are left out with a warning; a bundle
    with none left is refused.
    """

    def __init__(
        self,
        bundle: str | Path | Bundle,
        *,
        llm_url: str,
        model: str,
        sampling: dict[str, Any] | None = None,
        lora_name: str | None = None,
        agent: str | None = None,
        split: str | None = None,
        env_url: str | None = None,
        env_token_var: str | None = None,
        deadline: float = 1800.0,
        max_model_calls: int = 64,
        max_concurrent: int | None = None,
        tool_timeout: float = 60.0,
        deploy_timeout: float = 300.0,
        check_llm: bool = True,
        keep_workdirs: bool = False,
    ) -> None:
        self._args = (bundle.path if isinstance(bundle, Bundle) else bundle,)
        self._kwargs = {k: v for k, v in locals().items() if k not in {"self", "bundle", "__class__"}}
        self.bundle = load(bundle)
        self.llm_url = llm_url.rstrip("/")
        self.model = model
        self.sampling = dict(sampling) if sampling else None
        self.lora_name = lora_name
        self.solver = solver_for(self.bundle, agent)
        self.tasks, self.left_out = plan(self.bundle, split=split, agent=agent, engine=(self.llm_url, model))
        if not self.tasks:
            raise refuse_empty(self.bundle, split, self.left_out)
        self._by_id = {task.id: task for task in self.tasks}
        self._left = {item.task_id: item.reason for item in self.left_out}
        self.env_url, self.env_token_var = env_url, env_token_var
        self.deadline, self.tool_timeout, self.deploy_timeout = float(deadline), float(tool_timeout), deploy_timeout
        self.keep_workdirs = keep_workdirs
        # without env_url the episodes are played in this process, by the engine agentenv serve runs
        here = Here(self.bundle, tool_timeout=tool_timeout, reset_timeout=deploy_timeout) if env_url is None else None
        self._here = here
        self.kinds = self.bundle.plugin_set.agent_kinds() if self.bundle.plugin_set else {}
        if check_llm:
            require_tokens(self.llm_url, model)
        self.proxy = CaptureProxy(self.llm_url, model, max_model_calls=max_model_calls)
        self._loop = BackgroundLoop("agentenv-harness")
        self._http, self._slots = self._loop.run(self._setup(max_concurrent))
        self._live: set[AgentEnvSession] = set()
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.close)  # no agent process, env or proxy outlives the trainer's process

    async def _setup(self, max_concurrent: int | None) -> tuple[Any, asyncio.Semaphore | None]:
        import httpx

        http = httpx.AsyncClient(timeout=120.0, trust_env=False)  # loopback and the engine: no proxy
        return http, asyncio.Semaphore(max_concurrent) if max_concurrent else None

    def __reduce__(self) -> tuple[Any, ...]:
        # picklable as its arguments: a new process builds its own proxy, loop and agents
        return (functools.partial(type(self), *self._args, **self._kwargs), ())

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> AgentEnvSession:
        """Start a rollout of the task the prompt names (a row of ``prompt_rows``); returns its session at once."""
        if self._closed:
            raise AgentEnvError("this AgentEnvSessionFactory is closed; create a new one")
        task_id = task_of_prompt(task, self.bundle)
        if task_id not in self._by_id:
            why = self._left.get(task_id)
            if why is None:
                self.bundle.task(task_id)  # raises naming how to list the tasks
                raise AgentEnvError(f"task {task_id!r} is not in this factory's split")
            raise AgentEnvError(f"task {task_id!r} is left out of harness training: {why}")
        return AgentEnvSession(self, self._by_id[task_id], task, episode_id or uuid.uuid4().hex)

    def close(self) -> None:
        """Close every live session (each returns after its teardown), then stop the proxy and the loop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for session in list(self._live):
            session.close()
        if self._here is not None:
            self._loop.run(self._here.aclose())
        self._loop.run(self._http.aclose())
        self.proxy.stop()
        self._loop.stop()
        atexit.unregister(self.close)

    def _session(self) -> Session:
        """A session for one rollout: on the server at ``env_url`` (waited out while it is busy), else in this
        process."""
        if self._here is not None:
            return Session(self._here.shared(client="harness"))
        shared = Shared(
            self.env_url or "",
            token_var=self.env_token_var,
            tool_timeout=self.tool_timeout,
            reset_timeout=self.deploy_timeout,
            waits_for_server=True,
            client="harness",
        )
        return Session(shared)


class AgentEnvSession(ResourceSession):
    """One harness rollout (OpenEnv's loop-owning ``TrainableSession``): it runs from ``create`` on.

    ``close()`` cancels the run once and returns only after its teardown (the agent's process group
    killed, the episode torn down, the capture session deleted), which runs in a task of its own that
    nothing cancels; a second or concurrent ``close()`` waits for the same teardown.
    """

    def __init__(self, factory: AgentEnvSessionFactory, task: Task, prompt: Any, episode_id: str) -> None:
        self.factory = factory
        self.task = task
        self.prompt = prompt
        self.episode_id = episode_id
        self.model: str | None = None  # the policy's name this rollout is pinned to
        self.key: str | None = None  # its capture session
        self.play: Play | None = None
        self.report: PlayReport | None = None
        self.failure: Failure | None = None
        self.began = time.monotonic()
        self._lock = threading.Lock()
        self._closing: concurrent.futures.Future[None] | None = None
        self._finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        factory._live.add(self)
        self._task: asyncio.Task[None] = factory._loop.run(self._spawn())

    async def _spawn(self) -> asyncio.Task[None]:
        task = asyncio.create_task(self._run(), name=f"harness rollout {self.task.id}")
        task.add_done_callback(lambda _: self._finished.set_result(None))
        return task

    async def _run(self) -> None:
        try:
            if self.factory._slots is not None:
                async with self.factory._slots:  # a session closed while it waits here never runs
                    await self._play()
            else:
                await self._play()
        except Exception as exc:  # a bug must not stop the trainer: the rollout is lost, and said so
            log.exception("harness rollout of task %r failed", self.task.id)
            self.failure = self.failure or Failure("crash", "agent", f"the rollout failed: {type(exc).__name__}: {exc}")

    async def _play(self) -> None:
        import httpx

        factory = self.factory
        try:
            self.model = await policy_model(factory._http, factory.llm_url, factory.model, factory.lora_name)
            self.key = await factory.proxy.open(
                factory._http,
                model=self.model,
                sampling=factory.sampling,
                metadata={"task_id": self.task.id, "episode_id": self.episode_id},
            )
        except (AgentEnvError, httpx.HTTPError, OSError, ValueError) as exc:
            self.failure = Failure("deploy", "agent", f"the capture session could not be opened: {exc!r}")
            return
        key = self.key
        self.play = Play(
            factory.bundle,
            self.task,
            factory._session(),
            policy=Endpoint(f"{factory.proxy.url}/v1", self.model, key),
            kinds=factory.kinds,
            solver=factory.solver,
            deadline=max(0.0, factory.deadline - (time.monotonic() - self.began)),
            model_calls=lambda: factory.proxy.calls(key),
            keep_workdir=factory.keep_workdirs,
        )
        self.report = await self.play.run()
        self.failure = self.report.failure

    # -- TRL's calls -------------------------------------------------------------------------------

    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Wait for the run; 0 when it played through. Past the rollout's deadline (or ``timeout_s``) the run
        is torn down first, then ``TimeoutError`` is raised."""
        try:
            self._finished.result(timeout_s)
        except concurrent.futures.TimeoutError:
            self._stop()
            self.failure = self.failure or Failure("deadline", "agent", f"not done within timeout_s={timeout_s:g}")
        if self.failure is not None and self.failure.kind == "deadline":
            raise TimeoutError(f"task {self.task.id!r}: {self.failure.message}; the run was torn down")
        if self.failure is None and self.report is not None:
            return 0
        runs = self.report.solver_runs if self.report else []
        return runs[-1].code if runs and runs[-1].code != 0 else 1

    def fetch_training_trace(self) -> TrainingTrace:
        """The captured model calls as OpenEnv's ``TrainingTrace``.

        A run that failed (or a capture that cannot be trained on) raises ``EpisodeLost`` with the failure:
        TRL then leaves the rollout out. Nothing else is raised (a ``ValueError`` would stop TRL's worker).
        """
        if not self._finished.done():
            raise self._lost(Failure("protocol", "agent", "the run is still going; call wait_for_completion() first"))
        if self.failure is not None or self.report is None or self.key is None:
            raise self._lost(self.failure or Failure("crash", "agent", "the run was closed before it ended"))
        try:
            return self.factory.proxy.trace(self.key)
        except Exception as exc:  # OpenEnv's ValueError for an untrainable capture would stop TRL: never let it out
            self.failure = Failure("crash", "agent", f"the capture of this rollout cannot be trained on: {exc}")
            raise self._lost(self.failure) from None

    def verify(self, transcript: list[dict[str, Any]], final_state: Any = None) -> VerifyResult:
        """The episode's reward (None when the run failed or the episode was not scored) and its record."""
        from openenv.core.harness import VerifyResult

        report = self.report
        failed = self.failure is not None or report is None
        reward = None if failed or report is None else report.reward
        metrics: dict[str, Any] = {"task_id": self.task.id, "policy_model": self.model}
        if report is not None:
            metrics.update(
                outcome="failed" if failed else report.result.outcome,
                scores=dict(report.result.scores),
                seconds=round(report.seconds, 3),
                solver_runs=len(report.solver_runs),
            )
        if self.failure is not None:
            metrics.update(
                outcome="failed", failure=self.failure.kind, stage=self.failure.stage, reason=self.failure.message
            )
        return VerifyResult(env_reward=reward, done=True, metrics=metrics)

    def close(self) -> None:
        """Cancel the run (once) and return after its teardown."""
        with self._lock:
            if self._closing is None:
                self._closing = self.factory._loop.submit(self._teardown())
            closing = self._closing
        closing.result()

    # -- the rest of OpenEnv's ResourceSession (the agent owns the loop: nothing is stepped from outside) ---

    def initial_messages(self) -> list[dict[str, Any]]:
        """The row's prompt."""
        return list(self.prompt) if isinstance(self.prompt, list) else [{"role": "user", "content": str(self.prompt)}]

    def list_tools(self) -> list[Any]:
        """None: the agent reaches the episode's tools itself, over MCP."""
        return []

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Refused: the agent calls the episode's tools itself."""
        return ToolResult(error="this session's agent owns its loop; it calls the episode's tools over MCP")

    # -- internals -------------------------------------------------------------------------------------

    def _stop(self) -> None:
        """Cancel the run and wait until it has unwound (the agent killed, the episode closed)."""
        self.factory._loop.run(self._cancel_run())

    async def _cancel_run(self) -> None:
        if not self._task.done():
            self._task.cancel()
        await asyncio.wait([self._task])

    async def _teardown(self) -> None:
        await self._cancel_run()
        if self.failure is None and self.report is None:
            self.failure = Failure("crash", "agent", "closed before the run ended")
        if self.key is not None:
            try:
                await self.factory.proxy.close(self.factory._http, self.key)
            except Exception as exc:  # the proxy is going down with the factory: nothing left to delete
                log.info("could not delete capture session of task %r: %r", self.task.id, exc)
        self.factory._live.discard(self)

    def _lost(self, failure: Failure) -> EpisodeLost:
        return EpisodeLost(
            f"task {self.task.id!r}: {failure.kind} during {failure.stage}: {failure.message}", failure=failure
        )
