"""The root of every tier: the strict wire for all of them, the shared fixtures registered as a plugin, and the
end of a run's garbage. Helpers live in ``tests.support``; a test imports them from there, never from a conftest."""

from __future__ import annotations

import gc
import os

import pytest

# unknown fields in a frame are an error in every test (and in the servers they start), not silently dropped
os.environ.setdefault("AGENTENV_STRICT_WIRE", "1")

# the fixtures every tier shares (pytest takes pytest_plugins from the root conftest only)
pytest_plugins = ["tests.support.fixtures"]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Collect the garbage the tests left (stopped servers' loops and their pending tasks) before the run's summary:
    a collection whose finalizers run in the middle of the compile of a module imported then (the hypothesis
    plugin imports hypothesis there) trips CPython 3.11's "AST constructor recursion depth mismatch" SystemError
    (cpython gh-106905), which fails a run whose tests all passed."""
    gc.collect()
