"""The server's Task API, over HTTP: what it serves (``probe``), its tasks (paged), and each toolset's tools.

``probe`` reads ``GET /agentenv`` (a ``ServerInfo``, with the server's protocol version, checked here);
tasks come from OpenEnv's Task API route ``POST /{bundle}/task_range`` a page at a time, so a split of
100,000 tasks is never one response; ``tasks_and_tools`` plays one task per toolset key (purpose
``probe``) to list its tools. With ``waits_for_server``, a server that is not up yet is waited out within
``reset_timeout``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agentenv import wire
from agentenv.client.lost import lost_error, mismatch, unauthorized
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.client.sync import run_sync
from agentenv.errors import ProtocolError, UnknownSplit
from agentenv.logs import warn_once
from agentenv.wire import ServerInfo, TaskRow, Tool

__all__ = ["PAGE", "iter_tasks", "probe", "read_tasks", "tasks_and_tools"]

log = logging.getLogger("agentenv.taskapi")

PAGE = 1000  # tasks per Task API request


class _Client:
    """One HTTP connection to the server for a series of Task API requests."""

    def __init__(self, shared: Shared) -> None:
        import httpx

        self.shared = shared
        self._http: httpx.Client | None = None
        if shared.here is not None:
            return  # played in this process: no HTTP
        self._http = httpx.Client(
            base_url=shared.http_url,
            headers=shared.headers(),
            timeout=min(shared.reset_timeout, 60.0),
            trust_env=not shared.loopback,
            verify=shared.ssl_context(),  # the WebSocket's trust store, whatever trust_env says
        )

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._http is not None:
            self._http.close()

    def get(self, method: str, path: str, json: Any = None) -> Any:
        """The JSON answer of ``method path``, waiting for the server when the settings say so."""
        import httpx

        shared = self.shared
        began = time.monotonic()
        delay = 0.05
        while True:
            try:
                assert self._http is not None  # a bundle played here has no HTTP to ask
                response = self._http.request(method, path, json=json)
                break
            except httpx.TransportError as exc:
                left = began + shared.reset_timeout - time.monotonic()
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if not shared.waits_for_server or left <= 0:
                    waited = f" (waited {time.monotonic() - began:.0f} s)" if shared.waits_for_server else ""
                    hint = (
                        "" if shared.waits_for_server else "; waits_for_server=True waits for it within reset_timeout"
                    )
                    raise lost_error(
                        "unreachable",
                        "task api",
                        f"no agentenv server answered at {shared.url} "
                        f"({why}){waited}. Start one (agentenv serve BUNDLE --port PORT) or fix the URL"
                        f"{hint}",
                    ) from None
                warn_once(
                    log,
                    f"wait:{shared.url}",
                    "waiting for the agentenv server at %s (up to reset_timeout=%g s): %s",
                    shared.url,
                    shared.reset_timeout,
                    why,
                )
                time.sleep(min(delay, left))  # the last try comes at the deadline
                delay = min(delay * 2, 2.0)
        if response.status_code == 401:
            raise unauthorized(shared)
        if response.status_code == 404 and isinstance(json, dict) and "split" in json:
            detail = _json(response).get("detail") if _is_json(response) else None
            if isinstance(detail, dict):
                raise UnknownSplit(
                    f"{shared.url}: {detail.get('message')}",
                    split=str(json["split"]),
                    splits=list(detail.get("splits") or []),
                )
        if response.status_code >= 400:
            raise lost_error(
                "protocol",
                "task api",
                f"{shared.url}{path} answered HTTP {response.status_code}: {response.text[:300]}",
                ProtocolError,
            )
        return _json(response)


def _is_json(response: Any) -> bool:
    return str(response.headers.get("content-type", "")).startswith("application/json")


def _json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return {}


def _info(client: _Client) -> ServerInfo:
    shared = client.shared
    try:
        data = shared.here.info() if shared.here is not None else client.get("GET", "/agentenv")
    except ProtocolError as exc:
        if "HTTP 404" not in str(exc):
            raise
        raise mismatch(shared, 1) from None  # servers before protocol 2 have no /agentenv
    if isinstance(data, dict) and data.get("protocol") != wire.PROTOCOL:
        version = data.get("protocol")
        raise mismatch(shared, int(version) if isinstance(version, int) else 1)
    try:
        return wire.read(ServerInfo, data, f"{shared.url}/agentenv")
    except wire.WireError as exc:
        raise lost_error("protocol", "task api", str(exc), ProtocolError) from None


def probe(shared: Shared) -> ServerInfo:
    """What the server serves: its protocol (checked), bundle name, version, splits and limits."""
    with _Client(shared) as client:
        return _info(client)


def iter_tasks(shared: Shared, split: str, *, page: int = PAGE, info: ServerInfo | None = None) -> Iterator[TaskRow]:
    """The tasks of ``split``, read ``page`` at a time (``UnknownSplit`` names the splits that exist)."""
    with _Client(shared) as client:
        info = info or _info(client)
        sizes = info.splits
        if split not in sizes:
            raise UnknownSplit(
                f"{shared.url} has no split {split!r}; its splits: {', '.join(sizes)}", split=split, splits=list(sizes)
            )
        for start in range(0, sizes[split], page):
            stop = min(start + page, sizes[split])
            if shared.here is not None:
                rows: Any = shared.here.task_range(split, start, stop)
            else:
                body = {"split": split, "start": start, "stop": stop}
                rows = client.get("POST", f"/{info.name}/task_range", json=body).get("tasks")
            if not isinstance(rows, list):
                raise lost_error(
                    "protocol",
                    "task api",
                    f"{shared.url}/{info.name}/task_range answered no task list; is it an agentenv server?",
                    ProtocolError,
                )
            for row in rows:
                try:
                    yield wire.read(TaskRow, row, f"a task row of {shared.url}")
                except wire.WireError as exc:
                    raise lost_error("protocol", "task api", str(exc), ProtocolError) from None


def read_tasks(shared: Shared, split: str, *, info: ServerInfo | None = None) -> list[TaskRow]:
    """Every task of ``split``, in order."""
    return list(iter_tasks(shared, split, info=info))


def tasks_and_tools(
    shared: Shared,
    splits: str | Sequence[str],
    *,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[TaskRow], dict[str, list[Tool]]]:
    """The rows of ``splits`` and the tools of each toolset key.

    The tools come from starting one task per toolset key, one at a time, on one session (purpose
    ``probe``: observers can tell it from a play); each episode is finished at once.
    """
    names = [splits] if isinstance(splits, str) else list(splits)
    info = probe(shared)
    rows = [row for split in names for row in iter_tasks(shared, split, info=info)]
    first: dict[str, TaskRow] = {}
    for row in rows:
        first.setdefault(row.toolset_key, row)

    async def play_each() -> dict[str, list[Tool]]:
        tools: dict[str, list[Tool]] = {}
        session = Session(shared)
        try:
            for key, row in first.items():
                if progress is not None:
                    progress(key)
                started = await session.start(row.id, purpose="probe")
                tools[key] = started.tools
                await session.finish()
        finally:
            await session.close()
        return tools

    return rows, run_sync(play_each())
