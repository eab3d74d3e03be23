"""The built-in task sources: ``yaml`` (task files) and ``dataset`` (rows of JSONL, parquet, ``datasets``).

A task source's ``read(config, bundle_dir)`` yields ``RawTask`` records, one per task, and a
``BundleProblem`` for each thing it cannot read (a problem naming ``bundle.yaml`` without a line is
given the line of its field there). Sources stream: a task is checked, and its raw data let go,
before the next is read.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenv.bundle.yaml_lines import FileLines, SyntaxProblem, load_yaml
from agentenv.errors import BundleProblem
from agentenv.specs import BUNDLE_FILE

__all__ = ["RawTask", "dotted", "read_yaml_tasks", "row_field", "undotted"]


@dataclass(frozen=True)
class RawTask:
    """A task as a task source read it: its data, and where to point when it is refused.

    ``file`` is the file to name (relative to the bundle); ``lines`` maps a field's path in ``data``
    (``("turns", 0, "prompt")``) to its line in that file, ``()`` to the task's first line. A task read
    from a row of a dataset file gives its ``row`` (counted from 0) and, in ``columns``, the column
    each field came from, so a refusal names the row and the column.
    """

    data: Any
    file: str
    lines: Mapping[tuple[str | int, ...], int] = field(default_factory=dict)
    row: int | None = None
    columns: Mapping[tuple[str | int, ...], str] = field(default_factory=dict)


def read_yaml_tasks(config: Any, bundle_dir: Path) -> Iterator[RawTask | BundleProblem]:
    """Task files: a glob (``tasks/*.yaml``) or a list of globs, from the bundle folder; a file holds one task or a
    list of tasks."""
    patterns = [config] if isinstance(config, str) else config if isinstance(config, list) else [config]
    prefix = str(bundle_dir) + os.sep
    for pattern in patterns:
        if not isinstance(pattern, str):
            yield BundleProblem(BUNDLE_FILE, "tasks", f"{pattern!r} is not a glob; write tasks: tasks/*.yaml")
            continue
        matches = sorted(glob.glob(str(bundle_dir / pattern), recursive=True))
        if not matches:
            yield BundleProblem(
                BUNDLE_FILE, "tasks", f"{pattern!r} matches no file in {bundle_dir}; fix the glob or add task files"
            )
        for match in matches:
            shown = match[len(prefix) :] if match.startswith(prefix) else os.path.relpath(match, bundle_dir)
            try:
                data = load_yaml(match, shown)
            except SyntaxProblem as exc:
                yield exc.problem
                continue
            except (OSError, UnicodeDecodeError) as exc:
                yield BundleProblem(shown, "", f"cannot be read ({exc}); fix or remove the file")
                continue
            # lines are found only when a problem needs them: the file is parsed again then
            lines = FileLines(match, shown)
            if isinstance(data, list):
                for i, item in enumerate(data):
                    data[i] = None  # the loader keeps what it checked; the raw item can go
                    yield RawTask(item, shown, lines.item(i))
            else:
                yield RawTask(data, shown, lines.whole())


def dotted(loc: Any) -> str:
    """A field's path as written in errors: ``turns[0].verifiers[1].kind``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def undotted(field: str) -> tuple[str | int, ...]:
    """The path ``dotted`` wrote (``turns[0].prompt`` -> ``("turns", 0, "prompt")``)."""
    loc: list[str | int] = []
    for part in field.split("."):
        name, _, rest = part.partition("[")
        if name:
            loc.append(name)
        for index in rest.replace("]", "").split("[") if rest else ():
            loc.append(int(index) if index.isdigit() else index)
    return tuple(loc)


def row_field(row: int, column: str | None, loc: Any = ()) -> str:
    """The field of a problem in a dataset row: ``row 17, column 'answer' -> turns[0].verifiers[0].answer``."""
    where = f"row {row}" + (f", column {column!r}" if column else "")
    field = dotted(loc)
    return f"{where} -> {field}" if field else where
