"""The engine stopped mid-episode: a Docker engine of the test's own (a second dockerd on its own socket and data
folder, no bridge, no iptables) is stopped between two tool calls of an episode."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.errors import EpisodeLost

from tests.support import ServeProcess
from tests.support.containers import BOX


@dataclass
class Dockerd:
    """A dockerd of the test's own."""

    folder: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.folder / 'docker.sock'}"

    def cli(self, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]

    def start(self) -> None:
        args = ["dockerd", "--host", self.host, "--data-root", str(self.folder / "data")]
        args += ["--exec-root", str(self.folder / "exec"), "--pidfile", str(self.folder / "docker.pid")]
        args += ["--bridge=none", "--iptables=false", "--ip-masq=false", "--shutdown-timeout", "2"]
        log = open(self.folder / "dockerd.log", "ab")  # noqa: SIM115 (the daemon writes it until it stops)
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 90
        while self.cli("version").returncode != 0:
            assert self.proc.poll() is None, (self.folder / "dockerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the test's dockerd did not answer within 90 s"
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def dockerd(images: str) -> Iterator[Dockerd]:
    """A second engine with the box image loaded into it; stopped and its folder removed at the end."""
    engine = Dockerd(Path(tempfile.mkdtemp(prefix="ae-dockerd-", dir="/tmp")))  # short: a socket's path is limited
    try:
        engine.start()
        saved = subprocess.Popen(["docker", "save", "agentenv-test/box:1"], stdout=subprocess.PIPE)
        loaded = engine.cli("load", stdin=saved.stdout, timeout=300)
        saved.wait()
        assert loaded.returncode == 0, loaded.stderr
        yield engine
    finally:
        if engine.proc is not None and engine.proc.poll() is not None:
            engine.start()  # a test stopped it: it may still hold a container
        if engine.proc is not None:
            left = engine.cli("ps", "-aq").stdout.split()
            if left:
                engine.cli("rm", "-f", "-v", *left)
        engine.stop()
        shutil.rmtree(engine.folder, ignore_errors=True)


def test_the_engine_stopped_mid_episode_fails_it_as_the_envs_crash_naming_the_engine(dockerd: Dockerd) -> None:
    server = ServeProcess(BOX, env={"DOCKER_HOST": dockerd.host}).start(timeout=180)

    async def episode() -> tuple[str, object]:
        session = Session(Shared(server.url, reset_timeout=300, tool_timeout=120))
        rollout = session.rollout("probe")
        try:
            await rollout.start()
            first = await rollout.call("read_note", {"key": "code"})
            await asyncio.to_thread(dockerd.stop)
            with contextlib.suppress(EpisodeLost):
                await rollout.call("read_note", {"key": "city"})
            return first.text, rollout.result
        finally:
            await session.close()

    try:
        first, result = asyncio.run(episode())
        assert server.proc is not None and server.proc.poll() is None  # the server lives on
    finally:
        server.terminate()
    assert first == "4217"
    failure = result.failure  # type: ignore[attr-defined]
    assert result.outcome == "failed" and result.reward is None  # type: ignore[attr-defined]
    assert (failure.fault, failure.kind, failure.stage) == ("env", "crash", "tool")
    assert "the Docker engine stopped answering during 'call' of container env 'box'" in failure.message
    assert f"a Docker engine at {dockerd.host} (DOCKER_HOST)" in failure.message


def test_what_an_engine_kept_of_a_dead_server_is_removed_when_the_next_server_starts(dockerd: Dockerd) -> None:
    server = ServeProcess(BOX, env={"DOCKER_HOST": dockerd.host}).start(timeout=180)

    async def started() -> None:
        session = Session(Shared(server.url, reset_timeout=300, tool_timeout=120))
        await session.rollout("probe").start()
        await session.call("read_note", {"key": "code"})  # the container runs; the session is left open

    asyncio.run(started())
    assert server.proc is not None
    pid = server.proc.pid
    ours = dockerd.cli("ps", "-aq", "--filter", f"label=agentenv.pid={pid}").stdout.split()
    assert len(ours) == 1
    dockerd.stop()  # the engine goes first: the server's reaper cannot remove the container when the server dies
    os.kill(pid, signal.SIGKILL)
    server.proc.wait()
    time.sleep(2)  # the reaper tried and failed
    dockerd.start()
    assert dockerd.cli("ps", "-aq", "--filter", f"label=agentenv.pid={pid}").stdout.split() == ours  # still there
    again = ServeProcess(BOX, env={"DOCKER_HOST": dockerd.host}).start(timeout=180)
    again.terminate()
    assert dockerd.cli("ps", "-aq", "--filter", f"label=agentenv.pid={pid}").stdout.split() == []
    assert dockerd.cli("volume", "ls", "-q", "--filter", f"label=agentenv.pid={pid}").stdout.split() == []
