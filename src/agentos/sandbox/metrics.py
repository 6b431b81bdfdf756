"""The sandbox's metrics, read at scrape time from `Sandbox.statistics()` (nothing is counted twice)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentos.sandbox.sandbox import SandboxStatistics


class SandboxCollector(Collector):
    def __init__(self, statistics: Callable[[], SandboxStatistics]) -> None:
        self._statistics = statistics

    def collect(self) -> Iterator[Metric]:
        s = self._statistics()
        yield GaugeMetricFamily("agentos_sandbox_commands_running", "run_command processes running", s.commands_running)
        started = CounterMetricFamily(
            "agentos_sandbox_commands_started",
            "run_command processes started (and the start-up probes): in a ready sandbox, or confined fresh",
            labels=["how"],
        )
        started.add_metric(["ready"], s.from_ready)
        started.add_metric(["fresh"], s.commands_started - s.from_ready)
        yield started
        yield GaugeMetricFamily("agentos_sandbox_ready", "Ready sandboxes waiting for a command", s.ready)
