"""Real plugin packages in a fresh venv: agentenv-kv (the worked example), wrappers, and plugins broken on purpose.

The wheels of agentenv-core, agentenv-server, examples/plugins/agentenv-kv and the fixture plugins
agentenv-wrapplugin and agentenv-badplugins are built once per test run and installed into one venv
outside the workspace (shared by the xdist workers, under a lock). Each test runs ``agentenv`` there
as a user would: the example and the built-ins work while each broken plugin is named and left out.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.support import ROOT, free_port
from tests.support.once import once_per_run
from tests.support.servers import answering
from tests.support.wheels import build_wheels

pytestmark = pytest.mark.slow

KV = ROOT / "examples" / "plugins" / "agentenv-kv"
BUNDLE = KV / "bundle"
PACKAGES = [
    ROOT / "packages" / "agentenv-core",
    ROOT / "packages" / "agentenv-server",
    KV,
    ROOT / "tests" / "fixtures" / "plugins" / "agentenv-wrapplugin",
    ROOT / "tests" / "fixtures" / "plugins" / "agentenv-badplugins",
]
KV_VERSION = tomllib.loads((KV / "pyproject.toml").read_text())["project"]["version"]
# each plugin of agentenv-badplugins, and what `agentenv plugins` says of it (the fix included)
CORE = version("agentenv-core")  # the wheel built from this checkout
BROKEN = {
    "bad-import": "importing agentenv_badplugins.broken_import failed: ImportError: agentenv_badplugins.broken_import "
    "is broken on purpose; fix the import, or uninstall agentenv-badplugins",
    "bad-argument": "its agentenv_episode_finished takes 'results', which the hook does not pass; "
    "write def agentenv_episode_finished(episode, result)",
    "bad-hookname": "its hookimpl 'agentevn_env_kinds' implements no agentenv hook "
    "(did you mean 'agentenv_env_kinds'?); rename it",
    "bad-unmarked": "'agentenv_verifier_kind' is no agentenv hook (did you mean 'agentenv_verifier_kinds'?); rename it",
    "bad-builtin-name": f"the env kind 'python' is registered by 'agentenv.engine.builtins' (agentenv-core {CORE}); "
    "rename its env kind (a built-in name is never replaced)",
    "bad-raises": "its agentenv_reward_rules raised RuntimeError: no rules today",
    "kv-imposter": f"the verifier kind 'kv-has' is registered by 'kv' (agentenv-kv {KV_VERSION}); "
    "rename its verifier kind, or uninstall one of the two",
}


@dataclass(frozen=True)
class Venv:
    path: Path
    logs: Path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
        env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["AGENTENV_KV_LOG"] = str(self.logs / "kv.jsonl")
        env["AGENTENV_WRAP_LOG"] = str(self.logs / "wrap.log")
        return env

    def agentenv(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """``agentenv ARGS`` of the venv, run from outside the workspace."""
        command = [str(self.path / "bin" / "agentenv"), *map(str, args)]
        return subprocess.run(
            command, capture_output=True, text=True, cwd=self.path.parent, env=self.env(), timeout=120
        )

    def kv_log(self) -> list[dict[str, object]]:
        path = self.logs / "kv.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def wrap_log(self) -> list[str]:
        path = self.logs / "wrap.log"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv with the five packages installed from their wheels (built and installed once)."""
    return once_per_run(tmp_path_factory, "plugin-packages", _build_and_install) / "venv"


def _build_and_install(base: Path) -> None:
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH; install it (pip install uv) to build the wheels"
    dist = base / "dist"
    build_wheels(uv, PACKAGES, dist)
    venv = base / "venv"
    done = subprocess.run([uv, "venv", str(venv), "--python", sys.executable], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    wheels = [str(w) for w in sorted(dist.glob("*.whl"))]
    assert len(wheels) == len(PACKAGES), wheels
    done = subprocess.run(
        [uv, "pip", "install", "--python", str(venv / "bin" / "python"), *wheels], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def venv(built: Path, tmp_path: Path) -> Venv:
    return Venv(built, tmp_path)


@pytest.fixture(scope="module")
def listed(built: Path, tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """``agentenv plugins`` in the venv."""
    return Venv(built, tmp_path_factory.mktemp("logs")).agentenv("plugins")


def test_the_example_plugin_is_listed_with_its_hooks_and_the_wrappers_as_wrappers(listed):
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[2:] if line and not line.startswith(" ")}
    assert rows["kv"].split(None, 3)[1:] == [
        "agentenv-kv",
        KV_VERSION,
        "cli_commands, env_kinds, episode_finished, episode_started, reward_rules, toolset, verifier_kinds",
    ]
    assert rows["wrappers"].split(None, 3)[3] == "env_kinds (wrapper), episode_finished (wrapper), toolset (wrapper)"
    assert {"agentenv.engine.builtins", "agentenv.cli.commands", "server"} <= set(rows)
    assert not set(BROKEN) & set(rows)


@pytest.mark.parametrize("plugin", BROKEN)
def test_each_broken_plugin_is_listed_as_left_out_with_the_fix(listed, plugin):
    assert f"left out ({len(BROKEN)}; everything else works):" in listed.stdout
    line = next(x for x in listed.stdout.splitlines() if x.startswith(f"  plugin {plugin!r} "))
    assert line.startswith(f"  plugin {plugin!r} (agentenv-badplugins 0.0.1) was left out: ")
    assert BROKEN[plugin] in line


def test_plugins_check_exits_1_while_a_plugin_is_left_out(venv):
    done = venv.agentenv("plugins", "--check")
    assert done.returncode == 1
    assert "kv-imposter" in done.stdout


def test_every_command_names_each_left_out_plugin_once_on_stderr_and_works(venv):
    done = venv.agentenv("tasks", BUNDLE)
    assert done.returncode == 0, done.stderr
    assert "2 tasks, 2 toolsets, splits: train, eval" in done.stdout
    for plugin in BROKEN:
        assert done.stderr.count(f"plugin {plugin!r} (agentenv-badplugins 0.0.1) was left out") == 1, done.stderr


def test_the_example_bundle_plays_with_the_plugins_env_kind_verifier_kind_and_reward_rule(venv):
    done = venv.agentenv("play", BUNDLE, "restock", "--reference")
    assert done.returncode == 0, done.stderr
    assert "tools: get, put, delete, keys" in done.stdout
    assert "score stored: 1\nscore pears: 1\nreward: 1" in done.stdout


def test_the_example_plugins_toolset_hook_makes_a_read_only_task(venv):
    done = venv.agentenv("play", BUNDLE, "count", "--reference")
    assert done.returncode == 0, done.stderr
    assert "tools: get, keys\n" in done.stdout
    assert done.stdout.rstrip().endswith("reward: 1")


def test_wrappers_new_style_and_old_style_run_around_the_hooks(venv):
    assert venv.agentenv("play", BUNDLE, "restock", "--reference").returncode == 0
    log = venv.wrap_log()
    assert "env_kinds (old-style): bash,python,subprocess" in log  # around the built-ins' records
    assert "env_kinds (old-style): kv" in log  # and around the example's
    assert "toolset (new-style): count deny {'store': ['delete', 'put']}" in log
    i = log.index("episode_finished (new-style) before: restock play")
    assert log[i + 1] == "episode_finished (new-style) after: restock scored"


def test_observers_see_the_purpose_of_each_episode(venv):
    assert venv.agentenv("play", BUNDLE, "restock", "--reference").returncode == 0
    assert venv.agentenv("check", BUNDLE).returncode == 0
    log = venv.kv_log()
    assert sorted((e["task"], e["purpose"], e["outcome"]) for e in log) == [
        ("count", "check", "unscored"),
        ("restock", "check", "unscored"),
        ("restock", "play", "scored"),
    ]
    assert all(isinstance(e["seconds"], float) for e in log)  # its started observer ran for each


def test_the_example_command_prints_a_table_and_an_agentenv_error_exits_2(venv):
    done = venv.agentenv("kv", BUNDLE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2:] == ["store  apples  3", "store  pears   5"]
    done = venv.agentenv("kv", BUNDLE, "--env", "shelf")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "error: --env shelf: no kv env of that name; the kv envs are store"


def test_a_problem_an_env_kind_finds_is_said_at_the_sub_fields_line(venv, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace('seed: {apples: "3", pears: "5"}', "seed:\n        apples: 3"))
    done = venv.agentenv("tasks", bundle)
    assert done.returncode == 2
    line = next(n for n, x in enumerate((bundle / "bundle.yaml").read_text().splitlines(), 1) if "apples: 3" in x)
    assert f"bundle.yaml:{line}: envs.store.config.seed.apples: must be text; quote it (apples: '3')" in done.stderr


def test_the_example_bundle_is_served_by_agentenv_serve_and_played_and_probed_through_the_session_layer(venv):
    from agentenv.client.settings import Shared
    from agentenv.client.sync import SyncSession
    from agentenv.client.taskapi import tasks_and_tools

    port = free_port()
    command = [str(venv.path / "bin" / "agentenv"), "serve", str(BUNDLE), "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen(command, env=venv.env(), cwd=venv.path.parent, stderr=subprocess.PIPE, text=True)
    try:
        answering(server, f"http://127.0.0.1:{port}")
        shared = Shared(f"http://127.0.0.1:{port}", reset_timeout=60)
        rows, tools = tasks_and_tools(shared, ["train", "eval"])  # one probe per toolset
        assert sorted(row.id for row in rows) == ["count", "restock"]
        assert sorted(len(t) for t in tools.values()) == [2, 4]  # the read-only task lost put and delete
        session = SyncSession(shared)
        try:
            started = session.start("restock")
            assert [t.name for t in started.tools] == ["get", "put", "delete", "keys"]
            assert session.call("put", {"key": "apples", "value": "10"}).text == "ok"
            assert session.end_turn("Done.").prompt == "How many pears are there?"
            result = session.end_turn("There are 5 pears.").result
        finally:
            session.close()
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    assert result is not None
    assert (result.outcome, result.reward, result.scores) == ("scored", 1.0, {"stored": 1.0, "pears": 1.0})
    assert sorted((e["task"], e["purpose"], e["outcome"]) for e in venv.kv_log()) == [
        ("count", "probe", "unscored"),
        ("restock", "play", "scored"),
        ("restock", "probe", "unscored"),
    ]
    assert err.count("plugin 'kv-imposter'") == 1  # the server warned once too
