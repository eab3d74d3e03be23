"""The harbor tier: Harbor task directories read through the harbor package, played in real containers (the nox
session ``harbor``, on Python 3.12: harbor needs it).

The images are made on this machine, from nothing a registry serves: the containers tier's Python base image
(``agentenv image base``), then each Harbor task's image from its environment/Dockerfile, which starts FROM it
(``agentenv image build``). A lock file makes xdist workers take turns.
"""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest

from tests.harbor.support import BASE, SUITE


@pytest.fixture(scope="session")
def images() -> list[str]:
    """The base image (made once per machine) and the suite's task images (built when their files change)."""
    from agentenv_docker import build_base, build_bundle

    with open(Path(tempfile.gettempdir()) / "agentenv-test-images.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build_base(BASE)
        build_bundle(SUITE)
    return [BASE]


def pytest_configure(config: pytest.Config) -> None:
    try:
        import torch
    except ImportError:  # the harbor tests run without a trainer; test_harbor_trl needs one (on another Python)
        return
    # TRL 1.16 still reads transformers' deprecated alias; neither is ours to change
    config.addinivalue_line("filterwarnings", "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
    torch.set_num_threads(1)  # two xdist workers share two cores
