"""The env's failures on a real server: a tool past its deadline, a program that dies with a child holding its
pipes, a deploy that fails, a verifier that crashes, and calls the client gave up on."""

from __future__ import annotations

import time

import pytest
from agentenv.client.settings import Shared

from tests.support import Ledger, running, wait_until
from tests.support.faults import Matrix, play, run


def test_a_tool_past_its_deadline_fails_the_episode_and_frees_the_slot(matrix: Matrix, ledger: Ledger) -> None:
    server = matrix.serve("--tool-timeout", "1", "--max-concurrent-envs", "1")
    shared = Shared(server.url, tool_timeout=1, reset_timeout=30)
    hung = run(play(shared, "echo", [("echo", {"text": "ping"}), ("hang", {"seconds": 60})], "ping", attempts=1))
    waiting = Shared(server.url, waits_for_server=True, reset_timeout=20)  # a few ms while the episode tears down
    after = run(play(waiting, "echo", [("echo", {"text": "ping"})], "ping"))  # the one slot is free again
    matrix.saw(hung), matrix.saw(after)
    assert (hung.result.outcome, hung.result.failure.kind, hung.result.failure.stage) == ("failed", "deadline", "tool")
    assert "did not answer within its deadline (1 s)" in hung.result.failure.message
    assert (after.result.outcome, after.result.reward) == ("scored", 1.0)
    assert matrix.lost == 1 and matrix.failures_scored == 0
    assert ledger.wait_for("teardown", 2) == 2


def test_a_program_that_dies_with_a_live_child_is_a_crash_at_once_with_its_stderr(
    matrix: Matrix, ledger: Ledger
) -> None:
    server = matrix.serve("--tool-timeout", "60")
    shared = Shared(server.url, tool_timeout=60, reset_timeout=60)
    began = time.monotonic()
    record = run(play(shared, "proc-echo", [("spawn", {}), ("die", {})], "sub"))
    took = time.monotonic() - began
    result = matrix.saw(record)
    assert (result.outcome, result.failure.kind, result.failure.stage) == ("failed", "crash", "tool")
    # the child holds the program's stdout open: EOF never came, the exit did (a deadline would take 60 s)
    assert took < 30, f"the crash was seen after {took:.0f} s"
    assert "(exit code 3)" in result.failure.message and "fake_proc: dying on purpose" in result.failure.message
    assert matrix.lost == 1 and matrix.failures_scored == 0
    child = next(e.split()[1] for e in ledger.events() if e.startswith("child "))
    assert wait_until(lambda: not running(child), 5)  # its child is killed with it


def test_a_deploy_that_fails_is_replayed_then_the_rollout_fails_unscored(matrix: Matrix, ledger: Ledger) -> None:
    server = matrix.serve()
    record = run(play(Shared(server.url), "deploy-fails", [("echo", {"text": "x"})], "x", attempts=3))
    result = matrix.saw(record)
    assert result.outcome == "failed" and result.reward is None
    assert matrix.kinds() == ["deploy", "deploy", "deploy"] and matrix.lost == 3
    assert "the fake deploy failed on purpose" in result.failure.message
    assert matrix.failures_scored == 0
    assert ledger.wait_for("teardown", 3) == ledger.count("deploy") == 3


def test_a_verifier_that_crashes_fails_the_episode_instead_of_scoring_it(matrix: Matrix) -> None:
    server = matrix.serve()
    result = matrix.saw(run(play(Shared(server.url), "broken-verifier", [], "anything")))
    assert (result.outcome, result.failure.kind, result.failure.stage) == ("failed", "verifier", "scoring")
    assert "the fake verifier broke" in result.failure.message
    assert matrix.lost == 1 and matrix.failures_scored == 0


@pytest.mark.parametrize("tool", ["hang", "sleep_sync"], ids=["async tool", "sync tool"])
def test_a_call_the_client_gave_up_on_is_cancelled_and_its_slot_freed_at_once(
    matrix: Matrix, ledger: Ledger, tool: str
) -> None:
    # the server would let the tool run 120 s; the client gives up after about 1 s and drops its connection
    server = matrix.serve("--tool-timeout", "120", "--max-concurrent-envs", "1")
    impatient = Shared(server.url, tool_timeout=0.5, margin=0.5, reset_timeout=30)
    calls = [("echo", {"text": "ping"}), (tool, {"seconds": 120})]

    async def main() -> tuple[object, object, float]:
        gave_up = await play(impatient, "echo", calls, "ping")
        began = time.monotonic()
        # the one slot: admitted once the server cancelled the call and tore the episode down
        waiting = Shared(server.url, waits_for_server=True, reset_timeout=20)  # well short of the 120 s
        next_one = await play(waiting, "echo", [("echo", {"text": "ping"})], "ping")
        return gave_up, next_one, time.monotonic() - began

    gave_up, next_one, waited = run(main())
    first, second = matrix.saw(gave_up), matrix.saw(next_one)  # type: ignore[arg-type]
    assert (first.outcome, first.failure.kind, first.failure.stage) == ("failed", "deadline", "client")
    assert (second.outcome, second.reward) == ("scored", 1.0)
    assert waited < 20, f"the next session waited {waited:.0f} s for the slot"
    assert matrix.lost == 1 and matrix.failures_scored == 0
    assert ledger.wait_for("teardown", 2) == 2
