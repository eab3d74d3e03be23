"""What a Harbor task may ask that agentenv does not honour: each refused at load, at its ``task.toml`` field.

A task is refused rather than run differently from what its author meant (a GPU job on the CPU, a task that needs
the network with none): its reward would mean something else. Fields that do not change what a reward means are
read or left alone, as docs/bundles.md says.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from agentenv.errors import BundleProblem

__all__ = ["refusals"]

_TEMPLATE = re.compile(r"\$\{")
_NO_NETWORK = "no-network"


def refusals(task: Any, shown: str) -> Iterator[BundleProblem]:
    """Each field of Harbor task ``task`` (its ``task.toml`` shown as ``shown``) that agentenv cannot honour."""
    name = task.name
    config = task.config
    environment = config.environment

    def refuse(field: str, what: str, fix: str) -> BundleProblem:
        return BundleProblem(shown, field, f"Harbor task {name!r} asks for {what}, which agentenv cannot give; {fix}")

    if environment.os.value != "linux":
        yield refuse("environment.os", f"a {environment.os.value} container", "only Linux containers run here")
    if environment.gpus:
        yield refuse("environment.gpus", f"{environment.gpus} GPU(s)", "remove it; container envs get no GPU")
    if environment.gpu_types:
        yield refuse("environment.gpu_types", "GPU types", "remove it; container envs get no GPU")
    if environment.tpu is not None:
        yield refuse("environment.tpu", "a TPU slice", "remove it; container envs get no accelerator")
    for section, policy in (("environment", environment), ("agent", config.agent), ("verifier", config.verifier)):
        mode = getattr(policy.network_mode, "value", policy.network_mode)
        if "network_mode" in policy.model_fields_set and mode not in (None, _NO_NETWORK):
            fix = "set network_mode = 'no-network' (every agentenv container runs with --network none)"
            yield refuse(f"{section}.network_mode", f"network access ({mode!r})", fix)
    if environment.docker_image:
        fix = "write environment/Dockerfile FROM an image on this machine's engine instead (no registry is asked)"
        yield refuse("environment.docker_image", f"the prebuilt image {environment.docker_image!r}", fix)
    yield from _files(task, refuse)
    if environment.mcp_servers:
        yield refuse("environment.mcp_servers", "MCP servers", "remove them; the policy's tools are the env's")
    if environment.healthcheck is not None:
        yield refuse("environment.healthcheck", "a healthcheck", "remove it; start what the task needs in solve/tests")
    if environment.skills_dir:
        yield refuse("environment.skills_dir", "agent skills", "remove it; agentenv's agents get no skills folder")
    if config.steps:
        yield refuse("steps", "a multi-step task", "write one task per step (the harbor source reads single-step ones)")
    verifier = config.verifier
    if verifier.environment is not None or getattr(verifier.environment_mode, "value", None) == "separate":
        yield refuse("verifier.environment", "a separate verifier container", "run the tests in the task's container")
    if verifier.collect:
        yield refuse("verifier.collect", "collect commands", "remove them; the tests run in the task's container")
    for section, values in (
        ("environment.env", environment.env),
        ("verifier.env", verifier.env),
        ("solution.env", config.solution.env),
    ):
        for key, value in values.items():
            if _TEMPLATE.search(value):
                fix = "give the value itself (a container sees nothing of the server's environment)"
                yield refuse(f"{section}.{key}", f"a value from the host's environment ({value!r})", fix)


def _files(task: Any, refuse: Any) -> Iterator[BundleProblem]:
    environment = task.paths.environment_dir
    for compose in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        if (environment / compose).is_file():
            fix = "give the task one container, built from environment/Dockerfile"
            yield refuse(f"environment/{compose}", "a compose environment (several services)", fix)
            return
    if not (environment / "Dockerfile").is_file():
        yield refuse("environment/Dockerfile", "an environment without a Dockerfile", "write environment/Dockerfile")
