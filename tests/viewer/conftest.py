"""The viewer tier: records made by a real server, ``agentenv view`` as a real process, Debian's chromium headless."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.viewer.support import HOSTILE, play


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A records folder a real server wrote: scored, hostile, replayed-and-failed and two-turn rollouts."""
    from agentenv_server import ServerThread, build_app

    from tests.support import FAKE

    folder = tmp_path_factory.mktemp("viewer") / "records"
    server = ServerThread(build_app(FAKE, record=folder)).start()
    try:
        play(server.url, "echo")
        play(server.url, "echo", HOSTILE)
        play(server.url, "deploy-fails", attempts=2)
        play(server.url, "two-turn", replies=("hello", "goodbye"))
        play(server.url, "echo", replies=("not what it echoed",))
    finally:
        server.stop()
    return folder


class Viewer:
    """``agentenv view SOURCE`` as a real process; ``url`` is the one it printed (with its token)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "agentenv.cli", "view", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=os.environ)  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]+/)", line)
        if found is None:
            self.proc.kill()
            raise AssertionError(
                f"agentenv view printed {line!r}; stderr: {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.url = found.group(1)
        self.line = line

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=30)


@pytest.fixture
def viewer() -> Iterator[Callable[..., Viewer]]:
    started: list[Viewer] = []

    def start(*args: Any) -> Viewer:
        v = Viewer(*map(str, args))
        started.append(v)
        return v

    yield start
    for v in started:
        v.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, through its chromium-driver (Selenium), with the console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    driver_path = shutil.which("chromedriver")
    chromium = shutil.which("chromium")
    if driver_path is None or chromium is None:
        raise RuntimeError("the viewer tier needs Debian's chromium and chromium-driver: apt-get install chromium "
                           "chromium-driver (nox -s viewer installs them where it runs as root)")  # fmt: skip
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
