"""AsyncGRPO's environment path (``trl.experimental.async_grpo``) with AgentEnv's factory, without vLLM.

AsyncGRPO generates with a vLLM server and trains with FSDP2 on GPUs, so neither runs here. What runs: its
rollout loop (``_AsyncRolloutLoop``, which the worker runs in a spawned child) driven in this process with its
one vLLM call stubbed by a stand-in generation function, and the factory crossing into a spawned process.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import pickle
import queue
from collections import defaultdict
from typing import Any

import pytest
from agentenv_trl import AgentEnv
from agentenv_trl.tiny import tiny_tokenizer
from datasets import Dataset

from tests.support.trl import FAKE, play_echo

# What the stand-in model says, by task (its first prompt) and by how many tool answers it has seen.
SCRIPT = {
    "Echo the word 'ping' with the echo tool, then say it.": [
        '<tool_call>\n{"name": "echo", "arguments": {"text": "ping"}}\n</tool_call>',
        '<tool_call>\n{"name": "end_turn", "arguments": {"reply": "ping"}}\n</tool_call>',
    ],
    "Say hello.": [
        '<tool_call>\n{"name": "end_turn", "arguments": {"reply": "hello"}}\n</tool_call>',
        '<tool_call>\n{"name": "end_turn", "arguments": {"reply": "goodbye"}}\n</tool_call>',
    ],
    "Echo 'x'.": ['<tool_call>\n{"name": "echo", "arguments": {"text": "x"}}\n</tool_call>'],
}


def test_the_factory_pickles_into_a_spawned_process_and_plays_there() -> None:
    with AgentEnv.local(FAKE) as env:
        factory = env.factory
        assert pickle.loads(pickle.dumps(factory["ok"])) is factory["ok"]  # in its own process: the same class
        row = next(r for r in env.dataset if r["task_id"] == "echo")
        context = mp.get_context("spawn")  # as AsyncRolloutWorker starts its child
        results = context.Queue()
        child = context.Process(target=play_echo, args=(factory, row, results))
        child.start()
        try:
            got = results.get(timeout=300)
        finally:
            child.join(60)
        episodes = env._app.state.agentenv.episodes_started
    assert got == ("fake:ok", 1.0)
    assert child.exitcode == 0
    assert env.shared.url.startswith("local:")  # this process plays in process (the factory's probes among them)
    assert episodes == 1  # the server started when the class was pickled played the child's one episode, only it


@pytest.fixture(scope="module")
def samples() -> Any:
    """Scored samples of one pass over three tasks x 2 generations through the async rollout loop."""
    from accelerate.state import PartialState
    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

    PartialState()  # as the worker's child does first: the loop logs through accelerate
    with AgentEnv.local(FAKE) as env:
        rows = [r for r in env.dataset if r["task_id"] in ("echo", "two-turn", "deploy-fails")]
        tokenizer = tiny_tokenizer(texts=[*SCRIPT, *(t for lines in SCRIPT.values() for t in lines)])
        buffer: queue.Queue[Any] = queue.Queue()
        loop = _AsyncRolloutLoop(
            model_name="stand-in",
            dataset=Dataset.from_list(rows),
            reward_funcs=[],
            processing_class=tokenizer,
            eos_token_ids=[tokenizer.eos_token_id],
            rollout_buffer=buffer,
            model_version_value=mp.Value("i", 0),
            heartbeat_value=mp.Value("d", 0.0),
            failed_event=mp.Event(),
            exception_info_queue=queue.Queue(),
            metrics_queue=queue.Queue(),
            environment_factory=env.factory,
            num_generations=2,
            max_inflight_tasks=6,
            max_tool_calling_iterations=4,
        )

        async def stand_in(prompt_ids: list[int]) -> tuple[list[int], list[float]]:
            """The vLLM call's stand-in: the scripted turn for this task and point of the conversation."""
            text = tokenizer.decode(prompt_ids)
            lines = next(lines for task, lines in SCRIPT.items() if task in text)
            seen = text.count("<tool_response>")
            said = lines[seen] if seen < len(lines) else "done"
            ids = tokenizer(said + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
            return ids, [-0.5] * len(ids)

        loop._generate_one_turn = stand_in
        by_group: dict[int, list[Any]] = defaultdict(list)

        async def one_pass() -> None:
            stop = asyncio.Event()
            tasks = [asyncio.create_task(loop._generate_loop(stop)), asyncio.create_task(loop._score_loop(stop))]

            def complete(group: int) -> bool:  # both generations scored (a conversation may give several rows)
                return len({id(s.completion) for s in by_group.get(group, [])}) == 2

            while not all(complete(g) for g in range(len(rows))):
                for task in tasks:
                    if task.done():
                        task.result()  # a loop that died raises here
                try:
                    sample = buffer.get_nowait()
                except queue.Empty:
                    await asyncio.sleep(0.05)
                    continue
                by_group[sample.group_id].append(sample)
            stop.set()
            await asyncio.gather(*tasks)

        try:
            loop._loop.run_until_complete(asyncio.wait_for(one_pass(), 120))
        finally:
            loop._tool_pool.shutdown(wait=True)
            loop._loop.close()
        yield {s[0].prompt[-1]["content"]: s for g, s in by_group.items() if g < len(rows)}


def test_async_rewards_come_from_get_reward(samples: Any) -> None:
    for task in ("Echo the word 'ping' with the echo tool, then say it.", "Say hello."):
        assert {s.metrics["rewards/fake:ok"] for s in samples[task]} == {1.0}
        assert {s.metrics["reward"] for s in samples[task]} == {1.0}


def test_async_failed_episode_is_nan_with_no_advantage(samples: Any) -> None:
    for sample in samples["Echo 'x'."]:
        assert math.isnan(sample.metrics["reward"])
        assert math.isnan(sample.metrics["rewards/fake:deploy_fails"])
        assert sample.advantage == 0.0


def test_async_second_turn_prompt_is_handed_over(samples: Any) -> None:
    for sample in samples["Say hello."]:
        answers = [m["content"] for m in sample.completion if m["role"] == "tool"]
        assert answers[:2] == ["Now say goodbye.", "The episode is over."]
