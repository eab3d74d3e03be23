"""Env failures under AgentEnvAgentLoop: replays on new episodes, RolloutFailed, servers that go and come
back, token servers. Failures come from the fake env and real servers, never from patching."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from agentenv.errors import Unauthorized
from agentenv_verl import RolloutFailed

from tests.support.verl import FAKE, ScriptedServer, make_loop, tool_call

SAMPLING = {"temperature": 1.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_rollout_the_env_fails_is_played_again_on_a_new_episode(tokenizer, fake_rows, fake_server, ledger):
    # attempt 1 calls crash (the env breaks: not the policy's doing); attempt 2, a fresh sample, goes well
    model = ScriptedServer(tokenizer, [tool_call("crash"), tool_call("echo", text="ping"), "ping<|im_end|>"])

    out = await make_loop(tokenizer, model, fake_server.url).run(SAMPLING, **fake_rows["echo"])

    assert out.reward_score == 1.0
    assert out.extra_fields["reward_extra_info"]["attempts"] == 2
    assert ledger.count("deploy") == 2
    assert model.prompts[1] == model.prompts[0]  # played from the start, not continued
    assert model.request_ids[1] != model.request_ids[0]
    mine = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    assert tokenizer.decode(mine) == tool_call("echo", text="ping") + "ping<|im_end|>"  # only the scored attempt


async def test_a_tool_past_its_deadline_is_replayed(tokenizer, fake_rows, fake_server):
    model = ScriptedServer(tokenizer, [tool_call("hang"), tool_call("echo", text="ping"), "ping<|im_end|>"])

    out = await make_loop(tokenizer, model, fake_server.url, tool_timeout=1).run(SAMPLING, **fake_rows["echo"])

    assert out.extra_fields["reward_extra_info"]["attempts"] == 2
    assert out.reward_score == 1.0
    assert len(model.prompts) == 3  # the failed attempt ended at the tool call


async def test_rollout_failed_when_every_attempt_fails(tokenizer, fake_rows, fake_server, ledger):
    model = ScriptedServer(tokenizer, ["x<|im_end|>"] * 3)

    with pytest.raises(RolloutFailed) as failed:
        await make_loop(tokenizer, model, fake_server.url, attempts=3).run(SAMPLING, **fake_rows["deploy-fails"])

    assert failed.value.attempts == 3
    assert failed.value.task_id == "deploy-fails"
    assert {(f.kind, f.stage) for f in failed.value.failures} == {("deploy", "deploy")}
    assert "the env failed 3 attempt(s) of 3" in str(failed.value)
    assert "the fake deploy failed on purpose" in str(failed.value)
    assert ledger.count("deploy") == 3


async def test_no_replay_starts_once_reset_timeout_has_passed(tokenizer, fake_rows, fake_server, ledger):
    # the deploy hangs past the server's 1 s deadline; by then the rollout's reset_timeout (1 s) is spent
    model = ScriptedServer(tokenizer, ["x<|im_end|>"] * 3)
    loop = make_loop(tokenizer, model, fake_server.url, attempts=3, reset_timeout=1)
    began = time.monotonic()

    with pytest.raises(RolloutFailed) as failed:
        await loop.run(SAMPLING, **fake_rows["deploy-hangs"])

    assert failed.value.attempts == 1
    assert failed.value.failures[0].kind == "deadline"
    assert "no replay starts once reset_timeout=1 s has passed" in str(failed.value)
    assert ledger.count("deploy") == 1
    assert time.monotonic() - began < 10


async def test_a_server_killed_mid_rollout_is_waited_for_and_the_rollout_replayed(
    tokenizer, fake_rows, serve_process, serve, ledger
):
    first = serve_process(FAKE)  # a real `agentenv serve` process, killed with SIGKILL below
    back = threading.Event()

    def restart() -> None:  # on the same port, in this process (a second subprocess would only be slower)
        serve(FAKE, thread_options={"port": first.port})
        back.set()

    async def kill_during_the_first_reply(n: int) -> None:
        if n == 1:
            # the episode started; its deploy runs in the background: let it happen (and be counted) first
            await asyncio.get_running_loop().run_in_executor(None, ledger.wait_for, "deploy", 1)
            first.kill()
            threading.Thread(target=restart, daemon=True).start()

    model = ScriptedServer(
        tokenizer, [tool_call("echo", text="ping")] * 2 + ["ping<|im_end|>"], before=kill_during_the_first_reply
    )

    out = await make_loop(tokenizer, model, first.url, reset_timeout=60).run(SAMPLING, **fake_rows["echo"])

    assert back.is_set()
    assert out.reward_score == 1.0
    assert out.extra_fields["reward_extra_info"]["attempts"] == 2
    assert ledger.count("deploy") == 2  # one in each server


async def test_a_server_that_is_not_up_yet_delays_a_rollout_rather_than_failing_it(tokenizer, fake_rows, serve):
    port = _free_port()

    async def start_late() -> None:
        await asyncio.sleep(1.0)
        await asyncio.get_running_loop().run_in_executor(None, lambda: serve(FAKE, thread_options={"port": port}))

    late = asyncio.create_task(start_late())
    model = ScriptedServer(tokenizer, [tool_call("echo", text="ping"), "ping<|im_end|>"])

    out = await make_loop(tokenizer, model, f"http://127.0.0.1:{port}", reset_timeout=30).run(
        SAMPLING, **fake_rows["echo"]
    )

    await late
    assert out.reward_score == 1.0
    info = out.extra_fields["reward_extra_info"]
    assert info["attempts"] == 1
    assert info["env_seconds"] >= 1.0  # the wait for the server is env time


async def test_a_token_server_is_played_with_the_token_its_variable_holds(tokenizer, fake_rows, serve, monkeypatch):
    server = serve(FAKE, token="tok-8c1d")
    monkeypatch.setenv("VERL_LOOP_TOKEN", "tok-8c1d")
    model = ScriptedServer(tokenizer, [tool_call("echo", text="ping"), "ping<|im_end|>"])

    out = await make_loop(tokenizer, model, server.url, token_var="VERL_LOOP_TOKEN").run(SAMPLING, **fake_rows["echo"])

    assert out.reward_score == 1.0


async def test_a_refused_token_fails_the_rollout_at_once(tokenizer, fake_rows, serve, monkeypatch, ledger):
    server = serve(FAKE, token="tok-8c1d")
    monkeypatch.setenv("VERL_LOOP_TOKEN", "not-the-token")
    model = ScriptedServer(tokenizer, ["ping<|im_end|>"])
    loop = make_loop(tokenizer, model, server.url, token_var="VERL_LOOP_TOKEN", attempts=3, reset_timeout=60)
    began = time.monotonic()

    with pytest.raises(Unauthorized, match=r"refused the bearer token from \$VERL_LOOP_TOKEN"):
        await loop.run(SAMPLING, **fake_rows["echo"])

    assert time.monotonic() - began < 5  # not waited out, not replayed
    assert model.prompts == []
    assert ledger.count("deploy") == 0


async def test_a_token_server_without_the_variable_names_it(tokenizer, fake_rows, serve, monkeypatch):
    server = serve(FAKE, token="tok-8c1d")
    monkeypatch.delenv("VERL_LOOP_TOKEN", raising=False)
    loop = make_loop(tokenizer, ScriptedServer(tokenizer, []), server.url, token_var="VERL_LOOP_TOKEN")

    with pytest.raises(Unauthorized, match="export VERL_LOOP_TOKEN="):
        await loop.run(SAMPLING, **fake_rows["echo"])
