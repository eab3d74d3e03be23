"""Every error agentenv raises on purpose. Each message says what happened and what to do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentenv.wire import EpisodeResult, Failure

__all__ = [
    "AgentEnvError",
    "AtCapacity",
    "BundleError",
    "BundleProblem",
    "EnvCrashed",
    "EpisodeFailed",
    "EpisodeLost",
    "PluginError",
    "ProtocolError",
    "ProtocolMismatch",
    "RolloutFailed",
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
        where = _plain(self.file) if self.line is None else f"{_plain(self.file)}:{self.line}"
        field = f" {_plain(self.field)}:" if self.field else ""
        return f"{where}:{field} {_plain(self.message)}"


def _plain(text: str) -> str:
    """``text`` with each character a terminal would act on (controls, escapes, bidi marks) written as its escape: a
    bundle's keys, values and file names reach terminals through its problems."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


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

    The message goes back to the model as the tool's answer and the episode goes on. Any other
    exception from a tool is the env's bug: the episode fails (``crash``), naming the file and line,
    and is never trained on; ``EnvCrashed`` says so on purpose.
    """


class EnvCrashed(Exception):
    """Raised by an env when it broke (not the policy's doing): the episode ends as ``failed``."""


# --- session layer (client) errors ------------------------------------------------------------


class EpisodeLost(AgentEnvError):
    """The env or the server lost the episode (``failure`` says how; see ``agentenv.faults``).

    Never the policy's doing: the episode is replayed or left out, never trained on as a zero.
    """

    def __init__(self, message: str, *, failure: Failure) -> None:
        self.failure = failure
        super().__init__(message)

    @property
    def kind(self) -> str:
        """The failure's kind (a row of the fault table)."""
        return self.failure.kind

    @property
    def stage(self) -> str:
        """Where it failed: deploy, tool, scoring, session, client."""
        return self.failure.stage

    def brief(self) -> str:
        """A short form for the model to read (a trainer shows it as the tool's answer; tokens are scarce)."""
        return f"the environment failed ({self.failure.kind} during {self.failure.stage}); this episode is not scored"


class EpisodeFailed(EpisodeLost):
    """The env failed the episode (deploy, crash, deadline, verifier); ``result`` is the server's account."""

    def __init__(self, message: str, *, failure: Failure, result: EpisodeResult | None = None) -> None:
        self.result = result
        super().__init__(message, failure=failure)


class ToolDeadline(EpisodeLost):
    """A tool call (or an end of turn) got no answer from the server within the client's deadline."""


class ServerUnavailable(EpisodeLost):
    """No agentenv server answered at the URL (refused, unreachable, restarting, or gone mid-episode)."""


class AtCapacity(ServerUnavailable):
    """The server holds as many sessions as it allows (or has no resources for another)."""


class ProtocolError(EpisodeLost):
    """The server answered something the session layer cannot read; the episode is lost."""


class Unauthorized(AgentEnvError):
    """The server refused the bearer token (missing or wrong)."""


class ProtocolMismatch(AgentEnvError):
    """The server speaks another protocol version than this client; the message says which package to upgrade."""

    def __init__(self, message: str, *, server: int, client: int) -> None:
        self.server = server
        self.client = client
        super().__init__(message)


class UnknownSplit(AgentEnvError):
    """The server has no such split."""

    def __init__(self, message: str, *, split: str = "", splits: list[str] | None = None) -> None:
        self.split = split
        self.splits = list(splits or [])
        super().__init__(message)


class UnknownTask(AgentEnvError):
    """The server has no such task (by id, or split and index)."""


class RolloutFailed(EpisodeLost):
    """Every attempt at a rollout was lost (or no replay could start in its time budget).

    ``failures`` lists each attempt's failure; ``failure`` is the last one.
    """

    def __init__(self, message: str, *, task_id: str, failures: list[Failure]) -> None:
        self.task_id = task_id
        self.failures = list(failures)
        super().__init__(message, failure=self.failures[-1])

    @property
    def attempts(self) -> int:
        """How many attempts were played."""
        return len(self.failures)
