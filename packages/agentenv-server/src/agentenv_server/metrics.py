"""``GET /metrics``: what an operator watches, in Prometheus' text format, through the Prometheus client library.

Behind the server's token like every route but ``/health`` (Prometheus sends it: ``authorization: {credentials_file:
...}`` in a scrape config). Each app has a registry of its own, so servers in one process (tests, ``AgentEnv.local``
beside ``agentenv eval``) do not mix their numbers. The names (``agentenv_*``) and what each counts are in the
serving docs' metrics section, with a scrape config and the alerts worth setting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from agentenv.sandbox import LIMITS_HIT
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric

if TYPE_CHECKING:
    from agentenv.engine import Episode
    from agentenv.wire import EpisodeResult

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _LimitsHit:
    """``agentenv_sandbox_limits_hit_total``: the sandbox's limits hit by this process's programs, by limit (read
    from ``agentenv.sandbox.LIMITS_HIT`` at each scrape: one count per process, like ``process_*``)."""

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> Iterator[Metric]:
        yield self._family({limit: float(n) for limit, n in LIMITS_HIT.items()})

    @staticmethod
    def _family(counts: dict[str, float] | None = None) -> CounterMetricFamily:
        family = CounterMetricFamily(
            "agentenv_sandbox_limits_hit",
            "Limits of the sandbox hit by what the policy steered (memory, process, cpu_time, file_size, call_time)",
            labels=["limit"],
        )
        for limit, n in sorted((counts or {}).items()):
            family.add_metric([limit], n)
        return family


class Metrics:
    """The server's metrics (one registry per app): counters and histograms the server updates, and gauges read
    when scraped (``watch``)."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=registry)  # process_open_fds, process_max_fds, memory, CPU
        registry.register(_LimitsHit())
        self.refused = Counter(
            "agentenv_refused",
            "New sessions and requests turned away, by reason (the code a client is told)",
            ["reason"],
            registry=registry,
        )
        self.started = Counter(
            "agentenv_episodes_started",
            "Episodes started, by purpose (play, probe, check)",
            ["purpose"],
            registry=registry,
        )
        self.ended = Counter(
            "agentenv_episodes_ended",
            "Episodes ended, by purpose and outcome (scored, failed, unscored), and for failed ones who is at fault "
            "and the failure's kind (agentenv.faults)",
            ["purpose", "outcome", "fault", "kind"],
            registry=registry,
        )
        self.calls = Counter(
            "agentenv_tool_calls",
            "Tool calls answered, by whether the answer is an error (the policy's mistake)",
            ["error"],
            registry=registry,
        )
        self.deploy = Histogram(
            "agentenv_deploy_seconds", "Seconds each episode's deploy took", registry=registry, buckets=_SECONDS
        )
        self.tool = Histogram(
            "agentenv_tool_seconds", "Seconds each tool call took", registry=registry, buckets=_SECONDS
        )
        self.verify = Histogram(
            "agentenv_verify_seconds",
            "Seconds each episode's verifiers took, all turns",
            registry=registry,
            buckets=_SECONDS,
        )

    def watch(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """A gauge read from ``read()`` at each scrape (sessions open, episodes running, records dropped...)."""
        Gauge(name, help_text, registry=self.registry).set_function(read)

    def episode_started(self, purpose: str) -> None:
        """Count an episode started."""
        self.started.labels(purpose).inc()

    def episode_ended(self, episode: Episode, result: EpisodeResult) -> None:
        """Count an ended episode, its calls and the seconds its deploy, tools and verifiers took."""
        failure = result.failure
        fault, kind = (failure.fault, failure.kind) if failure is not None else ("", "")
        self.ended.labels(episode.purpose, result.outcome, fault, kind).inc()
        if result.seconds.deploy > 0:
            self.deploy.observe(result.seconds.deploy)
        if result.seconds.scoring > 0:
            self.verify.observe(result.seconds.scoring)
        for call in episode.calls:
            self.calls.labels("true" if call.error else "false").inc()
            if not call.error or call.seconds > 0:  # an unknown tool or bad arguments never ran
                self.tool.observe(call.seconds)

    def text(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)
