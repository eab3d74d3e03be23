"""``AgentEnvSingleTurnLoop``: verl's single-turn agent loop that scores its own sample, for verl's legacy trainer.

Registered as ``agentenv_single`` in the agent_loop.yaml the writer writes. Importing this module checks the
installed verl against ``SUPPORTED`` and imports verl.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agentenv.logs import warn_once

from ._api import check_single_turn_loop
from ._version import check_verl, missing_for_agent_loop
from .dapo import OverlongPenalty
from .errors import LoopConfigError, NoVerdictError
from .reward import KEYS, make_compute_score, verdict

check_verl()  # before verl is imported: a version outside SUPPORTED fails here, naming both and the fix

try:
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
    from verl.trainer.ppo.reward import get_custom_reward_fn
except ModuleNotFoundError as exc:  # verl declares some of its agent loop's imports only in an extra
    raise missing_for_agent_loop(exc) from exc

check_single_turn_loop()  # every verl internal the loop leans on (agentenv_verl._api), before verl builds a loop

__all__ = ["AgentEnvSingleTurnLoop"]

log = logging.getLogger("agentenv_verl")

_functions: dict[str, Callable[..., Any]] = {}  # reward function by its settings: loaded once per worker process
_functions_lock = threading.Lock()


class AgentEnvSingleTurnLoop(SingleTurnAgentLoop):
    """verl's ``SingleTurnAgentLoop`` that scores its sample and sets ``reward_score`` (verl then runs no reward step).

    The sample is scored by ``reward.custom_reward_function`` as verl would load it, or, when none is set,
    by ``agentenv_verl.reward.compute_score`` on the loop's ``url`` (agent_loop.yaml: ``url``,
    ``token_var``, ``reset_timeout``, ``attempts``). The response is decoded as verl's reward managers
    decode it (special tokens skipped) and handed over with the row's ``data_source``, ground truth and
    ``extra_info`` (plus ``num_turns``, as verl's naive manager adds).

    ``extra_fields["reward_extra_info"]`` has the keys ``score``, ``passed``, ``error``, ``acc`` on every
    sample (verl's legacy trainer reads the keys of a batch's first sample from every other), plus
    ``overlong_reward`` and ``overlong`` when DAPO's penalty logs them.

    A sample without a verdict (``NoVerdictError``): under verl's legacy trainer (``trainer.use_v1=false``)
    its ``response_mask`` is zeroed (no gradient, no tokens in the loss), its reward is 0 and its ``error``
    1.0; its 0 still counts in its group's GRPO mean and std. Under the V1 trainer the error is raised: the
    sample's session fails and its prompt group is recorded as failed, as with the reward function.

    With ``reward.reward_manager.name=dapo`` the loop applies DAPO's overlong penalty as verl's manager
    would (``reward.reward_kwargs.overlong_buffer_cfg``, ``max_resp_len``): verl's manager does not run on
    samples a loop scored.

    The verl internals it leans on (``agentenv_verl._api.SINGLE_TURN_LOOP``, checked when this module loads):
    ``SingleTurnAgentLoop.run``; ``AgentLoopOutput.response_ids``,
    ``response_mask``, ``reward_score``, ``num_turns`` and ``extra_fields``; ``get_custom_reward_fn``.
    """

    def __init__(
        self,
        *args: Any,
        url: str | None = None,
        token_var: str | None = None,
        reset_timeout: float = 300.0,
        attempts: int = 3,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.score_fn = _reward_function(self.config, url, token_var, reset_timeout, attempts)
        self.penalty = OverlongPenalty.from_config(self.config)
        self.use_v1 = bool(OmegaConf.select(self.config, "trainer.use_v1", default=True))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Generate the response (verl's single turn), then score it; see the class."""
        output = await super().run(sampling_params, **kwargs)
        text = self.tokenizer.decode(output.response_ids, skip_special_tokens=True)
        extra = dict(kwargs.get("extra_info") or {})
        extra.update(output.extra_fields)
        extra["num_turns"] = output.num_turns
        reward_model = kwargs.get("reward_model") or {}
        call = functools.partial(
            self.score_fn,
            data_source=kwargs.get("data_source"),
            solution_str=text,
            ground_truth=reward_model.get("ground_truth"),
            extra_info=extra,
        )
        try:
            if inspect.iscoroutinefunction(self.score_fn):
                result = await call()
            else:  # as verl's reward managers run a plain function: in a thread, the event loop free
                result = await asyncio.get_running_loop().run_in_executor(None, call)
        except NoVerdictError:
            if self.use_v1:
                raise  # V1 records the prompt's group as failed; its other samples make the statistics
            return self._masked(output)
        score, info = self._read(result)
        penalty = self.penalty(len(output.response_ids)) if self.penalty is not None else 0.0
        if self.penalty is not None:
            info.update(self.penalty.info(penalty))
        output.reward_score = score + penalty
        output.extra_fields["reward_extra_info"] = info
        return output

    def _read(self, result: Any) -> tuple[float, dict[str, Any]]:
        """The score and the extra info of a reward function's result, with exactly ``KEYS``."""
        if not isinstance(result, Mapping):
            info: dict[str, Any] = verdict(float(result))
            return info["score"], info
        if "score" not in result:
            raise LoopConfigError(
                f"the reward function returned a dict without 'score' (keys: {', '.join(map(str, result))}); verl's "
                "dict form needs 'score'"
            )
        info = verdict(float(result["score"]))
        info.update({key: float(result[key]) for key in KEYS if key in result})
        dropped = sorted(str(k) for k in result if k not in KEYS)
        if dropped:
            warn_once(
                log,
                f"dropped-keys:{','.join(dropped)}",
                "the reward function returned keys %s besides %s; AgentEnvSingleTurnLoop keeps only %s, so every "
                "sample (a masked one too) has the same keys, as verl's legacy trainer needs",
                ", ".join(dropped),
                ", ".join(KEYS),
                ", ".join(KEYS),
            )
        return info["score"], info

    def _masked(self, output: AgentLoopOutput) -> AgentLoopOutput:
        """A sample without a verdict under the legacy trainer: out of the loss, reward 0, ``error`` 1.0."""
        output.response_mask = [0] * len(output.response_mask)
        output.reward_score = 0.0
        info: dict[str, Any] = {**verdict(0.0), "error": 1.0}
        if self.penalty is not None:
            info.update(self.penalty.info(0.0))
        output.extra_fields["reward_extra_info"] = info
        return output


def _reward_function(
    config: Any, url: str | None, token_var: str | None, reset_timeout: float, attempts: int
) -> Callable[..., Any]:
    """``reward.custom_reward_function`` as verl loads it, else ``compute_score`` on ``url``; once per process
    (verl makes a loop per sample, and loads a reward module given by file path anew each time)."""
    custom = OmegaConf.select(config, "reward.custom_reward_function", default=None)
    if custom is not None and custom.get("path"):
        kwargs = custom.get("reward_kwargs") or {}
        kwargs = OmegaConf.to_container(kwargs, resolve=True) if OmegaConf.is_config(kwargs) else dict(kwargs)
        key = json.dumps([str(custom.get("path")), str(custom.get("name")), kwargs], sort_keys=True, default=str)
        with _functions_lock:
            if key not in _functions:
                _functions[key] = get_custom_reward_fn(config)
            return _functions[key]
    if not url:
        raise LoopConfigError(
            "AgentEnvSingleTurnLoop has no reward function: set reward.custom_reward_function.path (e.g. "
            "pkg://agentenv_verl.reward with reward_kwargs.url), or give the loop a url in agent_loop.yaml (python -m "
            "agentenv_verl URL OUT --single-turn writes it)"
        )
    key = json.dumps(["url", url, token_var, reset_timeout, attempts])
    with _functions_lock:
        if key not in _functions:
            _functions[key] = make_compute_score(
                url=url, token_var=token_var, reset_timeout=reset_timeout, attempts=attempts
            )
        return _functions[key]
