"""Every metric name in one place. Gauges are read from components' `statistics()` at scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from agentos.kernel import KernelStatistics
from agentos.providers.breaker import STATE_CODES
from agentos.providers.router import TTFT_BUCKETS_S, Router
from agentos.store.base import StoreStatistics
from agentos.store.pg_pool import FIGURES as POOLS
from agentos.store.pg_pool import PoolFigures
from agentos.tenancy.budgets import BudgetStatistics

if TYPE_CHECKING:
    from agentos.coordination.permits import PermitStatistics

_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2000, 2500, 5000, 10000, 30000, 60000, 120000)
CLOSE_REASONS = ("header_timeout", "body_timeout", "per_client_limit")
_WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000)
S = TypeVar("S")


class _StatsCollector(Collector):
    def __init__(
        self,
        kernel: Callable[[], KernelStatistics],
        store: Callable[[], StoreStatistics],
        live_turns: Callable[[], int],
        cluster: Callable[[], PermitStatistics] | None,
    ) -> None:
        self._kernel = kernel
        self._store = store
        self._live_turns = live_turns
        self._cluster = cluster

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
        yield GaugeMetricFamily("agentos_usage_ledger_queue", "Usage ledger rows queued (never shed)", s.ledger_queue)
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
        yield from _busy_metrics(k)
        if self._cluster is not None:
            yield from _cluster_metrics(self._cluster())


def _busy_metrics(k: KernelStatistics) -> Iterator[Metric]:
    """A second message while a turn runs (`on_busy`, docs/conversations.md)."""
    yield GaugeMetricFamily("agentos_queued_turns", "Turns waiting behind their session's running turn", k.queued_turns)
    yield CounterMetricFamily("agentos_turns_queued", "Turns that waited in a session's queue", k.queued_total)
    yield CounterMetricFamily("agentos_turns_steered", "Messages steered into a running agent turn", k.steered_total)
    yield CounterMetricFamily(
        "agentos_turns_refused_busy",
        "Turns refused for a busy session (turn_in_progress, turn_queue_full)",
        k.busy_refused_total,
    )


class _PoolCollector(Collector):
    """The PostgreSQL pools of this process together (`store.backend = "postgres"`); nothing
    while there is none (the embedded default): a zero would read as an idle pool."""

    def collect(self) -> Iterator[Metric]:
        return _pool_metrics(POOLS) if POOLS.live() else iter(())


def _pool_metrics(p: PoolFigures) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "agentos_store_pool_connections", "Connections open in this node's pools", p.open_connections
    )
    yield GaugeMetricFamily(
        "agentos_store_pool_max", "The most connections this node's pools may open", p.max_connections
    )
    yield GaugeMetricFamily("agentos_store_pool_in_use", "Pool connections lent to a unit of work now", p.in_use)
    yield GaugeMetricFamily("agentos_store_pool_waiting", "Units of work waiting for a pool connection", p.waiting)
    yield CounterMetricFamily("agentos_store_pool_acquired", "Pool connections lent", p.acquired_total)
    yield CounterMetricFamily(
        "agentos_store_pool_acquire_timeouts",
        "Waits for a pool connection past store.postgres_acquire_timeout_s",
        p.acquire_timeouts_total,
    )


def _cluster_metrics(c: PermitStatistics) -> Iterator[Metric]:
    """The cluster's provider limit (`coordination.redis_url`), as this node sees it."""
    yield GaugeMetricFamily(
        "agentos_cluster_permits_held", "This node's provider streams holding a slot of the cluster's limit", c.held
    )
    yield GaugeMetricFamily(
        "agentos_cluster_permits_waiting", "This node's streams waiting for a slot of the cluster's limit", c.waiting
    )
    yield CounterMetricFamily(
        "agentos_cluster_permits_restored",
        "Slots of this node added back to Redis after Redis lost them (a restart, a long outage)",
        c.restored_total,
    )


class RouterCollector(Collector):
    """The router's targets (`agentos.providers.router`): read at scrape time, so the hot path
    only adds to plain integers."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def collect(self) -> Iterator[Metric]:
        stats = self._router.statistics()
        states = self._router.breakers.states()
        requests = CounterMetricFamily("agentos_provider_requests", "Calls sent to a target", labels=["target"])
        failures = CounterMetricFamily(
            "agentos_provider_failures", "Calls a target failed, by reason", labels=["target", "reason"]
        )
        fallbacks = CounterMetricFamily(
            "agentos_provider_fallbacks",
            "Calls a target failed before its first token and passed on",
            labels=["target"],
        )
        breaker = GaugeMetricFamily(
            "agentos_provider_breaker_state", "A target's breaker: 0 closed, 1 open, 2 half-open", labels=["target"]
        )
        ttft = HistogramMetricFamily(
            "agentos_provider_ttft_seconds", "From a target's call to its first token", labels=["target"]
        )
        for target, s in sorted(stats.items()):
            requests.add_metric([target], s.requests)
            for reason, count in sorted(s.failures.items()):
                failures.add_metric([target, reason], count)
            fallbacks.add_metric([target], s.fallbacks)
            breaker.add_metric([target], STATE_CODES[states.get(target, "closed")])
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, TTFT_BUCKETS_S), "+Inf"), s.ttft_buckets, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            ttft.add_metric([target], buckets, s.ttft_sum_s)
        yield from (requests, failures, fallbacks, breaker, ttft)


class _FiguresCollector(Collector, Generic[S]):
    """The metrics of one component, read from its `statistics()` at each scrape."""

    def __init__(self, statistics: Callable[[], S]) -> None:
        self._statistics = statistics


def _counters(prefix: str, helps: Iterable[tuple[str, str]], value: Callable[[str], int]) -> Iterator[Metric]:
    """A counter `<prefix><name>` for each (name, help text), valued `value(name)`."""
    for name, help_text in helps:
        yield CounterMetricFamily(prefix + name, help_text, value(name))


class BudgetCollector(_FiguresCollector[BudgetStatistics]):
    """The spending budgets (`agentos.tenancy.budgets`): refusals, read at scrape time."""

    def collect(self) -> Iterator[Metric]:
        refused = CounterMetricFamily(
            "agentos_budget_refusals",
            "Model calls a budget could not hold (402 at admission, or a turn or run step failed)",
            labels=["budget", "reason"],
        )
        for (budget, reason), count in sorted(self._statistics().refused.items()):
            refused.add_metric([budget, reason], count)
        yield refused


class RetentionFigures(Protocol):
    """What `RetentionCollector` reads (`agentos.runtime.retention.RetentionStatistics`)."""

    deleted: dict[str, int]
    skipped_active_total: int
    failed_total: int


class RetentionCollector(_FiguresCollector[RetentionFigures]):
    """The retention sweeper (docs/deployment.md "Retention"): rows deleted per kind (a session
    counts once, with its transcript, events and runs), expired sessions skipped while a turn ran,
    and sweeps a store error cut short."""

    def collect(self) -> Iterator[Metric]:
        s = self._statistics()
        deleted = CounterMetricFamily(
            "agentos_retention_deleted_rows", "Rows deleted for being older than their retention", labels=["kind"]
        )
        for kind, count in sorted(s.deleted.items()):
            deleted.add_metric([kind], count)
        yield deleted
        skipped = s.skipped_active_total
        yield CounterMetricFamily("agentos_retention_skipped_active", "Expired sessions kept: a turn ran", skipped)
        yield CounterMetricFamily("agentos_retention_failed_sweeps", "Sweeps a store error cut short", s.failed_total)


_SPANS = (
    ("exported", "Spans sent to the OTLP collector"),
    ("dropped", "Spans dropped: the export queue was full (telemetry.max_queue)"),
    ("failed", "Spans the collector refused or did not take (down, slow)"),
)
_FORWARDED = (
    ("asked", "Turn requests this node sent to the node running their session's turn (turns and cancels)"),
    ("unanswered", "Of them, those no node answered in time"),
    ("answered", "Requests of other nodes this node answered"),
)


class TracingCollector(_FiguresCollector[dict[str, int]]):
    """The span exporter's counters ([telemetry], docs/observability.md): what a collector that
    is down or slow costs is dropped spans, counted here."""

    def collect(self) -> Iterator[Metric]:
        s = self._statistics()
        yield from _counters("agentos_trace_spans_", _SPANS, lambda name: s.get(name, 0))
        yield GaugeMetricFamily("agentos_trace_queue", "Spans waiting for export", s.get("queued", 0))
        yield CounterMetricFamily(
            "agentos_trace_attribute_values_dropped",
            "Span attribute values the export cannot carry (an int beyond 64 bits), dropped alone",
            s.get("attribute_values_dropped", 0),
        )


class ForwardingCollector(_FiguresCollector[Any]):
    """Turns sent to (and served for) the node running their session's turn
    (`agentos.runtime.forwarding`; `enqueue` and `steer` across nodes, docs/conversations.md)."""

    def collect(self) -> Iterator[Metric]:
        s = self._statistics()
        yield from _counters("agentos_turn_forwarding_", _FORWARDED, lambda name: getattr(s, f"{name}_total"))


class IdentityCollector(_FiguresCollector[Any]):  # -> agentos.identity.UserTokenStatistics
    """End users' tokens ([identity], docs/security.md): what the verifier did and holds."""

    def collect(self) -> Iterator[Metric]:
        s = self._statistics()
        yield CounterMetricFamily("agentos_user_tokens_verified", "User tokens whose signature was checked", s.verified)
        yield CounterMetricFamily("agentos_user_tokens_refused", "User tokens refused (401)", s.refused)
        yield CounterMetricFamily(
            "agentos_identity_fetches",
            "Discovery documents and key sets fetched from identity providers",
            s.jwks_fetches,
        )
        yield GaugeMetricFamily("agentos_user_tokens_cached", "Verified user tokens held for reuse", s.cached)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # process_cpu_seconds_total, process_resident_memory_bytes, ...: what a load generator
        # measuring a deployment it did not start reads instead of /proc (agentos bench load --server-url)
        ProcessCollector(registry=r)
        r.register(_PoolCollector())
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
            "How late a probe timer fires: the event loop's queueing delay (10 Hz while it lags >= 1 ms, else 1 Hz)",
            buckets=_WAIT_BUCKETS + (2500, 5000),
            registry=r,
        )
        self.connections_closed = Counter(
            "agentos_connections_closed",
            "Connections closed on the client's account: header_timeout, body_timeout, per_client_limit",
            ["reason"],
            registry=r,
        )
        for reason in CLOSE_REASONS:
            self.connections_closed.labels(reason)
        self.memory_trims = Counter(
            "agentos_memory_trims", "malloc_trim calls after TTL evictions (agentos.runtime.reclaim)", registry=r
        )
        self.memory_trim_released_bytes = Counter(
            "agentos_memory_trim_released_bytes", "RSS given back by those trims (before - after)", registry=r
        )
        self._outcomes = {o: self.turn_duration_ms.labels(o) for o in ("completed", "cancelled", "failed")}

    def bind(
        self,
        kernel: Callable[[], KernelStatistics],
        store: Callable[[], StoreStatistics],
        live_turns: Callable[[], int],
        cluster: Callable[[], PermitStatistics] | None = None,
    ) -> None:
        self.registry.register(_StatsCollector(kernel, store, live_turns, cluster))

    def observe_turn(self, outcome: str, duration_ms: float) -> None:
        self._outcomes[outcome].observe(duration_ms)

    def observe_trim(self, released_bytes: int) -> None:
        self.memory_trims.inc()
        self.memory_trim_released_bytes.inc(released_bytes)

    def observe_event_batch(self, rows: int, wait_ms: float) -> None:
        self.event_db_write_wait_ms.observe(wait_ms)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def snapshot(self) -> dict[str, Any]:
        """Every metric as JSON, for the console (`agentos.api.console_stream`): gauges and
        counters as one number each (summed over their labels), histograms as their cumulative
        bucket counts (`le`, `counts`), `sum` and `count`, every label's together. The names drop
        the `agentos_` prefix and a counter's `_total`. The router's families (`provider_*`) are
        given per target as well (`targets`: target -> name -> value), for the console's table."""
        values: dict[str, float] = {}
        histograms: dict[str, dict[str, Any]] = {}
        targets: dict[str, dict[str, float]] = {}
        for family in self.registry.collect():
            name = family.name.removeprefix("agentos_")
            if family.type == "histogram":
                histograms[name] = _histogram(family)
            else:
                values[name] = sum(s.value for s in family.samples if not s.name.endswith("_created"))
                if name.startswith("provider_"):
                    _by_target(targets, name.removeprefix("provider_"), family)
        return {"values": values, "histograms": histograms, "targets": targets}


def _by_target(targets: dict[str, dict[str, float]], name: str, family: Metric) -> None:
    for sample in family.samples:
        target = sample.labels.get("target")
        if target is not None and not sample.name.endswith("_created"):
            row = targets.setdefault(target, {})
            row[name] = row.get(name, 0.0) + sample.value


def _histogram(family: Metric) -> dict[str, Any]:
    """One histogram's buckets, `sum` and `count`, every label's together."""
    buckets: dict[float, float] = {}
    total = count = 0.0
    for sample in family.samples:
        if sample.name.endswith("_bucket"):
            le = float(sample.labels["le"])
            buckets[le] = buckets.get(le, 0.0) + sample.value
        elif sample.name.endswith("_sum"):
            total += sample.value
        elif sample.name.endswith("_count"):
            count += sample.value
    bounds = sorted(b for b in buckets if b != float("inf"))  # +Inf is `count`: JSON has no infinity
    return {"le": bounds, "counts": [buckets[b] for b in bounds], "sum": total, "count": count}
