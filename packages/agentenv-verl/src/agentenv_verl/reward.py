"""verl's reward function over agentenv servers: ``compute_score``, loadable as ``pkg://agentenv_verl.reward``.

```yaml
reward:
  custom_reward_function:
    path: pkg://agentenv_verl.reward
    name: compute_score
    reward_kwargs: {servers: {agentenv/inbox: http://env-host:8000}, token_var: AGENTENV_TOKEN}
```

Each row names its bundle (``data_source``) and its task (``extra_info.task_id``), so one run mixes bundles
and servers. The response is played as the task's one reply through the session layer (``agentenv.client.rollout``:
the task's episode is started, its turn ended with the response, its verifiers score it; an episode the env
loses is replayed on a new one) and scored by the task's verifiers. A sample without a verdict raises
``NoVerdictError``, never a 0. Importing this module does not import verl.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from agentenv.client import Shared, pooled, run_sync
from agentenv.errors import EpisodeLost, RolloutFailed
from agentenv.wire import Started

from .errors import NoVerdictError, RewardConfigError
from .keptout import COUNTER

__all__ = [
    "END_OF_TURN",
    "KEYS",
    "NoVerdictError",
    "RewardConfigError",
    "compute_score",
    "make_compute_score",
    "make_reward_fn",
    "strip_end_of_turn",
    "verdict",
]

#: The keys of every verdict, on every call: verl's legacy trainer takes a batch's extra-info keys from its
#: first sample and reads them from every other one.
KEYS: Final[tuple[str, ...]] = ("score", "passed", "error", "acc")

#: End-of-turn and end-of-text tokens of common chat templates, dropped from the end of a response.
END_OF_TURN: Final[tuple[str, ...]] = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|return|>",
    "<end_of_turn>",
    "<eos>",
    "</s>",
    "<｜end▁of▁sentence｜>",
)
_TRAILING = re.compile(r"(?:\s*(?:" + "|".join(re.escape(t) for t in END_OF_TURN) + r"))+\s*\Z")

_LOOP = "agentenv_verl's single-turn loop (actor_rollout_ref.rollout.agent.default_agent_loop=agentenv_single)"


def strip_end_of_turn(text: str) -> str:
    """``text`` without the end-of-turn tokens at its end (``<|im_end|>`` and the like) and surrounding space."""
    return _TRAILING.sub("", text).strip()


def verdict(score: float) -> dict[str, float]:
    """A scored sample in verl's dict form: ``score``; ``acc``, the score again (verl's validation core metric
    and DAPO's group filter read it); ``passed``, 1.0 at full marks; ``error`` 0.0."""
    score = float(score)
    return {"score": score, "passed": 1.0 if score >= 1.0 else 0.0, "error": 0.0, "acc": score}


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    *,
    servers: Mapping[str, str] | None = None,
    url: str | None = None,
    token_var: str | None = None,
    reset_timeout: float = 300.0,
    attempts: int = 3,
    reward_router_address: Any = None,
    reward_model_tokenizer: Any = None,
) -> dict[str, float]:
    """Score ``solution_str`` with the verifiers of the row's task on its agentenv server.

    The server is ``servers[data_source]`` (one run may mix bundles and servers), else ``url``;
    ``token_var`` names the variable holding the servers' token. The task is ``extra_info["task_id"]``
    (the rows ``verl_rows`` writes carry it). End-of-turn tokens are dropped from the end of the response;
    the episode is played up to ``attempts`` times while the env loses it (no replay starts after
    ``reset_timeout`` seconds; a restarting server is waited out as long). ``ground_truth`` is not read:
    the verifiers are the server's. ``reward_router_address`` and ``reward_model_tokenizer`` (which verl
    may pass) are accepted and not used.

    Returns ``{"score", "passed", "error", "acc"}`` (see ``verdict``). Raises ``NoVerdictError`` when the
    episode has no verdict (an env or server failure, or verifiers that gave none): the sample is kept
    out, never scored as 0. Raises ``RewardConfigError`` for a data source without a server, a row
    without a task id or a multi-turn task, and the session layer's configuration errors (a refused
    token, an unknown task) as they are.
    """
    settings = _Settings.of(servers, url, token_var, reset_timeout, attempts)
    return run_sync(_judge(settings, data_source, solution_str, extra_info))


def make_compute_score(
    url: str | None = None,
    *,
    servers: Mapping[str, str] | None = None,
    token_var: str | None = None,
    reset_timeout: float = 300.0,
    attempts: int = 3,
) -> Callable[..., dict[str, float]]:
    """``compute_score`` bound to a server (``url``) or servers by data source, for a reward module of your own.

    ``compute_score = make_compute_score(url="http://env-host:8000")`` in ``my_reward.py`` and
    ``reward.custom_reward_function.path=my_reward.py``; verl's ``reward_kwargs`` still override what is
    bound here.
    """
    _Settings.of(servers, url, token_var, reset_timeout, attempts)  # refuse bad settings now, not per sample
    return functools.partial(
        compute_score, servers=servers, url=url, token_var=token_var, reset_timeout=reset_timeout, attempts=attempts
    )


def make_reward_fn(
    url: str | None = None,
    *,
    servers: Mapping[str, str] | None = None,
    token_var: str | None = None,
    reset_timeout: float = 300.0,
    attempts: int = 3,
    concurrency: int = 64,
) -> Callable[..., list[dict[str, float] | None]]:
    """A batch reward function for a loop of your own, with verl's batched signature.

    ``reward_fn(data_sources, solution_strs, ground_truths=None, extra_infos=None)`` scores the samples
    ``concurrency`` at a time and returns, in order, each sample's verdict (as ``compute_score``), or
    None for a sample without a verdict (leave it out of the loss; do not train on it as 0). Settings
    as ``compute_score``; configuration errors are raised.
    """
    settings = _Settings.of(servers, url, token_var, reset_timeout, attempts)
    if int(concurrency) < 1:
        raise RewardConfigError(f"concurrency={concurrency!r}: give 1 or more")

    def reward_fn(
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any] | None = None,
        extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, float] | None]:
        extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
        if not len(data_sources) == len(solution_strs) == len(extras):
            raise RewardConfigError(
                f"reward_fn got {len(data_sources)} data_sources, {len(solution_strs)} solution_strs and "
                f"{len(extras)} extra_infos; give one of each per sample"
            )
        gate = asyncio.Semaphore(int(concurrency))

        async def one(source: str, text: str, extra: Mapping[str, Any] | None) -> dict[str, float] | None:
            async with gate:
                try:
                    return await _judge(settings, source, text, extra)
                except NoVerdictError:
                    return None

        async def every() -> list[dict[str, float] | None]:
            return list(await asyncio.gather(*(one(*sample) for sample in zip(data_sources, solution_strs, extras))))

        return run_sync(every())

    return reward_fn


# ---------------------------------------------------------------------------------------------
# the one way a response is judged
# ---------------------------------------------------------------------------------------------


class _Settings:
    """Where each data source is served and how patiently; checked once."""

    def __init__(
        self, servers: Mapping[str, str], url: str | None, token_var: str | None, reset_timeout: float, attempts: int
    ) -> None:
        self.servers, self.url, self.token_var = servers, url, token_var
        self.reset_timeout, self.attempts = reset_timeout, attempts

    @classmethod
    def of(
        cls, servers: Any, url: Any, token_var: Any, reset_timeout: Any, attempts: Any
    ) -> _Settings:  # verl hands reward_kwargs over as DictConfig values: read them as plain ones
        if servers is not None and not isinstance(servers, Mapping):
            raise RewardConfigError(
                f"reward_kwargs.servers is a {type(servers).__name__}; give a mapping of data_source to server URL, "
                "e.g. {agentenv/inbox: http://env-host:8000}"
            )
        mapping = {str(k): str(v) for k, v in (servers or {}).items()}
        if not mapping and not url:
            raise RewardConfigError(
                "agentenv_verl.reward has no server: give reward_kwargs.servers (data_source -> URL, e.g. "
                "{agentenv/inbox: http://env-host:8000}) or reward_kwargs.url (one server for every row); on verl's "
                "command line: '+reward.custom_reward_function.reward_kwargs.url=http://env-host:8000'"
            )
        if int(attempts) < 1:
            raise RewardConfigError(f"reward_kwargs.attempts={attempts!r}: give 1 or more")
        if not float(reset_timeout) > 0:
            raise RewardConfigError(f"reward_kwargs.reset_timeout={reset_timeout!r}: give a positive number of seconds")
        return cls(
            mapping,
            str(url) if url else None,
            str(token_var) if token_var else None,
            float(reset_timeout),
            int(attempts),
        )

    def shared(self, data_source: str) -> Shared:
        url = self.servers.get(data_source) or self.url
        if url is None:
            raise RewardConfigError(
                f"no agentenv server for data_source {data_source!r}: add it to reward_kwargs.servers "
                f"({{{data_source}: http://host:port}}; it has {', '.join(sorted(self.servers))}), or give "
                "reward_kwargs.url for every data source"
            )
        return Shared(
            url, token_var=self.token_var, reset_timeout=self.reset_timeout, waits_for_server=True, client="verl"
        )


_bundles: dict[str, str] = {}  # server URL -> its bundle's name, read once per process
_bundles_lock = threading.Lock()


async def _check_source(shared: Shared, data_source: str) -> None:
    """Refuse a row of another bundle than the server's (its task ids could name other tasks there)."""
    name = _bundles.get(shared.url)
    if name is None:
        from agentenv.client import probe

        name = (await asyncio.to_thread(probe, shared)).name
        with _bundles_lock:
            _bundles[shared.url] = name
    if data_source != f"agentenv/{name}":
        raise RewardConfigError(
            f"data_source {data_source!r} is not the bundle {shared.url} serves (agentenv/{name}); map each data "
            "source to its own server in reward_kwargs.servers"
        )


def _task_id(extra_info: Any, data_source: str) -> str:
    task_id = extra_info.get("task_id") if isinstance(extra_info, Mapping) else None
    if task_id is None or not str(task_id):
        raise RewardConfigError(
            f"a row of {data_source!r} has no extra_info.task_id, so its task is unknown; write the rows with "
            "agentenv_verl.verl_rows (python -m agentenv_verl URL OUT --single-turn), which names each row's task"
        )
    return str(task_id)  # numpy strings (verl's batches) become plain ones


async def _judge(settings: _Settings, data_source: Any, solution_str: Any, extra_info: Any) -> dict[str, float]:
    """Judge one sample and count it (``keptout.COUNTER``); raises as ``compute_score``."""
    data_source = str(data_source)
    task_id = _task_id(extra_info, data_source)
    shared = settings.shared(data_source)
    reply = strip_end_of_turn(str(solution_str or ""))
    try:
        scored = await _play(shared, data_source, task_id, reply, settings.attempts)
    except NoVerdictError as exc:
        COUNTER.note(exc.kind)
        raise
    COUNTER.note(None)
    return scored


async def _play(shared: Shared, data_source: str, task_id: str, reply: str, attempts: int) -> dict[str, float]:
    try:
        await _check_source(shared, data_source)
    except EpisodeLost as exc:
        raise _no_verdict(data_source, task_id, "failed", [exc.failure], str(exc)) from exc
    async with pooled(shared) as session:  # one open session per server for many samples: no handshake each
        rollout = session.rollout(task_id, attempts=attempts)

        async def attempt(started: Started) -> None:
            if started.turns != 1:
                raise RewardConfigError(
                    f"task {task_id!r} of {data_source} has {started.turns} turns; a reward function scores one "
                    "answer. Train multi-turn tasks with agentenv_verl.loop.AgentEnvAgentLoop (rows: python -m "
                    "agentenv_verl URL OUT), or leave them out of the single-turn rows (python -m agentenv_verl URL "
                    "OUT --single-turn does)"
                )
            await rollout.end_turn(reply)

        try:
            _, result = await rollout.play(attempt)
        except RolloutFailed as exc:
            raise _no_verdict(data_source, task_id, "failed", exc.failures, str(exc)) from exc
    if result.outcome != "scored" or result.reward is None:
        why = f"its verifiers gave no verdict ({result.reason})" if result.reason else "its verifiers gave no verdict"
        raise _no_verdict(data_source, task_id, result.outcome, [], why)
    return verdict(result.reward)


def _no_verdict(data_source: str, task_id: str, outcome: str, failures: list[Any], why: str) -> NoVerdictError:
    return NoVerdictError(
        f"no verdict for task {task_id!r} of {data_source}: {why}. The sample is kept out of training, never scored "
        "as 0. Under verl's V1 trainer (trainer.use_v1, the default since verl 0.9) the sample's session fails, its "
        "prompt group is recorded as failed and the GRPO statistics come from the other samples. Under the legacy "
        f"trainer (trainer.use_v1=false) this raise stops training: use {_LOOP}, which masks the sample instead",
        data_source=data_source,
        task_id=task_id,
        outcome=outcome,
        failures=failures,
    )
