"""Where a writer reads the tasks: the server at a URL, or a bundle (a folder or an installed bundle's name) played in
this process while it writes (``agentenv.local``), with the loops pointed at the server the training run will reach."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agentenv.errors import AgentEnvError

if TYPE_CHECKING:
    from agentenv.client import Shared

__all__ = ["DEFAULT_SERVER_URL", "tasks_from"]

DEFAULT_SERVER_URL = "http://127.0.0.1:8000"  # agentenv serve's own default host and port


@contextlib.contextmanager
def tasks_from(target: str, server_url: str | None) -> Iterator[tuple[str, Shared | None]]:
    """``(url, source)``: the URL the loops are written to reach, and where the tasks are read when not from it (the
    bundle ``target`` names, played in this process for as long as the block runs; None for a URL ``target``)."""
    from agentenv.bundle import find_bundle
    from agentenv.evaluate import is_url
    from agentenv.local import Here

    if is_url(target):
        if server_url is not None:
            raise AgentEnvError(
                f"--server-url {server_url} is for a bundle (a folder or an installed name): with a server URL, "
                f"{target} is where the loops go; drop --server-url"
            )
        yield target, None
        return
    folder = find_bundle(target)  # an installed bundle's name gives its folder; a BundleError names the choices
    url = server_url or DEFAULT_SERVER_URL
    here = Here(folder)
    try:
        print(
            f"reading the tasks of {folder} in this process; the loops will reach {url}: "
            f"serve it there for training (agentenv serve {target} --port {urlsplit(url).port or 8000}), or write "
            "with --server-url URL",
            file=sys.stderr,
        )
        yield url, here.shared()
    finally:
        here.close()
