"""A container env through a real ``agentenv serve`` and a real Docker engine: played, isolated, removed."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import shutil
from pathlib import Path
from typing import Any

from agentenv import load_bundle
from agentenv.client.rollout import RolloutRecord
from agentenv.client.settings import Shared

from tests.support import ServeProcess
from tests.support.containers import BOX, of_process, probe, wait_until_none
from tests.support.faults import play

PRIVATE = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")  # RFC 1918 (Docker's default bridge is in the second)


async def play_reference(url: str, task_id: str) -> RolloutRecord:
    """The task's reference solution, played as a policy would (each tool answer checked)."""
    task = load_bundle(BOX).task(task_id)

    async def first(rollout: Any) -> None:
        for turn in task.solution:
            for call in turn.calls:
                answer = await rollout.call(call.tool, call.args)
                assert not answer.error, answer.text
            await rollout.end_turn(turn.reply)

    return await play(Shared(url, reset_timeout=300, tool_timeout=120), task_id, first=first)


def test_a_multi_turn_task_is_scored_through_the_container(box_server: ServeProcess) -> None:
    result = asyncio.run(play_reference(box_server.url, "notes-1")).result
    assert result is not None
    assert result.outcome == "scored"
    assert result.reward == 1.0
    assert result.scores == {"code": 1.0, "city": 1.0}


def test_the_container_is_removed_with_its_volume_at_teardown(box_server: ServeProcess) -> None:
    seen = asyncio.run(probe(box_server.url, [("write_file", {"path": "a.txt", "text": "x"})]))
    assert seen.answers[0].text == "/work/a.txt"
    assert seen.result.outcome == "scored"
    assert box_server.proc is not None
    assert wait_until_none(box_server.proc.pid, seconds=30) == {}


def test_the_program_sees_no_network_a_read_only_image_and_only_the_variables_it_is_passed(
    images: str, tmp_path: Path
) -> None:
    bundle = shutil.copytree(BOX, tmp_path / "box")
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace("    limits:", "    pass_env: [BOX_PASSED]\n    limits:", 1))
    environ = {"AGENTENV_TEST_SECRET": "s3cret", "BOX_PASSED": "yes"}
    server = ServeProcess(bundle, env=environ).start(timeout=180)
    try:
        seen = asyncio.run(probe(server.url, [("whoami", {})]))
    finally:
        server.terminate()
    facts = json.loads(seen.answers[0].text)
    assert facts["addresses"] == ["127.0.0.1"]  # loopback only: --network none
    assert facts["writable"] == {"/": False, "/etc": False, "/work": True, "/tmp": True, "/data": False}
    assert "AGENTENV_TEST_SECRET" not in facts["environ"]
    assert "BOX_PASSED" in facts["environ"]  # pass_env
    assert not [v for v in facts["environ"] if v.startswith("AGENTENV")]
    assert facts["cwd"] == "/work"


def test_a_network_of_its_own_is_made_for_an_episode_that_asks_and_removed_after(images: str, tmp_path: Path) -> None:
    bundle = shutil.copytree(BOX, tmp_path / "box")
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace("    limits:", "    network: episode\n    limits:", 1))
    server = ServeProcess(bundle).start(timeout=180)
    try:

        async def two() -> list:
            return await asyncio.gather(*(probe(server.url, [("whoami", {})]) for _ in range(2)))

        seen = asyncio.run(two())
        left = wait_until_none(server.proc.pid, seconds=30)
    finally:
        server.terminate()
    addresses = [[a for a in json.loads(s.answers[0].text)["addresses"] if a != "127.0.0.1"] for s in seen]
    assert all(len(a) == 1 for a in addresses), addresses
    ips = [ipaddress.ip_address(a[0]) for a in addresses]
    assert not any(ip in net for ip in ips for net in map(ipaddress.ip_network, PRIVATE))
    subnets = {ipaddress.ip_network(f"{ip}/28", strict=False) for ip in ips}
    assert len(subnets) == 2  # one network per episode
    assert left == {}


def test_nothing_of_a_stopped_server_is_left_on_the_engine(images: str) -> None:
    server = ServeProcess(BOX).start(timeout=180)
    asyncio.run(probe(server.url, [("read_note", {"key": "code"})]))
    pid = server.proc.pid
    server.terminate()
    assert of_process(pid) == []
