"""``agentenv init`` (a new bundle, or with ``--package`` a bundle package to build and install) and ``agentenv
bundles`` (the bundles installed as packages, with their versions and whether each can load here)."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import keyword
import re
from pathlib import Path

from agentenv.bundle.installed import CORE, GROUP, installed_bundles
from agentenv.errors import AgentEnvError, BundleError
from agentenv.files import write_file
from agentenv.text import table

__all__ = ["configure_bundles", "configure_init", "run_bundles", "run_init", "scaffold"]

_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")

_BUNDLE = """\
# {name}: a bundle made by agentenv init. Each field is explained in agentenv's bundle file reference.
name: {name}
description: A calculator env and one task; replace them with yours.
splits: [train, eval]
envs:
  calc:
    kind: python
    target: calc_env:Calculator
{more_envs}defaults:
  system: Use the calculator for every computation, then answer with the number only.
  toolset: {{envs: [calc], role: agent}}
{more_defaults}tasks: tasks/*.yaml
"""

# --full: an env in another language (bash, speaking the subprocess protocol), its task, and a process agent
_SUBPROCESS_ENV = """\
  shouter:                         # a bash program speaking JSON lines (docs: The subprocess protocol)
    kind: subprocess
    command: [bash, shout_env.sh]
agents:
  solver:                          # agentenv run and harness rollouts run it; any program works
    kind: process
    command: [python, "{bundle}/agents/solve.py", "{prompt}"]
"""

_AGENT_DEFAULTS = """\
  deploy: [{agent: solver, role: solver}]
"""

_SHOUT_TASK = """\
id: shout-001
split: train
system: Use the shout tool as asked, then reply with its answer only.
toolset: {envs: [shouter]}
turns:
  - prompt: Shout the word hello with the shout tool, and reply with what it answered.
    verifiers: [{id: answer, kind: exact, answer: HELLO, ignore_case: false}]
solution:
  - calls: [{tool: shout, args: {text: hello}}]
    reply: HELLO
"""

_SHOUT_ENV = r"""#!/usr/bin/env bash
# A subprocess env in bash: one JSON request per line on stdin, one JSON answer per line on stdout
# (docs: The subprocess protocol). Logs go to stderr. It exits when stdin closes or after teardown.
set -u

answer() { printf '{"id": %s, "ok": true, "result": %s}\n' "$1" "$2"; }
quote() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }

while IFS= read -r line; do
  [[ $line =~ \"id\":\ *([0-9]+) ]] && id=${BASH_REMATCH[1]}
  [[ $line =~ \"op\":\ *\"([a-z]+)\" ]] && op=${BASH_REMATCH[1]}
  case $op in
    tools)
      schema='{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}'
      answer "$id" "[{\"name\": \"shout\", \"description\": \"The text in capitals.\", \"parameters\": $schema}]" ;;
    deploy)
      printf '{"id": %s, "ok": true}\n' "$id" ;;
    call)
      if [[ $line =~ \"text\":\ *\"([^\"\\]*)\" ]]; then
        answer "$id" "$(quote "${BASH_REMATCH[1]^^}")"
      else  # the policy's mistake: ok false, and the error goes back to the model
        printf '{"id": %s, "ok": false, "error": "give text as plain words, without quotes or backslashes"}\n' "$id"
      fi ;;
    teardown)
      printf '{"id": %s, "ok": true}\n' "$id"; exit 0 ;;
    *)
      printf '{"id": %s, "ok": false, "error": "unknown op", "crashed": true}\n' "$id" ;;
  esac
done
"""

_SOLVER = '''\
"""A process agent: the prompt is its last argument; it asks the model once and prints the reply.

agentenv gives it the model endpoint in OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL (and AGENTENV_*
variables); a real agent would also call the episode's tools over MCP (AGENTENV_MCP_URL).
"""

import json
import os
import sys
import urllib.request

body = {"model": os.environ["OPENAI_MODEL"], "messages": [{"role": "user", "content": sys.argv[-1]}]}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json", "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"},
)
with urllib.request.urlopen(request, timeout=600) as response:
    print(json.load(response)["choices"][0]["message"]["content"])
'''

_ENV = '''\
"""The bundle's env: a calculator. Tools are methods marked @agentenv.tool, their arguments checked first."""

import agentenv

NUMBERS = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}


class Calculator(agentenv.Env):
    """Adds two numbers."""

    @agentenv.tool(NUMBERS)
    def add(self, a: float, b: float) -> float:
        """a + b."""
        return a + b
'''

_TASK = """\
id: add-001
split: {split}
turns:
  - prompt: What is {a} plus {b}?
    verifiers: [{{id: answer, kind: exact, answer: '{total}'}}]
solution:
  - calls: [{{tool: add, args: {{a: {a}, b: {b}}}}}]
    reply: '{total}'
"""

_PYPROJECT = """\
[project]
name = "{name}"
version = "0.1.0"
description = "The {name} agentenv bundle: agentenv serve {name}"
readme = "README.md"
requires-python = ">=3.11"
# the agentenv-core this bundle was written for: checked again when it is loaded
dependencies = ["{core}"]

# agentenv serve/eval/check {name}, and AgentEnv.local("{name}"), find the bundle by this name
[project.entry-points."{group}"]
{name} = "{module}"

[build-system]
requires = ["hatchling>=1.25"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["src/{module}"]  # the bundle folder, bundle.yaml and tasks included
"""

_README = """\
# {name}

An agentenv bundle, installable: `pip install .` (or build a wheel: `uv build`), then

```bash
agentenv tasks {name}
agentenv check {name} --qa
agentenv serve {name} --port 8000
```

The bundle itself is `src/{module}/` (bundle.yaml, tasks, the env).
"""


def scaffold(folder: Path, name: str, *, package: bool, full: bool = False) -> list[Path]:
    """Write a new bundle ``name`` into ``folder`` (a package of it with ``package``); returns the files written.

    ``full`` adds a subprocess env written in bash, with a task, and a ``process`` agent.

    Refuses a folder that is not empty, and a name that is no lowercase distribution name.
    """
    if not _NAME.match(name):
        raise AgentEnvError(f"--name {name!r}: write it in lowercase letters, digits and dashes (my-bundle)")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise AgentEnvError(f"{folder}: not an empty folder; give agentenv init a new folder")
    module = name.replace("-", "_")
    if keyword.iskeyword(module):
        raise AgentEnvError(f"--name {name!r}: {module} is a Python keyword; pick another name")
    files = {
        "bundle.yaml": _BUNDLE.format(
            name=name, more_envs=_SUBPROCESS_ENV if full else "", more_defaults=_AGENT_DEFAULTS if full else ""
        ),
        "calc_env.py": _ENV,
        "tasks/train.yaml": _TASK.format(split="train", a=2, b=3, total=5),
        "tasks/eval.yaml": _TASK.format(split="eval", a=20, b=22, total=42).replace("add-001", "add-002"),
    }
    if full:
        files |= {"tasks/shout.yaml": _SHOUT_TASK, "shout_env.sh": _SHOUT_ENV, "agents/solve.py": _SOLVER}
    bundle = folder
    if package:
        bundle = folder / "src" / module
        core = md.version(CORE)
        major, minor = (int(p) for p in core.split(".")[:2])
        needs = f"{CORE}>={major}.{minor},<{major}.{minor + 1}"
        files["__init__.py"] = f'"""The {name} bundle: this folder (bundle.yaml); agentenv finds it by name."""\n'
        write_file(folder / "pyproject.toml", _PYPROJECT.format(name=name, module=module, core=needs, group=GROUP))
        write_file(folder / "README.md", _README.format(name=name, module=module))
    for relative, text in files.items():
        write_file(bundle / relative, text)
    return sorted(p for p in folder.rglob("*") if p.is_file())


def configure_init(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, help="the new bundle's folder (made; must be new or empty)")
    parser.add_argument("--name", help="the bundle's name (default: the folder's name)")
    parser.add_argument(
        "--package", action="store_true", help=f"a package of it: pyproject.toml with its {GROUP} entry point"
    )
    parser.add_argument(
        "--full", action="store_true", help="also a subprocess env written in bash, with a task, and a process agent"
    )


def run_init(args: argparse.Namespace) -> int:
    name = args.name or args.folder.resolve().name
    scaffold(args.folder, name, package=args.package, full=args.full)
    print(f"wrote the bundle {name} in {args.folder}")
    if args.package:
        print(f"install it (pip install {args.folder}), then: agentenv check {name} --qa; agentenv serve {name}")
    else:
        print(f"try it: agentenv check {args.folder} --qa")
    return 0


def configure_bundles(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="exit 1 when an installed bundle cannot load here")


def run_bundles(args: argparse.Namespace) -> int:
    rows, problems = [], 0
    for bundle in installed_bundles():
        try:
            status, folder = "ok", str(bundle.check())
        except BundleError as exc:
            problems += 1
            status, folder = exc.problems[0].message, "-"
        rows.append((bundle.name, bundle.distribution, bundle.version, bundle.needs or "-", folder, status))
    if not rows:
        print(f"no bundle installed as a package (a package registers one in its {GROUP} entry points)")
        return 0
    print(table(rows, ("bundle", "distribution", "version", "needs", "folder", "status")))
    return 1 if args.check and problems else 0
