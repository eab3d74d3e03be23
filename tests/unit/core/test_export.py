"""``agentenv export``: records a real server wrote, as ATIF checked by Harbor's own validator, and as rows
``datasets`` reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agentenv.cli import main
from agentenv.client.settings import Shared
from agentenv.client.sync import SyncSession
from agentenv.errors import EpisodeLost

from tests.support import FAKE

HARBOR = "harbor==0.25.0"  # ships ATIF's models and validator (harbor.utils.trajectory_validator); Python >= 3.12


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agentenv_server import ServerThread, build_app

    folder = tmp_path_factory.mktemp("export") / "records"
    server = ServerThread(build_app(FAKE, record=folder)).start()
    try:
        for task, replies in (("echo", ("ping",)), ("two-turn", ("hello", "goodbye")), ("deploy-fails", ("x",))):
            session = SyncSession(Shared(server.url, client="export-test"))
            rollout = session.rollout(task)
            rollout.start()
            try:
                for reply in replies:
                    rollout.call("echo", {"text": "ping"})
                    rollout.call("no_such_tool", {})
                    rollout.end_turn(reply)
            except EpisodeLost:
                pass
            rollout.conclude()
            session.close()
    finally:
        server.stop()
    return folder


@pytest.fixture(scope="module")
def harbor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with Harbor (its own Python 3.12: Harbor needs it), made by uv from its cache where it can."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    venv = tmp_path_factory.mktemp("harbor") / "venv"
    made = subprocess.run([uv, "venv", "-q", "--python", python312(), str(venv)], capture_output=True, text=True)
    assert made.returncode == 0, f"a Python 3.12 for Harbor's validator: {made.stderr}"
    python = venv / "bin" / "python"  # named, not found: an outer venv or $UV_PYTHON must not decide where it goes
    installed = subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), HARBOR], capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr
    return python


def python312() -> str:
    """A Python 3.12 on this machine (on PATH, or pyenv's): uv cannot download one here."""
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    found = [
        shutil.which("python3.12"),
        *(str(p) for r in roots if r for p in Path(r).glob("versions/3.12*/bin/python3.12")),
    ]
    for candidate in filter(None, found):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    raise AssertionError(
        "Harbor's ATIF validator needs a Python 3.12: install one (pyenv install 3.12, apt python3.12)"
    )


def test_atif_trajectories_pass_harbors_validator(records, harbor, tmp_path, capsys):
    out = tmp_path / "atif"
    assert main(["export", str(records), "--format", "atif", "--out", str(out)]) == 0
    assert "wrote 3 episode(s)" in capsys.readouterr().out
    files = sorted(out.glob("*.json"))
    assert [f.name for f in files] == ["000001.json", "000002.json", "000003.json", "manifest.json"]
    for path in files[:3]:
        checked = subprocess.run([str(harbor), "-m", "harbor.utils.trajectory_validator", str(path)],
                                 capture_output=True, text=True, timeout=120)  # fmt: skip
        assert checked.returncode == 0, f"{path.name}: {checked.stdout}{checked.stderr}"
    echo = json.loads(files[0].read_text())
    assert echo["schema_version"] == "ATIF-v1.7" and echo["extra"]["reward"] == 1.0
    call = echo["steps"][2]
    assert call["tool_calls"][0]["arguments"] == {"text": "ping"}
    assert call["observation"]["results"][0]["content"] == "ping"


def test_jsonl_and_parquet_rows_are_read_by_datasets(records, tmp_path):
    from datasets import load_dataset

    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"rows.{fmt}"
        assert main(["export", str(records), "--format", fmt, "--out", str(out)]) == 0
        rows = load_dataset("json" if fmt == "jsonl" else "parquet", data_files=str(out), split="train")
        assert rows["task"] == ["echo", "two-turn", "deploy-fails"]
        assert rows["has_verdict"] == [True, True, False] and rows["reward"] == [1.0, 1.0, None]
        two = rows[1]
        assert [m["role"] for m in two["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                                        "assistant", "user", "assistant", "tool", "assistant", "tool",
                                                        "assistant"]  # fmt: skip
        assert [s["id"] for s in two["step_rewards"]] == ["answer-1", "answer-2"]
