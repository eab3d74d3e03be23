"""A slim client: ``pip install agentenv-core`` (or ``agentenv-verl`` without extras) brings no server stack,
no OpenEnv and no ML framework, and the client modules import nothing of the engine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import INBOX
from tests.support.once import shared_folder
from tests.unit.test_wheels import Installed, _check, _wheel, built_wheels, venv_with

pytestmark = pytest.mark.slow

NOT_IN_A_CLIENT = {
    "gradio",
    "fastapi",
    "uvicorn",
    "starlette",
    "openai",
    "mcp",
    "fastmcp",
    "pandas",
    "torch",
    "openenv",
}
LIST = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted({d.metadata['Name'].lower() for d in m.distributions()})))"
)


def _venv(tmp_path_factory, name: str, distributions: list[str]) -> Installed:
    dist = built_wheels(tmp_path_factory)
    base = shared_folder(tmp_path_factory)
    return Installed(dist, venv_with(base / name, [_wheel(dist, d) for d in distributions], base))


def _installed(venv: Installed) -> set[str]:
    done = venv.run(venv.python, "-c", LIST)
    _check(done, "listing the installed distributions")
    return set(json.loads(done.stdout))


def test_agentenv_core_alone_installs_no_server_stack_and_plays_a_bundle(tmp_path_factory):
    core = _venv(tmp_path_factory, "venv-core", ["agentenv-core"])
    assert _installed(core) & NOT_IN_A_CLIENT == set()
    tasks = core.run(core.venv / "bin" / "agentenv", "tasks", INBOX)
    _check(tasks, "agentenv tasks")
    assert "q-001" in tasks.stdout
    played = core.run(core.venv / "bin" / "agentenv", "play", INBOX, "q-001", "--reference")
    _check(played, "agentenv play --reference")
    assert played.stdout.rstrip().endswith("reward: 1")


def test_agentenv_verl_without_extras_installs_no_server_stack(tmp_path_factory):
    verl = _venv(tmp_path_factory, "venv-verl", ["agentenv-core", "agentenv-verl"])
    assert _installed(verl) & NOT_IN_A_CLIENT == set()
    _check(verl.run(verl.python, "-c", "import agentenv_verl.writer"), "importing the verl writer")


@pytest.mark.parametrize(
    "module", ["agentenv.client.session", "agentenv.client.rollout", "agentenv.client.sync", "agentenv.client.taskapi"]
)
def test_the_client_modules_import_nothing_of_the_engine(module):
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    _check(done, f"importing {module}")
    loaded = set(json.loads(done.stdout))
    engine = {
        "agentenv.bundle",
        "agentenv.engine",
        "agentenv.engine.episode",
        "agentenv.engine.verifiers",
        "agentenv.plugins",
    }
    assert loaded & engine == set()
    assert not any(m.startswith("openenv") for m in loaded)
