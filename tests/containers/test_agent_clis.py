"""Real coding-agent CLIs in containers: claude-code and opencode (installed from npm at the harness tier's pins)
run by the ``docker`` sandbox backend, each solving the harness bundle's shell task and its task that needs a bundle
tool over MCP, two rollouts at once, through OpenEnv's capture proxy to the stand-in engine; every completion token
the proxy captured is one TRL trains on.

Each run is a container of the Debian base image with no network: the CLI's npm folder is mounted read-only, its
workdir and HOME are the episode's folders (removed at teardown), and its model (the capture proxy) and its MCP
server are relayed into its loopback; nothing else of the host is there (the probe task below asks each CLI's own
shell tool to look).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentenv import sandbox
from agentenv_harness import AgentEnvSessionFactory, prompt_rows

from tests.support import ROOT
from tests.support.bundles import copy_bundle, patch
from tests.support.containers import BASE, docker
from tests.support.harness import HARNESS, Engine, every_token_trains, solve_twice_at_once


@pytest.fixture
def in_containers(images: str, agent_bin, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The docker sandbox in force for this process, on the base image; the agent CLIs on PATH."""
    monkeypatch.setenv("AGENTENV_DOCKER_SANDBOX_IMAGE", images)
    monkeypatch.setenv("PATH", f"{agent_bin}{os.pathsep}{os.environ['PATH']}")
    sandbox.use("docker")
    yield
    sandbox.use(None)


def solvers_started(since: float) -> list[str]:
    """The image of each solver container this process started since ``since`` (by the labels it gave them)."""
    until = str(int(time.time()) + 1)
    return docker("events", "--since", str(int(since) - 1), "--until", until, "--filter", "event=start", "--filter",
                  f"label=agentenv.pid={os.getpid()}", "--filter", "label=agentenv.sandbox=solver", "--format",
                  "{{.Actor.Attributes.image}}").split()  # fmt: skip


@pytest.mark.parametrize("agent", ["claude-code", "opencode"])
def test_a_real_agent_in_a_container_solves_each_task_twice_at_once_and_every_captured_turn_trains(
    engine: Engine, in_containers: None, agent: str
) -> None:
    prompts = {r["task_id"]: r["prompt"] for r in prompt_rows(HARNESS, "train")}
    factory = AgentEnvSessionFactory(HARNESS, llm_url=engine.url, model="tiny/policy", split="train", agent=agent,
                                     deadline=300)  # fmt: skip
    try:
        for task_id in ("smoke", "multiply"):  # a shell task; a task that needs a bundle tool over MCP
            since = time.time()
            sessions, traces = solve_twice_at_once(factory, prompts[task_id])
            assert solvers_started(since) == [BASE, BASE]  # each rollout's agent ran in a container of its own
            for session in sessions:
                assert session.play is not None and not session.play.root.exists()  # its workdir and HOME: gone
            for trace in traces:
                every_token_trains(trace)
    finally:
        factory.close()
    assert docker("ps", "-a", "-q", "--filter", f"label=agentenv.pid={os.getpid()}").split() == []


@pytest.mark.parametrize(("agent", "kind"), [("claude", "claude-code"), ("opencode", "opencode")])
def test_an_agent_whose_spec_names_the_docker_backend_runs_in_a_container_under_another_sandbox(
    engine: Engine, images: str, agent_bin, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, agent: str, kind: str
) -> None:
    """``sandbox: {backend: docker}`` on the bundle's agent: its runs are containers while the process's sandbox
    stays bubblewrap (what a bash tool or a subprocess env of the same server runs in)."""
    monkeypatch.setenv("AGENTENV_DOCKER_SANDBOX_IMAGE", images)
    monkeypatch.setenv("PATH", f"{agent_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(sandbox.VAR, raising=False)
    sandbox.use(None)
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(bundle / "bundle.yaml", f"  {agent}:\n    kind: {kind}\n",
          f"  {agent}:\n    kind: {kind}\n    sandbox: {{backend: docker}}\n")  # fmt: skip
    prompts = {r["task_id"]: r["prompt"] for r in prompt_rows(bundle, "train")}
    factory = AgentEnvSessionFactory(bundle, llm_url=engine.url, model="tiny/policy", split="train", agent=agent,
                                     deadline=300)  # fmt: skip
    since = time.time()
    try:
        session = factory.create(prompts["smoke"], seed=0)
        code = session.wait_for_completion()
        trace = session.fetch_training_trace()
        verdict = session.verify([])
        session.close()
    finally:
        factory.close()
    assert code == 0 and verdict.env_reward == 1.0, verdict.metrics
    every_token_trains(trace)
    assert solvers_started(since) == [BASE]
    assert sandbox.current().name == "bwrap"  # the process's own choice is untouched


# a task whose command, run by the CLI's own shell tool, prints 4242 only where the shell is in a container (its PID 1
# docker's init) that sees none of this repository's files, reaches its model's port (the capture proxy, relayed in)
# and cannot reach the engine's port on the host's loopback
# (no grep: claude-code's shell has its own; no double quotes: opencode's prompt escapes them)
PROBE = """- id: probe
  split: train
  turns:
    - prompt: >-
        Run the shell command `test $(head -c 17 /proc/1/cmdline) = /sbin/docker-init && ! test -e REPO &&
        u=${AGENTENV_BASE_URL#*//127.0.0.1:} && (echo > /dev/tcp/127.0.0.1/${u%%/*}) &&
        ! (echo > /dev/tcp/127.0.0.1/PORT) 2>/dev/null && echo 4242` with your bash tool and answer with the number
        it prints.
      verifiers: [{id: contained, kind: regex, pattern: '\\b4242\\b'}]
"""


@pytest.mark.parametrize("agent", ["claude-code", "opencode"])
def test_a_real_agents_shell_in_a_container_sees_neither_the_hosts_files_nor_its_other_ports(
    engine: Engine, in_containers: None, tmp_path: Path, agent: str
) -> None:
    bundle = copy_bundle(tmp_path, HARNESS)
    port = engine.url.rsplit(":", 1)[1].split("/")[0]
    (bundle / "tasks" / "probe.yaml").write_text(PROBE.replace("REPO", str(ROOT / "noxfile.py")).replace("PORT", port))
    prompt = next(r["prompt"] for r in prompt_rows(bundle, "train") if r["task_id"] == "probe")
    factory = AgentEnvSessionFactory(bundle, llm_url=engine.url, model="tiny/policy", split="train", agent=agent,
                                     deadline=300)  # fmt: skip
    try:
        session = factory.create(prompt, seed=0)
        code = session.wait_for_completion()
        verdict = session.verify([])
        session.close()
    finally:
        factory.close()
    socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()  # on the host the engine answers there
    assert (ROOT / "noxfile.py").exists()  # and the file is there
    said = [str(m)[-600:] for r in engine.chats()[-1:] for m in r["messages"][-2:]]  # its call and what it printed
    assert code == 0 and verdict.env_reward == 1.0, said  # in the agent's shell: neither
