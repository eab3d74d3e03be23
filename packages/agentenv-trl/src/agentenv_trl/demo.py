"""The quickstart: train a model on an example bundle with TRL's GRPOTrainer on the CPU, end to end.

``run_demo`` serves the bundle in process (``AgentEnv.local``), builds the dataset and the factory,
warm-starts a tiny model on the bundle's reference solutions (played through the environment, so the
tool answers are the real ones) so that it emits tool calls at all, measures the eval split's reward,
runs GRPO steps, and measures it again. Every reward it reports is an episode the server played.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import math
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from agentenv.bundle import Bundle, load_bundle
from agentenv.episode import EpisodeResult
from agentenv.errors import AgentEnvError

from .env import AgentEnv, TaskEnvironment
from .tiny import Conversation

__all__ = [
    "DemoConfig",
    "DemoReport",
    "EvalRow",
    "StepRow",
    "eval_batch_size",
    "no_checkpointing",
    "reference_conversations",
    "run_demo",
    "tool_methods",
]

EXAMPLE = "arith"


@dataclass(frozen=True)
class DemoConfig:
    """What ``agentenv demo`` trains, and how long (``quick()`` is the CI configuration)."""

    bundle: Path | None = None
    model: str | None = None
    steps: int = 40
    warm_start_steps: int | None = None
    prompts_per_step: int = 8
    num_generations: int = 4
    eval_generations: int = 4
    eval_batch_size: int = 32
    max_concurrent_envs: int = 64
    max_completion_length: int = 256
    max_tool_calling_iterations: int = 10
    learning_rate: float = 5e-4
    temperature: float = 1.0
    hidden_size: int = 128
    layers: int = 4
    threads: int | None = None
    seed: int = 0
    output_dir: Path | None = None

    @classmethod
    def quick(cls, **changes: Any) -> DemoConfig:
        """A short run for CI: a smaller model, a brief warm start, two GRPO steps of 2 prompts, eval sampled twice."""
        short = {"steps": 2, "warm_start_steps": 60, "hidden_size": 64, "layers": 2}
        return cls(**{**short, "prompts_per_step": 2, "eval_generations": 2, **changes})

    def warm_steps(self) -> int:
        """Warm-start steps: 400 for the tiny model, none for a real one unless asked."""
        if self.warm_start_steps is not None:
            return self.warm_start_steps
        return 0 if self.model else 400


@dataclass(frozen=True)
class StepRow:
    """One GRPO step: the episodes the server played for it and the reward TRL logged."""

    step: int
    episodes: int
    scored: int
    failed: int
    env_reward: float | None
    trl_reward: float | None
    tool_calls: float | None


@dataclass(frozen=True)
class EvalRow:
    """The eval split's reward, measured over the episodes of one ``trainer.evaluate()``."""

    when: str
    episodes: int
    scored: int
    failed: int
    env_reward: float | None
    trl_reward: float | None


@dataclass
class DemoReport:
    """What the demo measured: per-step rewards, the eval reward before and after, and where time went."""

    bundle: str
    model: str
    warm_start_steps: int
    warm_start_loss: float | None
    steps: list[StepRow] = field(default_factory=list)
    evals: list[EvalRow] = field(default_factory=list)
    episodes_on_server: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)

    def table(self) -> str:
        """The reward table the demo prints."""
        from agentenv.cli import table

        rows = [
            (s.step, s.episodes, s.scored, s.failed, _fmt(s.env_reward), _fmt(s.trl_reward), _fmt(s.tool_calls))
            for s in self.steps
        ]
        out = table(rows, ("step", "episodes", "scored", "failed", "reward", "TRL reward", "tool calls"))
        evals = [(e.when, e.episodes, e.scored, e.failed, _fmt(e.env_reward), _fmt(e.trl_reward)) for e in self.evals]
        out += "\n\n" + table(evals, ("eval split", "episodes", "scored", "failed", "reward", "TRL reward"))
        return out


def _fmt(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


# ---------------------------------------------------------------------------------------------
# Reference conversations: the bundle's solutions, played through the environment classes
# ---------------------------------------------------------------------------------------------


def tool_methods(instance: TaskEnvironment) -> list[Callable[..., Any]]:
    """The instance's tools in the order TRL lists them (so a prompt renders as TRL renders it)."""
    return [
        getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def reference_conversations(env: AgentEnv, bundle: Bundle, split: str = "train") -> list[Conversation]:
    """Each task's reference solution as the conversation TRL would record, played on ``env``'s server.

    Tool answers and later prompts are the server's own; a solution that does not score 1.0 is left out.
    """
    classes = env.environments
    rows = {row["task_id"]: row for row in env.dataset_for(split)}
    out: list[Conversation] = []
    instances: dict[str, TaskEnvironment] = {}  # one per toolset, each playing the episodes one after another
    try:
        for task in bundle.split(split):
            if task.solution is None or task.id not in rows:
                continue
            row = rows[task.id]
            name = row.get("environment") or next(iter(classes))
            instance = instances.setdefault(name, classes[name]())
            instance.reset(**row)
            messages: list[dict[str, Any]] = [dict(m) for m in row["prompt"]]
            for turn in task.solution:
                for call in turn.calls:
                    answer = getattr(instance, call.tool)(**call.args)
                    messages += _exchange(call.tool, dict(call.args), answer)
                answer = instance.end_turn(reply=turn.reply)
                messages += _exchange("end_turn", {"reply": turn.reply}, answer)
            messages.append({"role": "assistant", "content": ""})  # the model's last word after the episode is over
            if instance.get_reward() == 1.0:
                out.append((messages, tool_methods(instance)))
    finally:
        for instance in instances.values():
            instance._close()  # their sessions are the trainer's to use
    return out


def _exchange(tool: str, args: dict[str, Any], answer: str) -> list[dict[str, Any]]:
    call = {"type": "function", "function": {"name": tool, "arguments": args}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": tool, "content": answer},
    ]


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def default_bundle() -> Path:
    """The arith example: the copy the wheel ships (``agentenv_trl/examples/arith``), else a checkout's
    ``examples/bundles/arith`` (an editable install), found from this file or the working folder."""
    here = Path(__file__).resolve().parent
    for candidate in (
        here / "examples" / EXAMPLE,
        *(p / "examples" / "bundles" / EXAMPLE for p in here.parents),
        Path.cwd() / "examples" / "bundles" / EXAMPLE,
    ):
        if (candidate / "bundle.yaml").is_file():
            return candidate
    raise AgentEnvError(f"the example bundle {EXAMPLE!r} was not found; pass one: agentenv demo --bundle PATH")


def run_demo(config: DemoConfig, out: TextIO | None = None) -> DemoReport:
    """Train as ``config`` says, printing progress and the reward table to ``out``; returns what was measured."""
    out = out or sys.stdout
    began = time.monotonic()
    seconds: dict[str, float] = {}
    bundle_path = config.bundle or default_bundle()
    bundle = load_bundle(bundle_path)
    if "train" not in bundle.splits:
        raise AgentEnvError(f"bundle {bundle.name!r} has no train split; pass another: agentenv demo --bundle PATH")
    eval_split = next((s for s in ("eval", "validation", "test") if s in bundle.splits and bundle.split(s)), None)
    print(f"serving {bundle.name} ({bundle_path}) on loopback ...", file=out, flush=True)
    env = AgentEnv.local(bundle_path, max_concurrent_envs=config.max_concurrent_envs)
    try:
        with warnings.catch_warnings():
            # TRL 1.16 reads a transformers alias that is deprecated: not the user's to fix, so not theirs to read
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            report = _train(config, env, bundle, eval_split, out, seconds)
    finally:
        env.close()
    seconds["total"] = time.monotonic() - began
    report.seconds = {k: round(v, 1) for k, v in seconds.items()}
    print("\n" + report.table(), file=out)
    print(
        f"\n{report.episodes_on_server} episodes played on the server; {seconds['total']:.0f} s in all "
        f"(warm start {seconds.get('warm start', 0):.0f} s, GRPO {seconds.get('grpo', 0):.0f} s, "
        f"eval {seconds.get('eval', 0):.0f} s)",
        file=out,
    )
    return report


def _train(
    config: DemoConfig, env: AgentEnv, bundle: Bundle, eval_split: str | None, out: TextIO, seconds: dict[str, float]
) -> DemoReport:
    import torch
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from . import tiny

    torch.manual_seed(config.seed)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    elif not config.model:
        torch.set_num_threads(1)  # the tiny model's matrices are too small to split; a second thread only spins
    started = time.monotonic()
    train = env.dataset
    factory = env.factory
    conversations = reference_conversations(env, bundle, "train")
    env.results.clear()  # the reference plays are not part of training
    print(
        f"{len(train)} train tasks, {len(conversations)} reference solutions, eval split: {eval_split or 'none'}",
        file=out,
        flush=True,
    )
    if config.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(config.model)
        model = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
        model_name = config.model
    else:
        tokenizer = tiny.tiny_tokenizer(conversations)  # train conversations only: eval is unseen
        model = tiny.tiny_model(tokenizer, hidden_size=config.hidden_size, layers=config.layers, seed=config.seed)
        model_name = f"tiny Qwen3 ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, built here)"
    seconds["setup"] = time.monotonic() - started
    print(f"model: {model_name}", file=out, flush=True)

    steps = config.warm_steps()
    losses: list[float] = []
    if steps:
        started = time.monotonic()
        with _bar(steps, "warm start") as bar:

            def show(step: int, loss: float) -> None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}")

            losses = tiny.warm_start(
                model, tokenizer, conversations, steps=steps, seed=config.seed, batch_size=8, progress=show
            )
        seconds["warm start"] = time.monotonic() - started

    output_dir = config.output_dir or Path(tempfile.mkdtemp(prefix="agentenv-demo-"))
    eval_set = env.dataset_for(eval_split) if eval_split else None
    eval_rows = len(eval_set) if eval_set is not None else 0
    args = GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        **no_checkpointing(),
        per_device_train_batch_size=config.prompts_per_step * config.num_generations,
        num_generations=config.num_generations,
        num_generations_eval=config.eval_generations,
        per_device_eval_batch_size=eval_batch_size(config, eval_rows),
        max_completion_length=config.max_completion_length,
        max_tool_calling_iterations=config.max_tool_calling_iterations,
        learning_rate=config.learning_rate,
        temperature=config.temperature,
        max_steps=config.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=config.seed,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=train,
        eval_dataset=eval_set,
        environment_factory=factory,
    )
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)  # the table at the end says it once, in columns
    report = DemoReport(
        bundle=bundle.name, model=model_name, warm_start_steps=steps, warm_start_loss=losses[-1] if losses else None
    )

    def evaluate(when: str) -> None:
        if eval_set is None:
            return
        begin = time.monotonic()
        env.results.clear()
        print(f"evaluating on {eval_split} ({when}) ...", file=out, flush=True)
        with contextlib.redirect_stdout(io.StringIO()):
            metrics = trainer.evaluate()
        results = list(env.results)
        report.evals.append(
            EvalRow(
                when=when,
                **_tally(results),
                trl_reward=metrics.get("eval_reward"),
            )
        )
        seconds["eval"] = seconds.get("eval", 0.0) + time.monotonic() - begin

    evaluate("before GRPO")
    callback = _step_table(env, config.steps)
    trainer.add_callback(callback)
    begin = time.monotonic()
    env.results.clear()
    trainer.train()
    seconds["grpo"] = time.monotonic() - begin
    logged = {h["step"]: h for h in trainer.state.log_history if "reward" in h and "step" in h}
    for step, results in callback.per_step:
        entry = logged.get(step, {})
        report.steps.append(
            StepRow(
                step=step,
                **_tally(results),
                trl_reward=entry.get("reward"),  # TRL's mean over the rollouts it could score
                tool_calls=entry.get("tools/call_frequency"),
            )
        )
    evaluate("after GRPO")
    report.episodes_on_server = env._app.state.agentenv.episodes_started
    return report


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


def _tally(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """The row fields the server's results give: episodes, scored, failed and their mean reward."""
    return {
        "episodes": len(results),
        "scored": _count(results, "scored"),
        "failed": _count(results, "failed"),
        "env_reward": _mean_reward(results),
    }


def _count(results: Sequence[EpisodeResult], outcome: str) -> int:
    return sum(1 for r in results if r.outcome == outcome)


def _mean_reward(results: Sequence[EpisodeResult]) -> float | None:
    rewards = [r.reward for r in results if r.outcome == "scored" and r.reward is not None]
    return statistics.fmean(rewards) if rewards else None


@contextlib.contextmanager
def _bar(total: int, desc: str) -> Any:
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=True, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()


def _step_table(env: AgentEnv, total: int) -> Any:
    """A TrainerCallback that collects the episodes of each GRPO step and shows a progress bar."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class StepTable(TrainerCallback):
        def __init__(self) -> None:
            self.per_step: list[tuple[int, list[EpisodeResult]]] = []
            self.bar: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.bar = tqdm(total=total, desc="GRPO", file=sys.stderr, dynamic_ncols=True)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            results = list(env.results)
            env.results.clear()
            self.per_step.append((state.global_step, results))
            reward = _mean_reward(results)
            self.bar.update(1)
            self.bar.set_postfix(reward="-" if reward is None else f"{reward:.2f}", episodes=len(results))

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.bar is not None:
                self.bar.close()

    return StepTable()
