"""YAML reading that keeps line numbers, so a bundle error can point at the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import BundleProblem

Lines = dict[tuple[str | int, ...], int]


def read_yaml(path: Path, shown: str) -> tuple[Any, Lines]:
    """Parse ``path``; return the data and the line of every mapping key and list item.

    Raises a ``BundleProblem`` (wrapped by the caller) for a syntax error, with its line.
    """
    text = path.read_text(encoding="utf-8")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (exc.problem or str(exc)).strip()
        raise _SyntaxProblem(
            BundleProblem(shown, "", f"YAML syntax error: {problem}; fix the YAML at this line", line)
        ) from None
    finally:
        loader.dispose()
    lines: Lines = {(): 1}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def line_of(lines: Lines, loc: tuple[str | int, ...]) -> int | None:
    """The line of ``loc``, or of its nearest parent that has one."""
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


class _SyntaxProblem(Exception):
    def __init__(self, problem: BundleProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _walk(node: yaml.Node, path: tuple[str | int, ...], lines: Lines) -> None:
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
