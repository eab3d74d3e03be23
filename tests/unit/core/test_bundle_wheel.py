"""A bundle made with ``agentenv init --package``, built as a wheel (``uv build``) and installed into a fresh
venv outside the workspace with agentenv-core's and agentenv-server's wheels: served, evaluated and checked by
its name (tests/trl/test_local_by_name.py opens one with ``AgentEnv.local``). A second bundle package, needing
another agentenv-core, is refused by name."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from agentenv import load_bundle
from agentenv.cli.scaffold import scaffold

from tests.support import ROOT, free_port
from tests.support.once import once_per_run
from tests.support.servers import answering
from tests.support.standin.openai import Reference, StandIn
from tests.support.wheels import build_wheels

pytestmark = pytest.mark.slow

CORE = version("agentenv-core")
WORKSPACE = [ROOT / "packages" / name for name in ("agentenv-core", "agentenv-server")]


@dataclass(frozen=True)
class Built:
    base: Path
    venv: Path
    wheel: Path  # the calc-tasks bundle's
    source: Path  # its bundle folder before the build

    def run(
        self, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """A program of the venv, from a folder outside the workspace, with nothing of the workspace on the path."""
        clean = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
        clean["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{clean.get('PATH', '')}"
        return subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            cwd=self.base,
            env={**clean, **(env or {})},
            timeout=timeout,
        )

    def agentenv(self, *args: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
        return self.run(self.venv / "bin" / "agentenv", *args, **kwargs)


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    assert done.returncode == 0, f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = once_per_run(tmp_path_factory, "bundle-wheel", _build_and_install)
    wheel = next((base / "dist").glob("calc_tasks-0.1.0-*.whl"))
    return Built(base, base / "venv", wheel, base / "calc-tasks" / "src" / "calc_tasks")


def _build_and_install(base: Path) -> None:
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH; install it (pip install uv) to build the wheels"
    scaffold(base / "calc-tasks", "calc-tasks", package=True)
    scaffold(base / "future-tasks", "future-tasks", package=True)
    pyproject = base / "future-tasks" / "pyproject.toml"
    text = re.sub(r"dependencies = \[.*\]", 'dependencies = ["agentenv-core>=9,<10"]', pyproject.read_text())
    pyproject.write_text(text)
    dist = base / "dist"
    sources = [*WORKSPACE, base / "calc-tasks", base / "future-tasks"]
    build_wheels(uv, sources, dist)
    venv = base / "venv"
    _check(
        subprocess.run([uv, "venv", str(venv), "--python", sys.executable], capture_output=True, text=True), "uv venv"
    )
    python = str(venv / "bin" / "python")
    wheels = [str(w) for w in sorted(dist.glob("*.whl")) if not w.name.startswith("future_tasks")]
    _check(
        subprocess.run([uv, "pip", "install", "--python", python, *wheels], capture_output=True, text=True), "install"
    )
    # as a user who forced it past pip's resolver (or upgraded agentenv-core under it) would have it
    future = [str(w) for w in dist.glob("future_tasks-*.whl")]
    done = subprocess.run(
        [uv, "pip", "install", "--python", python, "--no-deps", *future], capture_output=True, text=True
    )
    _check(done, "install --no-deps")


def test_the_wheel_ships_the_bundle_folder_and_registers_it_by_name(built):
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert {"calc_tasks/bundle.yaml", "calc_tasks/calc_env.py", "calc_tasks/tasks/train.yaml"} <= names
    assert "[agentenv.bundles]\ncalc-tasks = calc_tasks" in entry_points


def test_agentenv_bundles_lists_both_with_versions_and_refuses_the_one_needing_another_core(built):
    done = built.agentenv("bundles")
    _check(done, "agentenv bundles")
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:]}
    assert rows["calc-tasks"].split()[1:3] == ["calc-tasks", "0.1.0"]
    assert rows["calc-tasks"].rstrip().endswith(" ok")
    assert str(built.venv) in rows["calc-tasks"]
    assert (
        f"future-tasks 0.1.0 needs agentenv-core>=9,<10, but agentenv-core {CORE} is installed" in rows["future-tasks"]
    )


def test_a_bundle_needing_another_core_is_refused_at_serve_naming_the_package_the_range_and_the_core(built):
    done = built.agentenv("serve", "future-tasks", "--port", str(free_port()))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"future-tasks 0.1.0 needs agentenv-core>=9,<10, but agentenv-core {CORE} is installed" in done.stderr
    assert "pip install 'agentenv-core>=9,<10'" in done.stderr


def test_the_installed_bundle_passes_the_qa_gate_by_name(built):
    done = built.agentenv("check", "calc-tasks", "--qa")
    _check(done, "agentenv check calc-tasks --qa")
    assert "2 task(s) passed the QA gate" in done.stdout


def test_the_installed_bundle_is_evaluated_by_name(built):
    with StandIn(Reference(load_bundle(built.source))) as standin:
        done = built.agentenv(
            "eval",
            "calc-tasks",
            "--llm-url",
            standin.url,
            "--model",
            "stand-in",
            "--out",
            built.base / "eval-by-name",
            "--concurrency",
            "1",
        )
    _check(done, "agentenv eval calc-tasks")
    assert (built.base / "eval-by-name" / "summary.json").is_file()
    assert '"mean_reward": 1.0' in (built.base / "eval-by-name" / "summary.json").read_text()


def test_the_installed_bundle_is_served_by_name_and_evaluated_through_the_server(built):
    port = free_port()
    env = {"BUNDLE_TOKEN": "tok-bundle-wheel"}
    clean = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    command = [built.venv / "bin" / "agentenv", "serve", "calc-tasks", "--port", port, "--token-var", "BUNDLE_TOKEN"]
    server = subprocess.Popen(
        [str(c) for c in command], cwd=built.base, env={**clean, **env}, stderr=subprocess.PIPE, text=True
    )
    try:
        answering(server, f"http://127.0.0.1:{port}")
        with StandIn(Reference(load_bundle(built.source))) as standin:
            flags = ["--llm-url", standin.url, "--model", "stand-in", "--out", built.base / "eval-served"]
            done = built.agentenv("eval", f"http://127.0.0.1:{port}", "--token-var", "BUNDLE_TOKEN", *flags, env=env)
        _check(done, "agentenv eval URL")
        assert '"mean_reward": 1.0' in (built.base / "eval-served" / "summary.json").read_text()
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert "serving bundle 'calc-tasks'" in err, err
