"""The descriptor budget a new session is admitted against: counted when a session asks (a count is cheap
here), refused with what is in use and the fix."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from agentenv_server.limits import RESERVE, FdBudget, open_fds

PER_SESSION = 5


@contextmanager
def opened(pairs: int) -> Iterator[None]:
    """``2 * pairs`` more descriptors open in this process (pipes), closed after."""
    fds = [fd for _ in range(pairs) for fd in os.pipe()]
    try:
        yield
    finally:
        for fd in fds:
            os.close(fd)


def in_use(budget: FdBudget) -> int:
    """The descriptors the budget counts as in use, as its refusal says them."""
    return int(budget.refusal().split("(")[1].split()[0])


def test_near_the_limit_every_new_session_is_counted_and_refused_when_it_does_not_fit() -> None:
    now = open_fds()
    assert now is not None
    budget = FdBudget(limit=now + RESERVE + 60, per_session=PER_SESSION)  # room for 60 more
    assert budget.admit()
    with opened(20):
        assert budget.admit()
        assert in_use(budget) >= now + 40 + PER_SESSION  # counted at once
        with opened(10):
            assert not budget.admit()  # 60 more in use: no room for a session
            assert "out of file descriptors" in budget.refusal() and "--max-concurrent-envs" in budget.refusal()
    assert budget.admit()  # the descriptors came back


@pytest.mark.parametrize("limit", [0, -1])
def test_an_unknown_limit_admits_every_session(limit: int) -> None:
    assert FdBudget(limit=limit, per_session=PER_SESSION).admit()
