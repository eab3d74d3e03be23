"""The ``dataset`` task source: one task per row of a JSONL, parquet or ``datasets`` file, through a template.

In bundle.yaml::

    tasks:
      source: dataset
      path: data/problems.jsonl      # or a glob, or a list; .jsonl, .json, .parquet, or a save_to_disk folder
      task:                          # a task as in a task file, with {column} where the row's value goes
        id: "gsm-{_row}"
        split: "{split}"
        turns:
          - prompt: "{question}"
            verifiers: [{id: answer, kind: exact, answer: "{answer}"}]

A string that is one placeholder (``"{answer}"``) takes the row's value as it is (a list stays a list;
a number where the task wants text, like an id or a reply, is its text); placeholders inside text are
filled with the value as text. ``{{`` and ``}}`` are literal braces. ``{_row}`` is the row's number in
its file (from 0), ``{_file}`` the file's name without its suffix, ``{_split}`` the split of a
``datasets`` DatasetDict (and the task's split when the template gives none). A task without an
``id`` gets ``{_file}-{_row}``. Without ``task``, each row is a whole task (columns id, split, turns,
...). The rest of the task comes from ``defaults`` in bundle.yaml as usual.

JSONL needs nothing more; parquet needs pyarrow (``pip install 'agentenv-core[parquet]'``) and a saved
``datasets`` folder needs datasets (``pip install 'agentenv-core[datasets]'``).
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentenv.bundle.tasksources import RawTask, dotted, row_field
from agentenv.errors import BundleProblem
from agentenv.specs import BUNDLE_FILE

__all__ = ["read_dataset_tasks"]

_KEYS = ("path", "task")
_SPECIAL = ("_row", "_file", "_split")
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_BATCH = 4096
_TOO_DEEP = "is nested too deeply for Python's JSON reader (past its recursion limit); flatten it"


@dataclass(frozen=True)
class _Ref:
    column: str


@dataclass(frozen=True)
class _Join:
    parts: tuple[str | _Ref, ...]


class _Unreadable(Exception):
    """A file this source cannot read; the message says why and what to do."""


def read_dataset_tasks(config: Any, bundle_dir: Path) -> Iterator[RawTask | BundleProblem]:
    """A task per row of JSONL, JSON, parquet or ``datasets`` files (``path``, a glob), through a template
    (``task``: a task with ``{column}`` where a row's value goes); without ``task``, each row is a whole task."""
    problems: list[BundleProblem] = []
    for key in config:
        if key not in _KEYS:
            message = "unknown field; the fields are source, path, task"
            problems.append(BundleProblem(BUNDLE_FILE, f"tasks.{key}", message))
    given = config.get("path")
    patterns = [given] if isinstance(given, str) else given if isinstance(given, list) else []
    if given is None:
        message = "missing; give the dataset file (path: data/problems.jsonl)"
        problems.append(BundleProblem(BUNDLE_FILE, "tasks.path", message))
    elif not patterns or not all(isinstance(p, str) and p for p in patterns):
        message = "must be a file, a glob or a list of them (path: data/train-*.parquet)"
        problems.append(BundleProblem(BUNDLE_FILE, "tasks.path", message))
    template = config.get("task")
    plan: Any = None
    if template is not None:
        if not isinstance(template, dict):
            message = "must be a task mapping with {column} placeholders"
            problems.append(BundleProblem(BUNDLE_FILE, "tasks.task", message))
        else:
            compile_problems: list[tuple[tuple[str | int, ...], str]] = []
            plan = _compile(template, (), compile_problems)
            problems += [BundleProblem(BUNDLE_FILE, dotted(("tasks", "task", *loc)), m) for loc, m in compile_problems]
            plan.setdefault("id", _Join((_Ref("_file"), "-", _Ref("_row"))))
    if problems:
        yield from problems
        return
    matches: list[str] = []
    for i, pattern in enumerate(patterns):
        found = sorted(glob.glob(str(bundle_dir / pattern)))
        if not found:
            field = "tasks.path" if isinstance(given, str) else f"tasks.path[{i}]"
            yield BundleProblem(BUNDLE_FILE, field, f"{pattern!r} matches no file in {bundle_dir}; fix the path")
        matches += found
    needed = sorted({c for c in _columns(plan) if c not in _SPECIAL}) if plan is not None else None
    for match in matches:
        path = Path(match)
        shown = str(path.relative_to(bundle_dir)) if path.is_relative_to(bundle_dir) else match
        try:
            for file, split, names, rows in _open(path, shown, needed):
                missing = [c for c in needed or () if names is not None and c not in names]
                if missing:
                    yield from _missing_columns(plan, missing, file, names or [])
                    continue
                yield from _tasks(plan, rows, file, path.stem, split)
        except _Unreadable as exc:
            yield BundleProblem(shown, "", str(exc))


def _tasks(
    plan: Any, rows: Iterator[tuple[int, int | None, Any]], file: str, stem: str, split: str | None
) -> Iterator[RawTask | BundleProblem]:
    for row, line, value in rows:
        lines = {(): line} if line is not None else {}
        if isinstance(value, _Unreadable):
            yield BundleProblem(file, row_field(row, None), str(value), line)
            continue
        if not isinstance(value, dict):
            yield BundleProblem(file, row_field(row, None), f"is a {type(value).__name__}, not a row of columns", line)
            continue
        if plan is None:
            yield RawTask(value, file, lines, row, {(k,): k for k in value})
            continue
        special = {"_row": row, "_file": stem, "_split": split}
        columns: dict[tuple[str | int, ...], str] = {}
        gaps: list[tuple[str, tuple[str | int, ...], str]] = []
        data = _fill(plan, value, special, (), columns, gaps)
        if gaps:
            for column, loc, why in gaps:
                yield BundleProblem(file, row_field(row, column, loc), why, line)
            continue
        if split is not None:
            data.setdefault("split", split)
        yield RawTask(data, file, lines, row, columns)


def _missing_columns(plan: Any, missing: list[str], file: str, names: list[str]) -> Iterator[BundleProblem]:
    where = {c: loc for loc, c in _refs(plan, ())}
    for column in missing:
        yield BundleProblem(
            BUNDLE_FILE,
            dotted(("tasks", "task", *where[column])),
            f"column {column!r} is not in {file}; its columns: {', '.join(names) or 'none'}",
        )


# -- templates ---------------------------------------------------------------------------------


def _compile(value: Any, loc: tuple[str | int, ...], problems: list[tuple[tuple[str | int, ...], str]]) -> Any:
    if isinstance(value, str):
        return _compile_text(value, loc, problems)
    if isinstance(value, dict):
        return {k: _compile(v, (*loc, k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_compile(v, (*loc, i), problems) for i, v in enumerate(value)]
    return value


def _compile_text(text: str, loc: tuple[str | int, ...], problems: list[tuple[tuple[str | int, ...], str]]) -> Any:
    if "{" not in text and "}" not in text:
        return text
    parts: list[str | _Ref] = []
    pos = 0
    for match in _TOKEN.finditer(text):
        parts.append(text[pos : match.start()])
        token = match.group(0)
        if token in ("{{", "}}"):
            parts.append(token[0])
        elif token in ("{", "}"):
            problems.append((loc, f"unmatched {token!r} in {text!r}; write {token * 2} for a literal brace"))
            return text
        elif not match.group(1).strip():
            problems.append((loc, f"empty placeholder in {text!r}; name a column, e.g. {{question}}"))
            return text
        else:
            parts.append(_Ref(match.group(1).strip()))
        pos = match.end()
    parts.append(text[pos:])
    merged: list[str | _Ref] = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        elif part != "":
            merged.append(part)
    if len(merged) == 1 and isinstance(merged[0], _Ref):
        return merged[0]
    if all(isinstance(p, str) for p in merged):
        return "".join(p for p in merged if isinstance(p, str))
    return _Join(tuple(merged))


def _refs(plan: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(plan, _Ref):
        yield loc, plan.column
    elif isinstance(plan, _Join):
        yield from ((loc, p.column) for p in plan.parts if isinstance(p, _Ref))
    elif isinstance(plan, dict):
        for k, v in plan.items():
            yield from _refs(v, (*loc, k))
    elif isinstance(plan, list):
        for i, v in enumerate(plan):
            yield from _refs(v, (*loc, i))


def _columns(plan: Any) -> list[str]:
    return [column for _, column in _refs(plan, ())]


def _fill(
    plan: Any,
    row: dict[str, Any],
    special: dict[str, Any],
    loc: tuple[str | int, ...],
    columns: dict[tuple[str | int, ...], str],
    gaps: list[tuple[str, tuple[str | int, ...], str]],
) -> Any:
    kind = plan.__class__
    if kind is dict:
        return {k: _fill(v, row, special, (*loc, k), columns, gaps) for k, v in plan.items()}
    if kind is list:
        return [_fill(v, row, special, (*loc, i), columns, gaps) for i, v in enumerate(plan)]
    if kind is _Ref:
        columns[loc] = plan.column
        return _value(plan.column, row, special, loc, gaps)
    if kind is _Join:
        out = []
        for part in plan.parts:
            if part.__class__ is _Ref:
                columns.setdefault(loc, part.column)  # type: ignore[union-attr]
                out.append(_text(_value(part.column, row, special, loc, gaps)))  # type: ignore[union-attr]
            else:
                out.append(part)
        return "".join(out)
    return plan


def _value(
    column: str, row: dict[str, Any], special: dict[str, Any], loc: tuple[str | int, ...], gaps: list[Any]
) -> Any:
    if column in special:
        if special[column] is None:
            gaps.append((column, loc, "only a datasets DatasetDict has splits; give the split in the template"))
        return special[column]
    if column not in row:
        gaps.append((column, loc, f"missing from this row; its columns: {', '.join(row) or 'none'}"))
        return None
    value = row[column]
    if value is None:
        gaps.append((column, loc, "is null; fill it in the dataset, or drop the row"))
    return value


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | list | dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return "" if value is None else str(value)


# -- files -------------------------------------------------------------------------------------

Rows = Iterator[tuple[int, int | None, Any]]  # (row, its line in the file or None, the row or an _Unreadable)
Table = tuple[str, str | None, list[str] | None, Rows]  # (name in errors, split, columns or None, rows)


def _open(path: Path, shown: str, needed: list[str] | None) -> Iterator[Table]:
    """Each table in ``path`` (a DatasetDict has one per split); columns None: known per row only."""
    if path.is_dir():
        yield from _saved_dataset(path, shown, needed)
    elif path.suffix in (".jsonl", ".ndjson", ".json"):
        yield shown, None, _first_row_columns(path), _json_rows(path)
    elif path.suffix in (".parquet", ".pq"):
        pq = _require("pyarrow.parquet", "parquet", "reading parquet")
        try:
            table = pq.ParquetFile(path)
        except Exception as exc:
            raise _Unreadable(f"is not a parquet file ({type(exc).__name__}: {exc})") from None
        names = list(table.schema_arrow.names)
        columns = None if needed is None else [c for c in needed if c in names]
        yield shown, None, names, _batches(table.iter_batches(batch_size=_BATCH, columns=columns))
    else:
        raise _Unreadable(
            f"unknown dataset format {path.suffix or '(no suffix)'!r}; give a .jsonl, .json or .parquet file, or a "
            "folder written by datasets' save_to_disk"
        )


def _json_rows(path: Path) -> Rows:
    with path.open(encoding="utf-8") as file:
        head = file.read(1)
        while head.isspace():
            head = file.read(1)
        file.seek(0)
        if head == "[":  # a JSON array of rows (a .json file): no line per row
            try:
                rows = json.load(file)
            except json.JSONDecodeError as exc:
                raise _Unreadable(f"is not JSON ({exc.msg} at line {exc.lineno}); fix the file") from None
            except RecursionError:
                raise _Unreadable(_TOO_DEEP) from None
            except ValueError as exc:  # JSON Python cannot make: an int past 4,300 digits
                raise _Unreadable(f"cannot be read as JSON ({exc}); fix the file") from None
            for row, value in enumerate(rows):
                yield row, None, value
            return
        row = 0
        for number, text in enumerate(file, start=1):
            if not text.strip():
                continue
            try:
                yield row, number, json.loads(text)
            except json.JSONDecodeError as exc:
                yield row, number, _Unreadable(f"is not JSON ({exc.msg} at column {exc.colno}); fix this line")
            except RecursionError:
                yield row, number, _Unreadable(_TOO_DEEP)
            except ValueError as exc:  # JSON Python cannot make: an int past 4,300 digits
                yield row, number, _Unreadable(f"cannot be read as JSON ({exc}); fix this line")
            row += 1


def _first_row_columns(path: Path) -> list[str] | None:
    """The first row's columns: a template column missing there is a typo, said once, not once per row."""
    try:
        for _, _, value in _json_rows(path):
            return list(value) if isinstance(value, dict) else None
    except (_Unreadable, UnicodeDecodeError):
        return None
    return None


def _batches(batches: Any, offset: int = 0) -> Rows:
    row = offset
    for batch in batches:
        for value in batch.to_pylist():
            yield row, None, value
            row += 1


def _saved_dataset(path: Path, shown: str, needed: list[str] | None) -> Iterator[Table]:
    if not (path / "dataset_info.json").is_file() and not (path / "dataset_dict.json").is_file():
        raise _Unreadable("is a folder but no saved dataset; give a folder written by datasets' save_to_disk")
    datasets = _require("datasets", "datasets", "reading a saved dataset")
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise _Unreadable(f"cannot be read by datasets.load_from_disk ({type(exc).__name__}: {exc})") from None
    parts = loaded.items() if isinstance(loaded, datasets.DatasetDict) else [(None, loaded)]
    for split, dataset in parts:
        names = list(dataset.column_names)
        if needed is not None:
            dataset = dataset.select_columns([c for c in needed if c in names])
        rows = _dict_batches(dataset.with_format(None).iter(batch_size=_BATCH))
        yield (f"{shown}/{split}" if split is not None else shown), split, names, rows


def _dict_batches(batches: Any) -> Rows:
    row = 0
    for batch in batches:
        names = list(batch)
        for values in zip(*(batch[n] for n in names), strict=True):
            yield row, None, dict(zip(names, values, strict=True))
            row += 1


def _require(module: str, extra: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise _Unreadable(
            f"{what} needs {module.split('.')[0]}, which is not installed; install it with: "
            f"pip install 'agentenv-core[{extra}]'"
        ) from None
