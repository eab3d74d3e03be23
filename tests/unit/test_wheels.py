"""The five wheels build with ``uv build --all-packages`` and work installed outside the workspace.

One build and one fresh virtual environment (in a temporary folder, not under the repository) serve
every test of this module; the installs come from the built wheels, their dependencies from the index.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.once import once_per_run, shared_folder

pytestmark = pytest.mark.slow

PACKAGES = {
    "agentenv-core": "agentenv",
    "agentenv-server": "agentenv_server",
    "agentenv-trl": "agentenv_trl",
    "agentenv-verl": "agentenv_verl",
    "agentenv-harness": "agentenv_harness",
    "agentenv-docker": "agentenv_docker",
}


@dataclass(frozen=True)
class Installed:
    dist: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """Run in the venv, from a folder outside the workspace, with nothing of the workspace on the path."""
        env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=self.venv.parent, env=env)


def _version(distribution: str) -> str:
    with open(ROOT / "packages" / distribution / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _uv() -> str:
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH; install it (pip install uv) to build the wheels"
    return uv


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    assert done.returncode == 0, f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"


def _wheel(dist: Path, distribution: str) -> Path:
    found = sorted(dist.glob(f"{distribution.replace('-', '_')}-*.whl"))
    assert len(found) == 1, f"expected one wheel of {distribution} in {dist}: {[p.name for p in dist.iterdir()]}"
    return found[0]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    base = shared_folder(tmp_path_factory)
    dist = built_wheels(tmp_path_factory)
    venv = venv_with(base / "venv-all", [_wheel(dist, name) for name in PACKAGES], base)
    return Installed(dist, venv)


def built_wheels(tmp_path_factory) -> Path:
    """Every package's wheel and sdist, built once per test run."""

    def build(dist: Path) -> None:
        built = subprocess.run(
            [_uv(), "build", "--all-packages", "--out-dir", str(dist)], capture_output=True, text=True, cwd=ROOT
        )
        _check(built, "uv build --all-packages")

    return once_per_run(tmp_path_factory, "dist", build)


def venv_with(venv: Path, wheels: list[Path], base: Path) -> Path:
    """A fresh venv (once per test run, under a lock) with ``wheels`` installed; their dependencies from the index."""
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not Path(f"{venv}.done").exists():
            shutil.rmtree(venv, ignore_errors=True)
            _check(
                subprocess.run([_uv(), "venv", str(venv), "--python", sys.executable], capture_output=True, text=True),
                "uv venv",
            )
            _check(
                subprocess.run(
                    [_uv(), "pip", "install", "--python", str(venv / "bin" / "python"), *map(str, wheels)],
                    capture_output=True,
                    text=True,
                    cwd=base,
                ),
                "uv pip install of the wheels",
            )
            Path(f"{venv}.done").touch()
    return venv


def test_uv_build_all_packages_builds_a_wheel_and_an_sdist_of_each_package(installed):
    wheels = sorted(p.name.split("-")[0] for p in installed.dist.glob("*.whl"))
    sdists = sorted(p.name.rsplit("-", 1)[0] for p in installed.dist.glob("*.tar.gz"))
    assert wheels == sorted(name.replace("-", "_") for name in PACKAGES)
    assert sdists == sorted(name.replace("-", "_") for name in PACKAGES)


@pytest.mark.parametrize(("distribution", "package"), PACKAGES.items())
def test_each_wheel_ships_py_typed_and_an_agentenv_entry_point(installed, distribution, package):
    with zipfile.ZipFile(_wheel(installed.dist, distribution)) as wheel:
        names = wheel.namelist()
        assert f"{package}/py.typed" in names
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = wheel.read(entry_points).decode()
    assert "[agentenv]" in text or distribution == "agentenv-core"
    if distribution == "agentenv-core":
        assert "agentenv = agentenv.cli:main" in text


def test_each_package_imports_from_the_venv_outside_the_workspace(installed):
    code = "import sys\n" + "".join(f"import {package}; print({package}.__file__)\n" for package in PACKAGES.values())
    done = installed.run(installed.python, "-c", code)
    _check(done, "importing the installed packages")
    files = [Path(line) for line in done.stdout.splitlines()]
    assert len(files) == len(PACKAGES)
    for file in files:
        assert installed.venv in file.parents, f"{file} is not from the venv"
        assert ROOT not in file.parents


def test_agentenv_plugins_in_the_venv_lists_every_package(installed):
    done = installed.run(installed.venv / "bin" / "agentenv", "plugins")
    _check(done, "agentenv plugins")
    lines = done.stdout.splitlines()
    table = lines[2 : lines.index("")] if "" in lines else lines[2:]
    plugins = {line.split()[0]: line.split()[1:3] for line in table}
    expected = {name.removeprefix("agentenv-"): name for name in PACKAGES if name != "agentenv-core"}
    expected |= {"agentenv.engine.builtins": "agentenv-core", "agentenv.cli.commands": "agentenv-core"}
    assert set(plugins) == set(expected)  # no test plugin: it is not part of the release
    for plugin, distribution in expected.items():
        assert plugins[plugin] == [distribution, _version(distribution)]
    assert "left out" not in done.stdout + done.stderr, done.stdout  # every plugin loads without its trainer


def test_the_trl_wheel_ships_the_quickstart_bundle_and_the_installed_cli_plays_it(installed):
    # `agentenv demo` after a plain install trains on this copy: it must be the repository's, whole
    where = "import agentenv_trl, pathlib; print(pathlib.Path(agentenv_trl.__file__).parent / 'examples' / 'arith')"
    done = installed.run(installed.python, "-c", where)
    _check(done, "locating the shipped bundle")
    shipped, source = Path(done.stdout.strip()), ROOT / "examples" / "bundles" / "arith"
    assert installed.venv in shipped.parents
    files = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    shipped_files = sorted(
        p.relative_to(shipped) for p in shipped.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert shipped_files == files
    assert all((shipped / f).read_bytes() == (source / f).read_bytes() for f in files)
    done = installed.run(installed.venv / "bin" / "agentenv", "play", shipped, "one-001", "--reference")
    _check(done, "agentenv play")
    assert done.stdout.rstrip().endswith("reward: 1")


def test_a_command_of_an_agentenv_wheel_that_is_not_installed_names_the_wheel(installed, tmp_path_factory):
    # agentenv-verl alone: its README's `agentenv serve` must say where the command comes from
    base = shared_folder(tmp_path_factory)
    wheels = [_wheel(installed.dist, "agentenv-core"), _wheel(installed.dist, "agentenv-verl")]
    verl_only = Installed(installed.dist, venv_with(base / "venv-verl-only", wheels, base))
    done = verl_only.run(verl_only.venv / "bin" / "agentenv", "serve", "examples/bundles/inbox", "--port", "8000")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'agentenv serve' comes with agentenv-server, which is not installed" in done.stderr
    assert "pip install agentenv-server" in done.stderr
    helped = " ".join(verl_only.run(verl_only.venv / "bin" / "agentenv", "--help").stdout.split())
    others = (
        "demo (agentenv-trl), image (agentenv-docker), run (agentenv-harness), serve (agentenv-server), "
        "view (agentenv-server)"
    )
    assert f"More commands come with other agentenv wheels: {others}." in helped
