"""agentenv's hooks: what each is for, what it gets, what it returns, an example.

A plugin is a module (or any object) with ``@hookimpl`` functions named after these hooks,
announced by an entry point in the ``agentenv`` group of its distribution::

    [project.entry-points.agentenv]
    kv = "agentenv_kv.plugin"

How agentenv calls them: always through pluggy's hook caller, so ``@hookimpl(wrapper=True)`` and
``@hookimpl(hookwrapper=True)`` work on every hook, and so do ``tryfirst``/``trylast`` and pluggy's
tracing (``plugins().manager.enable_tracing()``). Each plugin's implementation gets a call of its
own, with every wrapper around it: records are attributed to the plugin that yielded them, one
observer that raises does not keep the others from seeing the episode, and each
``agentenv_toolset`` sees the previous plugin's result. A wrapper therefore runs once per plugin that
implements the hook (and not at all when none does). A wrapper of a registration hook gets the
plugin's result as it was returned (often a generator): to read the records, read them into lists
and return those (``results = [list(r) for r in (yield)]``; old-style: ``outcome.force_result``).
Plugins are called in registration order (agentenv-core's built-ins, then plugins passed in
process, then entry points by name); ``tryfirst``/``trylast`` move one to the front or the back.
A registration hook is called once per process, when its records are first needed (``agentenv
--help`` calls only ``agentenv_cli_commands``): import what is heavy inside the hook, not at the
top of the plugin's module, which every ``agentenv`` command imports.

A plugin that fails to import, that pluggy refuses (a misspelt argument, a wrapper that does not
yield), that marks a function as a hookimpl of no hook here (or names one ``agentenv_...`` that is
none), whose registration hook raises or yields the wrong type, or that registers a name another
plugin already has, is left out whole (from the moment that is found, taking back what it had
registered): a command warns once on stderr when it finds it, ``agentenv plugins`` names it with
the fix, and everything else works. ``agentenv plugins --check`` calls every hook and exits 1 then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

import pluggy

if TYPE_CHECKING:
    from agentenv.plugins.records import (
        AgentKind,
        CliCommand,
        EnvKind,
        Integration,
        ObservedEpisode,
        RewardRule,
        Sandbox,
        TaskSource,
        VerifierKind,
    )
    from agentenv.specs import Task, Toolset
    from agentenv.wire import EpisodeResult

__all__ = ["NAME", "SPEC_CLASSES", "hookimpl", "hookspec"]

NAME: Final[str] = "agentenv"
hookspec: Final = pluggy.HookspecMarker(NAME)
hookimpl: Final = pluggy.HookimplMarker(NAME)


class TaskSpecs:
    """Hooks that define what a bundle can contain: env kinds, verifier kinds, task sources."""

    @hookspec
    def agentenv_env_kinds(self) -> Iterable[EnvKind]:
        """Register env kinds.

        What for: let bundles use ``kind: NAME`` for an env (a container, a remote sandbox, a store).

        Parameters: none.

        Returns: an iterable of ``EnvKind`` records (a generator is fine). A name that agentenv-core
        or an earlier plugin registered leaves this plugin out, naming both.

        Example::

            @hookimpl
            def agentenv_env_kinds():
                def check(spec, bundle_dir):
                    if "path" not in spec.config:
                        yield Problem(("config",), "missing 'path'; name the database file (config: {path: db.sqlite})")
                yield EnvKind(name="sqlite", create=lambda spec, bundle_dir: SqliteEnv(spec.config, bundle_dir),
                              check=check)
        """
        raise NotImplementedError

    @hookspec
    def agentenv_verifier_kinds(self) -> Iterable[VerifierKind]:
        """Register verifier kinds.

        What for: let tasks score a turn with ``kind: NAME`` (a unit-test runner, a rubric judge...).

        Parameters: none.

        Returns: an iterable of ``VerifierKind`` records.

        Example::

            @hookimpl
            def agentenv_verifier_kinds():
                def check(params, bundle_dir):
                    if not isinstance(params.get("max_words"), int):
                        yield Problem(("max_words",), "give the most words a reply may have (max_words: 20)")
                def build(params, bundle_dir):
                    return lambda check: len(check.reply.split()) <= params["max_words"]
                yield VerifierKind(name="short", build=build, check=check)
        """
        raise NotImplementedError

    @hookspec
    def agentenv_task_sources(self) -> Iterable[TaskSource]:
        """Register task sources.

        What for: read a bundle's tasks from somewhere other than YAML files
        (``tasks: {source: NAME, ...}`` in bundle.yaml).

        Parameters: none.

        Returns: an iterable of ``TaskSource`` records.

        Example::

            @hookimpl
            def agentenv_task_sources():
                def read(config, bundle_dir):
                    for i, line in enumerate((bundle_dir / config["path"]).read_text().splitlines()):
                        yield RawTask(json.loads(line), file=config["path"], lines={(): i + 1})
                yield TaskSource(name="jsonl", read=read)
        """
        raise NotImplementedError


class AgentSpecs:
    """Hooks that define the agents a task may deploy (its solver, its user simulator)."""

    @hookspec
    def agentenv_agent_kinds(self) -> Iterable[AgentKind]:
        """Register agent kinds.

        What for: let bundles deploy ``kind: NAME`` agents (a coding-agent CLI, a program in a sandbox) as a
        task's solver or user simulator; a harness integration launches them.

        Parameters: none.

        Returns: an iterable of ``AgentKind`` records: how to check an agent's spec, how to launch one turn
        of it (``launch(request)`` returns an ``agentenv.engine.agents.Launch``: argv, environment, files, where the
        reply is read), what it needs installed. A name that agentenv-core or an earlier plugin registered
        leaves this plugin out, naming both.

        Example::

            @hookimpl
            def agentenv_agent_kinds():
                def launch(request):
                    return Launch(argv=("my-agent", "--model", request.endpoint.model, request.prompt),
                                  env={"OPENAI_BASE_URL": request.endpoint.openai_base,
                                       "OPENAI_API_KEY": request.endpoint.api_key or "none"})
                yield AgentKind(name="my-agent", launch=launch)
        """
        raise NotImplementedError


class SandboxSpecs:
    """Hooks that add sandbox backends: what runs the programs the policy steers."""

    @hookspec
    def agentenv_sandboxes(self) -> Iterable[Sandbox]:
        """Register sandbox backends.

        What for: run ``bash`` commands, subprocess env programs and agents somewhere other than agentenv-core's
        ``bwrap`` (bubblewrap) or ``none`` (the explicit hole): a container engine, a microVM, a remote sandbox.
        A server picks one with ``agentenv serve --sandbox NAME`` or ``$AGENTENV_SANDBOX``.

        Parameters: none.

        Returns: an iterable of ``Sandbox`` records: a name and ``create()``, which returns an
        ``agentenv.sandbox.SandboxBackend`` (``problem()``: why it cannot run here, with the fix;
        ``describe()``: one line for the log; ``prepare(program)``: the argv, environment and folder
        ``agentenv.sandbox.procs.spawn`` runs for an ``agentenv.sandbox.Program``, its cleanup and which limit it hit).
        A name that agentenv-core or an earlier plugin registered leaves this plugin out, naming both.

        Example::

            @hookimpl
            def agentenv_sandboxes():
                class Firejail:
                    name = "firejail"
                    def problem(self):
                        return None if shutil.which("firejail") else "install firejail (apt-get install firejail)"
                    def describe(self):
                        return "firejail: its default profile, no network"
                    def prepare(self, program):
                        argv = ["firejail", "--quiet", "--net=none", "--", *program.argv]
                        return Prepared(argv, dict(program.env), program.cwd)
                yield Sandbox(name="firejail", create=Firejail, summary="firejail's default profile")
        """
        raise NotImplementedError


class ToolsetSpecs:
    """Hooks that change what a task offers the model."""

    @hookspec
    def agentenv_toolset(self, task: Task, toolset: Toolset) -> Toolset | None:
        """Change a task's toolset when its bundle loads.

        What for: offer bash everywhere, deny a dangerous tool across a bundle, swap a role.

        Parameters:
            task: the task as written (its ``toolset`` is the written one).
            toolset: the toolset so far: each plugin's call sees the previous plugin's result.

        Returns: a new ``Toolset`` (it is frozen: use ``model_copy(update=...)``), or None to leave
        it as it is. Toolset keys are computed after. Called once per task: keep it cheap.

        Example::

            @hookimpl
            def agentenv_toolset(task, toolset):
                if task.split == "train":
                    return toolset.model_copy(update={"bash": True})
        """
        raise NotImplementedError


class SessionSpecs:
    """Hooks that observe episodes (logging, metrics, tracing)."""

    @hookspec
    def agentenv_episode_started(self, episode: ObservedEpisode) -> None:
        """Observe an episode as it starts (before its deploy).

        What for: count episodes, start a trace span, log which task is played.

        Parameters:
            episode: the episode (an ``agentenv.Episode``; what to rely on is ``ObservedEpisode``):
                ``task``, ``episode_id`` and ``purpose`` are set. ``purpose`` says why it is
                played: ``"play"`` (a policy plays it: training, evaluation, ``agentenv play``),
                ``"check"`` (``agentenv check`` deploys it to see the env come up) or ``"probe"``
                (a client lists a toolset's tools, e.g. a dataset writer). Count only ``"play"``
                when you count what was trained on.

        Returns: nothing. An observer that raises is logged (naming its plugin) and ignored.

        Example::

            @hookimpl
            def agentenv_episode_started(episode):
                if episode.purpose == "play":
                    print("start", episode.task.id)
        """

    @hookspec
    def agentenv_episode_finished(self, episode: ObservedEpisode, result: EpisodeResult) -> None:
        """Observe an episode's result, after its teardown.

        What for: metrics per outcome, failure alerts, timing dashboards.

        Parameters:
            episode: the episode that ended (``episode.purpose``: see ``agentenv_episode_started``).
            result: its result (``outcome`` is scored, failed or unscored; a check or a probe ends
                unscored unless its env failed).

        Returns: nothing. An observer that raises is logged (naming its plugin) and ignored.

        Example::

            @hookimpl
            def agentenv_episode_finished(episode, result):
                if result.outcome == "failed":
                    print("env failure", episode.purpose, result.failure.kind, result.failure.stage)
        """


class RewardSpecs:
    """Hooks that add reward rules."""

    @hookspec
    def agentenv_reward_rules(self) -> Iterable[RewardRule]:
        """Register reward rules.

        What for: combine a task's turn scores your way (``reward: NAME`` in a task, or
        ``build_app(reward=NAME)``).

        Parameters: none.

        Returns: an iterable of ``RewardRule`` records.

        Example::

            @hookimpl
            def agentenv_reward_rules():
                yield RewardRule(name="all-or-nothing",
                                 combine=lambda scores, params: float(all(s >= 1 for s in scores.values())))
        """
        raise NotImplementedError


class IntegrationSpecs:
    """Hooks by which trainer integrations announce themselves."""

    @hookspec
    def agentenv_integrations(self) -> Iterable[Integration]:
        """Register a trainer integration.

        What for: ``agentenv plugins`` shows each integration's supported trainer range (read from
        its distribution's extra) against the installed trainer; ``Integration.check()`` is the
        range check an integration runs before it imports its trainer; writers find the objects an
        integration offers (a verl agent loop) here.

        Parameters: none.

        Returns: an iterable of ``Integration`` records. One whose range cannot be read (its
        distribution's extra does not name the trainer) leaves the plugin out.

        Example::

            @hookimpl
            def agentenv_integrations():
                yield Integration(name="verl", package="agentenv-verl", trainer="verl",
                                  offers={"agent_loop": "agentenv_verl.loop:AgentEnvAgentLoop"})
        """
        raise NotImplementedError


class CliSpecs:
    """Hooks that add ``agentenv`` subcommands."""

    @hookspec
    def agentenv_cli_commands(self) -> Iterable[CliCommand]:
        """Register ``agentenv`` subcommands.

        What for: integrations and plugins add their commands (``agentenv serve``, ``agentenv verl``).

        Parameters: none.

        Returns: an iterable of ``CliCommand`` records. ``run(args)`` returns the exit code; an
        ``AgentEnvError`` it raises is printed as ``error: MESSAGE`` and exits 2.

        Example::

            @hookimpl
            def agentenv_cli_commands():
                def configure(parser):
                    parser.add_argument("bundle")
                def run(args):
                    print(load_bundle(args.bundle).name)
                    return 0
                yield CliCommand(name="name", help="print a bundle's name", configure=configure, run=run)
        """
        raise NotImplementedError


SPEC_CLASSES: Final = (
    TaskSpecs,
    AgentSpecs,
    SandboxSpecs,
    ToolsetSpecs,
    SessionSpecs,
    RewardSpecs,
    IntegrationSpecs,
    CliSpecs,
)
