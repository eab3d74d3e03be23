"""The typed parts of a bundle: env and agent specs, toolsets, turns, verifiers, reward rules, tasks.

Plain pydantic models and records that import nothing of agentenv's registries, so env kinds,
task sources and the session layer can use them without loading the plugin system.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "BASH_TOOL",
    "BUNDLE_FILE",
    "AgentSpec",
    "EnvSpec",
    "RawTask",
    "RewardSpec",
    "SolutionCall",
    "SolutionTurn",
    "Task",
    "Toolset",
    "Turn",
    "VerifierSpec",
]

BUNDLE_FILE = "bundle.yaml"
BASH_TOOL = "bash"


class _Model(BaseModel):
    # a number where text belongs (an id, a prompt, a reply) is taken as its text: datasets and YAML
    # both write `answer: 42`, and refusing it would help nobody
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class EnvSpec(BaseModel):
    """An env of a bundle: its kind, what to run, its config, and which tools each role gets.

    Fields other than these are the kind's own options (checked by the kind).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    kind: str = "python"
    target: str | None = None
    command: list[str] | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    roles: dict[str, list[str]] | None = None

    @property
    def options(self) -> dict[str, Any]:
        """The kind-specific fields."""
        return dict(self.model_extra or {})

    def canonical(self) -> dict[str, Any]:
        """A JSON-ready form, stable across processes (part of toolset keys)."""
        return json.loads(json.dumps(self.model_dump(mode="json"), sort_keys=True))


class AgentSpec(BaseModel):
    """A solver program a task may deploy (used by harness integrations)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    kind: str = "process"
    command: list[str] = Field(default_factory=list)


class Toolset(_Model):
    """What a task offers the model: its envs' tools for ``role``, with per-env access changes.

    ``deny`` removes tools of an env from the role's set, ``allow`` adds tools the role would not
    otherwise get; ``bash`` offers a ``bash`` tool run in the episode's scratch folder.
    """

    envs: list[str] = Field(default_factory=list)
    role: str = "agent"
    deny: dict[str, list[str]] = Field(default_factory=dict)
    allow: dict[str, list[str]] = Field(default_factory=dict)
    bash: bool = False


class VerifierSpec(BaseModel):
    """A verifier of a turn: its step id (``answer-1``), its kind and the kind's fields."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True)

    id: str
    kind: str

    @property
    def params(self) -> dict[str, Any]:
        """The kind's own fields."""
        return dict(self.model_extra or {})


class Turn(_Model):
    """One turn: the prompt the model gets and the verifiers that score its reply."""

    prompt: str
    verifiers: list[VerifierSpec] = Field(default_factory=list)

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; write the prompt the model gets on this turn")
        return value


class RewardSpec(_Model):
    """A reward rule by name with its parameters (``weights`` for ``weighted``)."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True)

    rule: str = "mean"

    @property
    def params(self) -> dict[str, Any]:
        """The rule's own fields."""
        return dict(self.model_extra or {})


class SolutionCall(_Model):
    """A tool call of a reference solution."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class SolutionTurn(_Model):
    """A turn of a reference solution: the tool calls, then the reply."""

    calls: list[SolutionCall] = Field(default_factory=list)
    reply: str = ""


class Task(_Model):
    """A task: id, split, system prompt, turns, toolset, reward rule, and a reference solution."""

    id: str
    split: str
    system: str = ""
    toolset: Toolset = Field(default_factory=Toolset)
    turns: list[Turn] = Field(min_length=1)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    solution: list[SolutionTurn] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_by_name(cls, value: Any) -> Any:
        return {"rule": value} if isinstance(value, str) else value

    @property
    def step_ids(self) -> list[str]:
        """Every verifier's step id, in turn order."""
        return [v.id for turn in self.turns for v in turn.verifiers]


@dataclass(frozen=True)
class RawTask:
    """A task as a task source read it: its data, and where to point when it is refused.

    ``file`` is the file to name (relative to the bundle); ``lines`` maps a field's path in ``data``
    (``("turns", 0, "prompt")``) to its line in that file, ``()`` to the task's first line. A task read
    from a row of a dataset file gives its ``row`` (counted from 0) and, in ``columns``, the column
    each field came from, so a refusal names the row and the column.
    """

    data: Any
    file: str
    lines: Mapping[tuple[str | int, ...], int] = field(default_factory=dict)
    row: int | None = None
    columns: Mapping[tuple[str | int, ...], str] = field(default_factory=dict)
