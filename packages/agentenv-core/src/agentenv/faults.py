"""The fault policy: who is at fault for each way a rollout can go wrong, and what happens next.

Written once, here. The server, the session layer and every integration read this table; none keeps a
copy. A **policy** fault is the model's doing: it is scored and trained on (the model is told, the
rollout goes on). An **env** fault or a **server** fault is not: the episode ends ``failed`` with reward
None, and the session layer replays it on a new episode (``replay``) or waits the server out within
``reset_timeout`` (``wait``) where that may help. Configuration errors (a refused token, a protocol
mismatch, an unknown task or split) are raised at once: neither trained on nor replayed, since only a
person can fix them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal

__all__ = ["CONFIG_ERRORS", "RULES", "Fault", "Rule", "fault_of", "rule", "table_markdown"]


class Fault(str, Enum):
    """Who is at fault."""

    POLICY = "policy"
    ENV = "env"
    SERVER = "server"

    def __str__(self) -> str:
        return self.value


Outcome = Literal["scored", "failed"]


@dataclass(frozen=True)
class Rule:
    """One failure kind: who is at fault, what happens to the rollout, and examples.

    ``outcome``: ``scored`` (trained on) or ``failed`` (reward None, never trained on as a zero).
    ``replay``: a new episode may succeed, so a rollout with attempts left plays again.
    ``wait``: with ``waits_for_server``, the session layer waits this out within ``reset_timeout``
    before it counts as a failure.
    """

    kind: str
    fault: Fault
    outcome: Outcome
    replay: bool
    wait: bool
    examples: str


_OVERLOADED = (
    "the server took the connection but did not answer its handshake within reset_timeout (busy, or on asyncio's "
    "loop out of file descriptors)"
)

RULES: Final[tuple[Rule, ...]] = (
    # the policy's mistakes: the model is told (a tool answer marked as an error) and the rollout goes on
    Rule("unknown_tool", Fault.POLICY, "scored", False, False, "a call to a tool the toolset does not offer"),
    Rule("invalid_arguments", Fault.POLICY, "scored", False, False, "arguments that do not fit the tool's schema"),
    Rule("oversized_call", Fault.POLICY, "scored", False, False, "a call or reply over the server's frame limit"),
    Rule("tool_error", Fault.POLICY, "scored", False, False, "a tool that refuses the call by raising ToolError"),
    Rule("wrong_answer", Fault.POLICY, "scored", False, False, "a reply the verifiers score low"),
    Rule("no_tool_call", Fault.POLICY, "scored", False, False, "a rollout that never calls a tool"),
    Rule("no_answer", Fault.POLICY, "scored", False, False, "turns left open: ended with an empty reply"),
    # the env's failures: the episode is lost, a new one may go well
    Rule(
        "deploy",
        Fault.ENV,
        "failed",
        True,
        False,
        "the env's deploy raised (a missing fixture file, a bug: named by file and line)",
    ),
    Rule(
        "crash",
        Fault.ENV,
        "failed",
        True,
        False,
        "a tool that raised anything but ToolError (named by file and line), EnvCrashed, the env program's exit",
    ),
    Rule("deadline", Fault.ENV, "failed", True, False, "a deploy, tool call or verifier past its deadline"),
    Rule(
        "verifier", Fault.ENV, "failed", True, False, "a verifier or reward rule that raised, or a score outside [0, 1]"
    ),
    # the server's: the episode is lost with the connection, or never started
    Rule("unreachable", Fault.SERVER, "failed", True, True, "nothing listening at the URL"),
    Rule("restarting", Fault.SERVER, "failed", True, True, "the server is shutting down (close code 1012)"),
    Rule("capacity", Fault.SERVER, "failed", True, True, "the server holds max_concurrent_envs sessions"),
    Rule("out_of_resources", Fault.SERVER, "failed", True, True, "the server is out of file descriptors"),
    Rule("overloaded", Fault.SERVER, "failed", True, True, _OVERLOADED),
    Rule("connection_lost", Fault.SERVER, "failed", True, False, "the connection closed mid-episode"),
    Rule("idle", Fault.SERVER, "failed", True, False, "the server reaped the session after idle_timeout"),
    Rule("protocol", Fault.SERVER, "failed", False, False, "a frame the session layer cannot read"),
)

CONFIG_ERRORS: Final[tuple[tuple[str, str], ...]] = (
    ("Unauthorized", "the server refused the bearer token, or its variable is unset"),
    ("ProtocolMismatch", "the server and the client speak different protocol versions"),
    ("UnknownTask / UnknownSplit", "the task or split is not the server's"),
)

_BY_KIND: Final[dict[str, Rule]] = {r.kind: r for r in RULES}


def rule(kind: str) -> Rule:
    """The rule of failure ``kind``; an unknown kind is an env failure that may be replayed."""
    found = _BY_KIND.get(kind)
    if found is not None:
        return found
    return Rule(kind, Fault.ENV, "failed", True, False, "a failure kind this table does not list")


def fault_of(kind: str) -> Fault:
    """Who is at fault for failure ``kind``."""
    return rule(kind).fault


def table_markdown() -> str:
    """The table as Markdown (the READMEs and the docs show this)."""
    lines = ["| fault | kind | example | outcome | replayed | waited out |", "|---|---|---|---|---|---|"]
    for r in RULES:
        outcome = "scored, trained on" if r.outcome == "scored" else "failed, reward None"
        lines.append(
            f"| {r.fault} | `{r.kind}` | {r.examples} | {outcome} | {'yes' if r.replay else 'no'} | "
            f"{'yes' if r.wait else 'no'} |"
        )
    return "\n".join(lines)
