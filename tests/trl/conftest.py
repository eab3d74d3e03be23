"""The TRL tier: TRL's own GRPOTrainer on tiny models built here, against real agentenv servers on loopback."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import torch

    # TRL 1.16 still reads transformers' deprecated alias; neither is ours to change
    config.addinivalue_line("filterwarnings", "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

    # Two xdist workers share two cores: more threads per worker only makes them spin against each other.
    torch.set_num_threads(1)
