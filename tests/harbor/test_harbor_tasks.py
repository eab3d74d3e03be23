"""``tasks: {source: harbor}``: Harbor task directories loaded through the harbor package, each played in a real
container of its own image, scored by its own tests, its reference solution proved by the QA gate."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentenv import load_bundle
from agentenv.cli.qa import qa_bundle
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.engine.episode import Episode
from agentenv.errors import BundleError
from harbor.models.task.task import Task as HarborTask

from tests.harbor.support import SUITE, UNSUPPORTED, left_by_this_process
from tests.support import ServeProcess
from tests.support.containers import wait_until_none

pytestmark = pytest.mark.usefixtures("images")


async def _play(bundle_dir: Path, task_id: str, commands: list[str]) -> tuple[list[str], object]:
    """Play ``task_id``: each command through the ``bash`` tool, then one reply; the answers and the result."""
    bundle = load_bundle(bundle_dir)
    episode = Episode(bundle, bundle.task(task_id))
    await episode.start()
    answers = []
    try:
        for command in commands:
            answers.append((await episode.call("bash", {"command": command})).text)
        await episode.end_turn("done")
    finally:
        result = await episode.close()
    return answers, result


def test_each_harbor_task_is_a_task_whose_prompt_is_its_instruction_as_harbor_reads_it() -> None:
    bundle = load_bundle(SUITE)
    assert sorted(t.id for t in bundle.tasks) == ["fix-config", "sum-numbers"]
    task = bundle.task("sum-numbers")
    # harbor's own model read it: the canary line at the instruction's top is gone, as harbor strips it
    assert task.turns[0].prompt == HarborTask(SUITE / "tasks" / "sum-numbers").instruction
    assert "canary" not in task.turns[0].prompt and "/app/numbers.txt" in task.turns[0].prompt
    assert task.toolset.envs == ["harbor"] and [tool.name for tool in bundle.env_tools["harbor"]] == ["bash"]


def test_the_qa_gate_proves_each_reference_solution_scores_1() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentenv.cli", "check", "--qa", str(SUITE)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 task(s) passed the QA gate" in done.stdout


async def test_the_reference_solution_scores_1_and_the_empty_solution_0() -> None:
    report = await qa_bundle(load_bundle(SUITE))
    for task in report.tasks:
        assert task.ok, task.findings
        assert (task.probe("reference").reward, task.probe("empty").reward) == (1.0, 0.0), task.task_id
    assert left_by_this_process() == []


async def test_the_policy_acts_in_the_tasks_container_which_holds_neither_tests_nor_solution() -> None:
    answers, result = await _play(
        SUITE,
        "sum-numbers",
        [
            "pwd; head -n 2 numbers.txt",
            "ls /tests /solution",
            "mkdir -p out && awk '{s += $1} END {print s}' numbers.txt > out/sum.txt",
            "sort -n numbers.txt | tail -n 1 > out/max.txt && cat out/*.txt",
        ],
    )
    assert answers[0] == "/app\n12\n7\n\n[exit code 0]"  # the Dockerfile's WORKDIR, its COPY
    assert "No such file or directory" in answers[1] and answers[1].endswith("[exit code 2]")
    assert answers[3] == "40\n75\n\n[exit code 0]"
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_a_call_past_agent_timeout_sec_is_killed_and_a_flood_of_output_cut() -> None:
    answers, _ = await _play(SUITE, "fix-config", ["sleep 30; echo never", "yes | head -c 1000000"])
    assert answers[0] == "\n[killed: the command ran past its time limit (10 s) or its memory]\n[exit code 137]"
    assert answers[1].endswith("y\n\n[output cut at 16000 characters]\n[exit code 0]") and len(answers[1]) < 16_100


async def test_a_reward_the_policy_writes_itself_is_not_the_tests_reward() -> None:
    _, result = await _play(SUITE, "fix-config", ["mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"])
    assert (result.outcome, result.reward) == ("scored", 0.0)


async def test_tests_that_write_no_reward_fail_the_episode_rather_than_score_it_0(tmp_path: Path) -> None:
    bundle = shutil.copytree(SUITE, tmp_path / "suite")
    (bundle / "tasks" / "fix-config" / "tests" / "test.sh").write_text("#!/bin/bash\necho forgot the reward\n")
    _, result = await _play(bundle, "fix-config", [])
    assert (result.outcome, result.reward) == ("failed", None)
    assert "wrote no reward" in result.failure.message and "forgot the reward" in result.failure.message
    assert left_by_this_process() == []


def test_a_task_asking_for_a_gpu_and_the_network_is_refused_at_load_naming_the_task_and_fields() -> None:
    with pytest.raises(BundleError) as refused:
        load_bundle(UNSUPPORTED)
    text = str(refused.value)
    assert "tasks/needs-gpu/task.toml: environment.gpus: Harbor task 'needs-gpu' asks for 1 GPU(s)" in text
    assert "tasks/needs-gpu/task.toml: environment.network_mode: Harbor task 'needs-gpu' asks for network" in text
    assert "set network_mode = 'no-network'" in text


def test_a_task_whose_image_is_not_built_is_refused_naming_the_command_that_builds_it(tmp_path: Path) -> None:
    bundle = shutil.copytree(SUITE, tmp_path / "suite")
    with (bundle / "tasks" / "fix-config" / "environment" / "Dockerfile").open("a") as f:
        f.write("ENV CHANGED=1\n")  # another environment is another image
    with pytest.raises(BundleError) as refused:
        load_bundle(bundle)
    assert "tasks/fix-config/task.toml: environment: the image 'agentenv-harbor/fix-config:" in str(refused.value)
    assert f"build it: agentenv image build {bundle}" in str(refused.value)


async def test_a_policy_that_stops_its_container_is_scored_0_not_failed() -> None:
    answers, result = await _play(SUITE, "fix-config", ["kill -KILL -1", "cat service.ini"])
    assert "the container is gone for the rest of this episode" in answers[1]
    assert (result.outcome, result.reward) == ("scored", 0.0)
    assert left_by_this_process() == []


async def test_a_served_harbor_task_is_played_over_the_wire_in_its_container() -> None:
    server = ServeProcess(SUITE).start(timeout=120)
    session = Session(Shared(server.url, reset_timeout=120, tool_timeout=120))
    try:
        rollout = session.rollout("fix-config")
        await rollout.start()
        edit = "sed -i -e 's/^debug = true$/debug = false/' -e 's/^port = 8080$/port = 9090/' service.ini"
        answer = await rollout.call("bash", {"command": f"{edit} && grep -c 9090 service.ini"})
        await rollout.end_turn("done")
        assert answer.text == "1\n\n[exit code 0]"
        assert (rollout.result.outcome, rollout.result.reward) == ("scored", 1.0)
    finally:
        await session.close()
        server.terminate()
    assert wait_until_none(server.proc.pid) == {}
