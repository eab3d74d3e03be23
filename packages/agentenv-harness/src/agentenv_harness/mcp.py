"""The episode's tools over MCP: what a deployed agent calls, so that its calls are the episode's calls.

Each episode gets its own MCP server (FastMCP, streamable HTTP, stateless with JSON answers) on a loopback
port, behind a bearer token only that episode's solver gets. It is served the way OpenEnv's
``HarnessMCPBridge`` serves one (uvicorn in a thread of its own, an ephemeral loopback port), but from a
listening socket with TCP_NODELAY: the bridge's leaves Nagle's algorithm on, which added about 40 ms to
every tool call (the client's delayed ACK). A call runs ``call(name,
args)`` on the episode's event loop: the episode validates the arguments, runs the tool and records it
like any other; a policy's mistake comes back to the agent as an error result.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentenv.launch import McpServer
from agentenv.wire import Tool
from agentenv_server.access import UNAUTHORIZED, Turned, turn_away

from ._threads import LoopbackServer

__all__ = ["ToolServer"]

Call = Callable[[str, dict[str, Any]], Awaitable[tuple[str, bool]]]


class _BearerGuard:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` gets 401 (agentenv's refusal)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            offered = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not secrets.compare_digest(offered, self.expected):
                await turn_away(_NO_TOKEN, scope, receive, send)
                return
        await self.app(scope, receive, send)


_NO_TOKEN = Turned(
    401,
    UNAUTHORIZED,
    "this MCP server needs its bearer token: send 'Authorization: Bearer <token>' with the token the agent was "
    "given for this episode",
)


def _mcp_server(tools: Sequence[Tool], call: Call, loop: asyncio.AbstractEventLoop, name: str) -> Any:
    from fastmcp import FastMCP
    from fastmcp.tools.base import Tool as McpTool
    from fastmcp.tools.base import ToolResult
    from mcp.types import TextContent

    class EpisodeTool(McpTool):
        """An episode's tool: same name, description and JSON Schema; runs on the episode's loop."""

        async def run(self, arguments: dict[str, Any]) -> ToolResult:
            future = asyncio.run_coroutine_threadsafe(call(self.name, dict(arguments or {})), loop)
            text, error = await asyncio.wrap_future(future)
            return ToolResult(content=[TextContent(type="text", text=text)], is_error=error)

    server = FastMCP(name)
    for tool in tools:
        server.add_tool(EpisodeTool(name=tool.name, description=tool.description, parameters=tool.parameters))
    return server


class ToolServer:
    """An episode's tools as an MCP server on loopback; ``start()`` returns where and with which token."""

    def __init__(
        self, tools: Sequence[Tool], call: Call, loop: asyncio.AbstractEventLoop, *, name: str = "env"
    ) -> None:
        self.tools = list(tools)
        self.name = name
        self._token = secrets.token_urlsafe(24)
        self._server = _mcp_server(self.tools, call, loop, name)
        self._served: LoopbackServer | None = None

    def start(self) -> McpServer:
        """Serve the tools (blocks until the server answers); returns its URL and token."""
        # stateless, JSON answers: no long-lived SSE stream per agent to tear down when it exits
        app = _BearerGuard(self._server.http_app(stateless_http=True, json_response=True), self._token)
        self._served = LoopbackServer(app, name=f"agentenv-mcp-{self.name}")
        return McpServer(url=f"{self._served.url}/mcp", token=self._token, name=self.name)

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._served is not None:
            self._served.stop()
            self._served = None
