"""The TRL and OpenEnv versions agentenv-harness supports, and the checks run before either is imported.

Both ranges are declared once, in agentenv-harness's pyproject.toml: TRL's in the ``trl`` extra
(``trl = ["trl>=1.15.0,<1.17"]``), OpenEnv's in the dependencies (the harness always needs its capture
proxy). ``agentenv.plugins.Integration`` reads them from the installed metadata; nothing here restates them.
"""

from __future__ import annotations

from typing import Final

from agentenv.plugins import Integration

__all__ = ["OPENENV", "TRL", "check_openenv", "check_trl"]

TRL: Final[Integration] = Integration(
    name="harness",
    package="agentenv-harness",
    trainer="trl",
    extra="trl",
    offers={
        "session_factory": "agentenv_harness:AgentEnvSessionFactory",
        "dataset": "agentenv_harness:prompt_rows",
        "run": "agentenv_harness.cli:run_run",
    },
)
OPENENV: Final[Integration] = Integration(
    name="harness-openenv",
    package="agentenv-harness",
    trainer="openenv",
    extra="trl",
    offers={"capture_proxy": "agentenv_harness:CaptureProxy"},
)


def check_openenv(version: str | None = None) -> str:
    """Return the installed OpenEnv version when it fits; ``ImportError`` naming both versions and the fix."""
    return OPENENV.check(version, why="agentenv_harness runs OpenEnv's capture proxy")


def check_trl(version: str | None = None) -> str | None:
    """Return the installed TRL version (None when TRL is not installed); ``ImportError`` when it does not fit.

    The harness runs without TRL (any OpenEnv consumer may use its session factory), but not with a TRL
    whose harness protocol it was not built for.
    """
    if TRL.installed_version() is None and version is None:
        return None
    return TRL.check(version, why="agentenv_harness drives TRL's harness rollouts")
