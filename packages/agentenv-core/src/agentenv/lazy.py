"""Lazy package exports: a name is imported from its module the first time it is read.

Every agentenv package uses it so that importing the package stays cheap (``bench/import_time.py``);
a plugin package may too::

    __getattr__, __dir__ = lazy_exports(__name__, {"KvEnv": "env"}, globals())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``exports`` map a name to its submodule.

    A name read once is stored in ``namespace`` (the package's globals), so later reads are plain lookups.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
