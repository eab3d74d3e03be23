"""Every hook is called through pluggy's hook caller: wrappers (new-style and old-style), tryfirst and tracing work."""

from __future__ import annotations

from agentenv import load_bundle
from agentenv.plugins import Plugins, VerifierKind, hookimpl

from tests.support import FAKE
from tests.support.bundles import copy_bundle, patch, play


def plugin_set(*plugins: type) -> Plugins:
    return Plugins(entry_points=False, extra=[(p.__name__.lower(), p) for p in plugins])


async def test_a_new_style_wrapper_of_agentenv_episode_finished_runs_around_the_observer():
    seen = []

    class Observer:
        @staticmethod
        @hookimpl
        def agentenv_episode_finished(episode, result):
            seen.append(("observer", result.outcome))

    class Wrapper:
        @staticmethod
        @hookimpl(wrapper=True)
        def agentenv_episode_finished(episode, result):
            seen.append(("before", episode.purpose))
            outcome = yield
            seen.append(("after", outcome))
            return outcome

    bundle = load_bundle(FAKE, plugin_set=plugin_set(Observer, Wrapper))
    await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    assert seen == [("before", "play"), ("observer", "scored"), ("after", [])]  # pluggy leaves out None results


async def test_an_old_style_hookwrapper_of_agentenv_episode_started_runs_around_the_observer():
    seen = []

    class Observer:
        @staticmethod
        @hookimpl
        def agentenv_episode_started(episode):
            seen.append("observer")

    class OldWrapper:
        @staticmethod
        @hookimpl(hookwrapper=True)
        def agentenv_episode_started(episode):
            seen.append("before")
            outcome = yield
            seen.append(f"after ({outcome.get_result()})")

    bundle = load_bundle(FAKE, plugin_set=plugin_set(Observer, OldWrapper))
    await play(bundle, "echo")
    assert seen == ["before", "observer", "after ([])"]


def test_a_wrapper_of_agentenv_verifier_kinds_sees_each_plugins_records_and_may_change_them():
    class Shouty:
        @staticmethod
        @hookimpl
        def agentenv_verifier_kinds():
            yield VerifierKind("shout", lambda params, bundle_dir: lambda check: check.reply.isupper())

    class Renamer:
        @staticmethod
        @hookimpl(wrapper=True)
        def agentenv_verifier_kinds():
            results = yield
            return [[VerifierKind(f"x-{k.name}", k.build) for k in records] for records in results]

    kinds = plugin_set(Shouty, Renamer).verifier_kinds()
    assert sorted(kinds) == ["x-contains", "x-exact", "x-judge", "x-python", "x-regex", "x-shout"]


def test_an_old_style_hookwrapper_of_agentenv_env_kinds_leaves_the_records_as_they_are():
    calls = []

    class Counter:
        @staticmethod
        @hookimpl(hookwrapper=True)
        def agentenv_env_kinds():
            calls.append("env kinds")
            yield

    assert set(plugin_set(Counter).env_kinds()) == {"bash", "python", "subprocess"}
    assert calls == ["env kinds"]  # once: only agentenv-core's built-ins implement it here


def test_a_wrapper_of_agentenv_toolset_runs_around_each_plugins_change(tmp_path):
    seen = []

    class Bash:
        @staticmethod
        @hookimpl
        def agentenv_toolset(task, toolset):
            return toolset.model_copy(update={"bash": True}) if task.id == "echo" else None

    class Watch:
        @staticmethod
        @hookimpl(wrapper=True)
        def agentenv_toolset(task, toolset):
            changed = yield
            if task.id == "echo":
                seen.append((toolset.bash, [t.bash for t in changed]))
            return changed

    bundle = load_bundle(FAKE, plugin_set=plugin_set(Bash, Watch))
    assert bundle.toolset(bundle.task("echo")).bash
    assert seen == [(False, [True])]


def test_tryfirst_runs_a_toolset_hook_before_those_registered_earlier(tmp_path):
    order = []

    class Early:
        @staticmethod
        @hookimpl
        def agentenv_toolset(task, toolset):
            order.append("early")

    class Late:
        @staticmethod
        @hookimpl(tryfirst=True)
        def agentenv_toolset(task, toolset):
            order.append("late, but tryfirst")

    bundle_dir = copy_bundle(tmp_path)
    for task in (bundle_dir / "tasks").glob("*.yaml"):
        if task.name != "echo.yaml":
            task.unlink()
    patch(bundle_dir / "bundle.yaml", "tasks: tasks/*.yaml", "tasks: tasks/echo.yaml")
    load_bundle(bundle_dir, plugin_set=plugin_set(Early, Late))
    assert order == ["late, but tryfirst", "early"]


async def test_hook_calls_are_seen_by_pluggys_call_monitoring():
    calls = []

    class Observer:
        @staticmethod
        @hookimpl
        def agentenv_episode_started(episode):
            pass

    loaded = plugin_set(Observer)
    bundle = load_bundle(FAKE, plugin_set=loaded)  # the registration hooks are called here
    undo = loaded.manager.add_hookcall_monitoring(
        lambda hook, impls, kwargs: calls.append((hook, [i.plugin_name for i in impls], sorted(kwargs))),
        lambda outcome, hook, impls, kwargs: None,
    )
    try:
        await play(bundle, "echo")
    finally:
        undo()
    assert calls == [("agentenv_episode_started", ["observer"], ["episode"])]
