"""The version matrix, kept as data: which versions of each trainer (and of OpenEnv, and Ray) the tests run.

Each list holds every version the package index has inside the range the package declares (its extra or
its dependency in ``packages/*/pyproject.toml``), lowest first. ``nox -s versions`` asks the index again and
fails when a version in range is missing here; tests/unit/test_release.py checks every version listed is
inside its range. The noxfile's trainer sessions are parametrized from these lists.

Checked against the index on 2026-12-01: each range holds one released version so far.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Axis:
    """One dependency of the matrix: where its range is declared, and the versions tested."""

    distribution: str  # on the package index
    package: str  # the workspace package that declares the range
    extra: str | None  # the extra holding it, or None for a plain dependency
    versions: tuple[str, ...]

    def requirement(self) -> Requirement:
        """The declared requirement (``trl>=1.16.0,<1.17``), read from the package's pyproject.toml."""
        with open(ROOT / "packages" / self.package / "pyproject.toml", "rb") as f:
            project = tomllib.load(f)["project"]
        declared = project["optional-dependencies"][self.extra] if self.extra else project["dependencies"]
        for line in declared:
            requirement = Requirement(line)
            if _canonical(requirement.name) == _canonical(self.distribution):
                return requirement
        raise LookupError(f"{self.package} declares no {self.distribution} requirement")

    def specifier(self) -> SpecifierSet:
        return self.requirement().specifier

    def in_range(self, available: list[str]) -> list[str]:
        """The released versions of ``available`` inside the declared range, lowest first."""
        spec = self.specifier()
        return sorted((v for v in available if spec.contains(v)), key=Version)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


MATRIX: dict[str, Axis] = {
    "trl": Axis("trl", "agentenv-trl", "trl", ("1.16.0",)),
    "verl": Axis("verl", "agentenv-verl", "verl", ("0.9.1",)),
    "harness-trl": Axis("trl", "agentenv-harness", "trl", ("1.16.0",)),
    "openenv": Axis("openenv", "agentenv-server", None, ("0.10.0",)),
    "ray": Axis("ray", "agentenv-server", "ray", ("2.60.0",)),
}


def index_versions(distribution: str) -> list[str]:
    """The versions the package index has (``pip index versions``; needs the index to be reachable)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", distribution], capture_output=True, text=True, check=False
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if line is None:
        raise RuntimeError(f"pip index versions {distribution} failed: {done.stderr.strip() or done.stdout.strip()}")
    return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip() and not Version(v.strip()).is_prerelease]


def main() -> int:
    """Compare each axis with the index: exit 1 naming each version in range that is not tested."""
    missing = 0
    for name, axis in MATRIX.items():
        available = axis.in_range(index_versions(axis.distribution))
        untested = [v for v in available if v not in axis.versions]
        print(f"{name}: declared {axis.requirement()}; on the index in range: {', '.join(available) or 'none'}; "
              f"tested: {', '.join(axis.versions)}")  # fmt: skip
        if untested:
            missing += len(untested)
            print(f"  not tested: {', '.join(untested)}; add them to MATRIX[{name!r}] in tools/matrix.py")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
