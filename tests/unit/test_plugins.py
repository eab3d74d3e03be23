"""Plugin discovery through the real entry points of agentenv-testplugin (installed in the test environment).

The misbehaving plugins of that distribution only misbehave when a variable asks them to; each test
sets it with monkeypatch and builds a fresh ``Plugins()`` (never the cached ``plugins()``).
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import version

import pytest
from agentenv import load_bundle
from agentenv.errors import PluginError
from agentenv.plugins import Plugins, RewardRule, VerifierKind, hookimpl

from tests.conftest import FAKE
from tests.unit.core_helpers import copy_bundle, patch, play

MISBEHAVING = ("agentenv_testplugin.broken", "agentenv_testplugin.dupe", "agentenv_testplugin.typo")


@pytest.fixture
def fresh_modules():
    """Forget the misbehaving plugin modules before and after, so their variables are read at import."""
    for name in MISBEHAVING:
        sys.modules.pop(name, None)
    yield
    for name in MISBEHAVING:
        sys.modules.pop(name, None)


@pytest.fixture
def events(monkeypatch):
    from agentenv_testplugin import good

    monkeypatch.setenv("AGENTENV_TESTPLUGIN_EVENTS", "1")
    good.EVENTS.clear()
    yield good.EVENTS
    good.EVENTS.clear()


def test_entry_point_plugins_are_loaded_with_their_distribution_version_and_hooks():
    infos = {i.name: i for i in Plugins().infos()}
    assert infos["agentenv-core"].distribution == "agentenv-core"
    good = infos["testplugin"]
    assert (good.distribution, good.version) == ("agentenv-testplugin", version("agentenv-testplugin"))
    assert set(good.hooks) == {
        "agentenv_env_kinds",
        "agentenv_verifier_kinds",
        "agentenv_task_sources",
        "agentenv_reward_rules",
        "agentenv_integrations",
        "agentenv_cli_commands",
        "agentenv_toolset",
        "agentenv_episode_started",
        "agentenv_episode_finished",
    }
    for integration in ("server", "trl", "verl", "harness"):
        assert infos[integration].distribution == f"agentenv-{integration}"


def test_plugins_can_be_left_out_of_a_plugin_set():
    assert [i.name for i in Plugins(entry_points=False).infos()] == ["agentenv-core"]
    assert "short" not in Plugins(entry_points=False).verifier_kinds()


async def test_hook_agentenv_env_kinds_adds_a_kind_a_bundle_can_use(tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    patch(bundle_dir / "bundle.yaml", "  ok:\n    kind: python", "  ok:\n    kind: test-python")
    bundle = load_bundle(bundle_dir, plugin_set=Plugins())
    assert bundle.envs["ok"].kind == "test-python"
    _, steps, result = await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    assert steps[0].text == "ping"
    assert (result.outcome, result.reward) == ("scored", 1.0)


@pytest.mark.parametrize(("reply", "score"), [("two words", 1.0), ("three words here", 0.0)])
async def test_hook_agentenv_verifier_kinds_adds_a_kind_a_task_can_use(tmp_path, reply, score):
    bundle_dir = copy_bundle(tmp_path)
    patch(
        bundle_dir / "tasks" / "two-turn.yaml", "kind: contains\n    answer: goodbye", "kind: short\n    max_words: 2"
    )
    bundle = load_bundle(bundle_dir, plugin_set=Plugins())
    _, _, result = await play(bundle, "two-turn", replies=["hello", reply])
    assert result.scores == {"answer-1": 1.0, "answer-2": score}


async def test_hook_agentenv_task_sources_reads_tasks_from_elsewhere(tmp_path):
    (tmp_path / "bundle.yaml").write_text("name: generated\ntasks: {source: generated, count: 3}\n")
    bundle = load_bundle(tmp_path, plugin_set=Plugins())
    assert [t.id for t in bundle.tasks] == ["gen-0", "gen-1", "gen-2"]
    assert bundle.splits == ["train"]
    _, _, result = await play(bundle, "gen-1", replies=["1"])
    assert (result.outcome, result.reward) == ("scored", 1.0)


def test_an_unknown_task_source_is_refused_with_the_known_ones(tmp_path):
    from tests.unit.core_helpers import only_problem, refused

    (tmp_path / "bundle.yaml").write_text("name: nowhere\ntasks: {source: sql, table: tasks}\n")
    problem = only_problem(refused(tmp_path, plugin_set=Plugins()))
    assert (problem.file, problem.field, problem.line) == ("bundle.yaml", "tasks.source", 2)
    assert "unknown task source 'sql'; known: dataset, generated, yaml" in problem.message


@pytest.mark.parametrize(("replies", "reward"), [(("hello", "nope"), 0.0), (("hello", "goodbye"), 1.0)])
async def test_hook_agentenv_reward_rules_adds_a_rule_a_task_can_name(tmp_path, replies, reward):
    bundle_dir = copy_bundle(tmp_path)
    with open(bundle_dir / "tasks" / "two-turn.yaml", "a", encoding="utf-8") as f:
        f.write("reward: all-or-nothing\n")
    bundle = load_bundle(bundle_dir, plugin_set=Plugins())
    _, _, result = await play(bundle, "two-turn", replies=replies)
    assert (result.outcome, result.reward) == ("scored", reward)


async def test_hook_agentenv_toolset_changes_a_tasks_toolset_and_its_key(tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    (bundle_dir / "tasks" / "echo-bash.yaml").write_text(
        (bundle_dir / "tasks" / "echo.yaml").read_text().replace("id: echo", "id: echo-bash")
        + "metadata: {testplugin_bash: true}\n"
    )
    bundle = load_bundle(bundle_dir, plugin_set=Plugins())
    assert bundle.toolset(bundle.task("echo-bash")).bash
    assert not bundle.task("echo-bash").toolset.bash  # the task as written is unchanged
    assert bundle.toolset_key(bundle.task("echo-bash")) == bundle.toolset_key(bundle.task("bash"))
    assert bundle.toolset_key(bundle.task("echo-bash")) != bundle.toolset_key(bundle.task("echo"))
    episode, _, _ = await play(bundle, "echo-bash")
    assert episode.tools[-1].name == "bash"


def test_hook_agentenv_toolset_runs_in_registration_order_each_seeing_the_previous_result(tmp_path):
    seen = []

    class NoBash:  # registered before the entry points: runs before the test plugin's hook
        @staticmethod
        @hookimpl
        def agentenv_toolset(task, toolset):
            seen.append(toolset.bash)
            return toolset.model_copy(update={"bash": False})

    bundle_dir = copy_bundle(tmp_path)
    patch(bundle_dir / "tasks" / "echo.yaml", "split: train", "split: train\nmetadata: {testplugin_bash: true}")
    bundle = load_bundle(bundle_dir, plugin_set=Plugins(extra=[("no-bash", NoBash)]))
    assert seen[bundle.tasks.index(bundle.task("echo"))] is False
    assert bundle.toolset(bundle.task("echo")).bash  # the test plugin's hook ran last


async def test_hook_agentenv_episode_started_and_finished_observe_each_episode(events):
    bundle = load_bundle(FAKE, plugin_set=Plugins())
    await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    await play(bundle, "deploy-fails", [("echo", {"text": "x"})])
    await play(bundle, "two-turn", replies=["hello"])
    assert events == [
        ("started", "echo"),
        ("finished", "echo:scored"),
        ("started", "deploy-fails"),
        ("finished", "deploy-fails:failed"),
        ("started", "two-turn"),
        ("finished", "two-turn:unscored"),
    ]


async def test_hook_agentenv_episode_finished_observer_that_raises_is_logged_and_ignored(caplog):
    class Raises:
        @staticmethod
        @hookimpl
        def agentenv_episode_finished(episode, result):
            raise RuntimeError("observer broke")

    bundle = load_bundle(FAKE, plugin_set=Plugins(extra=[("raises", Raises)]))
    with caplog.at_level(logging.ERROR, logger="agentenv.plugins"):
        _, _, result = await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    assert result.reward == 1.0
    assert "plugin 'raises' failed in agentenv_episode_finished (ignored)" in caplog.text


def test_hook_agentenv_integrations_yields_the_supported_range_checked_against_the_installed_trainer():
    integration = Plugins().integrations()["testtrainer"]
    assert (integration.distribution, integration.supported) == ("pluggy", ">=1.0,<99")
    assert integration.installed_version() == version("pluggy")
    assert integration.fits() is True
    assert integration.fits("0.13.1") is False
    assert integration.offers == {"thing": "pluggy:PluginManager"}


def test_an_integration_that_is_not_installed_is_an_error_with_the_install_command():
    with pytest.raises(
        PluginError, match=r"unknown integration 'nope'; known: .*Install it: pip install agentenv-nope"
    ):
        Plugins().integration("nope")


def test_a_plugin_that_fails_to_import_is_reported_by_name_and_the_others_load(monkeypatch, fresh_modules):
    monkeypatch.setenv("AGENTENV_TESTPLUGIN_BROKEN", "1")
    loaded = Plugins()
    assert [(e.name, e.distribution) for e in loaded.load_errors] == [("testplugin-broken", "agentenv-testplugin")]
    assert "ImportError: agentenv_testplugin.broken is broken on purpose" in str(loaded.load_errors[0])
    assert "plugin 'testplugin-broken' (from agentenv-testplugin) was not loaded" in str(loaded.load_errors[0])
    assert "testplugin-broken" not in {i.name for i in loaded.infos()}
    assert "short" in loaded.verifier_kinds()  # the good plugin of the same distribution still loads
    assert "serve" in loaded.cli_commands()


def test_two_plugins_registering_one_name_is_an_error_naming_both(monkeypatch):
    monkeypatch.setenv("AGENTENV_TESTPLUGIN_DUPE", "1")
    with pytest.raises(PluginError) as info:
        Plugins().verifier_kinds()
    message = str(info.value)
    assert "two plugins register the verifier kind 'short'" in message
    assert "'testplugin' (agentenv-testplugin" in message
    assert "'testplugin-dupe' (agentenv-testplugin" in message
    assert message.index("'testplugin' (") < message.index("'testplugin-dupe' (")  # in registration order
    assert "uninstall one of them or rename its verifier kind" in message


def test_a_plugin_registering_a_built_in_name_is_an_error_naming_the_core_too():
    class Regex:
        @staticmethod
        @hookimpl
        def agentenv_verifier_kinds():
            yield VerifierKind("regex", lambda params, bundle_dir: lambda check: 1.0)

    with pytest.raises(PluginError, match=r"'agentenv-core' \(agentenv-core [^)]*\) and 'my-regex' \(\(in process\)\)"):
        Plugins(entry_points=False, extra=[("my-regex", Regex)]).verifier_kinds()


def test_a_misspelt_hook_is_reported_with_the_hook_it_meant(monkeypatch, fresh_modules):
    monkeypatch.setenv("AGENTENV_TESTPLUGIN_TYPO", "1")
    loaded = Plugins()
    errors = [e for e in loaded.load_errors if e.name == "testplugin-typo"]
    assert len(errors) == 1
    assert "defines 'agentenv_verifier_kind' (did you mean 'agentenv_verifier_kinds'?)" in errors[0].error
    assert "which is no agentenv hook; rename it" in errors[0].error
    assert "short" in loaded.verifier_kinds()


def test_a_registration_hook_that_raises_is_reported_and_the_other_plugins_records_stay():
    class Raises:
        @staticmethod
        @hookimpl
        def agentenv_reward_rules():
            raise RuntimeError("no rules today")

    loaded = Plugins(entry_points=False, extra=[("raises", Raises)])
    assert {"mean", "min", "last", "weighted"} <= set(loaded.reward_rules())
    assert [e.name for e in loaded.load_errors] == ["raises"]
    assert "agentenv_reward_rules raised RuntimeError('no rules today')" in loaded.load_errors[0].error


def test_a_record_of_the_wrong_type_is_an_error_naming_the_plugin_and_the_type():
    class Wrong:
        @staticmethod
        @hookimpl
        def agentenv_reward_rules():
            yield {"name": "dict-rule"}

    with pytest.raises(PluginError, match=r"plugin 'wrong' yielded .* from agentenv_reward_rules; yield RewardRule"):
        Plugins(entry_points=False, extra=[("wrong", Wrong)]).reward_rules()


def test_an_in_process_plugin_adds_a_rule_a_task_can_name(tmp_path):
    class Half:
        @staticmethod
        @hookimpl
        def agentenv_reward_rules():
            yield RewardRule("half", lambda scores, params: 0.5)

    bundle_dir = copy_bundle(tmp_path)
    with open(bundle_dir / "tasks" / "two-turn.yaml", "a", encoding="utf-8") as f:
        f.write("reward: half\n")
    bundle = load_bundle(bundle_dir, plugin_set=Plugins(extra=[("half", Half)]))
    assert bundle.task("two-turn").reward.rule == "half"


def test_the_process_wide_plugins_are_loaded_once_and_reset_on_demand():
    from agentenv.plugins import plugins, reset_plugins

    first = plugins()
    assert plugins() is first
    reset_plugins()
    assert plugins() is not first


def test_the_test_plugin_is_installed_as_a_real_distribution():
    from importlib.metadata import distribution

    dist = distribution("agentenv-testplugin")
    names = {ep.name: ep.value for ep in dist.entry_points if ep.group == "agentenv"}
    assert names == {
        "testplugin": "agentenv_testplugin.good",
        "testplugin-broken": "agentenv_testplugin.broken",
        "testplugin-dupe": "agentenv_testplugin.dupe",
        "testplugin-typo": "agentenv_testplugin.typo",
    }
