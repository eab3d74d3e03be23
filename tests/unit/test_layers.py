"""The house's layers, read from the imports (an AST walk over ``packages/*/src``, lazy and type-only imports included).

Core's layers, bottom up: the contracts (``agentenv``'s own modules: errors, wire, specs, env, ...), ``plugins``,
``sandbox``, ``bundle``, ``engine``, ``record``; beside them ``client`` (contracts only) and ``evaluate`` (client and
contracts); ``cli`` on top. An integration imports faces only (``agentenv``, a contract module, or a folder's
``__init__`` and the names in its ``__all__``), never another distribution's private module or name, and no module is
in an import circle. What is still out of line is in ``KNOWN``, with what removes it; the table must stay true both
ways (a fixed entry is taken out).
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
FOLDERS = ("plugins", "sandbox", "bundle", "engine", "record", "client", "local", "evaluate", "cli")
BELOW = {  # a core layer -> the core layers it may import (besides itself and the contracts)
    "contracts": set(),
    "plugins": set(),
    "sandbox": {"plugins"},
    "bundle": {"plugins", "sandbox"},
    "engine": {"plugins", "sandbox", "bundle"},
    "record": {"engine"},
    "client": set(),
    "local": {"plugins", "sandbox", "bundle", "engine", "record", "client"},  # the client's in-process transport
    "evaluate": {"client", "local"},
    "cli": {"plugins", "sandbox", "bundle", "engine", "record", "client", "local", "evaluate"},
}
KNOWN: dict[tuple[str, str], str] = {}  # (importer, imported) out of line today -> what removes it


def parse(file: Path) -> ast.Module:
    """``file``'s syntax tree, with the garbage collector paused: a collection whose finalizers run inside the compile
    (servers stopped by earlier tests on this worker) trips CPython 3.11's "AST constructor recursion depth mismatch"
    SystemError (cpython gh-106905; it failed this test once in a fresh-clone run)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(file.read_text())
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Import:
    """One import: who imports, what module, which name (None for ``import x``), where, and whether type-only.

    ``source`` is the module written after ``from`` (``module`` is the submodule when the name is one)."""

    importer: str
    module: str
    name: str | None
    line: int
    type_only: bool
    source: str = ""


def modules(root: Path) -> dict[str, tuple[Path, str]]:
    """Every module under ``root/*/src``: its dotted name -> (file, distribution folder)."""
    found = {}
    for src in sorted(root.glob("*/src")):
        for file in src.rglob("*.py"):
            parts = list(file.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = (file, src.parent.name)
    return found


def imports(name: str, file: Path, known: dict[str, tuple[Path, str]]) -> Iterator[Import]:
    """The imports of one module, relative ones resolved, wherever they are (in functions, under TYPE_CHECKING)."""
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, type_only: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for part in child.body:
                    yield from walk_one(part, True)
                for part in child.orelse:
                    yield from walk_one(part, type_only)
            else:
                yield from walk_one(child, type_only)

    def walk_one(node: ast.AST, type_only: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, None, node.lineno, type_only)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(name, sub if sub in known else base, alias.name, node.lineno, type_only, base)
        else:
            yield from walk(node, type_only)

    yield from walk(parse(file), False)


def layer(module: str) -> str | None:
    """The core layer of an ``agentenv`` module (None for other distributions' and the top face)."""
    parts = module.split(".")
    if parts[0] != "agentenv" or len(parts) == 1:
        return None
    if parts[1] == "__main__":
        return "cli"
    return parts[1] if parts[1] in FOLDERS else "contracts"


def out_of_layer(root: Path) -> set[tuple[str, str]]:
    """Core imports of a layer above the importer's, or of another distribution."""
    known = modules(root)
    found = set()
    for name, (file, _) in known.items():
        mine = layer(name)
        if mine is None:
            continue
        for imp in imports(name, file, known):
            top = imp.module.split(".")[0]
            theirs = layer(imp.module)
            if top.startswith("agentenv_") or (theirs and theirs not in {mine, "contracts", *BELOW[mine]}):
                found.add((name, imp.module))
    return found


def faces(known: dict[str, tuple[Path, str]]) -> dict[str, set[str]]:
    """Each core folder's face: its ``__all__``."""
    out = {}
    for folder in FOLDERS:
        tree = parse(known[f"agentenv.{folder}"][0])
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                out[f"agentenv.{folder}"] = set(ast.literal_eval(node.value))
    return out


def behind_faces(root: Path) -> list[str]:
    """Imports by other distributions of what no face of core offers, or of another distribution's private parts."""
    known = modules(root)
    face = faces(known)
    found = []
    for name, (file, dist) in known.items():
        if dist == "agentenv-core":
            continue
        for imp in imports(name, file, known):
            at = f"{name}:{imp.line} imports {imp.module}" + (f" {imp.name}" if imp.name else "")
            parts = imp.module.split(".")
            whole_face = imp.module in face and imp.module == f"{imp.source}.{imp.name}"  # from agentenv import sandbox
            if whole_face or (imp.source in face and imp.name in face[imp.source]):
                continue  # the face, or a name (or a submodule) it offers
            if parts[0] == "agentenv" and len(parts) > 2 and parts[1] in FOLDERS:
                found.append(f"{at}: below the face agentenv.{parts[1]}")
            elif imp.module in face and imp.name not in face[imp.module]:
                found.append(f"{at}: not in agentenv.{parts[1]}.__all__")
            elif imp.module in known and known[imp.module][1] != dist:
                private = [p for p in [*parts, imp.name or ""] if p.startswith("_") and not p.startswith("__")]
                if private:
                    found.append(f"{at}: {private[0]} is private to {known[imp.module][1]}")
    return found


def circles(root: Path) -> list[list[str]]:
    """The import circles among modules (strongly connected parts of the import graph, every kind of import)."""
    known = modules(root)
    arrows = {name: sorted({i.module for i in imports(name, f, known) if i.module in known} - {name})
              for name, (f, _) in known.items()}  # fmt: skip
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in arrows[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while not part or part[-1] != node:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for node in arrows:
        if node not in index:
            visit(node)
    return sorted(found)


def test_core_layers_import_only_the_layers_below_them() -> None:
    found = out_of_layer(PACKAGES)
    assert found - KNOWN.keys() == set(), "an import against the layers: import from a lower layer, or move the code"
    assert KNOWN.keys() - found == set(), "fixed: take it out of KNOWN"


def test_integrations_import_faces_only() -> None:
    assert behind_faces(PACKAGES) == [], "import it from the face (export it there if it is missing)"


def test_no_module_is_in_an_import_circle() -> None:
    assert circles(PACKAGES) == [], "an import circle: move what both need below them, or type with a Protocol"


@pytest.fixture
def house(tmp_path: Path) -> Path:
    """A small copy of the house's shape: core with a client and an engine, and an integration."""
    core = tmp_path / "agentenv-core" / "src" / "agentenv"
    for folder in FOLDERS:
        (core / folder).mkdir(parents=True)
        (core / folder / "__init__.py").write_text('__all__ = ["Face"]\nFace = 1\n')
    (core / "__init__.py").write_text("")
    (core / "errors.py").write_text("class E(Exception): ...\n")
    (core / "client" / "session.py").write_text("from agentenv.errors import E\n")
    (core / "engine" / "episode.py").write_text("from agentenv.bundle import Face\n")
    other = tmp_path / "agentenv-trl" / "src" / "agentenv_trl"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("from agentenv.client import Face\n")
    (other / "_inner.py").write_text("")
    return tmp_path


def test_the_checks_pass_a_house_in_line(house: Path) -> None:
    assert (out_of_layer(house), behind_faces(house), circles(house)) == (set(), [], [])


def test_the_checks_find_each_kind_of_broken_import(house: Path) -> None:
    core = house / "agentenv-core" / "src" / "agentenv"
    with (core / "client" / "session.py").open("a") as file:
        file.write("def later():\n    from agentenv.engine.episode import Episode\n")  # the client reaching the engine
    (house / "agentenv-server" / "src" / "agentenv_server").mkdir(parents=True)
    (house / "agentenv-server" / "src" / "agentenv_server" / "__init__.py").write_text(
        "from agentenv.engine.episode import x\nfrom agentenv.engine import Hidden\nfrom agentenv_trl._inner import y\n"
    )
    (core / "errors.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentenv.client import session\n"
    )
    assert out_of_layer(house) == {
        ("agentenv.client.session", "agentenv.engine.episode"),
        ("agentenv.errors", "agentenv.client.session"),
    }
    assert [problem.split(": ", 1)[1] for problem in behind_faces(house)] == [
        "below the face agentenv.engine",
        "not in agentenv.engine.__all__",
        "_inner is private to agentenv-trl",
    ]
    assert circles(house) == [["agentenv.client.session", "agentenv.errors"]]
