"""Episodes: one play of one task.

deploy (in the background, with a deadline) -> turn 1 open -> tool calls (each with a deadline)
-> ``end_turn(reply)`` runs the turn's verifiers and opens the next turn or finishes -> result.

The result is ``scored`` (reward and scores by step id), ``failed`` (the env's fault: reward None,
with the failure's kind and stage) or ``unscored`` (no verdict). A policy's mistake (an unknown
tool, bad arguments, a tool that raises ``ToolError``) goes back to the model as the tool's answer and is
scored; any other exception from a tool, a deploy or a verifier is the env's (``crash``, ``deploy``,
``verifier``): the episode fails, naming the env and the author's file and line, and the traceback is logged
and kept (``Episode.traceback``).
Teardown runs exactly once, also on cancellation and after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentenv.bundle import Bundle, Task
from agentenv.engine.blame import blame
from agentenv.engine.deployment import Deployment, deploy_failure
from agentenv.engine.scoring import RewardArg, verdict, verifier_name
from agentenv.engine.threads import ToolThreads, default_pool
from agentenv.engine.verifiers import Check, ToolRecord, as_score, runs_on_loop
from agentenv.env import Env, Tool, render_result
from agentenv.errors import EnvCrashed, ToolError
from agentenv.plugins import Plugins, plugins
from agentenv.schema import argument_errors
from agentenv.wire import Attempt, EpisodeResult, Failure, Outcome, Purpose, Seconds

__all__ = ["Episode", "EpisodeResult", "Failure", "RewardArg", "Seconds", "Step"]

log = logging.getLogger("agentenv.episode")  # the name users configure; kept when the module moved


@dataclass(frozen=True)
class Step:
    """What an episode answers to a tool call or an end of turn.

    ``text`` is the tool's answer or the next turn's prompt; ``error`` marks a tool answer that is an
    error message (the policy's mistake); ``done`` means the episode is over and ``result`` says how.
    """

    text: str = ""
    error: bool = False
    done: bool = False
    result: EpisodeResult | None = None


class Episode:
    """One play of ``task``: create with the bundle and the task, ``await start()``, then call tools
    and end turns; ``await close()`` always (it tears down and returns the result).

    ``purpose`` says why it is played, for the observers (``agentenv_episode_started``): ``"play"``
    (a policy plays it), ``"check"`` (``agentenv check`` deploys it) or ``"probe"`` (a client lists
    its toolset's tools). ``attempt`` is which attempt of which rollout it is (its client says). ``on_end(episode,
    result)`` is called once it is torn down (``agentenv.record.Recorder.episode_ended`` writes its record); what it
    raises is logged, never the episode's.
    ``deployment``: the toolset's envs deployed ahead of the episode (``agentenv.engine.deployment``),
    never played before; the episode then runs only the task's setup step, and tears the deployment down.
    """

    def __init__(
        self,
        bundle: Bundle,
        task: Task,
        *,
        tool_timeout: float = 60.0,
        deploy_timeout: float = 300.0,
        score_timeout: float | None = None,
        reward: RewardArg = None,
        episode_id: str | None = None,
        plugin_set: Plugins | None = None,
        purpose: Purpose = "play",
        threads: ToolThreads | None = None,
        attempt: Attempt | None = None,
        on_end: Callable[[Episode, EpisodeResult], None] | None = None,
        deployment: Deployment | None = None,
    ) -> None:
        self.bundle = bundle
        self.threads = threads or default_pool()  # sync tools, deploys, teardowns and verifiers run here
        self.purpose: Purpose = purpose
        self.task = task
        self.episode_id = episode_id or uuid.uuid4().hex
        self.tool_timeout = tool_timeout
        self.deploy_timeout = deploy_timeout
        self.score_timeout = score_timeout if score_timeout is not None else max(tool_timeout, 30.0)
        self.toolset = bundle.toolset(task)
        self._plugins = plugin_set or bundle.plugin_set or plugins()
        self._reward = reward
        self.deployment = deployment  # deployed ahead (its envs are this episode's alone), or made at start
        self.envs: dict[str, Any] = {}
        self.tools: list[Tool] = []
        self._owner: dict[str, str] = {}
        self._by_name: dict[str, Tool] = {}
        self._direct: dict[str, tuple[Callable[..., Any], bool]] = {}
        self.turn = 0
        self.calls: list[ToolRecord] = []
        self._scores: dict[str, float | None] = {}
        self._result: EpisodeResult | None = None
        self._deploy_task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        self._closing: asyncio.Future[EpisodeResult] | None = None
        self._torn_down = False
        self._seconds = {"deploy": 0.0, "tools": 0.0, "scoring": 0.0}
        self.traceback: str | None = None  # of the exception that failed the episode, when one did
        self.attempt = attempt
        self._on_end = on_end
        self.replies: list[str] = []  # each ended turn's reply
        self.began = time.time()

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def result(self) -> EpisodeResult | None:
        """The result once the episode is over (scored, failed or unscored), else None."""
        return self._result

    @property
    def deployed(self) -> bool:
        """True once every env deployed (and the episode has not failed)."""
        task = self._deploy_task
        return task is not None and task.done() and self._result is None

    @property
    def closed(self) -> bool:
        """True once the episode was torn down."""
        return self._closed

    @property
    def system(self) -> str:
        """The task's system prompt."""
        return self.task.system

    @property
    def prompt(self) -> str:
        """The open turn's prompt (the last one once the episode is over)."""
        return self.task.turns[min(self.turn, len(self.task.turns) - 1)].prompt

    async def start(self) -> None:
        """Create the envs (or take the deployment given), list the tools, and start the deploy in the background.

        Returns at once; the first tool call or end of turn waits for the deploy (and the task's setup).
        """
        if self._started:
            raise RuntimeError("Episode.start() was called twice; create a new Episode for each play")
        self._started = True
        self._plugins.notify_started(self)
        given = self.deployment
        try:
            if given is None:
                self.deployment = Deployment(
                    self.bundle,
                    self.task,
                    plugin_set=self._plugins,
                    threads=self.threads,
                    teardown_timeout=self.deploy_timeout,
                )
                await self.deployment.create()
            elif given.toolset_key != self.bundle.toolset_key(self.task):
                raise ValueError(f"the deployment given is of toolset {given.toolset_key}, not the task's")
        except Exception as exc:
            self._fail("deploy", "deploy", f"could not create the envs: {type(exc).__name__}: {exc}")
            return
        deployment = self.deployment
        self.envs, self.tools, self._owner = deployment.envs, deployment.tools, deployment.owner
        self._by_name = {t.name: t for t in self.tools}
        self._deploy_task = asyncio.create_task(self._deploy(deployment), name=f"deploy {self.task.id}")

    async def _deploy(self, deployment: Deployment) -> None:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.deploy_timeout):
                if not deployment.deployed:
                    await deployment.deploy()
                await deployment.setup(self.task)
        except Exception as exc:
            kind, stage, message = deploy_failure(exc, self.deploy_timeout, deployment.current)
            if kind != "deadline":  # the env's own error: blamed on its line in the bundle, its traceback kept
                message = self._blamed(f"env {deployment.current!r}", exc)
            self._fail(kind, stage, message)
        finally:
            self._seconds["deploy"] += time.perf_counter() - started

    async def ready(self) -> bool:
        """Wait for the deploy to end: True when the envs are up, False when the episode is over (failed)."""
        if not self._started:
            raise RuntimeError("call Episode.start() first")
        if self._deploy_task is not None and not self._deploy_task.done():
            await asyncio.shield(self._deploy_task)
        return self._result is None

    async def close(self) -> EpisodeResult:
        """End the episode: tear every env down exactly once and return the result.

        An episode closed before its last turn ended is ``unscored``. Safe to call more than once
        and from a cancelled task: the teardown itself is shielded from cancellation.
        """
        # One closing task, shielded: a close() cancelled mid-teardown leaves it running, and every
        # later close() waits for that same task (so it returns only after the teardown, with a result).
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.ensure_future(self._close())
        return await asyncio.shield(self._closing)

    async def _close(self) -> EpisodeResult:
        await self._teardown()
        if self._result is None:
            self._result = self._finish(
                "unscored",
                reason=f"ended before its last turn (turn {self.turn + 1} of {len(self.task.turns)})",
            )
        self._plugins.notify_finished(self, self._result)
        if self._on_end is not None:
            try:
                self._on_end(self, self._result)
            except Exception:  # what watches an episode (its record, metrics) never fails it
                log.exception("on_end of episode %s (task %r) failed", self.episode_id, self.task.id)
        return self._result

    async def _teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        if self._deploy_task is not None and not self._deploy_task.done():
            self._deploy_task.cancel()
            with contextlib.suppress(BaseException):
                await self._deploy_task
        if self.deployment is not None:  # a deployment given and never started is torn down too: it is this one's
            await self.deployment.teardown()

    # -- playing -----------------------------------------------------------------------------

    async def call(self, name: str, args: Any) -> Step:
        """Run tool ``name``. Unknown tools and bad arguments are answered as errors, not raised."""
        if self._result is not None:
            return Step(done=True, result=self._result)
        if not self._started:  # else every tool would be answered as unknown: there are none yet
            raise RuntimeError("call Episode.start() first")
        tool = self._by_name.get(name)
        if tool is None:
            available = ", ".join(t.name for t in self.tools) or "none"
            return self._record(name, args, f"unknown tool {name!r}; the tools are: {available}", error=True)
        problem = argument_errors(name, tool.parameters, args)
        if problem is not None:
            return self._record(name, args, problem, error=True)
        if not await self.ready():
            return Step(done=True, result=self._result)
        started = time.perf_counter()
        failure: tuple[str, str, str] | None = None
        try:
            async with asyncio.timeout(self.tool_timeout):
                value = await self._invoke(name, args)
        except TimeoutError:
            said = f"tool {name!r} did not answer within its deadline ({self.tool_timeout:g} s)"
            failure = ("deadline", "tool", said)
        except EnvCrashed as exc:
            failure = ("crash", "tool", f"tool {name!r}: {exc}")
        except ToolError as exc:  # the tool refused the call: the policy's doing, scored
            value, failure = exc, None
        except Exception as exc:  # anything else is a bug of the env's: never the policy's zero
            said = self._blamed(f"tool {name!r} of env {self._owner[name]!r}", exc)
            failure = ("crash", "tool", f"{said}; a tool refuses a call by raising agentenv.ToolError")
        finally:
            took = time.perf_counter() - started
            self._seconds["tools"] += took
        if failure is not None:
            self._fail(*failure)
            return Step(done=True, result=self._result)
        if isinstance(value, Exception):
            return self._record(name, args, f"error: {value}", error=True, seconds=took)
        return self._record(name, args, render_result(value), error=False, seconds=took)

    async def _invoke(self, name: str, args: Mapping[str, Any]) -> Any:
        direct = self._direct.get(name)
        if direct is None:
            env = self.envs[self._owner[name]]
            if isinstance(env, Env) and type(env).call is Env.call and name in type(env).tool_methods():
                # the @tool method itself: an async tool runs on the loop, a sync one in a thread
                method = getattr(env, type(env).tool_methods()[name])
                direct = self._direct[name] = (method, inspect.iscoroutinefunction(method))
            else:
                direct = self._direct[name] = (functools.partial(env.call, name), runs_on_loop(env.call))
        method, is_async = direct
        if is_async:
            return await method(**args) if not isinstance(method, functools.partial) else await method(args)
        if isinstance(method, functools.partial):
            return await _maybe_await(await self.threads.run(method, args))
        return await _maybe_await(await self.threads.run(lambda: method(**args)))

    def _record(self, name: str, args: Any, answer: str, *, error: bool, seconds: float = 0.0) -> Step:
        kept = dict(args) if isinstance(args, dict) else {}
        self.calls.append(ToolRecord(name, kept, answer, error, seconds, self.turn))
        return Step(text=answer, error=error)

    async def end_turn(self, reply: str) -> Step:
        """End the open turn with the model's ``reply``: score it, then open the next turn or finish."""
        if self._result is not None:
            return Step(done=True, result=self._result)
        if not await self.ready():
            return Step(done=True, result=self._result)
        turn = self.task.turns[self.turn]
        self.replies.append(reply)
        started = time.perf_counter()
        check = Check(reply, self.turn, self.task, self.envs, tuple(self.calls), asyncio.get_running_loop())
        failure: tuple[str, str, str] | None = None
        where = f"verifiers of turn {self.turn + 1}"
        try:
            async with asyncio.timeout(self.score_timeout):
                for spec in turn.verifiers:
                    where = verifier_name(spec)
                    verify = self.bundle.verifiers[(self.task.id, spec.id)]
                    self._scores[spec.id] = as_score(await self._run(verify, check), where)
        except TimeoutError:
            said = f"verifiers of turn {self.turn + 1} took longer than {self.score_timeout:g} s"
            failure = ("deadline", "scoring", said)
        except Exception as exc:
            # name the verifier that broke (as_score's own message already does)
            message = str(exc) if str(exc).startswith(where) else self._blamed(where, exc)
            failure = ("verifier", "scoring", message)
        finally:
            self._seconds["scoring"] += time.perf_counter() - started
        if failure is not None:
            self._fail(*failure)
        if self._result is not None:
            return Step(done=True, result=self._result)
        self.turn += 1
        if self.turn < len(self.task.turns):
            return Step(text=self.task.turns[self.turn].prompt)
        self._result = self._score()
        await self.close()
        return Step(done=True, result=self._result)

    def _score(self) -> EpisodeResult:
        found = verdict(self.task, self._scores, self._reward, self._plugins)
        return self._finish(found.outcome, reward=found.reward, failure=found.failure, reason=found.reason)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Await ``fn`` on the loop when it is async; run it on the pool when it may block."""
        if runs_on_loop(fn):
            return await fn(*args)
        return await _maybe_await(await self.threads.run(fn, *args))

    def _blamed(self, who: str, exc: BaseException) -> str:
        """``who: KeyError: 'e99' (db_env.py:14 in lookup)``, logged with the traceback, which the episode keeps."""
        found = blame(exc, self.bundle.path)
        message = f"{who}: {found.said()}"
        self.traceback = found.text
        log.error("task %r, episode %s: %s\n%s", self.task.id, self.episode_id, message, found.text.rstrip())
        return message

    def abandon(self, kind: str, message: str) -> None:
        """Fail the episode from outside (its client went away mid-call, the server is shutting down).

        ``kind`` is a row of the fault table; ``close()`` then tears it down as usual.
        """
        self._fail(kind, "session", message)

    def _fail(self, kind: str, stage: str, message: str) -> None:
        if self._result is None:
            self._result = self._finish("failed", failure=Failure(kind, stage, message))

    def _finish(
        self,
        outcome: Outcome,
        *,
        reward: float | None = None,
        failure: Failure | None = None,
        reason: str = "",
    ) -> EpisodeResult:
        return EpisodeResult(
            task_id=self.task.id,
            outcome=outcome,
            reward=reward if outcome == "scored" else None,
            scores=dict(self._scores),
            failure=failure,
            reason=reason or (failure.message if failure else ""),
            turns=min(self.turn + (1 if outcome == "failed" else 0), len(self.task.turns)),
            seconds=Seconds(**self._seconds),
        )


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
