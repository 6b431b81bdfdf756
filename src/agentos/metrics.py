"""Every metric name in one place. Gauges are read from components' `statistics()` at scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentos.kernel import KernelStatistics
from agentos.store.base import StoreStatistics

_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2000, 2500, 5000, 10000, 30000, 60000, 120000)
_WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000)


class _StatsCollector(Collector):
    def __init__(
        self,
        kernel: Callable[[], KernelStatistics],
        store: Callable[[], StoreStatistics],
        live_turns: Callable[[], int],
    ) -> None:
        self._kernel = kernel
        self._store = store
        self._live_turns = live_turns

    def collect(self) -> Iterator[Metric]:
        k = self._kernel()
        s = self._store()
        yield GaugeMetricFamily("agentos_in_flight_turns", "Active turns (one per session at most)", k.in_flight_turns)
        yield GaugeMetricFamily("agentos_admission_limit", "kernel.max_in_flight_turns (0 = off)", k.admission_limit)
        yield CounterMetricFamily(
            "agentos_admission_rejected", "Turns answered 429 by the admission gate", k.rejected_total
        )
        yield GaugeMetricFamily("agentos_active_sessions", "Sessions held in memory", k.active_sessions)
        yield GaugeMetricFamily(
            "agentos_active_processes", "Turn tasks alive, cancelling ones included", self._live_turns()
        )
        yield GaugeMetricFamily("agentos_provider_permits_in_use", "Open provider streams", k.permits_in_use)
        yield GaugeMetricFamily("agentos_provider_permit_waiters", "Turns waiting for a permit", k.waiting_for_permit)
        yield GaugeMetricFamily("agentos_message_store_queue", "Transcript writes queued", s.message_queue)
        yield GaugeMetricFamily("agentos_event_db_queue", "Event writes queued", s.event_queue)
        yield GaugeMetricFamily("agentos_access_log_queue", "Access-log writes queued", s.access_queue)
        yield CounterMetricFamily("agentos_event_db_dropped", "Event rows shed under overload", s.events_dropped_total)
        yield CounterMetricFamily(
            "agentos_access_log_dropped", "Access-log rows shed under overload", s.access_dropped_total
        )
        yield CounterMetricFamily(
            "agentos_stale_writes_rejected",
            "Writes of superseded turns refused by the turn epoch fence (PostgreSQL)",
            s.stale_writes_total,
        )
        yield CounterMetricFamily("agentos_sessions_evicted", "Sessions evicted by the TTL", k.evicted_total)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turn_duration_ms = Histogram(
            "agentos_turn_duration_ms",
            "Turn time, submit to terminal event",
            ["outcome"],
            buckets=_MS_BUCKETS,
            registry=r,
        )
        self.ttft_ms = Histogram("agentos_ttft_ms", "Submit to first token", buckets=_MS_BUCKETS, registry=r)
        self.event_db_write_wait_ms = Histogram(
            "agentos_event_db_write_wait_ms", "Enqueue to commit, per event batch", buckets=_WAIT_BUCKETS, registry=r
        )
        self.tokens_prompt = Counter("agentos_tokens_prompt", "Prompt tokens reported by the provider", registry=r)
        self.tokens_completion = Counter(
            "agentos_tokens_completion", "Completion tokens reported by the provider", registry=r
        )
        self.loop_lag_ms = Histogram(
            "agentos_event_loop_lag_ms",
            "How late a 100 ms timer fires: the event loop's queueing delay",
            buckets=_WAIT_BUCKETS + (2500, 5000),
            registry=r,
        )
        self._outcomes = {o: self.turn_duration_ms.labels(o) for o in ("completed", "cancelled", "failed")}

    def bind(
        self,
        kernel: Callable[[], KernelStatistics],
        store: Callable[[], StoreStatistics],
        live_turns: Callable[[], int],
    ) -> None:
        self.registry.register(_StatsCollector(kernel, store, live_turns))

    def observe_turn(self, outcome: str, duration_ms: float) -> None:
        self._outcomes[outcome].observe(duration_ms)

    def observe_event_batch(self, rows: int, wait_ms: float) -> None:
        self.event_db_write_wait_ms.observe(wait_ms)

    def render(self) -> bytes:
        return generate_latest(self.registry)
