"""``AgentEnvAgentLoop``: verl's ToolAgentLoop playing each dataset row as an episode on an agentenv server.

Importing this module checks the installed verl against ``SUPPORTED`` and imports verl.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from agentenv.client import Rollout, Session, Shared, pooled
from agentenv.errors import RolloutFailed as RolloutLost
from agentenv.logs import warn_once
from agentenv.wire import EpisodeResult, Started, Tool

from ._api import check_agent_loop
from ._schemas import parse_tools, typed_schema
from ._version import check_verl, missing_for_agent_loop
from .errors import LoopConfigError, RolloutFailed
from .keptout import COUNTER

check_verl()  # before verl is imported: a version outside SUPPORTED fails here, naming both and the fix

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
except ModuleNotFoundError as exc:  # verl declares some of its agent loop's imports only in an extra
    raise missing_for_agent_loop(exc) from exc

check_agent_loop()  # every verl internal the loop leans on (agentenv_verl._api), before verl builds a loop

__all__ = ["AgentEnvAgentLoop", "LoopConfigError", "RolloutFailed"]

log = logging.getLogger("agentenv_verl")

_WRITER = "python -m agentenv_verl URL OUT"


class AgentEnvAgentLoop(ToolAgentLoop):
    """verl's ``ToolAgentLoop`` whose tools are the row's, each call a call on the row's episode.

    verl keeps its tokenization (Continuous Token), tool parsing, turn caps and truncation. Per
    rollout the loop starts the row's task on the agentenv server (``url``), gives verl's parsers
    typed tool schemas and the chat template the full JSON Schema, and ends the open turn with the
    model's last reply (special tokens stripped); a reply without a tool call ends its turn and the
    next turn's prompt becomes a user message. Turns the rollout leaves no room for end with an
    empty reply (scored: the policy's doing). The episode's reward is ``reward_score``, so verl runs
    no reward function; ``extra_fields["reward_extra_info"]`` holds ``score/<step>`` for every step
    of the data source (None where this rollout has none), ``attempts``, ``model_seconds`` and
    ``env_seconds`` (all attempts). Each rollout counts in ``keptout.COUNTER`` (scored, or kept out).

    A rollout the env fails (deploy, deadline, crash, server gone) is played again from the start on
    a new episode, up to ``attempts`` times, none starting once ``reset_timeout`` has passed since
    the rollout began; then ``RolloutFailed`` is raised. A restarted server is waited out within
    ``reset_timeout``; a refused token fails at once. ``LoopConfigError`` is raised for a first
    prompt over ``rollout.prompt_length``, an episode that ends unscored, and a second ``run``.

    The verl internals it leans on are listed in ``agentenv_verl._api.AGENT_LOOP`` and checked when this
    module loads: ``ToolAgentLoop.run`` and its state handlers ``_handle_pending_state``,
    ``_handle_generating_state``, ``_handle_processing_tools_state`` (``AgentState``); ``AgentData``
    (``messages``, ``prompt_ids``, ``response_ids``, ``response_mask``, ``response_logprobs``,
    ``tool_calls``, ``user_turns``, ``metrics["generate_sequences"]``, ``_active_tool_schemas``);
    ``self.tools`` (objects with ``name``, ``tool_schema`` and BaseTool's ``create``/``execute``/``release``,
    which ``_call_tool`` calls) and ``self.tool_schemas``; ``self.max_tool_response_length``,
    ``self.response_length``, ``self.max_user_turns``; ``AgentLoopBase.ct_merge_context_msg`` and
    ``_cap_text_prompt_length``; ``AgentLoopOutput.reward_score`` and ``extra_fields``.
    """

    def __init__(
        self,
        *args: Any,
        url: str,
        tool_timeout: float = 60.0,
        reset_timeout: float = 300.0,
        attempts: int = 3,
        token_var: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if int(attempts) < 1:
            raise LoopConfigError(f"attempts={attempts!r} in agent_loop.yaml: give 1 or more")
        self.attempts = int(attempts)
        self.shared = Shared(
            str(url),
            token_var=token_var,
            tool_timeout=float(tool_timeout),
            reset_timeout=float(reset_timeout),
            waits_for_server=True,
            client="verl",
        )
        self._ran = False
        self._task_id = ""
        self._rollout: Rollout | None = None
        self._agent_data: AgentData | None = None
        self._open_reply: list[int] | None = None  # the tokens of the model's last reply, while its turn is open
        self._calls = asyncio.Lock()

    # -- the rollout ------------------------------------------------------------------------------

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the row (``kwargs`` are its dataset fields) on new episodes until one is scored."""
        if self._ran:
            raise LoopConfigError(
                "AgentEnvAgentLoop.run was called twice on one instance; verl makes one loop per rollout: "
                "instantiate a new one for each"
            )
        self._ran = True
        task_id, tools, steps = _read_row(kwargs)
        self._task_id = task_id
        typed, schemas = _schemas(kwargs["extra_info"]["tools"])
        self.tool_schemas = list(schemas)
        self.tools = {t.name: _EpisodeTool(self, t, schema) for t, schema in zip(tools, typed, strict=True)}
        async with pooled(self.shared) as session:  # verl makes a loop per rollout: the session outlives it
            return await self._play(session, task_id, tools, steps, sampling_params, kwargs)

    async def _play(
        self,
        session: Session,
        task_id: str,
        tools: list[Tool],
        steps: list[str],
        sampling_params: dict[str, Any],
        kwargs: dict[str, Any],
    ) -> AgentLoopOutput:
        self._rollout = rollout = session.rollout(task_id, attempts=self.attempts)

        async def attempt(started: Started) -> AgentLoopOutput:
            self._open_reply, self._agent_data = None, None
            self._check_tools(started, tools)
            try:
                output = await super(AgentEnvAgentLoop, self).run(sampling_params, **kwargs)
            finally:
                rollout.add_model_seconds(self._model_seconds())
            if rollout.lost is not None:
                raise rollout.lost
            if self._open_reply is not None and session.result is None:
                await rollout.end_turn(self._reply(self._open_reply))  # the model's last reply answers the open turn
            return output

        try:
            output, result = await rollout.play(attempt)
        except RolloutLost as exc:
            COUNTER.note(exc.failure.kind)
            raise RolloutFailed(
                f"{exc}. verl's V1 trainer tags its group failed and keeps this rollout out of every batch; see the "
                "agentenv server's log for the env's side",
                task_id=exc.task_id,
                failures=exc.failures,
            ) from exc.__cause__
        if result.outcome != "scored":
            raise LoopConfigError(
                f"task {task_id!r} ended {result.outcome} without an env failure ({result.reason}); an unscored "
                "rollout cannot be trained on. Make its verifiers give a verdict (agentenv play BUNDLE TASK checks one)"
            )
        COUNTER.note(None)
        record = rollout.record
        return self._scored(output, result, steps, record.attempts, record.model_seconds, record.env_seconds)

    def _scored(
        self,
        output: AgentLoopOutput,
        result: EpisodeResult,
        steps: list[str],
        attempts: int,
        model_seconds: float,
        env_seconds: float,
    ) -> AgentLoopOutput:
        unknown = [step for step in result.scores if steps and step not in steps]
        if unknown:
            raise LoopConfigError(
                f"task {self._task_id!r} scored step(s) {', '.join(unknown)}, which its row's extra_info.steps does "
                f"not list: the bundle changed since the dataset was written. Write it again: {_WRITER}"
            )
        info: dict[str, Any] = {f"score/{step}": result.scores.get(step) for step in (steps or list(result.scores))}
        info.update(attempts=attempts, model_seconds=model_seconds, env_seconds=env_seconds)
        assert result.reward is not None  # a scored result has a reward
        output.reward_score = float(result.reward)
        output.extra_fields["reward_extra_info"] = info
        return output

    def _check_tools(self, started: Started, tools: list[Tool]) -> None:
        if sorted((t.as_dict() for t in started.tools), key=lambda t: t["name"]) != sorted(
            (t.as_dict() for t in tools), key=lambda t: t["name"]
        ):
            offered, listed = ", ".join(t.name for t in started.tools), ", ".join(t.name for t in tools)
            raise LoopConfigError(
                f"the server offers task {self._task_id!r} other tools ({offered}) than its dataset row lists "
                f"({listed}): the bundle changed since the dataset was written. Write it again: {_WRITER}"
            )

    def _model_seconds(self) -> float:
        return float(self._agent_data.metrics.get("generate_sequences", 0.0)) if self._agent_data else 0.0

    def _reply(self, response_ids: list[int]) -> str:
        return self.tokenizer.decode(response_ids, skip_special_tokens=True).strip()

    # -- verl's state handlers, extended --------------------------------------------------------

    async def _handle_pending_state(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        self._agent_data = agent_data  # this attempt's model time is read from its metrics
        return await super()._handle_pending_state(agent_data, sampling_params)

    def _cap_text_prompt_length(self, prompt_ids: list[int]) -> list[int]:
        limit = self.rollout_config.prompt_length
        if len(prompt_ids) > limit:
            raise LoopConfigError(
                f"the first prompt of task {self._task_id!r} is {len(prompt_ids)} tokens with its tools, over "
                f"actor_rollout_ref.rollout.prompt_length={limit}; verl would cut it from the left, losing the system "
                f"prompt and the tools. Set data.max_prompt_length to at least {len(prompt_ids)}, and find such rows "
                f"before training: {_WRITER} --tokenizer MODEL --max-prompt-length N"
            )
        return prompt_ids

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        before = len(agent_data.messages)
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        self._open_reply = agent_data.response_ids  # decoded only if it answers the turn (most replies call tools)
        # verl appends the assistant message only when no cap stopped the rollout; with no tool call
        # in it, the model has answered the open turn
        if state != AgentState.TERMINATED or len(agent_data.messages) == before or agent_data.tool_calls:
            return state
        assert self._rollout is not None
        answer = await self._rollout.end_turn(self._reply(self._open_reply))
        self._open_reply = None
        if answer.done or answer.prompt is None:
            return AgentState.TERMINATED
        return await self._open_turn(agent_data, answer.prompt)

    async def _open_turn(self, agent_data: AgentData, prompt: str) -> AgentState:
        """Add the next turn's prompt as a user message (mask 0), as verl adds tool answers."""
        previous = list(agent_data.messages)
        agent_data.messages.append({"role": "user", "content": prompt})
        merged, mask, logprobs = await self.ct_merge_context_msg(
            previous,
            agent_data.messages,
            agent_data.prompt_ids,
            agent_data.response_mask,
            agent_data.response_logprobs or None,
            tools=getattr(agent_data, "_active_tool_schemas", self.tool_schemas),
        )
        if len(mask) >= self.response_length:
            return AgentState.TERMINATED  # no room for the turn: it ends unanswered
        agent_data.prompt_ids = merged.token_ids
        agent_data.response_mask = mask
        if agent_data.response_logprobs:
            agent_data.response_logprobs = logprobs or []
        agent_data.user_turns += 1
        return AgentState.GENERATING

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
        state = await super()._handle_processing_tools_state(agent_data)
        assert self._rollout is not None
        if self._rollout.lost is not None:  # verl turned it into a tool answer; it is the env's failure
            raise self._rollout.lost
        return state

    # -- tools ------------------------------------------------------------------------------------

    async def _call_env(self, name: str, args: Any) -> str:
        """Call tool ``name`` on the episode; calls of one reply run in order, one at a time."""
        assert self._rollout is not None
        async with self._calls:
            answer = await self._rollout.call(name, args)  # after a loss it raises that loss again
        self._warn_if_cut(name, answer.text)
        return answer.text

    def _warn_if_cut(self, name: str, text: str) -> None:
        limit = self.max_tool_response_length
        if len(text) <= limit:
            return
        warn_once(
            log,
            f"cut:{self.shared.url}:{name}",
            "tool %r answered %d characters; verl cuts tool answers to "
            "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=%d (cutting the %s) before the model sees "
            "them. Raise it to show whole answers (warned once per tool)",
            name,
            len(text),
            limit,
            self.tool_response_truncate_side,
        )


class _EpisodeTool:
    """One of the row's tools, called on the rollout's episode; duck-types verl's ``BaseTool``
    (without its constructor, which prints the schema)."""

    def __init__(self, loop: AgentEnvAgentLoop, tool: Tool, schema: OpenAIFunctionToolSchema) -> None:
        self.name = tool.name
        self.tool_schema = schema
        self._loop = loop

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        return "", ToolResponse()  # an empty id: verl calls no release

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, None, dict[str, Any]]:
        return ToolResponse(text=await self._loop._call_env(self.name, parameters)), None, {}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        return None


@functools.lru_cache(maxsize=1024)
def _schemas(tools_json: str) -> tuple[list[OpenAIFunctionToolSchema], list[dict[str, Any]]]:
    """A row's tools as verl's typed schemas (its parsers) and as OpenAI tools (the chat template).

    Rows of one toolset share their tools' JSON: read once, not once per rollout (read-only after).
    """
    tools = parse_tools(tools_json)
    return [OpenAIFunctionToolSchema.model_validate(typed_schema(t)) for t in tools], [t.as_openai() for t in tools]


@functools.lru_cache(maxsize=1024)
def _parsed(tools_json: str) -> list[Tool]:
    return parse_tools(tools_json)


def _read_row(kwargs: dict[str, Any]) -> tuple[str, list[Tool], list[str]]:
    extra = kwargs.get("extra_info") or {}
    task_id, tools_json = extra.get("task_id"), extra.get("tools")
    if not task_id or not isinstance(tools_json, str):
        raise LoopConfigError(
            "the row has no extra_info.task_id and extra_info.tools, so it was not written by agentenv-verl's "
            f"writer; write the dataset with {_WRITER}"
        )
    try:
        tools = _parsed(tools_json)
    except (ValueError, KeyError, TypeError) as exc:
        raise LoopConfigError(f"task {task_id!r}: extra_info.tools is not a list of tools ({exc}); {_WRITER}") from None
    steps = [str(s) for s in (extra.get("steps") if extra.get("steps") is not None else [])]
    return str(task_id), tools, steps
