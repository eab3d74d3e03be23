"""The session layer: the one client every integration uses to reach an agentenv server.

``Shared`` holds the connection settings; ``Session`` (async) and ``SyncSession`` play episodes
over OpenEnv's own client (``GenericEnvClient`` on ``/ws``) and enforce deadlines on the client side
too; ``read_tasks``, ``probe`` and ``tasks_and_tools`` read the server's Task API. Errors are typed
(``agentenv.errors``) and say what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .env import Tool
from .episode import EpisodeResult
from .errors import (
    AgentEnvError,
    AtCapacity,
    EpisodeFailed,
    ProtocolError,
    ServerUnavailable,
    ToolDeadline,
    Unauthorized,
    UnknownSplit,
    UnknownTask,
)
from .wire import Code, Event, Op, parse_coded

__all__ = [
    "ServerInfo",
    "Session",
    "Shared",
    "Started",
    "SyncSession",
    "TaskRow",
    "ToolAnswer",
    "TurnAnswer",
    "probe",
    "read_tasks",
    "run_sync",
    "tasks_and_tools",
]

log = logging.getLogger("agentenv.session")
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Settings and records
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shared:
    """Connection settings every integration shares.

    ``url``: the server (``http://host:port``). ``token_var``: the environment variable holding the
    bearer token; it is read when used, so the token never sits in a config file. ``tool_timeout``:
    the deadline of a tool call; ``reset_timeout``: of opening a session, a deploy, and an end of turn
    (the last runs the verifiers). ``waits_for_server``: wait out a server that refuses connections or
    is at capacity, within ``reset_timeout``. ``margin``: extra seconds the client allows past the
    server's own deadlines, so the server's verdict normally arrives first.
    """

    url: str
    token_var: str | None = None
    tool_timeout: float = 60.0
    reset_timeout: float = 300.0
    waits_for_server: bool = False
    margin: float = 10.0

    def __post_init__(self) -> None:
        if not re.match(r"^(https?|wss?)://[^/\s]+", self.url):
            raise AgentEnvError(f"server URL {self.url!r} is not of the form http://host:port; fix the URL")
        object.__setattr__(self, "url", self.url.rstrip("/"))

    def token(self) -> str | None:
        """The bearer token from ``$token_var`` (None without a variable); refuses an unset one."""
        if self.token_var is None:
            return None
        token = os.environ.get(self.token_var)
        if not token:
            raise Unauthorized(
                f"${self.token_var} is not set or empty, but the token for {self.url} is read from it: "
                f"export {self.token_var}=<token the server was started with>"
            )
        return token

    def headers(self) -> dict[str, str]:
        """The HTTP headers every request carries (the Authorization header when a token is set)."""
        token = self.token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    @property
    def http_url(self) -> str:
        """The server's base URL over HTTP(S)."""
        return re.sub(r"^ws", "http", self.url)


@dataclass(frozen=True)
class TaskRow:
    """A task as the server's Task API lists it."""

    id: str
    split: str
    index: int
    system: str
    prompt: str
    turns: int
    toolset_key: str
    toolset: dict[str, Any] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)  # every verifier's step id, in turn order

    def messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages: the system prompt (when there is one), then the first prompt."""
        out = [{"role": "system", "content": self.system}] if self.system else []
        return [*out, {"role": "user", "content": self.prompt}]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskRow:
        """Read a Task API row."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class ServerInfo:
    """What ``probe`` learns: the bundle's name and description, agentenv's version, and each split's size."""

    url: str
    name: str
    description: str
    version: str
    splits: dict[str, int]


@dataclass(frozen=True)
class Started:
    """A started episode: its task, prompts and tools (the deploy may still be running)."""

    episode_id: str
    task_id: str
    split: str
    index: int
    system: str
    prompt: str
    turns: int
    tools: list[Tool]
    toolset_key: str

    def messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages."""
        out = [{"role": "system", "content": self.system}] if self.system else []
        return [*out, {"role": "user", "content": self.prompt}]


@dataclass(frozen=True)
class ToolAnswer:
    """A tool's answer; ``error`` marks an error message (the policy's mistake, scored)."""

    text: str
    error: bool


@dataclass(frozen=True)
class TurnAnswer:
    """After an end of turn: the next turn's prompt, or (when the episode is over) its result."""

    prompt: str | None
    result: EpisodeResult | None

    @property
    def done(self) -> bool:
        """True when the episode is over."""
        return self.result is not None


# ---------------------------------------------------------------------------------------------
# OpenEnv's client, imported without its web UI
# ---------------------------------------------------------------------------------------------


def _client_class() -> Any:
    """OpenEnv's ``GenericEnvClient`` (imported on first use, without OpenEnv's web UI)."""
    from ._openenv import import_openenv

    import_openenv()
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient


# ---------------------------------------------------------------------------------------------
# Errors from OpenEnv's client, as agentenv's typed errors
# ---------------------------------------------------------------------------------------------

_SERVER_ERROR = re.compile(r"^Server error: (.*) \(code: ([A-Z_]+)\)$", re.DOTALL)


def _translate(exc: BaseException, shared: Shared) -> AgentEnvError:
    """One typed error, with what to do, for whatever OpenEnv's client raised."""
    if isinstance(exc, AgentEnvError):
        return exc
    if isinstance(exc, RuntimeError) and (m := _SERVER_ERROR.match(str(exc))):
        message, frame_code = m.group(1), m.group(2)
        code, text = parse_coded(message)
        if frame_code == Code.CAPACITY:
            return AtCapacity(f"{shared.url}: {text}")
        if code == Code.UNKNOWN_SPLIT:
            return UnknownSplit(f"{shared.url}: {text}")
        if code == Code.UNKNOWN_TASK:
            return UnknownTask(f"{shared.url}: {text}")
        if code == Code.IDLE:
            return ServerUnavailable(f"{shared.url} closed the session: {text}")
        return ProtocolError(f"{shared.url} refused a request: {text} (code {code or frame_code})")
    status = _http_status(exc)
    if status == 401:
        via = f" from ${shared.token_var}" if shared.token_var else ""
        fix = (
            f"set ${shared.token_var} to the token the server was started with"
            if shared.token_var
            else "pass token_var= (or --token-var) naming the variable that holds the server's token"
        )
        return Unauthorized(f"{shared.url} refused the bearer token{via}: {fix}")
    closed = _close_code(exc)
    if closed == 1012:
        return ServerUnavailable(f"{shared.url} is restarting (it closed the session with code 1012); the "
                                 "episode was lost. Retry, or use waits_for_server=True to wait for it")  # fmt: skip
    if closed is not None:
        return ServerUnavailable(f"{shared.url} closed the session (code {closed}); the episode was lost")
    if isinstance(exc, ConnectionError | OSError | TimeoutError):
        return ServerUnavailable(
            f"no agentenv server answered at {shared.url} ({_root(exc)}). Start one (agentenv serve BUNDLE "
            "--port PORT) or fix the URL; waits_for_server=True waits for it within reset_timeout"
        )
    return ProtocolError(f"{shared.url}: unexpected {type(exc).__name__}: {exc}")


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def _http_status(exc: BaseException) -> int | None:
    for e in _chain(exc):
        response = getattr(e, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            return status
    return None


def _close_code(exc: BaseException) -> int | None:
    for e in _chain(exc):
        rcvd = getattr(e, "rcvd", None)
        if rcvd is not None and getattr(rcvd, "code", None) is not None:
            return int(rcvd.code)
        if type(e).__name__.startswith("ConnectionClosed"):
            return 1006
    return None


def _root(exc: BaseException) -> str:
    last = list(_chain(exc))[-1]
    return f"{type(last).__name__}: {last}" if str(last) else type(last).__name__


# ---------------------------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------------------------

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(url: str, why: str) -> None:
    with _warned_lock:
        if url in _warned:
            return
        _warned.add(url)
    log.warning("waiting for the agentenv server at %s: %s", url, why)


class Session:
    """One OpenEnv session on an agentenv server, playing one episode at a time (async).

    ``start`` opens the session if needed and starts a task; ``call`` and ``end_turn`` play it;
    ``finish`` ends it early; ``close`` ends the session. ``env_seconds`` counts the time spent
    waiting on the server (opening, deploying, tools, ending turns, scoring).
    """

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._client: Any = None
        self.started: Started | None = None
        self.result: EpisodeResult | None = None
        self.deployed = False
        self.env_seconds = 0.0
        self.episodes = 0

    async def _connect(self) -> Any:
        if self._client is None:
            self._client = _client_class()(
                base_url=self.shared.http_url,
                connect_timeout_s=min(30.0, self.shared.reset_timeout),
                # our own deadlines come first; this is the backstop
                message_timeout_s=self.shared.reset_timeout + self.shared.tool_timeout + 2 * self.shared.margin,
                headers=self.shared.headers(),
            )
        await self._client.connect()
        return self._client

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 5.0)

    async def start(self, task_id: str | None = None, *, split: str | None = None, index: int | None = None) -> Started:
        """Start a task by id, or by split and index; returns before the deploy ends.

        A previous episode on this session is ended first. With ``waits_for_server``, a server that
        refuses connections or is at capacity is waited out within ``reset_timeout``.
        """
        if task_id is None and (split is None or index is None):
            raise AgentEnvError("start() needs task_id, or split and index")
        data: dict[str, Any] = {"task_id": task_id} if task_id is not None else {"split": split, "index": index}
        began = time.monotonic()
        deadline = began + self.shared.reset_timeout
        delay = 0.05
        self.started, self.result, self.deployed = None, None, False
        try:
            while True:
                try:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic()) + self.shared.margin):
                        client = await self._connect()
                        reply = await client.reset(**data)
                    break
                except TimeoutError as exc:
                    await self._drop()
                    raise ServerUnavailable(f"{self.shared.url} did not start the episode within reset_timeout="
                                            f"{self.shared.reset_timeout:g} s") from exc  # fmt: skip
                except Exception as exc:
                    error = _translate(exc, self.shared)
                    await self._drop()
                    retry = isinstance(error, ServerUnavailable | AtCapacity) and self.shared.waits_for_server
                    if not retry or time.monotonic() + delay > deadline:
                        if retry:
                            raise type(error)(f"{error} (waited {time.monotonic() - began:.0f} s, reset_timeout="
                                              f"{self.shared.reset_timeout:g})") from exc  # fmt: skip
                        raise error from exc
                    _warn_once(self.shared.url, str(error))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
        finally:
            self.env_seconds += time.monotonic() - began
        obs = reply.observation
        if obs.get("event") != Event.STARTED:
            raise ProtocolError(
                f"{self.shared.url} answered a reset with {obs.get('event')!r}; is it an agentenv server?"
            )
        self.episodes += 1
        self.started = Started(
            episode_id=obs["episode_id"],
            task_id=obs["task_id"],
            split=obs["split"],
            index=obs["index"],
            system=obs["system"],
            prompt=obs["prompt"],
            turns=obs["turns"],
            tools=[Tool.from_dict(t) for t in obs["tools"]],
            toolset_key=obs["toolset_key"],
        )
        self.deployed = bool(obs.get("deployed"))
        self._take_result(obs)
        return self.started

    def _take_result(self, obs: dict[str, Any]) -> EpisodeResult | None:
        if obs.get("result") is not None:
            self.result = EpisodeResult.from_dict(obs["result"])
        self.deployed = self.deployed or bool(obs.get("deployed"))
        return self.result

    def _failed(self, result: EpisodeResult) -> EpisodeFailed:
        failure = result.failure
        assert failure is not None
        error = EpisodeFailed(
            f"the env failed episode {self.started.episode_id if self.started else '?'} of task {result.task_id!r} "
            f"(kind {failure.kind}, stage {failure.stage}): {failure.message}. It is not the policy's doing: "
            "replay it or leave it out, never train on it as a zero",
            kind=failure.kind,
            stage=failure.stage,
            result=result,
        )
        return error

    def _check_open(self) -> None:
        """Refuse to step on a socket the server closed: OpenEnv's client would silently reconnect to a new,
        empty session, and the episode is gone with the old one."""
        ws = getattr(self._client, "_ws", None)  # OpenEnv's client has no public "is connected" yet
        if ws is not None and getattr(ws, "close_code", None) is None:
            return
        code = getattr(ws, "close_code", None)
        reason = getattr(ws, "close_reason", "") or ""
        if code == 1012:
            why = "it is restarting (close code 1012)"
        elif reason == "idle":
            why = "the session was idle longer than the server's idle_timeout"
        else:
            why = f"the connection closed (code {code})" if code else "the connection is gone"
        raise ServerUnavailable(f"{self.shared.url} ended this session: {why}; the episode was lost (not the "
                                "policy's doing: replay it or leave it out)")  # fmt: skip

    async def _step(self, action: dict[str, Any], deadline: float, what: str) -> dict[str, Any]:
        if self.started is None or self._client is None:
            raise AgentEnvError(f"{what} before start(): start a task first")
        try:
            self._check_open()
        except ServerUnavailable:
            await self._drop()
            raise
        began = time.monotonic()
        try:
            async with asyncio.timeout(deadline + self.shared.margin):
                reply = await self._client.step(action)
        except TimeoutError:
            await self._drop()
            raise ToolDeadline(
                f"{what} got no answer from {self.shared.url} within {deadline + self.shared.margin:g} s; the "
                "episode is lost (not the policy's doing: leave it out of training)"
            ) from None
        except Exception as exc:
            error = _translate(exc, self.shared)
            await self._drop()
            raise error from exc
        finally:
            self.env_seconds += time.monotonic() - began
        return reply.observation

    def _tool_deadline(self) -> float:
        # the first call waits for the deploy, which has its own (reset) deadline
        return self.shared.tool_timeout + (0.0 if self.deployed else self.shared.reset_timeout)

    async def call(self, tool: str, args: dict[str, Any]) -> ToolAnswer:
        """Call a tool. Raises ``EpisodeFailed`` when the env failed, ``ToolDeadline`` when nothing came back."""
        if self.result is not None:
            if self.result.outcome == "failed":
                raise self._failed(self.result)
            raise AgentEnvError(f"episode of task {self.result.task_id!r} is over; start another")
        obs = await self._step({"op": Op.CALL, "tool": tool, "args": args}, self._tool_deadline(), f"tool {tool!r}")
        result = self._take_result(obs)
        if result is not None:
            if result.outcome == "failed":
                raise self._failed(result)
            raise ProtocolError(f"{self.shared.url} ended the episode on a tool call without a failure")
        return ToolAnswer(text=obs.get("text", ""), error=bool(obs.get("error")))

    async def end_turn(self, reply: str) -> TurnAnswer:
        """End the open turn with ``reply``; returns the next prompt, or the result when it was the last turn.

        Waits up to the reset deadline (the last turn runs the verifiers). Raises ``EpisodeFailed``
        when the env failed.
        """
        if self.result is not None:
            if self.result.outcome == "failed":
                raise self._failed(self.result)
            return TurnAnswer(prompt=None, result=self.result)
        deadline = self.shared.reset_timeout + (0.0 if self.deployed else self.shared.reset_timeout)
        obs = await self._step({"op": Op.END_TURN, "reply": reply}, deadline, "end_turn")
        result = self._take_result(obs)
        if result is not None:
            if result.outcome == "failed":
                raise self._failed(result)
            return TurnAnswer(prompt=None, result=result)
        return TurnAnswer(prompt=obs.get("prompt", ""), result=None)

    async def finish(self) -> EpisodeResult:
        """End the episode now (torn down at once); unscored when turns were left."""
        if self.result is None:
            obs = await self._step({"op": Op.FINISH}, self.shared.reset_timeout, "finish")
            if self._take_result(obs) is None:
                raise ProtocolError(f"{self.shared.url} did not return a result for finish")
        assert self.result is not None
        return self.result

    async def close(self) -> None:
        """End the session (the server tears down an episode still running)."""
        await self._drop()
        self.started = None

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ---------------------------------------------------------------------------------------------
# Sync use: one background event loop per process
# ---------------------------------------------------------------------------------------------

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agentenv-session-loop", daemon=True).start()
            _loop = loop
        return _loop


def _forget_loop() -> None:  # a forked child must not use its parent's loop thread (it does not exist there)
    global _loop
    _loop = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_loop)


def run_sync(coro: Awaitable[T], timeout: float | None = None) -> T:
    """Run ``coro`` on agentenv's background event loop and wait for it (from any thread but that loop's)."""
    loop = _background_loop()
    future = asyncio.run_coroutine_threadsafe(coro, loop)  # type: ignore[arg-type]
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise


class SyncSession:
    """``Session`` for synchronous code (TRL's environments): the same methods, blocking."""

    def __init__(self, shared: Shared) -> None:
        self.session = Session(shared)

    @property
    def shared(self) -> Shared:
        return self.session.shared

    @property
    def started(self) -> Started | None:
        return self.session.started

    @property
    def result(self) -> EpisodeResult | None:
        return self.session.result

    @property
    def env_seconds(self) -> float:
        return self.session.env_seconds

    def start(self, task_id: str | None = None, *, split: str | None = None, index: int | None = None) -> Started:
        """See ``Session.start``."""
        return run_sync(self.session.start(task_id, split=split, index=index))

    def call(self, tool: str, args: dict[str, Any]) -> ToolAnswer:
        """See ``Session.call``."""
        return run_sync(self.session.call(tool, args))

    def end_turn(self, reply: str) -> TurnAnswer:
        """See ``Session.end_turn``."""
        return run_sync(self.session.end_turn(reply))

    def finish(self) -> EpisodeResult:
        """See ``Session.finish``."""
        return run_sync(self.session.finish())

    def close(self) -> None:
        """See ``Session.close``."""
        with contextlib.suppress(RuntimeError):
            run_sync(self.session.close(), timeout=30)


# ---------------------------------------------------------------------------------------------
# The Task API
# ---------------------------------------------------------------------------------------------


def _http(shared: Shared, method: str, path: str, json: Any = None) -> Any:
    import httpx

    try:
        response = httpx.request(
            method, shared.http_url + path, json=json, headers=shared.headers(), timeout=min(shared.reset_timeout, 60.0)
        )
    except httpx.HTTPError as exc:
        raise ServerUnavailable(
            f"no agentenv server answered at {shared.url} ({type(exc).__name__}: {exc}). Start one (agentenv serve "
            "BUNDLE --port PORT) or fix the URL"
        ) from None
    if response.status_code == 401:
        raise _translate(_Status(401), shared)
    if response.status_code == 404 and path.endswith("/tasks") and isinstance(json, dict):
        detail = (
            response.json().get("detail")
            if response.headers.get("content-type", "").startswith("application/json")
            else None
        )
        if isinstance(detail, dict):
            raise UnknownSplit(f"{shared.url}: {detail.get('message')}", split=json.get("split", ""),
                               splits=detail.get("splits"))  # fmt: skip
    if response.status_code >= 400:
        raise ProtocolError(f"{shared.url}{path} answered HTTP {response.status_code}: {response.text[:300]}")
    return response.json()


class _Status(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type("R", (), {"status_code": status})()


def _env_name(shared: Shared) -> str:
    names = _http(shared, "GET", "/list_environments")
    if not isinstance(names, list) or len(names) != 1:
        raise ProtocolError(f"{shared.url}/list_environments answered {names!r}; is it an agentenv server?")
    return str(names[0])


def probe(shared: Shared) -> ServerInfo:
    """Ask the server what it serves: bundle name, description, version and split sizes."""
    name = _env_name(shared)
    meta = _http(shared, "GET", "/metadata")
    splits = _http(shared, "GET", f"/{name}/splits")
    return ServerInfo(
        url=shared.url,
        name=name,
        description=str(meta.get("description", "")),
        version=str(meta.get("version", "")),
        splits={s["name"]: int(s.get("num_tasks", 0)) for s in splits},
    )


def read_tasks(shared: Shared, split: str) -> list[TaskRow]:
    """The tasks of ``split`` (``UnknownSplit`` names the splits that exist)."""
    name = _env_name(shared)
    rows = _http(shared, "POST", f"/{name}/tasks", json={"split": split})["tasks"]
    return [TaskRow.from_dict(r) for r in rows]


def tasks_and_tools(
    shared: Shared,
    splits: str | Sequence[str],
    *,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[TaskRow], dict[str, list[Tool]]]:
    """The rows of ``splits`` and the tools of each toolset key.

    The tools come from playing one task per toolset key, one at a time: a reset lists them and the
    episode is finished at once (one deploy per key).
    """
    names = [splits] if isinstance(splits, str) else list(splits)
    rows = [row for split in names for row in read_tasks(shared, split)]
    first: dict[str, TaskRow] = {}
    for row in rows:
        first.setdefault(row.toolset_key, row)

    async def play_each() -> dict[str, list[Tool]]:
        tools: dict[str, list[Tool]] = {}
        session = Session(shared)
        try:
            for key, row in first.items():
                if progress is not None:
                    progress(key)
                started = await session.start(row.id)
                tools[key] = started.tools
                await session.finish()
        finally:
            await session.close()
        return tools

    return rows, run_sync(play_each())
