"""A rollout that fails every attempt under verl's V1 trainer: AgentEnvAgentLoop raises RolloutFailed in
verl's own AgentLoopWorkerTQ, which tags the prompt's group "failure" in TransferQueue; verl's own
ReplayBuffer then leaves the failed rollouts out of the batch it hands the trainer (sync), evicts a group
with none left and fetches a fresh prompt (sync with ``trainer.v1.sampler.sync_refill_failed_groups``),
or evicts the whole group, siblings included, and fetches a fresh prompt (ReplayBufferAsync).

What runs is verl's: the V1 trainer's own dataloader, prompt submission (uids, pending tags, refills) and
replay buffer; AgentLoopWorkerTQ instantiating the written agent_loop.yaml; TransferQueue's own controller,
storage units and client; AgentEnvAgentLoop on the real fake-bundle server. Stand-ins: the rollout server
(the model) and Ray's actor plumbing. TransferQueue starts its controller and storage units as Ray actors
and clients reach them over ZMQ ("We use Ray decorator (@ray.remote) only for initialization purposes",
storage/simple_storage.py); here the same classes are started in this process, and ``tq.init`` starts or
joins them without Ray. verl's AgentLoopManagerTQ.generate_sequences chunks the batch per worker and
``ray.get``s each worker's ``generate_sequences`` on an async actor, whose event loop runs in a thread of its
own; here the one worker's loop runs in a thread and the stand-in manager waits on that same call.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import transfer_queue as tq
from agentenv_verl import NoVerdictError, RolloutFailed, write
from omegaconf import OmegaConf
from tensordict import TensorDict
from transfer_queue import interface
from transfer_queue.controller import TransferQueueController
from transfer_queue.sampler import SequentialSampler
from transfer_queue.storage.simple_storage import SimpleStorageUnit

from tests.support.verl import VERDICTS, RewardHandle, ScriptedServer, token_output, tool_call, trainer_config

with warnings.catch_warnings():  # the trainer imports every training engine; those not installed warn
    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

# torchdata's StatefulDataLoader (verl's dataloader) calls a deprecated torch function as it starts
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

N = 2  # rollouts per prompt: a GRPO group of two

# The model's reply to the last of these the prompt holds (the fake tasks' prompts, and a tool's answer).
REPLIES = {
    "Echo the word 'ping'": tool_call("echo", text="ping"),
    "<tool_response>": "ping<|im_end|>",
    "Say hello.": "hello<|im_end|>",
    "Now say goodbye.": "goodbye<|im_end|>",
    "Echo 'x'.": "x<|im_end|>",
}


class Policy:
    """Stands in for verl's rollout server: answers the last thing the prompt asks, so concurrent
    rollouts of one prompt (a group) each get a full reply sequence. ``crash_first``: the first rollout
    it is asked for calls the fake env's ``crash`` tool instead (the env fails the episode)."""

    def __init__(self, tokenizer: Any, crash_first: bool = False) -> None:
        self.tokenizer = tokenizer
        self.crash_first = crash_first
        self.first_request: str | None = None

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        prompt = self.tokenizer.decode(prompt_ids)
        asked = max(REPLIES, key=prompt.rfind)
        assert prompt.rfind(asked) >= 0, f"no reply for {prompt[-200:]!r}"
        self.first_request = self.first_request or request_id
        crash = self.crash_first and request_id == self.first_request
        reply = tool_call("crash") if crash else REPLIES[asked]
        await asyncio.sleep(0)
        return token_output(self.tokenizer, reply, global_step=1)


_STORAGE_UNITS: list[Any] = []


def _init_in_process(conf: Any = None) -> Any:
    """What ``tq.init()`` does (transfer_queue/interface.py), with the controller and the storage units
    started in this process rather than as Ray actors: the same classes, serving on ZMQ. A second call
    (verl's worker calls it as it starts) joins the running one, as ``tq.init`` joins an existing one."""
    if interface._TQ_CLIENT is not None:
        return conf
    conf = OmegaConf.merge(
        OmegaConf.create({}, flags={"allow_objects": True}),
        OmegaConf.load(resources.files("transfer_queue") / "config.yaml"),
    )
    controller = TransferQueueController.__ray_actor_class__(sampler=SequentialSampler(), polling_mode=False)
    conf.controller.zmq_info = controller.get_zmq_server_info()
    storage = dict(conf.backend.SimpleStorage, _run_id="agentenv-tests")
    units = {
        f"TransferQueueStorageUnit#{i}": SimpleStorageUnit.__ray_actor_class__(config=storage)
        for i in range(conf.backend.SimpleStorage.num_data_storage_units)
    }
    conf.backend.SimpleStorage.zmq_info = {name: unit.get_zmq_server_info() for name, unit in units.items()}
    _STORAGE_UNITS.extend(units.values())
    controller.store_config(conf)
    interface._maybe_create_tq_client(conf)
    return conf


@pytest.fixture(scope="module")
def transfer_queue() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tq, "init", _init_in_process)
        tq.init()
        yield
        interface.close()  # the client; Ray would kill the actors, here the units stop (the controller's
        for unit in _STORAGE_UNITS:  # threads are daemons and end with the process)
            unit.shutdown()
        _STORAGE_UNITS.clear()


class WorkerThread:
    """verl's AgentLoopWorkerTQ with its event loop in a thread, as a Ray async actor runs it; stands in
    for AgentLoopManagerTQ, whose generate_sequences is ``ray.get`` of the worker's on one chunk."""

    def __init__(self, config: Any, llm_client: Any, reward: bool = False) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def build() -> Any:  # reward: verl's rule-based reward worker beside it, as the V1 trainer starts one
            handles = [RewardHandle(RewardLoopWorker(config))] if reward else None
            return AgentLoopWorkerTQ.__ray_actor_class__(
                config, llm_client=llm_client, reward_loop_worker_handles=handles
            )  # calls tq.init(); fmt: skip

        self.worker = self._call(build())
        self.dispatched: list[TensorDict] = []

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=120)

    def generate_sequences(self, prompts: TensorDict) -> None:
        self.dispatched.append(prompts)
        self._call(self.worker.generate_sequences(prompts))

    def settle(self) -> None:
        """Wait for every prompt dispatched so far to be settled (its group tagged)."""

        async def wait() -> None:
            while self.worker.background_tasks:
                await asyncio.gather(*self.worker.background_tasks)

        self._call(wait())

    def uids(self) -> dict[str, str]:
        """The uid the trainer gave each dispatched prompt, by task id, in the order dispatched."""
        return {
            info["task_id"]: uid
            for batch in self.dispatched
            for uid, info in zip(batch["uid"], batch["extra_info"], strict=True)
        }

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def _train_file(written: Path, tasks: list[str], out: Path) -> Path:
    """The written train split with only ``tasks``, in that order (the writer's own schema)."""
    table = pq.read_table(written)
    rows = {row["extra_info"]["task_id"]: i for i, row in enumerate(table.to_pylist())}
    pq.write_table(table.take([rows[t] for t in tasks]), out)
    return out


def _trainer(
    tasks: list[str],
    *overrides: str,
    tokenizer: Any,
    model_dir: Path,
    url: str,
    tmp_path: Path,
    train_batch_size: int = 2,
    attempts: int = 2,
    crash_first: bool = False,
    single_turn: bool = False,
    model: Any = None,
) -> Any:
    """verl's V1 trainer of ``trainer.v1.trainer_mode`` (sync by default) on ``tasks`` of the server at ``url``,
    with what it needs to submit prompts and sample batches: its dataloader, its replay buffer, and the
    worker in place of the agent loop manager. Its GPU-backed parts (worker groups, rollout replicas,
    checkpoint engine) are not built: nothing here reaches them. ``single_turn``: single-turn rows, and verl's
    rule-based reward worker beside the agent loop worker; ``model``: the rollout server (default: ``Policy``)."""
    written = write(url, tmp_path / "out", splits=["train"], attempts=attempts, single_turn=single_turn)
    train = _train_file(written.files["train"], tasks, tmp_path / "train.parquet")
    config = trainer_config(
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={N}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={written.agent_loop_config}",
        f"data.train_files={train}",
        f"data.val_files={train}",
        f"data.train_batch_size={train_batch_size}",
        "data.shuffle=false",
        "data.dataloader_num_workers=0",
        "data.max_prompt_length=4096",
        "data.max_response_length=1024",
        "data.filter_overlong_prompts=false",
        f"+data.cache_dir={tmp_path / 'rlhf-cache'}",
        *overrides,
    )
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)  # builds its ReplayBuffer(Async)
    trainer._init_tokenizer()
    trainer._init_dataloader()  # verl's RLHFDataset and StatefulDataLoader over the train file
    trainer.global_steps = 1
    trainer.replay_buffer.poll_interval = 0.1  # the pause between its polls of TransferQueue (2 s)
    model = model if model is not None else Policy(tokenizer, crash_first=crash_first)
    trainer.agent_loop_manager = WorkerThread(config, model, reward=single_turn)
    return trainer


def _group_tags() -> dict[str, str]:
    """The status tag of every prompt group in TransferQueue's train partition, by uid."""
    return {k: t["status"] for k, t in tq.kv_list().get("train", {}).items() if t.get("is_prompt")}


def _trajectories() -> list[str]:
    """The keys of the trajectories in TransferQueue's train partition: ``{uid}_{session}_{output}``."""
    return sorted(k for k, t in tq.kv_list().get("train", {}).items() if not t.get("is_prompt"))


def _rewards(keys: list[str]) -> list[float]:
    """Each trajectory's reward as the trainer reads it from TransferQueue (rm_scores, summed)."""
    data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["rm_scores"])
    return [scores.sum().item() for scores in data["rm_scores"].unbind(0)]


def _failures_logged(caplog: pytest.LogCaptureFixture, uid: str) -> list[BaseException]:
    """The session errors verl's worker logged for the prompt ``uid`` as it tagged its group."""
    return [r.exc_info[1] for r in caplog.records if r.getMessage() == f"Error in _run_prompt for uid={uid}"]


@pytest.fixture
def v1(transfer_queue, tokenizer, model_dir, fake_server, tmp_path) -> Iterator[Any]:
    """Builds a V1 trainer on the fake server (see ``_trainer``); stops its worker's thread and empties
    TransferQueue afterwards."""
    built: list[Any] = []

    def make(tasks: list[str], *overrides: str, url: str | None = None, **options: Any) -> Any:
        url = url or fake_server.url
        trainer = _trainer(
            tasks, *overrides, tokenizer=tokenizer, model_dir=model_dir, url=url, tmp_path=tmp_path, **options
        )
        built.append(trainer)
        return trainer

    yield make
    for trainer in built:
        trainer.agent_loop_manager.close()
    listed = tq.kv_list().get("train", {})
    if listed:
        tq.kv_clear(keys=list(listed), partition_id="train")


@pytest.fixture
def worker_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """What verl's V1 worker logs at ERROR (it logs each failed session as it tags the group)."""
    caplog.set_level(logging.ERROR, logger="verl.trainer.ppo.v1.agent_loop_tq")
    return caplog


def test_a_group_whose_rollouts_fail_every_attempt_is_tagged_failure_and_none_of_it_reaches_the_batch(
    v1, ledger, worker_log
):
    trainer = v1(["deploy-fails", "echo"])
    deploys = ledger.count("deploy")  # the writer's probes deployed too

    trainer.prepare_step()  # verl's trainer tags both prompts pending and dispatches them
    trainer.agent_loop_manager.settle()
    uid = trainer.agent_loop_manager.uids()

    assert _group_tags() == {uid["deploy-fails"]: "failure", uid["echo"]: "finished"}
    assert _trajectories() == [f"{uid['echo']}_{i}_0" for i in range(N)]  # none of deploy-fails
    assert ledger.count("deploy") - deploys == 2 * N + N  # each deploy-fails rollout played twice, echo once
    failures = _failures_logged(worker_log, uid["deploy-fails"])
    assert len(failures) == N
    assert all(isinstance(f, RolloutFailed) and f.attempts == 2 for f in failures)

    batch, metrics = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=2)

    assert sorted(batch.keys) == [f"{uid['echo']}_{i}_0" for i in range(N)]  # the failed group: no samples
    assert metrics == {}
    assert _rewards(batch.keys) == [1.0] * N


def test_with_sync_refill_a_failed_group_is_evicted_and_a_fresh_prompt_takes_its_place(v1):
    trainer = v1(["deploy-fails", "echo", "two-turn"], "trainer.v1.sampler.sync_refill_failed_groups=true")

    trainer.prepare_step()
    batch, metrics = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    uid = trainer.agent_loop_manager.uids()

    assert list(uid) == ["deploy-fails", "echo", "two-turn"]  # two-turn fetched in place of deploy-fails
    assert metrics == {"training/rollout_failure/evicted_samples": 1}
    assert sorted(batch.keys) == sorted(f"{uid[t]}_{i}_0" for t in ("echo", "two-turn") for i in range(N))
    assert uid["deploy-fails"] not in tq.kv_list().get("train", {})  # cleared from TransferQueue
    assert _rewards(batch.keys) == [1.0] * (2 * N)


def test_a_group_with_one_failed_rollout_is_tagged_failure_and_sync_keeps_only_its_other_rollout(v1, worker_log):
    # attempts=1: the rollout whose env crashes fails at once; its sibling plays echo and is scored
    trainer = v1(["echo"], train_batch_size=1, attempts=1, crash_first=True)

    trainer.prepare_step()
    trainer.agent_loop_manager.settle()
    uid = trainer.agent_loop_manager.uids()["echo"]

    assert _group_tags() == {uid: "failure"}
    (survivor,) = _trajectories()
    assert survivor in {f"{uid}_{i}_0" for i in range(N)}
    (failure,) = _failures_logged(worker_log, uid)
    assert isinstance(failure, RolloutFailed)
    assert failure.failures[0].kind == "crash"

    batch, metrics = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=1)

    assert batch.keys == [survivor]  # the failed rollout is absent from its group; its sibling stays
    assert metrics == {}
    assert _rewards(batch.keys) == [1.0]


def test_in_async_mode_a_group_with_a_failed_rollout_is_evicted_whole_and_refilled(v1):
    trainer = v1(
        ["echo", "two-turn"], "trainer.v1.trainer_mode=colocate_async", train_batch_size=1, attempts=1, crash_first=True
    )

    trainer.prepare_step()
    batch, metrics = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=1)
    uid = trainer.agent_loop_manager.uids()

    assert list(uid) == ["echo", "two-turn"]
    assert metrics == {"training/rollout_failure/evicted_samples": 1}
    assert sorted(batch.keys) == [f"{uid['two-turn']}_{i}_0" for i in range(N)]
    assert not [k for k in tq.kv_list().get("train", {}) if k.startswith(uid["echo"])]  # its survivor too
    assert _rewards(batch.keys) == [1.0] * N


# --- single-turn rows: the reward function, and the single-turn loop ---------------------------------------------


@pytest.mark.parametrize(
    "scored_by",
    [
        ("reward.custom_reward_function.path=pkg://agentenv_verl.reward", "+reward.custom_reward_function.reward_kwargs"
         ".attempts=1"),  # verl's single_turn_agent, and its reward worker calling compute_score
        ("actor_rollout_ref.rollout.agent.default_agent_loop=agentenv_single",),  # the loop, on agent_loop.yaml's url
    ],
    ids=["reward-function", "single-turn-loop"],
)  # fmt: skip
def test_a_sample_without_a_verdict_fails_its_group_and_only_its_sibling_is_stored(
    v1, serve, tokenizer, worker_log, scored_by
):
    server = serve(VERDICTS)
    url_kwarg = [f"+reward.custom_reward_function.reward_kwargs.url={server.url}"] if len(scored_by) == 2 else []
    model = ScriptedServer(tokenizer, {"Say the word on the board.": ["BREAK<|im_end|>", "right<|im_end|>"]})
    trainer = v1(["judged"], *scored_by, *url_kwarg, url=server.url, single_turn=True, model=model, attempts=1,
                 train_batch_size=1)  # fmt: skip

    trainer.prepare_step()
    trainer.agent_loop_manager.settle()
    uid = trainer.agent_loop_manager.uids()["judged"]

    assert _group_tags() == {uid: "failure"}
    (survivor,) = _trajectories()
    (failure,) = _failures_logged(worker_log, uid)
    assert isinstance(failure, NoVerdictError) and failure.kind == "verifier"  # the judge broke on BREAK

    batch, metrics = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=1)

    assert batch.keys == [survivor]  # only the sibling the judge scored
    assert metrics == {}
    assert _rewards(batch.keys) == [1.0]
