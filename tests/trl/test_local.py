"""AgentEnv.local(): the episodes a trainer leaves running are torn down at close, exit, crash and SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentenv.errors import AgentEnvError
from agentenv_trl import AgentEnv

from tests.support.trl import FAKE

TRAINER = r"""
import sys, time
from agentenv_trl import AgentEnv

env = AgentEnv.local(sys.argv[1])
row = next(r for r in env.dataset if r["task_id"] == "echo")
classes = env.environments
if sys.argv[2] == "train":  # a real GRPOTrainer, stopped mid-training
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from agentenv_trl.demo import no_checkpointing
    from agentenv_trl.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer(texts=[row["prompt"][-1]["content"]])
    args = GRPOConfig(output_dir=sys.argv[3], use_cpu=True, bf16=False, per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=512, max_steps=1000, report_to="none",
                      save_strategy="no", disable_tqdm=True, **no_checkpointing())
    trainer = GRPOTrainer(model=tiny_model(tokenizer, hidden_size=32, layers=1), processing_class=tokenizer,
                          args=args, train_dataset=Dataset.from_list([row] * 4), environment_factory=env.factory)
    print("training", flush=True)
    trainer.train()
instance = classes[row["environment"]]()
instance.reset(**row)
instance.echo(text="ping")  # deployed; the episode stays open
print("playing", flush=True)
if sys.argv[2] == "crash":
    raise RuntimeError("the trainer crashed")
if sys.argv[2] == "wait":
    time.sleep(600)
"""


def start(mode: str, tmp_path: Path) -> subprocess.Popen[str]:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"}
    return subprocess.Popen(
        [sys.executable, str(script), str(FAKE), mode, str(tmp_path / "out")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdout is not None
    for got in process.stdout:
        if got.strip() == line:
            return
    _, err = process.communicate()
    raise AssertionError(f"the trainer exited ({process.returncode}) before {line!r}:\n{err[-3000:]}")


def test_close_tears_down_the_episodes_left_running(ledger: Any) -> None:
    env = AgentEnv.local(FAKE)
    row = next(r for r in env.dataset if r["task_id"] == "echo")
    instance = env.environments["ok"]()
    instance.reset(**row)
    instance.echo(text="ping")
    assert ledger.count("deploy") > ledger.count("teardown")  # one episode open
    env.close()
    assert ledger.count("teardown") == ledger.count("deploy")


def test_local_plays_in_process_counts_its_episodes_and_refuses_an_unknown_option_at_once(ledger: Any) -> None:
    with pytest.raises(AgentEnvError, match=r"max_concurent_envs.*build_app's"):
        AgentEnv.local(FAKE, max_concurent_envs=4)  # misspelt: refused before anything is deployed
    assert ledger.count("deploy") == 0
    with AgentEnv.local(FAKE) as env:
        row = next(r for r in env.dataset if r["task_id"] == "echo")
        classes = env.environments  # built by one probe episode per toolset, in this process
        before = env.episodes_played
        assert before == len(classes)
        instance = classes["ok"]()
        instance.reset(**row)
        instance.echo(text="ping")
        instance.end_turn(reply="ping")
        assert instance.get_reward() == 1.0
        assert env.url.startswith("local:") and env.episodes_played == before + 1


def test_close_ends_the_episodes_on_a_remote_server(serve: Any, ledger: Any) -> None:
    server = serve(FAKE)
    env = AgentEnv(server.url)
    row = next(r for r in env.dataset if r["task_id"] == "echo")
    instance = env.environments["ok"]()
    instance.reset(**row)
    instance.echo(text="ping")
    env.close()
    assert ledger.wait_for("teardown", ledger.count("deploy")) == ledger.count("deploy")


@pytest.mark.parametrize(("mode", "returncode"), [("exit", 0), ("crash", 1)])
def test_the_trainer_exiting_tears_down_the_episodes_it_left(
    mode: str, returncode: int, tmp_path: Path, ledger: Any
) -> None:
    process = start(mode, tmp_path)
    wait_for_line(process, "playing")
    _, err = process.communicate(timeout=120)
    assert process.returncode == returncode, err[-3000:]
    assert ledger.count("deploy") > 0
    assert ledger.count("teardown") == ledger.count("deploy")


def test_sigterm_to_a_training_process_tears_down_its_episodes_and_kills_it(tmp_path: Path, ledger: Any) -> None:
    process = start("train", tmp_path)
    wait_for_line(process, "training")
    started = ledger.count("deploy")
    ledger.wait_for("deploy", started + 2, timeout=120)  # a batch of rollouts has reset its episodes
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGTERM, err[-3000:]  # it still dies of the signal
    assert ledger.count("deploy") >= started + 2
    assert ledger.count("teardown") == ledger.count("deploy")
