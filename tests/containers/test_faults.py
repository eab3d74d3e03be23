"""Each way a container env fails, through a real server and engine, as the fault table says.

- no engine at load: the bundle is refused, naming the engine and how to start it;
- an image that does not exist: refused at load; removed after the load: the episode fails (env, deploy);
- a container that exits mid-episode: the episode fails (env, crash), with the exit code and its stderr;
- a container past its memory limit during a call: the policy's mistake (the call says so, the episode is scored);
- the engine gone mid-episode: ``test_engine_gone.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

from tests.support import ServeProcess
from tests.support.containers import BOX, agentenv, docker, probe, wait_until_none


def with_image(tmp_path: Path, image: str) -> Path:
    """A copy of the box bundle whose container env runs ``image``."""
    bundle = shutil.copytree(BOX, tmp_path / "box")
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace("image: agentenv-test/box:1", f"image: {image}"))
    return bundle


def test_a_bundle_whose_engine_does_not_answer_is_refused_naming_it_and_how_to_start_it(tmp_path: Path) -> None:
    socket = tmp_path / "no-engine.sock"
    done = agentenv("tasks", str(BOX), env={"DOCKER_HOST": f"unix://{socket}"})
    assert done.returncode == 2
    assert "envs.box: kind 'container' needs a Docker engine: no Docker engine answers" in done.stderr
    assert f"a Docker engine at unix://{socket} (DOCKER_HOST)" in done.stderr
    assert "dockerd --bridge=none --iptables=false --ip-masq=false" in done.stderr
    assert "apt-get install docker.io" in done.stderr


def test_a_bundle_without_the_docker_cli_is_refused_naming_it() -> None:
    done = agentenv("tasks", str(BOX), env={"AGENTENV_DOCKER": "docker-not-installed"})
    assert done.returncode == 2
    assert "the Docker CLI 'docker-not-installed' is not on PATH" in done.stderr


def test_an_image_the_engine_lacks_is_refused_at_load_with_the_build_command(images: str, tmp_path: Path) -> None:
    bundle = with_image(tmp_path, "agentenv-test/never-built:1")
    done = agentenv("tasks", str(bundle))
    assert done.returncode == 2
    assert (
        "envs.box.image: image 'agentenv-test/never-built:1' is not on this machine's Docker engine (none is pulled); "
        f"build it: agentenv image build {bundle}"
    ) in done.stderr


def test_an_image_removed_after_the_load_fails_the_episode_as_the_envs_deploy(images: str, tmp_path: Path) -> None:
    image = f"agentenv-test/box-removed:{uuid.uuid4().hex[:8]}"
    docker("tag", "agentenv-test/box:1", image)
    server = ServeProcess(with_image(tmp_path, image)).start(timeout=180)
    try:
        docker("rmi", image)
        seen = asyncio.run(probe(server.url, [("read_note", {"key": "code"})]))
    finally:
        server.terminate()
    failure = seen.result.failure
    assert seen.result.outcome == "failed" and seen.result.reward is None
    assert failure is not None and (failure.fault, failure.kind, failure.stage) == ("env", "deploy", "deploy")
    assert f"container env 'box' (image {image!r}): the image is not on the engine" in failure.message
    assert "agentenv image build" in failure.message


def test_a_container_that_exits_fails_the_episode_as_a_crash_with_its_stderr(box_server: ServeProcess) -> None:
    seen = asyncio.run(probe(box_server.url, [("read_note", {"key": "code"}), ("exit", {})]))
    failure = seen.result.failure
    assert seen.answers[0].text == "4217"
    assert seen.result.outcome == "failed" and seen.result.reward is None
    assert failure is not None and (failure.fault, failure.kind, failure.stage) == ("env", "crash", "tool")
    assert "container env 'box' (image 'agentenv-test/box:1')" in failure.message
    assert "exit code 3" in failure.message and "box_env: exiting on purpose" in failure.message
    again = asyncio.run(probe(box_server.url, [("read_note", {"key": "city"})]))  # the server goes on
    assert again.answers[0].text == "Lisbon" and again.result.reward == 1.0
    assert box_server.proc is not None and wait_until_none(box_server.proc.pid) == {}


def test_a_call_past_the_memory_limit_is_the_policys_mistake_and_the_episode_is_scored(
    box_server: ServeProcess,
) -> None:
    calls = [("allocate", {"mib": 16}), ("allocate", {"mib": 512}), ("read_note", {"key": "code"})]
    seen = asyncio.run(probe(box_server.url, calls))
    small, big, after = seen.answers
    assert not small.error and small.text == "1"
    assert big.error
    assert "this call took container env 'box' (image 'agentenv-test/box:1') past its memory limit (256m)" in big.text
    assert after.error and "the env is gone for the rest of this episode" in after.text
    assert seen.result.outcome == "scored" and seen.result.reward == 1.0  # the reply 'done' is what the task asks
    assert box_server.proc is not None and wait_until_none(box_server.proc.pid) == {}
