"""The ``bash`` tool's sandbox (real bubblewrap): one per episode, with its own files, processes, network and limits.

Each limit row is the policy's mistake: the call answers with what was hit and the episode is scored.
"""

from __future__ import annotations

import uuid

import pytest
from agentenv import load_bundle

from tests.support import FAKE, running, until
from tests.support.bundles import copy_bundle, patch, play

LIMITS = "{call_seconds: 2, memory_mb: 128, pids: 64, file_mb: 1, disk_mb: 8}"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory):
    bundle = copy_bundle(tmp_path_factory.mktemp("limited"))
    patch(bundle / "bundle.yaml", "envs:\n", f"envs:\n  bash:\n    kind: bash\n    sandbox: {LIMITS}\n")
    return load_bundle(bundle)


async def shell(bundle, *commands: str) -> tuple[list[str], object]:
    _, steps, result = await play(bundle, "bash", [("bash", {"command": c}) for c in commands], ["hi"])
    return [s.text for s in steps[:-1]], result


async def test_the_bundle_and_the_host_are_not_there(limited):
    answers, result = await shell(
        limited,
        f"ls {limited.path}/tasks; cat {limited.path}/bundle.yaml",
        f"ls {FAKE.parent}; cat /etc/shadow",
        "touch /usr/x /etc/passwd",
    )
    assert "No such file or directory" in answers[0] and "tasks:" not in answers[0]
    assert "root:" not in answers[1] and answers[1].count("No such file or directory") == 2
    assert answers[2].count("Read-only file system") == 2
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_only_the_episodes_processes_are_in_its_process_table(limited):
    answers, _ = await shell(limited, "ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '")
    count, first = answers[0].splitlines()[:2]
    assert int(count) <= 5  # the shell (its init), bash, ls, grep, (cat)
    assert "_shell.py" in first


async def test_only_its_own_loopback_is_there(limited):
    answers, _ = await shell(limited, "cat /proc/net/dev | grep -c ':'; echo > /dev/tcp/127.0.0.1/22")
    assert answers[0].splitlines()[0] == "1"  # lo only
    assert "Connection refused" in answers[0] or "Network is unreachable" in answers[0]


async def test_files_written_stay_for_the_next_call_and_nothing_it_started_does(limited):
    marker = f"agentenv-left-{uuid.uuid4().hex}"
    answers, _ = await shell(limited, f"echo kept > f; (setsid bash -c 'exec -a {marker} sleep 60' &)", "cat f")
    assert answers[1].startswith("kept")
    await until(lambda: not running(marker))


async def test_a_command_past_its_time_limit_is_killed_and_told(limited):
    answers, result = await shell(limited, "echo started; sleep 30", "echo next")
    assert answers[0] == "started\n\n[killed: the command ran past its time limit (2 s)]\n[exit code -9]"
    assert answers[1].startswith("next")
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_a_command_that_runs_out_of_time_after_hitting_the_process_limit_is_told_both(limited):
    # 80 sleepers against pids 64: the forks past the limit are refused, then the wait runs out of time. Before,
    # only the time limit was told, and a fork bomb whose shell waited between refused forks read as a slow command
    # (a hostile row failed so in a fresh-clone faults run)
    answers, result = await shell(limited, "for i in $(seq 80); do sleep 30 & done 2>/dev/null; wait", "echo next")
    assert "[killed: the command ran past its time limit (2 s)]\n[process limit (64 processes) reached]" in answers[0]
    assert answers[1].startswith("next")
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_a_memory_hog_is_killed_at_the_memory_limit(limited):
    answers, result = await shell(limited, "perl -e '$x = \"a\" x 400_000_000'; echo done", "echo alive")
    assert "[memory limit (128 MiB) reached]" in answers[0]
    assert answers[1].startswith("alive")
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_a_fork_bomb_stops_at_the_process_limit(limited):
    answers, result = await shell(limited, "bomb() { bomb | bomb & }; bomb; sleep 1; echo tried", "echo alive")
    assert "[process limit (64 processes) reached]" in answers[0]
    assert answers[1].startswith("alive")
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_a_file_past_the_file_size_limit_is_cut_and_told(limited):
    answers, _ = await shell(limited, "head -c 5000000 /dev/zero > big", "ls -l big | cut -d' ' -f5")
    assert answers[0].endswith("[killed: file size limit (1 MiB) reached]\n[exit code 153]")
    assert answers[1].startswith("1048576")


async def test_a_cpu_hog_is_killed_at_its_cpu_time_limit(tmp_path):
    bundle = copy_bundle(tmp_path)
    patch(bundle / "bundle.yaml", "envs:\n", "envs:\n  bash:\n    kind: bash\n    sandbox: {cpu_seconds: 1}\n")
    answers, result = await shell(load_bundle(bundle), "while :; do :; done")
    assert answers[0].endswith("[killed: CPU time limit (1 s) reached]\n[exit code -24]")
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_the_disk_fills_at_its_limit(limited):
    answers, _ = await shell(limited, "for i in $(seq 20); do head -c 900000 /dev/zero > f$i || break; done; du -sk .")
    assert "No space left on device" in answers[0]
    assert int(answers[0].split("No space left on device")[-1].split()[0]) <= 8 * 1024
