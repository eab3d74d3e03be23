"""agentenv-core's own plugin: the built-in env kinds, agent kind, verifier kinds, task sources, reward rules and
sandbox backends.

Registered first, by module name (``agentenv.plugins.BUILTINS``), so no plugin can take these names.
The built-in commands are a plugin of their own (``agentenv.cli.commands``): registries never import the CLI.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentenv.plugins.hookspecs import hookimpl
from agentenv.plugins.records import AgentKind, EnvKind, RewardRule, Sandbox, TaskSource, VerifierKind

# each hook imports its kinds when called: `agentenv --help` needs none of them


@hookimpl
def agentenv_env_kinds() -> Iterator[EnvKind]:
    from agentenv.engine.bash import BASH_KIND
    from agentenv.engine.envkinds import ENV_KINDS

    yield from ENV_KINDS
    yield BASH_KIND


@hookimpl
def agentenv_agent_kinds() -> Iterator[AgentKind]:
    from agentenv.engine.agents import process_check, process_launch, process_missing

    yield AgentKind("process", process_launch, process_check, process_missing)


@hookimpl
def agentenv_verifier_kinds() -> Iterator[VerifierKind]:
    from agentenv.engine.verifiers import VERIFIER_KINDS

    yield from VERIFIER_KINDS


@hookimpl
def agentenv_task_sources() -> Iterator[TaskSource]:
    from agentenv.bundle.dataset_tasks import read_dataset_tasks
    from agentenv.bundle.tasksources import read_yaml_tasks

    yield TaskSource("yaml", read_yaml_tasks)
    yield TaskSource("dataset", read_dataset_tasks)


@hookimpl
def agentenv_reward_rules() -> Iterator[RewardRule]:
    from agentenv.engine.verifiers import REWARD_RULES

    yield from REWARD_RULES


@hookimpl
def agentenv_sandboxes() -> Iterator[Sandbox]:
    from agentenv.sandbox.bwrap import BwrapBackend
    from agentenv.sandbox.nobox import NoSandbox

    yield Sandbox("bwrap", BwrapBackend, "bubblewrap: own mount, PID, user and network namespaces; cgroup limits")
    yield Sandbox("none", NoSandbox, "no sandbox (the explicit hole): programs run on the host")
