"""Helpers for the TRL tier: scripted conversations, a GRPOTrainer with small CPU settings, a step recorder."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.support.paths import ARITH, FAKE, INBOX

__all__ = ["ARITH", "FAKE", "INBOX"]  # the tier's tests take the bundles from here with the rest


def say(tool: str, **args: Any) -> dict[str, Any]:
    """An assistant message calling ``tool`` (TRL's form)."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": tool, "arguments": args}}],
    }


def answer(tool: str, text: str) -> dict[str, Any]:
    """The tool's answer, as TRL appends it."""
    return {"role": "tool", "name": tool, "content": text}


def script(env: Any, row: dict[str, Any], turns: Sequence[Sequence[tuple[str, dict[str, Any]]]]) -> Any:
    """Play ``turns`` (each a list of ``(tool, args)``) on a fresh instance for ``row``; the conversation TRL would log.

    Tool answers are the server's own. Returns ``(messages, tools)`` for ``warm_start``.
    """
    from agentenv_trl.demo import tool_methods

    classes = env.environments
    instance = classes[row.get("environment") or next(iter(classes))]()
    instance.reset(**row)
    messages = [dict(m) for m in row["prompt"]]
    for turn in turns:
        for tool, args in turn:
            try:
                text = str(getattr(instance, tool)(**args))
            except Exception as exc:  # TRL catches whatever a tool raises (EpisodeLost, ...) and shows it so
                text = str({"error": str(exc)})
            messages += [say(tool, **args), answer(tool, text)]
    messages.append({"role": "assistant", "content": ""})
    instance.get_reward()
    return messages, tool_methods(instance)


def trainer_for(
    env: Any,
    model: Any,
    tokenizer: Any,
    dataset: Any,
    output_dir: Path,
    *,
    factory: Any = None,
    callbacks: Iterable[Any] = (),
    **config: Any,
) -> Any:
    """TRL's GRPOTrainer on the CPU with small settings (``config`` overrides GRPOConfig's fields)."""
    from agentenv_trl.demo import no_checkpointing
    from trl import GRPOConfig, GRPOTrainer

    settings = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        **no_checkpointing(),
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 96,
        "max_tool_calling_iterations": 4,
        "max_steps": 2,
        "learning_rate": 1e-4,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
        **config,
    }
    return GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=GRPOConfig(**settings),
        train_dataset=dataset,
        environment_factory=factory if factory is not None else env.factory,
        callbacks=list(callbacks),
    )


def warm_and_train(
    env: Any,
    conversations: list[Any],
    dataset: Any,
    output_dir: Path,
    *,
    warm_steps: int,
    batch_size: int,
    **config: Any,
) -> tuple[Any, list[dict[str, Any]]]:
    """A tiny model (64 wide, 2 layers) fitted to ``conversations`` first (so that it plays the tools at all), then
    trained by TRL's GRPOTrainer on ``dataset`` (``trainer_for``; ``config`` overrides its settings). Returns the
    trainer and its steps as ``Steps`` kept them."""
    from agentenv_trl.tiny import tiny_model, tiny_tokenizer, warm_start

    tokenizer = tiny_tokenizer(conversations)
    model = tiny_model(tokenizer, hidden_size=64, layers=2)
    warm_start(model, tokenizer, conversations, steps=warm_steps, learning_rate=3e-3, batch_size=batch_size)
    recorder = Steps(env)
    trainer = trainer_for(env, model, tokenizer, dataset, output_dir, callbacks=[recorder], **config)
    recorder.trainer = trainer
    trainer.train()
    return trainer, recorder.steps


class Steps:
    """A TrainerCallback (built on first use) keeping, per step, TRL's logged rollouts and agentenv's episodes."""

    def __new__(cls, env: Any) -> Any:
        from transformers import TrainerCallback

        class Recorder(TrainerCallback):
            def __init__(self) -> None:
                self.trainer: Any = None
                self.steps: list[dict[str, Any]] = []

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                logs = self.trainer._logs
                self.steps.append(
                    {
                        "step": state.global_step,
                        "rewards": {name: list(values) for name, values in logs["rewards"].items()},
                        "advantages": list(logs["advantages"]),
                        "completions": list(logs["completion"]),
                        "prompts": list(logs["prompt"]),
                        "episodes": list(env.results),
                    }
                )
                env.results.clear()

        return Recorder()


def logged(trainer: Any, key: str) -> list[Any]:
    """TRL's logged value of ``key`` at each training step."""
    return [h.get(key) for h in trainer.state.log_history if "reward" in h and "step" in h]


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def tool_calls(completion: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(name, arguments)`` of every tool call in a logged completion."""
    return [
        (c["function"]["name"], c["function"].get("arguments") or {})
        for m in completion
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]


def play_echo(factory: Any, row: dict[str, Any], results: Any) -> None:
    """In a spawned process: play the fake ``echo`` task with the unpickled factory; put (class, reward)."""
    cls = factory[row["environment"]] if isinstance(factory, dict) else factory
    env = cls()
    env.reset(**row)
    env.echo(text="ping")
    env.end_turn(reply="ping")
    results.put((cls.__name__, env.get_reward()))
