"""Test sessions. ``uvx nox`` runs the default ones (what CI runs); the README's table says what each covers.

Trainer sessions install the trainer at each version of the matrix (tools/matrix.py: every version the
package index has inside the declared range) next to the workspace packages, with the CPU build of
torch: the ``torch-2.13.0+cpu`` wheel when a find-links folder has it (``$UV_FIND_LINKS`` or
``$PIP_FIND_LINKS``), else PyTorch's CPU index. A plain ``torch`` from the default index is a multi-GB
CUDA build; no session ever installs it.
"""

from __future__ import annotations

import glob
import os
import sys
import tomllib
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from tools.matrix import MATRIX  # the version matrix, kept as data

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "unit", "docs", "faults", "trl", "verl", "ray", "harness", "lowest", "release"]

ROOT = Path(__file__).parent
TORCH = "2.13.0"
# the trainer versions each integration is tested against: every version of its range, lowest first
TRL_VERSIONS = list(MATRIX["trl"].versions)
VERL_VERSIONS = list(MATRIX["verl"].versions)
HARNESS_TRL_VERSIONS = list(MATRIX["harness-trl"].versions)
OPENENV_VERSIONS = list(MATRIX["openenv"].versions)
# the coding-agent CLIs the harness tier runs for real, each at a pinned version (npm packages)
AGENT_CLIS = ["@anthropic-ai/claude-code@2.1.332", "opencode-ai@1.18.33"]
MKDOCS_QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}  # banners, not warnings
PYTEST = ["pytest", "-p", "no:cacheprovider"]


def _sync(session: nox.Session, *groups: str, extras: tuple[str, ...] = ()) -> None:
    """Install the workspace (every package, editable), dependency groups and package extras from uv.lock."""
    args = ["uv", "sync", "--frozen", "--all-packages", "--inexact"]
    for group in groups:
        args += ["--group", group]
    for extra in extras:
        args += ["--extra", extra]
    session.run_install(*args, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location}, silent=True)


def _torch_cpu(session: nox.Session) -> list[str]:
    """``uv pip install`` arguments for torch: the CPU build from a local folder or an index the environment
    names, else what the default index serves (on Linux a CUDA build, several GB)."""
    for folder in filter(None, [os.environ.get("UV_FIND_LINKS"), os.environ.get("PIP_FIND_LINKS")]):
        for path in folder.split():
            if glob.glob(os.path.join(path, f"torch-{TORCH}+cpu-*.whl")):
                return [f"torch=={TORCH}+cpu", "--find-links", path]
    index = os.environ.get("AGENTENV_TORCH_INDEX")
    if index:  # PyTorch's CPU wheel index, say, next to the default one (uv keeps the default; it needs no argument)
        return [f"torch=={TORCH}", "--extra-index-url", index, "--index-strategy", "unsafe-best-match"]
    session.log(
        f"no torch {TORCH}+cpu wheel in $UV_FIND_LINKS or $PIP_FIND_LINKS, and $AGENTENV_TORCH_INDEX is not set: "
        "installing torch from the default index (on Linux its CUDA build). For the CPU build, set "
        "AGENTENV_TORCH_INDEX to PyTorch's CPU wheel index (pytorch.org's install selector shows it)"
    )
    return [f"torch=={TORCH}"]


def _pip(session: nox.Session, *args: str) -> None:
    session.run_install("uv", "pip", "install", "--python", session.virtualenv.location, *args, silent=True)


def _xdist(session: nox.Session) -> list[str]:
    return ["-n", os.environ.get("AGENTENV_TEST_WORKERS", "2")]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and format check."""
    _sync(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def unit(session: nox.Session) -> None:
    """tests/unit: core, server, session layer and writers; no trainer installed."""
    _sync(session, "test")
    session.run(*PYTEST, "tests/unit", *_xdist(session), *session.posargs)


@nox.session
def faults(session: nox.Session) -> None:
    """tests/faults: the fault matrix against real `agentenv serve` processes (and a trainer running AgentEnv.local,
    so TRL is installed: its newest supported version)."""
    _sync(session, "test")
    _pip(session, f"trl=={TRL_VERSIONS[-1]}", *_torch_cpu(session))
    session.run(*PYTEST, "tests/faults", *_xdist(session), *session.posargs, env={"TRL_EXPERIMENTAL_SILENCE": "1"})


@nox.session
@nox.parametrize("trl", TRL_VERSIONS)
def trl(session: nox.Session, trl: str) -> None:
    """tests/trl: TRL's own GRPOTrainer on a tiny local model on the CPU, against the real server."""
    _sync(session, "test", "demo")
    _pip(session, f"trl=={trl}", *_torch_cpu(session))
    # --dist loadfile: each module's training run (a module-scoped fixture) is built once, on one worker
    session.run(*PYTEST, "tests/trl", *_xdist(session), "--dist", "loadfile", *session.posargs,
                env={"TRL_EXPERIMENTAL_SILENCE": "1"})  # fmt: skip


@nox.session
@nox.parametrize("verl", VERL_VERSIONS)
def verl(session: nox.Session, verl: str) -> None:
    """tests/verl: verl's own ToolAgentLoop with a stand-in rollout server; no Ray, no GPU."""
    _sync(session, "test")
    # verl-core's cachetools, uvicorn and fastapi (its agent loop imports them); TransferQueue for its V1 trainer
    _pip(session, f"verl=={verl}", "cachetools", "uvicorn", "fastapi", "TransferQueue>=0.1.10", *_torch_cpu(session))
    session.run(*PYTEST, "tests/verl", *_xdist(session), *session.posargs)


@nox.session
def ray(session: nox.Session) -> None:
    """tests/ray: agentenv serve --ray on a local Ray on loopback (2 replicas); one Ray at a time, no xdist."""
    _sync(session, "test", extras=("ray",))  # agentenv-server[ray]: the Ray range it declares
    session.run(*PYTEST, "tests/ray", *session.posargs, env={"RAY_USAGE_STATS_ENABLED": "0"})


@nox.session
@nox.parametrize("trl", HARNESS_TRL_VERSIONS)
def harness(session: nox.Session, trl: str) -> None:
    """tests/harness: TRL's own harness rollout loop and worker through OpenEnv's capture proxy to a stand-in engine,
    and real claude-code and opencode (installed from npm into this session) solving tasks through it."""
    _sync(session, "test")
    # aiohttp: TRL's async rollout loop needs it (its vllm extra brings it; vLLM itself is not installed)
    _pip(session, f"trl=={trl}", f"openenv=={OPENENV_VERSIONS[0]}", "aiohttp>=3.13.3", *_torch_cpu(session))
    prefix = Path(session.virtualenv.location) / "agents"
    # npm runs the CLIs' native binaries without their install scripts; --no-save keeps no lock file around
    session.run_install("npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-save",
                        "--loglevel", "error", *AGENT_CLIS, external=True, silent=True)  # fmt: skip
    agents = str(prefix / "node_modules" / ".bin")
    session.run(*PYTEST, "tests/harness", "--durations=5", *session.posargs,
                env={"TRL_EXPERIMENTAL_SILENCE": "1", "AGENTENV_AGENT_BIN": agents})  # fmt: skip


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site: mkdocs build --strict (warnings are errors) into site/, then every link checked."""
    _sync(session, "docs")
    session.run("mkdocs", "build", "--strict", "--quiet", env=MKDOCS_QUIET)
    session.run("python", "-m", "tools.linkcheck", "site")


@nox.session
def release(session: nox.Session) -> None:
    """Every wheel and sdist built with --no-sources, metadata and READMEs checked as the index reads them,
    each wheel installed alone in a fresh venv. Leaves the files in dist/."""
    _sync(session, "release")
    session.run("python", "-m", "tools.release", "dist", *session.posargs)


@nox.session
def lowest(session: nox.Session) -> None:
    """tests/unit with each workspace package's own dependencies at the lowest version it declares."""
    # lowest-direct: the lowest version each package's own requirement allows; their dependencies as they come
    editable = [arg for p in sorted(glob.glob(str(ROOT / "packages" / "*"))) for arg in ("-e", p)]
    editable += ["-e", str(ROOT / "tests" / "fixtures" / "plugins" / "agentenv-testplugin")]
    with open(ROOT / "pyproject.toml", "rb") as f:
        group = tomllib.load(f)["dependency-groups"]["test"]
    third_party = [r for r in group if not r.startswith("agentenv-")]  # the test tools, at their floors too
    _pip(session, "--resolution", "lowest-direct", *editable, *third_party)
    # the wheel tests install their wheels into fresh venvs with the newest dependencies: nothing of the
    # floors is tested there, and they are the unit tier's slowest (the unit and release sessions run them)
    wheels = ["--ignore", "tests/unit/test_wheels.py", "--ignore", "tests/unit/test_plugin_packages.py"]
    session.run(*PYTEST, "tests/unit", *wheels, *_xdist(session), *session.posargs)


@nox.session
def versions(session: nox.Session) -> None:
    """Ask the package index for every version inside each declared range; fail on one the matrix lacks."""
    session.install("pip", "packaging")
    session.run("python", "-m", "tools.matrix")


@nox.session
def demo(session: nox.Session) -> None:
    """The quickstart: train a tiny model on the arith example bundle with TRL on the CPU (a few minutes)."""
    _sync(session, "demo")
    _pip(session, f"trl=={TRL_VERSIONS[-1]}", *_torch_cpu(session))
    session.run("agentenv", "demo", *session.posargs)  # the demo silences TRL's experimental notices itself


@nox.session(name="demo_learning")
def demo_learning(session: nox.Session) -> None:
    """bench/demo_learning.py: the demo on the env's reward and on a control, 3 seeds each (several minutes a run)."""
    _sync(session, "demo")
    _pip(session, f"trl=={TRL_VERSIONS[-1]}", *_torch_cpu(session))
    session.run("python", "bench/demo_learning.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (bench/): ratios against a baseline run side by side. Not part of the default run."""
    _sync(session, "test")
    for script in sorted(glob.glob(str(ROOT / "bench" / "*.py"))):
        if Path(script).name.startswith(("verl_", "ray_")):
            continue  # needs verl or Ray: run inside that session's environment (bench/README.md)
        if Path(script).name == "demo_learning.py":
            continue  # needs TRL and takes many minutes: its own session, demo_learning
        session.run("python", script, *session.posargs)
