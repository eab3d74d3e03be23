"""``agentenv serve BUNDLE --ors``: the bundle as an Open Reward Standard server, for the ``openreward`` SDK's client
(TRL's ``trl.experimental.openreward.OpenRewardSpec``, SkyRL, OpenEnv's ORS sources).

The protocol is the ``openreward`` package's own: the bundle is adapted to its ``Environment`` class and served by
its ``Server`` (FastAPI), not written again here. An ORS session plays one agentenv episode (``agentenv.Episode``):

- ``list_splits``/``list_tasks``: the bundle's splits, one task spec ``{"task_id", "split"}`` per task.
- ``get_prompt`` (``/prompt``): the system text, then the first turn's prompt; ``get_messages`` the same, by role.
- tools (``/task_tools``): the task's toolset and ``end_turn(reply)``, which scores the turn and answers the next
  prompt, or ends the episode.
- rewards: only the answer that ends the episode carries one (``finished``), the reward the bundle's rule gives.
  An episode the env fails (the fault table's rows) ends with ``reward`` None and ``finished``, its fault in
  ``metadata`` (``outcome``, ``fault``, ``stage``): TRL's ORS environment keeps the last non-null reward, so the
  rollout's reward is None, never 0. An unscored episode ends the same way with ``outcome: unscored``.
- access: every request must carry the server's token as ``X-API-Key`` (the header the SDK sends its
  ``OPENREWARD_API_KEY`` in) when one is set; ``--max-concurrent-envs`` episodes at once (a session past it fails
  its setup, and its tool calls are answered as errors: no reward).
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

from agentenv.bundle import Bundle, Task
from agentenv.engine import Episode, Step
from agentenv.errors import AgentEnvError

__all__ = ["ORS_EXTRA", "ors_app", "run_ors"]

ORS_EXTRA = "pip install 'agentenv-server[ors]'"
END_TURN = {
    "name": "end_turn",
    "description": "Answer the current question and end your turn. Returns the next question, or says the episode "
    "is over.",
    "input_schema": {
        "type": "object",
        "properties": {"reply": {"type": "string", "description": "Your answer to the current question."}},
        "required": ["reply"],
    },
}


def ors_app(
    bundle: Bundle,
    *,
    token: str | None,
    max_concurrent_envs: int = 64,
    tool_timeout: float = 60.0,
    reset_timeout: float = 300.0,
    reward: str | None = None,
) -> Any:
    """The ORS server of ``bundle`` (a FastAPI app): ``openreward.environments.Server`` over an adapter class."""
    try:
        from openreward.environments import Environment, Server, Split, ToolSpec
    except ImportError:
        raise AgentEnvError(f"agentenv serve --ors needs the openreward SDK: {ORS_EXTRA}") from None
    splits = [Split(name=s, type=s if s in ("train", "validation", "test") else "validation") for s in bundle.splits]
    episode_options = {"tool_timeout": tool_timeout, "deploy_timeout": reset_timeout, "reward": reward}
    adapter = _adapter(Environment, ToolSpec, bundle, splits, max_concurrent_envs, episode_options)
    app = Server([adapter], return_errors="exception").app
    if token is not None:
        app.add_middleware(_TokenCheck, token=token)
    return app


def _adapter(
    base: type,
    tool_spec: type,
    bundle: Bundle,
    splits: list[Any],
    max_concurrent_envs: int,
    episode_options: dict[str, Any],
) -> Any:
    """The ``Environment`` subclass (``base``) that plays ``bundle``'s episodes, ``max_concurrent_envs`` at once."""
    capacity = asyncio.Semaphore(max_concurrent_envs)

    class BundleEnvironment(base):  # type: ignore[valid-type,misc]
        """One ORS session: one episode of the task its spec names."""

        def __init__(self, task_spec: Any = {}, secrets: dict[str, str] = {}) -> None:  # noqa: B006 (the base's)
            super().__init__(task_spec, secrets)
            self.task: Task = _task(bundle, task_spec)
            self.episode = Episode(bundle, self.task, **episode_options)
            self._held = False
            self._start: asyncio.Task[None] | None = None

        @classmethod
        def name(cls) -> str:
            return bundle.name

        @classmethod
        def list_splits(cls) -> list[Any]:
            return splits

        @classmethod
        def list_tasks(cls, split: str) -> list[dict[str, Any]]:
            return [{"task_id": t.id, "split": t.split} for t in bundle.split(split)]

        @classmethod
        def list_tools(cls) -> Any:
            # the task's own tools come with its session (/task_tools)
            return super().list_tools().model_copy(update={"tools": [tool_spec(**END_TURN)]})

        async def _started(self) -> None:
            if self._start is None:
                self._start = asyncio.ensure_future(self.episode.start())
            await asyncio.shield(self._start)

        async def setup(self) -> None:
            if capacity.locked():  # refused at once, as the agentenv face refuses: the client decides to wait
                raise RuntimeError(f"at capacity: {max_concurrent_envs} episodes at once (--max-concurrent-envs)")
            await capacity.acquire()
            self._held = True
            await self._started()
            await self.episode.ready()  # a failed deploy is the episode's result, said at the next call

        async def teardown(self) -> None:
            try:
                if self._start is not None:
                    await self.episode.close()
            finally:
                if self._held:
                    self._held = False
                    capacity.release()

        def get_prompt(self) -> list[Any]:
            return _prompt(self.task)

        def get_messages(self) -> list[Any]:
            return _messages(self.task)

        async def list_task_tools(self) -> Any:
            from openreward.environments import ListToolsOutput

            await self._started()
            return ListToolsOutput(tools=[tool_spec(**_spec(t)) for t in self.episode.tools])

        async def _call_tool(self, name: str, input: Any) -> Any:
            if self._episode_finished:  # the end was said once, with its reward: nothing is scored twice
                return self._episode_finished_error(name)
            step = await _play(self.episode, name, input)
            self._episode_finished = step.result is not None
            return _answer(step)

    return BundleEnvironment


def _prompt(task: Task) -> list[Any]:
    """The ORS prompt of ``task``: its system text, then its first turn's prompt, as one text block."""
    from openreward.environments import TextBlock

    text = f"{task.system}\n\n{task.turns[0].prompt}" if task.system else task.turns[0].prompt
    return [TextBlock(text=text)]


def _messages(task: Task) -> list[Any]:
    """The ORS messages of ``task``: its system text (where it has one) and its first turn's prompt, by role."""
    from openreward.environments import Message, TextBlock

    first = Message(role="user", blocks=[TextBlock(text=task.turns[0].prompt)])
    return [Message(role="system", blocks=[TextBlock(text=task.system)]), first] if task.system else [first]


async def _play(episode: Episode, name: str, input: Any) -> Step:
    """The step of tool call ``name(input)``: ``end_turn`` ends the turn with its reply, any other name is the
    task's tool; an ``end_turn`` without a string ``reply`` is answered as an error."""
    if name == "end_turn":
        reply = input.get("reply") if isinstance(input, dict) else None
        if not isinstance(reply, str):
            return Step(text="end_turn takes one argument, reply (a string): your answer", error=True)
        return await episode.end_turn(reply)
    return await episode.call(name, input if isinstance(input, dict) else {})


def _task(bundle: Bundle, spec: Any) -> Task:
    task_id = spec.get("task_id") if isinstance(spec, dict) else None
    if not isinstance(task_id, str):
        raise ValueError(f"a task spec names its task as task_id (one of /{bundle.name}/tasks); got {spec!r}")
    try:
        return bundle.task(task_id)
    except KeyError as exc:
        raise ValueError(str(exc).strip("\"'")) from None


def _spec(tool: Any) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def _answer(step: Step) -> Any:
    """An episode's answer as ORS says it: text, and at the end of the episode its reward (None: not trained on)."""
    from openreward.environments import RunToolOutput, RunToolSuccess, TextBlock, ToolOutput

    result = step.result
    if result is None:
        return RunToolOutput(RunToolSuccess(output=ToolOutput(blocks=[TextBlock(text=step.text)])))
    metadata: dict[str, Any] = {"outcome": result.outcome, "scores": dict(result.scores)}
    if result.failure is not None:
        metadata |= {"fault": result.failure.kind, "stage": result.failure.stage}
        text = f"The episode is over: the environment failed ({result.failure.kind}): {result.failure.message}"
    elif result.outcome == "unscored":
        text = f"The episode is over, unscored: {result.reason}"
    else:
        text = "The episode is over."
    output = ToolOutput(blocks=[TextBlock(text=text)], reward=result.reward, finished=True, metadata=metadata)
    return RunToolOutput(RunToolSuccess(output=output))


class _TokenCheck:
    """Every HTTP request must carry the token as ``X-API-Key`` (the openreward SDK's header); else 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"x-api-key", b"")
            if not hmac.compare_digest(given, self.token):
                body = b'{"detail": "send the server\'s token as X-API-Key (OPENREWARD_API_KEY)"}'
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]}
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def run_ors(args: Any, token: str | None) -> int:
    """``agentenv serve BUNDLE --ors``: serve the ORS face until SIGTERM or Ctrl-C (episodes torn down)."""
    import sys

    import uvicorn
    from agentenv.bundle import load_bundle
    from agentenv.sandbox import procs

    from .serving import listen, refuse_passing_the_token, sandbox_note

    bundle = load_bundle(args.bundle)
    refuse_passing_the_token(bundle, args.token_var)
    note = sandbox_note(bundle, args.sandbox)
    capacity = args.max_concurrent_envs or 64
    app = ors_app(
        bundle,
        token=token,
        max_concurrent_envs=capacity,
        tool_timeout=args.tool_timeout,
        reset_timeout=args.reset_timeout,
        reward=args.reward,
    )
    sock = listen(args.host, args.port)
    procs.own_all_children()
    auth = f"token from ${args.token_var} as X-API-Key" if token else "no token"
    print(f"agentenv: {note}", file=sys.stderr, flush=True)
    print(
        f"agentenv: serving bundle {bundle.name!r} as an Open Reward Standard server on "
        f"http://{args.host}:{sock.getsockname()[1]} (environment {bundle.name!r}; {capacity} episodes at once) "
        f"with {auth}",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=args.shutdown_grace)
    uvicorn.Server(config).run(sockets=[sock])
    return 0
