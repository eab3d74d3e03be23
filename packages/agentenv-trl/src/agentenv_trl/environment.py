"""``TaskEnvironment``: the base of the environment classes TRL instantiates, an adapter over agentenv's ``Rollout``.

TRL builds one instance per rollout and reuses it: ``reset(**row)`` starts the row's task on the server,
the model plays it through the instance's tool methods and ``end_turn``, and ``get_reward()`` hands TRL
the rollout's reward, or None when the fault policy (``agentenv.faults``) says it is not trained on.
Every instance holds one session of agentenv's session layer; the server plays the episode.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Protocol

from agentenv.client import Shared, SyncRollout, SyncSession
from agentenv.errors import AgentEnvError, AtCapacity, EpisodeLost, UnknownTask
from agentenv.logs import warn_once
from agentenv.schema import argument_errors
from agentenv.wire import EpisodeResult, Started, Tool

__all__ = ["END_TURN", "EPISODE_OVER", "EpisodeLost", "Owner", "TaskEnvironment"]

log = logging.getLogger("agentenv.trl")

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

_END_TURN_ARGS: Final[dict[str, Any]] = {**END_TURN.parameters, "additionalProperties": False}


class _EnvironmentType(type):
    """The metaclass of the generated classes: they pickle by their spec, so a spawned worker rebuilds them (the
    rebuild is ``agentenv_trl.env``'s, which registers it)."""


class Owner(Protocol):
    """What a generated class's ``AgentEnv`` does for its instances: the server they play on, taking each instance in
    (refused once closed), and keeping each rollout's result."""

    shared: Shared
    bundle: str

    def _adopt(self, instance: TaskEnvironment) -> None: ...

    def _check_open(self) -> None: ...

    def _record(self, result: EpisodeResult) -> None: ...


class TaskEnvironment(metaclass=_EnvironmentType):
    """Base of the generated environment classes: one instance plays one rollout at a time on one session.

    TRL calls ``reset(**row)``, then the tool methods and ``end_turn`` the model asks for, then
    ``get_reward()``. Only those are public methods: TRL offers every other public method as a tool.
    A tool called after the env or the server lost the episode raises ``EpisodeLost`` (TRL shows the
    model its message); the rollout's reward is then None.
    """

    _agentenv: ClassVar[Owner]
    _toolset_key: ClassVar[str]
    _spec: ClassVar[dict[str, Any]]

    def __init__(self) -> None:
        self._session: SyncSession | None = None
        self._rollout: SyncRollout | None = None
        self._mismatch: str | None = None
        self._result: EpisodeResult | None = None
        self._reward: float | None = None
        self._episodes = 0
        type(self)._agentenv._adopt(self)

    @property
    def task_id(self) -> str | None:
        """The task of the current (or last) rollout."""
        started = self._rollout.started if self._rollout is not None else None
        return started.task_id if started is not None else None

    @property
    def result(self) -> EpisodeResult | None:
        """How the last rollout ended, once ``get_reward`` has run (``reward`` is what TRL got)."""
        return self._result

    @property
    def episodes(self) -> int:
        """How many episodes this instance has started."""
        return self._episodes

    def reset(self, **row: Any) -> None:
        """Start the row's task (``task_id``); returns before its deploy ends, which the first tool call waits for.

        A server that cannot start the episode (gone, restarting, full) loses the rollout like any server
        fault: its tools raise ``EpisodeLost`` and ``get_reward()`` is None. With ``waits_for_server`` such
        a server is waited out within ``reset_timeout`` first.
        """
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
        self._mismatch, self._result, self._reward = None, None, None
        self._rollout = self._session.rollout(task_id)
        self._episodes += 1
        try:
            started = self._rollout.start()
        except AtCapacity as exc:
            warn_once(
                log,
                f"lost:{exc.kind}",
                "%s. Each TRL environment instance holds one session: the trainer "
                "needs one per rollout of a generation batch, plus one probe per environment class. This "
                "rollout gets no reward",
                exc,
            )
            return None
        except EpisodeLost as exc:
            warn_once(log, f"lost:{exc.kind}", "the rollout of task %r is lost at its start: %s", task_id, exc)
            return None
        except UnknownTask as exc:
            raise UnknownTask(
                f"{exc}. The row does not fit this server: build the dataset from it (env.dataset)"
            ) from None
        self._mismatch = self._check_row(started, row)
        if self._mismatch is not None:
            warn_once(log, f"mismatch:{task_id}", "task %r is not scored: %s", task_id, self._mismatch)
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

    def _playing(self, what: str) -> SyncRollout:
        if self._rollout is None or (self._rollout.started is None and self._rollout.lost is None):
            raise AgentEnvError(f"{what} before reset(): TRL resets every environment before its rollout")
        return self._rollout

    def _tool(self, name: str, args: dict[str, Any]) -> str:
        if name == END_TURN.name:
            return self._end_turn(args)
        try:
            return self._playing(name).call(name, args).text
        except EpisodeLost as exc:
            raise self._told(exc) from None

    def _end_turn(self, args: dict[str, Any]) -> str:
        reply = args.get("reply")
        if isinstance(reply, int | float) and not isinstance(reply, bool):
            args = {**args, "reply": str(reply)}  # an answer written as a number is its text, as everywhere
        wrong = argument_errors(END_TURN.name, _END_TURN_ARGS, args)
        if wrong is not None:  # answered as every tool answers arguments that do not fit: the turn stays open
            return wrong
        try:
            answer = self._playing(END_TURN.name).end_turn(args["reply"])
        except EpisodeLost as exc:
            raise self._told(exc) from None
        return EPISODE_OVER if answer.done else str(answer.prompt)

    def _told(self, exc: EpisodeLost) -> EpisodeLost:
        """The loss as TRL shows it to the model (briefly: it costs completion tokens); logged in full once."""
        warn_once(log, f"lost:{exc.kind}:{exc.stage}", "an episode of task %r is lost: %s", self.task_id, exc)
        return EpisodeLost(exc.brief(), failure=exc.failure)

    def get_reward(self) -> float | None:
        """The rollout's reward: turns the model left open end with an empty reply (scored).

        None (TRL: NaN, kept out of the group's statistics) when the env or the server lost the episode,
        the episode did not match its row, or the verifiers gave no verdict.
        """
        rollout = self._rollout
        if rollout is None:
            return None
        if self._result is not None:
            return self._reward
        result = rollout.conclude()
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


classes: weakref.WeakValueDictionary[str, _EnvironmentType] = weakref.WeakValueDictionary()
classes_lock = threading.Lock()


def make_class(owner: Owner, class_name: str, key: str, tools: list[Tool], build_method: Any) -> _EnvironmentType:
    """A ``TaskEnvironment`` subclass whose methods are ``tools`` and ``end_turn``, bound to ``owner``."""
    spec = {  # the shared settings are added when the class is pickled (a worker's may be another server's)
        "bundle": owner.bundle,
        "name": class_name,
        "key": key,
        "tools": [t.as_dict() for t in tools],
    }
    namespace: dict[str, Any] = {t.name: build_method(t, TaskEnvironment._tool) for t in [*tools, END_TURN]}
    namespace.update(
        __module__=__name__,
        __qualname__=class_name,
        _agentenv=owner,
        _toolset_key=key,
        _spec=spec,
        __doc__=f"TRL environment for the tasks of toolset {key} on {owner.shared.url}.",
    )
    return _EnvironmentType(class_name, (TaskEnvironment,), namespace)
