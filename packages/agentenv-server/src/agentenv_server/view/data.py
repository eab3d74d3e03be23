"""What the viewer shows: a records folder (``agentenv serve --record``) or an eval run (``results.jsonl``), read
into rows of one shape, filtered, and added up by ``agentenv.evaluate``'s own summary (one way to count)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenv import record
from agentenv.errors import AgentEnvError
from agentenv.evaluate import RESULTS, Sample, Summary, summarize

__all__ = ["KEPT_OUT_WARNING", "Filters", "Row", "Run", "load"]

KEPT_OUT_WARNING = 0.05  # a sustained share of episodes the env loses worth a look (prime-rl's "smell")


@dataclass(frozen=True)
class Row:
    """One rollout (a task played to a verdict, its replays included) or one eval sample."""

    key: str  # its page's name: e0, e1, ... (never text from the run)
    task: str
    split: str
    outcome: str
    reward: float | None
    attempts: int
    failure: dict[str, Any] | None
    earlier: list[dict[str, Any]]
    started: str = ""
    client: str = ""
    step: int | None = None
    system: str = ""
    turns: list[dict[str, Any]] = field(default_factory=list)  # records: prompt, reply, calls
    steps: list[dict[str, Any]] = field(default_factory=list)
    transcript: list[dict[str, Any]] = field(default_factory=list)  # eval samples: the chat messages
    attempt_records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """The failure's kind (empty unless failed)."""
        return str((self.failure or {}).get("kind", ""))

    def sample(self, number: int) -> Sample:
        """The row as ``agentenv.evaluate``'s ``Sample`` (what its summary adds up)."""
        calls = sum(len(t.get("calls", ())) for t in self.turns)
        scores = {str(s["id"]): s.get("score") for s in self.steps}
        passed = None if self.reward is None else self.reward >= 1.0
        failures = [*self.earlier, *([self.failure] if self.failure else [])]
        return Sample(
            task=self.task,
            split=self.split,
            sample=number,
            outcome=self.outcome,
            reward=self.reward,
            passed=passed,
            scores=scores,
            failure=self.failure,
            failures=failures,
            attempts=self.attempts,
            turns=len(self.turns),
            tool_calls=calls,
        )


@dataclass
class Filters:
    """The table's filters (the query of its page); empty ones filter nothing."""

    task: str = ""
    split: str = ""
    outcome: str = ""
    kind: str = ""
    reward_min: float | None = None
    reward_max: float | None = None
    replayed: bool = False

    @classmethod
    def of(cls, query: Mapping[str, str]) -> Filters:
        """Read the query; a bound that is not a number filters nothing."""
        return cls(
            task=query.get("task", ""),
            split=query.get("split", ""),
            outcome=query.get("outcome", ""),
            kind=query.get("kind", ""),
            reward_min=_number(query.get("rmin")),
            reward_max=_number(query.get("rmax")),
            replayed=query.get("replayed") == "1",
        )

    def keep(self, row: Row) -> bool:
        """Whether ``row`` passes every filter."""
        if (self.task and row.task != self.task) or (self.split and row.split != self.split):
            return False
        if (self.outcome and row.outcome != self.outcome) or (self.kind and row.kind != self.kind):
            return False
        if self.reward_min is not None and (row.reward is None or row.reward < self.reward_min):
            return False
        if self.reward_max is not None and (row.reward is None or row.reward > self.reward_max):
            return False
        return not self.replayed or row.attempts > 1


@dataclass
class Run:
    """A source's rows, in the order they were played."""

    name: str
    kind: str  # "records" or "eval"
    rows: list[Row]

    def row(self, key: str) -> Row | None:
        """The row of a page name, or None."""
        return next((r for r in self.rows if r.key == key), None)

    def summary(self) -> Summary:
        """Per task, split and overall, as ``agentenv eval`` adds them up."""
        seen: dict[str, int] = {}
        samples = []
        for row in self.rows:
            samples.append(row.sample(seen.get(row.task, 0)))
            seen[row.task] = seen.get(row.task, 0) + 1
        return summarize(samples, ks=[1], run={"bundle": self.name})

    def kept_out(self) -> float | None:
        """The share of rows the env or server lost (failed: kept out of training), None for no rows."""
        return sum(r.outcome == "failed" for r in self.rows) / len(self.rows) if self.rows else None

    def over_time(self, buckets: int = 20) -> list[dict[str, Any]]:
        """The rows in play order cut into up to ``buckets`` runs of rows: each one's mean reward and failure rate."""
        if not self.rows:
            return []
        size = math.ceil(len(self.rows) / min(buckets, len(self.rows)))
        out = []
        for start in range(0, len(self.rows), size):
            part = self.rows[start : start + size]
            rewards = [r.reward for r in part if r.reward is not None]
            out.append(
                {
                    "first": start + 1,
                    "last": start + len(part),
                    "started": part[0].started,
                    "reward": sum(rewards) / len(rewards) if rewards else None,
                    "failed": sum(r.outcome == "failed" for r in part) / len(part),
                }
            )
        return out

    def choices(self, name: str) -> list[str]:
        """The values a filter can take (tasks, splits, outcomes, failure kinds), sorted."""
        values = {
            "task": lambda r: r.task,
            "split": lambda r: r.split,
            "outcome": lambda r: r.outcome,
            "kind": lambda r: r.kind,
        }[name]
        return sorted({v for v in map(values, self.rows) if v})


def load(source: str | Path) -> Run:
    """The run at ``source``: a records folder or shard, an eval ``--out`` folder, or its ``results.jsonl``."""
    path = Path(source)
    results = path / RESULTS if path.is_dir() else path
    if results.name == RESULTS and results.is_file():
        return Run(str(path), "eval", _eval_rows(results))
    if path.is_dir() and not record.shards(path):
        raise AgentEnvError(
            f"{path}: neither records (records-*.jsonl from agentenv serve --record DIR) nor an eval "
            "run (results.jsonl from agentenv eval --out DIR); give one of those"
        )
    return Run(str(path), "records", _record_rows(record.read(path)))


def _record_rows(records: Any) -> list[Row]:
    rows = []
    for attempts in record.rollouts(records):
        last = attempts[-1]
        earlier = list(last.get("earlier") or [])
        rows.append(
            Row(
                key=f"e{len(rows)}",
                task=str(last.get("task", "")),
                split=str(last.get("split", "")),
                outcome=str(last.get("outcome", "")),
                reward=_number(last.get("reward")),
                attempts=len(attempts),
                failure=last.get("failure"),
                earlier=earlier,
                started=str(attempts[0].get("started", "")),
                client=str(last.get("client", "")),
                step=last.get("step"),
                system=str(last.get("system", "")),
                turns=list(last.get("turns") or []),
                steps=list(last.get("steps") or []),
                attempt_records=attempts,
            )
        )
    rows.sort(key=lambda r: r.started)
    return [Row(**{**r.__dict__, "key": f"e{n}"}) for n, r in enumerate(rows)]


def _eval_rows(path: Path) -> list[Row]:
    samples: dict[tuple[str, int], Sample] = {}
    with path.open("rb") as file:  # read only: a viewer never repairs the file it shows
        for line in file:
            if not line.endswith(b"\n"):
                break
            try:
                sample = Sample.from_dict(json.loads(line))
            except (ValueError, TypeError):
                continue
            samples[sample.key] = sample
    rows = []
    for s in samples.values():
        earlier = list(s.failures[:-1] if s.failure else s.failures)
        steps = [{"id": k, "turn": None, "score": v} for k, v in s.scores.items()]
        rows.append(
            Row(
                key=f"e{len(rows)}",
                task=s.task,
                split=s.split,
                outcome=s.outcome,
                reward=s.reward,
                attempts=s.attempts,
                failure=s.failure,
                earlier=earlier,
                steps=steps,
                transcript=list(s.transcript),
            )
        )
    return rows


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
