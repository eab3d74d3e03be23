"""Limits are capacity, not failures: a full server, a server with few file descriptors, one that has run out of
them entirely, and no server at all, each told apart by the client."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.errors import AtCapacity, EpisodeLost, ServerUnavailable

from tests.support import Ledger, free_port
from tests.support.faults import Matrix, play, run


def test_clients_past_max_concurrent_envs_wait_their_turn_and_none_is_lost(matrix: Matrix, ledger: Ledger) -> None:
    server = matrix.serve("--max-concurrent-envs", "4")
    shared = Shared(server.url, waits_for_server=True, reset_timeout=120)

    async def main() -> list[object]:
        return await asyncio.gather(*(play(shared, "slow-deploy", [("echo", {"text": "slow"})], "slow")
                                      for _ in range(24)))  # fmt: skip

    for record in run(main()):
        matrix.saw(record)  # type: ignore[arg-type]
    assert [r.outcome for r in matrix.results] == ["scored"] * 24
    assert matrix.lost == 0 and matrix.failures_scored == 0
    assert ledger.wait_for("teardown", 24) == ledger.count("deploy") == 24
    code, stderr = server.terminate()
    refusals = [line for line in stderr.splitlines() if "refused new sessions" in line]
    assert code == 0 and 1 <= len(refusals) <= 3  # logged once per 10 s with a count, not once per refusal


def test_a_server_short_of_file_descriptors_sizes_itself_and_refuses_instead_of_failing(
    matrix: Matrix, ledger: Ledger
) -> None:
    # 256 descriptors cannot hold 64 sessions of this bundle (about 5 each, and a reserve): it serves fewer
    server = matrix.serve("--max-concurrent-envs", "64", nofile=256)
    shared = Shared(server.url, reset_timeout=60)

    async def main() -> list[object]:
        return await asyncio.gather(*(play(shared, "proc-echo", [("echo", {"text": "sub"})], "sub") for _ in range(60)))

    for record in run(main()):
        matrix.saw(record)  # type: ignore[arg-type]
    played = [r for r in matrix.results if r.outcome == "scored"]
    assert played and matrix.lost == 60 - len(played)
    # a session was either served whole or refused at the door (a server fault: waited out or replayed); none was
    # accepted and then failed
    assert set(matrix.kinds()) <= {"capacity", "out_of_resources"} and matrix.failures_scored == 0
    assert ledger.count("deploy") == len(played)
    code, stderr = server.terminate()
    assert code == 0
    assert "file descriptors" in stderr and "serving at most" in stderr  # said so at start, with the fix
    assert "ulimit -n" in stderr


def test_a_server_out_of_file_descriptors_is_told_from_no_server_and_its_log_is_not_flooded(
    matrix: Matrix, ops_bundle: Path, loop: str
) -> None:
    # asyncio's accept fails with EMFILE and retries (it logged a line per try); uvloop accepts and resets at once
    server = matrix.serve("--max-concurrent-envs", "8", nofile=256, bundle=ops_bundle)
    holder = Session(Shared(server.url))
    nowhere = Shared(f"http://127.0.0.1:{free_port()}", reset_timeout=3)
    impatient = Shared(server.url, reset_timeout=3)

    async def main() -> tuple[BaseException, BaseException, BaseException, object]:
        await holder.start("ops")
        await holder.call("hold_fds", {"leave": 0})  # an env leaks every descriptor the server had left
        await asyncio.sleep(1)
        await holder.call("hold_fds", {"leave": 0})  # and those the server gave back since (its /health answers)
        errors = []
        for shared in (impatient, impatient, nowhere):
            try:
                await Session(shared).start("echo")
            except EpisodeLost as exc:
                errors.append(exc)
        await asyncio.sleep(3)  # the server keeps failing to accept meanwhile
        await holder.close()  # its episode's teardown gives the descriptors back
        again = await play(Shared(server.url, waits_for_server=True, reset_timeout=60), "echo",
                           [("echo", {"text": "ping"})], "ping")  # fmt: skip
        return errors[0], errors[1], errors[2], again

    full, full_again, none, again = run(main())
    # uvloop resets the connection at once: out of resources. On asyncio's loop it waits in the backlog, unanswered,
    # as at a busy server: the client cannot tell the two apart (the server's log says which)
    kind = "overloaded" if loop == "asyncio" else "out_of_resources"
    assert isinstance(full, ServerUnavailable) and full.failure.kind == kind  # type: ignore[attr-defined]
    assert isinstance(full, AtCapacity) == (kind == "out_of_resources")
    assert "the server accepted the connection but" in str(full) and full_again.failure.kind == kind  # type: ignore[attr-defined]
    assert isinstance(none, ServerUnavailable) and not isinstance(none, AtCapacity)
    assert none.failure.kind == "unreachable" and "Start one" in str(none)  # type: ignore[attr-defined]
    assert matrix.saw(again).outcome == "scored"  # type: ignore[arg-type]
    code, stderr = server.terminate()
    accept_errors = [line for line in stderr.splitlines() if "socket.accept() out of system resource" in line]
    expected = (1, 2) if loop == "asyncio" else (0, 0)  # once per 10 s, not once per attempt and retry
    assert code == 0 and expected[0] <= len(accept_errors) <= expected[1], stderr[-2000:]
    assert len(stderr) < 20_000


def test_every_refused_session_is_counted_in_the_log_also_those_of_the_last_period(matrix: Matrix) -> None:
    server = matrix.serve("--max-concurrent-envs", "1")
    holder = Session(Shared(server.url))
    full = Shared(server.url, reset_timeout=10)

    async def main() -> int:
        await holder.start("echo")
        refused = 0
        for _ in range(30):
            try:
                await Session(full).start("echo")
            except AtCapacity:
                refused += 1
        await holder.close()
        return refused

    assert run(main()) == 30
    code, stderr = server.terminate()  # well within the 10 s between two log lines: the count is said at shutdown
    assert code == 0
    assert sum(int(n) for n in re.findall(r"(\d+) CAPACITY_REACHED", stderr)) == 30, stderr[-2000:]
