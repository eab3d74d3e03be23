"""``tasks: {source: harbor}`` where harbor cannot run: refused whole, naming the Python it needs and the install
command (the harbor tier, ``nox -s harbor``, plays the tasks themselves on Python 3.12)."""

from __future__ import annotations

import sys
from importlib import util

import pytest
from agentenv import load_bundle
from agentenv.errors import BundleError

from tests.harbor.support import SUITE


@pytest.mark.skipif(util.find_spec("harbor") is not None, reason="harbor is installed: tests/harbor plays its tasks")
def test_a_harbor_bundle_without_harbor_is_refused_naming_the_python_and_the_install_command() -> None:
    with pytest.raises(BundleError) as refused:
        load_bundle(SUITE)
    problem = next(p for p in refused.value.problems if p.field == "tasks.source")
    assert (problem.file, problem.line) == ("bundle.yaml", 6)
    assert problem.message.endswith("pip install 'agentenv-docker[harbor]'")
    if sys.version_info < (3, 12):
        found = ".".join(map(str, sys.version_info[:3]))
        assert f"needs Python >= 3.12 (harbor does), and this is Python {found}" in problem.message
    else:
        assert "needs the harbor package, which is not installed" in problem.message
