"""TRL 1.16's own harness rollouts (loop-owning, no adapter) on a bundle's tasks, through OpenEnv's capture proxy.

TRL's ``_HarnessRolloutLoop`` runs in this process, and its ``HarnessRolloutWorker`` spawns its child, both with
``AgentEnvSessionFactory`` as the session factory; the only thing stood in is the worker's vLLM availability
check (no vLLM on this machine: the engine is the stand-in, and TRL never calls it in this mode).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import queue
import threading
from typing import Any

import numpy as np
import pytest
from agentenv_harness import AgentEnvSessionFactory, prompt_rows

from tests.support.harness import HARNESS, Engine
from tests.support.standin.vllm import _sampled_logprob

TEMPERATURE = 0.8
REWARDS = {"times": 1.0, "times-wrong": 0.0, "times-tool": 1.0}  # what each task's own verifiers give


@pytest.fixture(scope="module")
def engine() -> Any:
    running = Engine(["tiny/policy", "trl-policy-v1"])
    yield running
    running.server.stop()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from agentenv_trl.tiny import tiny_tokenizer

    return tiny_tokenizer(texts=["What is 6 times 7? Answer with the number."])


def _first_groups(get: Any, rows: Any, timeout: float = 300.0) -> dict[str, list[Any]]:
    """Samples until the first group of every row has both its generations, by task (group k is row k)."""
    import time

    groups: dict[int, list[Any]] = {}
    deadline = time.monotonic() + timeout
    while any(len(groups.get(k, [])) < 2 for k in range(len(rows))):
        sample = get(timeout=max(1.0, deadline - time.monotonic()))
        groups.setdefault(sample.group_id, []).append(sample)
    return {rows[k]["task_id"]: groups[k] for k in range(len(rows))}


def _trained_right(sample: Any) -> None:
    """Every completion token of the sample is trained, each with the engine's own log-prob for it."""
    mask = np.asarray(sample.completion_mask).astype(bool)
    ids = np.asarray(sample.input_ids)[mask]
    assert mask.sum() > 0
    expected = [_sampled_logprob(int(t), TEMPERATURE) for t in ids]
    assert np.allclose(np.asarray(sample.old_log_probs)[mask], expected, atol=1e-5)


def test_trls_own_conversion_trains_every_captured_token_with_the_episodes_reward(engine):
    from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
    from trl.experimental.async_grpo.openenv_harness import _messages_from_trace, _turns_from_training_trace

    sampling = {"temperature": TEMPERATURE, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0,
                "presence_penalty": 0.0, "repetition_penalty": 1.0}  # fmt: skip
    factory = AgentEnvSessionFactory(HARNESS, llm_url=engine.url, model="tiny/policy", split="trl", sampling=sampling)
    try:
        for row in prompt_rows(HARNESS, "trl"):
            session = factory.create(row["prompt"], seed=0, episode_id=row["task_id"])
            assert session.wait_for_completion() == 0
            captured = session.fetch_training_trace()
            turns = _turns_from_training_trace(captured)
            entries = captured.to_trace_entries()
            rows, tally = _chain_to_sequences(turns, row["task_id"], 0)  # fork_threshold_tokens=0 (lossless)
            reward = session.verify(_messages_from_trace(entries)).env_reward
            session.close()
            completion = sum(len(t.output_ids) for t in turns)
            assert sum(sum(r.completion_mask) for r in rows) == completion, row["task_id"]
            assert all(len(t.output_log_probs) == len(t.output_ids) for t in turns)
            assert tally["fork"] == 0 and reward == REWARDS[row["task_id"]]
            assert _messages_from_trace(entries)[-1] == {"role": "assistant", "content": "The answer is 42."}
    finally:
        factory.close()


def test_trls_harness_loop_drives_the_factory_and_scores_with_the_tasks_verifiers(engine, tokenizer):
    from accelerate.state import PartialState
    from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

    PartialState()
    rows = prompt_rows(HARNESS, "trl")
    buffer: queue.Queue[Any] = queue.Queue()
    factory = functools.partial(AgentEnvSessionFactory, str(HARNESS), llm_url=engine.url, model="tiny/policy",
                                lora_name="trl-policy", split="trl")  # fmt: skip
    loop = _HarnessRolloutLoop(
        harness_session_factory=factory, harness_adapter=None, model_name="tiny/policy", lora_name="trl-policy",
        dataset=rows, reward_funcs=[], processing_class=tokenizer, eos_token_ids=[tokenizer.eos_token_id],
        rollout_buffer=buffer, model_version_value=mp.Value("i", 1), heartbeat_value=mp.Value("d", 0.0),
        failed_event=mp.Event(), exception_info_queue=queue.Queue(), metrics_queue=queue.Queue(maxsize=4096),
        num_generations=2, max_inflight_tasks=4, temperature=TEMPERATURE, top_k=-1,
    )  # fmt: skip
    runner = threading.Thread(target=loop.run, daemon=True)
    runner.start()
    by_task = _first_groups(buffer.get, rows)
    loop._loop.call_soon_threadsafe(loop._stop_event.set)
    runner.join(120)
    assert not runner.is_alive()
    assert {task: [s.metrics["reward"] for s in samples] for task, samples in by_task.items()} == {
        task: [reward, reward] for task, reward in REWARDS.items()
    }
    for samples in by_task.values():
        for sample in samples:
            _trained_right(sample)
    assert {r["model"] for r in engine.chats()} >= {"trl-policy-v1"}  # the published adapter, pinned per rollout


def test_trls_harness_worker_runs_the_factory_in_its_spawned_child(engine, tokenizer, monkeypatch):
    import trl.experimental.async_grpo.async_rollout_worker as worker_module
    from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker

    monkeypatch.setattr(worker_module, "is_vllm_available", lambda *args, **kwargs: True)  # no vLLM here
    rows = prompt_rows(HARNESS, "trl")
    factory = functools.partial(AgentEnvSessionFactory, str(HARNESS), llm_url=engine.url, model="tiny/policy",
                                lora_name="trl-policy", split="trl")  # fmt: skip
    worker = HarnessRolloutWorker(
        harness_session_factory=factory, harness_adapter=None, model_name="tiny/policy", lora_name="trl-policy",
        dataset=rows, reward_funcs=[], processing_class=tokenizer, eos_token_ids=[tokenizer.eos_token_id],
        num_generations=2, max_inflight_tasks=2, temperature=TEMPERATURE, top_k=-1, child_ready_timeout=600,
    )  # fmt: skip
    worker.update_model_version(1)
    worker.start()
    try:
        by_task = _first_groups(worker.rollout_buffer.get, rows)
        worker.check_health(300)
    finally:
        worker.stop()
    assert {task: [s.metrics["reward"] for s in samples] for task, samples in by_task.items()} == {
        task: [reward, reward] for task, reward in REWARDS.items()
    }
    for samples in by_task.values():
        for sample in samples:
            _trained_right(sample)
