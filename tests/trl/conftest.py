"""The TRL tier: TRL's own GRPOTrainer on tiny models built here, against real agentenv servers on loopback."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import torch

    # Two xdist workers share two cores: more threads per worker only makes them spin against each other.
    torch.set_num_threads(1)
