"""One sample's record, and the results file of a run: one JSON line per sample, each written whole as it ends.

``DIR/results.jsonl`` is appended to one line at a time (the whole line, then ``fsync``), so a crash
loses at most the line being written; a line the disk refuses part of is cut off again before the
error is raised, and reading the file back drops a half-written last line and cuts it off the file.
One run writes a folder at a time (``agentenv.files.locked``). A sample can have several lines (a
sample the env lost is played again on ``--resume``): the last line of a ``(task, sample)`` counts.
``DIR/run.json`` holds the run's settings, so ``--resume`` can refuse a run of other settings.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from agentenv.errors import AgentEnvError
from agentenv.files import write_all, write_file
from agentenv.wire import EpisodeResult, Failure

__all__ = ["RESULTS", "RUN", "SUMMARY", "ResultsFile", "Sample", "read_samples"]

log = logging.getLogger("agentenv.evaluate")

RESULTS: Final = "results.jsonl"
SUMMARY: Final = "summary.json"
RUN: Final = "run.json"


@dataclass(frozen=True)
class Sample:
    """One play of one task by the model (a line of ``results.jsonl``).

    ``outcome``: ``scored``, ``failed`` (the env or server lost every attempt: never the model's failure;
    ``failure`` says why) or ``unscored`` (no verdict). ``reward`` is None unless scored; ``passed`` is
    ``reward >= threshold`` (None unless scored). ``failures``: every lost attempt's failure, including
    ones a replay made good. ``malformed_calls``: tool calls whose name or arguments could not be read
    (the model's mistake, scored). ``context_limited``: the conversation outgrew the model's context
    and the sample ended there (scored). ``transcript``: the chat messages of the last attempt.
    """

    task: str
    split: str
    sample: int
    outcome: str
    reward: float | None = None
    passed: bool | None = None
    scores: dict[str, float | None] = field(default_factory=dict)
    failure: dict[str, str] | None = None
    failures: list[dict[str, str]] = field(default_factory=list)
    reason: str = ""
    attempts: int = 1
    turns: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    malformed_calls: int = 0
    context_limited: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    env_seconds: float = 0.0
    transcript: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, int]:
        """``(task, sample)``: what identifies a sample in a run."""
        return (self.task, self.sample)

    def as_dict(self) -> dict[str, Any]:
        """The JSON line's fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sample:
        """Read a line (fields this version does not know are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_result(cls, result: EpisodeResult, *, split: str, sample: int, threshold: float = 1.0) -> Sample:
        """A sample from an episode's result alone (no transcript, tokens or attempts: a trainer's eval has them
        elsewhere)."""
        failure = failure_dict(result.failure) if result.outcome == "failed" and result.failure else None
        return cls(
            task=result.task_id,
            split=split,
            sample=sample,
            outcome=result.outcome,
            reward=result.reward if result.outcome == "scored" else None,
            passed=passed(result.reward, threshold) if result.outcome == "scored" else None,
            scores=dict(result.scores),
            failure=failure,
            failures=[failure] if failure else [],
            reason=result.reason,
            turns=result.turns,
            env_seconds=result.seconds.total,
        )


def passed(reward: float | None, threshold: float) -> bool | None:
    """Whether ``reward`` passes (None for no reward)."""
    return None if reward is None else reward >= threshold


def failure_dict(failure: Failure) -> dict[str, str]:
    """A failure as a results line holds it."""
    return {"kind": failure.kind, "stage": failure.stage, "fault": failure.fault, "message": failure.message}


class ResultsFile:
    """``DIR/results.jsonl``: read back what is there (repairing a half-written last line), then append."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def read(self) -> dict[tuple[str, int], Sample]:
        """The samples in the file, the last line of each ``(task, sample)`` winning.

        A last line cut short by a crash is dropped and cut off the file (so the next line starts clean).
        """
        if not self.path.exists():
            return {}
        data = self.path.read_bytes()
        good = 0  # bytes of whole, readable lines
        samples: dict[tuple[str, int], Sample] = {}
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            complete = line.endswith(b"\n")
            try:
                sample = Sample.from_dict(json.loads(line))
            except (ValueError, TypeError) as exc:
                if complete and good + len(line) < len(data):
                    raise AgentEnvError(
                        f"{self.path}:{number}: not a results line ({exc}); fix or delete the line, "
                        "or start over with a new --out"
                    ) from None
                log.warning("%s:%d: dropping a half-written last line (the run was interrupted)", self.path, number)
                break
            if not complete:  # whole JSON without its newline: keep it, and end it
                with self.path.open("ab") as f:
                    f.write(b"\n")
                line += b"\n"
            samples[sample.key] = sample
            good += len(line)
        if good < len(data):
            with self.path.open("r+b") as f:
                f.truncate(good)
        return samples

    def append(self, sample: Sample) -> None:
        """Write ``sample`` as one line, whole, and make it durable before returning."""
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        line = (json.dumps(sample.as_dict(), ensure_ascii=False) + "\n").encode()
        start = os.lseek(self._fd, 0, os.SEEK_END)  # one writer: the folder is locked (agentenv.files.locked)
        try:
            write_all(self._fd, line)
            os.fsync(self._fd)
        except OSError as exc:
            os.ftruncate(self._fd, start)  # no half line left behind for the next line to follow
            raise AgentEnvError(
                f"{self.path}: cannot write the result of task {sample.task!r} sample {sample.sample} "
                f"({exc.strerror or exc}); the samples before it are kept: fix that, then run again with --resume"
            ) from None

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_samples(path: str | Path) -> list[Sample]:
    """The samples of a results file (or of the ``results.jsonl`` in a folder), last line per sample winning."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    if not path.exists():
        raise AgentEnvError(f"{path} does not exist: give a results.jsonl written by agentenv eval (or its folder)")
    return list(ResultsFile(path).read().values())


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON, whole or not at all (``agentenv.files.write_file``)."""
    write_file(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def samples_of(results: Iterable[EpisodeResult], *, split: str, threshold: float = 1.0) -> list[Sample]:
    """Samples from episode results in play order: the n-th result of a task is its sample n (from 0)."""
    seen: dict[str, int] = {}
    out = []
    for result in results:
        index = seen.get(result.task_id, 0)
        seen[result.task_id] = index + 1
        out.append(Sample.from_result(result, split=split, sample=index, threshold=threshold))
    return out
