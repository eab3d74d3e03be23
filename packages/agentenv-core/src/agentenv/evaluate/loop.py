"""The standard tool-calling loop: a model behind a chat completions endpoint plays one sample of a task.

The model gets the task's system prompt and first prompt, and the toolset's tools as OpenAI function
tools. Each tool call it makes is a call on the episode (through the ``Rollout``); its answer goes back
as a ``tool`` message. A reply without a tool call ends the turn; a multi-turn task hands over the next
prompt as a ``user`` message. ``Rollout.play`` replays an attempt the env or server lost, so this module
keeps no failure rules of its own: a tool call it cannot read (no name, arguments that are not a JSON
object) is the model's mistake, answered as an error and scored; an ``EpisodeLost`` goes to ``play``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentenv.errors import RolloutFailed
from agentenv.evaluate.chat import ChatClient, ContextTooLong, ToolCall
from agentenv.evaluate.results import Sample, failure_dict, passed

if TYPE_CHECKING:
    from agentenv.client.rollout import Rollout
    from agentenv.client.session import Session, Started
    from agentenv.wire import TaskRow

__all__ = ["Player", "play_sample"]


@dataclass
class Player:
    """Plays attempts of one sample: ``attempt`` is what ``Rollout.play`` calls. Counts what every attempt
    spent (tokens, model calls) and keeps the last attempt's transcript."""

    client: ChatClient
    rollout: Rollout
    max_turns: int
    transcript: list[dict[str, Any]] = field(default_factory=list)
    model_calls: int = 0
    tool_calls: int = 0
    malformed_calls: int = 0
    context_limited: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0

    async def attempt(self, started: Started) -> None:
        """Play one attempt to its end: every turn, or until the context runs out (``conclude`` ends the rest)."""
        messages: list[dict[str, Any]] = started.messages()
        self.transcript = messages
        self.tool_calls = self.malformed_calls = 0
        self.context_limited = False
        tools = [t.as_openai() for t in started.tools]
        while True:
            try:
                reply = await self._turn(messages, tools)
            except ContextTooLong:
                self.context_limited = True  # the model's conversation, not the env: conclude() scores what stands
                return
            answer = await self.rollout.end_turn(reply)
            if answer.done:
                return
            messages.append({"role": "user", "content": answer.prompt or ""})

    async def _turn(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The model's part of one turn: completions and tool calls until a reply without a call (or the limit)."""
        reply = ""
        for _ in range(self.max_turns):
            with self.rollout.model_time():
                completion = await self.client.complete(messages, tools)
            self.model_calls += 1
            self.prompt_tokens += completion.prompt_tokens
            self.completion_tokens += completion.completion_tokens
            reply = completion.content
            message: dict[str, Any] = {"role": "assistant", "content": completion.content}
            if completion.tool_calls:
                message["tool_calls"] = [_as_openai(c) for c in completion.tool_calls]
            messages.append(message)
            if not completion.tool_calls:
                return reply
            for call in completion.tool_calls:
                self.tool_calls += 1
                text = await self._call(call)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return reply  # still calling tools after --max-turns completions: the turn ends with its last text (scored)

    async def _call(self, call: ToolCall) -> str:
        """Run one tool call on the episode; an unknown tool name is the env's to answer (the policy's mistake)."""
        args, problem = _arguments(call)
        if problem is None and not call.name:
            problem = "error: a tool call without a tool name; name one of the tools offered"
        if problem is not None:
            self.malformed_calls += 1  # the model's mistake: answered, scored, never sent to the env
            return problem
        answer = await self.rollout.call(call.name, args)
        return answer.text


def _as_openai(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _arguments(call: ToolCall) -> tuple[dict[str, Any], str | None]:
    text = call.arguments.strip() or "{}"
    try:
        args = json.loads(text)
    except json.JSONDecodeError as exc:
        return (
            {},
            f"error: the arguments of {call.name or 'the call'} are not valid JSON ({exc.msg}); send one JSON object",
        )
    if not isinstance(args, dict):
        return {}, f"error: the arguments of {call.name or 'the call'} must be a JSON object, not {type(args).__name__}"
    return args, None


async def play_sample(
    session: Session,
    client: ChatClient,
    row: TaskRow,
    sample: int,
    *,
    attempts: int,
    max_turns: int,
    threshold: float,
) -> Sample:
    """Play sample ``sample`` of ``row``'s task on ``session``: up to ``attempts`` episodes (replays of lost ones).

    Returns its record; a sample every attempt of which was lost is ``failed`` (never the model's failure).
    Endpoint errors other than a context too long, and configuration errors, propagate.
    """
    rollout = session.rollout(row.id, attempts=attempts, budget=math.inf)  # attempts bound the replays, not time
    player = Player(client, rollout, max_turns)
    try:
        _, result = await rollout.play(player.attempt)
    except RolloutFailed:
        result = rollout.result
    assert result is not None
    record = rollout.record
    scored = result.outcome == "scored"
    return Sample(
        task=row.id,
        split=row.split,
        sample=sample,
        outcome=result.outcome,
        reward=result.reward if scored else None,
        passed=passed(result.reward, threshold) if scored else None,
        scores=dict(result.scores),
        failure=failure_dict(result.failure) if result.outcome == "failed" and result.failure else None,
        failures=[failure_dict(f) for f in record.failures],
        reason=result.reason,
        attempts=record.attempts,
        turns=result.turns,
        model_calls=player.model_calls,
        tool_calls=player.tool_calls,
        malformed_calls=player.malformed_calls,
        context_limited=player.context_limited,
        prompt_tokens=player.prompt_tokens,
        completion_tokens=player.completion_tokens,
        model_seconds=round(record.model_seconds, 3),
        env_seconds=round(record.env_seconds, 3),
        transcript=player.transcript,
    )
