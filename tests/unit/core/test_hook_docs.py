"""Every hook is documented like pytest's and tested (datasette's two checks).

A new hookspec without its reference entry, or without a test named for it, fails here.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from agentenv.plugins import Plugins
from agentenv.plugins.hookspecs import SPEC_CLASSES

TESTS = Path(__file__).resolve().parents[2]
SPECS = {name: spec for spec in SPEC_CLASSES for name in vars(spec) if name.startswith("agentenv_")}
HOOKS = sorted(SPECS)
SECTIONS = ("What for:", "Parameters:", "Returns:", "Example::")


def test_every_hook_of_the_manager_belongs_to_a_spec_class():
    caller_names = {name for name in vars(Plugins(entry_points=False).manager.hook) if not name.startswith("_")}
    assert caller_names == set(HOOKS)
    assert all(hook.startswith("agentenv_") for hook in HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented_with_what_for_parameters_returns_and_an_example(hook):
    doc = inspect.getdoc(getattr(SPECS[hook], hook)) or ""
    missing = [section for section in SECTIONS if section not in doc]
    assert not missing, f"{hook} has no {', '.join(missing)} in its docstring"
    positions = [doc.index(section) for section in SECTIONS]
    assert positions == sorted(positions), f"{hook}: write What for, Parameters, Returns, Example in that order"
    assert doc.split("\n", 1)[0].strip().endswith("."), f"{hook}: start with a one-line summary"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_parameter_is_described(hook):
    doc = inspect.getdoc(getattr(SPECS[hook], hook)) or ""
    parameters = doc[doc.index("Parameters:") : doc.index("Returns:")]
    argnames = getattr(Plugins(entry_points=False).manager.hook, hook).spec.argnames
    if not argnames:
        assert parameters.strip() == "Parameters: none.", f"{hook} takes no parameters; say 'Parameters: none.'"
    for name in argnames:
        assert re.search(rf"^\s+{name}: \S", parameters, re.MULTILINE), f"{hook}: describe parameter {name!r}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_example_implements_the_hook(hook):
    doc = inspect.getdoc(getattr(SPECS[hook], hook)) or ""
    example = doc[doc.index("Example::") :]
    argnames = getattr(Plugins(entry_points=False).manager.hook, hook).spec.argnames
    assert "@hookimpl" in example
    assert f"def {hook}({', '.join(argnames)}):" in example


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_test_named_for_it(hook):
    pattern = re.compile(rf"^(?:async )?def test_\w*{hook}\w*\(", re.MULTILINE)
    where = [
        path.relative_to(TESTS)
        for path in sorted(TESTS.rglob("test_*.py"))
        if path != Path(__file__).resolve() and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert where, f"no test is named for {hook}; add one (def test_{hook}_...) that uses it"
