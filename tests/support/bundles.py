"""Helpers for the core's tests: bundles copied into tmp_path and patched, and episodes played."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from agentenv import Bundle, BundleError, Episode, EpisodeResult, load_bundle
from agentenv.errors import BundleProblem

from tests.conftest import FAKE, running  # noqa: F401  # tests import it from here too


def copy_bundle(tmp_path: Path, source: Path = FAKE) -> Path:
    """A copy of ``source`` in ``tmp_path`` (its own folder, so its modules load apart from the original)."""
    target = tmp_path / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def patch(path: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must occur exactly once) with ``new`` in the file at ``path``."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def refused(path: Path, **kwargs: Any) -> BundleError:
    """Load ``path`` expecting a refusal; return the error."""
    with pytest.raises(BundleError) as info:
        load_bundle(path, **kwargs)
    return info.value


def only_problem(error: BundleError) -> BundleProblem:
    """The one problem of a refusal (fails with every problem listed when there are more)."""
    assert len(error.problems) == 1, "\n".join(map(str, error.problems))
    return error.problems[0]


def line_of(path: Path, text: str) -> int:
    """The (1-based) line of the first line of ``path`` that contains ``text``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} is not in {path}")


async def play(
    bundle: Bundle,
    task_id: str,
    calls: Iterable[tuple[str, Any]] = (),
    replies: Iterable[str] = (),
    **options: Any,
) -> tuple[Episode, list[Any], EpisodeResult]:
    """Play ``task_id``: the calls, then one end of turn per reply, then close. Returns the steps too."""
    episode = Episode(bundle, bundle.task(task_id), **options)
    await episode.start()
    steps = []
    try:
        for name, args in calls:
            steps.append(await episode.call(name, args))
        for reply in replies:
            steps.append(await episode.end_turn(reply))
    finally:
        result = await episode.close()
    return episode, steps, result


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait (on the loop) until ``condition()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still not true after {timeout} s"
        await asyncio.sleep(0.01)


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in {"Z", "X"}
