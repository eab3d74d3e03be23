"""Bundles for the tests: copied into tmp_path and patched, refused, played as episodes; the fake bundle's ``ops``
copy and the ledger its envs write."""

from __future__ import annotations

import collections
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentenv import Bundle, BundleError, Episode, EpisodeResult, load_bundle
from agentenv.errors import BundleProblem

from tests.support.paths import FAKE
from tests.support.waiting import wait_until

OPS_ENV = """
  ops:
    kind: python
    target: fake_env:FakeOps
"""
OPS_TASK = """id: ops
split: train
toolset: {envs: [ops]}
turns:
- prompt: Echo 'ops' with the echo tool, then say it.
  verifiers: [{id: answer-1, kind: python, check: fake_env:said_echo}]
"""


def with_ops(folder: Path) -> Path:
    """A copy of the fake bundle in ``folder``, with the ``ops`` env (fake_env.FakeOps: it starts programs and leaks
    descriptors) and a task ``ops`` using it: the fault matrix's bundle (the fake one's toolsets stay as they are)."""
    target = folder / "fake"
    if not target.exists():
        shutil.copytree(FAKE, target, ignore=shutil.ignore_patterns("__pycache__"))
        text = (target / "bundle.yaml").read_text()
        (target / "bundle.yaml").write_text(text.replace("\ndefaults:", OPS_ENV.rstrip() + "\ndefaults:", 1))
        (target / "tasks" / "ops.yaml").write_text(OPS_TASK)
    return target


class Ledger:
    """What the fake env did, read from the file its $AGENTENV_FAKE_LEDGER points at."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[str]:
        if not self.path.exists():
            return []
        return [line.rsplit(" ", 1)[0] for line in self.path.read_text().splitlines() if line]

    def count(self, event: str) -> int:
        return collections.Counter(self.events())[event]

    def wait_for(self, event: str, n: int, timeout: float = 10.0) -> int:
        """Wait until ``event`` happened at least ``n`` times; returns the count."""
        wait_until(lambda: self.count(event) >= n, timeout, interval=0.02)
        return self.count(event)


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
    import pytest  # here: the package's face stays importable where pytest is not (the benchmarks' stand-in model)

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
