"""The agentenv protocol: everything the server and the session layer say to each other, typed and versioned.

It rides on OpenEnv's ``/ws`` protocol (JSON text frames): a ``reset`` frame's data is a ``Reset``, a
``step`` frame's data is an ``Action``, and every observation the server sends is an ``Observation``
whose ``event`` says what it answers (``started``, ``tool``, ``turn``, ``result``, or ``error`` for a
request the server refused while the session goes on). Over HTTP, ``GET /agentenv`` answers a
``ServerInfo`` and OpenEnv's Task API routes answer ``TaskRow`` records.

Both sides import these models, so they cannot drift apart; ``PROTOCOL`` changes with any change a peer
of the other version could not read. The server announces its version in ``ServerInfo`` and in every
``started`` observation; the client refuses a mismatch (``ProtocolMismatch``). Unknown fields are
ignored (a newer peer may add some) unless ``$AGENTENV_STRICT_WIRE`` is set, as the tests do.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentenv._answers import EpisodeResult, Failure, Outcome, Seconds, Started, Tool, ToolAnswer, TurnAnswer

__all__ = [
    "MAX_FRAME",
    "PROTOCOL",
    "STRICT_VAR",
    "Action",
    "ActionFields",
    "Attempt",
    "Code",
    "EpisodeResult",
    "Event",
    "Failure",
    "Observation",
    "ObservationFields",
    "Op",
    "Outcome",
    "Problem",
    "Purpose",
    "Reset",
    "Seconds",
    "ServerInfo",
    "Started",
    "TaskRow",
    "Tool",
    "ToolAnswer",
    "ToolsetInfo",
    "TurnAnswer",
    "WireError",
    "read",
    "unknown_fields",
]

log = logging.getLogger("agentenv.wire")
MAX_FRAME: Final = 64 * 1024 * 1024  # what a client reads: answers (tool output, a task's tools) may be large

PROTOCOL: Final = 2
STRICT_VAR: Final = "AGENTENV_STRICT_WIRE"

Purpose = Literal["play", "probe", "check"]


class Op:
    """``Action.op``: what a step asks for."""

    CALL: Final = "call"  # tool, args
    END_TURN: Final = "end_turn"  # reply
    RESULT: Final = "result"  # read the result (None while the episode runs)
    FINISH: Final = "finish"  # end the episode now (tears it down; unscored if turns remain)


class Event:
    """``Observation.event``: what an observation answers."""

    STARTED: Final = "started"
    TOOL: Final = "tool"
    TURN: Final = "turn"
    RESULT: Final = "result"
    ERROR: Final = "error"  # the request was refused; ``problem`` says why and the session goes on


class Code:
    """``Problem.code`` of an ``error`` observation, and the ``code`` of agentenv's own error frames.

    OpenEnv's own frame codes (``CAPACITY_REACHED``, ``INVALID_JSON``, ``VALIDATION_ERROR``,
    ``EXECUTION_ERROR``, ``UNKNOWN_TYPE``, ``FACTORY_ERROR``, ``SESSION_ERROR``) keep their meaning.
    """

    UNKNOWN_SPLIT: Final = "UNKNOWN_SPLIT"
    UNKNOWN_TASK: Final = "UNKNOWN_TASK"
    BAD_RESET: Final = "BAD_RESET"
    NO_EPISODE: Final = "NO_EPISODE"
    TOO_LARGE: Final = "MESSAGE_TOO_LARGE"  # an error frame; the frame was dropped, the session goes on
    BAD_FRAME: Final = "BAD_FRAME"  # an error frame for a frame that is not a JSON object; the session goes on
    IDLE: Final = "IDLE_TIMEOUT"  # an error frame, then close code 1001
    RESTARTING: Final = "RESTARTING"
    OUT_OF_RESOURCES: Final = "OUT_OF_RESOURCES"  # the server could not take the session (file descriptors)
    CAPACITY: Final = "CAPACITY_REACHED"  # OpenEnv's own code for a full server


# ---------------------------------------------------------------------------------------------
# Frames: pydantic models (the server's OpenEnv action and observation classes inherit the fields)
# ---------------------------------------------------------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Attempt(_Wire):
    """Which attempt of which rollout an episode is, as its client knows it (the server records it).

    ``rollout``: the rollout's id (the same for each of its attempts); ``number``: 1 for the first attempt;
    ``earlier``: the failures of the attempts before it (``Failure`` as dicts), including losses the server never
    saw (a connection that dropped); ``client``: who plays (``trl``, ``verl``, ``eval``...); ``step``: the
    trainer's step, when the client knows it.
    """

    rollout: str
    number: int = 1
    earlier: list[dict[str, str]] = Field(default_factory=list)
    client: str = ""
    step: int | None = None


class Reset(_Wire):
    """A reset's data: start a task by ``task_id``, or by ``split`` and ``index``.

    ``purpose`` tells observers why the episode runs (``play``; ``probe``: the client lists a toolset's
    tools; ``check``: ``agentenv check``). ``protocol`` is the client's version. ``attempt`` says which attempt of
    which rollout this is (``Rollout`` sends it; the server's records keep it).
    """

    task_id: str | None = None
    split: str | None = None
    index: int | None = None
    episode_id: str | None = None
    purpose: Purpose = "play"
    protocol: int = PROTOCOL
    attempt: Attempt | None = None


class ActionFields(BaseModel):
    """The fields of a step: call a tool, end the turn, read the result, or finish now."""

    op: Literal["call", "end_turn", "result", "finish"]
    tool: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    reply: str = ""


class Action(ActionFields, _Wire):
    """A step's data, as the client sends it."""


class Problem(_Wire):
    """Why the server refused a request: a ``Code`` and a message that names the fix."""

    code: str
    message: str


class ObservationFields(BaseModel):
    """The fields of an observation. Which are set depends on ``event``:

    ``started``: protocol, episode_id, task_id, split, index, turn, turns, system, prompt, tools,
    toolset_key, deployed, max_message_bytes (the largest step the server takes; the client answers a
    larger call itself, as the policy's mistake), and result when the episode failed at once.
    ``tool``: tool, text, error (the text is an error message for the model: the policy's mistake).
    ``turn``: prompt (the next turn's). ``result``: result. ``error``: problem.
    """

    event: Literal["started", "tool", "turn", "result", "error"]
    protocol: int = PROTOCOL
    episode_id: str = ""
    task_id: str = ""
    split: str = ""
    index: int = -1
    turn: int = 0
    turns: int = 0
    system: str = ""
    prompt: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    toolset_key: str = ""
    tool: str = ""
    text: str = ""
    error: bool = False
    deployed: bool = False
    max_message_bytes: int = 0
    result: dict[str, Any] | None = None
    problem: Problem | None = None


class Observation(ObservationFields, _Wire):
    """An observation, as the client reads it (``metadata`` is OpenEnv's own field of every observation)."""

    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolsetInfo(_Wire):
    """A task's toolset as the Task API lists it: its envs, role, access changes and bash."""

    envs: list[str] = Field(default_factory=list)
    role: str = ""
    access: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    bash: bool = False


class TaskRow(_Wire):
    """A task as the Task API lists it."""

    id: str
    split: str
    index: int
    system: str = ""
    prompt: str
    turns: int
    toolset_key: str
    toolset: ToolsetInfo = Field(default_factory=ToolsetInfo)
    steps: list[str] = Field(default_factory=list)  # every verifier's step id, in turn order

    def messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages: the system prompt (when there is one), then the first prompt."""
        out = [{"role": "system", "content": self.system}] if self.system else []
        return [*out, {"role": "user", "content": self.prompt}]


class ServerInfo(_Wire):
    """``GET /agentenv``: what the server serves and its limits."""

    protocol: int
    name: str
    description: str = ""
    version: str = ""
    splits: dict[str, int] = Field(default_factory=dict)  # split name -> number of tasks, in the bundle's order
    max_message_bytes: int = 0
    max_concurrent_envs: int = 0
    tool_timeout: float = 0.0
    reset_timeout: float = 0.0


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


class WireError(ValueError):
    """A frame that does not fit its model (the session layer raises it as ``ProtocolError``)."""


M = TypeVar("M", bound=BaseModel)
_warned_fields: set[tuple[str, str]] = set()


def unknown_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of the fields ``model`` (and the models in it) did not declare."""
    out = [f"{prefix}{name}" for name in (model.model_extra or {})]
    for name in _nested(type(model)):  # read per frame: only the fields that can hold a model are looked at
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out += unknown_fields(value, f"{prefix}{name}.")
    return out


@functools.cache
def _nested(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``model`` whose type may be a pydantic model."""

    def holds_model(annotation: Any) -> bool:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return True
        return any(holds_model(arg) for arg in getattr(annotation, "__args__", ()))

    return tuple(name for name, info in model.model_fields.items() if holds_model(info.annotation))


def read(model: type[M], data: Any, what: str) -> M:
    """Validate ``data`` as ``model``; ``what`` names it in errors (``the reset answer of http://...``).

    Unknown fields are an error when ``$AGENTENV_STRICT_WIRE`` is set, else logged once per field.
    """
    try:
        value = model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the frame)"
        raise WireError(f"{what} does not fit agentenv's protocol {PROTOCOL}: {where}: {first['msg']}") from None
    extra = unknown_fields(value)
    if extra:
        if os.environ.get(STRICT_VAR):
            raise WireError(f"{what} has field(s) protocol {PROTOCOL} does not know: {', '.join(extra)}")
        for name in extra:
            if (model.__name__, name) not in _warned_fields:
                _warned_fields.add((model.__name__, name))
                log.info("ignoring field %r of %s (a newer peer?)", name, model.__name__)
    return value
