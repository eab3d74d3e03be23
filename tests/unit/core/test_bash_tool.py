"""The ``bash`` tool a task offers with ``toolset: {bash: true}``."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from tests.support import running, until
from tests.support.bundles import play


async def test_bash_is_offered_after_the_envs_tools_only_where_the_task_asks(fake_bundle):
    with_bash, _, _ = await play(fake_bundle, "bash")
    without, _, _ = await play(fake_bundle, "echo")
    assert [t.name for t in with_bash.tools] == [*(t.name for t in without.tools), "bash"]
    assert with_bash.tools[-1].parameters["required"] == ["command"]


async def test_bash_runs_the_command_and_answers_its_output_and_exit_code(fake_bundle):
    _, steps, result = await play(fake_bundle, "bash", [("bash", {"command": "echo hi"})], ["hi"])
    assert (steps[0].text, steps[0].error) == ("hi\n\n[exit code 0]", False)
    assert (result.outcome, result.reward) == ("scored", 1.0)


async def test_a_failing_command_is_an_answer_with_its_exit_code(fake_bundle):
    _, steps, _ = await play(fake_bundle, "bash", [("bash", {"command": "echo oops >&2; exit 3"})])
    assert steps[0].text == "oops\n\n[exit code 3]"
    assert not steps[0].error and not steps[0].done


async def test_bash_runs_in_a_scratch_folder_of_the_episode_removed_at_teardown(fake_bundle):
    _, steps, _ = await play(
        fake_bundle,
        "bash",
        [("bash", {"command": "echo kept > note.txt; pwd"}), ("bash", {"command": "cat note.txt"})],
    )
    scratch = Path(steps[0].text.splitlines()[0])
    assert steps[1].text.startswith("kept")
    assert scratch.name == "work" and scratch.parent.name.startswith("agentenv-bash-")
    assert not scratch.exists()


async def test_each_episode_gets_its_own_scratch_folder(fake_bundle):
    _, first, _ = await play(fake_bundle, "bash", [("bash", {"command": "pwd"})])
    _, second, _ = await play(fake_bundle, "bash", [("bash", {"command": "pwd; ls"})])
    assert first[0].text.splitlines()[0] != second[0].text.splitlines()[0]
    assert second[0].text.splitlines()[1] == ""  # nothing left from the first episode


async def test_bash_without_a_command_is_answered_with_the_schema_error(fake_bundle):
    _, steps, result = await play(fake_bundle, "bash", [("bash", {}), ("bash", {"command": "echo hi"})], ["hi"])
    assert steps[0].error
    assert "$: 'command' is a required property" in steps[0].text
    assert result.reward == 1.0


async def test_bash_is_an_unknown_tool_where_the_task_does_not_offer_it(fake_bundle):
    _, steps, _ = await play(fake_bundle, "echo", [("bash", {"command": "echo hi"})])
    assert steps[0].error
    assert steps[0].text.startswith("unknown tool 'bash'")


async def test_a_command_past_the_deadline_fails_the_episode_and_is_killed(fake_bundle):
    marker = f"agentenv-deadline-{uuid.uuid4().hex}"
    _, steps, result = await play(
        fake_bundle, "bash", [("bash", {"command": f"exec -a {marker} sleep 30"})], tool_timeout=0.5
    )
    assert steps[0].done
    assert (result.outcome, result.failure.kind, result.failure.stage) == ("failed", "deadline", "tool")
    await until(lambda: not running(marker))


async def test_long_output_is_cut_with_a_note(fake_bundle):
    _, steps, _ = await play(fake_bundle, "bash", [("bash", {"command": "yes x | head -c 40000"})])
    assert len(steps[0].text) < 17_000
    assert re.search(r"\[output cut at 16000 characters\]\n\[exit code 0\]$", steps[0].text)
