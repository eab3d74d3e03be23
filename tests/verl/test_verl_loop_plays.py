"""AgentEnvAgentLoop.run on verl's own ToolAgentLoop, playing rows of the fake and inbox bundles."""

from __future__ import annotations

import json
import logging
import textwrap

from agentenv_server import ServerThread, build_app
from agentenv_verl import write

from tests.support.verl import INBOX, ScriptedServer, dataset_rows, make_loop, tool_call, verl_config, xml_call

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
KEYS = {"score/answer-1", "score/answer-2", "attempts", "model_seconds", "env_seconds"}


async def test_a_played_row_is_scored_with_its_reward_and_reward_extra_info(tokenizer, fake_rows, fake_server):
    model = ScriptedServer(tokenizer, [tool_call("echo", text="ping"), "ping<|im_end|>"])
    loop = make_loop(tokenizer, model, fake_server.url)

    out = await loop.run(SAMPLING, **fake_rows["echo"])

    assert out.reward_score == 1.0
    info = out.extra_fields["reward_extra_info"]
    assert set(info) == KEYS
    assert info["score/answer-1"] == 1.0
    assert info["score/answer-2"] is None  # a step of another task: still a key
    assert info["attempts"] == 1
    assert 0 < info["model_seconds"] < info["env_seconds"]
    assert "<tool_response>\nping\n</tool_response>" in model.prompts[1]  # the env's answer, in the context
    mine = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    assert tokenizer.decode(mine) == tool_call("echo", text="ping") + "ping<|im_end|>"
    assert out.extra_fields["min_global_steps"] == 0  # the rollout server's extra fields pass through


async def test_every_rollout_of_a_data_source_reports_the_same_keys(tokenizer, fake_rows, fake_server):
    outs = []
    for task, replies in (("echo", ["ping<|im_end|>"]), ("weighted", ["yes<|im_end|>", "no<|im_end|>"])):
        outs.append(
            await make_loop(tokenizer, ScriptedServer(tokenizer, replies), fake_server.url).run(
                SAMPLING, **fake_rows[task]
            )
        )

    assert [set(o.extra_fields["reward_extra_info"]) for o in outs] == [KEYS, KEYS]
    assert outs[0].reward_score == 0.0  # no echo call: the policy's doing, scored
    assert outs[0].extra_fields["reward_extra_info"]["score/answer-1"] == 0.0


async def test_the_last_reply_without_special_tokens_ends_each_turn(tokenizer, fake_rows, fake_server):
    # "weighted" scores each turn with an exact-match verifier: "yes<|im_end|>" would score 0
    model = ScriptedServer(tokenizer, ["yes<|im_end|>", "no<|im_end|>"])
    out = await make_loop(tokenizer, model, fake_server.url).run(SAMPLING, **fake_rows["weighted"])

    assert out.reward_score == 1.0
    assert out.extra_fields["reward_extra_info"]["score/answer-1"] == 1.0
    assert out.extra_fields["reward_extra_info"]["score/answer-2"] == 1.0
    assert model.prompts[1].endswith("yes<|im_end|>\n<|im_start|>user\nSay no.<|im_end|>\n<|im_start|>assistant\n")
    context = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0]
    assert "Say no." in tokenizer.decode(context)  # the next turn's prompt is context, not the model's
    assert out.num_turns == 4


async def test_a_turn_the_rollout_has_no_room_for_ends_unanswered(tokenizer, fake_rows, fake_server):
    model = ScriptedServer(tokenizer, ["yes<|im_end|>", "no<|im_end|>"])
    loop = make_loop(tokenizer, model, fake_server.url, config=verl_config(max_assistant_turns=1))

    out = await loop.run(SAMPLING, **fake_rows["weighted"])

    assert len(model.prompts) == 1
    assert out.extra_fields["reward_extra_info"]["score/answer-1"] == 1.0
    assert out.extra_fields["reward_extra_info"]["score/answer-2"] == 0.0
    assert out.reward_score == 0.25  # weights 1 and 3


async def test_an_inbox_task_is_played_over_two_turns_through_qwen3_coder(tokenizer, inbox_rows, serve):
    server = serve(INBOX)
    model = ScriptedServer(
        tokenizer,
        [
            xml_call("search", query="budget"),
            xml_call("read_email", id="m1"),
            "Dana Whitfield.<|im_end|>",
            "$4,200.<|im_end|>",
        ],
    )
    loop = make_loop(
        tokenizer, model, server.url, config=verl_config(format="qwen3_coder", max_tool_response_length=2000)
    )

    out = await loop.run(SAMPLING, **inbox_rows["q-001"])

    assert out.reward_score == 1.0
    assert out.extra_fields["reward_extra_info"] | {"model_seconds": 0, "env_seconds": 0} == {
        "score/answer-1": 1.0,
        "score/answer-2": 1.0,
        "attempts": 1,
        "model_seconds": 0,
        "env_seconds": 0,
    }
    assert '["m1"]' in model.prompts[1]  # search's answer
    assert "4,200" in model.prompts[2]  # the email read
    assert "What amount did they ask for?" in model.prompts[3]


async def test_qwen3_coder_arguments_are_converted_by_the_typed_schema(tokenizer, fake_rows, fake_server):
    nested = {"sender": "dana", "tags": ["work"]}
    model = ScriptedServer(
        tokenizer,
        [
            xml_call("add", a=2, b=3),
            xml_call("nested", filter=nested, limit=2, score="7", note="null"),
            "done<|im_end|>",
        ],
    )
    loop = make_loop(tokenizer, model, fake_server.url, config=verl_config(format="qwen3_coder"))

    await loop.run(SAMPLING, **fake_rows["echo"])

    # the env validates arguments against the JSON Schema: text "2" for an integer would be an error answer
    assert "<tool_response>\n5\n</tool_response>" in model.prompts[1]
    answer = model.prompts[2].rsplit("<tool_response>\n", 1)[1].split("\n</tool_response>")[0]
    assert json.loads(answer) == {"filter": nested, "limit": 2, "order": "asc", "labels": [], "note": None, "score": 7}


async def test_the_template_gets_the_full_schema_and_the_parsers_a_typed_one(tokenizer, fake_rows, fake_server):
    model = ScriptedServer(tokenizer, ["done<|im_end|>"])
    loop = make_loop(tokenizer, model, fake_server.url)

    await loop.run(SAMPLING, **fake_rows["echo"])

    assert '"tags": {"type": "array", "items": {"type": "string", "enum": ["work", "home"]}}' in model.prompts[0]
    typed = loop.tools["nested"].tool_schema.function.parameters.properties
    assert typed["filter"].type == "object"
    assert typed["note"].type == "string"  # ["string", "null"]: the parsers read null first
    assert typed["score"].type == ["integer", "string"]
    assert typed["order"].enum == ["asc", "desc"]
    assert set(loop.tools) == {t["function"]["name"] for t in json.loads(fake_rows["echo"]["extra_info"]["tools"])}


async def test_env_seconds_cover_the_scoring(tokenizer, tmp_path):
    bundle = tmp_path / "slow"
    (bundle / "tasks").mkdir(parents=True)
    (bundle / "bundle.yaml").write_text(
        "name: slow\nenvs:\n  e: {kind: python, target: slow_env:Quiet}\n"
        "defaults:\n  toolset: {envs: [e]}\ntasks: tasks/*.yaml\n"
    )
    (bundle / "slow_env.py").write_text(
        textwrap.dedent('''
        import time
        from agentenv import Env

        class Quiet(Env):
            """No tools."""

        def slow_check(env, reply):
            time.sleep(0.6)
            return 1.0
    ''')
    )
    (bundle / "tasks" / "t.yaml").write_text(
        "id: t\nsplit: train\nturns:\n- prompt: Say anything.\n"
        "  verifiers: [{id: s, kind: python, check: 'slow_env:slow_check'}]\n"
    )
    server = ServerThread(build_app(bundle)).start()
    try:
        written = write(server.url, tmp_path / "out")
        row = dataset_rows(written.files["train"], tokenizer, tmp_path / "cache")["t"]
        out = await make_loop(tokenizer, ScriptedServer(tokenizer, ["ok<|im_end|>"]), server.url).run(SAMPLING, **row)
    finally:
        server.stop()

    info = out.extra_fields["reward_extra_info"]
    assert info["score/s"] == 1.0
    assert info["env_seconds"] >= 0.6
    assert info["model_seconds"] < 0.6


async def test_an_answer_verl_will_cut_is_warned_of_once_per_tool(tokenizer, fake_rows, fake_server, caplog):
    caplog.set_level(logging.WARNING, logger="agentenv_verl")
    prompts = []
    for _ in range(2):
        model = ScriptedServer(tokenizer, [tool_call("big", n=600), tool_call("echo", text="x" * 300), "x<|im_end|>"])
        await make_loop(tokenizer, model, fake_server.url).run(SAMPLING, **fake_rows["echo"])
        prompts.append(model.prompts)

    warned = [r.getMessage() for r in caplog.records if r.name == "agentenv_verl"]
    assert len(warned) == 2  # big and echo, once each over two rollouts
    assert warned[0].startswith("tool 'big' answered 600 characters; verl cuts tool answers to ")
    assert "max_tool_response_length=256 (cutting the middle)" in warned[0]
    assert warned[1].startswith("tool 'echo' answered 300 characters")
    assert "...(truncated)..." in prompts[0][1]


async def test_the_model_is_warned_only_about_answers_over_the_limit(tokenizer, fake_rows, fake_server, caplog):
    caplog.set_level(logging.WARNING, logger="agentenv_verl")
    model = ScriptedServer(tokenizer, [tool_call("big", n=256), "x<|im_end|>"])

    await make_loop(tokenizer, model, fake_server.url).run(SAMPLING, **fake_rows["echo"])

    assert [r for r in caplog.records if r.name == "agentenv_verl"] == []
    assert "x" * 256 + "\n</tool_response>" in model.prompts[1]
