"""The site's generated references: the bundle files, the command line, the plugin hooks, the fault table.

Each is written from the code at build time (the pydantic models, the argparse parsers, the hookspecs,
``agentenv.faults``), so none can drift from what the installed packages do.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import textwrap
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = [
    "bundle_models",
    "bundle_reference",
    "cli_parsers",
    "cli_reference",
    "config_errors",
    "fault_table",
    "hook_reference",
]


# --- the bundle files -------------------------------------------------------------------------------------


def bundle_models() -> list[tuple[str, type[BaseModel]]]:
    """Every model a bundle is written in, each with where it appears (``bundle.yaml``, ``turns[]``...).

    Walked from the two files a user writes, ``bundle.yaml`` (``agentenv.specs.BundleFile``) and a task
    (``agentenv.specs.Task``), through every field whose type is a model.
    """
    from agentenv.specs import BundleFile, Task

    found: list[tuple[str, type[BaseModel]]] = []
    seen: set[type[BaseModel]] = set()

    def walk(where: str, model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        found.append((where, model))
        for name, info in model.model_fields.items():
            for inner, shape in _models_in(info.annotation):
                walk(f"{where}.{name}{shape}" if where != "bundle.yaml" else f"{name}{shape}", inner)

    walk("bundle.yaml", BundleFile)
    walk("task", Task)
    return found


def _models_in(annotation: Any, shape: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The models inside a type, each with how it is nested: ``[]`` for a list item, ``.NAME`` for a dict value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, shape
        return
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple, set, frozenset):
        for arg in args:
            yield from _models_in(arg, shape + "[]")
    elif origin is dict and len(args) == 2:
        yield from _models_in(args[1], shape + ".NAME")
    elif origin in (typing.Union, types.UnionType) or origin is typing.Annotated:
        for arg in args:
            yield from _models_in(arg, shape)


def _type(annotation: Any) -> str:
    """A type as a bundle author reads it: ``list[Turn]``, ``text``, ``mapping of text to list[text]``."""
    names = {str: "text", int: "integer", float: "number", bool: "true/false", type(None): "null", Any: "any"}
    if annotation in names:
        return names[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}" if args else "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "**required**"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        value = value.model_dump() if isinstance(value, BaseModel) else value
        return "`{}`" if value == {} else "`[]`" if value == [] else "see its fields"
    return f"`{json.dumps(info.default)}`"


def _cell(text: str) -> str:
    """Text for a table cell: on one line, in Markdown (docstrings write ``code`` the reST way)."""
    return " ".join(_rst(text).split()).replace("|", "\\|")


_WHERE = {
    "bundle.yaml": "`bundle.yaml`, at the top of the bundle folder",
    "task": "a task file (one task, or a list of tasks), a dataset row through the `task` template of `tasks`, "
    "and `defaults` in bundle.yaml (every field but `id`)",
}


def bundle_reference() -> str:
    """The bundle file reference: every field of bundle.yaml and of a task, with its type, default and meaning."""
    from agentenv.plugins import plugins

    out = [
        "# Bundle files",
        "",
        "Every field a bundle is written in: `bundle.yaml` and its tasks (task files, or the rows of a dataset",
        "through a template). This page is generated from the models in `agentenv.specs` when the site is",
        "built, so it is the reference for the agentenv-core it was built with. Unknown fields are refused",
        "(with the list of known ones), except where a kind takes its own fields: an env kind's options, a",
        "verifier kind's and a reward rule's parameters. [Writing a bundle](../bundles.md) walks through them.",
        "",
    ]
    for where, model in bundle_models():
        shown = _WHERE.get(where, f"`{where}`")
        out += [f"## {model.__name__}", "", f"Where: {shown}.", "", _cell(inspect.getdoc(model) or ""), ""]
        out += ["| field | type | default | meaning |", "|---|---|---|---|"]
        for name, info in model.model_fields.items():
            if where.endswith(".NAME") and name == "name":
                continue  # the key it is written under
            out.append(f"| `{name}` | {_type(info.annotation)} | {_default(info)} | {_cell(info.description or '')} |")
        if where.endswith(".NAME") and "name" in model.model_fields:
            out += ["", "Its name is the key it is written under (`NAME`)."]
        if model.model_config.get("extra") == "allow":
            out += ["", "Other fields are the kind's own (or the rule's parameters): see below."]
        out.append("")
    out += _kinds(plugins())
    return "\n".join(out)


def _kinds(loaded: Any) -> list[str]:
    """The kinds the installed plugins register, with the docs of what each registered."""
    registries = [
        ("Env kinds", "`kind` of an env", loaded.env_kinds(), "create"),
        ("Verifier kinds", "`kind` of a verifier", loaded.verifier_kinds(), "build"),
        ("Agent kinds", "`kind` of an agent (what deploy steps run)", loaded.agent_kinds(), "launch"),
        ("Reward rules", "`reward` of a task (a name, or `rule` and its parameters)", loaded.reward_rules(), "combine"),
        ("Task sources", "`source` of `tasks` (`yaml` when `tasks` is a glob)", loaded.task_sources(), "read"),
    ]
    out = ["## Kinds", "", "What the plugins installed when this site was built register (agentenv-core's built-ins,"]
    out += ["and any plugin's: `agentenv plugins` lists yours).", ""]
    for title, what, records, attr in registries:
        out += [f"### {title}", "", f"The {what}.", "", "| name | what it does |", "|---|---|"]
        for name in sorted(records):
            doc = inspect.getdoc(getattr(records[name], attr)) or ""
            out.append(f"| `{name}` | {_cell(doc)} |")
        out.append("")
    return out


# --- the plugin hooks -------------------------------------------------------------------------------------


def _rst(doc: str) -> str:
    """A docstring in the hookspecs' reST-ish style as Markdown: ``code``, ``Example::`` blocks, field lists."""
    doc = re.sub(r"``([^`]+)``", r"`\1`", doc)
    lines, out, i = doc.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            out.append(line.rstrip()[:-1])
            block = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            code = textwrap.dedent("\n".join(block)).strip("\n")
            language = "toml" if code.startswith("[") else "bash" if code.startswith(("pip ", "$ ")) else "python"
            out += ["", f"```{language}", code, "```", ""]
            continue
        param = re.match(r"^\s+(\w+): (.*)$", line)
        if param and out and (out[-1].startswith("- ") or out[-1].rstrip().endswith(":")):
            out.append(f"- `{param.group(1)}`: {param.group(2)}")
        elif line.startswith("    ") and out and out[-1].startswith("- "):
            out[-1] += " " + line.strip()  # a parameter's description goes on
        else:
            out.append(line)
        i += 1
    return "\n".join(out)


def hook_reference() -> str:
    """The hook reference: every hookspec, grouped by its spec class, with its signature and its docs."""
    from agentenv.plugins import Plugins

    manager = Plugins(entry_points=False).manager
    groups: dict[type, list[Any]] = {}
    for name in sorted(vars(manager.hook)):
        if name.startswith("agentenv_"):
            spec = getattr(manager.hook, name).spec
            groups.setdefault(spec.namespace, []).append(spec)
    out = [
        "# Plugin hooks",
        "",
        "Every hook agentenv calls, generated from its specs (`agentenv.plugins.hookspecs`) when the site is built.",
        "A plugin implements them as `@hookimpl` functions named after the hook, taking any of its",
        "parameters by name; [Writing a plugin](../plugins.md) shows a whole plugin package.",
        "",
    ]
    module = inspect.getmodule(next(iter(groups)))
    if module is not None and module.__doc__:
        out += [_rst(inspect.cleandoc(module.__doc__)), ""]
    # in the order the hookspecs module defines them
    first_line = {ns: min(s.function.__code__.co_firstlineno for s in specs) for ns, specs in groups.items()}
    for namespace, specs in sorted(groups.items(), key=lambda kv: first_line[kv[0]]):
        out += [f"## {namespace.__name__}", "", _rst(inspect.getdoc(namespace) or ""), ""]
        for spec in sorted(specs, key=lambda s: s.function.__code__.co_firstlineno):
            signature = f"{spec.name}({', '.join(spec.argnames)})"
            out += [f"### `{spec.name}`", "", "```python", signature, "```", ""]
            if spec.opts.get("firstresult"):
                out += ["The first plugin's non-None result is the hook's result (firstresult).", ""]
            out += [_rst(inspect.getdoc(spec.function) or ""), ""]
    return "\n".join(out)


# --- the command line -------------------------------------------------------------------------------------


@contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse wraps help at the terminal's width: fix it, so the page does not depend on who built it."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def cli_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """``agentenv`` and every subcommand the installed plugins add (nested ones too), each with its parser."""
    from agentenv.cli import build_parser

    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(prog: str, parser: argparse.ArgumentParser) -> None:
        found.append((prog, parser))
        for action in parser._actions:  # argparse keeps its subparsers here; no public accessor exists
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(f"{prog} {name}", sub)

    walk("agentenv", build_parser())
    return found


def cli_reference() -> str:
    """The command line reference: each command's ``--help``, and the plugin that provides it."""
    from agentenv.plugins import plugins

    out = [
        "# Command line",
        "",
        "`agentenv` and its subcommands, as `--help` prints them, generated from the parsers of every",
        "command the packages register (`agentenv_cli_commands`) when the site was built. A command comes",
        "with the wheel that provides it: install that wheel to get it.",
        "",
        "| command | provided by | what it does |",
        "|---|---|---|",
    ]
    commands = plugins().cli_commands()
    for name in sorted(commands):
        provider = _distribution_of(commands[name].run) or ""
        out.append(f"| [`agentenv {name}`](#agentenv-{name}) | {provider} | {_cell(commands[name].help)} |")
    out.append("")
    with _columns(100):
        for prog, parser in cli_parsers():
            out += [f"## `{prog}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def _distribution_of(obj: Any) -> str | None:
    """The wheel whose package defines ``obj``: the one whose ``agentenv`` entry point is in that package,
    or agentenv-core for its own (``agentenv_server.cli.run`` -> ``agentenv-server``)."""
    from importlib.metadata import distributions

    top = (getattr(obj, "__module__", "") or "").split(".")[0]
    if top == "agentenv":
        return "agentenv-core"
    for dist in distributions():
        if any(e.group == "agentenv" and e.value.split(".")[0] == top for e in dist.entry_points):
            return dist.metadata["Name"]
    return None


# --- the fault table --------------------------------------------------------------------------------------


def fault_table() -> str:
    """The fault table as Markdown, from ``agentenv.faults``."""
    from agentenv.faults import table_markdown

    return table_markdown()


def config_errors() -> str:
    """The configuration errors (raised at once, never replayed) as Markdown, from ``agentenv.faults``."""
    from agentenv.faults import CONFIG_ERRORS

    return "\n".join(["| error | when |", "|---|---|", *(f"| `{name}` | {when} |" for name, when in CONFIG_ERRORS)])
