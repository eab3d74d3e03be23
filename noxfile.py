"""Test sessions. ``uvx nox`` runs the default ones (what CI runs); the README's table says what each covers.

Trainer sessions install the trainer at each version of the matrix (tools/matrix.py: every version the
package index has inside the declared range) next to the workspace packages; the lowest and the highest
of each range run by default, the rest in ``nox -s matrix`` (``nox -t matrix``). ``py`` runs the tiers
that need no torch on the newer Pythons the packages claim. Sessions with a trainer use the CPU build of
torch: the ``torch-2.13.0+cpu`` wheel when a find-links folder has it (``$UV_FIND_LINKS`` or
``$PIP_FIND_LINKS``), else PyTorch's CPU index. A plain ``torch`` from the default index is a multi-GB
CUDA build; no session ever installs it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from tools.matrix import MATRIX, Axis  # the version matrix, kept as data

ROOT = Path(__file__).parent
TORCH = "2.13.0"
# the newer Pythons the packages claim (requires-python >=3.11; 3.11 is every other session's): the tiers that need
# no torch run on them (the local CPU torch wheel is for 3.11 only, so the trainer tiers run on 3.11): the whole unit
# tier on the newest, the wheel installs on the ones between
NEWER_PYTHONS = ["3.12", "3.13"]
# the trainer versions each integration is tested against: every version of its range, lowest first
TRL_VERSIONS = list(MATRIX["trl"].versions)
VERL_VERSIONS = list(MATRIX["verl"].versions)
HARNESS_TRL_VERSIONS = list(MATRIX["harness-trl"].versions)
OPENENV_VERSIONS = list(MATRIX["harness-openenv"].versions)
RAY_VERSIONS = list(MATRIX["ray"].versions)


def _newer_pythons() -> None:
    """Let uv find pyenv's other Pythons: its shims answer only for the selected version, so each newer one's
    interpreter is linked into .nox/pythons, put first on PATH (uv finds a Python by its name there)."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    links = ROOT / ".nox" / "pythons"
    for version in NEWER_PYTHONS:
        name = f"python{version}"
        found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", name)))
        if found:
            links.mkdir(parents=True, exist_ok=True)
            (links / f".{name}").unlink(missing_ok=True)
            (links / f".{name}").symlink_to(found[-1])
            (links / f".{name}").replace(links / name)  # atomically: a second nox may be reading it
    if links.is_dir():
        os.environ["PATH"] = f"{links}{os.pathsep}{os.environ.get('PATH', '')}"


_newer_pythons()


def _releases(axis: Axis) -> list[nox.param]:
    """A session parameter per release of ``axis``; those not run by default are tagged ``matrix``."""
    return [nox.param(v, tags=[] if v in axis.default else ["matrix"]) for v in axis.versions]


def _defaults(session: str, param: str, axis: Axis) -> list[str]:
    return [f"{session}({param}={v!r})" for v in axis.default]


def _harness_openenv(trl: str) -> str:
    """The OpenEnv a harness session pairs with its TRL: the lowest with the lowest, any other with the highest."""
    return OPENENV_VERSIONS[0] if trl == HARNESS_TRL_VERSIONS[0] else OPENENV_VERSIONS[-1]


nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
nox.options.sessions = [
    "lint",
    "unit",
    *(f"py-{v}" for v in NEWER_PYTHONS),
    "docs",
    "faults",
    "fuzz",
    *_defaults("trl", "trl", MATRIX["trl"]),
    *_defaults("verl", "verl", MATRIX["verl"]),
    *_defaults("ray", "ray", MATRIX["ray"]),
    *_defaults("harness", "trl", MATRIX["harness-trl"]),
    "containers",
    "harbor",
    "viewer",
    "lowest",
    "release",
    "canary",
]
# the coding-agent CLIs the harness tier runs for real, each at a pinned version (npm packages)
AGENT_CLIS = ["@anthropic-ai/claude-code@2.1.332", "opencode-ai@1.18.33"]
MKDOCS_QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}  # banners, not warnings
PYTEST = ["pytest", "-p", "no:cacheprovider"]
CONTAINER_BASE = "agentenv-test/python:bookworm"  # the containers tier's base image (tests/support/containers.py)


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


# verl-core's cachetools, uvicorn and fastapi (its agent loop imports them); TransferQueue for its V1 trainer
_VERL_DEPS = ["cachetools", "uvicorn", "fastapi", "TransferQueue>=0.1.10"]
# aiohttp: TRL's async rollout loop needs it (its vllm extra brings it; vLLM itself is not installed)
_HARNESS_DEPS = ["aiohttp>=3.13.3"]


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


# what the newer Pythons run by default: the packages built, installed from their wheels into fresh venvs and run
# there (a bundle wheel served by name, the plugin packages, the slim client), and env programs started in the sandbox
# on that interpreter (the one failure 3.12 ever had of its own: nox's link to it)
INSTALL_TESTS = ["tests/unit/test_wheels.py", "tests/unit/core/test_plugin_packages.py",
                 "tests/unit/core/test_bundle_wheel.py", "tests/unit/test_slim_client.py",
                 "tests/unit/core/test_subprocess_sandbox.py"]  # fmt: skip
# and on the newest, the parts of tests/unit where an interpreter's asyncio, subprocess and signal handling show:
# real servers, the wire protocol, the sandboxes, episodes, the client's pool and deploy-ahead, the harness's
# sessions (231 tests in about 2 minutes, where the whole tier, 767, took 5 and put .ci/run near its budget)
NEWEST_TESTS = [*INSTALL_TESTS, *(f"tests/unit/{name}.py" for name in (
    "server/test_server", "server/test_protocol", "core/test_bash_sandbox", "core/test_episodes",
    "core/test_subprocess_env", "core/test_owner_exit", "core/test_pool", "server/test_deploy_ahead",
    "harness/test_harness_sessions", "core/test_verifiers", "core/test_bundles"))]  # fmt: skip


@nox.session(python=NEWER_PYTHONS)
def py(session: nox.Session) -> None:
    """On a newer Python, the tiers that need no torch: the wheel installs on each, and on the newest (3.13) the
    parts of tests/unit an interpreter shows in (``NEWEST_TESTS``; ``nox -s py-3.13 -- tests/unit`` for all of it),
    then the documentation site and the release check. tests/faults runs here only when asked (``nox -s py-3.13 --
    tests/faults``): the whole unit and fault tiers on each would put ``.ci/run`` past its 45-minute budget on 2
    cores."""
    _sync(session, "test", "docs", "release")
    # AgentEnv.local checks TRL's installed version and never imports TRL: TRL is installed without its dependencies
    # (torch's local CPU wheel is for 3.11)
    _pip(session, f"trl=={TRL_VERSIONS[-1]}", "--no-deps")
    tests = session.posargs or (NEWEST_TESTS if session.python == NEWER_PYTHONS[-1] else INSTALL_TESTS)
    session.run(*PYTEST, *tests, *_xdist(session), env={"TRL_EXPERIMENTAL_SILENCE": "1"})
    site, dist = session.create_tmp(), session.create_tmp()
    session.run("mkdocs", "build", "--strict", "--quiet", "--site-dir", f"{site}/site", env=MKDOCS_QUIET)
    session.run("python", "-m", "tools.linkcheck", f"{site}/site")
    session.run("python", "-m", "tools.release", f"{dist}/dist")


@nox.session
def fuzz(session: nox.Session) -> None:
    """tests/fuzz: Hypothesis against real `agentenv serve` processes on both loops (frames, Task API requests, raw
    bytes) and against bundle loading; `$AGENTENV_FUZZ_EXAMPLES` inputs per test (a short budget by default;
    `python bench/fuzz.py` runs it long and reports)."""
    _sync(session, "test")
    session.run(*PYTEST, "tests/fuzz", *_xdist(session), *session.posargs)


@nox.session
@nox.parametrize("trl", _releases(MATRIX["trl"]))
def trl(session: nox.Session, trl: str) -> None:
    """tests/trl: TRL's own GRPOTrainer on a tiny local model on the CPU, against the real server (and, through
    TRL's OpenRewardSpec and the openreward SDK, against agentenv serve --ors: agentenv-server's ors extra)."""
    _sync(session, "test", "demo", extras=("ors",))
    _pip(session, f"trl=={trl}", *_torch_cpu(session))
    # --dist loadfile: each module's training run (a module-scoped fixture) is built once, on one worker
    session.run(*PYTEST, "tests/trl", *_xdist(session), "--dist", "loadfile", *session.posargs,
                env={"TRL_EXPERIMENTAL_SILENCE": "1"})  # fmt: skip


@nox.session
@nox.parametrize("verl", _releases(MATRIX["verl"]))
def verl(session: nox.Session, verl: str) -> None:
    """tests/verl: verl's own ToolAgentLoop with a stand-in rollout server; no Ray, no GPU."""
    _sync(session, "test")
    _pip(session, f"verl=={verl}", *_VERL_DEPS, *_torch_cpu(session))
    session.run(*PYTEST, "tests/verl", *_xdist(session), *session.posargs)


@nox.session
@nox.parametrize("ray", _releases(MATRIX["ray"]))
def ray(session: nox.Session, ray: str) -> None:
    """tests/ray: agentenv serve --ray on a local Ray on loopback (2 replicas); one Ray at a time, no xdist."""
    _sync(session, "test", extras=("ray",))  # agentenv-server[ray]: the Ray range it declares (uv.lock's release)
    _pip(session, f"ray[serve]=={ray}")
    session.run(*PYTEST, "tests/ray", *session.posargs, env={"RAY_USAGE_STATS_ENABLED": "0"})


@nox.session
@nox.parametrize("trl", _releases(MATRIX["harness-trl"]))
def harness(session: nox.Session, trl: str) -> None:
    """tests/harness: TRL's own harness rollout loop and worker through OpenEnv's capture proxy to a stand-in engine,
    and real claude-code and opencode (installed from npm into this session) solving tasks through it."""
    _sync(session, "test")
    _pip(session, f"trl=={trl}", f"openenv=={_harness_openenv(trl)}", *_HARNESS_DEPS, *_torch_cpu(session))
    _harness_tier(session)


def _agent_clis(session: nox.Session) -> str:
    """Install the agent CLIs from npm into the session; the folder of their executables (``$AGENTENV_AGENT_BIN``)."""
    prefix = Path(session.virtualenv.location) / "agents"
    # npm runs the CLIs' native binaries without their install scripts; --no-save keeps no lock file around
    session.run_install("npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-save",
                        "--loglevel", "error", *AGENT_CLIS, external=True, silent=True)  # fmt: skip
    return str(prefix / "node_modules" / ".bin")


def _harness_tier(session: nox.Session) -> None:
    """tests/harness, with the agent CLIs installed from npm into the session."""
    agents = _agent_clis(session)
    session.run(*PYTEST, "tests/harness", "--durations=5", *session.posargs,
                env={"TRL_EXPERIMENTAL_SILENCE": "1", "AGENTENV_AGENT_BIN": agents})  # fmt: skip


@nox.session
def containers(session: nox.Session) -> None:
    """tests/containers: container envs on a real Docker engine (``.ci/run`` starts one), their images made here
    (a base from Debian's packages once per machine, then the test bundle's), TRL's GRPOTrainer and verl's agent
    loop playing them, and real claude-code and opencode (from npm, as the harness tier installs them) in
    containers through OpenEnv's capture proxy (TRL's harness rollouts)."""
    _sync(session, "test")
    # jmespath: TRL's tool-call parser needs it on the transformers below 5.13 that verl 0.9 allows
    trainers = [f"trl=={TRL_VERSIONS[-1]}", f"verl=={VERL_VERSIONS[-1]}", *_VERL_DEPS, *_HARNESS_DEPS, "jmespath"]
    _pip(session, *trainers, *_torch_cpu(session))
    agents = _agent_clis(session)
    session.run("agentenv", "image", "base", CONTAINER_BASE)  # debootstrap: a couple of minutes the first time
    session.run("agentenv", "image", "build", "tests/containers/bundles/box", "--base", CONTAINER_BASE)
    tier = ["tests/containers", *_xdist(session), "--dist", "loadfile", "--durations=5", *session.posargs]
    session.run(*PYTEST, *tier, env={"TRL_EXPERIMENTAL_SILENCE": "1", "AGENTENV_AGENT_BIN": agents})


@nox.session(python=NEWER_PYTHONS[0])
def harbor(session: nox.Session) -> None:
    """tests/harbor: Harbor task directories read through the harbor package (agentenv-docker's harbor extra, on 3.12:
    harbor needs it), played in containers on a real Docker engine, their images made here (the containers tier's
    base, then each task's from its environment/Dockerfile), their reference solutions through the QA gate; then TRL's
    GRPOTrainer on 3.11 (the CPU torch wheel's Python) training against the suite served on this session's 3.12."""
    _sync(session, "test", extras=("harbor",))
    session.run("agentenv", "image", "base", CONTAINER_BASE)  # debootstrap: a couple of minutes the first time
    session.run("agentenv", "image", "build", "tests/harbor/bundles/suite")
    trl_tests = "tests/harbor/test_harbor_trl.py"
    session.run(*PYTEST, "tests/harbor", f"--ignore={trl_tests}", *_xdist(session), "--durations=5", *session.posargs)
    trainer = os.path.join(session.create_tmp(), "trainer")  # a 3.11 venv of its own, kept with the session's
    session.run_install("uv", "sync", "--frozen", "--all-packages", "--inexact", "--group", "test", "--python",
                        "3.11", env={"UV_PROJECT_ENVIRONMENT": trainer}, silent=True)  # fmt: skip
    session.run_install("uv", "pip", "install", "--python", trainer, f"trl=={TRL_VERSIONS[-1]}", "jmespath",
                        *_torch_cpu(session), silent=True)  # fmt: skip
    python = os.path.join(session.virtualenv.location, "bin", "python")
    session.run(os.path.join(trainer, "bin", "python"), "-m", *PYTEST, trl_tests, "--durations=3", external=True,
                env={"TRL_EXPERIMENTAL_SILENCE": "1", "AGENTENV_HARBOR_PYTHON": python})  # fmt: skip


@nox.session
def viewer(session: nox.Session) -> None:
    """tests/viewer: ``agentenv view`` over records a real server wrote, driven in Debian's headless chromium through
    its chromium-driver (Selenium); ``.ci/run`` installs both, and so does this session where it runs as root."""
    import shutil

    _sync(session, "test", "viewer")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        if os.geteuid() != 0:
            session.error("tests/viewer needs Debian's chromium and chromium-driver: apt-get install chromium "
                          "chromium-driver")  # fmt: skip
        session.run_install("apt-get", "install", "-y", "-qq", "chromium", "chromium-driver", external=True,
                            silent=True, env={"DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip
    session.run(*PYTEST, "tests/viewer", "--durations=5", *session.posargs)


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
    wheels = ["--ignore", "tests/unit/test_wheels.py", "--ignore", "tests/unit/core/test_plugin_packages.py"]
    session.run(*PYTEST, "tests/unit", *wheels, *_xdist(session), *session.posargs)


@nox.session
def versions(session: nox.Session) -> None:
    """Ask the package index for every version inside each declared range; fail on one the matrix lacks."""
    session.install("pip", "packaging")
    session.run("python", "-m", "tools.matrix")


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """Every release of each range that the default sessions leave out (the sessions tagged matrix: nox -t matrix)."""
    session.run(sys.executable, "-m", "nox", "-f", __file__, "-t", "matrix", *session.posargs, external=True)


# the tier that tests each axis's newest release in the canary
_CANARY_TIERS = {"trl": "tests/trl", "verl": "tests/verl", "harness-trl": "tests/harness", "openenv": "tests/unit",
                 "harness-openenv": "tests/harness", "ray": "tests/ray"}  # fmt: skip


@nox.session
def canary(session: nox.Session) -> None:
    """The newest release of each trainer, of OpenEnv and of Ray on the package index, with the packages' upper
    bounds lifted: each integration's API probe, and the tier of each release newer than its range, which fails the
    canary (and only it) naming the release."""
    _sync(session, "test", "demo", extras=("ors",))  # what the trl session syncs
    _pip(session, "pip")  # tools.matrix asks the index with pip index versions
    plan_file = Path(session.create_tmp()) / "newest.json"
    session.run("python", "-m", "tools.matrix", "newest", str(plan_file), silent=True)
    plan = json.loads(plan_file.read_text())
    newest = {name: entry["newest"] for name, entry in plan.items()}
    _lift_ranges(session, [MATRIX[name] for name in plan])
    _pip(session, f"trl=={newest['trl']}", f"verl=={newest['verl']}", f"openenv=={newest['openenv']}",
         f"ray[serve]=={newest['ray']}", *_VERL_DEPS, *_HARNESS_DEPS, *_torch_cpu(session))  # fmt: skip
    for entry in plan.values():
        session.log(entry["line"])
    session.run(
        "python", "-m", "tools.probes", env={"TRL_EXPERIMENTAL_SILENCE": "1"}
    )  # every API probe, newest releases
    newer = [name for name, entry in plan.items() if entry["newer"]]
    for tier in dict.fromkeys(_CANARY_TIERS[name] for name in newer):
        if tier == "tests/harness":
            _harness_tier(session)
        else:
            session.run(*PYTEST, tier, *session.posargs, env={"TRL_EXPERIMENTAL_SILENCE": "1"})
    if newer:
        session.error("; ".join(plan[name]["line"] for name in newer))


def _lift_ranges(session: nox.Session, axes: list[Axis]) -> None:
    """Install a copy of each package that declares one of ``axes``, its upper bounds dropped, over the workspace's
    editable install (the copy's code is the workspace's: only the declared range differs)."""
    lifted = Path(session.create_tmp()) / "lifted"
    shutil.rmtree(lifted, ignore_errors=True)
    for package in sorted({axis.package for axis in axes}):
        copy = lifted / package
        shutil.copytree(ROOT / "packages" / package, copy, ignore=shutil.ignore_patterns("__pycache__"))
        pyproject = copy / "pyproject.toml"
        text = pyproject.read_text()
        for axis in axes:
            if axis.package == package:
                text = text.replace(f'"{axis.declared()}"', f'"{axis.lifted()}"')
        pyproject.write_text(text)
        _pip(session, "--no-deps", "-e", str(copy))


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
