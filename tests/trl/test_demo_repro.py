"""The same seed gives the same numbers: two demo runs in one process, one after the other."""

from __future__ import annotations

import io

import torch
from agentenv_trl.demo import DemoConfig, DemoReport, run_demo


def numbers(report: DemoReport) -> tuple:
    """Everything a run measured but the wall times."""
    steps = [(s.step, s.episodes, s.scored, s.reward, s.reward_std, s.trl_reward, s.tool_calls) for s in report.steps]
    evals = [(e.when, e.episodes, e.reward, e.reward_std, e.trl_reward, e.tool_calls) for e in report.evals]
    return report.warm_start_loss, steps, evals


def test_a_seed_repeats_its_numbers_and_another_seed_does_not(tmp_path):
    threads = torch.get_num_threads()
    runs = []
    for n, seed in enumerate((3, 3, 4)):
        config = DemoConfig.quick(steps=2, warm_start_steps=20, seed=seed, output_dir=tmp_path / str(n))
        runs.append(numbers(run_demo(config, out=io.StringIO(), progress=io.StringIO())))
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[2][0]  # the warm start's loss depends on the seed
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()  # put back
