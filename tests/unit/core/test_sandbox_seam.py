"""The sandbox seam: backends registered by ``agentenv_sandboxes``, chosen once, refused where they cannot run."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentenv import sandbox
from agentenv.plugins import Plugins, hookimpl, reset_plugins
from agentenv.plugins.records import Sandbox
from agentenv.sandbox import Prepared, Program, SandboxUnavailable

from tests.support import FAKE


class Broken:
    name = "broken"

    def problem(self) -> str | None:
        return "its engine is not running: start it (systemctl start broken)"

    def describe(self) -> str:
        return "broken"

    def prepare(self, program: Program) -> Prepared:
        raise AssertionError("a backend that cannot run is never asked to prepare")


class Echo:
    name = "echo"

    def problem(self) -> str | None:
        return None

    def describe(self) -> str:
        return "echo: prints what it would run"

    def prepare(self, program: Program) -> Prepared:
        return Prepared(["echo", "would run", *program.argv], dict(program.env), program.cwd)


class Backends:
    @hookimpl
    def agentenv_sandboxes(self) -> Iterator[Sandbox]:
        yield Sandbox("broken", Broken)
        yield Sandbox("echo", Echo)


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Plugins]:
    """The process's plugins with ``Backends`` added, and no sandbox chosen; both undone after."""
    from agentenv.plugins import manager as module

    loaded = Plugins(entry_points=False, extra=[("backends", Backends())])
    monkeypatch.setattr(module, "_loaded", [loaded])
    monkeypatch.delenv(sandbox.VAR, raising=False)
    sandbox.use(None)
    yield loaded
    sandbox.use(None)
    reset_plugins()


def test_agentenv_sandboxes_registers_core_backends_and_a_plugins(loaded: Plugins) -> None:
    assert {"bwrap", "none", "broken", "echo"} <= set(loaded.sandboxes())
    sandbox.use("echo")
    prepared = sandbox.current().prepare(Program(("true",), {}, Path("/")))
    assert prepared.argv == ["echo", "would run", "true"]


def test_the_default_is_bwrap_and_the_variable_chooses_another(loaded: Plugins, monkeypatch) -> None:
    assert sandbox.current().name == "bwrap"
    monkeypatch.setenv(sandbox.VAR, "echo")
    sandbox.use(None)
    assert sandbox.current().name == "echo"


def test_a_backend_that_cannot_run_is_refused_with_its_fix(loaded: Plugins) -> None:
    sandbox.use("broken")
    with pytest.raises(SandboxUnavailable) as refused:
        sandbox.current()
    assert str(refused.value) == (
        "sandbox 'broken' (chosen) cannot run here: its engine is not running: start it (systemctl start broken)"
    )


def test_an_unknown_sandbox_names_the_known_ones(loaded: Plugins) -> None:
    sandbox.use("firejail")
    with pytest.raises(SandboxUnavailable, match=r"unknown sandbox 'firejail' \(chosen\); known: broken, bwrap, echo"):
        sandbox.current()


def test_none_is_said_loudly(loaded: Plugins, caplog: pytest.LogCaptureFixture) -> None:
    sandbox.use("none")
    assert sandbox.current().name == "none"
    assert any(r.levelname == "WARNING" and "NO SANDBOX" in r.getMessage() for r in caplog.records)


def serve_refusal(*args: str, path: str) -> str:
    """What ``agentenv serve`` of the fake bundle (it has a bash task) says when it exits at start."""
    done = subprocess.run(
        [sys.executable, "-m", "agentenv.cli", "serve", str(FAKE), "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": path, "LANG": "C.UTF-8"},
    )
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_serve_refuses_to_start_without_bwrap_and_names_the_fix(tmp_path: Path) -> None:
    stderr = serve_refusal(path=str(tmp_path))  # a PATH with no bwrap on it
    assert (
        "error: sandbox 'bwrap' (the default) cannot run here: bwrap (bubblewrap) is not installed: install "
        "bubblewrap (apt-get install bubblewrap), or run without a sandbox on purpose (--no-sandbox)"
    ) in stderr


def test_serve_refuses_an_unknown_sandbox() -> None:
    stderr = serve_refusal("--sandbox", "firejail", path="/usr/bin:/bin")
    assert "error: unknown sandbox 'firejail' (chosen); known: bwrap, " in stderr  # and any a plugin installed
    assert "none" in stderr.split("known: ", 1)[1]
