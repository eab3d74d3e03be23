"""Connection settings every integration shares: the server's URL, its token's variable, the deadlines."""

from __future__ import annotations

import functools
import logging
import os
import re
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from agentenv.errors import AgentEnvError, Unauthorized
from agentenv.hosts import is_loopback

if TYPE_CHECKING:
    from agentenv.client.transport import InProcess

__all__ = ["Shared"]

_log = logging.getLogger("agentenv.settings")


@dataclass(frozen=True)
class Shared:
    """Connection settings every integration shares.

    ``url``: the server (``http://host:port``). ``token_var``: the environment variable holding the
    bearer token; it is read when used, so the token never sits in a config file. ``tool_timeout``:
    the deadline of a tool call; ``reset_timeout``: of opening a session, a deploy, and an end of turn
    (the last runs the verifiers). ``waits_for_server``: wait out a server that refuses connections, is
    restarting or is at capacity, within ``reset_timeout``. ``margin``: extra seconds the client allows
    past the server's own deadlines, so the server's verdict normally arrives first. ``bearer``: a token held in
    memory instead, for a server this process runs itself (``AgentEnv.local``, ``agentenv eval BUNDLE_DIR``, from
    ``agentenv_server.runner.local_token``); never shown in a repr. ``client``: who plays (``trl``, ``verl``,
    ``eval``...), for the server's records. ``here``: the bundle is played in this process instead (``agentenv.local``
    makes these settings, with a ``local:`` URL naming it); sessions and the Task API then go through it.
    """

    url: str
    token_var: str | None = None
    tool_timeout: float = 60.0
    reset_timeout: float = 300.0
    waits_for_server: bool = False
    margin: float = 10.0
    bearer: str | None = field(default=None, repr=False)
    client: str = ""
    here: InProcess | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.here is not None:
            if not self.url.startswith("local:"):
                raise AgentEnvError(f"a bundle played in this process has a local: URL, not {self.url!r}")
            return
        if not re.match(r"^(https?|wss?)://[^/\s]+", self.url):
            raise AgentEnvError(f"server URL {self.url!r} is not of the form http://host:port; fix the URL")
        object.__setattr__(self, "url", self.url.rstrip("/"))

    def token(self) -> str | None:
        """The bearer token: ``bearer``, else from ``$token_var`` (None without either); refuses an unset variable."""
        if self.bearer is not None:
            return self.bearer
        if self.token_var is None:
            return None
        token = os.environ.get(self.token_var)
        if not token:
            raise Unauthorized(
                f"${self.token_var} is not set or empty, but the token for {self.url} is read from it: "
                f"export {self.token_var}=<token the server was started with>"
            )
        return token

    def headers(self) -> dict[str, str]:
        """The HTTP headers every request carries (the Authorization header when a token is set).

        A token for another machine over plain ``http://`` is warned about, once per URL: it crosses the network in
        clear, with every prompt and answer.
        """
        token = self.token()
        if not token:
            return {}
        if self.url.startswith(("http://", "ws://")) and not self.loopback:
            from agentenv.logs import warn_once

            warn_once(_log, f"clear:{self.url}", _IN_CLEAR, self.url)
        return {"Authorization": f"Bearer {token}"}

    def ssl_context(self) -> ssl.SSLContext:
        """The certificates a TLS server is checked against: the system's (``$SSL_CERT_FILE`` and ``$SSL_CERT_DIR``
        name others), for the Task API and the WebSocket alike."""
        return _trust()

    @property
    def http_url(self) -> str:
        """The server's base URL over HTTP(S)."""
        return re.sub(r"^ws", "http", self.url)

    @property
    def ws_url(self) -> str:
        """The URL of the server's ``/ws`` endpoint."""
        return re.sub(r"^http", "ws", self.http_url) + "/ws"

    @property
    def loopback(self) -> bool:
        """Whether the server is on this machine (no proxy is used for it)."""
        return self.here is not None or is_loopback(urlparse(self.http_url).hostname or "")


_IN_CLEAR = (
    "the token for %s is sent in clear over plain http://, with every prompt and answer: serve it over TLS (agentenv "
    "serve --ssl-keyfile/--ssl-certfile, or a reverse proxy that terminates TLS) and give the https:// URL"
)


@functools.cache
def _trust() -> ssl.SSLContext:
    return ssl.create_default_context()
