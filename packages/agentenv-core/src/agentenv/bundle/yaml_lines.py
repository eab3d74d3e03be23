"""YAML reading that keeps line numbers, so a bundle error can point at the line.

A bundle can hold 100,000 tasks in one file, so the common case is built straight from libyaml's
events (``agentenv.bundle.yaml_events``: no node tree, a few times faster than ``yaml.safe_load`` and a
fraction of its memory), and the line of every key and list item is found only when a problem needs
one: ``FileLines`` parses the file again then. A document with anchors, aliases, explicit tags or merge
keys is loaded by PyYAML's own safe loader instead, so every document means exactly what
``yaml.safe_load`` makes of it, once its events are found within bounds (``bounded``: aliases that
expand it past tenfold, nesting past 100, values Python cannot make are refused at their line).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from agentenv.bundle.yaml_events import MAX_DEPTH, MAX_EXPANSION, BadValue, Parser, Unusual, bounded, from_events
from agentenv.errors import BundleProblem

__all__ = ["MAX_DEPTH", "MAX_EXPANSION", "FileLines", "Lines", "line_of", "load_yaml", "read_yaml"]

Lines = Mapping[tuple[str | int, ...], int]

# libyaml's parser where PyYAML was built with it (the wheels are); the pure-Python one otherwise


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


def _parse(text: str, shown: str, lines: dict[tuple[str | int, ...], int] | None) -> Any:
    try:
        try:
            return from_events(text, lines)
        except Unusual:
            if lines is not None:
                lines.clear()
                lines[()] = 1
            bounded(text)
            return _from_nodes(text, lines)
    except BadValue as exc:
        raise _problem(shown, exc.line, exc.what, exc.fix) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, most controls): no mark of its own
        line = text.count("\n", 0, exc.position) + 1
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        what = f"YAML cannot hold the character {character!r} ({exc.reason})"
        raise _problem(
            shown, line, what, 'remove it, or write it escaped in a double-quoted string ("\\x01")'
        ) from None
    except yaml.MarkedYAMLError as exc:
        error = exc
        if Parser is not yaml.SafeLoader:
            # PyYAML's own parser words it (libyaml's wording differs): the same words with or without libyaml
            try:
                yaml.SafeLoader(text).get_single_node()
            except yaml.MarkedYAMLError as pure:
                error = pure
            except RecursionError:  # nested past what PyYAML's composer takes (libyaml stops at 1,000): its words
                pass
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (error.problem or str(error)).strip()
        raise SyntaxProblem(
            BundleProblem(shown, "", f"YAML syntax error: {problem}; fix the YAML at this line", line)
        ) from None


def _problem(shown: str, line: int, what: str, fix: str) -> SyntaxProblem:
    return SyntaxProblem(BundleProblem(shown, "", f"{what}; {fix}", line))


def _from_nodes(text: str, lines: dict[tuple[str | int, ...], int] | None) -> Any:
    loader = Parser(text)
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
