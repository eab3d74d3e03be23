"""Bundles installed as packages: the ``agentenv.bundles`` entry-point group, and the one resolver of a bundle.

A bundle package registers its bundle under the name it is served by, pointing at the module whose folder
holds ``bundle.yaml`` (the folder ships as package data)::

    [project.entry-points."agentenv.bundles"]
    my-bundle = "my_bundle"

and declares the agentenv-core range it needs in its dependencies (``agentenv-core>=0.2,<0.3``).
``find_bundle`` turns what a user typed (a folder, a bundle.yaml, or an installed bundle's name) into the
bundle's folder; ``load_bundle``, and so ``agentenv serve``, ``agentenv eval``, ``AgentEnv.local`` and the
writers, all go through it. A folder that exists wins over a name. Listing reads metadata only: nothing
of a bundle package is imported until it is loaded.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentenv.errors import BundleError, BundleProblem
from agentenv.specs import BUNDLE_FILE

__all__ = ["GROUP", "InstalledBundle", "find_bundle", "installed_bundles"]

GROUP: Final = "agentenv.bundles"
CORE: Final = "agentenv-core"


@dataclass(frozen=True)
class InstalledBundle:
    """A bundle an installed distribution registers: its name, where it lives, what it needs."""

    name: str  # the entry point's name: what `agentenv serve NAME` takes
    module: str  # the module whose folder holds bundle.yaml
    distribution: str
    version: str
    needs: str  # the agentenv-core range it declares ("agentenv-core>=0.2,<0.3"), or "" when it declares none

    def folder(self) -> Path:
        """The bundle's folder (the module's), found without importing the module; ``BundleError`` if it has none."""
        try:
            spec = importlib.util.find_spec(self.module)
        except (ImportError, ValueError) as exc:
            spec, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "no such module is installed"
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if spec is not None and not locations and spec.origin:
            locations = [str(Path(spec.origin).parent)]
        for location in locations:
            if (Path(location) / BUNDLE_FILE).is_file():
                return Path(location)
        if locations:
            why = f"its folder {locations[0]} has no {BUNDLE_FILE}"
        fix = f"ship {BUNDLE_FILE} and the bundle's files as package data of {self.module}, or fix the entry point"
        raise self._refusal(f"entry point {self.name} = {self.module!r}: {why}; {fix}")

    def problem(self) -> str | None:
        """Why this bundle cannot load with the agentenv-core installed (its range not met or not declared)."""
        from packaging.specifiers import SpecifierSet

        core = md.version(CORE)
        if not self.needs:
            return (
                f"{self.distribution} declares no {CORE} range; add one to its pyproject.toml's dependencies "
                f'("{CORE}>={_minor(core)},<{_next_minor(core)}", the versions it was written for)'
            )
        if not SpecifierSet(self.needs.removeprefix(CORE)).contains(core, prereleases=True):
            return (
                f"{self.distribution} {self.version} needs {self.needs}, but {CORE} {core} is installed: "
                f"pip install '{self.needs}' (or a release of {self.distribution} made for {CORE} {core})"
            )
        return None

    def check(self) -> Path:
        """The bundle's folder, once its agentenv-core range is met; ``BundleError`` naming the fix otherwise."""
        problem = self.problem()
        if problem is not None:
            raise self._refusal(problem)
        return self.folder()

    def _refusal(self, message: str) -> BundleError:
        where = f"{self.name} ({self.distribution} {self.version})"
        return BundleError(self.name, [BundleProblem(where, "", message)])


def installed_bundles() -> list[InstalledBundle]:
    """Every bundle the installed distributions register, by name (metadata only; nothing is imported).

    Two distributions registering one name are both listed (``find_bundle`` refuses the name).
    """
    from agentenv.plugins.records import _requirement  # the range reader trainer integrations use

    found: dict[tuple[str, str], InstalledBundle] = {}
    for ep in md.entry_points(group=GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        version = ep.dist.version if ep.dist is not None else ""
        try:
            needs = _requirement(dist, "", CORE)
        except LookupError:
            needs = ""
        module = ep.value.partition(":")[0].strip()
        # a distribution found twice (on two sys.path entries) is one
        found.setdefault((ep.name, dist), InstalledBundle(ep.name, module, dist, version, needs))
    return sorted(found.values(), key=lambda b: (b.name, b.distribution))


def find_bundle(ref: str | Path) -> Path:
    """The folder of the bundle ``ref`` names: a bundle folder or a bundle.yaml here, else an installed bundle.

    A ``Path``, text naming a file or a folder with bundle.yaml, or text that looks like a path (a separator,
    a leading dot, a .yaml suffix) is returned as it is (the loader says what is wrong with it). A plain name
    is looked up in the ``agentenv.bundles`` group (a folder of that name without bundle.yaml, a package's
    source say, gives way to it); raises ``BundleError`` naming the fix when no installed bundle has it, two
    distributions register it, or the one that does needs another agentenv-core.
    """
    if isinstance(ref, Path) or _is_bundle(Path(ref)) or _looks_like_path(ref):
        return Path(ref)
    everything = installed_bundles()
    matches = [b for b in everything if b.name == ref]
    if not matches and Path(ref).exists():
        return Path(ref)  # a folder without bundle.yaml: the loader says so
    if not matches:
        names = ", ".join(dict.fromkeys(b.name for b in everything)) or "none"
        message = (
            f"no folder of that name here, and no installed bundle of that name (installed bundles: {names}); "
            f"give a bundle folder, or install the package that registers {ref!r} in the {GROUP} entry points"
        )
        raise BundleError(ref, [BundleProblem(ref, "", message)])
    if len({b.distribution for b in matches}) > 1:
        both = " and ".join(f"{b.distribution} {b.version}" for b in matches)
        message = f"registered by {both}; uninstall one of them, or serve the bundle by its folder"
        raise BundleError(ref, [BundleProblem(ref, "", message)])
    return matches[0].check()


def _is_bundle(path: Path) -> bool:
    return path.is_file() or (path / BUNDLE_FILE).is_file()


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.startswith(".") or text.endswith((".yaml", ".yml"))


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _next_minor(version: str) -> str:
    major, minor = (int(p) for p in version.split(".")[:2])
    return f"{major}.{minor + 1}"
