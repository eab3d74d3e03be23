"""agentenv-kv's hooks: what agentenv loads through the ``kv`` entry point (hook docs: ``agentenv.plugins.hookspecs``).

Each hook is a plain function marked with ``@hookimpl``; each registration hook yields typed records.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentenv import AgentEnvError, Check, EnvSpec, load_bundle
from agentenv.cli import table
from agentenv.plugins import CliCommand, EnvKind, ObservedEpisode, Problem, RewardRule, VerifierKind, hookimpl

from .store import KvStore

# --- the env kind: `kind: kv` ------------------------------------------------------------------


def _check_env(spec: EnvSpec, bundle_dir: Path) -> Iterator[Problem]:
    # each problem names the field it is about: a refusal then points at that field's line
    for field in ("target", "command"):
        if getattr(spec, field):
            yield Problem((field,), f"a kv env takes no {field}; give its data in config.seed")
    for name in sorted(spec.options):
        yield Problem((name,), "unknown field; a kv env takes config and roles")
    for name in sorted(set(spec.config) - {"seed"}):
        yield Problem(("config", name), "unknown field; a kv env's config has seed only")
    seed = spec.config.get("seed", {})
    if not isinstance(seed, dict):
        yield Problem(("config", "seed"), "must map keys to text (seed: {apples: '3'})")
        return
    for key, value in seed.items():
        if not isinstance(value, str):
            yield Problem(("config", "seed", key), f"must be text; quote it ({key}: '{value}')")


@hookimpl
def agentenv_env_kinds() -> Iterator[EnvKind]:
    yield EnvKind(
        "kv",
        create=lambda spec, bundle_dir: KvStore(spec.config, bundle_dir),
        describe=lambda spec, bundle_dir: KvStore.declared_tools(),  # known without an episode
        check=_check_env,
    )


# --- the verifier kind: `kind: kv-has` -----------------------------------------------------------


def _check_has(params: Mapping[str, Any], bundle_dir: Path) -> Iterator[Problem]:
    for name in sorted(set(params) - {"key", "value", "env"}):
        yield Problem((name,), "unknown field; a kv-has verifier takes key, value and env")
    if not isinstance(params.get("key"), str):
        yield Problem(("key",) if "key" in params else (), "give the key to look at (key: apples)")
    if "value" in params and not isinstance(params["value"], str):
        yield Problem(("value",), f"must be text; quote it (value: '{params['value']}')")


def _build_has(params: Mapping[str, Any], bundle_dir: Path) -> Any:
    key, value, env = params["key"], params.get("value"), params.get("env")

    async def verify(check: Check) -> bool:  # async: awaited on the event loop (a plain def runs in a thread)
        store = check.envs[env] if env else check.env
        if not isinstance(store, KvStore):
            raise TypeError(f"kv-has looks at a kv env; this task's env is {type(store).__name__}")
        return key in store.data if value is None else store.data.get(key) == value

    return verify


@hookimpl
def agentenv_verifier_kinds() -> Iterator[VerifierKind]:
    yield VerifierKind("kv-has", _build_has, _check_has)


# --- the reward rule: `reward: kv-all` ------------------------------------------------------------


@hookimpl
def agentenv_reward_rules() -> Iterator[RewardRule]:
    def check(params: Mapping[str, Any], step_ids: Sequence[str]) -> list[Problem]:
        return [Problem((name,), "unknown field; kv-all takes none") for name in params]

    yield RewardRule("kv-all", lambda scores, params: float(all(s >= 1.0 for s in scores.values())), check)


# --- the toolset change: `metadata: {kv_read_only: true}` -----------------------------------------


@hookimpl
def agentenv_toolset(task: Any, toolset: Any) -> Any:
    if not task.metadata.get("kv_read_only"):
        return None  # leave it as the previous plugin made it
    deny = {env: sorted({*toolset.deny.get(env, []), "put", "delete"}) for env in toolset.envs}
    return toolset.model_copy(update={"deny": {**toolset.deny, **deny}})


# --- the command: `agentenv kv BUNDLE` ------------------------------------------------------------


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="the bundle's folder")
    parser.add_argument("--env", help="only this kv env")


def _run(args: argparse.Namespace) -> int:
    bundle = load_bundle(args.bundle)  # a refused bundle raises BundleError: the CLI prints it, exit 2
    stores = {name: spec for name, spec in bundle.envs.items() if spec.kind == "kv"}
    if args.env is not None and args.env not in stores:
        raise AgentEnvError(f"--env {args.env}: no kv env of that name; the kv envs are {', '.join(stores) or 'none'}")
    rows = [
        (name, key, value)
        for name, spec in stores.items()
        if args.env in (None, name)
        for key, value in sorted(spec.config.get("seed", {}).items())
    ]
    print(table(rows, ("env", "key", "value")))
    return 0


@hookimpl
def agentenv_cli_commands() -> Iterator[CliCommand]:
    yield CliCommand("kv", "show the seed data of a bundle's kv envs", _configure, _run)


# --- the observers: one JSON line per episode in $AGENTENV_KV_LOG, with its wall time ----------------

_started: dict[str, float] = {}  # episode id -> when it started


@hookimpl
def agentenv_episode_started(episode: ObservedEpisode) -> None:
    _started[episode.episode_id] = time.monotonic()


@hookimpl
def agentenv_episode_finished(episode: ObservedEpisode, result: Any) -> None:
    began = _started.pop(episode.episode_id, None)
    path = os.environ.get("AGENTENV_KV_LOG")
    if path:
        line = {
            "task": episode.task.id,
            "purpose": episode.purpose,  # play, check or probe: count only "play" as trained on
            "outcome": result.outcome,
            "reward": result.reward,
            "seconds": None if began is None else round(time.monotonic() - began, 3),
        }
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")
