"""What went wrong between the session layer and a server, as typed errors that name the fix.

Each transport error (``agentenv.client.transport``) and each refusal the server answers is an ``EpisodeLost`` of the
fault table's kind (``agentenv.faults``), or a configuration error (``Unauthorized``, ``ProtocolMismatch``,
``UnknownTask``...) raised at once; a call that was never run is answered to the model (``not_run``).
"""

from __future__ import annotations

from agentenv import wire
from agentenv.client.settings import Shared
from agentenv.client.transport import NOT_JSON, Closed, ErrorFrame, Overloaded, Refused, TransportError, Unreachable
from agentenv.errors import (
    AgentEnvError,
    AtCapacity,
    EpisodeLost,
    ProtocolError,
    ProtocolMismatch,
    ServerUnavailable,
    Unauthorized,
    UnknownSplit,
    UnknownTask,
)
from agentenv.wire import Code, Failure

__all__ = ["from_transport", "lost_error", "mismatch", "not_run", "refused", "unauthorized"]


def lost_error(kind: str, stage: str, message: str, cls: type[EpisodeLost] = ServerUnavailable) -> EpisodeLost:
    """An ``EpisodeLost`` of ``cls`` for failure ``kind`` (a row of the fault table)."""
    return cls(message, failure=Failure(kind, stage, message))


def unauthorized(shared: Shared) -> Unauthorized:
    """The error for a refused token, naming the variable to set."""
    via = f" from ${shared.token_var}" if shared.token_var else ""
    fix = (
        f"set ${shared.token_var} to the token the server was started with"
        if shared.token_var
        else "pass token_var= (or --token-var) naming the variable that holds the server's token"
    )
    return Unauthorized(f"{shared.url} refused the bearer token{via}: {fix}")


def mismatch(shared: Shared, server: int) -> ProtocolMismatch:
    """The error for a server of another protocol version, naming the package to upgrade."""
    if server < wire.PROTOCOL:
        fix = "upgrade agentenv-server where the server runs (pip install -U agentenv-server)"
    else:
        fix = "upgrade agentenv-core here (pip install -U agentenv-core, with the integration you use)"
    return ProtocolMismatch(
        f"{shared.url} speaks agentenv protocol {server}, this client speaks {wire.PROTOCOL}: {fix}",
        server=server,
        client=wire.PROTOCOL,
    )


def from_transport(exc: TransportError, shared: Shared, stage: str) -> AgentEnvError:
    url = shared.url
    if isinstance(exc, Refused):
        if exc.status == 401:
            return unauthorized(shared)
        return lost_error("unreachable", stage, f"{url} refused the session with HTTP {exc.status}: {exc.body[:200]}")
    if isinstance(exc, Overloaded):
        if exc.timed_out:
            return lost_error("overloaded", stage, f"{url}: {exc}")
        return lost_error("out_of_resources", stage, f"{url}: {exc}", AtCapacity)
    if isinstance(exc, Unreachable):
        hint = "" if shared.waits_for_server else "; waits_for_server=True waits for it within reset_timeout"
        return lost_error(
            "unreachable",
            stage,
            f"no agentenv server answered at {url} ({exc}). Start one (agentenv serve BUNDLE --port PORT) or fix "
            f"the URL{hint}",
        )
    if isinstance(exc, Closed):
        if exc.code == 1012:
            return lost_error(
                "restarting",
                stage,
                f"{url} is restarting (it closed the session with code 1012); the "
                "episode was lost. Retry, or use waits_for_server=True to wait for it",
            )
        if exc.reason == "idle" or exc.code == 1001:
            return lost_error(
                "idle",
                stage,
                f"{url} closed the session: it was idle longer than the server's idle_timeout; the episode was lost",
            )
        return lost_error("connection_lost", stage, f"{url} closed the session (code {exc.code}); the episode was lost")
    assert isinstance(exc, ErrorFrame)
    if exc.code == Code.CAPACITY:
        return lost_error("capacity", stage, f"{url}: {exc.message}", AtCapacity)
    if exc.code == Code.OUT_OF_RESOURCES:
        return lost_error("out_of_resources", stage, f"{url}: {exc.message}", AtCapacity)
    if exc.code == Code.IDLE:
        return lost_error("idle", stage, f"{url} closed the session: {exc.message}")
    if exc.code == Code.RESTARTING:
        return lost_error("restarting", stage, f"{url} is restarting: {exc.message}; the episode was lost")
    return lost_error("protocol", stage, f"{url} refused a request: {exc.message} (code {exc.code})", ProtocolError)


def refused(problem: wire.Problem, shared: Shared) -> AgentEnvError:
    text = f"{shared.url}: {problem.message}"
    if problem.code == Code.UNKNOWN_SPLIT:
        return UnknownSplit(text)
    if problem.code == Code.UNKNOWN_TASK:
        return UnknownTask(text)
    if problem.code == Code.BAD_RESET:
        return AgentEnvError(text)
    return lost_error("protocol", "session", f"{text} (code {problem.code})", ProtocolError)


def not_run(tool: str, dropped: ErrorFrame) -> str:
    """The answer the model gets for a call that was not sent or that the server dropped (its own mistake)."""
    if dropped.code == NOT_JSON:
        return (
            f"error: the arguments of {tool!r} hold a number JSON cannot carry (NaN, Infinity, or an integer of more "
            "than 4300 digits); it was not run. Send finite numbers"
        )
    return f"error: the call to {tool!r} is larger than the server accepts; it was not run. Send smaller arguments"
