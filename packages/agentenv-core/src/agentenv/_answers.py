"""What a play gives back, as both sides hold it: plain frozen dataclasses the engine builds and the wire carries
as dicts (``Tool``, ``Failure``, ``Seconds``, ``EpisodeResult``, ``Started``, ``ToolAnswer``, ``TurnAnswer``).
Import them from ``agentenv.wire``, the protocol's one face."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentenv.faults import Fault, fault_of

__all__ = ["EpisodeResult", "Failure", "Outcome", "Seconds", "Started", "Tool", "ToolAnswer", "TurnAnswer"]


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its name, what it does, and the full JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def as_openai(self) -> dict[str, Any]:
        """The OpenAI function-tool form chat templates render."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the form the server sends)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tool:
        """Read the form ``as_dict`` writes."""
        return cls(
            name=str(data["name"]),
            description=str(data.get("description", "")),
            parameters=dict(data.get("parameters") or {"type": "object", "properties": {}}),
        )


@dataclass(frozen=True)
class Failure:
    """Why an episode failed: ``kind`` (a row of ``agentenv.faults``), ``stage`` (deploy, tool, scoring,
    session, client), the message, and who is at fault (from the table unless given)."""

    kind: str
    stage: str
    message: str
    fault: str = ""

    def __post_init__(self) -> None:
        if not self.fault:
            object.__setattr__(self, "fault", str(fault_of(self.kind)))

    @property
    def replayable(self) -> bool:
        """Whether a new episode may go well (the fault table's ``replay``)."""
        from agentenv.faults import rule

        return rule(self.kind).replay and self.fault != Fault.POLICY


@dataclass(frozen=True)
class Seconds:
    """Where an episode's env time went."""

    deploy: float = 0.0
    tools: float = 0.0
    scoring: float = 0.0

    @property
    def total(self) -> float:
        """All of it."""
        return self.deploy + self.tools + self.scoring


Outcome = Literal["scored", "failed", "unscored"]


@dataclass(frozen=True)
class EpisodeResult:
    """How an episode ended. ``reward`` is None unless ``outcome`` is ``scored``."""

    task_id: str
    outcome: Outcome
    reward: float | None = None
    scores: dict[str, float | None] = field(default_factory=dict)
    failure: Failure | None = None
    reason: str = ""
    turns: int = 0
    seconds: Seconds = field(default_factory=Seconds)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the form the server sends)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeResult:
        """Read the form ``as_dict`` writes."""
        failure = data.get("failure")
        return cls(
            task_id=str(data["task_id"]),
            outcome=data["outcome"],
            reward=data.get("reward"),
            scores=dict(data.get("scores") or {}),
            failure=Failure(**failure) if failure else None,
            reason=str(data.get("reason", "")),
            turns=int(data.get("turns", 0)),
            seconds=Seconds(**(data.get("seconds") or {})),
        )


# ---------------------------------------------------------------------------------------------
# What the client makes of the answers (the session layer returns these)
# ---------------------------------------------------------------------------------------------


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
