"""``AgentEnv``: an agentenv server as TRL's train dataset and ``environment_factory``.

The dataset is the server's Task API (a row per task); the factory is one generated ``TaskEnvironment``
class per toolset (``agentenv_trl.environment``), whose methods are the toolset's tools.
"""

from __future__ import annotations

import collections
import contextlib
import copyreg
import dataclasses
import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from agentenv.bundle import key_name
from agentenv.client import Shared, probe, read_tasks, tasks_and_tools
from agentenv.errors import AgentEnvError, ServerUnavailable, UnknownSplit
from agentenv.wire import EpisodeResult, ServerInfo, TaskRow, Tool

from . import _closing
from ._api import check_internals
from ._methods import build_method, check_names
from ._version import check_trl
from .environment import EpisodeLost, TaskEnvironment, _EnvironmentType, classes, classes_lock, make_class

if TYPE_CHECKING:
    from datasets import Dataset

check_trl()  # the supported range is checked when the integration loads (TRL itself is not imported)

__all__ = ["RESULTS_KEPT", "AgentEnv", "EpisodeLost", "TaskEnvironment"]

RESULTS_KEPT: Final[int] = 100_000


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
            client="trl",
        )
        self._open(shared, split)

    def _open(self, shared: Shared, split: str) -> None:
        """Probe the server, check ``split`` and set up (``__init__``'s work, and ``local``'s with its token)."""
        try:
            info = probe(shared)
        except ServerUnavailable as exc:
            raise ServerUnavailable(
                f"{exc}; or serve the bundle in this process: AgentEnv.local(BUNDLE)", failure=exc.failure
            ) from None
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
        self._here: Any = None  # agentenv.local.Here of local()
        self._served: dict[str, Any] = {}  # build_app's options for local()'s server
        self._closed = False
        _closing.track(self)

    @classmethod
    def _attached(cls, shared: Shared, bundle: str) -> AgentEnv:
        """An AgentEnv for classes rebuilt in another process (no probe: the parent already checked)."""
        with classes_lock:
            for env in list(_closing.live):
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
        """Play ``bundle`` in this process (``agentenv.local``: no server, no port), and serve it on loopback only
        for the worker processes TRL spawns, which reach it by URL.

        The server starts when an environment class is first pickled for another process, with this process's own
        token (``agentenv_server.runner.local_token``) handed over in memory: no other program or web page on the
        machine can play on it. ``build_app_kwargs`` go to ``agentenv_server.build_app`` for that server
        (``max_concurrent_envs=``, ``idle_timeout=``...); ``reward=``, ``tool_threads=``, ``record=DIR`` (the
        record of every episode) and ``max_concurrent_envs=`` (the sessions open at once) apply in this process too.
        Every episode still running is torn down at ``close()``, at exit, and when the process gets SIGTERM; the
        server, if one was started, stops then.
        """
        import inspect

        from agentenv.local import Here
        from agentenv.record import Recorder
        from agentenv_server import build_app

        if build_app_kwargs.get("token") is not None:
            raise AgentEnvError(
                "AgentEnv.local() serves on loopback with this process's own token; drop token= (or serve it with "
                "agentenv serve BUNDLE --token-var NAME and pass AgentEnv(url, token_var=NAME))"
            )
        build_app_kwargs.pop("token", None)
        try:  # an option build_app does not take is refused now, not when a worker first needs the server
            inspect.signature(build_app).bind(bundle, **build_app_kwargs)
        except TypeError as exc:
            raise AgentEnvError(f"AgentEnv.local(): {exc} (the options are agentenv_server.build_app's)") from None
        record = build_app_kwargs.get("record")
        if isinstance(record, str | Path):
            build_app_kwargs["record"] = record = Recorder(record)  # one record folder for both
        here = Here(
            bundle,
            tool_timeout=tool_timeout,
            reset_timeout=reset_timeout,
            reward=build_app_kwargs.get("reward"),
            tool_threads=build_app_kwargs.get("tool_threads"),
            record=record,
            max_sessions=build_app_kwargs.get("max_concurrent_envs"),
            capacity_fix="max_concurrent_envs= of AgentEnv.local (and MAX_CONCURRENT_ENVS for its server's workers)",
        )
        env = cls.__new__(cls)
        try:
            env._open(here.shared(waits_for_server=waits_for_server, client="trl"), split)
        except BaseException:
            here.close()
            raise
        env._here = here
        env._served = {"tool_timeout": tool_timeout, "reset_timeout": reset_timeout, **build_app_kwargs}
        _closing.stop_on_sigterm()
        return env

    @property
    def episodes_played(self) -> int:
        """Episodes started for this env by ``local()``: in this process and on its server for spawned workers."""
        played = self._here.service.episodes_started if self._here is not None else 0
        return played + (self._app.state.agentenv.episodes_started if self._app is not None else 0)

    def _worker_settings(self) -> dict[str, Any]:
        """The settings a spawned worker reaches this env's tasks with: its server's (for ``local()``, the loopback
        server started now, once)."""
        with self._lock:
            if self._here is None:
                return dataclasses.asdict(self.shared)
            if self._server is None:
                from agentenv_server import ServerThread, build_app
                from agentenv_server.runner import local_token

                self._check_open()
                token = local_token()
                self._app = build_app(self._here.bundle, token=token, **self._served)
                self._server = ServerThread(self._app).start()
                self._worker_shared = dataclasses.replace(self.shared, url=self._server.url, bearer=token, here=None)
            return dataclasses.asdict(self._worker_shared)

    # -- the dataset ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Where the tasks are played: the server's URL (``local:FOLDER`` for ``local()``'s, played in this process)."""
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
        rows = self._all_rows()[split]
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
        splits = self.info.splits
        if split not in splits:
            raise UnknownSplit(
                f"{self.shared.url} has no split {split!r}; its splits: {', '.join(splits)}. Pass one of "
                "those (AgentEnv(url, split=...), env.dataset_for(split))",
                split=split,
                splits=list(splits),
            )

    def _all_rows(self) -> dict[str, list[TaskRow]]:
        with self._lock:
            if self._rows is None:
                self._rows = {split: read_tasks(self.shared, split, info=self.info) for split in self.info.splits}
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
        several toolsets. Building it plays one task per toolset, one at a time, to list its tools. In a process
        that imported TRL, the TRL internals it leans on are probed first (``agentenv_trl._api``)."""
        check_internals()
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
        return make_class(self, class_name, key, list(tools), build_method)

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
        if self._here is not None:
            self._here.close()

    def __enter__(self) -> AgentEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AgentEnv({self.shared.url!r}, split={getattr(self, 'split', None)!r})"


# ---------------------------------------------------------------------------------------------
# Environment names
# ---------------------------------------------------------------------------------------------


def _name_toolsets(rows: Sequence[TaskRow]) -> dict[str, str]:
    """Each toolset key's environment name: the key's readable part (``ok-without-add``), or the whole key
    where two toolsets read alike (agentenv-core names toolsets; this only drops the hash where it can)."""
    keys = sorted({row.toolset_key for row in rows})
    counts = collections.Counter(key_name(key) for key in keys)
    return {key: key_name(key) if counts[key_name(key)] == 1 else key for key in keys}


def _reduce_class(cls: _EnvironmentType) -> str | tuple[Any, tuple[Any, ...]]:
    if "_spec" not in vars(cls):
        return cls.__qualname__  # TaskEnvironment itself: by name, as any class
    spec = {**cls._spec, "shared": cls._agentenv._worker_settings()}  # type: ignore[attr-defined]
    with classes_lock:
        classes[json.dumps(spec, sort_keys=True)] = cls  # unpickled in this process: the class itself
    return _rebuild_class, (spec,)


copyreg.pickle(_EnvironmentType, _reduce_class)


def _rebuild_class(spec: dict[str, Any]) -> _EnvironmentType:
    """The class ``spec`` describes: the original in its own process, a rebuilt one in a spawned worker."""
    key = json.dumps(spec, sort_keys=True)
    with classes_lock:
        cls = classes.get(key)
    if cls is not None:
        return cls
    owner = AgentEnv._attached(Shared(**spec["shared"]), spec["bundle"])
    cls = owner._make_class(spec["name"], spec["key"], [Tool.from_dict(t) for t in spec["tools"]])
    with classes_lock:
        classes[key] = cls
    return cls
