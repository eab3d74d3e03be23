"""The containers tier: container envs on a real Docker engine (the nox session ``containers``).

The images are made here, on this machine, from nothing a registry serves: a Python base image from Debian's
packages (``agentenv image base``: debootstrap, then docker import; kept on the engine and found again by its
recipe's key, so a machine makes it once), then the box bundle's image on it (``agentenv image build``). A lock
file makes the xdist workers take turns.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServeProcess
from tests.support.containers import BASE, BOX


@pytest.fixture(scope="session")
def images() -> str:
    """The base image and the box bundle's image, made once per machine (the base) and once per run (the box)."""
    from agentenv_docker import build_base, build_bundle

    with open(Path(tempfile.gettempdir()) / "agentenv-test-images.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build_base(BASE)
        build_bundle(BOX, base=BASE)
    return BASE


@pytest.fixture(scope="module")
def box_server(images: str) -> Iterator[ServeProcess]:
    """``agentenv serve`` of the box bundle (a real process), shared by a module's tests."""
    server = ServeProcess(BOX, "--max-concurrent-envs", "40").start(timeout=180)
    yield server
    server.terminate()


def pytest_configure(config: pytest.Config) -> None:
    try:
        import torch
    except ImportError:  # the engine-only tests run without the trainers; test_trl and test_verl need them
        return
    # TRL 1.16 still reads transformers' deprecated alias; neither is ours to change
    config.addinivalue_line("filterwarnings", "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
    torch.set_num_threads(1)  # two xdist workers share two cores
