"""What the viewer tests share: the episodes they play and the browser console they read."""

from __future__ import annotations

from typing import Any

from agentenv.client.settings import Shared
from agentenv.client.sync import SyncSession
from agentenv.errors import EpisodeLost

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">\x1b[2J'


def play(url: str, task: str, text: str = "ping", *, replies: tuple[str, ...] = (), attempts: int = 1) -> None:
    """Play ``task`` to a verdict (replaying a lost attempt while ``attempts`` allow): in each turn echo ``text``,
    call a tool that does not exist, and end the turn with the next of ``replies`` (default: ``text``)."""
    session = SyncSession(Shared(url, client="viewer-test"))
    rollout = session.rollout(task, attempts=attempts)
    try:
        while True:
            rollout.start()
            try:
                for reply in replies or (text,):
                    rollout.call("echo", {"text": text})
                    rollout.call("no_such_tool", {"x": 1})
                    if rollout.end_turn(reply).done:
                        break
            except EpisodeLost:
                pass
            rollout.conclude()
            if rollout.lost is None or not rollout.rollout.can_replay():
                return
    finally:
        session.close()


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The browser console's errors since the last call."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def follow(driver: Any, element: Any, timeout: float = 10.0) -> None:
    """Click ``element`` and wait until the page it leads to has replaced this one: a click that submits a form or
    follows a link returns before the browser navigates, and the old page's elements go stale under a reader."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element("tag name", "html")
    element.click()
    WebDriverWait(driver, timeout).until(expected_conditions.staleness_of(page))
