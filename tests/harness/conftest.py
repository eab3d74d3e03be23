"""The harness tier: TRL's own harness rollouts and real agent CLIs, through OpenEnv's capture proxy to a stand-in.

The nox session ``harness`` installs TRL and OpenEnv at their pinned versions and the agent CLIs from npm
into a folder of its own, named by ``$AGENTENV_AGENT_BIN``.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import torch

    # TRL 1.16 still reads transformers' deprecated alias; neither is ours to change
    config.addinivalue_line("filterwarnings", "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
    torch.set_num_threads(1)
