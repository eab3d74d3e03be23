"""``agentenv demo``'s flags: each left out takes DemoConfig's default, and the help states that default."""

from __future__ import annotations

import argparse
import re

import pytest
from agentenv_trl.cli import _FIELDS, configure_demo, demo_config
from agentenv_trl.demo import DemoConfig


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure_demo(parser)
    return parser.parse_args(argv)


def test_no_flags_is_the_default_config_and_quick_is_the_quick_one():
    assert demo_config(parse()) == DemoConfig()
    assert demo_config(parse("--quick")) == DemoConfig.quick()
    assert DemoConfig().warm_steps() == 400 and DemoConfig(model="m").warm_steps() == 0


def test_flags_given_override_the_config_and_quick_alike():
    args = ("--steps", "3", "--learning-rate", "0.01", "--generations", "2", "--eval-generations", "6")
    for quick in ((), ("--quick",)):
        config = demo_config(parse(*args, "--warm-start", "5", "--prompts-per-step", "1", *quick))
        assert (config.steps, config.learning_rate, config.num_generations, config.eval_generations) == (3, 0.01, 2, 6)
        assert (config.warm_steps(), config.prompts_per_step) == (5, 1)
    assert demo_config(parse("--quick", "--steps", "7")).hidden_size == DemoConfig.quick().hidden_size


@pytest.mark.parametrize("flag", [f for f in _FIELDS if f not in ("bundle", "model", "output_dir")])
def test_the_help_states_the_defaults_the_config_has(flag):
    parser = argparse.ArgumentParser()
    configure_demo(parser)
    action = next(a for a in parser._actions if a.dest == flag)
    stated = re.search(r"default: ([0-9.e-]+)", action.help)
    assert stated, action.help
    field = _FIELDS[flag]
    value = DemoConfig().warm_steps() if field == "warm_start_steps" else getattr(DemoConfig(), field)
    assert float(stated.group(1)) == value, action.help
    quick = re.search(r"--quick: ([0-9.e-]+)", action.help)
    quick_value = DemoConfig.quick().warm_steps() if field == "warm_start_steps" else getattr(DemoConfig.quick(), field)
    if quick:
        assert float(quick.group(1)) == quick_value, action.help
    else:
        assert quick_value == value, f"--{flag}: --quick changes it, and the help does not say so"
