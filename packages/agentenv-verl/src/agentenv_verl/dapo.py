"""DAPO on an agentenv server: ``agentenv verl dapo URL OUT`` writes the rows, a reward module and a verl config.

``write_dapo`` writes, under OUT and as one set: the single-turn rows and agent_loop.yaml (``writer.write`` with
``single_turn=True``), ``agentenv_reward.py`` (``compute_score`` bound to the server) and ``dapo.yaml``, a
config that composes with verl 0.9's ``ppo_trainer`` config::

    python -m verl.trainer.main_ppo --config-path OUT --config-name dapo actor_rollout_ref.model.path=MODEL ...

``OverlongPenalty`` is DAPO's overlong penalty as verl's ``dapo`` reward manager computes it, for the
single-turn loop (a loop that scores its own samples skips verl's reward manager). Importing this module
does not import verl.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

from agentenv.errors import AgentEnvError

from .errors import LoopConfigError
from .writer import Written, write

__all__ = ["CONFIG_FILE", "REWARD_FILE", "Dapo", "OverlongPenalty", "write_dapo"]

CONFIG_FILE: Final[str] = "dapo.yaml"
REWARD_FILE: Final[str] = "agentenv_reward.py"


@dataclass(frozen=True)
class OverlongPenalty:
    """DAPO's overlong penalty: a response longer than ``max_length - buffer`` tokens loses
    ``(length - (max_length - buffer)) / buffer * factor`` of reward (never gains). ``log``: report
    ``overlong_reward`` and ``overlong`` in the extra info, as verl's manager does."""

    buffer: int
    max_length: int
    factor: float
    log: bool

    @classmethod
    def from_config(cls, config: Any) -> OverlongPenalty | None:
        """The penalty verl's reward manager would apply under ``config`` (verl's trainer config); None when
        ``reward.reward_manager.name`` is not ``dapo`` or ``reward.reward_kwargs.overlong_buffer_cfg`` is off."""
        reward = config.get("reward") or {}
        if (reward.get("reward_manager") or {}).get("name") != "dapo":
            return None
        kwargs = reward.get("reward_kwargs") or {}
        buffer = kwargs.get("overlong_buffer_cfg")
        if buffer is None or not buffer.get("enable"):
            return None
        max_length = kwargs.get("max_resp_len")
        length = buffer.get("len")
        if max_length is None:
            raise LoopConfigError(
                "reward.reward_kwargs.overlong_buffer_cfg.enable is true but reward.reward_kwargs.max_resp_len is not "
                "set: set it to data.max_response_length"
            )
        if length is None or int(length) <= 0 or int(max_length) < int(length):
            raise LoopConfigError(
                f"reward.reward_kwargs.overlong_buffer_cfg.len={length!r}: give a positive length no larger than "
                f"reward.reward_kwargs.max_resp_len={max_length!r} (or set overlong_buffer_cfg.enable=false)"
            )
        return cls(int(length), int(max_length), float(buffer.get("penalty_factor", 1.0)), bool(buffer.get("log")))

    def __call__(self, response_length: int) -> float:
        """The penalty (0 or negative) of a response of ``response_length`` tokens."""
        exceed = int(response_length) - (self.max_length - self.buffer)
        return min(-exceed / self.buffer * self.factor, 0.0)

    def info(self, penalty: float) -> dict[str, Any]:
        """The extra-info keys verl's manager adds for ``penalty`` (none unless ``log``)."""
        return {"overlong_reward": float(penalty), "overlong": bool(penalty < 0)} if self.log else {}


@dataclass(frozen=True)
class Dapo:
    """What ``write_dapo`` wrote: the rows and loop config (``written``), the reward module and the config."""

    written: Written
    reward_module: Path
    config: Path


def write_dapo(
    url: str,
    out: str | os.PathLike[str],
    *,
    splits: Sequence[str] | None = None,
    token_var: str | None = None,
    reset_timeout: float = 300.0,
    attempts: int = 3,
    max_response_length: int = 4096,
    overlong_buffer: int = 1024,
    penalty_factor: float = 1.0,
    clip_ratio_high: float = 0.28,
    rollout_n: int = 16,
    tokenizer: Any = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    max_prompt_length: int | None = None,
    progress: TextIO | None = None,
) -> Dapo:
    """Write a DAPO run on the server at ``url`` under ``out``: rows, agent_loop.yaml, reward module, dapo.yaml.

    ``max_response_length`` (``data.max_response_length``, and the penalty's ``max_resp_len``),
    ``overlong_buffer`` and ``penalty_factor`` set DAPO's overlong penalty; ``clip_ratio_high`` its
    asymmetric clip; ``rollout_n`` the group size. ``splits``, ``token_var``, ``reset_timeout``,
    ``attempts``, ``tokenizer``, ``chat_template_kwargs``, ``max_prompt_length`` and ``progress`` are
    the writer's (``writer.write``); ``reset_timeout`` and ``attempts`` are also the reward function's.
    """
    if not 0 < int(overlong_buffer) <= int(max_response_length):
        raise AgentEnvError(
            f"--overlong-buffer {overlong_buffer}: give a positive number of tokens no larger than "
            f"--max-response-length {max_response_length}"
        )
    if int(rollout_n) < 2:
        raise AgentEnvError(f"--rollout-n {rollout_n}: GRPO needs a group of 2 or more responses per prompt")
    folder = Path(out).resolve()
    module = folder / REWARD_FILE
    config = folder / CONFIG_FILE
    settings = {
        "max_response_length": int(max_response_length),
        "overlong_buffer": int(overlong_buffer),
        "penalty_factor": float(penalty_factor),
        "clip_ratio_high": float(clip_ratio_high),
        "rollout_n": int(rollout_n),
    }

    def dapo_files(written: Written) -> dict[str, str]:  # written with the rows, as one set
        return {
            REWARD_FILE: _reward_module(written, url, token_var, reset_timeout, attempts),
            CONFIG_FILE: _config(written, module, settings, chat_template_kwargs or {}),
        }

    written = write(
        url,
        out,
        splits=splits,
        single_turn=True,
        token_var=token_var,
        reset_timeout=reset_timeout,
        attempts=attempts,
        tokenizer=tokenizer,
        chat_template_kwargs=chat_template_kwargs,
        max_prompt_length=max_prompt_length,
        progress=progress,
        also=dapo_files,
    )
    return Dapo(written=written, reward_module=module, config=config)


def _reward_module(written: Written, url: str, token_var: str | None, reset_timeout: float, attempts: int) -> str:
    return (
        f'"""The reward function of a DAPO run on {written.data_source} (written by: agentenv verl dapo).\n\n'
        "verl loads it from reward.custom_reward_function.path. It plays each response as its task's reply on the\n"
        "agentenv server below and returns the task's verifiers' score; a sample without a verdict raises\n"
        "agentenv_verl.NoVerdictError and is kept out of training (never scored as 0).\n"
        '"""\n\n'
        "from agentenv_verl.reward import make_compute_score\n\n"
        f"compute_score = make_compute_score(\n    url={url!r},\n    token_var={token_var!r},\n"
        f"    reset_timeout={float(reset_timeout)!r},\n    attempts={int(attempts)!r},\n)\n"
    )


def _path(path: Path) -> str:
    return json.dumps(str(path))  # a quoted YAML string, whatever the path holds


def _config(written: Written, module: Path, s: dict[str, Any], template_kwargs: Mapping[str, Any]) -> str:
    train = written.files.get("train")
    val = next((written.files[n] for n in ("eval", "validation", "test") if written.rows.get(n)), None)
    data = [f"  train_files: {_path(train)}"] if train is not None else ["  # train_files: OUT/train.parquet"]
    data += [f"  val_files: {_path(val)}"] if val is not None else []
    if written.longest:
        data.append(f"  max_prompt_length: {written.longest[0].tokens}  # the longest prompt, counted by --tokenizer")
    if template_kwargs:
        data.append("  apply_chat_template_kwargs:")
        data += [f"    {k}: {json.dumps(v)}" for k, v in template_kwargs.items()]
    lines = [
        f"# DAPO on {written.data_source}, written by agentenv-verl (agentenv verl dapo). Run it with verl 0.9:",
        f"#   python -m verl.trainer.main_ppo --config-path {written.out.resolve()} --config-name dapo \\",
        "#       actor_rollout_ref.model.path=MODEL trainer.n_gpus_per_node=N ...",
        "# It composes verl's own ppo_trainer config and changes only the keys below.",
        "hydra:",
        "  searchpath:",
        "    - pkg://verl.trainer.config",
        "defaults:",
        "  - ppo_trainer",
        "  - _self_",
        "data:",
        *data,
        f"  max_response_length: {s['max_response_length']}",
        "algorithm:",
        "  adv_estimator: grpo",
        "  use_kl_in_reward: false",
        "  # dynamic sampling: groups whose samples all score alike are dropped and refilled. verl's V1 trainer",
        "  # (trainer.use_v1, the default) only: the legacy trainer ignores it.",
        "  filter_groups:",
        "    enable: true",
        "    metric: acc",
        "actor_rollout_ref:",
        "  actor:",
        "    clip_ratio_low: 0.2",
        f"    clip_ratio_high: {s['clip_ratio_high']}",
        "    # token-mean: a sample kept out without a verdict (masked under the legacy trainer) dilutes no one",
        "    loss_agg_mode: token-mean",
        "    use_kl_loss: false",
        "  rollout:",
        f"    n: {s['rollout_n']}",
        "    agent:",
        "      # the single-turn loop scores each sample itself: one without a verdict is dropped (V1) or",
        "      # masked (legacy trainer), never trained on as a 0; it applies the overlong penalty below as",
        "      # verl's dapo reward manager would (which does not run on samples a loop scored)",
        "      default_agent_loop: agentenv_single",
        f"      agent_loop_config_path: {_path(written.agent_loop_config.resolve())}",
        "trainer:",
        "  v1:",
        "    sampler:",
        "      # a group with no sample left (all kept out) is replaced by a fresh prompt",
        "      sync_refill_failed_groups: true",
        "reward:",
        "  reward_manager:",
        "    name: dapo",
        "  reward_kwargs:",
        "    overlong_buffer_cfg:",
        "      enable: true",
        f"      len: {s['overlong_buffer']}",
        f"      penalty_factor: {s['penalty_factor']}",
        "      log: false",
        "    max_resp_len: ${data.max_response_length}",
        "  custom_reward_function:",
        f"    path: {_path(module)}",
        "    name: compute_score",
    ]
    return "\n".join(lines) + "\n"
