"""What both of ``agentenv serve``'s faces (OpenEnv's and ``--ors``) do before serving: the token kept from the policy's
programs, the sandbox chosen and said, the port bound."""

from __future__ import annotations

import errno
import socket
from typing import Any

from agentenv.errors import AgentEnvError

__all__ = ["listen", "refuse_passing_the_token", "sandbox_note"]


def refuse_passing_the_token(bundle: Any, token_var: str | None) -> None:
    """The token's variable is never passed to a program the policy steers, even where a ``pass_env`` lists it."""
    from agentenv.sandbox import keep_secret, passed_anywhere

    if token_var is None:
        return
    keep_secret(token_var)
    listed = passed_anywhere(token_var, envs=bundle.envs, agents=bundle.agents)
    if listed:
        raise AgentEnvError(
            f"{bundle.path / 'bundle.yaml'}: {', '.join(listed)} lists {token_var}, the server's token variable "
            "(--token-var); a program the policy steers is never passed it: remove it from pass_env"
        )


def sandbox_note(bundle: Any, name: str | None) -> str:
    """Choose the sandbox (``--sandbox``/``--no-sandbox``) and say which is in force; ``SandboxUnavailable`` naming
    the fix where the bundle runs programs the policy steers and the sandbox cannot run here."""
    from agentenv import sandbox

    sandbox.use(name)
    if not sandbox.runs_programs(bundle):
        return "sandbox: none needed (the bundle runs no program the policy steers)"
    return f"sandbox: {sandbox.current().describe()}"


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` as uvicorn would bind it; a port in use is an error naming ``--port``."""
    from .runner import listening_socket

    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise AgentEnvError(
                f"--port {port}: {host}:{port} is already in use (another agentenv serve?); pick a free port with "
                "--port N, or stop what listens there"
            ) from None
        raise AgentEnvError(f"--host {host} --port {port}: cannot listen there ({exc.strerror}); fix --host") from None
    return sock  # not inheritable: a program this server starts (its reaper) must not keep the port accepting
