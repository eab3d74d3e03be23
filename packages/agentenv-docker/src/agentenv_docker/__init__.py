"""agentenv-docker: container envs (``kind: container``) for agentenv bundles, on a local Docker engine.

    envs:
      box: {kind: container, image: my-box:1, build: box, command: [python3, /env/env.py]}

An env's program runs in a container of its own per episode (no network, limits, the bundle's declared files
read-only, a workdir volume) and speaks agentenv's JSON lines on the container's stdin and stdout.
``agentenv image build BUNDLE`` builds the images; nothing is pulled from a registry. The names below load
on first use: importing the package runs no docker command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

__version__: str  # read from the installed metadata on first use: written once, in pyproject.toml

_EXPORTS = {
    "SUPPORTED": "engine",
    "ContainerEnv": "env",
    "ContainerOptions": "spec",
    "EngineMissing": "engine",
    "ImageError": "images",
    "Limits": "spec",
    "build_base": "images",
    "build_bundle": "images",
    "build_image": "images",
}

__all__ = [
    "SUPPORTED",
    "ContainerEnv",
    "ContainerOptions",
    "EngineMissing",
    "ImageError",
    "Limits",
    "build_base",
    "build_bundle",
    "build_image",
]

if TYPE_CHECKING:
    from .engine import SUPPORTED, EngineMissing
    from .env import ContainerEnv
    from .images import ImageError, build_base, build_bundle, build_image
    from .spec import ContainerOptions, Limits

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), distribution="agentenv-docker")
