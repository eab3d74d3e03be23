"""The version matrix, kept as data: which releases of each trainer (and of OpenEnv, and Ray) the tests run.

Each axis's range is declared once, in a workspace package's pyproject.toml (an extra or a dependency);
``versions`` lists every release the package index has inside it, lowest first, and ``default`` the ones
``nox`` runs by default (the lowest and the highest: a range breaks at its ends; the rest run in
``nox -s matrix``). ``floor`` says what decided the lowest. ``nox -s versions`` asks the index again and
fails on a release in range that ``versions`` lacks; ``nox -s canary`` asks it for the newest release of
each and tests that one with the upper bound lifted (``lifted``). tests/unit/test_release.py checks every
version listed is inside its range. The noxfile's trainer sessions are parametrized from these lists.

Checked against the index on 2026-12-03.

    python -m tools.matrix           # the versions check (nox -s versions)
    python -m tools.matrix newest OUT.json   # the newest release of each axis (nox -s canary)
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Axis:
    """One dependency of the matrix: where its range is declared, the releases tested and why the floor is there."""

    distribution: str  # on the package index
    package: str  # the workspace package that declares the range
    extra: str | None  # the extra holding it, or None for a plain dependency
    versions: tuple[str, ...]  # every release inside the range, lowest first (nox -s matrix runs them all)
    default: tuple[str, ...]  # those `nox` runs by default
    floor: str  # the evidence that decided the lowest version

    def declared(self) -> str:
        """The requirement as the package's pyproject.toml writes it (``trl>=1.10.0,<1.17``)."""
        for line in self._declared():
            if _canonical(Requirement(line).name) == _canonical(self.distribution):
                return line
        raise LookupError(f"{self.package} declares no {self.distribution} requirement")

    def requirement(self) -> Requirement:
        """The declared requirement, parsed."""
        return Requirement(self.declared())

    def specifier(self) -> SpecifierSet:
        return self.requirement().specifier

    def in_range(self, available: list[str]) -> list[str]:
        """The released versions of ``available`` inside the declared range, lowest first."""
        spec = self.specifier()
        return sorted((v for v in available if spec.contains(v)), key=Version)

    def newer(self, available: list[str]) -> list[str]:
        """The released versions of ``available`` above the declared range, lowest first."""
        spec, lowest = self.specifier(), Version(self.versions[0])
        return sorted((v for v in available if Version(v) > lowest and not spec.contains(v)), key=Version)

    def lifted(self) -> str:
        """The declared requirement with its upper bounds dropped (``trl>=1.10.0``): what the canary installs."""
        requirement = self.requirement()
        kept = [str(s) for s in requirement.specifier if s.operator in (">=", ">", "!=")]
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        return f"{requirement.name}{extras}{','.join(sorted(kept))}"

    def canary_line(self, available: list[str]) -> str:
        """One line on the newest release of ``available``: inside the range and tested, or newer than the range."""
        top = max(available, key=Version)
        newer = self.newer(available)
        where = f"{self.package}'s range {self.declared()}"
        if newer:
            found = f"{self.distribution} {', '.join(newer)} newer than {where}"
            return f"{found}: the canary tests {top} with the upper bound lifted; widen the range once its tier passes"
        tested = "tested by default" if top in self.default else "tested by nox -s matrix"
        return f"{self.distribution} {top} is the newest release, inside {where} ({tested})"

    def _declared(self) -> list[str]:
        with open(ROOT / "packages" / self.package / "pyproject.toml", "rb") as f:
            project = tomllib.load(f)["project"]
        return project["optional-dependencies"][self.extra] if self.extra else project["dependencies"]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


MATRIX: dict[str, Axis] = {
    "trl": Axis(
        "trl",
        "agentenv-trl",
        "trl",
        ("1.16.0",),
        ("1.16.0",),
        "1.16.0: 1.15.0's GRPOTrainer computes log-probs with a fused LM head that needs triton, which no CPU build "
        "has (8 of 131 tests fail and 28 error on '_ChunkedLogProbFunction' being None); on 1.14.2 and 1.10.0 "
        "TRL's own OpenReward route trains an env failure as reward 0.0 (tests/trl/test_ors.py), which agentenv "
        "exists to prevent, and tests/trl reads GRPOTrainer._logs as messages where they log text and "
        "drives AsyncGRPO's _AsyncRolloutLoop with 1.16's eos_token_ids (11 fail, 117 pass); 1.8 and 1.9 also "
        "need jmespath; 1.7 and older have no get_reward",
    ),
    "verl": Axis(
        "verl",
        "agentenv-verl",
        "verl",
        ("0.9.1",),
        ("0.9.1",),
        "0.9.1: 0.9.0's V1 trainer has no prepare_step (tests/verl's failed-group tests drive it), names "
        "ct_merge_context_msg ct_merge_non_assistant_msg and builds Continuous Token only when "
        "data.continuous_token.enable is set; 0.8 has no ct_* helpers, which the multi-turn loop builds turns with",
    ),
    "harness-trl": Axis(
        "trl",
        "agentenv-harness",
        "trl",
        ("1.15.0", "1.16.0"),
        ("1.15.0", "1.16.0"),
        "1.15.0: its tier passes (5 of 5, real claude-code and opencode); 1.14.2's harness has no "
        "_turns_from_training_trace (the tests train on its turns) and its _AsyncRolloutLoop takes no eos_token_ids "
        "(TRL's harness worker fails to start): all 5 fail; 1.9 and older have no "
        "trl.experimental.async_grpo.openenv_harness",
    ),
    "openenv": Axis(
        "openenv",
        "agentenv-server",
        None,
        ("0.9.0", "0.10.0"),
        ("0.9.0", "0.10.0"),
        "0.9.0: tests/unit passes on it (765 of 767; the two others named the old range), and nox -s lowest runs "
        "tests/unit on it (lowest-direct); 0.8.0 is not run through both tiers; 0.3 to 0.6 have the server and "
        "client names the server uses but not OpenEnv's TrainingTrace; on 0.7.0, 11 of 85 server and harness unit "
        "tests failed on a machine at load 18 (servers not answering within 60 s), not told apart from the load",
    ),
    "harness-openenv": Axis(
        "openenv",
        "agentenv-harness",
        None,
        ("0.9.0", "0.10.0"),
        ("0.9.0", "0.10.0"),
        "0.9.0: the harness tier passes with it beside TRL 1.15.0 (5 of 5, harness(trl='1.15.0') pairs the lowest "
        "of each); as agentenv-server's otherwise; 0.6 and older have no openenv.core.harness.TrainingTrace",
    ),
    "ray": Axis(
        "ray",
        "agentenv-server",
        "ray",
        ("2.56.1", "2.57.0", "2.57.1", "2.58.0", "2.58.1", "2.59.0", "2.60.0"),
        ("2.56.1", "2.60.0"),
        "2.56.1: 2.56.0, 2.55.1, 2.54.0 and 2.48.0 cannot deploy a Serve application beside protobuf 7 (which their "
        "metadata allows and the index serves): 'FieldDescriptor' object has no attribute 'label' (6 errors and "
        "1 failure of 18); 2.56.1 and 2.58.1 pass the tier (the killed-replica row timed out once each "
        "for 2.56.1 and 2.58.1 with other tiers running, and passed alone); 2.48.0 also lacked the argument-less "
        "serve.ingress() (the replica now names an ingress builder, which 2.48 has); 2.47 and older have no "
        "ray.serve.config.RequestRouterConfig (the replicas' router)",
    ),
}


def index_versions(distribution: str) -> list[str]:
    """The released versions the package index has (``pip index versions``; needs the index to be reachable)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", distribution], capture_output=True, text=True, check=False
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if line is None:
        raise RuntimeError(f"pip index versions {distribution} failed: {done.stderr.strip() or done.stdout.strip()}")
    return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip() and not Version(v.strip()).is_prerelease]


def check_versions() -> int:
    """Compare each axis with the index: exit 1 naming each version in range that is not tested."""
    missing = 0
    for name, axis in MATRIX.items():
        available = axis.in_range(index_versions(axis.distribution))
        untested = [v for v in available if v not in axis.versions]
        print(f"{name}: declared {axis.requirement()}; on the index in range: {', '.join(available) or 'none'}; "
              f"tested: {', '.join(axis.versions)} (by default: {', '.join(axis.default)})")  # fmt: skip
        if untested:
            missing += len(untested)
            print(f"  not tested: {', '.join(untested)}; add them to MATRIX[{name!r}] in tools/matrix.py")
    return 1 if missing else 0


def newest() -> dict[str, dict[str, object]]:
    """Per axis: the newest release on the index, whether one is newer than the declared range, and the line
    that says so."""
    plan: dict[str, dict[str, object]] = {}
    for name, axis in MATRIX.items():
        available = index_versions(axis.distribution)
        plan[name] = {"newest": max(available, key=Version), "newer": bool(axis.newer(available)),
                      "line": axis.canary_line(available)}  # fmt: skip
    return plan


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "newest":
        Path(argv[1]).write_text(json.dumps(newest(), indent=2))
        return 0
    if argv:
        raise SystemExit(f"usage: python -m tools.matrix [newest OUT.json]; got {' '.join(argv)}")
    return check_versions()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
