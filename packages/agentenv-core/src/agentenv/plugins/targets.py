"""Import what a bundle names as ``module:attr`` (an env class, a check function), from the bundle folder first."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["resolve"]


def resolve(target: str, *, bundle_dir: Path | None = None, what: str = "object") -> Any:
    """Import ``"module:attr"``; a module in ``bundle_dir`` is found there first.

    Raises ``LookupError`` with a message naming the target (as ``what``) and the fix.
    """
    if ":" not in target:
        raise LookupError(f"{what} {target!r} is not of the form 'module:name'; write it as module:name")
    module_name, _, attr = target.partition(":")
    module = _import_module(module_name, bundle_dir)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LookupError(f"{what} {target!r}: module {module_name!r} has no {attr!r}; check the name")
        obj = getattr(obj, part)
    return obj


_bundle_modules: dict[tuple[str, str], ModuleType] = {}
_bundle_lock = threading.Lock()


def _import_module(module_name: str, bundle_dir: Path | None) -> ModuleType:
    """Import a module from the bundle folder (by file, under a private name) or else normally.

    Bundle modules are imported by path, not through sys.path, so two bundles may both have an
    ``env.py`` without one shadowing the other.
    """
    if bundle_dir is not None:
        rel = Path(*module_name.split("."))
        for candidate in (bundle_dir / rel.with_suffix(".py"), bundle_dir / rel / "__init__.py"):
            if candidate.is_file():
                key = (str(candidate.resolve()), module_name)
                with _bundle_lock:
                    if key in _bundle_modules:
                        return _bundle_modules[key]
                    tag = hashlib.sha1(str(bundle_dir.resolve()).encode()).hexdigest()[:10]
                    private = f"_agentenv_bundle_{tag}_{module_name.replace('.', '_')}"
                    spec = importlib.util.spec_from_file_location(private, candidate)
                    if spec is None or spec.loader is None:
                        break
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[private] = module
                    # the bundle folder is importable while the module runs, so it may import its siblings
                    sys.path.insert(0, str(bundle_dir))
                    try:
                        spec.loader.exec_module(module)
                    except BaseException:
                        sys.modules.pop(private, None)
                        raise
                    finally:
                        sys.path.remove(str(bundle_dir))
                    _bundle_modules[key] = module
                    return module
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        where = f" (looked in {bundle_dir} and on sys.path)" if bundle_dir else ""
        raise LookupError(f"module {module_name!r} not found{where}: {exc}") from None
