"""``AgentEnv.local`` opens a bundle installed as a package by its name (a distribution registering it in the
``agentenv.bundles`` entry points, on sys.path)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentenv_trl import AgentEnv

from tests.support.installed_site import Site


def test_agentenv_local_plays_an_installed_bundle_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "site").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.chdir(tmp_path)
    folder = Site(tmp_path / "site").install("calc-tasks", "calc")
    env = AgentEnv.local("calc")
    try:
        assert [row["task_id"] for row in env.dataset] == ["add-001"]
        assert env.dataset_for("eval")[0]["task_id"] == "add-002"
        assert env.shared.url.startswith("local:")  # played in this process, from the installed package's folder
        assert Path(env.shared.url.removeprefix("local:")).resolve() == folder.resolve()
    finally:
        env.close()
    assert (folder / "bundle.yaml").is_file()
