"""The verl internals agentenv-verl's loops lean on, named once and probed when a loop module loads.

``AGENT_LOOP`` is what ``AgentEnvAgentLoop`` (``agentenv_verl.loop``) uses of verl's ``ToolAgentLoop``,
``SINGLE_TURN_LOOP`` what ``AgentEnvSingleTurnLoop`` (``agentenv_verl.single_turn``) uses of its
``SingleTurnAgentLoop``. ``agentenv.plugins.internals.probe`` checks each against the installed verl and refuses,
naming the verl version, the supported range and the missing name, before verl builds a loop (verl
0.9.0, say, calls ``ct_merge_context_msg`` ``ct_merge_non_assistant_msg``).
"""

from __future__ import annotations

from typing import Any, Final

from agentenv.plugins import Internal, internals

from ._version import INTEGRATION

__all__ = ["AGENT_LOOP", "SINGLE_TURN_LOOP", "check_agent_loop", "check_single_turn_loop"]

_LOOP = "verl.experimental.agent_loop.agent_loop"
_TOOL = "verl.experimental.agent_loop.tool_agent_loop"

_OUTPUT = Internal(
    f"{_LOOP}:AgentLoopOutput",
    attributes=("response_ids", "response_mask", "reward_score", "num_turns", "extra_fields"),
)

AGENT_LOOP: Final[tuple[Internal, ...]] = (
    Internal(f"{_TOOL}:ToolAgentLoop.run", parameters=("sampling_params",)),
    Internal(f"{_TOOL}:ToolAgentLoop._handle_pending_state", parameters=("agent_data", "sampling_params")),
    Internal(
        f"{_TOOL}:ToolAgentLoop._handle_generating_state",
        parameters=("agent_data", "sampling_params", "ignore_termination"),
    ),
    Internal(f"{_TOOL}:ToolAgentLoop._handle_processing_tools_state", parameters=("agent_data",)),
    Internal(f"{_TOOL}:ToolAgentLoop._call_tool"),
    Internal(
        f"{_TOOL}:ToolAgentLoop",
        attributes=(
            "tools",
            "tool_schemas",
            "tokenizer",
            "rollout_config",
            "response_length",
            "max_tool_response_length",
            "tool_response_truncate_side",
        ),
    ),
    Internal(f"{_TOOL}:AgentState", attributes=("GENERATING", "TERMINATED")),
    Internal(
        f"{_TOOL}:AgentData",
        attributes=(
            "messages",
            "prompt_ids",
            "response_ids",
            "response_mask",
            "response_logprobs",
            "tool_calls",
            "user_turns",
            "metrics",
        ),
    ),
    Internal(
        f"{_LOOP}:AgentLoopBase.ct_merge_context_msg",
        parameters=("previous_messages", "updated_messages", "runtime_token_ids", "response_mask", "tools"),
    ),
    Internal(f"{_LOOP}:AgentLoopBase._cap_text_prompt_length", parameters=("prompt_ids",)),
    _OUTPUT,
    Internal("verl.tools.schemas:OpenAIFunctionToolSchema"),
    Internal("verl.tools.schemas:ToolResponse", attributes=("text",)),
)

SINGLE_TURN_LOOP: Final[tuple[Internal, ...]] = (
    Internal(
        "verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop.run", parameters=("sampling_params",)
    ),
    _OUTPUT,
    Internal("verl.trainer.ppo.reward:get_custom_reward_fn", parameters=("config",)),
)


def check_agent_loop() -> dict[str, Any]:
    """The internals ``AgentEnvAgentLoop`` uses, resolved in the installed verl (``MissingInternal`` if one is not)."""
    return internals.probe(INTEGRATION, AGENT_LOOP)


def check_single_turn_loop() -> dict[str, Any]:
    """The internals ``AgentEnvSingleTurnLoop`` uses, resolved in the installed verl."""
    return internals.probe(INTEGRATION, SINGLE_TURN_LOOP)
