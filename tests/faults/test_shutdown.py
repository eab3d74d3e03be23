"""SIGTERM with each kind of tool in flight: clients told at once (1012), every episode torn down, the process
gone within its grace, and no traceback in the log."""

from __future__ import annotations

import asyncio
import time

import pytest
from agentenv.client.settings import Shared

from tests.support import Ledger
from tests.support.faults import Matrix, play, run

GRACE = 2.0
# past the grace, `agentenv serve` exits whatever still runs (runner.WATCHDOG_SLACK); before this change a blocked
# sync tool kept a server up for its whole run (38 s and 120 s in the runs), an async one for 60 s
BOUND = GRACE + 5.0

IN_FLIGHT = {
    "async tool": ("echo", "hang", "ping"),  # awaits on the event loop: cancelled
    "sync tool": ("echo", "sleep_sync", "ping"),  # blocks a pool thread: abandoned
    "subprocess env": ("proc-echo", "stall", "sub"),  # its program never answers (and has a child): killed
}


@pytest.mark.parametrize("kind", sorted(IN_FLIGHT))
def test_sigterm_with_a_call_in_flight_closes_every_session_at_once_and_exits_within_the_grace(
    matrix: Matrix, ledger: Ledger, kind: str
) -> None:
    task, tool, text = IN_FLIGHT[kind]
    server = matrix.serve("--shutdown-grace", str(GRACE), "--tool-timeout", "300", "--max-concurrent-envs", "8")
    shared = Shared(server.url, tool_timeout=300, reset_timeout=60)
    args = {"seconds": 300} if tool != "stall" else {}
    seen: dict[str, float] = {}

    async def main() -> list[object]:
        stopped = asyncio.Event()

        async def blocked(rollout: object) -> None:
            if task == "proc-echo":
                await rollout.call("spawn", {})  # type: ignore[attr-defined]
            await rollout.call(tool, args)  # type: ignore[attr-defined]

        async def idle(rollout: object) -> None:
            await stopped.wait()  # an open episode between calls (the model thinks): it hears at its next call

        playing = [
            asyncio.ensure_future(play(shared, task, [("echo", {"text": text})], text, first=blocked)),
            asyncio.ensure_future(play(shared, "echo", [("echo", {"text": "ping"})], "ping", first=idle)),
        ]
        while ledger.count(f"call {tool}") < 1 or ledger.count("deploy") < 2:
            await asyncio.sleep(0.05)
        began = time.monotonic()
        stopping = asyncio.ensure_future(asyncio.to_thread(server.terminate, 60))
        await asyncio.wait([playing[0]])  # the client with a call in flight hears of it at once
        seen["client"] = time.monotonic() - began
        code, stderr = await stopping
        seen["exit"], seen["code"], seen["stderr"] = time.monotonic() - began, code, stderr  # type: ignore[assignment]
        stopped.set()
        return list(await asyncio.gather(*playing))

    for record in run(main()):
        matrix.saw(record)  # type: ignore[arg-type]
    assert seen["code"] == 0
    assert seen["exit"] < BOUND, f"SIGTERM took {seen['exit']:.1f} s to end the server (grace {GRACE:g} s)"
    assert seen["client"] < GRACE  # not after the teardown: the close frame comes first
    assert "Traceback" not in seen["stderr"] and "Exception in ASGI" not in seen["stderr"], seen["stderr"]
    assert matrix.lost == 2 and matrix.kinds() == ["restarting", "restarting"]  # close code 1012, both clients
    assert matrix.failures_scored == 0
    assert ledger.count("deploy") == 2
    # every episode torn down before exit (a program stalled in a call cannot say so: it is killed, and gone below)
    assert ledger.count("teardown") == (1 if task == "proc-echo" else 2)
