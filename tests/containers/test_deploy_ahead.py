"""Deploy ahead for container envs (``agentenv serve --warm N``): containers started before any rollout asks, each
played once, set up for its task, replaced, and none left when the server stops or is SIGKILLed."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from tests.support import ServeProcess, wait_until
from tests.support.containers import BOX, docker, of_process, probe, wait_until_none


def setup_bundle(folder: Path) -> Path:
    """The box bundle with ``setup: true`` on its env: each container is sent its task after its deploy."""
    target = shutil.copytree(BOX, folder / "box")
    text = (target / "bundle.yaml").read_text()
    (target / "bundle.yaml").write_text(text.replace("    build: image\n", "    build: image\n    setup: true\n", 1))
    return target


def wait_for_containers(pid: int, n: int, seconds: float = 120.0) -> list[str]:
    """The containers of process ``pid`` once there are ``n`` running (their short ids, the hostnames inside)."""

    def running() -> list[str]:
        return docker("ps", "-q", "--filter", f"label=agentenv.pid={pid}").split()

    wait_until(lambda: len(running()) >= n, seconds, interval=0.3)
    return running()


def test_a_rollout_plays_a_container_started_before_it_set_up_for_its_task_and_it_is_replaced(
    images: str, tmp_path: Path
) -> None:
    # --warm 1 for each of the bundle's two toolsets (probe's, and the notes tasks')
    server = ServeProcess(setup_bundle(tmp_path), "--warm", "1", "--max-concurrent-envs", "8").start(timeout=180)
    assert server.proc is not None
    pid = server.proc.pid
    try:
        before = wait_for_containers(pid, 2)
        played = asyncio.run(probe(server.url, [("whoami", {})]))
        seen = json.loads(played.answers[0].text)
        after = wait_for_containers(pid, 2)
        assert played.result.outcome == "scored"
        assert seen["hostname"] in before and seen["task"] == "probe"  # started ahead, then sent its task
        assert seen["hostname"] not in after and len(after) == 2  # removed after its episode; another in its place
    finally:
        server.terminate()
    assert wait_until_none(pid) == {}  # the ready containers are removed at shutdown


def test_the_ready_containers_of_a_sigkilled_server_are_removed(images: str) -> None:
    server = ServeProcess(BOX, "--warm", "2", "--max-concurrent-envs", "8").start(timeout=180)
    assert server.proc is not None
    pid = server.proc.pid
    assert len(wait_for_containers(pid, 4)) == 4  # 2 for each of the bundle's two toolsets
    server.kill()
    assert wait_until_none(pid) == {}
    assert of_process(pid) == []
