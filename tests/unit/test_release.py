"""Independent releases: each package's version, changelog, pins, Project-URLs and the version matrix agree.

The release session (``nox -s release``) builds and installs the wheels; these are the fast checks of
what it relies on, run with the unit tier.
"""

from __future__ import annotations

import importlib
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support import ROOT
from tools.matrix import MATRIX
from tools.release import IMPORT_NAMES, tag, version_of
from tools.site import PACKAGES, urls

INTEGRATIONS = [p for p in PACKAGES if p != "agentenv-core"]


def _project(distribution: str) -> dict:
    with open(ROOT / "packages" / distribution / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _requirement(distribution: str, name: str) -> Requirement:
    return next(Requirement(r) for r in _project(distribution)["dependencies"] if Requirement(r).name == name)


@pytest.mark.parametrize("distribution", PACKAGES)
def test_each_package_says_its_own_version_where_python_can_read_it(distribution):
    module = importlib.import_module(IMPORT_NAMES[distribution])
    fix = f"{module.__name__}.__version__ is the installed metadata's: reinstall it (uv sync)"
    assert module.__version__ == version_of(distribution), fix


@pytest.mark.parametrize("distribution", PACKAGES)
def test_each_changelog_has_a_section_for_the_current_version(distribution):
    changelog = (ROOT / "packages" / distribution / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (\d+\.\d+\.\d+\S*)", changelog, re.MULTILINE)
    assert headings, f"{distribution}/CHANGELOG.md has no '## VERSION' section"
    assert headings[0] == version_of(distribution), f"the newest section of {distribution}'s changelog is {headings[0]}"
    assert tag(distribution, version_of(distribution)) in changelog.replace("VERSION", version_of(distribution))


def test_the_wire_protocol_is_core_s_minor_version():
    # a new protocol is a new minor version of core and server (docs/releases.md)
    from agentenv.wire import PROTOCOL

    assert PROTOCOL == 2
    assert Version(version_of("agentenv-core")).release[:2] == (0, PROTOCOL)
    assert Version(version_of("agentenv-server")).release[:2] == (0, PROTOCOL)


@pytest.mark.parametrize("distribution", INTEGRATIONS)
def test_every_dependant_pins_core_to_its_current_minor_version(distribution):
    major, minor = Version(version_of("agentenv-core")).release[:2]
    pin = _requirement(distribution, "agentenv-core")
    assert str(pin.specifier) == f"<{major}.{minor + 1},>={major}.{minor}", f"{distribution} pins {pin}"
    assert pin.specifier.contains(version_of("agentenv-core"))


@pytest.mark.parametrize("distribution", ["agentenv-trl", "agentenv-harness"])
def test_the_server_pin_admits_the_server_s_version(distribution):
    assert _requirement(distribution, "agentenv-server").specifier.contains(version_of("agentenv-server"))


@pytest.mark.parametrize("distribution", PACKAGES)
def test_each_package_declares_documentation_source_and_changelog_urls_at_the_project_s_addresses(distribution):
    project_urls = _project(distribution)["urls"]
    site, repo = urls().site, urls().repo
    assert project_urls["Documentation"].startswith(site)
    assert project_urls["Source"] == f"{repo}/tree/main/packages/{distribution}"
    assert project_urls["Changelog"] == f"{site}changelog/{distribution}/"
    assert project_urls["Issues"] == f"{repo}/issues"


@pytest.mark.parametrize("axis", MATRIX)
def test_every_version_of_the_matrix_is_inside_the_declared_range(axis):
    specifier = MATRIX[axis].specifier()
    assert MATRIX[axis].versions, f"no {axis} version is tested"
    for version in MATRIX[axis].versions:
        assert specifier.contains(version), f"{axis} {version} is outside {MATRIX[axis].requirement()}"
    assert list(MATRIX[axis].versions) == sorted(MATRIX[axis].versions, key=Version), "lowest first"


def test_the_readme_says_which_versions_each_session_covers():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- --8<-- [start:sessions] -->")[1].split("<!-- --8<-- [end:sessions] -->")[0]
    for axis in MATRIX.values():
        for version in axis.versions:
            assert f"{axis.distribution} {version}" in table, f"the README's session table does not name {version}"
