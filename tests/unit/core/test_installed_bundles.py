"""Bundles found by name: distributions on sys.path (real ``*.dist-info`` folders read by importlib.metadata) that
register bundles in the ``agentenv.bundles`` entry points, resolved by ``find_bundle`` and loaded by name."""

from __future__ import annotations

import re
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from agentenv import BundleError, find_bundle, load_bundle
from agentenv.bundle.installed import installed_bundles
from agentenv.cli import main
from agentenv.cli.scaffold import scaffold

from tests.support.installed_site import Site

CORE = version("agentenv-core")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.chdir(tmp_path)  # no folder named like a bundle where the names are typed
    return Site(root)


def test_an_installed_bundle_is_loaded_by_its_name(site):
    folder = site.install("calc-tasks", "calc")
    assert find_bundle("calc") == folder
    bundle = load_bundle("calc")
    assert bundle.path == folder
    assert [t.id for t in bundle.tasks] == ["add-002", "add-001"]


def test_a_folder_that_exists_wins_over_an_installed_name(site, tmp_path):
    site.install("calc-tasks", "calc")
    scaffold(tmp_path / "calc", "calc", package=False)
    assert find_bundle("calc") == Path("calc")


def test_an_unknown_name_is_refused_naming_the_installed_bundles(site):
    site.install("calc-tasks", "calc")
    with pytest.raises(BundleError) as caught:
        load_bundle("clac")
    message = str(caught.value.problems[0])
    assert "no installed bundle of that name (installed bundles: calc)" in message
    assert "agentenv.bundles" in message


def test_a_bundle_needing_another_core_is_refused_naming_the_package_the_range_and_the_core_found(site, capsys):
    site.install("future-tasks", "future", needs="agentenv-core>=9,<10")
    assert main(["tasks", "future"]) == 2
    err = capsys.readouterr().err
    assert f"future-tasks 1.0 needs agentenv-core>=9,<10, but agentenv-core {CORE} is installed" in err
    assert "pip install 'agentenv-core>=9,<10'" in err


def test_a_bundle_package_declaring_no_core_range_is_refused_with_the_line_to_add(site):
    site.install("loose-tasks", "loose", needs=None)
    with pytest.raises(BundleError, match="loose-tasks declares no agentenv-core range; add one to its pyproject"):
        load_bundle("loose")


def test_two_distributions_registering_one_name_are_both_named(site):
    site.install("calc-tasks", "calc")
    site.install("calc-fork", "calc")
    with pytest.raises(BundleError, match=re.escape("registered by calc-fork 1.0 and calc-tasks 1.0; uninstall one")):
        load_bundle("calc")


def test_an_entry_point_whose_module_has_no_bundle_yaml_says_what_to_ship(site):
    site.install("empty-tasks", "empty", ship=False)
    with pytest.raises(
        BundleError, match=re.escape("has no bundle.yaml; ship bundle.yaml and the bundle's files as package data")
    ):
        load_bundle("empty")


def test_agentenv_bundles_lists_name_distribution_version_range_and_status(site, capsys):
    site.install("calc-tasks", "calc")
    site.install("future-tasks", "future", needs="agentenv-core>=9,<10")
    assert [b.name for b in installed_bundles()] == ["calc", "future"]
    assert main(["bundles"]) == 0
    assert main(["bundles", "--check"]) == 1
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:] if line.strip()}
    assert rows["calc"][1:4] == ["calc-tasks", "1.0", "agentenv-core>=0.2,<1"]
    assert rows["calc"][-1] == "ok"
    assert "future-tasks 1.0 needs" in " ".join(rows["future"])


def test_init_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert main(["init", str(tmp_path / "taken")]) == 2
    assert "not an empty folder; give agentenv init a new folder" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["notes.txt"]


def test_init_package_writes_a_pyproject_registering_the_bundle_with_the_core_range(tmp_path):
    scaffold(tmp_path / "pkg", "my-tasks", package=True)
    text = (tmp_path / "pkg" / "pyproject.toml").read_text()
    major, minor = CORE.split(".")[:2]
    assert f'dependencies = ["agentenv-core>={major}.{minor},<{major}.{int(minor) + 1}"]' in text
    assert '[project.entry-points."agentenv.bundles"]\nmy-tasks = "my_tasks"' in text
    assert load_bundle(tmp_path / "pkg" / "src" / "my_tasks").name == "my-tasks"


@pytest.fixture(autouse=True)
def _no_stale_metadata() -> None:
    # importlib.metadata caches nothing across calls, but sys.path_importer_cache keeps finders of removed folders
    sys.path_importer_cache.clear()
