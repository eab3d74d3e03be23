"""The demo's side of TRL: the GRPOConfig it trains with, the eval batch, the trainer, and a callback that records
each step.

Imports TRL and torch when called, not when imported.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agentenv.wire import EpisodeResult

from .demo_progress import Progress
from .demo_report import tally

if TYPE_CHECKING:
    from .demo_config import DemoConfig
    from .env import AgentEnv

__all__ = ["eval_batch_size", "grpo_config", "grpo_trainer", "no_checkpointing", "on_cpu", "step_recorder"]


def on_cpu(config: DemoConfig) -> bool:
    """The tiny model always trains on the CPU (numbers that repeat); a real one on a GPU where there is one."""
    import torch

    return not (config.model and torch.cuda.is_available())


def grpo_config(config: DemoConfig, output_dir: Path, eval_batch: int) -> Any:
    """TRL's ``GRPOConfig`` for ``config``: a log entry each step, no checkpoints, no TRL progress bar."""
    import torch
    from trl import GRPOConfig

    cpu = on_cpu(config)
    return GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=cpu,
        bf16=not cpu and torch.cuda.is_bf16_supported(),
        **no_checkpointing(),
        per_device_train_batch_size=config.prompts_per_step * config.num_generations,
        num_generations=config.num_generations,
        num_generations_eval=config.eval_generations,
        per_device_eval_batch_size=eval_batch,
        max_completion_length=config.max_completion_length,
        max_tool_calling_iterations=config.max_tool_calling_iterations,
        learning_rate=config.grpo_learning_rate(),
        temperature=config.temperature,
        max_steps=config.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=config.seed,
        disable_tqdm=True,
    )


def eval_batch_size(config: DemoConfig, rows: int) -> int:
    """Eval rollouts at once: at most ``eval_batch_size`` and the server's session limit, and a divisor of them all.

    TRL draws one environment instance (one session) per rollout of a batch from a pool it reuses, so
    evaluation holds as many sessions as its batch, however large the split: the batches play one
    after another. The batch divides the split's rollouts so that every batch is full, and TRL's eval
    reward (the mean of its batches' means) is the mean over the episodes.
    """
    generations = config.eval_generations
    rollouts = max(rows, 1) * generations
    limit = max(generations, min(config.eval_batch_size, config.max_concurrent_envs))
    return max(b for b in range(generations, limit + 1, generations) if rollouts % b == 0)


def no_checkpointing() -> dict[str, bool]:
    """GRPOConfig arguments that turn activation checkpointing off (TRL's default is on; it only slows a CPU run)."""
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    return (
        {"activation_checkpointing": False}
        if "activation_checkpointing" in fields
        else {"gradient_checkpointing": False}
    )


def step_recorder(env: AgentEnv, total: int, stream: TextIO) -> Any:
    """A TrainerCallback: each GRPO step's episodes and wall time, the GRPO progress display, the eval one's ticks."""
    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        def __init__(self) -> None:
            self.per_step: list[tuple[int, list[EpisodeResult], float]] = []
            self.bar: Progress | None = None
            self.eval_bar: Progress | None = None
            self.began = time.monotonic()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.bar = Progress(total, "GRPO", stream)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.began = time.monotonic()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            results = list(env.results)
            env.results.clear()
            self.per_step.append((state.global_step, results, time.monotonic() - self.began))
            if self.bar is not None:
                reward = tally(results)["reward"]
                self.bar.update(1, reward="-" if reward is None else f"{reward:.2f}", episodes=len(results))

        def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.eval_bar is not None:
                self.eval_bar.update(1)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.bar is not None:
                self.bar.close()

    return Recorder()


def grpo_trainer(
    config: DemoConfig,
    env: AgentEnv,
    model: Any,
    tokenizer: Any,
    train: Any,
    eval_set: Any,
    factory: Any,
    folder: Path,
    eval_batch: int,
    progress: TextIO,
) -> tuple[Any, Any]:
    """TRL's ``GRPOTrainer`` of ``model`` on ``train`` (its own progress and metrics lines removed), and the callback
    that records each of its steps."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer

    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=grpo_config(config, folder / "trl", eval_batch),
        train_dataset=train,
        eval_dataset=eval_set,
        environment_factory=factory,
    )
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)  # the table at the end says it once, in columns
    recorder = step_recorder(env, config.steps, progress)
    trainer.add_callback(recorder)
    return trainer, recorder
