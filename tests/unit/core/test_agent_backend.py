"""An agent's own sandbox backend (``sandbox: {backend: NAME}`` on the agent, whatever the process's is): one that
is not registered fails the rollout's deploy (an env fault, never scored) naming the known ones; an env's
``sandbox:`` takes no backend (refused at load). The docker backend chosen this way is tested through real agent
CLIs in tests/containers/test_agent_clis.py."""

from __future__ import annotations

import pytest
from agentenv.errors import EpisodeLost

from tests.support.bundles import copy_bundle, patch, refused
from tests.support.harness import HARNESS, prompt_of


def test_an_agent_naming_an_unknown_sandbox_backend_fails_its_deploy_naming_the_known_ones(make_factory, tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(bundle / "bundle.yaml", "  chat:\n    kind: process\n",
          "  chat:\n    kind: process\n    sandbox: {backend: nosuch}\n")  # fmt: skip
    session = make_factory(bundle, split="train").create(prompt_of(bundle, "direct", "train"))
    session.wait_for_completion()
    with pytest.raises(EpisodeLost) as info:
        session.fetch_training_trace()
    verdict = session.verify([])
    session.close()
    failure = info.value.failure
    assert failure.kind == "deploy" and verdict.env_reward is None
    assert "unknown sandbox 'nosuch' (sandbox.backend: nosuch); known: " in failure.message
    assert "bwrap" in failure.message.rsplit("known: ", 1)[1]


def test_an_envs_sandbox_takes_no_backend(tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(bundle / "bundle.yaml", "    target: calc_env:Calculator\n  calc_broken:",
          "    target: calc_env:Calculator\n    sandbox: {backend: docker}\n  calc_broken:")  # fmt: skip
    assert "bundle.yaml:12: envs.calc.sandbox.backend: unknown field" in str(refused(bundle))
