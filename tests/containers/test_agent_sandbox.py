"""Agents in containers: the ``docker`` sandbox backend (agentenv-docker, through core's ``agentenv_sandboxes`` seam)
runs an agent's ``Launch`` in a container of its own, reaching only the endpoints it is given."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentenv import sandbox
from agentenv.engine.agentproc import AgentDirs, AgentProcess
from agentenv.engine.agents import Launch
from agentenv.sandbox import Opening
from agentenv.specs import SandboxSpec

from tests.support.containers import BASE, docker, of_process

PROGRAM = r"""
import json, os, socket, sys
seen = {}
def ask(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            return s.recv(100).decode()
    except OSError as exc:
        return f"refused: {type(exc).__name__}"
seen["opened"] = ask(int(sys.argv[1]))
seen["other"] = ask(int(sys.argv[2]))
try:
    seen["secret"] = open(os.environ["SECRET_FILE"]).read()
except OSError as exc:
    seen["secret"] = f"unreadable: {type(exc).__name__}"
seen["init"] = open("/proc/1/cmdline").read().split("\0")[0]
lines = open("/proc/net/fib_trie").read().splitlines()
seen["addresses"] = sorted({lines[i - 1].split()[-1] for i, l in enumerate(lines) if "/32 host LOCAL" in l})
print(json.dumps(seen))
"""


@pytest.fixture
def docker_sandbox(images: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AGENTENV_DOCKER_SANDBOX_IMAGE", BASE)
    sandbox.use("docker")
    yield
    sandbox.use(None)


async def answering(text: str) -> asyncio.AbstractServer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(text.encode())
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


def left() -> list[str]:
    return docker("ps", "-a", "-q", "--filter", f"label=agentenv.pid={os.getpid()}").split()


async def test_an_agent_in_a_container_reaches_its_opened_endpoint_and_nothing_else_of_the_host(
    docker_sandbox: None, tmp_path: Path
) -> None:
    model, server = await answering("model"), await answering("the server's own port")
    secret = tmp_path / "server-secret.txt"
    secret.write_text("tok-secret")
    ports = [s.sockets[0].getsockname()[1] for s in (model, server)]
    # the secret's path in the environment, not the argv (a file the argv names is the agent's to read)
    argv = (sys.executable, "-c", PROGRAM, str(ports[0]), str(ports[1]))
    launch = Launch(argv=argv, env={"SECRET_FILE": str(secret)})
    try:
        done = await AgentProcess(launch, AgentDirs(tmp_path / "agent"), openings=(Opening(ports[0]),)).run()
    finally:
        model.close()
        server.close()
    seen = json.loads(done.reply)
    assert seen["opened"] == "model"  # relayed into the container's loopback
    assert seen["other"].startswith("refused")  # any other port of the host: not there
    assert seen["secret"].startswith("unreadable")  # nor its files
    assert seen["init"].endswith("docker-init")  # a container's init, not the host's
    assert seen["addresses"] == ["127.0.0.1"]  # no address but loopback, private or not
    assert left() == []  # the container is removed when the agent ends


async def test_an_agent_past_its_memory_limit_is_stopped_and_the_limit_named(docker_sandbox: None, tmp_path) -> None:
    hog = "x = bytearray(400 * 1024 * 1024); print('allocated')"
    process = AgentProcess(Launch(argv=(sys.executable, "-c", hog)), AgentDirs(tmp_path / "agent"),
                           sandbox=SandboxSpec(memory_mb=96))  # fmt: skip
    done = await process.run()
    assert done.reply != "allocated" and done.breach == "memory limit (96 MiB)"
    assert left() == []


def test_the_docker_sandbox_refuses_the_hosts_network(docker_sandbox: None, tmp_path: Path) -> None:
    from agentenv.sandbox import Program, SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="never gives a container the host's network"):
        sandbox.current().prepare(Program(("true",), {}, tmp_path, network="host"))


def test_a_harness_task_is_solved_by_its_agent_in_a_container_through_the_capture_proxy(images: str, engine) -> None:
    """``agentenv run --capture`` with the docker sandbox: the task's process agent runs in a container, calls the
    model through OpenEnv's capture proxy (relayed in) and the bundle's tools over MCP, and scores 1."""
    import subprocess
    import time

    from tests.support.harness import HARNESS

    since = str(int(time.time()) - 1)
    environ = {**os.environ, "NO_PROXY": "127.0.0.1", "AGENTENV_SANDBOX": "docker",
               "AGENTENV_DOCKER_SANDBOX_IMAGE": BASE}  # fmt: skip
    argv = [sys.executable, "-m", "agentenv.cli", "run", str(HARNESS), "direct", "--llm-url", engine.url, "--model",
            "tiny/policy", "--capture"]  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ) as run:
        stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    assert "reward: 1" in stdout and "capture: 1 model call(s), " in stdout
    until = str(int(time.time()) + 1)
    # the containers that process started (its pid in their owner labels: another worker's are not counted)
    started = docker("events", "--since", since, "--until", until, "--filter", "event=start", "--filter",
                     f"label=agentenv.pid={run.pid}", "--format", "{{.Actor.Attributes.name}}").split()  # fmt: skip
    assert started and all(name.startswith("agentenv-sbx-") for name in started)  # the agent ran in a container
    assert of_process(run.pid) == []  # and none is left
