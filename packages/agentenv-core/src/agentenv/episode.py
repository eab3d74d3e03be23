"""Episodes: one play of one task.

deploy (in the background, with a deadline) -> turn 1 open -> tool calls (each with a deadline)
-> ``end_turn(reply)`` runs the turn's verifiers and opens the next turn or finishes -> result.

The result is ``scored`` (reward and scores by step id), ``failed`` (the env's fault: reward None,
with the failure's kind and stage) or ``unscored`` (no verdict). A policy's mistake (an unknown
tool, bad arguments, a tool that raises) goes back to the model as the tool's answer and is scored.
Teardown runs exactly once, also on cancellation and after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import inspect
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import procs
from .bundle import BASH_TOOL, Bundle, RewardSpec, Task, effective_tools
from .env import Env, Tool, render_result
from .errors import EnvCrashed
from .plugins import Plugins, plugins
from .schema import argument_errors
from .threads import ToolThreads, default_pool
from .verifiers import Check, ToolRecord, as_score, runs_on_loop
from .wire import EpisodeResult, Failure, Outcome, Purpose, Seconds

__all__ = ["Episode", "EpisodeResult", "Failure", "Seconds", "Step"]

log = logging.getLogger(__name__)

BASH_OUTPUT_LIMIT = 16_000


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


RewardArg = str | RewardSpec | Callable[[Mapping[str, float]], float] | None


class Episode:
    """One play of ``task``: create with the bundle and the task, ``await start()``, then call tools
    and end turns; ``await close()`` always (it tears down and returns the result).

    ``purpose`` says why it is played, for the observers (``agentenv_episode_started``): ``"play"``
    (a policy plays it), ``"check"`` (``agentenv check`` deploys it) or ``"probe"`` (a client lists
    its toolset's tools).
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
        self._scratch: Path | None = None
        self._seconds = {"deploy": 0.0, "tools": 0.0, "scoring": 0.0}

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
        """Create the envs, list the tools, and start the deploy in the background.

        Returns at once; the first tool call or end of turn waits for the deploy.
        """
        if self._started:
            raise RuntimeError("Episode.start() was called twice; create a new Episode for each play")
        self._started = True
        self._plugins.notify_started(self)
        try:
            for name in self.toolset.envs:
                spec = self.bundle.envs[name]
                self.envs[name] = self._plugins.env_kinds()[spec.kind].create(spec, self.bundle.path)
            for name, env in self.envs.items():
                listed = await _maybe_await(env.tools())
                listed = [t if isinstance(t, Tool) else Tool.from_dict(t) for t in listed]
                offered = effective_tools(self.bundle.envs[name], self.toolset, listed)
                self._check_access(name, listed)
                for t in offered:
                    if t.name in self._owner:
                        raise EnvCrashed(
                            f"tool {t.name!r} is offered by both {self._owner[t.name]!r} and {name!r}; "
                            "deny it in one of them"
                        )
                    self._owner[t.name] = name
                    self.tools.append(t)
            if self.toolset.bash:
                self._owner[BASH_TOOL] = BASH_TOOL
                self.tools.append(BASH)
            self._by_name = {t.name: t for t in self.tools}
        except Exception as exc:
            self._fail("deploy", "deploy", f"could not create the envs: {type(exc).__name__}: {exc}")
            return
        self._deploy_task = asyncio.create_task(self._deploy(), name=f"deploy {self.task.id}")

    def _check_access(self, env_name: str, listed: list[Tool]) -> None:
        have = {t.name for t in listed}
        for change in ("deny", "allow"):
            for tool_name in getattr(self.toolset, change).get(env_name, []):
                if tool_name not in have:
                    raise EnvCrashed(
                        f"task {self.task.id!r} {change}s tool {tool_name!r}, which env {env_name!r} "
                        f"does not have; its tools: {', '.join(sorted(have))}"
                    )

    async def _deploy(self) -> None:
        started = time.perf_counter()
        failure: tuple[str, str, str] | None = None
        try:
            async with asyncio.timeout(self.deploy_timeout):
                for env in self.envs.values():
                    await self._run(env.deploy)
                if self.toolset.bash:
                    self._scratch = Path(tempfile.mkdtemp(prefix=f"agentenv-{self.task.id}-"))
        except TimeoutError:
            failure = (
                "deadline",
                "deploy",
                f"deploy took longer than its deadline ({self.deploy_timeout:g} s)",
            )
        except OSError as exc:
            # out of file descriptors, processes or memory: the host's state, not the env's (replayed elsewhere)
            scarce = exc.errno in (errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM)
            failure = ("out_of_resources" if scarce else "deploy", "deploy", f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            failure = ("deploy", "deploy", f"{type(exc).__name__}: {exc}")
        finally:
            self._seconds["deploy"] += time.perf_counter() - started
        if failure is not None:
            self._fail(*failure)

    async def ready(self) -> bool:
        """Wait for the deploy to end: True when the envs are up, False when the episode failed."""
        return await self._deployed()

    async def _deployed(self) -> bool:
        """Wait for the deploy; False when the episode is over (failed)."""
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
        return self._result

    async def _teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        if self._deploy_task is not None and not self._deploy_task.done():
            self._deploy_task.cancel()
            with contextlib.suppress(BaseException):
                await self._deploy_task
        for name, env in self.envs.items():
            try:
                await asyncio.wait_for(self._run(env.teardown), max(self.deploy_timeout, 30.0))
            except Exception:
                log.exception("teardown of env %r (task %r) failed", name, self.task.id)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

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
        if not await self._deployed():
            return Step(done=True, result=self._result)
        started = time.perf_counter()
        failure: tuple[str, str, str] | None = None
        try:
            async with asyncio.timeout(self.tool_timeout):
                if name == BASH_TOOL and self._owner[name] == BASH_TOOL:
                    value = await self._bash(args)
                else:
                    value = await self._invoke(name, args)
        except TimeoutError:
            failure = (
                "deadline",
                "tool",
                f"tool {name!r} did not answer within its deadline ({self.tool_timeout:g} s)",
            )
        except EnvCrashed as exc:
            failure = ("crash", "tool", f"tool {name!r}: {exc}")
        except Exception as exc:  # the tool refused the call: the policy's doing, scored
            value, failure = exc, None
        finally:
            self._seconds["tools"] += time.perf_counter() - started
        if failure is not None:
            self._fail(*failure)
            return Step(done=True, result=self._result)
        if isinstance(value, Exception):
            return self._record(name, args, f"error: {value}", error=True)
        return self._record(name, args, render_result(value), error=False)

    async def _invoke(self, name: str, args: Mapping[str, Any]) -> Any:
        direct = self._direct.get(name)
        if direct is None:
            env = self.envs[self._owner[name]]
            if isinstance(env, Env) and type(env).call is Env.call and name in type(env).tool_methods():
                # the @tool method itself: an async tool runs on the loop, a sync one in a thread
                method = getattr(env, type(env).tool_methods()[name])
                direct = self._direct[name] = (method, inspect.iscoroutinefunction(method))
            else:
                direct = self._direct[name] = (functools.partial(env.call, name), _is_async(env.call))
        method, is_async = direct
        if is_async:
            return await method(**args) if not isinstance(method, functools.partial) else await method(args)
        if isinstance(method, functools.partial):
            return await _maybe_await(await self.threads.run(method, args))
        return await _maybe_await(await self.threads.run(lambda: method(**args)))

    def _record(self, name: str, args: Any, answer: str, *, error: bool) -> Step:
        self.calls.append(ToolRecord(name, dict(args) if isinstance(args, dict) else {}, answer, error))
        return Step(text=answer, error=error)

    async def end_turn(self, reply: str) -> Step:
        """End the open turn with the model's ``reply``: score it, then open the next turn or finish."""
        if self._result is not None:
            return Step(done=True, result=self._result)
        if not await self._deployed():
            return Step(done=True, result=self._result)
        turn = self.task.turns[self.turn]
        started = time.perf_counter()
        check = Check(reply=reply, turn=self.turn, task=self.task, envs=self.envs, calls=tuple(self.calls))
        failure: tuple[str, str, str] | None = None
        where = f"verifiers of turn {self.turn + 1}"
        try:
            async with asyncio.timeout(self.score_timeout):
                for spec in turn.verifiers:
                    where = f"verifier {spec.id!r} ({spec.kind})"
                    verify = self.bundle.verifiers[(self.task.id, spec.id)]
                    self._scores[spec.id] = as_score(await self._run(verify, check), where)
        except TimeoutError:
            failure = (
                "deadline",
                "scoring",
                f"verifiers of turn {self.turn + 1} took longer than {self.score_timeout:g} s",
            )
        except Exception as exc:
            # name the verifier that broke (as_score's own message already does)
            message = str(exc) if str(exc).startswith(where) else f"{where}: {type(exc).__name__}: {exc}"
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
        if not self._scores:
            return self._finish("unscored", reason=f"task {self.task.id!r} has no verifiers")
        missing = [k for k, v in self._scores.items() if v is None]
        if missing:
            return self._finish("unscored", reason=f"no verdict from {', '.join(missing)}")
        scores = {k: float(v) for k, v in self._scores.items() if v is not None}
        try:
            reward = self._combine(scores)
        except Exception as exc:
            return self._finish("failed", failure=Failure("verifier", "scoring", f"reward rule failed: {exc}"))
        return self._finish("scored", reward=reward)

    def _combine(self, scores: Mapping[str, float]) -> float:
        rule = self._reward if self._reward is not None else self.task.reward
        if callable(rule):
            return float(rule(scores))
        spec = RewardSpec(rule=rule) if isinstance(rule, str) else rule
        return float(self._plugins.reward_rule(spec.rule).combine(scores, spec.params))

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Await ``fn`` on the loop when it is async; run it on the pool when it may block."""
        if _is_async(fn):
            return await fn(*args)
        return await _maybe_await(await self.threads.run(fn, *args))

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

    async def _bash(self, args: Mapping[str, Any]) -> str:
        # an owned process (agentenv.procs): its own group, killed with what it started once the command exits
        child = await procs.spawn(["bash", "-c", str(args["command"])], cwd=self._scratch, stdin=False,
                                  stderr_to_stdout=True)  # fmt: skip
        kept: list[bytes] = []
        reader = asyncio.ensure_future(_read_capped(child.stdout, kept, BASH_OUTPUT_LIMIT + 1))
        try:
            await asyncio.shield(child.exited)
            # what it wrote is in the pipe, unless a background child holds the pipe open: stop after a moment
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), 0.2)
        finally:
            reader.cancel()
            await child.end()
        text = b"".join(kept).decode(errors="replace")
        if len(text) > BASH_OUTPUT_LIMIT:
            text = text[:BASH_OUTPUT_LIMIT] + f"\n[output cut at {BASH_OUTPUT_LIMIT} characters]"
        return f"{text}\n[exit code {child.returncode}]"


async def _read_capped(stream: asyncio.StreamReader, kept: list[bytes], limit: int) -> None:
    """Read ``stream`` to its end, keeping its first ``limit`` bytes (the rest is read and dropped)."""
    size = 0
    while chunk := await stream.read(65536):
        if size < limit:
            kept.append(chunk[: limit - size])
        size += len(chunk)


BASH = Tool(
    BASH_TOOL,
    "Run a bash command in this episode's scratch folder; returns its output and exit code.",
    {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command."}},
        "required": ["command"],
        "additionalProperties": False,
    },
)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _is_async(fn: Callable[..., Any]) -> bool:
    return runs_on_loop(fn)
