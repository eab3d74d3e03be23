"""A plugin that cannot be used is left out whole, named with the fix; every other plugin keeps working."""

from __future__ import annotations

import logging
import sys
from importlib.metadata import version

import pytest
from agentenv import load_bundle
from agentenv.errors import PluginError
from agentenv.plugins import EnvKind, Integration, Plugins, RewardRule, VerifierKind, hookimpl, plugins, reset_plugins

from tests.support import FAKE
from tests.support.bundles import play

MISBEHAVING = ("agentenv_testplugin.broken", "agentenv_testplugin.dupe", "agentenv_testplugin.typo")


@pytest.fixture
def fresh_modules():
    """Forget the misbehaving plugin modules before and after, so their variables are read at import."""
    for name in MISBEHAVING:
        sys.modules.pop(name, None)
    yield
    for name in MISBEHAVING:
        sys.modules.pop(name, None)


def only(loaded: Plugins, extra: type) -> Plugins:
    """``loaded`` must have left out exactly ``extra`` (registered in process as its lowercase name)."""
    assert [p.plugin for p in loaded.problems] == [extra.__name__.lower()], loaded.problems
    assert extra.__name__.lower() not in {i.name for i in loaded.infos()}
    assert {"python", "subprocess"} <= set(loaded.env_kinds())  # the built-ins work
    return loaded


def left_out(*plugins_: type) -> Plugins:
    """The built-ins and ``plugins_`` (in process), with every registration hook called."""
    loaded = Plugins(entry_points=False, extra=[(p.__name__.lower(), p) for p in plugins_])
    loaded.collect()
    return loaded


def test_a_plugin_that_fails_to_import_is_left_out_by_name_and_the_others_load(monkeypatch, fresh_modules):
    monkeypatch.setenv("AGENTENV_TESTPLUGIN_BROKEN", "1")
    loaded = Plugins()
    assert [(p.plugin, p.distribution) for p in loaded.problems] == [("testplugin-broken", "agentenv-testplugin")]
    said = str(loaded.problems[0])
    assert said.startswith("plugin 'testplugin-broken' (agentenv-testplugin 0.0.1) was left out: importing ")
    assert "ImportError: agentenv_testplugin.broken is broken on purpose; fix the import, or uninstall" in said
    assert "testplugin-broken" not in {i.name for i in loaded.infos()}
    assert "short" in loaded.verifier_kinds()  # the good plugin of the same distribution still loads
    assert "serve" in loaded.cli_commands()


def test_a_hookimpl_with_a_misspelt_argument_is_left_out_with_the_hooks_arguments():
    class Results:
        @staticmethod
        @hookimpl
        def agentenv_episode_finished(episode, results):
            pass

    problem = only(left_out(Results), Results).problems[0]
    assert problem.error == "its agentenv_episode_finished takes 'results', which the hook does not pass"
    assert problem.fix == "write def agentenv_episode_finished(episode, result) (any of those arguments, by name)"


def test_a_hookimpl_named_like_no_hook_is_left_out_with_the_hook_it_meant():
    class Swapped:
        @staticmethod
        @hookimpl
        def agentevn_env_kinds():
            yield EnvKind("swapped", lambda spec, bundle_dir: None)

        @staticmethod
        @hookimpl
        def agentenv_reward_rules():  # a correct hook of the same plugin goes too: the plugin is left out whole
            yield RewardRule("swapped", lambda scores, params: 1.0)

    loaded = only(left_out(Swapped), Swapped)
    assert loaded.problems[0].error == (
        "its hookimpl 'agentevn_env_kinds' implements no agentenv hook (did you mean 'agentenv_env_kinds'?)"
    )
    assert "swapped" not in loaded.reward_rules()


def test_a_misspelt_unmarked_hook_is_left_out_with_the_hook_it_meant(monkeypatch, fresh_modules):
    monkeypatch.setenv("AGENTENV_TESTPLUGIN_TYPO", "1")
    loaded = Plugins()
    problem = next(p for p in loaded.problems if p.plugin == "testplugin-typo")
    assert problem.error == "'agentenv_verifier_kind' is no agentenv hook (did you mean 'agentenv_verifier_kinds'?)"
    assert problem.fix == "rename it"
    assert "short" in loaded.verifier_kinds()


def test_a_hook_not_marked_as_a_hookimpl_is_left_out_with_the_fix():
    class Unmarked:
        @staticmethod
        def agentenv_reward_rules():
            yield RewardRule("unmarked", lambda scores, params: 1.0)

    problem = only(left_out(Unmarked), Unmarked).problems[0]
    assert (problem.error, problem.fix) == (
        "agentenv_reward_rules is not marked as a hook",
        "decorate it with @agentenv.plugins.hookimpl",
    )


def test_a_wrapper_that_does_not_yield_is_left_out_as_pluggy_refuses_it():
    class NoYield:
        @staticmethod
        @hookimpl(wrapper=True)
        def agentenv_episode_started(episode):
            return None

    problem = only(left_out(NoYield), NoYield).problems[0]
    assert problem.error.startswith("pluggy refused it: Plugin 'noyield' for hook 'agentenv_episode_started'")
    assert "not a generator function" in problem.error


def test_a_plugin_registering_a_name_another_plugin_has_is_left_out_naming_both(monkeypatch, fresh_modules):
    from agentenv_testplugin import good

    monkeypatch.setenv("AGENTENV_TESTPLUGIN_DUPE", "1")
    loaded = Plugins()
    assert loaded.problems == []  # found when the verifier kinds are first needed
    assert "short" in loaded.verifier_kinds()
    assert [p.plugin for p in loaded.problems] == ["testplugin-dupe"]  # the later one, by entry point name
    problem = loaded.problems[0]
    assert problem.error == (
        "it registers a name already taken: the verifier kind 'short' is registered by 'testplugin' "
        f"(agentenv-testplugin {version('agentenv-testplugin')})"
    )
    assert problem.fix == "rename its verifier kind, or uninstall one of the two"
    assert loaded.verifier_kinds()["short"].build.__module__ == good.__name__  # the first one keeps the name


async def test_a_plugin_left_out_is_not_called_for_its_other_hooks(monkeypatch, fresh_modules):
    from agentenv_testplugin.good import EVENTS

    monkeypatch.setenv("AGENTENV_TESTPLUGIN_DUPE", "1")
    monkeypatch.setenv("AGENTENV_TESTPLUGIN_EVENTS", "1")
    EVENTS.clear()
    bundle = load_bundle(FAKE, plugin_set=Plugins())
    await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    assert [e[0] for e in EVENTS] == ["started", "finished"]  # testplugin-dupe's observer never ran
    EVENTS.clear()


def test_a_plugin_registering_a_built_in_name_is_left_out_and_the_built_in_stays():
    class Regex:
        @staticmethod
        @hookimpl
        def agentenv_verifier_kinds():
            yield VerifierKind("regex", lambda params, bundle_dir: lambda check: 1.0)

    loaded = only(left_out(Regex), Regex)
    assert loaded.problems[0].error == (
        "it registers a name already taken: the verifier kind 'regex' is registered by "
        f"'agentenv.engine.builtins' (agentenv-core {loaded.infos()[0].version})"
    )
    assert loaded.problems[0].fix == "rename its verifier kind (a built-in name is never replaced)"
    assert loaded.verifier_kinds()["regex"].build.__module__ == "agentenv.engine.verifiers"


def test_a_registration_hook_that_raises_leaves_its_plugin_out_and_the_others_records_stay():
    class Raises:
        @staticmethod
        @hookimpl
        def agentenv_reward_rules():
            raise RuntimeError("no rules today")

    loaded = only(left_out(Raises), Raises)
    assert {"mean", "min", "last", "weighted"} <= set(loaded.reward_rules())
    assert loaded.problems[0].error == "its agentenv_reward_rules raised RuntimeError: no rules today"


def test_a_record_of_the_wrong_type_leaves_its_plugin_out_naming_the_type():
    class Wrong:
        @staticmethod
        @hookimpl
        def agentenv_reward_rules():
            yield {"name": "dict-rule"}

    problem = only(left_out(Wrong), Wrong).problems[0]
    assert problem.error == "its agentenv_reward_rules yielded {'name': 'dict-rule'}"
    assert problem.fix == "yield RewardRule records (from agentenv.plugins import RewardRule)"


def test_an_integration_whose_distribution_declares_no_range_leaves_its_plugin_out_with_the_fix():
    class Unranged:
        @staticmethod
        @hookimpl
        def agentenv_integrations():
            yield Integration("unranged", package="agentenv-core", trainer="unranged")

    problem = only(left_out(Unranged), Unranged).problems[0]
    assert problem.error == (
        "its integration 'unranged' has no readable trainer range: agentenv-core's extra 'unranged' does not "
        "name unranged: declare the range once in agentenv-core's pyproject.toml: "
        '[project.optional-dependencies] unranged = ["unranged>=X,<Y"]'
    )


def test_a_lookup_of_an_unknown_name_mentions_the_plugins_left_out():
    class Raises:
        @staticmethod
        @hookimpl
        def agentenv_reward_rules():
            raise RuntimeError("no rules today")

    with pytest.raises(PluginError) as info:
        left_out(Raises).reward_rule("fancy")
    assert str(info.value).endswith(
        "install the plugin that provides it. (plugin 'raises' left out: see agentenv plugins)"
    )


def test_the_process_wide_plugins_warn_once_for_each_plugin_left_out(monkeypatch, fresh_modules, caplog):
    monkeypatch.setenv("AGENTENV_TESTPLUGIN_BROKEN", "1")
    reset_plugins()
    try:
        with caplog.at_level(logging.WARNING, logger="agentenv.plugins"):
            plugins()
            plugins()
            load_bundle(FAKE)
    finally:
        reset_plugins()
    warned = [r.getMessage() for r in caplog.records if "testplugin-broken" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].startswith("plugin 'testplugin-broken' (agentenv-testplugin 0.0.1) was left out")


def test_a_plugin_left_out_late_loses_what_it_registered_for_hooks_called_before():
    class Greedy:
        @staticmethod
        @hookimpl
        def agentenv_reward_rules():
            yield RewardRule("greedy", lambda scores, params: 1.0)

        @staticmethod
        @hookimpl
        def agentenv_verifier_kinds():
            yield VerifierKind("exact", lambda params, bundle_dir: lambda check: 1.0)  # a built-in name

    loaded = Plugins(entry_points=False, extra=[("greedy", Greedy)])
    assert "greedy" in loaded.reward_rules()
    assert loaded.verifier_kinds()["exact"].build.__module__ == "agentenv.engine.verifiers"
    assert [p.plugin for p in loaded.problems] == ["greedy"]
    assert "greedy" not in loaded.reward_rules()  # left out whole
