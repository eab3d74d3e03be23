"""``agentenv demo``'s flags: each left out takes DemoConfig's default, and the help states that default."""

from __future__ import annotations

import argparse
import re

import pytest
from agentenv.errors import AgentEnvError
from agentenv_trl.cli import _FIELDS, configure_demo, demo_config
from agentenv_trl.demo import DemoConfig


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure_demo(parser)
    return parser.parse_args(argv)


def effective(config: DemoConfig, field: str) -> object:
    """The value a field takes in a run (warm-start steps and threads are resolved when the run starts)."""
    if field == "warm_start_steps":
        return config.warm_steps()
    if field == "learning_rate":
        return config.grpo_learning_rate()
    if field == "threads":
        return config.threads or 1  # the tiny model's
    return getattr(config, field)


def test_no_flags_is_the_default_config_and_quick_is_the_quick_one():
    assert demo_config(parse()) == DemoConfig()
    assert demo_config(parse("--quick")) == DemoConfig.quick()
    assert DemoConfig().warm_steps() == 1000 and DemoConfig(model="m").warm_steps() == 0
    assert DemoConfig().grpo_learning_rate() == 5e-4 and DemoConfig(model="m").grpo_learning_rate() == 1e-6


def test_the_default_trains_on_the_envs_reward_and_leaves_the_tiny_model_room_to_learn():
    config = DemoConfig()
    assert config.reward == "env"
    assert 0 < config.text_answers < 1  # the warm start answers in plain text (and scores 0) that often
    assert config.threads is None and config.output_dir is None


def test_flags_given_override_the_config_and_quick_alike():
    args = ("--steps", "3", "--learning-rate", "0.01", "--generations", "2", "--eval-generations", "6")
    more = ("--reward", "shuffled", "--text-answers", "0.25", "--threads", "2", "--seed", "4")
    for quick in ((), ("--quick",)):
        config = demo_config(parse(*args, *more, "--warm-start", "5", "--prompts-per-step", "1", *quick))
        assert (config.steps, config.learning_rate, config.num_generations, config.eval_generations) == (3, 0.01, 2, 6)
        assert (config.warm_steps(), config.prompts_per_step) == (5, 1)
        assert (config.reward, config.text_answers, config.threads, config.seed) == ("shuffled", 0.25, 2, 4)
    assert demo_config(parse("--quick", "--steps", "7")).hidden_size == DemoConfig.quick().hidden_size


def test_an_unknown_reward_source_is_refused_by_the_flag_and_the_config():
    with pytest.raises(SystemExit):
        parse("--reward", "random")
    with pytest.raises(AgentEnvError, match=r"reward='random': unknown; one of env, shuffled, constant \(--reward\)"):
        DemoConfig(reward="random")
    with pytest.raises(AgentEnvError, match=r"text_answers=1.0: a share in \[0, 1\) \(--text-answers\)"):
        DemoConfig(text_answers=1.0)


@pytest.mark.parametrize("flag", [f for f in _FIELDS if f not in ("bundle", "model", "output_dir")])
def test_the_help_states_the_defaults_the_config_has(flag):
    parser = argparse.ArgumentParser()
    configure_demo(parser)
    action = next(a for a in parser._actions if a.dest == flag)
    stated = re.search(r"default: ([\w.-]+)", action.help)
    assert stated, action.help
    field = _FIELDS[flag]
    value = effective(DemoConfig(), field)
    assert stated.group(1) == str(value) or float(stated.group(1)) == value, action.help
    quick = re.search(r"--quick: ([\w.-]+)", action.help)
    quick_value = effective(DemoConfig.quick(), field)
    if quick:
        assert float(quick.group(1)) == quick_value, action.help
    else:
        assert quick_value == value, f"--{flag}: --quick changes it, and the help does not say so"
