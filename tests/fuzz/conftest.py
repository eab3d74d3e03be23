"""The fuzz campaign: Hypothesis against real ``agentenv serve`` processes (and against bundle loading).

Budget: ``$AGENTENV_FUZZ_EXAMPLES`` inputs per test (default ``DEFAULT_EXAMPLES``, about two minutes for the
folder in CI); ``bench/fuzz.py`` runs it long. ``$AGENTENV_FUZZ_REPORT``: a JSON file the campaign writes at its
end: the inputs tried per kind, the servers' crashes, the sessions lost and each server's peak RSS. Hypothesis keeps
no example database unless ``$AGENTENV_FUZZ_DB`` names a folder (a failure prints the input and its seed either way).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.support.fuzz import FuzzServer, Report

DEFAULT_EXAMPLES = 100
LOOPS = ("asyncio", "uvloop")

_db = os.environ.get("AGENTENV_FUZZ_DB")
settings.register_profile(
    "agentenv-fuzz",
    max_examples=int(os.environ.get("AGENTENV_FUZZ_EXAMPLES", DEFAULT_EXAMPLES)),
    deadline=None,  # a real server on a shared machine: time is not the property
    database=DirectoryBasedExampleDatabase(_db) if _db else None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)
settings.load_profile("agentenv-fuzz")


@pytest.fixture(scope="session")
def fuzz_report() -> Iterator[Report]:
    """The campaign's report (every fuzz test of the folder adds to it)."""
    report = Report()
    yield report
    path = os.environ.get("AGENTENV_FUZZ_REPORT")
    if path:
        Path(path).write_text(json.dumps(report.as_dict(), indent=2) + "\n")


@pytest.fixture(scope="module", params=LOOPS)
def fuzz_server(request: pytest.FixtureRequest, fuzz_report: Report) -> Iterator[FuzzServer]:
    """A real server on each of uvicorn's loops, for a module's fuzz tests; at the end it must still run, exit 0 at
    SIGTERM and have logged no traceback."""
    server = FuzzServer(str(request.param), fuzz_report)
    yield server
    server.stop()
