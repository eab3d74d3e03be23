"""The plugin, the supported TRL range (declared once, checked when the integration loads), and a light import."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentenv.cli import main

from tools.matrix import MATRIX


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def test_importing_agentenv_trl_imports_neither_trl_nor_torch() -> None:
    done = run_python(
        "import sys, agentenv_trl, agentenv_trl.plugin\n"
        "from agentenv_trl import AgentEnv, SUPPORTED\n"
        "print(sorted(m for m in ('trl', 'torch', 'transformers') if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_agentenv_plugins_lists_the_trl_integration_with_its_range_and_the_installed_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(x.split()[:2] == ["trl", "agentenv-trl"] for x in out)  # the plugin, by its distribution
    line = next(x for x in out if x.startswith("trl ") and ">=" in x)  # the integration
    declared = MATRIX["trl"].declared().removeprefix("trl")  # the range as agentenv-trl declares it
    assert line.split() == ["trl", "trl", declared, importlib.metadata.version("trl"), "ok"]


def test_the_demo_command_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["demo", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--model" in out and "--quick" in out and "--steps" in out


def test_a_trl_outside_the_supported_range_is_refused_naming_both_versions(tmp_path: Path) -> None:
    # a newer TRL's metadata found first on the path: what `pip install trl==1.17.0` would leave behind
    info = tmp_path / "trl-1.17.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 1.17.0\n")
    done = run_python("from agentenv_trl import AgentEnv", PYTHONPATH=str(tmp_path))
    assert done.returncode != 0
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: agentenv-trl ")
    assert MATRIX["trl"].declared() in message and "trl 1.17.0 is installed" in message
    assert "pip install" in message


def test_without_trl_loading_the_integration_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentenv_trl._version import check_trl

    real = importlib.metadata.version

    def version(name: str) -> str:
        if name == "trl":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(ImportError, match=r"pip install 'agentenv-trl\[trl\]'"):
        check_trl()


def test_the_installed_trl_fits() -> None:
    from agentenv_trl._version import check_trl

    assert check_trl() == importlib.metadata.version("trl")
