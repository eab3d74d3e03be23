"""Plugin discovery and each hook, through the entry points of agentenv-testplugin (installed for the tests).

Each test builds a fresh ``Plugins()`` (never the cached ``plugins()``); broken plugins are in
test_plugin_isolation.py, wrappers and tracing in test_plugin_wrappers.py.
"""

from __future__ import annotations

import logging
from importlib.metadata import version

import pytest
from agentenv import load_bundle
from agentenv.cli.commands import _check
from agentenv.errors import PluginError
from agentenv.plugins import EnvKind, Plugins, Problem, RewardRule, VerifierKind, hookimpl

from tests.support import FAKE
from tests.support.bundles import copy_bundle, line_of, only_problem, patch, play, refused


@pytest.fixture
def events(monkeypatch):
    from agentenv_testplugin import good

    monkeypatch.setenv("AGENTENV_TESTPLUGIN_EVENTS", "1")
    good.EVENTS.clear()
    yield good.EVENTS
    good.EVENTS.clear()


def test_entry_point_plugins_are_loaded_with_their_distribution_version_and_hooks():
    infos = {i.name: i for i in Plugins().infos()}
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


def test_the_core_registers_its_built_ins_and_its_commands_first_as_two_plugins():
    infos = Plugins().infos()
    assert [(i.name, i.distribution) for i in infos[:2]] == [
        ("agentenv.cli.commands", "agentenv-core"),
        ("agentenv.engine.builtins", "agentenv-core"),
    ]
    assert infos[0].hooks == ("agentenv_cli_commands",)
    assert "agentenv_cli_commands" not in infos[1].hooks  # the registries never import the CLI


def test_a_registration_hook_is_called_when_its_records_are_first_needed():
    calls = []

    class Counted:
        @staticmethod
        @hookimpl
        def agentenv_reward_rules():
            calls.append("reward rules")
            yield RewardRule("counted", lambda scores, params: 1.0)

    loaded = Plugins(entry_points=False, extra=[("counted", Counted)])
    assert calls == []  # a plugin may import its heavy parts in its hooks: `agentenv --help` calls none of them
    assert "counted" in loaded.reward_rules()
    assert "counted" in loaded.reward_rules()
    assert calls == ["reward rules"]


def test_plugins_can_be_left_out_of_a_plugin_set():
    loaded = Plugins(entry_points=False)
    assert [i.name for i in loaded.infos()] == ["agentenv.cli.commands", "agentenv.engine.builtins"]
    assert "short" not in loaded.verifier_kinds()
    assert loaded.problems == []


async def test_hook_agentenv_env_kinds_adds_a_kind_a_bundle_can_use(tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    patch(bundle_dir / "bundle.yaml", "  ok:\n    kind: python", "  ok:\n    kind: test-python")
    bundle = load_bundle(bundle_dir, plugin_set=Plugins())
    assert bundle.envs["ok"].kind == "test-python"
    _, steps, result = await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    assert steps[0].text == "ping"
    assert (result.outcome, result.reward) == ("scored", 1.0)


def test_hook_agentenv_env_kinds_check_problems_are_said_at_the_sub_field_they_name(tmp_path):
    class Sized:
        @staticmethod
        @hookimpl
        def agentenv_env_kinds():
            def check(spec, bundle_dir):
                if not isinstance(spec.config.get("size"), int):
                    yield Problem(("config", "size"), "must be a whole number of slots (size: 8)")
                yield "has no door; say where it opens"  # a plain string: about the env as a whole

            yield EnvKind("sized", lambda spec, bundle_dir: None, check=check)

    (tmp_path / "bundle.yaml").write_text(
        "name: sized\nenvs:\n  box:\n    kind: sized\n    config:\n      size: big\ntasks: tasks/*.yaml\n"
    )
    error = refused(tmp_path, plugin_set=Plugins(entry_points=False, extra=[("sized", Sized)]))
    found = {(p.field, p.line, p.message) for p in error.problems if p.field.startswith("envs")}
    assert found == {
        ("envs.box.config.size", 6, "must be a whole number of slots (size: 8)"),
        ("envs.box", 3, "has no door; say where it opens"),
    }


@pytest.mark.parametrize(("reply", "score"), [("two words", 1.0), ("three words here", 0.0)])
async def test_hook_agentenv_verifier_kinds_adds_a_kind_a_task_can_use(tmp_path, reply, score):
    bundle_dir = copy_bundle(tmp_path)
    patch(
        bundle_dir / "tasks" / "two-turn.yaml", "kind: contains\n    answer: goodbye", "kind: short\n    max_words: 2"
    )
    bundle = load_bundle(bundle_dir, plugin_set=Plugins())
    _, _, result = await play(bundle, "two-turn", replies=["hello", reply])
    assert result.scores == {"answer-1": 1.0, "answer-2": score}


def test_hook_agentenv_verifier_kinds_check_problems_are_said_at_the_sub_field_they_name(tmp_path):
    class Limited:
        @staticmethod
        @hookimpl
        def agentenv_verifier_kinds():
            def check(params, bundle_dir):
                if not isinstance(params.get("limit"), int):
                    yield Problem(("limit",), "must be a whole number of words (limit: 20)")

            def build(params, bundle_dir):
                raise AssertionError("build runs only once check found nothing")

            yield VerifierKind("limited", build, check)

    bundle_dir = copy_bundle(tmp_path)
    task = bundle_dir / "tasks" / "two-turn.yaml"
    patch(task, "kind: contains\n    answer: goodbye", "kind: limited\n    limit: many")
    problem = only_problem(refused(bundle_dir, plugin_set=Plugins(entry_points=False, extra=[("limited", Limited)])))
    assert (problem.file, problem.field, problem.line) == (
        "tasks/two-turn.yaml",
        "turns[1].verifiers[0].limit",
        line_of(task, "limit: many"),
    )
    assert problem.message == "limited verifier 'answer-2': must be a whole number of words (limit: 20)"


async def test_hook_agentenv_verifier_kinds_an_object_with_an_async_call_is_awaited_on_the_loop(tmp_path):
    import asyncio

    class Judge:  # no marker attribute: an async __call__ is enough
        async def __call__(self, check):
            asyncio.get_running_loop()  # raises in a worker thread: it runs on the loop
            return check.reply == "goodbye"

    class Judging:
        @staticmethod
        @hookimpl
        def agentenv_verifier_kinds():
            yield VerifierKind("async-judge", lambda params, bundle_dir: Judge())

    bundle_dir = copy_bundle(tmp_path)
    patch(bundle_dir / "tasks" / "two-turn.yaml", "kind: contains\n    answer: goodbye", "kind: async-judge")
    bundle = load_bundle(bundle_dir, plugin_set=Plugins(entry_points=False, extra=[("judging", Judging)]))
    _, _, result = await play(bundle, "two-turn", replies=["hello", "goodbye"])
    assert (result.outcome, result.scores) == ("scored", {"answer-1": 1.0, "answer-2": 1.0})


async def test_hook_agentenv_task_sources_reads_tasks_from_elsewhere(tmp_path):
    (tmp_path / "bundle.yaml").write_text("name: generated\ntasks: {source: generated, count: 3}\n")
    bundle = load_bundle(tmp_path, plugin_set=Plugins())
    assert [t.id for t in bundle.tasks] == ["gen-0", "gen-1", "gen-2"]
    assert bundle.splits == ["train"]
    _, _, result = await play(bundle, "gen-1", replies=["1"])
    assert (result.outcome, result.reward) == ("scored", 1.0)


def test_an_unknown_task_source_is_refused_with_the_known_ones(tmp_path):
    (tmp_path / "bundle.yaml").write_text("name: nowhere\ntasks: {source: sql, table: tasks}\n")
    problem = only_problem(refused(tmp_path, plugin_set=Plugins()))
    assert (problem.file, problem.field, problem.line) == ("bundle.yaml", "tasks.source", 2)
    assert "unknown task source 'sql'; known: dataset, generated, harbor, yaml" in problem.message


@pytest.mark.parametrize(("replies", "reward"), [(("hello", "nope"), 0.0), (("hello", "goodbye"), 1.0)])
async def test_hook_agentenv_reward_rules_adds_a_rule_a_task_can_name(tmp_path, replies, reward):
    bundle_dir = copy_bundle(tmp_path)
    with open(bundle_dir / "tasks" / "two-turn.yaml", "a", encoding="utf-8") as f:
        f.write("reward: all-or-nothing\n")
    bundle = load_bundle(bundle_dir, plugin_set=Plugins())
    _, _, result = await play(bundle, "two-turn", replies=replies)
    assert (result.outcome, result.reward) == ("scored", reward)


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


def test_hook_agentenv_toolset_that_returns_no_toolset_refuses_the_load_naming_the_plugin():
    class Wrong:
        @staticmethod
        @hookimpl
        def agentenv_toolset(task, toolset):
            return {"bash": True}

    with pytest.raises(PluginError, match=r"plugin 'wrong' \(\(in process\)\) returned \{'bash': True\} from agen"):
        load_bundle(FAKE, plugin_set=Plugins(entry_points=False, extra=[("wrong", Wrong)]))


async def test_hook_agentenv_episode_started_and_finished_observe_each_episode_with_its_purpose(events):
    bundle = load_bundle(FAKE, plugin_set=Plugins())
    await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    await play(bundle, "deploy-fails", [("echo", {"text": "x"})])
    await play(bundle, "two-turn", replies=["hello"])
    assert events == [
        ("started", "echo", "play"),
        ("finished", "echo:scored", "play"),
        ("started", "deploy-fails", "play"),
        ("finished", "deploy-fails:failed", "play"),
        ("started", "two-turn", "play"),
        ("finished", "two-turn:unscored", "play"),
    ]


async def test_hook_agentenv_episode_started_sees_the_check_purpose_of_agentenv_check(events, tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    for task in (bundle_dir / "tasks").glob("*.yaml"):
        if task.name != "echo.yaml":
            task.unlink()
    await _check(load_bundle(bundle_dir, plugin_set=Plugins()), deploy_timeout=30)
    assert events == [("started", "echo", "check"), ("finished", "echo:unscored", "check")]


async def test_hook_agentenv_episode_finished_observer_that_raises_is_logged_and_the_others_still_see_it(
    events, caplog
):
    class Raises:  # registered before the test plugin: called first
        @staticmethod
        @hookimpl
        def agentenv_episode_finished(episode, result):
            raise RuntimeError("observer broke")

    bundle = load_bundle(FAKE, plugin_set=Plugins(extra=[("raises", Raises)]))
    with caplog.at_level(logging.ERROR, logger="agentenv.plugins"):
        _, _, result = await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    assert result.reward == 1.0
    assert "plugin 'raises' failed in agentenv_episode_finished (ignored)" in caplog.text
    assert ("finished", "echo:scored", "play") in events


def test_hook_agentenv_integrations_reads_the_range_from_the_extra_of_the_installed_distribution():
    integration = Plugins().integrations()["testtrainer"]
    assert (integration.package, integration.trainer) == ("agentenv-testplugin", "pluggy")
    assert integration.requirement == "pluggy>=1.0,<99"  # [project.optional-dependencies] testtrainer
    assert integration.supported == ">=1.0,<99"
    assert integration.installed_version() == version("pluggy")
    assert integration.check() == version("pluggy")
    with pytest.raises(ImportError) as info:
        integration.check("0.13.1")
    assert str(info.value) == (
        "agentenv-testplugin supports pluggy>=1.0,<99, but pluggy 0.13.1 is installed: "
        "pip install 'pluggy>=1.0,<99' (or pip install 'agentenv-testplugin[testtrainer]')"
    )
    assert integration.offers == {"thing": "pluggy:PluginManager"}


def test_an_integration_that_is_not_installed_is_an_error_with_the_install_command():
    with pytest.raises(
        PluginError, match=r"unknown integration 'nope'; known: .*Install it: pip install agentenv-nope"
    ):
        Plugins().integration("nope")


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
