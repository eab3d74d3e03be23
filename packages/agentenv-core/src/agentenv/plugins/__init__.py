"""Plugins: the hooks a plugin implements, the records its hooks yield, and the manager that loads them.

A plugin is a module with ``@hookimpl`` functions, registered under the ``agentenv`` entry-point group; ``plugins()``
loads every installed one once per process (``agentenv plugins`` lists them). The hook specifications are in
``hookspecs``; the records (``EnvKind``, ``VerifierKind``, ``AgentKind``, ...) in ``records``. An integration names the
trainer internals it leans on as ``Internal`` records (``internals.probe`` checks them).

The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

_EXPORTS = {
    "Plugins": "manager",
    "plugins": "manager",
    "reset_plugins": "manager",
    "NAME": "hookspecs",
    "SPEC_CLASSES": "hookspecs",
    "hookimpl": "hookspecs",
    "hookspec": "hookspecs",
    "AgentKind": "records",
    "CliCommand": "records",
    "EnvKind": "records",
    "Integration": "records",
    "ObservedEpisode": "records",
    "Problem": "records",
    "RewardRule": "records",
    "Sandbox": "records",
    "TaskSource": "records",
    "VerifierKind": "records",
    "PluginInfo": "checks",
    "PluginProblem": "checks",
    "resolve": "targets",
    "Internal": "internals",
    "MissingInternal": "internals",
}

__all__ = [
    "NAME",
    "SPEC_CLASSES",
    "AgentKind",
    "CliCommand",
    "EnvKind",
    "Integration",
    "Internal",
    "MissingInternal",
    "ObservedEpisode",
    "PluginInfo",
    "PluginProblem",
    "Plugins",
    "Problem",
    "RewardRule",
    "Sandbox",
    "TaskSource",
    "VerifierKind",
    "hookimpl",
    "hookspec",
    "internals",
    "plugins",
    "reset_plugins",
    "resolve",
]

if TYPE_CHECKING:
    from agentenv.plugins import internals
    from agentenv.plugins.checks import PluginInfo, PluginProblem
    from agentenv.plugins.hookspecs import NAME, SPEC_CLASSES, hookimpl, hookspec
    from agentenv.plugins.internals import Internal, MissingInternal
    from agentenv.plugins.manager import Plugins, plugins, reset_plugins
    from agentenv.plugins.records import (
        AgentKind,
        CliCommand,
        EnvKind,
        Integration,
        ObservedEpisode,
        Problem,
        RewardRule,
        Sandbox,
        TaskSource,
        VerifierKind,
    )
    from agentenv.plugins.targets import resolve


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
