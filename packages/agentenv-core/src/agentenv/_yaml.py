"""YAML reading that keeps line numbers, so a bundle error can point at the line.

A bundle can hold 100,000 tasks in one file, so the common case is built straight from libyaml's
events (no node tree, a few times faster than ``yaml.safe_load`` and a fraction of its memory), and
the line of every key and list item is found only when a problem needs one: ``FileLines`` parses the
file again then. A document with anchors, aliases, explicit tags or merge keys is loaded by PyYAML's
own safe loader instead, so every document means exactly what ``yaml.safe_load`` makes of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from .errors import BundleProblem

__all__ = ["FileLines", "Lines", "line_of", "load_yaml", "read_yaml"]

Lines = Mapping[tuple[str | int, ...], int]

# libyaml's parser where PyYAML was built with it (the wheels are); the pure-Python one otherwise
_Parser: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_KEEP = 40  # plain scalars up to this long are resolved once (keys, splits, small answers): see _resolved
_resolved: dict[str, Any] = {}  # plain scalar -> its value (immutable values only: str, int, float, bool, ...)


def load_yaml(path: str | Path, shown: str) -> Any:
    """Parse ``path`` (shown as ``shown`` in errors) as ``yaml.safe_load`` would.

    Raises ``SyntaxProblem`` for a syntax error, naming its line.
    """
    with open(path, encoding="utf-8") as file:
        text = file.read()
    return _parse(text, shown, None)


def read_yaml(path: str | Path, shown: str) -> tuple[Any, dict[tuple[str | int, ...], int]]:
    """Parse ``path``; return the data and the line of every mapping key and list item.

    Raises ``SyntaxProblem`` for a syntax error, naming its line.
    """
    lines: dict[tuple[str | int, ...], int] = {(): 1}
    with open(path, encoding="utf-8") as file:
        data = _parse(file.read(), shown, lines)
    return data, lines


def line_of(lines: Lines, loc: tuple[str | int, ...]) -> int | None:
    """The line of ``loc``, or of its nearest parent that has one."""
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


class SyntaxProblem(Exception):
    """A file is not valid YAML; ``problem`` names the file and the line."""

    def __init__(self, problem: BundleProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class FileLines:
    """The lines of a YAML file, read when first asked for (only a problem needs them)."""

    def __init__(self, path: str | Path, shown: str) -> None:
        self.path = path
        self.shown = shown
        self._lines: dict[tuple[str | int, ...], int] | None = None
        self._items: dict[Any, dict[tuple[str | int, ...], int]] | None = None

    def all(self) -> dict[tuple[str | int, ...], int]:
        """Every key's and list item's line (the file is parsed again on the first call)."""
        if self._lines is None:
            try:
                self._lines = read_yaml(self.path, self.shown)[1]
            except (OSError, UnicodeDecodeError, SyntaxProblem):  # changed since it loaded: no line, then
                self._lines = {}
        return self._lines

    def item(self, index: int) -> Lines:
        """The lines of item ``index`` of the file's top-level list, relative to the item."""
        return _ItemLines(self, index)

    def whole(self) -> Lines:
        """The lines of the whole file."""
        return _ItemLines(self, None)

    def _of_item(self, index: int) -> dict[tuple[str | int, ...], int]:
        if self._items is None:  # split once: a refusal may ask for the lines of many items
            self._items = {}
            for key, line in self.all().items():
                if key:
                    self._items.setdefault(key[0], {})[key[1:]] = line
        lines = self._items.get(index, {})
        lines.setdefault((), self.all().get((index,), 1))
        return lines


class _ItemLines(Mapping[tuple[str | int, ...], int]):
    def __init__(self, file: FileLines, index: int | None) -> None:
        self._file = file
        self._index = index

    def _table(self) -> dict[tuple[str | int, ...], int]:
        return self._file.all() if self._index is None else self._file._of_item(self._index)

    def __getitem__(self, key: tuple[str | int, ...]) -> int:
        return self._table()[key]

    def __iter__(self) -> Iterator[tuple[str | int, ...]]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


# ---------------------------------------------------------------------------------------------


class _Unusual(Exception):
    """The document uses YAML this reader leaves to PyYAML (anchors, aliases, tags, merge keys)."""


def _parse(text: str, shown: str, lines: dict[tuple[str | int, ...], int] | None) -> Any:
    try:
        try:
            return _from_events(text, lines)
        except _Unusual:
            if lines is not None:
                lines.clear()
                lines[()] = 1
            return _from_nodes(text, lines)
    except yaml.MarkedYAMLError as exc:
        error = exc
        if _Parser is not yaml.SafeLoader:
            # PyYAML's own parser words it (libyaml's wording differs): the same words with or without libyaml
            try:
                yaml.SafeLoader(text).get_single_node()
            except yaml.MarkedYAMLError as pure:
                error = pure
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (error.problem or str(error)).strip()
        raise SyntaxProblem(
            BundleProblem(shown, "", f"YAML syntax error: {problem}; fix the YAML at this line", line)
        ) from None


def _from_nodes(text: str, lines: dict[tuple[str | int, ...], int] | None) -> Any:
    loader = _Parser(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    if node is not None and lines is not None:
        _walk(node, (), lines)
    return data


def _walk(node: yaml.Node, path: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                here = (*path, key.value)
                lines[here] = key.start_mark.line + 1
                _walk(value, here, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            here = (*path, i)
            lines[here] = item.start_mark.line + 1
            _walk(item, here, lines)


_NO_KEY: Any = object()


def _from_events(text: str, lines: dict[tuple[str | int, ...], int] | None) -> Any:
    """The document built from the parser's events, as PyYAML's safe constructor builds it.

    Raises ``_Unusual`` for what only the full loader handles; records lines when ``lines`` is given.
    """
    loader = _Parser(text)
    try:
        get = loader.get_event
        get()  # stream start
        event = get()
        if isinstance(event, yaml.StreamEndEvent):
            return None
        resolve = loader.resolve
        constructors = loader.yaml_constructors
        resolved = _resolved
        if len(resolved) > 100_000:
            resolved.clear()
        # one frame per open collection: the container, the key waiting for its value (maps), its path
        containers: list[Any] = []
        keys: list[Any] = []
        raw_keys: list[Any] = []
        paths: list[tuple[str | int, ...]] = []
        root: Any = None
        scalar, map_start, seq_start = yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent
        map_end, seq_end, doc_end = yaml.MappingEndEvent, yaml.SequenceEndEvent, yaml.DocumentEndEvent
        while True:
            event = get()
            kind = event.__class__
            if kind is scalar:
                tag = event.tag
                if event.anchor is not None or (tag is not None and tag != "!"):
                    raise _Unusual
                raw = event.value
                if event.implicit[0]:  # plain: typed by YAML 1.1's implicit resolvers, as safe_load does
                    value = resolved.get(raw, _NO_KEY)
                    if value is _NO_KEY:
                        tag = resolve(yaml.ScalarNode, raw, (True, False))
                        if tag == _STR:
                            value = raw
                        elif tag in constructors and tag != "tag:yaml.org,2002:merge":
                            value = constructors[tag](loader, yaml.ScalarNode(tag, raw))
                        else:
                            raise _Unusual
                        if len(raw) <= _KEEP:
                            resolved[raw] = value
                else:
                    value = raw
                opened = False
            elif kind is map_start or kind is seq_start:
                tag = event.tag
                if event.anchor is not None or (tag is not None and tag != "!"):
                    raise _Unusual
                value, raw, opened = ({} if kind is map_start else []), None, True
            elif kind is map_end or kind is seq_end:
                value = containers.pop()
                keys.pop()
                raw_keys.pop()
                if lines is not None:
                    paths.pop()
                if not containers:
                    root = value
                    continue
                parent = containers[-1]
                if parent.__class__ is dict:
                    parent[keys[-1]] = value
                    keys[-1] = _NO_KEY
                else:
                    parent.append(value)
                continue
            elif kind is doc_end:
                break
            else:  # an alias (or anything else): the full loader decides
                raise _Unusual
            # a new node: a scalar (placed now) or a collection (placed when it ends)
            if not containers:
                if opened:
                    containers.append(value)
                    keys.append(_NO_KEY)
                    raw_keys.append(None)
                    if lines is not None:
                        paths.append(())
                else:
                    root = value
                continue
            parent = containers[-1]
            if parent.__class__ is dict:
                if keys[-1] is _NO_KEY:  # this node is a key
                    if opened:
                        raise _Unusual  # a collection as a key: the full loader says what is wrong
                    keys[-1] = value
                    raw_keys[-1] = raw
                    if lines is not None:
                        lines[(*paths[-1], raw)] = event.start_mark.line + 1
                    continue
                if opened:
                    if lines is not None:
                        paths.append((*paths[-1], raw_keys[-1]))
                    containers.append(value)
                    keys.append(_NO_KEY)
                    raw_keys.append(None)
                else:
                    parent[keys[-1]] = value
                    keys[-1] = _NO_KEY
            else:
                if lines is not None:
                    here = (*paths[-1], len(parent))
                    lines[here] = event.start_mark.line + 1
                if opened:
                    if lines is not None:
                        paths.append(here)
                    containers.append(value)
                    keys.append(_NO_KEY)
                    raw_keys.append(None)
                else:
                    parent.append(value)
        if not isinstance(get(), yaml.StreamEndEvent):
            raise _Unusual  # a second document: the full loader refuses it, saying so
        return root
    finally:
        loader.dispose()
