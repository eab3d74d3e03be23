"""Every bundle is loaded or refused with a message naming the file (and the field or line): never a traceback, never
a hang, never memory without bound. Bundles come from ``bundle_strategies``: built from the bundle schema, from
dataset rows, from YAML's odd corners and from raw bytes; each is loaded in this process, under a deadline and a
memory limit, and a loaded one is turned into the Task API's rows as a server would serve them."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentenv import load_bundle
from agentenv.engine import task_row
from agentenv.errors import BundleError
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.bundle_strategies import (
    ENV_MODULE,
    PROC_PROGRAM,
    bundle_file,
    dump,
    good_bundle,
    good_rows,
    one_field_bent,
    raw_bytes,
    rows,
    task,
    yaml_oddities,
)

DEADLINE = 60  # seconds one load may take on a loaded machine (the largest fuzzed bundle loads in well under 1)
MEMORY = 3 << 30  # bytes of address space a load may add to the test process


class Hang(Exception):
    """A load ran past ``DEADLINE``."""


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """Fail a load that runs past ``DEADLINE`` seconds or asks for more than ``MEMORY`` bytes more."""

    def expired(signum: int, frame: Any) -> None:
        raise Hang(f"loading took more than {DEADLINE} s")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    limit = used + MEMORY if hard == resource.RLIM_INFINITY else min(used + MEMORY, hard)
    previous = signal.signal(signal.SIGALRM, expired)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.alarm(DEADLINE)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def folder(files: dict[str, bytes | str]) -> Iterator[Path]:
    """A bundle folder of ``files`` (with the campaign's env module and program), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="agentenv-fuzz-") as root:
        path = Path(root) / "bundle"
        (path / "tasks").mkdir(parents=True)
        (path / "fuzzenv.py").write_text(ENV_MODULE)
        (path / "fuzzproc.py").write_text(PROC_PROGRAM)
        for name, content in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
        yield path


def outcome(files: dict[str, bytes | str], report: Any, kind: str) -> str:
    """Load the bundle ``files`` make: "loaded" (its rows serve as JSON) or "refused" (every problem names a file and
    says what is wrong, on a line of its own with nothing raw for a terminal). Anything else fails the campaign."""
    with folder(files) as path, bounded():
        try:
            bundle = load_bundle(path)
        except BundleError as exc:
            result = "refused"
            assert exc.problems, str(exc)
            for problem in exc.problems:
                assert problem.file and problem.message.strip(), problem
                shown = str(problem)
                assert not any(ch in shown for ch in "\n\r\x1b\x00\x9b"), repr(shown)  # one plain line each
            assert "Traceback" not in str(exc)
        else:
            result = "loaded"
            for index, loaded in enumerate(bundle.tasks):
                json.dumps(task_row(bundle, loaded, index), allow_nan=False)  # what GET /tasks would send
    report.tried[f"bundle {kind}: {result}"] += 1
    return result


def task_files(tasks: list[dict[str, Any]], one_file: bool) -> dict[str, bytes | str]:
    if one_file:
        return {"tasks/all.yaml": dump(tasks)}
    return {f"tasks/t{i}.yaml": dump(t) for i, t in enumerate(tasks)}


@given(drawn=good_bundle(), one_file=st.booleans())
def test_a_bundle_whose_every_field_is_good_loads_and_serves_its_rows(
    drawn: tuple[dict[str, Any], list[dict[str, Any]]], one_file: bool, fuzz_report: Any
) -> None:
    manifest, tasks = drawn
    assert outcome({"bundle.yaml": dump(manifest), **task_files(tasks, one_file)}, fuzz_report, "good") == "loaded"


@given(drawn=one_field_bent(), one_file=st.booleans())
def test_a_good_bundle_with_one_value_bent_loads_or_is_refused_naming_file_and_field(
    drawn: tuple[dict[str, Any], list[dict[str, Any]]], one_file: bool, fuzz_report: Any
) -> None:
    manifest, tasks = drawn
    outcome({"bundle.yaml": dump(manifest), **task_files(tasks, one_file)}, fuzz_report, "one bent")


@given(manifest=bundle_file, tasks=st.lists(task, max_size=4), one_file=st.booleans())
def test_a_bundle_built_from_the_schema_loads_or_is_refused_naming_file_and_field(
    manifest: dict[str, Any], tasks: list[dict[str, Any]], one_file: bool, fuzz_report: Any
) -> None:
    outcome({"bundle.yaml": dump(manifest), **task_files(tasks, one_file)}, fuzz_report, "schema")


def dataset(template: dict[str, Any], data: list[dict[str, Any]]) -> dict[str, bytes | str]:
    envs = {"calc": {"kind": "python", "target": "fuzzenv:Calc"}}
    manifest = {"name": "rows", "envs": envs, "tasks": {"source": "dataset", "path": "data/*.jsonl", "task": template}}
    lines = "".join(json.dumps(row, allow_nan=True) + "\n" for row in data)
    return {"bundle.yaml": dump(manifest), "data/rows.jsonl": lines}


@given(drawn=good_rows())
def test_rows_of_any_values_through_a_good_template_load_or_are_refused_naming_row_and_column(
    drawn: tuple[dict[str, Any], list[dict[str, Any]]], fuzz_report: Any
) -> None:
    outcome(dataset(*drawn), fuzz_report, "rows")


@given(template=task, data=rows)
def test_any_rows_through_a_template_built_from_the_schema_load_or_are_refused(
    template: dict[str, Any], data: list[dict[str, Any]], fuzz_report: Any
) -> None:
    outcome(dataset(template, data), fuzz_report, "schema rows")


@given(
    odd=yaml_oddities,
    where=st.sampled_from(["bundle.yaml", "tasks/odd.yaml"]),
    how=st.sampled_from(["head", "tail", "whole", "value"]),
)
def test_yaml_oddities_load_or_are_refused_at_their_line(odd: str, where: str, how: str, fuzz_report: Any) -> None:
    good = "name: odd\nenvs:\n  calc: {kind: python, target: fuzzenv:Calc}\ntasks: tasks/*.yaml\n"
    task_file = "id: t1\nsplit: train\nturns:\n  - prompt: Say hi.\n"
    files: dict[str, bytes | str] = {"bundle.yaml": good, "tasks/odd.yaml": task_file}
    nested = "metadata:\n" + "".join(f"  {line}\n" for line in odd.splitlines())
    files[where] = {
        "head": odd + files[where],
        "tail": files[where] + odd,
        "whole": odd,
        "value": files[where] + nested,
    }[how]
    outcome(files, fuzz_report, "yaml")


@given(data=raw_bytes, where=st.sampled_from(["bundle.yaml", "tasks/raw.yaml", "data/rows.jsonl"]))
def test_raw_bytes_in_any_bundle_file_are_refused_or_loaded(data: bytes, where: str, fuzz_report: Any) -> None:
    source = "{source: dataset, path: data/*.jsonl}" if where == "data/rows.jsonl" else "tasks/*.yaml"
    ok = "id: ok\nsplit: train\nturns: [{prompt: hi}]\n"
    files: dict[str, bytes | str] = {"bundle.yaml": f"name: raw\ntasks: {source}\n", "tasks/ok.yaml": ok}
    files[where] = data
    outcome(files, fuzz_report, "bytes")


@pytest.fixture(autouse=True, scope="module")
def _peak_rss(fuzz_report: Any) -> Iterator[None]:
    yield
    fuzz_report.peak_rss["bundle loading (the test process)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
