"""The env contract: a stateful tool provider, one instance per episode.

An env is constructed cheaply (its tools are known right away), then ``deploy()`` (may be slow, and never sees the
task: it may run before the task is known), ``setup(task)`` (optional, fast: the task's own state), ``call(name,
args)`` any number of times, and ``teardown()`` exactly once. Every method may be
sync or ``async``: agentenv awaits async ones on its event loop and runs sync ones in a thread.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from agentenv.wire import Tool

__all__ = ["Env", "Tool", "render_result", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

_TOOL_ATTR = "__agentenv_tool__"


def tool(
    parameters: Mapping[str, Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Callable[[F], F]:
    """Mark an ``Env`` method as a tool.

    ``parameters`` is the JSON Schema of the arguments (an object schema; nested objects, arrays,
    enums and ``required`` all work). The description defaults to the docstring's first paragraph.

    Example::

        class Calculator(Env):
            @tool({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]})
            def add(self, a: float, b: float) -> float:
                "Add two numbers."
                return a + b
    """

    def mark(fn: F) -> F:
        doc = inspect.getdoc(fn) or ""
        setattr(
            fn,
            _TOOL_ATTR,
            Tool(
                name=name or fn.__name__,
                description=description if description is not None else doc.split("\n\n")[0].strip(),
                parameters=dict(parameters or {"type": "object", "properties": {}}),
            ),
        )
        return fn

    return mark


class Env:
    """Base class for in-process envs (the ``python`` env kind: ``target: module:Class``).

    agentenv constructs ``Class(config, bundle_dir)`` once per episode; ``config`` is the env's
    ``config`` mapping from bundle.yaml, ``bundle_dir`` the bundle's folder (for fixtures). Keep the
    constructor cheap and free of side effects: slow work belongs in ``deploy``.

    Tools are the methods marked with ``@tool``; override ``tools`` and ``call`` to build them
    another way. Raise ``agentenv.ToolError`` for the caller's mistake: the message goes back to the
    model. Any other exception (``EnvCrashed`` on purpose) is the env's: the episode fails, never trained on.
    """

    def __init__(self, config: Mapping[str, Any], bundle_dir: Path) -> None:
        self.config = dict(config)
        self.bundle_dir = Path(bundle_dir)

    @classmethod
    def declared_tools(cls) -> list[Tool]:
        """The ``@tool`` methods of the class, in definition order (known without an instance; computed once
        per class: every episode lists them)."""
        declared = cls.__dict__.get("_agentenv_declared_tools")
        if declared is None:
            seen: dict[str, Tool] = {}
            for klass in reversed(cls.__mro__):
                for value in vars(klass).values():
                    spec = getattr(value, _TOOL_ATTR, None)
                    if isinstance(spec, Tool):
                        seen[spec.name] = spec
            declared = cls._agentenv_declared_tools = tuple(seen.values())
        return list(declared)

    @classmethod
    def tool_methods(cls) -> dict[str, str]:
        """Tool name -> method name, for the ``@tool`` methods (computed once per class)."""
        table = cls.__dict__.get("_agentenv_tool_methods")
        if table is None:
            table = {}
            for klass in reversed(cls.__mro__):
                for attr, value in vars(klass).items():
                    spec = getattr(value, _TOOL_ATTR, None)
                    if isinstance(spec, Tool):
                        table[spec.name] = attr
            cls._agentenv_tool_methods = table
        return table

    def tools(self) -> list[Tool]:
        """The tools this env offers (before and after deploy)."""
        return self.declared_tools()

    def deploy(self) -> Any:
        """Bring the env up (start services, load fixtures). May be slow; may be ``async``."""
        return None

    def setup(self, task: Any) -> Any:
        """Prepare the deployed env for one task (``task``: an ``agentenv.Task``; its ``metadata`` is the place for
        the task's own state). Optional; keep it fast: a server started with ``--warm`` deploys envs before their
        task is known, and only this step runs while the rollout waits. May be ``async``."""
        return None

    def call(self, name: str, args: Mapping[str, Any]) -> Any:
        """Run tool ``name`` with validated ``args``; the return value is shown to the model."""
        method = self.tool_methods().get(name)
        if method is None:
            raise LookupError(f"{type(self).__name__} has no tool {name!r}")
        return getattr(self, method)(**args)

    def teardown(self) -> Any:
        """Release what ``deploy`` took. Called exactly once per episode, even after a failure."""
        return None


def render_result(value: Any) -> str:
    """What the model sees of a tool's return value: text as is, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
