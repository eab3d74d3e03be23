"""Lazy package exports: a name is imported from its module the first time it is read.

Every agentenv package uses it so that importing the package stays cheap (``bench/import_time.py``);
a plugin package may too::

    __getattr__, __dir__ = lazy_exports(__name__, {"KvEnv": "env"}, globals(), distribution="agentenv-kv")

With ``distribution``, ``__version__`` is that distribution's installed version: the version is written once, in its
pyproject.toml, and read from the metadata on first use (importing ``importlib.metadata`` costs ~10 ms).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any], *, distribution: str | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``exports`` map a name to its submodule (and whose
    ``__version__`` is ``distribution``'s installed version, when given).

    A name read once is stored in ``namespace`` (the package's globals), so later reads are plain lookups.
    """
    names = [*exports, "__version__"] if distribution else list(exports)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if name == "__version__" and distribution:
            from importlib.metadata import version

            value: Any = version(distribution)
        elif module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:
            value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *names])

    return __getattr__, __dir__
