"""The quickstart: train a model on an example bundle with TRL's GRPOTrainer on the CPU, end to end.

``run_demo`` serves the bundle in process (``AgentEnv.local``), builds the dataset and the factory,
warm-starts a tiny model on the bundle's reference solutions (played through the environment, so the
tool answers are the real ones), measures the eval split's reward, runs GRPO steps, and measures it
again. Every reward it reports is an episode the server played.

The warm start leaves room on purpose: in part of its conversations (``text_answers``) the model
calls the calculator and then writes the answer as plain text instead of giving it to ``end_turn``,
a common slip of a chat model put in an agent loop. The rollout then ends with the turn
unanswered and the bundle's verifier scores it 0. GRPO, rewarded by that verifier, learns to answer
through ``end_turn``. The control arms (``reward="shuffled"`` or ``"constant"``) run the same
pipeline with that reward's link to the rollouts cut, and show no such gain.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agentenv.bundle import Bundle, load_bundle
from agentenv.errors import AgentEnvError
from agentenv.evaluate import Summary

from .controls import controlled_reward
from .demo_config import DemoConfig
from .demo_outputs import write_outputs
from .demo_progress import Progress
from .demo_report import DemoReport, EvalRow, StepRow, eval_summary, summary_file, tally
from .demo_trainer import eval_batch_size, grpo_trainer, no_checkpointing, on_cpu
from .env import AgentEnv
from .solutions import reference_conversations, tool_methods

if TYPE_CHECKING:
    from .tiny import Conversation

__all__ = [
    "DemoConfig",
    "DemoReport",
    "EvalRow",
    "StepRow",
    "default_output_dir",
    "eval_batch_size",
    "no_checkpointing",
    "reference_conversations",
    "run_demo",
    "tool_methods",
]

EXAMPLE = "arith"


def default_output_dir(config: DemoConfig) -> Path:
    """Where a run writes its files unless told: ``agentenv-demo/<time>-seed<N>[-<reward>]`` in the working folder."""
    arm = "" if config.reward == "env" else f"-{config.reward}"
    return Path("agentenv-demo") / f"{time.strftime('%Y%m%d-%H%M%S')}-seed{config.seed}{arm}"


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


def run_demo(config: DemoConfig, out: TextIO | None = None, progress: TextIO | None = None) -> DemoReport:
    """Train as ``config`` says, printing the reward table to ``out`` and progress to ``progress`` (stderr).

    Writes ``steps.csv``, ``report.json`` and ``reward.png`` into the output folder, whose path it
    prints last. Returns what was measured.
    """
    out = out or sys.stdout
    progress = progress or sys.stderr
    began, cpu = time.monotonic(), time.process_time()
    seconds: dict[str, float] = {}
    summaries: dict[str, Summary] = {}
    bundle_path = config.bundle or default_bundle()
    bundle = load_bundle(bundle_path)
    if "train" not in bundle.splits:
        raise AgentEnvError(f"bundle {bundle.name!r} has no train split; pass another: agentenv demo --bundle PATH")
    eval_split = next((s for s in ("eval", "validation", "test") if s in bundle.splits and bundle.split(s)), None)
    folder = config.output_dir or default_output_dir(config)
    print(f"playing {bundle.name} ({bundle_path}) in this process ...", file=out, flush=True)
    env = AgentEnv.local(bundle_path, max_concurrent_envs=config.max_concurrent_envs)
    try:
        with warnings.catch_warnings(), _reproducible(config):
            # TRL 1.16 reads a transformers alias that is deprecated: not the user's to fix, so not theirs to read
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            report = _train(config, env, bundle, eval_split, folder, out, progress, seconds, summaries)
    finally:
        env.close()
    seconds["total"] = time.monotonic() - began
    seconds["cpu"] = time.process_time() - cpu  # near the wall time on a quiet machine; far below it on a busy one
    report.seconds = {k: round(v, 1) for k, v in seconds.items()}
    report.output_dir = str(folder)
    written = write_outputs(report, folder, summaries)
    print("\n" + report.table(), file=out)
    print(
        f"\n{report.episodes_played} episodes played; {seconds['total']:.0f} s in all (warm start "
        f"{seconds.get('warm start', 0):.0f} s, GRPO {seconds.get('grpo', 0):.0f} s, eval {seconds.get('eval', 0):.0f} "
        f"s), {seconds['cpu']:.0f} s of CPU",
        file=out,
    )
    before, after = report.eval_reward("before GRPO"), report.eval_reward("after GRPO")
    if before is not None and after is not None:
        print(f"eval reward {before:.3f} -> {after:.3f} ({after - before:+.3f}), GRPO on {_source(config)}", file=out)
    if not any(p.suffix == ".png" for p in written):
        print("no picture: matplotlib is not installed (pip install 'agentenv-trl[demo]')", file=out)
    print(f"wrote {', '.join(p.name for p in written)} to {folder}", file=out, flush=True)
    if len(summaries) == 2:
        before_file, after_file = (folder / summary_file(when) for when in summaries)
        print(f"per task: agentenv eval --compare {before_file} {after_file}", file=out, flush=True)
    return report


def _source(config: DemoConfig) -> str:
    return {
        "env": "the env's reward",
        "shuffled": "the env's reward shuffled within each group (control)",
        "constant": "a constant reward (control)",
    }[config.reward]


@contextlib.contextmanager
def _reproducible(config: DemoConfig) -> Any:
    """A fixed torch thread count and deterministic kernels for the run; the process's settings come back after."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    # the tiny model's matrices are too small to split: a second thread only spins, and the count changes the sums
    torch.set_num_threads(config.threads or (threads if config.model else 1))
    if on_cpu(config):  # (on a GPU, cuBLAS would need CUBLAS_WORKSPACE_CONFIG set before the process started)
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)


def _train(
    config: DemoConfig,
    env: AgentEnv,
    bundle: Bundle,
    eval_split: str | None,
    folder: Path,
    out: TextIO,
    progress: TextIO,
    seconds: dict[str, float],
    summaries: dict[str, Summary],
) -> DemoReport:
    """Build the model, warm-start it, and measure the eval split before and after the GRPO steps, as ``run_demo``
    says; the phases' times go into ``seconds``, each eval's summary into ``summaries``."""
    import torch

    torch.manual_seed(config.seed)
    started = time.monotonic()
    train = env.dataset
    factory = env.factory
    conversations = reference_conversations(env, bundle, "train")
    texts = reference_conversations(env, bundle, "train", text_answer=True) if config.text_answers else []
    env.results.clear()  # the reference plays are not part of training
    print(
        f"{len(train)} train tasks, {len(conversations)} reference solutions, eval split: {eval_split or 'none'}",
        file=out,
        flush=True,
    )
    model, tokenizer, model_name = _model(config, conversations)
    seconds["setup"] = time.monotonic() - started
    print(f"model: {model_name}", file=out, flush=True)

    steps = config.warm_steps()
    losses = _warm_start(config, model, tokenizer, conversations, texts, steps, out, progress, seconds)

    eval_set = env.dataset_for(eval_split) if eval_split else None
    eval_rows = len(eval_set) if eval_set is not None else 0
    eval_batch = eval_batch_size(config, eval_rows)
    trainer, recorder = grpo_trainer(
        config, env, model, tokenizer, train, eval_set, factory, folder, eval_batch, progress
    )
    report = DemoReport(
        bundle=bundle.name,
        model=model_name,
        seed=config.seed,
        reward_source=config.reward,
        warm_start_steps=steps,
        warm_start_loss=losses[-1] if losses else None,
    )

    def evaluate(when: str) -> None:
        if eval_set is None:
            return
        begin = time.monotonic()
        env.results.clear()
        batches = -(-eval_rows * config.eval_generations // eval_batch)
        with Progress(batches, f"eval {when}", progress) as bar:
            recorder.eval_bar = bar
            with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its metrics dict
                metrics = trainer.evaluate()
            recorder.eval_bar = None
        spent = time.monotonic() - begin
        results = list(env.results)
        run = {"bundle": bundle.name, "split": eval_split, "model": model_name, "seed": config.seed, "when": when}
        summary = eval_summary(results, split=eval_split, samples=config.eval_generations, run=run)
        summaries[when] = summary
        row = _eval_row(when, summary, results, metrics, spent)
        report.evals.append(row)
        seconds["eval"] = seconds.get("eval", 0.0) + spent
        print(f"eval {when}: reward {_show(row.reward)} over {row.episodes} episodes", file=out, flush=True)

    evaluate("before GRPO")
    report.steps.extend(_grpo(config, env, trainer, recorder, seconds))
    evaluate("after GRPO")
    report.episodes_played = env.episodes_played
    return report


def _model(config: DemoConfig, conversations: list[Conversation]) -> tuple[Any, Any, str]:
    """The model, its tokenizer and the name the report gives it: ``--model``'s, or a tiny one built for
    ``conversations``."""
    import torch

    from . import tiny

    if config.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(config.model)
        model = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
        return model, tokenizer, config.model
    tokenizer = tiny.tiny_tokenizer(conversations)  # train conversations only: eval is unseen
    model = tiny.tiny_model(tokenizer, hidden_size=config.hidden_size, layers=config.layers, seed=config.seed)
    return (
        model,
        tokenizer,
        f"tiny Qwen3 ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, built here)",
    )


def _warm_start(
    config: DemoConfig,
    model: Any,
    tokenizer: Any,
    conversations: list[Conversation],
    texts: list[Any],
    steps: int,
    out: TextIO,
    progress: TextIO,
    seconds: dict[str, float],
) -> list[float]:
    """Fit ``model`` for ``steps`` steps to the reference ``conversations`` and, ``config.text_answers`` of the time,
    the ``texts`` that answer in plain text; the loss of each step (none when ``steps`` is 0)."""
    from . import tiny

    if not steps:
        return []
    started = time.monotonic()
    share = config.text_answers if texts else 0.0
    if share:
        print(
            f"warm start: {share:.0%} of the conversations answer in plain text instead of with end_turn (and score 0)",
            file=out,
            flush=True,
        )
    with Progress(steps, "warm start", progress) as bar:
        losses = tiny.warm_start(
            model,
            tokenizer,
            conversations + texts,
            weights=[1 - share] * len(conversations) + [share] * len(texts),
            steps=steps,
            learning_rate=config.warm_start_learning_rate,
            decay=True,
            seed=config.seed,
            batch_size=8,
            progress=lambda step, loss: bar.update(1, loss=f"{loss:.3f}"),
        )
    seconds["warm start"] = time.monotonic() - started
    return losses


def _eval_row(when: str, summary: Summary, results: list[Any], metrics: dict[str, Any], spent: float) -> EvalRow:
    """The report's row of the eval ``when``: ``summary`` of its ``results``, with what TRL measured (``metrics``)."""
    return EvalRow(
        when=when,
        episodes=summary.overall.samples,
        scored=summary.overall.scored,
        failed=summary.overall.failed,
        reward=summary.overall.mean_reward,
        reward_std=tally(results)["reward_std"],
        pass_at_1=summary.overall.pass_at.get("1"),
        trl_reward=metrics.get("eval_reward"),
        tool_calls=metrics.get("eval_tools/call_frequency"),
        seconds=round(spent, 2),
    )


def _grpo(config: DemoConfig, env: AgentEnv, trainer: Any, recorder: Any, seconds: dict[str, float]) -> list[StepRow]:
    """Run the GRPO steps on the reward ``config`` names; a row for each step, with what TRL logged of it."""
    begin = time.monotonic()
    env.results.clear()
    columns = {cls.__name__ for cls in env.environments.values()}
    with controlled_reward(trainer, columns, config.reward, seed=config.seed):
        trainer.train()
    seconds["grpo"] = time.monotonic() - begin
    logged = {h["step"]: h for h in trainer.state.log_history if "reward" in h and "step" in h}
    rows = []
    for step, results, spent in recorder.per_step:
        entry = logged.get(step, {})
        rows.append(
            StepRow(
                step=step,
                **tally(results),
                trl_reward=entry.get("reward"),  # TRL's mean over the rollouts it could score
                tool_calls=entry.get("tools/call_frequency"),
                seconds=round(spent, 2),
            )
        )
    return rows


def _show(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
