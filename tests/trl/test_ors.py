"""TRL's own ``OpenRewardSpec`` (``trl.experimental.openreward``, through the ``openreward`` SDK) trains 2 GRPO steps on
the fake bundle served by a real ``agentenv serve --ors`` process on loopback, with its token.

The dataset holds ``echo`` (scored) and ``deploy-fails`` (an env whose deploy fails: the fault table's ``deploy`` row):
the failed episode must reach TRL's reward function as None, never 0. The reward function is TRL's own
(``spec.reward_funcs``: the last non-null reward a tool answered), recorded on its way to the trainer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agentenv_trl.solutions import tool_methods
from agentenv_trl.tiny import tiny_model, tiny_tokenizer, warm_start

from tests.support.trl import FAKE, answer, say

TOKEN = "tok-ors-trl-51d0"
TASKS = ("echo", "deploy-fails")
SCRIPTS = {
    "echo": [("echo", {"text": "ping"}), ("end_turn", {"reply": "ping"})],
    "deploy-fails": [("echo", {"text": "x"})],
}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """``agentenv serve FAKE --ors --token-var`` in a process of its own; the SDK pointed at it by its variables."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "agentenv.cli",
        "serve",
        str(FAKE),
        "--ors",
        "--port",
        str(port),
        "--token-var",
        "ORS_TEST_TOKEN",
        "--log-level",
        "warning",
    ]
    server = subprocess.Popen(command, env={**os.environ, "ORS_TEST_TOKEN": TOKEN}, stderr=subprocess.PIPE, text=True)
    sdk = {"OPENREWARD_API_KEY": TOKEN, "OPENREWARD_SESSION_URL": url, "OPENREWARD_API_URL": url}
    before = {name: os.environ.get(name) for name in sdk}
    os.environ.update(sdk)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"agentenv serve --ors exited with {server.returncode}"
            try:
                if httpx.post(
                    f"{url}/fake/num_tasks", json={"split": "train"}, headers={"X-API-Key": TOKEN}
                ).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "agentenv serve --ors did not answer within 120 s"
            time.sleep(0.3)
        yield url
    finally:
        for name, value in before.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        server.terminate()
        server.communicate(timeout=30)


def _indices(url: str) -> dict[str, int]:
    tasks = httpx.post(f"{url}/fake/tasks", json={"split": "train"}, headers={"X-API-Key": TOKEN}).json()["tasks"]
    return {spec["task_id"]: i for i, spec in enumerate(tasks) if spec["task_id"] in TASKS}


def test_a_request_without_the_token_is_refused(served):
    refused = httpx.post(f"{served}/fake/num_tasks", json={"split": "train"})
    assert refused.status_code == 401
    assert "X-API-Key" in refused.json()["detail"]


@pytest.fixture(scope="module")
def run(served, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from agentenv_trl.demo import no_checkpointing
    from trl import GRPOConfig, GRPOTrainer
    from trl.experimental.openreward import OpenRewardSpec

    indices = _indices(served)
    spec = OpenRewardSpec(served, indices=[indices[t] for t in TASKS])
    make = spec.environment_factory
    conversations = []
    for task in TASKS:
        env = make()
        messages = [{"role": "user", "content": env.reset(task_index=indices[task])}]
        for tool, args in SCRIPTS[task]:
            messages += [say(tool, **args), answer(tool, str(getattr(env, tool)(**args)))]
        messages.append({"role": "assistant", "content": ""})
        conversations.append((messages, tool_methods(env)))
        env._close()
    tokenizer = tiny_tokenizer(conversations)
    model = tiny_model(tokenizer, hidden_size=64, layers=2)
    warm_start(model, tokenizer, conversations, steps=200, learning_rate=3e-3, batch_size=2)
    seen: list[tuple[str, float | None]] = []

    def reward(environments: Any, **kwargs: Any) -> list[float | None]:
        rewards = spec.reward_funcs(environments, **kwargs)  # TRL's own: what its trainer is handed
        seen.extend(zip(kwargs["task_id"], rewards))
        return rewards

    settings = dict(
        output_dir=str(tmp_path_factory.mktemp("ors")),
        use_cpu=True,
        bf16=False,
        **no_checkpointing(),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=96,
        max_tool_calling_iterations=4,
        max_steps=2,
        learning_rate=1e-4,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=GRPOConfig(**settings),
        train_dataset=spec.train_dataset,
        environment_factory=make,
        reward_funcs=reward,
    )
    trainer.train()
    return trainer, seen


def test_grpo_trains_two_steps_on_the_ors_server(run):
    trainer, seen = run
    assert trainer.state.global_step == 2
    assert sorted({task for task, _ in seen}) == sorted(TASKS)
    assert len(seen) == 8  # 2 steps x 2 prompts x 2 generations


def test_the_env_failure_reaches_trl_as_none_never_zero(run):
    _, seen = run
    failed = [r for task, r in seen if task == "deploy-fails"]
    assert failed and all(r is None for r in failed), failed


def test_the_scored_task_reaches_trl_with_its_reward(run):
    _, seen = run
    scored = [r for task, r in seen if task == "echo" and r is not None]
    assert scored and all(r in (0.0, 1.0) for r in scored), seen
