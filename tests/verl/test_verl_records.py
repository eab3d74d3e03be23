"""A verl loop against a real ``agentenv serve --record``: one record per episode, a replay's attempts together."""

from __future__ import annotations

import json

from agentenv import record

from tests.support.verl import FAKE, ScriptedServer, make_loop, tool_call

SAMPLING = {"temperature": 1.0}


async def test_a_verl_loop_leaves_one_record_per_episode_with_a_replays_attempt_history(
    tokenizer, fake_rows, serve_process, tmp_path
):
    folder = tmp_path / "records"
    server = serve_process(FAKE, "--record", str(folder))
    # the first rollout's first attempt crashes the env (replayed on a new episode); the second plays once
    replayed = ScriptedServer(tokenizer, [tool_call("crash"), tool_call("echo", text="ping"), "ping<|im_end|>"])
    first = await make_loop(tokenizer, replayed, server.url).run(SAMPLING, **fake_rows["echo"])
    once = ScriptedServer(tokenizer, [tool_call("echo", text="pong"), "pong<|im_end|>"])
    second = await make_loop(tokenizer, once, server.url).run(SAMPLING, **fake_rows["echo"])
    server.terminate()  # its recorder has written every line it had

    assert (first.reward_score, second.reward_score) == (1.0, 1.0)
    episodes = list(record.read(folder))
    assert len(episodes) == 3 and {e["client"] for e in episodes} == {"verl"}
    by_attempts = sorted(record.rollouts(episodes), key=len)
    assert [len(r) for r in by_attempts] == [1, 2]
    (lost, scored) = by_attempts[1]
    assert (lost["attempt"], lost["outcome"], lost["failure"]["fault"]) == (1, "failed", "env")
    assert (scored["attempt"], scored["outcome"], scored["reward"]) == (2, "scored", 1.0)
    assert [e["kind"] for e in scored["earlier"]] == [lost["failure"]["kind"]]
    assert [json.loads(c["args"]) for t in scored["turns"] for c in t["calls"]] == [{"text": "ping"}]
    assert [json.loads(c["args"]) for t in by_attempts[0][0]["turns"] for c in t["calls"]] == [{"text": "pong"}]
