"""What the verl tier builds for itself: a Qwen-style tokenizer trained here (no hub), a verl config,
a stand-in rollout server that answers from a script, and the real writer's rows as verl's own
RLHFDataset hands them to an agent loop."""

from __future__ import annotations

import asyncio
import json
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import verl
from agentenv_verl.loop import AgentEnvAgentLoop
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap, ToolListWrap
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

with warnings.catch_warnings():  # the reward loop imports verl's training engines; those not installed warn
    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

from tests.support.paths import ARITH, FAKE, INBOX, VERDICTS  # after verl's warnings are silenced

__all__ = ["ARITH", "FAKE", "INBOX", "VERDICTS"]  # the tier's tests take the bundles from here with the rest

SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]

# A Qwen3-style ChatML template: the tools' full JSON Schema in the system turn, tool calls as
# <tool_call>{json}</tool_call>, consecutive tool answers in one user turn, and an empty think block
# in the generation prompt when enable_thinking is false.
CHAT_TEMPLATE = r"""
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
    {{- '# Tools\n\nYou may call functions. Their signatures are within <tools></tools>:\n<tools>' }}
    {%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
    {{- '\n</tools>\n\nCall one with <tool_call>{"name": NAME, "arguments": ARGS}</tool_call>.<|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for m in messages %}
    {%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}
    {%- elif m.role == 'assistant' %}
        {{- '<|im_start|>assistant' }}
        {%- if m.content %}{{- '\n' + m.content }}{%- endif %}
        {%- for call in m.tool_calls or [] %}
            {%- set fn = call.function if call.function is defined else call %}
            {%- set args = fn.arguments if fn.arguments is string else (fn.arguments | tojson) %}
            {{- '\n<tool_call>\n{"name": "' + fn.name + '", "arguments": ' + args + '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif m.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\n<tool_response>\n' + m.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
""".strip()

_CORPUS = [
    "You are a test agent. Use the tools as asked. Echo the word 'ping' with the echo tool, then say it.",
    "You answer questions about the user's inbox. Use the tools to look things up, then answer briefly.",
    '{"type": "function", "function": {"name": "echo", "description": "Echo the text back.", "parameters": '
    '{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}',
    '<tool_call>\n{"name": "search", "arguments": {"query": "budget"}}\n</tool_call>',
    "<function=add>\n<parameter=a>\n1\n</parameter>\n</function> integer number boolean array object null",
    "# Tools You may call functions. Their signatures are within: Call one with NAME ARGS <think> </think>",
    "system user assistant tool error result truncated description additionalProperties 0123456789",
]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (lossless on any text) with Qwen's special tokens and the template above."""
    model = Tokenizer(models.BPE(unk_token=None))
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    model.train_from_iterator(_CORPUS * 10, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_model_dir(tokenizer: PreTrainedTokenizerFast, folder: Path) -> Path:
    """The tokenizer and a Qwen2 model config in ``folder``: what verl's HFModelConfig reads from a model path."""
    tokenizer.save_pretrained(folder)
    config = {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "vocab_size": len(tokenizer),
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 8192,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def verl_config(
    prompt_length: int = 4096, response_length: int = 2048, chat_template_kwargs: dict | None = None, **multi_turn: Any
) -> DictConfig:
    """The parts of verl's trainer config an agent loop reads (every multi_turn key must be present)."""
    turns = {
        "max_user_turns": None,
        "max_assistant_turns": None,
        "max_parallel_calls": 1,
        "max_tool_response_length": 256,
        "tool_response_truncate_side": "middle",
        "format": "hermes",
    }
    turns.update(multi_turn)
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "full_determinism": False,
                    "multi_turn": turns,
                }
            },
            "data": {"apply_chat_template_kwargs": chat_template_kwargs or {}, "mm_processor_kwargs": {}},
        }
    )


def trainer_config(*overrides: str) -> DictConfig:
    """verl's own trainer config (ppo_trainer.yaml) with ``overrides``, composed by hydra as its entry point does."""
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


class ScriptedServer:
    """Stands in for verl's LLMServerClient: each ``generate`` answers with the next scripted reply.

    ``replies`` is one script, or scripts by a text of the prompt they answer (rollouts run
    concurrently in verl's worker; a rollout keeps its script, and a replay, a new request, takes
    the next replies of the same one). ``prompts`` records what the model was shown each time
    (decoded); ``before(n)`` (optional) runs before the n-th reply (1-based) is returned.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerFast,
        replies: Iterable[str] | dict[str, list[str]],
        before: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.scripts = {k: list(v) for k, v in replies.items()} if isinstance(replies, dict) else {"": list(replies)}
        self.before = before
        self.prompts: list[str] = []
        self.request_ids: list[str] = []
        self._script_of: dict[str, list[str]] = {}

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        prompt = self.tokenizer.decode(prompt_ids)
        self.prompts.append(prompt)
        self.request_ids.append(request_id)
        if request_id not in self._script_of:
            key = next((k for k in self.scripts if k in prompt), None)
            if key is None:
                raise AssertionError(f"no script answers this prompt: {prompt[-300:]!r}")
            self._script_of[request_id] = self.scripts[key]
        if self.before is not None:
            await self.before(len(self.prompts))
        script = self._script_of[request_id]
        if not script:
            raise AssertionError(f"the model was asked for reply {len(self.prompts)}, but its script has no more")
        await asyncio.sleep(0)
        return token_output(self.tokenizer, script.pop(0), global_step=0)


def make_loop(
    tokenizer: PreTrainedTokenizerFast,
    server: ScriptedServer,
    url: str,
    config: DictConfig | None = None,
    **loop_options: Any,
) -> AgentEnvAgentLoop:
    """An AgentEnvAgentLoop built with the arguments verl's AgentLoopWorker passes (call it inside the event loop)."""
    config = config if config is not None else verl_config()
    return AgentEnvAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type="qwen2",
        tools=ToolListWrap([]),
        url=url,
        **loop_options,
    )


def dataset_rows(parquet: Path, tokenizer: PreTrainedTokenizerFast, cache: Path) -> dict[str, dict[str, Any]]:
    """Each row of a written split as verl's worker passes it to ``run``: RLHFDataset, collate_fn,
    every non-tensor column but ``agent_name`` (the worker consumes it to pick the loop). By task id."""
    config = OmegaConf.create({"cache_dir": str(cache), "filter_overlong_prompts": False, "max_prompt_length": 8192})
    dataset = RLHFDataset(str(parquet), tokenizer, config)
    rows: dict[str, dict[str, Any]] = {}
    for i in range(len(dataset)):
        batch = collate_fn([dataset[i]])
        row = {k: v[0] for k, v in batch.items() if isinstance(v, np.ndarray) and k != "agent_name"}
        rows[row["extra_info"]["task_id"]] = row
    return rows


def tool_call(name: str, **arguments: Any) -> str:
    """A hermes tool call as the model writes it."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call><|im_end|>'


def xml_call(name: str, **parameters: Any) -> str:
    """A qwen3_coder tool call as the model writes it: every value as text, typed only by the schema."""
    body = "".join(
        f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n</parameter>\n"
        for key, value in parameters.items()
    )
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call><|im_end|>"


def token_output(tokenizer: Any, reply: str, *, global_step: int) -> TokenOutput:
    """What verl's rollout server answers for ``reply``: its tokens, stand-in log-probs, a completed stop."""
    ids = tokenizer.encode(reply, add_special_tokens=False)
    steps = {"global_steps": global_step, "min_global_steps": global_step, "max_global_steps": global_step}
    return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed", num_preempted=0,
                       extra_fields=steps)  # fmt: skip


class RewardHandle:
    """Stands in for the Ray actor handle of verl's RewardLoopWorker: ``handle.compute_score.remote(data)``
    is the worker's own ``compute_score(data)`` (a coroutine; the caller awaits it as it awaits the actor's)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    @property
    def compute_score(self) -> Any:
        return _Remote(self.worker.compute_score)


class _Remote:
    def __init__(self, method: Callable[..., Any]) -> None:
        self.method = method

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.method(*args, **kwargs)


def prompts(parquet: Path, tokenizer: Any, n: int, tmp_path: Path) -> DataProto:
    """A split's rows as verl's legacy trainer hands them to its agent loop worker: RLHFDataset, collate_fn, a
    uid per prompt, each repeated ``n`` times (a GRPO group)."""
    config = {"cache_dir": str(tmp_path / "rlhf-cache"), "filter_overlong_prompts": False, "max_prompt_length": 8192}
    dataset = RLHFDataset(str(parquet), tokenizer, OmegaConf.create(config))
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    batch = batch.repeat(repeat_times=n, interleave=True)
    batch.meta_info["global_steps"] = 1
    return batch


async def generate(config: DictConfig, model: Any, batch: DataProto) -> DataProto:
    """verl's legacy AgentLoopWorker on ``batch`` with verl's rule-based reward worker beside it, as verl's legacy
    trainer starts them when no reward model runs (call it inside the event loop)."""
    reward_worker = RewardLoopWorker(config)  # verl's own: loads the reward manager and the reward function
    worker = AgentLoopWorker(config, llm_client=model, reward_loop_worker_handles=[RewardHandle(reward_worker)])
    return await worker.generate_sequences(batch)


def replies(tokenizer: Any, out: DataProto) -> list[str]:
    """Each sample's response in a worker's output, as text (what the model said)."""
    masks = out.batch["attention_mask"][:, out.batch["prompts"].shape[1] :]
    return [tokenizer.decode(ids[m.bool()], skip_special_tokens=True) for ids, m in zip(out.batch["responses"], masks)]
