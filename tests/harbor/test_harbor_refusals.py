"""What a Harbor task asks that agentenv cannot honour is refused at load, at its task.toml field, naming the task;
nothing of the bundle is served."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from agentenv import load_bundle
from agentenv.errors import BundleError

from tests.harbor.support import SUITE

pytestmark = pytest.mark.usefixtures("images")


def _refusal(tmp_path: Path, toml: str = "", files: dict[str, str] | None = None) -> str:
    """The refusal of the suite with ``toml`` added to fix-config's task.toml and ``files`` written in its folder."""
    bundle = shutil.copytree(SUITE, tmp_path / "suite")
    task = bundle / "tasks" / "fix-config"
    (task / "task.toml").write_text((task / "task.toml").read_text() + toml)
    for name, text in (files or {}).items():
        (task / name).write_text(text)
    with pytest.raises(BundleError) as refused:
        load_bundle(bundle)
    return str(refused.value)


@pytest.mark.parametrize(
    ("toml", "field", "what"),
    [
        ('gpu_types = ["H100"]\n', "environment.gpu_types", "GPU types"),
        ('docker_image = "python:3.12"\n', "environment.docker_image", "the prebuilt image 'python:3.12'"),
        ('allowed_hosts = ["example.org"]\nnetwork_mode = "allowlist"\n', "environment.network_mode", "network"),
        ("allow_internet = true\n", "environment.network_mode", "network access ('public')"),
        ('env = {TOKEN = "${HOST_TOKEN}"}\n', "environment.env.TOKEN", "a value from the host's environment"),
        ("[verifier.environment]\ncpus = 1\n", "verifier.environment", "a separate verifier container"),
    ],
)
def test_a_field_agentenv_cannot_honour_is_refused_at_it(tmp_path: Path, toml: str, field: str, what: str) -> None:
    text = _refusal(tmp_path, toml)
    assert f"tasks/fix-config/task.toml: {field}: Harbor task 'fix-config' asks for {what}" in text
    assert "sum-numbers" not in text  # the other task is fine; the bundle is refused whole for this one


def test_a_compose_environment_is_refused_naming_its_file(tmp_path: Path) -> None:
    text = _refusal(tmp_path, files={"environment/docker-compose.yaml": "services: {main: {build: .}}\n"})
    assert "tasks/fix-config/task.toml: environment/docker-compose.yaml: Harbor task 'fix-config' asks for a" in text
    assert "give the task one container, built from environment/Dockerfile" in text


def test_a_windows_task_is_refused_at_its_os(tmp_path: Path) -> None:
    text = _refusal(tmp_path, 'os = "windows"\n', files={"tests/test.bat": "@echo off\n"})
    assert "tasks/fix-config/task.toml: environment.os: Harbor task 'fix-config' asks for a windows container" in text


def test_a_task_harbor_cannot_read_is_refused_with_harbors_reason(tmp_path: Path) -> None:
    text = _refusal(tmp_path, "[environment.unknown\n")
    assert "tasks/fix-config/task.toml: harbor cannot read this task:" in text


def test_a_bundle_without_the_harbor_env_is_refused_naming_the_env_to_declare(tmp_path: Path) -> None:
    bundle = shutil.copytree(SUITE, tmp_path / "suite")
    (bundle / "bundle.yaml").write_text("name: bare\ntasks: {source: harbor, path: tasks}\n")
    with pytest.raises(BundleError) as refused:
        load_bundle(bundle)
    assert "bundle.yaml:1: envs: the harbor source's tasks play in an env 'harbor' of kind harbor" in str(refused.value)
    assert "declare it: envs: {harbor: {kind: harbor}}" in str(refused.value)
