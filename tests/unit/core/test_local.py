"""A bundle played in this process (``agentenv.local``): the client's own sessions, rollouts and Task API, no server.

Each behaviour is checked against a real server of the same bundle on loopback where the two could differ: the
answers, the failures and the task rows must be the same, because both are the engine's ``Service``.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from agentenv.client import Session, Shared, read_tasks
from agentenv.errors import AgentEnvError, AtCapacity, EpisodeFailed, ToolDeadline, UnknownSplit
from agentenv.local import Here, played_here

from tests.support.paths import FAKE


async def play_echo(shared: Shared, text: str = "ping") -> tuple[Any, Any, Any]:
    """The echo task played by the book: the tool's answer, the turn's answer and the rollout's result."""
    session = Session(shared)
    try:
        rollout = session.rollout("echo")
        await rollout.start()
        call = await rollout.call("echo", {"text": text})
        turn = await rollout.end_turn(text)
        return call, turn, await rollout.conclude()
    finally:
        await session.close()


def test_a_rollout_plays_the_same_here_as_on_a_server(serve, ledger):
    server = serve(FAKE)

    async def both() -> tuple[Any, Any]:
        async with played_here(FAKE) as here:
            return await play_echo(here.shared()), await play_echo(Shared(server.url))

    (call, turn, result), (call_s, turn_s, result_s) = asyncio.run(both())
    assert (call.text, call.error) == (call_s.text, call_s.error) == ("ping", False)
    assert turn.done and turn_s.done
    assert (result.outcome, result.reward, dict(result.scores)) == ("scored", 1.0, {"answer-1": 1.0})
    assert (result_s.outcome, result_s.reward, dict(result_s.scores)) == ("scored", 1.0, {"answer-1": 1.0})
    assert ledger.count("deploy") == 2 and ledger.count("teardown") == 2  # one episode each, each torn down


def test_the_policys_mistakes_are_answered_here_as_a_server_answers_them(serve):
    server = serve(FAKE)

    async def mistakes(shared: Shared) -> list[tuple[str, bool]]:
        session = Session(shared)
        try:
            await session.start("echo")
            answers = [
                await session.call("echo", {}),  # a required argument missing: the schema's refusal
                await session.call("nope", {"text": "x"}),  # no such tool
                await session.call("echo", {"text": math.nan}),  # no JSON carries it: not sent
                await session.call("fail", {}),  # the tool refuses
            ]
            return [(a.text, a.error) for a in answers]
        finally:
            await session.close()

    async def both() -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
        async with played_here(FAKE) as here:
            return await mistakes(here.shared()), await mistakes(Shared(server.url))

    here_answers, server_answers = asyncio.run(both())
    assert [error for _, error in here_answers] == [True, True, True, True]
    assert here_answers == server_answers


def test_an_env_failure_is_lost_here_never_scored(ledger):
    async def crash() -> EpisodeFailed:
        async with played_here(FAKE) as here:
            session = Session(here.shared())
            await session.start("echo")
            with pytest.raises(EpisodeFailed) as lost:
                await session.call("crash", {})
            await session.close()
            return lost.value

    lost = asyncio.run(crash())
    assert lost.failure.kind == "crash" and lost.result is not None and lost.result.outcome == "failed"
    assert ledger.count("teardown") == 1


def test_a_call_past_the_clients_deadline_abandons_the_episode_and_tears_it_down(ledger):
    async def hang() -> ToolDeadline:
        async with played_here(FAKE) as here:  # the engine's own deadline (60 s) is not what ends it
            shared = here.shared(tool_timeout=0.3, margin=0.2)
            session = Session(shared)
            await session.start("echo")
            await session.call("echo", {"text": "deployed"})  # the deploy's wait is behind us
            with pytest.raises(ToolDeadline) as lost:
                await session.call("hang", {"seconds": 30})
            await session.close()
            return lost.value

    lost = asyncio.run(hang())
    assert lost.failure.kind == "deadline"
    assert ledger.count("call hang") == 1 and ledger.count("teardown") == 1  # torn down by the time the block ends


def test_a_session_left_open_is_torn_down_when_the_block_ends(ledger):
    async def leave_open() -> None:
        async with played_here(FAKE) as here:
            session = Session(here.shared())
            await session.start("echo")
            await session.call("echo", {"text": "x"})

    asyncio.run(leave_open())
    assert ledger.count("deploy") == 1 and ledger.count("teardown") == 1


def test_the_task_rows_are_a_servers(serve):
    server = serve(FAKE)
    here = Here(FAKE)
    try:
        for split in ("train", "eval"):
            assert read_tasks(here.shared(), split) == read_tasks(Shared(server.url), split)
        with pytest.raises(UnknownSplit, match="no split 'nope'"):
            read_tasks(here.shared(), "nope")
    finally:
        here.close()


def test_an_unknown_task_is_refused_naming_the_task_api():
    async def unknown() -> str:
        async with played_here(FAKE) as here:
            session = Session(here.shared())
            try:
                with pytest.raises(AgentEnvError) as refused:
                    await session.start("no-such-task")
            finally:
                await session.close()
            return str(refused.value)

    assert "has no task 'no-such-task'" in asyncio.run(unknown())


def test_a_folder_that_is_no_bundle_is_refused_with_the_callers_fix(tmp_path):
    async def open_it() -> None:
        async with played_here(tmp_path, "give BUNDLE as a folder"):
            pass

    with pytest.raises(AgentEnvError, match=r"neither a bundle folder .*; give BUNDLE as a folder"):
        asyncio.run(open_it())


def test_settings_that_play_here_have_a_local_url():
    here = Here(FAKE)
    try:
        with pytest.raises(AgentEnvError, match="local: URL"):
            Shared("http://127.0.0.1:1", here=here)
        assert here.shared().url == f"local:{FAKE}" and here.shared().loopback
    finally:
        here.close()


def test_a_session_past_max_sessions_is_refused_as_a_full_server_refuses_it():
    async def crowd() -> tuple[str, str]:
        async with played_here(FAKE, max_sessions=1, capacity_fix="max_sessions= of this test") as here:
            first, second = Session(here.shared()), Session(here.shared())
            await first.start("echo")
            with pytest.raises(AtCapacity) as full:
                await second.start("echo")
            await first.close()
            started = await second.start("echo")  # a session ended: room for one more
            await second.close()
            return str(full.value), started.task_id

    refused, started = asyncio.run(crowd())
    assert "at capacity: 1/1 sessions active" in refused and "max_sessions= of this test" in refused
    assert started == "echo"
