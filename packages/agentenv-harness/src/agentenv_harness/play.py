"""Playing a task with the agents it deploys: the solver owns its loop, the episode scores each turn.

For each turn the solver is launched (resumed after the first) with the turn's prompt, the policy
endpoint and the episode's tools over MCP; its reply ends the turn, and the task's verifiers score it.
After the first turn a task that deploys a ``user`` agent has it write the solver's next prompt (from
the task's prompt for that turn and the solver's last reply), against the user's own endpoint.

A run that fails is unscored: an agent that cannot be started (``deploy``), exits with an error or never
calls its model (``crash``), a run past its deadline (``deadline``), or an env or server failure (its
own kind). Kinds are rows of ``agentenv.faults``; the stage is ``agent`` for the agents' failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenv.bundle import Bundle, Task
from agentenv.client import Session
from agentenv.engine import AgentDirs, AgentExit, AgentProcess, openings_for
from agentenv.errors import AgentEnvError, EpisodeLost
from agentenv.launch import AgentRequest, Endpoint, McpServer
from agentenv.plugins import AgentKind
from agentenv.sandbox import SandboxUnavailable
from agentenv.specs import AgentSpec, EndpointSpec
from agentenv.wire import EpisodeResult, Failure, Tool

from .mcp import ToolServer

__all__ = ["USER_PROMPT", "Play", "PlayReport"]

log = logging.getLogger("agentenv_harness")

USER_PROMPT = (
    "You play the user in a conversation with an AI assistant. Stay in character and write only your next "
    "message to the assistant.\n\nThe assistant said:\n{reply}\n\nSay next: {instruction}"
)
_TAIL = 600


class _AgentFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure
        super().__init__(failure.message)


@dataclass
class PlayReport:
    """What a play did: the episode's ``result`` (a failed run's is ``failed``), each solver run, the seconds, and
    the folder of the agents' files when it was kept (``keep_workdir``)."""

    result: EpisodeResult
    failure: Failure | None = None
    solver_runs: list[AgentExit] = field(default_factory=list)
    seconds: float = 0.0
    kept: Path | None = None  # the agents' folders, when the play was told to keep them

    @property
    def reward(self) -> float | None:
        """The reward, None unless the episode was scored."""
        return self.result.reward if self.result.outcome == "scored" else None


def _fail(kind: str, message: str) -> _AgentFailed:
    return _AgentFailed(Failure(kind, "agent", message))


class Play:
    """One play of ``task`` by its deployed agents; ``await run()`` returns the report (cancel it to stop).

    The episode is a ``Rollout`` on ``session`` (a server's, or a bundle played in this process: ``agentenv.local``);
    the play closes the session when it ends. ``policy`` is the endpoint the solver calls (the capture proxy while
    training). ``solver`` swaps the task's solver. ``model_calls`` counts the calls the policy endpoint has seen from
    this play (the capture session's): a turn that adds none failed (the agent never reached its model).
    """

    def __init__(
        self,
        bundle: Bundle,
        task: Task,
        session: Session,
        *,
        policy: Endpoint,
        kinds: Mapping[str, AgentKind],
        solver: AgentSpec | None = None,
        deadline: float | None = None,
        model_calls: Callable[[], int] | None = None,
        workdir: Path | None = None,
        keep_workdir: bool = False,
    ) -> None:
        self.bundle = bundle
        self.task = task
        self.session = session
        self.rollout = session.rollout(task.id)
        self.tools: list[Tool] = []
        self.policy = policy
        self.kinds = kinds
        step = task.deployed("solver")
        if solver is None and (step is None or step.agent is None):
            raise AgentEnvError(
                f"task {task.id!r} deploys no solver; add the deploy step {{agent: NAME, role: solver}}"
            )
        self.solver = solver if solver is not None else bundle.agents[step.agent]  # type: ignore[union-attr,index]
        self.deadline = deadline
        self.model_calls = model_calls
        self.root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"agentenv-{task.id[:40]}-"))
        self.keep_workdir = keep_workdir
        self.report: PlayReport | None = None
        self._lost: EpisodeLost | None = None
        self._solver_process: AgentProcess | None = None

    @property
    def solver_pid(self) -> int | None:
        """The process id of the solver run in progress (or of the last one)."""
        return self._solver_process.pid if self._solver_process else None

    async def run(self) -> PlayReport:
        """Play the task to its result. On cancellation the agents are killed and the episode is closed first."""
        began = time.monotonic()
        failure: Failure | None = None
        runs: list[AgentExit] = []
        tools: ToolServer | None = None
        try:
            try:
                async with asyncio.timeout(self.deadline):
                    self.tools = list((await self.rollout.start()).tools)
                    kind = self.kinds[self.solver.kind]
                    mcp: McpServer | None = None
                    if self.tools and kind.mcp:
                        tools = ToolServer(self.tools, self._call, asyncio.get_running_loop())
                        mcp = await asyncio.to_thread(tools.start)
                    await self._turns(kind, mcp, runs)
            except TimeoutError:
                failure = Failure("deadline", "agent", f"the run took longer than its deadline ({self.deadline:g} s)")
            except EpisodeLost as exc:
                failure = exc.failure
            except _AgentFailed as exc:
                failure = exc.failure
        finally:
            if tools is not None:
                await asyncio.to_thread(tools.stop)
            try:
                result = await self.rollout.finish()
            finally:
                await self.session.close()
            if failure is not None and result.outcome != "failed":
                result = EpisodeResult(
                    task_id=self.task.id,
                    outcome="failed",
                    failure=failure,
                    reason=failure.message,
                    scores=dict(result.scores),
                    turns=result.turns,
                    seconds=result.seconds,
                )
            kept = self.root if self.keep_workdir else None
            self.report = PlayReport(result, failure or result.failure, runs, time.monotonic() - began, kept)
            if not self.keep_workdir:
                await asyncio.to_thread(shutil.rmtree, self.root, True)
        return self.report

    async def _turns(self, kind: AgentKind, mcp: McpServer | None, runs: list[AgentExit]) -> None:
        prompt = self.task.turns[0].prompt
        for turn in range(len(self.task.turns)):
            before = self.model_calls() if self.model_calls else 0
            exit_ = await self._run_solver(kind, turn, prompt, mcp)
            runs.append(exit_)
            if self._lost is not None:
                raise self._lost
            if exit_.code != 0 and exit_.breach is not None:  # the policy's doing: its reply so far is scored
                log.info("solver %r hit its %s on turn %d", self.solver.name, exit_.breach, turn + 1)
            elif exit_.code != 0:
                tail = exit_.output[-_TAIL:]
                raise _fail(
                    "crash",
                    f"solver {self.solver.name!r} ({self.solver.kind}) exited with {exit_.code} on "
                    f"turn {turn + 1}: {tail}",
                )
            if self.model_calls is not None and self.model_calls() == before:
                raise _fail(
                    "crash",
                    f"solver {self.solver.name!r} ({self.solver.kind}) made no model call through "
                    f"the capture proxy on turn {turn + 1} (a wrong base URL, an unresolved model or a "
                    f"refused key); its output: {exit_.output[-_TAIL:]}",
                )
            following = await self.rollout.end_turn(exit_.reply)
            if following.done:
                return
            prompt = await self._user_says(turn + 1, following.prompt or "", exit_.reply)

    async def _run_solver(self, kind: AgentKind, turn: int, prompt: str, mcp: McpServer | None) -> AgentExit:
        dirs = AgentDirs(self.root / "solver")
        request = AgentRequest(
            spec=self.solver,
            role="solver",
            prompt=prompt,
            system=self.task.system,
            turn=turn,
            endpoint=Endpoint(self.policy.base_url, self.policy.model, self.policy.api_key, kind.dialect),
            workdir=dirs.work,
            home=dirs.home,
            bundle_dir=self.bundle.path.resolve(),
            mcp=mcp,
            tools=tuple(self.tools),
        )
        self._solver_process = await self._launch(kind, request, dirs, "solver")
        return await self._wait(self._solver_process, "solver")

    async def _user_says(self, turn: int, instruction: str, reply: str) -> str:
        """The solver's prompt for ``turn``: the task's own, or what the task's user simulator writes from it."""
        step = self.task.deployed("user")
        if step is None or step.agent is None:
            return instruction
        spec = self.bundle.agents[step.agent]
        kind = self.kinds[spec.kind]
        if not isinstance(step.endpoint, EndpointSpec):
            raise _fail("deploy", f"the user simulator of task {self.task.id!r} points at the policy")
        try:
            endpoint = Endpoint.of(step.endpoint)
        except AgentEnvError as exc:
            raise _fail("deploy", f"user simulator {spec.name!r}: {exc}") from None
        dirs = AgentDirs(self.root / "user")
        request = AgentRequest(
            spec=spec,
            role="user",
            prompt=USER_PROMPT.format(reply=reply, instruction=instruction),
            system="",
            turn=turn - 1,
            endpoint=Endpoint(endpoint.base_url, endpoint.model, endpoint.api_key, kind.dialect),
            workdir=dirs.work,
            home=dirs.home,
            bundle_dir=self.bundle.path.resolve(),
        )
        exit_ = await self._wait(await self._launch(kind, request, dirs, "user"), "user")
        if exit_.code != 0 or not exit_.reply:
            raise _fail(
                "crash",
                f"user simulator {spec.name!r} exited with {exit_.code} on turn {turn + 1} and "
                f"no message: {exit_.output[-_TAIL:]}",
            )
        return exit_.reply

    async def _launch(self, kind: AgentKind, request: AgentRequest, dirs: AgentDirs, role: str) -> AgentProcess:
        try:
            launch = kind.launch(request)
        except Exception as exc:
            raise _fail(
                "deploy",
                f"{role} {request.spec.name!r} ({kind.name}) could not be launched: {type(exc).__name__}: {exc}",
            ) from None
        try:
            openings = openings_for(request)
        except AgentEnvError as exc:
            raise _fail("deploy", str(exc)) from None
        return AgentProcess(
            launch,
            dirs,
            name=role,
            pass_env=request.spec.pass_env,
            sandbox=request.spec.sandbox,
            openings=openings,
            bundle_dir=request.bundle_dir,
        )

    async def _wait(self, process: AgentProcess, role: str) -> AgentExit:
        try:
            return await process.run()
        except SandboxUnavailable as exc:
            raise _fail("deploy", f"{role}: {exc}") from None
        except OSError as exc:
            argv0 = process.launch.argv[0] if process.launch.argv else "?"
            raise _fail("deploy", f"{role} {argv0!r} could not be started: {exc.strerror or exc}") from None

    async def _call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        """A tool call of the solver, over MCP: the episode's call; a lost episode also ends the solver's run."""
        if self._lost is not None:
            return self._lost.brief(), True
        try:
            answer = await self.rollout.call(tool, args)
        except EpisodeLost as exc:
            self._lost = exc
            if self._solver_process is not None:
                with contextlib.suppress(Exception):
                    await self._solver_process.kill()
            return exc.brief(), True
        return answer.text, answer.error
