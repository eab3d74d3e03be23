"""The harness tier: TRL's own harness rollouts and real agent CLIs, through OpenEnv's capture proxy to a stand-in.

The nox session ``harness`` installs TRL and OpenEnv at their pinned versions and the agent CLIs from npm
into a folder of its own, named by ``$AGENTENV_AGENT_BIN``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import torch

    # TRL 1.16 still reads transformers' deprecated alias; neither is ours to change
    config.addinivalue_line("filterwarnings", "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def agent_bin() -> Path:
    """The folder of the agent CLIs the nox session installed (claude, opencode)."""
    folder = os.environ.get("AGENTENV_AGENT_BIN")
    assert folder, "run this tier with: uvx --from 'nox==2026.10.20' nox -s harness (it installs the agent CLIs)"
    path = Path(folder)
    assert (path / "claude").exists() and (path / "opencode").exists(), f"no agent CLIs in {path}"
    return path
