"""``AgentEnv``: an agentenv server as TRL's train dataset and ``environment_factory``.

TRL builds one environment instance per rollout and reuses it: ``reset(**row)`` starts the row's
task on the server, the model plays it through the instance's tool methods and ``end_turn``, and
``get_reward()`` hands TRL the episode's reward, or None when the episode can't be trained on. Every
instance holds one session of agentenv's session layer; the server plays the episode.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import copyreg
import dataclasses
import json
import logging
import os
import signal
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from agentenv.env import Tool
from agentenv.episode import EpisodeResult, Failure
from agentenv.errors import (
    AgentEnvError,
    AtCapacity,
    EpisodeFailed,
    ProtocolError,
    ServerUnavailable,
    ToolDeadline,
    UnknownSplit,
    UnknownTask,
)
from agentenv.session import ServerInfo, Shared, Started, SyncSession, TaskRow, probe, read_tasks, tasks_and_tools

from ._methods import build_method, check_names
from ._version import check_trl

if TYPE_CHECKING:
    from datasets import Dataset

check_trl()  # the supported range is checked when the integration loads (TRL itself is not imported)

__all__ = ["RESULTS_KEPT", "AgentEnv", "EpisodeLost", "TaskEnvironment"]

log = logging.getLogger("agentenv.trl")

RESULTS_KEPT: Final[int] = 100_000
EPISODE_OVER: Final[str] = "The episode is over."

END_TURN = Tool(
    name="end_turn",
    description=(
        "Answer the current question and end your turn. Returns the next question, or says the episode is over."
    ),
    parameters={
        "type": "object",
        "properties": {"reply": {"type": "string", "description": "Your answer to the current question."}},
        "required": ["reply"],
    },
)

# Errors after which an episode can't be scored: the env's fault or the server's, never the policy's.
_LOST = (EpisodeFailed, ToolDeadline, ServerUnavailable, ProtocolError)


class EpisodeLost(AgentEnvError):
    """A tool call or end of turn of an episode the env failed; TRL shows the message to the model."""


# ---------------------------------------------------------------------------------------------
# The environment classes TRL instantiates
# ---------------------------------------------------------------------------------------------


class _EnvironmentType(type):
    """The metaclass of the generated classes: they pickle by their spec, so a spawned worker rebuilds them."""


class TaskEnvironment(metaclass=_EnvironmentType):
    """Base of the generated environment classes: one instance plays one episode at a time on one session.

    TRL calls ``reset(**row)``, then the tool methods and ``end_turn`` the model asks for, then
    ``get_reward()``. Only those are public methods: TRL offers every other public method as a tool.
    """

    _agentenv: ClassVar[AgentEnv]
    _toolset_key: ClassVar[str]
    _spec: ClassVar[dict[str, Any]]

    def __init__(self) -> None:
        self._session: SyncSession | None = None
        self._started: Started | None = None
        self._lost: Failure | None = None
        self._failed: EpisodeResult | None = None
        self._mismatch: str | None = None
        self._result: EpisodeResult | None = None
        self._reward: float | None = None
        self._episodes = 0
        type(self)._agentenv._adopt(self)

    @property
    def task_id(self) -> str | None:
        """The task of the current (or last) episode."""
        return self._started.task_id if self._started is not None else None

    @property
    def result(self) -> EpisodeResult | None:
        """How the last episode ended, once ``get_reward`` has run (``reward`` is what TRL got)."""
        return self._result

    @property
    def episodes(self) -> int:
        """How many episodes this instance has started."""
        return self._episodes

    def reset(self, **row: Any) -> None:
        """Start the row's task (``task_id``); returns before its deploy ends, which the first tool call waits for."""
        task_id = row.get("task_id")
        if not isinstance(task_id, str):
            raise AgentEnvError(
                f"reset() got a row without a task_id (columns: {', '.join(sorted(row)) or 'none'}); train on "
                "AgentEnv's dataset (train_dataset=env.dataset), or keep its task_id column in your own rows"
            )
        owner = type(self)._agentenv
        owner._check_open()
        if self._session is None:
            self._session = SyncSession(owner.shared)
        self._started, self._lost, self._failed, self._mismatch = None, None, None, None
        self._result, self._reward = None, None
        try:
            started = self._session.start(task_id)
        except AtCapacity as exc:
            raise AtCapacity(
                f"{exc}. Each TRL environment instance holds one session: the trainer needs one per rollout of a "
                "generation batch, plus one probe per environment class"
            ) from None
        except UnknownTask as exc:
            raise UnknownTask(
                f"{exc}. The row does not fit this server: build the dataset from it (env.dataset)"
            ) from None
        self._started = started
        self._episodes += 1
        self._mismatch = self._check_row(started, row)
        if self._mismatch is not None:
            _warn_once(f"mismatch:{task_id}", f"task {task_id!r} is not scored: {self._mismatch}")
        return None

    def _check_row(self, started: Started, row: Mapping[str, Any]) -> str | None:
        if started.toolset_key != type(self)._toolset_key:
            return (
                f"its toolset on the server ({started.toolset_key}) is not the one {type(self).__name__} offers "
                f"({type(self)._toolset_key}); the bundle changed since the factory was built, or the row names "
                "the wrong environment. Rebuild the dataset and factory"
            )
        prompt = row.get("prompt")
        if isinstance(prompt, list) and prompt:
            said = [m.get("content") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
            if started.prompt not in said:
                return (
                    "its first prompt on the server is not in the row's prompt; the bundle changed since the dataset "
                    "was read. Rebuild the dataset (env.dataset)"
                )
        return None

    def _tool(self, name: str, args: dict[str, Any]) -> str:
        if name == END_TURN.name:
            return self._end_turn(args)
        session = self._playing(name)
        if session.result is not None and session.result.outcome != "failed":  # a failure raises below
            return f"error: the episode is over; {name} was not called"
        try:
            return session.call(name, args).text
        except _LOST as exc:
            raise self._lose(exc) from None

    def _end_turn(self, args: dict[str, Any]) -> str:
        unknown = sorted(set(args) - {"reply"})
        if unknown:
            raise TypeError(f"end_turn takes only reply, not {', '.join(unknown)}")
        session = self._playing(END_TURN.name)
        try:
            answer = session.end_turn(str(args.get("reply", "")))
        except _LOST as exc:
            raise self._lose(exc) from None
        return EPISODE_OVER if answer.done else str(answer.prompt)

    def _playing(self, what: str) -> SyncSession:
        if self._session is None or self._started is None:
            raise AgentEnvError(f"{what} before reset(): TRL resets every environment before its rollout")
        if self._lost is not None:
            raise EpisodeLost(
                f"the environment failed ({self._lost.kind} during {self._lost.stage}); this episode is not scored"
            )
        return self._session

    def _lose(self, exc: AgentEnvError) -> EpisodeLost:
        if isinstance(exc, EpisodeFailed):
            result = exc.result if isinstance(exc.result, EpisodeResult) else None
            self._failed = result  # the server's own account of the failure, kept whole for env.results
            failure = (result.failure if result is not None else None) or Failure(exc.kind, exc.stage, str(exc))
        elif isinstance(exc, ToolDeadline):
            failure = Failure("deadline", "client", str(exc))
        else:
            failure = Failure("server", "client", str(exc))
        self._lost = failure
        _warn_once(f"lost:{failure.kind}:{failure.stage}", f"an episode of task {self.task_id!r} is lost: {exc}")
        return EpisodeLost(
            f"the environment failed ({failure.kind} during {failure.stage}); this episode is not scored"
        )

    def get_reward(self) -> float | None:
        """The episode's reward: turns the model left open end with an empty reply.

        None (TRL: NaN, kept out of the group's statistics) when the env failed the episode, a tool
        missed its deadline, the episode did not match its row, or the verifiers gave no verdict.
        """
        session, started = self._session, self._started
        if session is None or started is None:
            return None
        if self._result is not None:
            return self._reward
        if self._lost is None and session.result is None:
            try:
                for _ in range(started.turns):  # a policy that never answered is scored on empty replies
                    if session.end_turn("").done:
                        break
            except _LOST as exc:
                self._lose(exc)
        result = session.result if self._lost is None else self._failed
        if result is None:
            failure = self._lost or Failure("protocol", "client", "the episode did not end after its last turn")
            result = EpisodeResult(task_id=started.task_id, outcome="failed", failure=failure, turns=started.turns)
        if self._mismatch is not None and result.outcome == "scored":
            result = dataclasses.replace(result, outcome="unscored", reward=None, reason=self._mismatch)
        self._result = result
        self._reward = result.reward if result.outcome == "scored" else None
        type(self)._agentenv._record(result)
        return self._reward

    def _close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()


def _reduce_class(cls: _EnvironmentType) -> str | tuple[Any, tuple[Any, ...]]:
    if "_spec" not in vars(cls):
        return cls.__qualname__  # TaskEnvironment itself: by name, as any class
    return _rebuild_class, (cls._spec,)  # type: ignore[attr-defined]


copyreg.pickle(_EnvironmentType, _reduce_class)

_classes: weakref.WeakValueDictionary[str, _EnvironmentType] = weakref.WeakValueDictionary()
_classes_lock = threading.Lock()


def _rebuild_class(spec: dict[str, Any]) -> _EnvironmentType:
    """The class ``spec`` describes: the original in its own process, a rebuilt one in a spawned worker."""
    key = json.dumps(spec, sort_keys=True)
    with _classes_lock:
        cls = _classes.get(key)
    if cls is not None:
        return cls
    owner = AgentEnv._attached(Shared(**spec["shared"]), spec["bundle"])
    return owner._make_class(spec["name"], spec["key"], [Tool.from_dict(t) for t in spec["tools"]])


# ---------------------------------------------------------------------------------------------
# AgentEnv
# ---------------------------------------------------------------------------------------------


class AgentEnv:
    """An agentenv server as TRL's ``train_dataset`` and ``environment_factory``.

    Example::

        env = AgentEnv("http://localhost:8000")   # or AgentEnv.local("examples/bundles/inbox")
        trainer = GRPOTrainer(model=..., args=GRPOConfig(max_tool_calling_iterations=12),
                              train_dataset=env.dataset, environment_factory=env.factory)

    ``split``: the split ``dataset`` holds. ``token_var``: the environment variable holding the
    server's bearer token. ``tool_timeout`` / ``reset_timeout``: the client's deadlines for a tool call
    and for a reset, deploy or end of turn. ``waits_for_server``: wait out a server that restarts or is
    at its session limit (within ``reset_timeout``) instead of failing.
    """

    def __init__(
        self,
        url: str,
        *,
        split: str = "train",
        token_var: str | None = None,
        tool_timeout: float = 60.0,
        reset_timeout: float = 300.0,
        waits_for_server: bool = False,
    ) -> None:
        shared = Shared(
            url,
            token_var=token_var,
            tool_timeout=tool_timeout,
            reset_timeout=reset_timeout,
            waits_for_server=waits_for_server,
        )
        try:
            info = probe(shared)
        except ServerUnavailable as exc:
            raise ServerUnavailable(f"{exc}; or serve the bundle in this process: AgentEnv.local(BUNDLE)") from None
        self._setup(shared, info.name)
        self.info: ServerInfo = info
        self.split = split
        self._check_split(split)
        if info.splits.get(split, 0) == 0:
            raise UnknownSplit(
                f"split {split!r} of {shared.url} has no tasks; pass another split= (the sizes: "
                f"{', '.join(f'{s} {n}' for s, n in info.splits.items())})",
                split=split,
                splits=list(info.splits),
            )

    def _setup(self, shared: Shared, bundle: str) -> None:
        self.shared: Shared = shared
        self.bundle = bundle
        self.results: collections.deque[EpisodeResult] = collections.deque(maxlen=RESULTS_KEPT)
        self._instances: weakref.WeakSet[TaskEnvironment] = weakref.WeakSet()
        self._lock = threading.RLock()
        self._rows: dict[str, list[TaskRow]] | None = None
        self._names: dict[str, str] | None = None
        self._classes: dict[str, _EnvironmentType] | None = None
        self._dataset: Dataset | None = None
        self._server: Any = None
        self._app: Any = None
        self._closed = False
        _track(self)

    @classmethod
    def _attached(cls, shared: Shared, bundle: str) -> AgentEnv:
        """An AgentEnv for classes rebuilt in another process (no probe: the parent already checked)."""
        with _classes_lock:
            for env in list(_live):
                if env.shared == shared and not env._closed:
                    return env
            env = cls.__new__(cls)
            env._setup(shared, bundle)
            return env

    @classmethod
    def local(
        cls,
        bundle: str | Path,
        *,
        split: str = "train",
        tool_timeout: float = 60.0,
        reset_timeout: float = 300.0,
        waits_for_server: bool = False,
        **build_app_kwargs: Any,
    ) -> AgentEnv:
        """Serve ``bundle`` in this process on a loopback port and connect to it.

        ``build_app_kwargs`` go to ``agentenv_server.build_app`` (``max_concurrent_envs=``, ``reward=``,
        ``idle_timeout=``...). The server stops, after tearing down every episode still running, at
        ``close()``, at exit, and when the process gets SIGTERM.
        """
        from agentenv_server import ServerThread, build_app

        if build_app_kwargs.get("token") is not None:
            raise AgentEnvError(
                "AgentEnv.local() serves on loopback without a token; drop token= (or serve it with "
                "agentenv serve BUNDLE --token-var NAME and pass AgentEnv(url, token_var=NAME))"
            )
        build_app_kwargs.pop("token", None)
        app = build_app(bundle, tool_timeout=tool_timeout, reset_timeout=reset_timeout, **build_app_kwargs)
        server = ServerThread(app).start()
        try:
            env = cls(
                server.url,
                split=split,
                tool_timeout=tool_timeout,
                reset_timeout=reset_timeout,
                waits_for_server=waits_for_server,
            )
        except BaseException:
            server.stop()
            raise
        env._server, env._app = server, app
        _stop_on_sigterm()
        return env

    # -- the dataset ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server's URL."""
        return self.shared.url

    @property
    def dataset(self) -> Dataset:
        """One row per task of ``split``: ``prompt`` (chat messages), ``task_id``, ``split``, ``index``.

        With several toolsets, every row also names its environment class (TRL's ``environment`` column).
        """
        with self._lock:
            if self._dataset is None:
                self._dataset = self.dataset_for(self.split)
            return self._dataset

    def dataset_for(self, split: str) -> Dataset:
        """The rows of another split (for ``eval_dataset``), in the same form as ``dataset``."""
        from datasets import Dataset

        self._check_split(split)
        names = self._environment_names()
        rows = read_tasks(self.shared, split)
        records = []
        for row in rows:
            record: dict[str, Any] = {
                "prompt": row.messages(),
                "task_id": row.id,
                "split": row.split,
                "index": row.index,
            }
            if len(names) > 1:
                record["environment"] = self._name_of(row, names)
            records.append(record)
        return Dataset.from_list(records)

    def _check_split(self, split: str) -> None:
        if split not in self.info.splits:
            raise UnknownSplit(
                f"{self.shared.url} has no split {split!r}; its splits: {', '.join(self.info.splits)}. Pass one of "
                "those (AgentEnv(url, split=...), env.dataset_for(split))",
                split=split,
                splits=list(self.info.splits),
            )

    def _all_rows(self) -> dict[str, list[TaskRow]]:
        with self._lock:
            if self._rows is None:
                self._rows = {split: read_tasks(self.shared, split) for split in self.info.splits}
            return self._rows

    def _environment_names(self) -> dict[str, str]:
        """Toolset key -> environment name, over every split (so any split's rows fit the one factory)."""
        with self._lock:
            if self._names is None:
                self._names = _name_toolsets([row for rows in self._all_rows().values() for row in rows])
            return self._names

    def _name_of(self, row: TaskRow, names: Mapping[str, str]) -> str:
        if row.toolset_key not in names:
            raise AgentEnvError(
                f"task {row.id!r} has a toolset ({row.toolset_key}) the server did not list when this AgentEnv "
                "read its tasks; the bundle changed. Create the AgentEnv again"
            )
        return names[row.toolset_key]

    # -- the factory ---------------------------------------------------------------------------

    @property
    def factory(self) -> type[TaskEnvironment] | dict[str, type[TaskEnvironment]]:
        """TRL's ``environment_factory``: the environment class, or a dict of them (name -> class) with
        several toolsets. Building it plays one task per toolset, one at a time, to list its tools."""
        classes = self.environments
        if len(classes) == 1:
            return next(iter(classes.values()))
        return dict(classes)

    @property
    def environments(self) -> dict[str, type[TaskEnvironment]]:
        """Every environment class by name (the ``environment`` column's values), one per toolset."""
        with self._lock:
            if self._classes is None:
                names = self._environment_names()
                _, tools = tasks_and_tools(self.shared, list(self.info.splits))
                missing = sorted(set(names) - set(tools))
                if missing:
                    raise AgentEnvError(
                        f"{self.shared.url} listed no tools for toolset(s) {', '.join(missing)}; "
                        "the bundle changed while the factory was built. Create the AgentEnv again"
                    )
                rows = self._all_rows()
                for key, name in names.items():
                    ids = [r.id for split in rows.values() for r in split if r.toolset_key == key]
                    shown = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
                    check_names(tools[key], f"toolset {name!r} (tasks {shown})")
                single = len(names) == 1
                self._classes = {
                    name: self._make_class(self.bundle if single else f"{self.bundle}:{name}", key, tools[key])
                    for key, name in names.items()
                }
            return dict(self._classes)  # type: ignore[arg-type]

    def _make_class(self, class_name: str, key: str, tools: Sequence[Tool]) -> _EnvironmentType:
        spec = {
            "shared": dataclasses.asdict(self.shared),
            "bundle": self.bundle,
            "name": class_name,
            "key": key,
            "tools": [t.as_dict() for t in tools],
        }
        namespace: dict[str, Any] = {t.name: build_method(t, TaskEnvironment._tool) for t in [*tools, END_TURN]}
        namespace.update(
            __module__=__name__,
            __qualname__=class_name,
            _agentenv=self,
            _toolset_key=key,
            _spec=spec,
            __doc__=f"TRL environment for the tasks of toolset {key} on {self.shared.url}.",
        )
        cls = _EnvironmentType(class_name, (TaskEnvironment,), namespace)
        with _classes_lock:
            _classes[json.dumps(spec, sort_keys=True)] = cls
        return cls

    # -- instances, results, closing -------------------------------------------------------------

    @property
    def instances(self) -> list[TaskEnvironment]:
        """The live environment instances (TRL's pool of them)."""
        return list(self._instances)

    def _adopt(self, instance: TaskEnvironment) -> None:
        self._check_open()
        self._instances.add(instance)

    def _record(self, result: EpisodeResult) -> None:
        self.results.append(result)

    def _check_open(self) -> None:
        if self._closed:
            raise AgentEnvError(f"this AgentEnv ({self.shared.url}) was closed; create another to keep training")

    def close(self) -> None:
        """End every episode the instances left running; stop the server ``local()`` started. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for instance in list(self._instances):
            with contextlib.suppress(Exception):  # a session already gone is closed either way
                instance._close()
        if self._server is not None:
            self._server.stop()

    def __enter__(self) -> AgentEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AgentEnv({self.shared.url!r}, split={getattr(self, 'split', None)!r})"


# ---------------------------------------------------------------------------------------------
# Environment names, warnings, and closing at exit or SIGTERM
# ---------------------------------------------------------------------------------------------


def _name_toolsets(rows: Sequence[TaskRow]) -> dict[str, str]:
    """A readable, unique name per toolset key: its envs, then what sets it apart from toolsets named alike."""
    first: dict[str, TaskRow] = {}
    for row in rows:
        first.setdefault(row.toolset_key, row)

    def access(row: TaskRow) -> str:
        out = ""
        for _, rules in sorted(((row.toolset or {}).get("access") or {}).items()):
            out += f"-without-{','.join(rules['deny'])}" if rules.get("deny") else ""
            out += f"-with-{','.join(rules['allow'])}" if rules.get("allow") else ""
        return out

    def role(row: TaskRow) -> str:
        return f"@{row.toolset['role']}" if (row.toolset or {}).get("role") else ""

    names = {}
    for key, row in first.items():
        toolset = row.toolset or {}
        names[key] = "+".join(toolset.get("envs") or []) + ("+bash" if toolset.get("bash") else "") or "no-envs"
    for refine in (access, role, lambda row: f"-{row.toolset_key[:6]}"):
        counts = collections.Counter(names.values())
        for key in [k for k, name in names.items() if counts[name] > 1]:
            names[key] += refine(first[key])
    return names


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key in _warned:
        log.info("%s", message)
        return
    _warned.add(key)
    log.warning("%s", message)


_live: weakref.WeakSet[AgentEnv] = weakref.WeakSet()
_owner_pid = os.getpid()
_hooks_lock = threading.Lock()
_atexit_registered = False
_previous_sigterm: Any = None
_sigterm_installed = False


def _track(env: AgentEnv) -> None:
    global _atexit_registered, _owner_pid
    with _hooks_lock:
        _live.add(env)
        if not _atexit_registered:
            _owner_pid = os.getpid()
            # Before interpreter shutdown refuses new thread-pool work (which a local server's teardowns need):
            # threading runs these hooks ahead of concurrent.futures' own, and ahead of atexit.
            register = getattr(threading, "_register_atexit", None)
            if register is not None:
                register(_close_all)
            atexit.register(_close_all)  # where that hook does not exist; closing twice is a no-op
            _atexit_registered = True


def _close_all() -> None:
    """Close every AgentEnv of this process (a forked child must not close its parent's sessions)."""
    if os.getpid() != _owner_pid:
        return
    for env in list(_live):
        try:
            env.close()
        except Exception:  # closing at exit is best effort: one failure must not keep the others open
            log.exception("closing %r failed", env)


def _stop_on_sigterm() -> None:
    """On SIGTERM, close every AgentEnv (ending episodes, stopping local servers), then die of the signal as before."""
    global _previous_sigterm, _sigterm_installed
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; at-exit closing still applies
    with _hooks_lock:
        if _sigterm_installed:
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous == signal.SIG_IGN:
            return  # the process chose to ignore SIGTERM; so do we
        _previous_sigterm = previous
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    _close_all()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
