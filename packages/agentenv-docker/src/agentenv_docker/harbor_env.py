"""The ``harbor`` env kind and ``harbor`` verifier kind: a Harbor task's container, its ``bash`` tool, its tests.

The container is started at the task's setup step (its image is the task's, so a deploy that never sees the task
cannot start it): ``docker run`` of the task's image with ``--network none``, nothing pulled, its own entrypoint
replaced by ``sleep infinity`` as Harbor's own docker environment does, and labelled with its owner (``owners``)
so the owner's reaper removes it if the owner dies. A ``bash`` call is ``docker exec ... bash -c COMMAND`` in the
task's workdir, as Harbor runs an agent's commands. The verifier copies the task's ``tests/`` to ``/tests``, runs
the test script with its output in ``/logs/verifier/test-stdout.txt``, and reads the reward as Harbor's verifier
does: ``/logs/verifier/reward.json`` (its ``reward``, or its one value) if there, else ``reward.txt``. A missing
or unreadable reward is a broken verifier, Harbor's error too: the episode fails, never scored as 0.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from agentenv.engine import BASH, Check
from agentenv.env import Tool
from agentenv.errors import EnvCrashed, ToolError
from agentenv.plugins import EnvKind, Problem, VerifierKind
from agentenv.sandbox import procs
from agentenv.specs import BASH_TOOL, EnvSpec

from . import engine, owners

__all__ = ["HARBOR_ENV", "HARBOR_VERIFIER", "HarborEnv"]

TOOL: Final = Tool(
    BASH_TOOL, "Run a bash command in the task's container; returns its output and exit code.", BASH.parameters
)
OUTPUT_CHARS: Final[int] = 16_000
_CALL_SECONDS: Final[float] = 600.0  # a call's limit where task.toml gives no agent.timeout_sec
_REAPER: Final = (sys.executable, "-m", "agentenv_docker.owners")
_KEEP_ALIVE: Final[str] = "mkdir -p /logs/agent /logs/verifier; exec sleep infinity"  # as Harbor's compose file
_READ_REWARD: Final[str] = (
    "cd /logs/verifier; if [ -f reward.json ]; then head -c 65536 reward.json; printf '\\njson'; "
    "elif [ -f reward.txt ]; then head -c 65536 reward.txt; printf '\\ntxt'; else exit 3; fi"
)


class HarborEnv:
    """A Harbor task's container, one per episode (its tasks come from ``tasks: {source: harbor}``): the task's image
    started at the task's setup step with no network, and one tool, ``bash``, run in it with ``docker exec``."""

    def __init__(self, spec: EnvSpec, bundle_dir: Path) -> None:
        self.spec = spec
        self.bundle_dir = Path(bundle_dir)
        self.container: str | None = None
        self.harbor: dict[str, Any] = {}
        self.stopped: str | None = None  # why the container is gone for the rest of the episode (the policy's doing)

    def tools(self) -> list[Tool]:
        """The one tool, ``bash``."""
        return [TOOL]

    async def deploy(self) -> None:
        """Nothing to bring up before the task is known (its image is the task's)."""

    async def setup(self, task: Any) -> None:
        """Start the task's container (``task.metadata['harbor']``, written by the harbor task source)."""
        harbor = task.metadata.get("harbor")
        if not isinstance(harbor, dict) or "image" not in harbor:
            raise EnvCrashed(f"task {task.id!r} is no Harbor task (read it with tasks: {{source: harbor}})")
        self.harbor = harbor
        procs.at_owner_exit(_REAPER)
        name = f"agentenv-{uuid.uuid4().hex[:16]}"
        labels = {**owners.owner_labels(), "agentenv.env": self.spec.name, "agentenv.container": name}
        args = ["run", "-d", "--pull", "never", "--init", "--network", "none", "--name", name]
        args += ["--security-opt", "no-new-privileges", "--pids-limit", "1024"]
        if harbor.get("cpus"):
            args += ["--cpus", f"{float(harbor['cpus']):g}"]
        if harbor.get("memory_mb"):
            args += ["--memory", f"{int(harbor['memory_mb'])}m", "--memory-swap", f"{int(harbor['memory_mb'])}m"]
        for key, value in harbor.get("env", {}).items():
            args += ["-e", f"{key}={value}"]
        for key, value in labels.items():
            args += ["--label", f"{key}={value}"]
        args += ["--entrypoint", "sh", harbor["image"], "-c", _KEEP_ALIVE]
        self.container = name  # set before the run: a run that times out may still leave it, and teardown removes it
        started = await engine.arun(args, timeout=120)
        if not started.ok:
            fix = "; build it: agentenv image build BUNDLE" if "no such image" in started.err.lower() else ""
            what = f"the container of Harbor task {harbor['name']!r}"
            raise EnvCrashed(f"{what} did not start: {started.err.strip()}{fix}")

    async def exec(
        self, command: str, *, user: Any, seconds: float, env: Mapping[str, str] | None = None
    ) -> engine.Result:
        """Run ``command`` with ``bash -c`` in the container, killed past ``seconds``: its exit code, and in ``out``
        the first ``4 * OUTPUT_CHARS`` bytes of its stdout and stderr together (``err`` is the docker CLI's own)."""
        if self.container is None:
            raise EnvCrashed("the Harbor task's container is not started (its setup step did not run)")
        args = ["exec"]
        if self.harbor.get("workdir"):
            args += ["-w", str(self.harbor["workdir"])]
        if user is not None:
            args += ["-u", str(user)]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        # In the container: the command's own limit is timeout(1) (killing the docker CLI would leave it running);
        # its output goes to a file of which only the head comes back (a policy's `yes` must not fill this
        # process's memory), stderr with stdout, so the CLI's own stderr says only what docker says.
        limited = f"timeout -s KILL {seconds:g} bash -c {shlex.quote(command)}"
        shell = f'out=$(mktemp); {limited} >"$out" 2>&1; code=$?; head -c {4 * OUTPUT_CHARS} "$out"; rm -f "$out"'
        argv = [*args, self.container, "bash", "-c", f"{shell}; exit $code"]
        done = await engine.arun(argv, timeout=seconds + 30)
        if done.code != 0 and engine.unreachable(done.err):
            raise EnvCrashed(f"the Docker engine stopped answering: {done.err.strip()}. {engine.how_to_start()}")
        return done

    async def call(self, name: str, args: Mapping[str, Any]) -> str:
        """Run the ``bash`` tool: the command's output (stdout and stderr together) and its exit code."""
        if name != BASH_TOOL:
            raise ToolError(f"no tool {name!r}; this env's one tool is {BASH_TOOL!r}")
        if self.stopped is not None:
            raise ToolError(self.stopped)
        seconds = float(self.harbor.get("agent_timeout_sec") or _CALL_SECONDS)
        done = await self.exec(f"{args['command']}\n", user=self.harbor.get("agent_user"), seconds=seconds)
        await self._alive()
        text = done.out
        if len(text) > OUTPUT_CHARS:
            text = text[:OUTPUT_CHARS] + f"\n[output cut at {OUTPUT_CHARS} characters]"
        if done.code == 137:
            text += f"\n[killed: the command ran past its time limit ({seconds:g} s) or its memory]"
        return f"{text}\n[exit code {done.code}]"

    async def _alive(self) -> None:
        """After a call: a container that stopped was stopped by the call (its keep-alive killed, its memory limit
        hit), the policy's doing, so it is scored (``ToolError``, and the tests score 0), never a failure the policy
        could reach for to dodge a 0. An engine that stopped answering is the env's (``EnvCrashed``)."""
        assert self.container is not None
        state = await engine.arun(["container", "inspect", "--format", "{{.State.Running}}", self.container])
        if not state.ok and engine.unreachable(state.err):
            raise EnvCrashed(f"the Docker engine stopped answering: {state.err.strip()}. {engine.how_to_start()}")
        if not state.ok or state.out.strip() != "true":
            self.stopped = (
                f"this call stopped the container of Harbor task {self.harbor.get('name')!r} (its keep-alive process "
                "was killed, or its memory limit reached): the container is gone for the rest of this episode"
            )
            raise ToolError(self.stopped)

    async def run_tests(self) -> float:
        """Run the task's tests in the container and read the reward as Harbor's verifier does."""
        assert self.container is not None
        if self.stopped is not None:
            return 0.0  # the policy stopped the container: no test can pass in it
        harbor = self.harbor
        tests = (self.bundle_dir / harbor["dir"] / "tests").resolve()
        # stale rewards go first, as Harbor's verifier removes them: a reward the policy wrote is not the tests'
        reset = await self.exec("rm -rf /tests /logs/verifier && mkdir -m 777 -p /logs/verifier", user=0, seconds=60)
        copied = await engine.arun(["cp", f"{tests}/.", f"{self.container}:/tests"], timeout=120)
        script = shlex.quote(f"/tests/{harbor['test']}")
        executable = await self.exec(f"chmod +x {script}", user=0, seconds=60)  # as root, as Harbor's verifier does
        if not (reset.ok and copied.ok and executable.ok):
            why = f"{reset.out}{copied.err}{executable.out}".strip()
            raise EnvCrashed(f"could not copy the tests of Harbor task {harbor['name']!r} into its container: {why}")
        command = f"({script}) > /logs/verifier/test-stdout.txt 2>&1"
        seconds = float(harbor.get("verifier_timeout_sec") or _CALL_SECONDS)
        ran = await self.exec(command, user=harbor.get("verifier_user"), seconds=seconds, env=harbor["verifier_env"])
        if ran.code == 137:
            past = f"ran past verifier.timeout_sec ({seconds:g} s)"
            raise EnvCrashed(f"the tests of Harbor task {harbor['name']!r} {past}")
        found = await self.exec(_READ_REWARD, user=0, seconds=60)
        if not found.ok:
            tail = (await self.exec("tail -c 2000 /logs/verifier/test-stdout.txt", user=0, seconds=60)).out
            wrote = "wrote no reward (/logs/verifier/reward.txt or reward.json; Harbor refuses such a trial too)"
            raise EnvCrashed(f"the tests of Harbor task {harbor['name']!r} {wrote}; their output ends with:\n{tail}")
        return _reward(found.out, harbor["name"])

    async def teardown(self) -> None:
        """Remove the container (and its anonymous volumes)."""
        if self.container is not None:
            await engine.arun(["rm", "-f", "-v", self.container], timeout=60)
            self.container = None


def _reward(out: str, name: str) -> float:
    """The reward of what ``run_tests`` read (the file's text and then ``json`` or ``txt``)."""
    text, _, kind = out.rpartition("\n")
    try:
        value: Any = json.loads(text) if kind == "json" else float(text)
        if kind == "json" and isinstance(value, dict):
            value = value["reward"] if "reward" in value or len(value) != 1 else next(iter(value.values()))
    except (ValueError, KeyError) as exc:
        raise EnvCrashed(f"Harbor task {name!r}: the reward file cannot be read ({exc}): {text[:200]!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise EnvCrashed(f"Harbor task {name!r}: the reward {value!r} is not a finite number")
    return float(value)


def _check(spec: EnvSpec, bundle_dir: Path) -> list[Problem]:
    problems = [Problem((k,), "unknown field; a harbor env takes none: its tasks say it all") for k in spec.options]
    for field in ("target", "command"):
        if getattr(spec, field) is not None:
            problems.append(Problem((field,), f"a harbor env runs its task's image: it takes no {field!r}"))
    if not problems:
        try:
            engine.engine()
        except engine.EngineMissing as exc:
            problems.append(Problem((), f"kind 'harbor' needs a Docker engine: {exc}"))
    return problems


def _verifier(params: Mapping[str, Any], bundle_dir: Path) -> Any:
    """Runs the Harbor task's tests (``tests/test.sh``) in its container and reads the reward as Harbor does
    (``/logs/verifier/reward.json``, else ``reward.txt``); tests that write none fail the episode."""

    async def verify(check: Check) -> float:
        env = next((e for e in check.envs.values() if isinstance(e, HarborEnv)), None)
        if env is None:
            raise EnvCrashed("a harbor verifier needs the task's harbor env in its toolset (toolset: {envs: [harbor]})")
        return await env.run_tests()

    return verify


def _verifier_check(params: Mapping[str, Any], bundle_dir: Path) -> list[Problem]:
    return [Problem((k,), "unknown field; a harbor verifier takes none") for k in params]


HARBOR_ENV: Final[EnvKind] = EnvKind("harbor", HarborEnv, lambda spec, bundle_dir: [TOOL], _check)
HARBOR_VERIFIER: Final[VerifierKind] = VerifierKind("harbor", _verifier, _verifier_check)
