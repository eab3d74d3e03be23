"""Every error agentenv raises on purpose. Each message says what happened and what to do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "AgentEnvError",
    "AtCapacity",
    "BundleError",
    "BundleProblem",
    "EnvCrashed",
    "EpisodeFailed",
    "PluginError",
    "ProtocolError",
    "ServerUnavailable",
    "ToolDeadline",
    "ToolError",
    "Unauthorized",
    "UnknownSplit",
    "UnknownTask",
]


class AgentEnvError(Exception):
    """Base of every error agentenv raises on purpose."""


@dataclass(frozen=True)
class BundleProblem:
    """One thing wrong with a bundle: where (file, field, line) and what to do."""

    file: str
    field: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class BundleError(AgentEnvError):
    """A bundle was refused whole; ``problems`` lists every reason."""

    def __init__(self, bundle: str, problems: list[BundleProblem]) -> None:
        self.bundle = bundle
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        count = len(self.problems)
        super().__init__(
            f"bundle {bundle!r} was refused ({count} problem{'s' if count != 1 else ''}); nothing was loaded:\n{lines}"
        )


class PluginError(AgentEnvError):
    """Plugins disagree (two register one name) or a named plugin object does not exist."""


class ToolError(Exception):
    """Raised by an env's tool for a mistake of the caller (the policy).

    The message goes back to the model as the tool's answer and the episode goes on.
    Any other exception from a tool is treated the same way; raise ``EnvCrashed`` when the
    env itself broke and the episode must not be trained on.
    """


class EnvCrashed(Exception):
    """Raised by an env when it broke (not the policy's doing): the episode ends as ``failed``."""


# --- session layer (client) errors ------------------------------------------------------------


class ServerUnavailable(AgentEnvError):
    """No agentenv server answered at the URL (refused, unreachable, or gone mid-episode)."""


class AtCapacity(AgentEnvError):
    """The server holds as many sessions as it allows."""


class Unauthorized(AgentEnvError):
    """The server refused the bearer token (missing or wrong)."""


class UnknownSplit(AgentEnvError):
    """The server has no such split."""

    def __init__(self, message: str, *, split: str = "", splits: list[str] | None = None) -> None:
        self.split = split
        self.splits = list(splits or [])
        super().__init__(message)


class UnknownTask(AgentEnvError):
    """The server has no such task (by id, or split and index)."""


class ToolDeadline(AgentEnvError):
    """A tool call (or an end of turn) got no answer within its deadline; the episode is lost."""


class EpisodeFailed(AgentEnvError):
    """The env failed the episode (its fault, not the policy's); never train on it as a zero."""

    def __init__(self, message: str, *, kind: str, stage: str, result: Any = None) -> None:
        self.kind = kind
        self.stage = stage
        self.result = result  # the EpisodeResult, when the server sent one
        super().__init__(message)


class ProtocolError(AgentEnvError):
    """The server answered something the session layer did not expect (usually a version mismatch)."""
