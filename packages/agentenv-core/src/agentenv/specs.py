"""The typed parts of a bundle: env and agent specs, toolsets, turns, verifiers, reward rules, tasks.

Plain pydantic models and records that import nothing of agentenv's registries, so env kinds,
task sources and the session layer can use them without loading the plugin system.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "BASH_TOOL",
    "BUNDLE_FILE",
    "NAME_RULE",
    "POLICY",
    "AgentSandboxSpec",
    "AgentSpec",
    "BundleFile",
    "DeployStep",
    "EndpointSpec",
    "EnvSpec",
    "QASpec",
    "RewardSpec",
    "SandboxSpec",
    "SolutionCall",
    "SolutionTurn",
    "Task",
    "Toolset",
    "Turn",
    "VerifierSpec",
    "check_name",
]

BUNDLE_FILE = "bundle.yaml"
BASH_TOOL = "bash"
POLICY = "policy"  # a deploy step's endpoint: the model being trained (only a solver may call it)

# Task ids and split names name folders and files (an episode's scratch folder, OUT/<split>.parquet) and are
# printed to terminals: a '/', '..', a newline or an escape sequence in one must never get that far.
NAME_RULE = "ASCII letters, digits, '.', '_' and '-', at most 128 of them, starting with a letter or a digit"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(value: str, what: str, fix: str) -> str:
    """``value`` when it follows ``NAME_RULE``; else a ``ValueError`` naming ``what`` it is and the ``fix``."""
    if _NAME.fullmatch(value):
        return value
    shown = repr(value) if len(value) <= 60 else f"{value[:40]!r}... ({len(value):,} characters)"
    raise ValueError(f"{what} {shown} is not a name: use {NAME_RULE} (it names folders and files); {fix}")


class _Model(BaseModel):
    # a number where text belongs (an id, a prompt, a reply) is taken as its text: datasets and YAML
    # both write `answer: 42`, and refusing it would help nobody. A field's docstring is its description
    # (the bundle file reference on the docs site is generated from them).
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True, use_attribute_docstrings=True)


class SandboxSpec(_Model):
    """What a program the policy steers may reach and use (``sandbox:`` of a ``bash`` or subprocess env, or an
    agent); see "What the policy can reach" (docs/sandbox.md). A limit of ``null`` is no limit."""

    files: list[str] = Field(default_factory=list)
    """Bundle files and folders it may read (``[env.py, data/]``, relative to the bundle folder); it sees nothing
    else of the bundle (never its tasks or verifiers). A subprocess env also reads the files its command names, an
    agent the absolute paths its command names; neither ever the bundle folder itself or one above it."""
    write: list[str] = Field(default_factory=list)
    """Host files and folders a subprocess env or an agent may write, opened on purpose (absolute, or relative to
    the bundle folder; ``$NAME`` at the start is the value of a variable its ``pass_env`` names). A file that does
    not exist yet is made empty at start."""
    network: Literal["none", "host"] = "none"
    """``none``: only its own loopback; ``host``: the host's network, opened on purpose (it then reaches every
    loopback service of the host too)."""
    memory_mb: int | None = Field(default=2048, gt=0)
    """Memory of everything in its sandbox together, in MiB."""
    pids: int | None = Field(default=256, gt=0)
    """Processes and threads in its sandbox together (a fork bomb stops there)."""
    cpu_seconds: int | None = Field(default=600, gt=0)
    """CPU time of each process, in seconds."""
    file_mb: int | None = Field(default=1024, gt=0)
    """The largest file it may write, in MiB."""
    disk_mb: int | None = Field(default=2048, gt=0)
    """What each of its private folders (workdir, HOME, ``/tmp``) may hold, in MiB."""
    call_seconds: float | None = Field(default=30.0, gt=0)
    """``bash`` envs: the wall time of one command (keep it under the server's ``--tool-timeout``)."""
    output_chars: int = Field(default=16_000, gt=0)
    """``bash`` envs: the characters of a command's output its answer keeps."""

    def limits(self) -> Any:
        """These limits as an ``agentenv.sandbox.Limits``."""
        from agentenv.sandboxing import Limits

        return Limits(**self.model_dump(exclude={"files", "write", "network", "backend"}))


class AgentSandboxSpec(SandboxSpec):
    """An agent's ``sandbox:``: what a program's ``sandbox:`` says, and which sandbox backend runs it."""

    backend: str | None = None
    """The sandbox backend this agent runs in, whatever this process's is (``--sandbox``, ``$AGENTENV_SANDBOX``):
    ``docker`` (a container of its own, agentenv-docker), ``bwrap``, ``none`` or a plugin's; null: the process's.
    The bundle's choice, so a bundle can also weaken it (``none``): it is trusted code."""


class EnvSpec(BaseModel):
    """An env of a bundle: its kind, what to run, its config, and which tools each role gets.

    Fields other than these are the kind's own options (checked by the kind).
    """

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)

    name: str
    """The env's name: its key under ``envs``; toolsets name it."""
    kind: str = "python"
    """How the env runs: ``python`` (a class in this process), ``subprocess`` (a program speaking JSON
    lines), or a plugin's kind."""
    target: str | None = None
    """``python`` envs: the ``agentenv.Env`` subclass as ``module:Class``, imported from the bundle folder."""
    command: list[str] | None = None
    """``subprocess`` envs: the program and its arguments (``[python, env.py]``), run in the bundle folder."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Given to the env as it is deployed (``self.config``), e.g. the fixture file it loads."""
    roles: dict[str, list[str]] | None = None
    """Which tools each role gets (``assistant: [search, read_email]``); without it, every role gets every
    tool. A task's toolset picks a role."""
    pass_env: list[str] = Field(default_factory=list)
    """Variables of the server's environment its program gets (``pass_env: [DB_URL]``); a program starts
    from ``PATH``, ``LANG`` and its own ``HOME`` and ``TMPDIR`` only. Never an endpoint's ``key_var`` or the
    server's token variable. Not for ``python`` envs, which run in the server process."""
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)
    """``bash`` and ``subprocess`` envs: the files it may read, its network and its limits."""

    _check_names = field_validator("pass_env")(lambda cls, value: _variable_names(value))

    @property
    def options(self) -> dict[str, Any]:
        """The kind-specific fields."""
        return dict(self.model_extra or {})

    def canonical(self) -> dict[str, Any]:
        """A JSON-ready form, stable across processes (part of toolset keys: only what chooses tools)."""
        data = self.model_dump(mode="json", exclude={"pass_env", "sandbox"})
        return json.loads(json.dumps(data, sort_keys=True))


class AgentSpec(BaseModel):
    """An agent program a task may deploy (``agents:`` in bundle.yaml): its name, its kind, and the kind's fields.

    The kind (``process``, or a plugin's: ``claude-code``, ``codex``...) says how to launch it; fields other
    than ``name`` and ``kind`` are the kind's own options (checked by the kind).
    """

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)

    name: str
    """The agent's name: its key under ``agents``; deploy steps name it."""
    kind: str = "process"
    """How the agent runs: ``process`` (any program: ``command``, ``resume``, ``reply``, ``env``, ``dialect``),
    or a plugin's kind (agentenv-harness: ``claude-code``, ``codex``, ``opencode``, ``mini-swe-agent``)."""
    pass_env: list[str] = Field(default_factory=list)
    """Variables of the trainer's (or ``agentenv run``'s) environment the agent gets (``pass_env: [HTTPS_PROXY]``);
    it starts from ``PATH``, ``LANG``, its own ``HOME`` and ``TMPDIR`` and what its kind sets only. Never an
    endpoint's ``key_var`` or the server's token variable."""
    sandbox: AgentSandboxSpec = Field(default_factory=AgentSandboxSpec)
    """The files of the bundle it may read, its network (its model endpoint and MCP server are reachable with
    ``none``), its limits and the sandbox backend it runs in (``backend: docker``: a container)."""

    _check_names = field_validator("pass_env")(lambda cls, value: _variable_names(value))

    @property
    def options(self) -> dict[str, Any]:
        """The kind-specific fields."""
        return dict(self.model_extra or {})


_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _variable_names(names: list[str]) -> list[str]:
    for name in names:
        if not _VARIABLE.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable's name; write names such as DB_URL")
    return names


class EndpointSpec(_Model):
    """A model endpoint a deployed agent or a judge calls (never the model being trained)."""

    base_url: str
    """Its OpenAI-compatible base URL (``http://host:8000/v1``), or an Anthropic one with ``dialect: anthropic``."""
    model: str
    """The model's name at that endpoint."""
    key_var: str | None = None
    """The environment variable that holds its key, read when the endpoint is called (never stored)."""
    dialect: Literal["openai", "anthropic"] = "openai"
    """The API it speaks."""

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL; write base_url: http://host:port/v1")
        return value.rstrip("/")


class DeployStep(_Model):
    """What a task deploys: an agent in a role, against an endpoint."""

    role: Literal["solver", "user", "judge"] = "solver"
    """``solver`` plays the task (the only role that may call ``policy``); ``user`` simulates the user (it
    writes the solver's prompt after the first turn); ``judge`` names the endpoint the task's ``judge``
    verifiers ask (it deploys no agent)."""
    agent: str | None = None
    """The agent, by its name under ``agents`` (a solver or user step needs one; a judge step has none)."""
    endpoint: Literal["policy"] | EndpointSpec = POLICY
    """``policy`` (the model being trained, through the capture proxy) or a configured endpoint
    ``{base_url, model, key_var}``."""


class Toolset(_Model):
    """What a task offers the model: its envs' tools for ``role``, with per-env access changes.

    ``deny`` removes tools of an env from the role's set, ``allow`` adds tools the role would not
    otherwise get; ``bash`` offers a ``bash`` tool run in the episode's scratch folder.
    """

    envs: list[str] = Field(default_factory=list)
    """The envs (names under ``envs`` in bundle.yaml) whose tools the task offers; each is deployed per episode."""
    role: str = "agent"
    """The role whose tools each env offers (an env's ``roles``); envs without ``roles`` offer every tool."""
    deny: dict[str, list[str]] = Field(default_factory=dict)
    """Tools taken away, by env (``deny: {mail: [delete_email]}``)."""
    allow: dict[str, list[str]] = Field(default_factory=dict)
    """Tools added that the role would not get, by env."""
    bash: bool = False
    """Offer a ``bash`` tool, run in the episode's scratch folder."""


class VerifierSpec(BaseModel):
    """A verifier of a turn: its step id (``answer-1``), its kind and the kind's fields."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True, use_attribute_docstrings=True)

    id: str
    """The step id its score is recorded under (``answer-1``); unique within the task."""
    kind: str
    """The verifier kind (``regex``, ``exact``, ``contains``, ``python``, or a plugin's); its own fields go
    beside ``kind``."""

    @property
    def params(self) -> dict[str, Any]:
        """The kind's own fields."""
        return dict(self.model_extra or {})


class Turn(_Model):
    """One turn: the prompt the model gets and the verifiers that score its reply."""

    prompt: str
    """What the model is asked on this turn (a user message)."""
    verifiers: list[VerifierSpec] = Field(default_factory=list)
    """What scores the reply that ends the turn; a turn without verifiers is not scored."""

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; write the prompt the model gets on this turn")
        return value


class RewardSpec(_Model):
    """A reward rule by name with its parameters (``weights`` for ``weighted``)."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True, use_attribute_docstrings=True)

    rule: str = "mean"
    """How the turn scores make the reward: ``mean``, ``min``, ``last``, ``weighted`` (with ``weights`` by
    step id), or a plugin's rule. A task may write the name alone (``reward: min``)."""

    @property
    def params(self) -> dict[str, Any]:
        """The rule's own fields."""
        return dict(self.model_extra or {})


class SolutionCall(_Model):
    """A tool call of a reference solution."""

    tool: str
    """The tool's name."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Its arguments."""


class SolutionTurn(_Model):
    """A turn of a reference solution: the tool calls, then the reply."""

    calls: list[SolutionCall] = Field(default_factory=list)
    """The tool calls, in order."""
    reply: str = ""
    """The reply that ends the turn."""


class QASpec(_Model):
    """What the QA gate (``agentenv check --qa``) needs to know of a task beyond its reference solution."""

    stubs: list[str] = Field(default_factory=list)
    """Replies that do no work and must score at the floor (0), beside the gate's own (an empty reply, a reply
    with no tool call, the prompt said back, a regex verifier's pattern): say what a lazy policy would try."""
    tolerance: float = Field(default=0.0, ge=0.0, le=1.0)
    """How far two plays of the reference may score apart, step by step (a judged task's judge samples); also
    the most a stub may score. 0 unless declared: a deterministic verifier scores the same every time."""


class Task(_Model):
    """A task: id, split, system prompt, turns, toolset, reward rule, and a reference solution."""

    id: str
    """The task's id, unique in the bundle (``q-001``): ASCII letters, digits, ``.``, ``_`` and ``-``, at most 128,
    starting with a letter or a digit (ids name scratch folders)."""
    split: str
    """The split it belongs to (``train``, ``eval``...); one of bundle.yaml's ``splits`` when it lists them. A name
    as ids are (splits name files: ``OUT/train.parquet``)."""
    system: str = ""
    """The system prompt."""
    toolset: Toolset = Field(default_factory=Toolset)
    """What the model is offered: envs, role, access changes, bash."""
    turns: list[Turn] = Field(min_length=1)
    """The turns, in order (at least one): each a prompt and the verifiers of its reply."""
    reward: RewardSpec = Field(default_factory=RewardSpec)
    """How the turn scores make the episode's reward (``mean`` unless a rule is named)."""
    solution: list[SolutionTurn] | None = None
    """A reference solution, a turn each: ``agentenv play --reference`` plays it, warm starts learn from it."""
    deploy: list[DeployStep] = Field(default_factory=list)
    """The agents the task deploys (harness rollouts and ``agentenv run``): its solver, a user simulator, the
    endpoint of its judge."""
    qa: QASpec = Field(default_factory=QASpec)
    """What the QA gate needs beyond the solution: replies that must score 0 (``stubs``), and how far a judged
    task's scores may vary (``tolerance``)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Anything else to keep with the task (difficulty, source); agentenv does not read it."""

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_by_name(cls, value: Any) -> Any:
        return {"rule": value} if isinstance(value, str) else value

    @field_validator("id")
    @classmethod
    def _id_is_a_name(cls, value: str) -> str:
        fix = "rename it (in a dataset template, build it from columns that are names: id: 'gsm-{_row}')"
        return check_name(value, "task id", fix)

    @field_validator("split")
    @classmethod
    def _split_is_a_name(cls, value: str) -> str:
        return check_name(value, "split", "rename it (train, eval, test)")

    def deployed(self, role: str) -> DeployStep | None:
        """The task's deploy step of ``role`` (solver, user or judge), or None."""
        return next((step for step in self.deploy if step.role == role), None)

    @property
    def step_ids(self) -> list[str]:
        """Every verifier's step id, in turn order."""
        return [v.id for turn in self.turns for v in turn.verifiers]


class BundleFile(_Model):
    """``bundle.yaml``: the bundle's name, its envs and agents, where its tasks are, and their defaults.

    The loader reads the file field by field (so that each problem names its line); this model is its
    list of fields and their meaning.
    """

    name: str
    """The bundle's name (``inbox``); shown in logs, dataset sources and TRL's environment names."""
    description: str = ""
    """A line about the bundle."""
    envs: dict[str, EnvSpec] = Field(default_factory=dict)
    """The envs tasks may use, by name."""
    agents: dict[str, AgentSpec] = Field(default_factory=dict)
    """The agent programs tasks may deploy, by name (harness rollouts)."""
    tasks: str | list[str] | dict[str, Any]
    """Where the tasks are: a glob of task files (``tasks/*.yaml``), a list of globs, or a task source with
    its fields (``{source: dataset, path: data/*.jsonl, task: {...}}``)."""
    defaults: dict[str, Any] = Field(default_factory=dict)
    """Task fields every task gets unless it sets them (``system``, ``toolset``, ``reward``...)."""
    splits: list[str] | None = None
    """The bundle's splits; when given, a task in any other split is refused (a typo caught at load)."""
