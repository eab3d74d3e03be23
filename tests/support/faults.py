"""The fault matrix's rows (tests/faults, and the tiers that play its scenarios): every process a row starts carries
a marker in its environment (``$AGENTENV_FAULT_MARK``), inherited by whatever it starts, so "processes left" is the
count of live processes with the row's marker, found in /proc, never by asking the code under test."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenv.client.rollout import RolloutRecord
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.errors import EpisodeLost
from agentenv.wire import EpisodeResult

from tests.support.paths import FAKE
from tests.support.procs import cmdline, with_env
from tests.support.servers import ServeProcess
from tests.support.waiting import wait_until

MARK_VAR = "AGENTENV_FAULT_MARK"
GONE_WITHIN = 5.0  # the bound: no process of a killed owner is left after 5 s


def marked(mark: str) -> list[tuple[int, str]]:
    """Live processes whose environment carries ``$AGENTENV_FAULT_MARK=mark`` (pid, command line)."""
    return [(pid, cmdline(pid)) for pid in with_env(MARK_VAR, mark)]


def public_address() -> str:
    """This machine's address on its network (not loopback): what a client on another machine would connect to."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # a documentation address: a UDP connect picks the route, sends nothing
        address = probe.getsockname()[0]
    assert not address.startswith("127."), f"this machine has no address but loopback ({address})"
    return address


def left_after(mark: str, seconds: float = GONE_WITHIN) -> list[tuple[int, str]]:
    """The marked processes still alive ``seconds`` from now (returns early once none is)."""
    wait_until(lambda: not marked(mark), seconds, interval=0.1)
    return marked(mark)


LOOPS = ("asyncio", "uvloop")  # uvicorn's event loops: every row runs on both


@dataclass
class Matrix:
    """One row of the fault matrix: its marker, and what its clients saw."""

    loop: str = "auto"
    mark: str = field(default_factory=lambda: uuid.uuid4().hex)
    records: list[RolloutRecord] = field(default_factory=list)
    servers: list[ServeProcess] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process this row starts (the marker and ``extra``)."""
        return {MARK_VAR: self.mark, **extra}

    def serve(self, *args: str, bundle: Path = FAKE, **kwargs: Any) -> ServeProcess:
        """``agentenv serve`` with this row's marker, on this row's event loop."""
        env = {**self.env(), **kwargs.pop("env", {})}
        server = ServeProcess(bundle, "--loop", self.loop, *args, env=env, **kwargs)
        self.servers.append(server)
        return server.start()

    def saw(self, record: RolloutRecord) -> EpisodeResult:
        """Keep what a client's rollout saw; returns its result."""
        self.records.append(record)
        assert record.result is not None
        return record.result

    @property
    def results(self) -> list[EpisodeResult]:
        """Each rollout's final result."""
        return [r.result for r in self.records if r.result is not None]

    @property
    def lost(self) -> int:
        """Episodes lost (attempts the env or the server failed, replayed or not)."""
        return sum(len(r.failures) for r in self.records)

    @property
    def failures_scored(self) -> int:
        """Env or server failures that got a reward anyway (a zero trained on): must be 0."""
        return sum(
            r.reward is not None and (r.outcome != "scored" or (r.failure is not None and r.failure.fault != "policy"))
            for r in self.results
        )

    def kinds(self) -> list[str]:
        """The kind of each lost episode, in order."""
        return [f.kind for r in self.records for f in r.failures]


Policy = Sequence[tuple[str, dict[str, Any]]]


async def play(
    shared: Shared,
    task: str,
    calls: Policy = (),
    reply: str | None = None,
    *,
    attempts: int = 1,
    first: Callable[[Any], Awaitable[None]] | None = None,
    session: Session | None = None,
) -> RolloutRecord:
    """Play ``task`` the way an integration does (``Rollout.play``, replaying lost attempts): ``first(rollout)``
    on the first attempt only, then the calls and the reply. Returns the rollout's record (its result: scored,
    or the last attempt's failed one once no replay may start)."""
    own = session is None
    session = session or Session(shared)
    rollout = session.rollout(task, attempts=attempts)

    async def attempt(started: Any) -> None:
        if first is not None and rollout.record.attempts == 1:
            await first(rollout)
        for tool, args in calls:
            await rollout.call(tool, args)
        if reply is not None:
            await rollout.end_turn(reply)

    try:
        _, result = await rollout.play(attempt)
    except EpisodeLost:
        result = rollout.result
    finally:
        if own:
            await session.close()
    rollout.record.result = result
    return rollout.record


def run(coro: Awaitable[Any]) -> Any:
    """Run a coroutine of the test on a fresh event loop."""
    return asyncio.run(coro)  # type: ignore[arg-type]
