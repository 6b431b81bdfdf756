"""Build every service from the settings, in order, and close them in reverse.

    tenants -> Redis link and bus (if configured) -> store -> quotas (seeded from the store)
      -> usage ledger (on the store) -> provider -> driver (the kernel) -> knowledge -> runs -> triggers
      -> schedules -> runtime

Each part receives what it needs when it is built, so nothing is wired by assignment later;
the CLI, the test helpers and the bench all build the server this one way.

Usage::

    services = await open_services(settings)
    try:
        app = create_app(services)
        ...
    finally:
        await services.close()
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from agentos.agents import RunService
from agentos.agents.relay import RunRelay
from agentos.clock import Clock, MonotonicClock, WallClock, wall_ms
from agentos.config import Settings, resolve_paths
from agentos.coordination.breakers import BusBreakerShare
from agentos.coordination.budgets import ClusterBudgets
from agentos.coordination.bus import Bus
from agentos.coordination.holds import ClusterHolds
from agentos.coordination.link import Link, open_link
from agentos.coordination.node import node_id
from agentos.coordination.permits import ClusterPermits, cluster_permits
from agentos.coordination.quotas import ClusterQuotas
from agentos.errors import ConfigError
from agentos.identity import Fetcher, UserTokens, identity_policy
from agentos.kernel import Kernel
from agentos.knowledge.embeddings import Embedder
from agentos.knowledge.service import KnowledgeService, open_knowledge_storage
from agentos.metrics import (
    BudgetCollector,
    ForwardingCollector,
    IdentityCollector,
    Metrics,
    RetentionCollector,
    RouterCollector,
    TracingCollector,
)
from agentos.outbound import OutboundPolicy
from agentos.providers.base import Provider
from agentos.providers.router import open_router
from agentos.runtime.driver import Driver
from agentos.runtime.retention import Retention
from agentos.runtime.runtime import Runtime, kernel_limits
from agentos.sandbox.metrics import SandboxCollector
from agentos.schedules.service import ScheduleService, open_schedule_storage
from agentos.store.base import Store
from agentos.store.memory import MemoryStore
from agentos.store.sqlite import SQLiteStore
from agentos.telemetry import NO_TRACING, Tracing
from agentos.telemetry.opening import open_tracing
from agentos.tenancy.budgets import Budgets
from agentos.tenancy.ledger import StoreLedger
from agentos.tenancy.pepper import load_pepper
from agentos.tenancy.quotas import Quotas
from agentos.tenancy.registry import TenantRegistry
from agentos.tenancy.storage import RegistryStorage
from agentos.tenancy.tables import registry_path
from agentos.triggers.service import TriggerService, open_trigger_storage

log = logging.getLogger("agentos")

DRAIN_TIMEOUT_S = 30.0


@dataclass(slots=True)
class Services:
    settings: Settings
    metrics: Metrics
    store: Store
    provider: Provider
    driver: Driver
    runs: RunService
    runtime: Runtime
    tenants: TenantRegistry
    quotas: Quotas
    ledger: StoreLedger  # the router's `Ledger`: one row per model call that answered
    knowledge: KnowledgeService
    triggers: TriggerService
    schedules: ScheduleService
    link: Link | None = None  # Redis, when coordination.redis_url is set
    bus: Bus | None = None  # pub/sub between nodes over that Redis
    tracing: Tracing = NO_TRACING  # traces over OTLP ([telemetry]); off: no OpenTelemetry loaded
    budgets: Budgets | None = None  # spending budgets (in Redis with a link): the router's meter
    retention: Retention | None = None  # deletes what outlived its tenant's retention_s
    users: UserTokens | None = None  # end users' tokens: the config's issuers and the tenants' (admin API)

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Refuse new turns and runs; let running turns finish (bounded), then cancel the rest."""
        await self.runtime.drain(timeout_s)

    async def close(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Drain, then close everything in the reverse order of building it."""
        await self.drain(timeout_s)
        if self.retention is not None:
            await self.retention.close()  # a sweep deletes through the runtime and the store
        await self.schedules.close()  # its scheduler starts runs: stopped before them
        await self.triggers.close()  # its dispatcher starts runs: stopped before them
        await self.runs.close(min(timeout_s, 5.0))  # before the provider: draining runs may still call it
        await self.knowledge.close()  # its indexer embeds through the provider and the driver's permits
        self.driver.close()
        if self.driver.cluster is not None:
            await self.driver.cluster.close()  # gives back what is held; before the link closes
        for holds in (self.driver.turn_holds, self.driver.run_holds, self.driver.user_turn_holds):
            if holds is not None:
                await holds.close()
        await self.provider.aclose()
        await self.store.close()
        if self.tracing.on:  # the last spans out, in a thread: a slow collector must not block the loop
            await asyncio.to_thread(self.tracing.shutdown)
        if self.users is not None:
            await self.users.close()
        await self.tenants.close()
        if self.bus is not None:
            await self.bus.close()
        if self.link is not None:
            if isinstance(self.quotas, ClusterQuotas):
                await self.quotas.flush()
            await self.link.close()


async def open_services(
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    clock: Clock | None = None,
    provider: Provider | None = None,
    now_ms: Callable[[], int] = wall_ms,
    wall_clock: Clock | None = None,
) -> Services:
    """Build and start every service. `provider` replaces the one `provider.url` names;
    `now_ms` is the wall clock keys expire by (tests pass a fake one); `clock` is the kernel's
    and the rate limiters' (monotonic), `wall_clock` the quotas' (epoch seconds: it decides the
    UTC day).

    Relative `data_dir` and `jsonl_dir` are resolved against the current directory, once:
    `Services.settings` holds the absolute paths.

    Raises:
        ConfigError: no provider URL and no provider given (`agentos serve` starts its mock first).
        StoreError: the store cannot be opened.
    """
    settings = resolve_paths(settings)  # once, here: every part below gets the same absolute paths
    metrics = metrics or Metrics()
    tracing = _tracing(settings, metrics)
    if provider is None and not (settings.provider.url or settings.providers):
        raise ConfigError("provider.url: no provider configured")
    tenants, users = await _tenants_and_users(settings, now_ms, metrics)
    link: Link | None = None
    bus: Bus | None = None
    store = _make_store(settings, metrics)
    try:
        if settings.coordination.redis_url:
            link = await open_link(settings.coordination)  # stops start-up if Redis does not answer
            bus = Bus(settings.coordination)
            await bus.start()  # connects in the background: an outage later must not stop the node
        await store.start()
    except BaseException:
        await _close_bus(bus)
        await _close_link(link)
        await tenants.close()
        raise
    started: list[Callable[[], Awaitable[None]]] = []  # closed in reverse if a later part fails
    try:
        quotas = await _seeded_quotas(store, wall_clock or WallClock(), link)
        ledger = StoreLedger(store)  # the router records each call's Spend here (agentos.providers.metering)
        budgets = open_budgets(wall_clock or WallClock(), tenants, link)  # and reserves, then settles, here
        await budgets.seed(store)  # what the ledger says was spent today, this month, by recent runs
        metrics.registry.register(BudgetCollector(budgets.statistics))
        if provider is None:
            share = None if bus is None else BusBreakerShare(bus, node_id())  # breakers, cluster-wide
            provider = open_router(
                settings, clock or MonotonicClock(), share=share, tracing=tracing, ledger=ledger, meter=budgets
            )
            if share is not None:
                await share.start(provider.breakers)
            metrics.registry.register(RouterCollector(provider))
        cluster = None if link is None else cluster_permits(settings, link, bus)  # the limit, cluster-wide
        holds = {} if link is None or cluster is None else cluster_holds(settings, link, cluster)
        kernel = Kernel(kernel_limits(settings))
        driver = Driver(
            kernel,
            clock or MonotonicClock(),
            cluster,
            turn_holds=holds.get("turns"),
            run_holds=holds.get("runs"),
            user_turn_holds=holds.get("user-turns"),
        )
        tenants.watch_limits(driver.configure_tenant)  # weights and caps per tenant, kept current
        data_dir = Path(settings.data_dir) if settings.store.enabled else None
        knowledge = KnowledgeService(settings, open_knowledge_storage(settings, data_dir), Embedder(settings, driver))
        await knowledge.start()  # the indexer resumes the documents accepted before a crash
        started.append(knowledge.close)
        knowledge.register_metrics(metrics.registry)
        runs = RunService(
            provider,
            data_dir,
            settings,
            driver=driver,
            on_usage=quotas.add_tokens,
            knowledge=knowledge,
            tracing=tracing,
        )
        metrics.registry.register(SandboxCollector(runs.sandbox.statistics))
        if bus is not None:  # before `start`: the runs it resumes publish too
            relay = RunRelay(bus)
            await relay.start()
            runs.bridge_events(relay)
        started_ms = wall_ms()  # model steps from here on are counted as they finish (on_usage)
        await runs.start()  # resumes every unfinished run from its journal
        started.append(runs.close)
        for tenant_id, tokens in (await runs.store.model_tokens(quotas.day_start_ms(), started_ms)).items():
            quotas.add_tokens(tenant_id, tokens)
        if isinstance(quotas, ClusterQuotas):
            await quotas.share()  # counted in Redis from here on
        triggers = TriggerService(
            settings,
            open_trigger_storage(settings, data_dir),
            runs,
            tenants.pepper,
            tenant_enabled=tenants.is_enabled,
        )
        await triggers.start()  # the dispatcher starts the deliveries accepted before a crash
        started.append(triggers.close)
        triggers.register_metrics(metrics.registry)
        schedules = ScheduleService(
            settings, open_schedule_storage(settings, data_dir), runs, tenant_enabled=tenants.is_enabled
        )
        await schedules.start()  # the scheduler starts the fires claimed before a crash, then what is due
        schedules.register_metrics(metrics.registry)
    except BaseException:
        for close in reversed(started):
            await close()
        await store.close()
        await _close_bus(bus)
        await _close_link(link)
        await tenants.close()
        raise
    runtime = Runtime(
        settings,
        store,
        provider,
        metrics,
        driver=driver,
        runs=runs,
        bus=bus,
        on_usage=quotas.add_tokens,
        tracing=tracing,
    )
    await runtime.start()
    metrics.registry.register(ForwardingCollector(runtime.forwarding.statistics))
    runtime.start_lag_probe()
    await runtime.streams.start()
    policies = _retention_policies(tenants)
    retention = Retention(runtime, policies, settings.retention, wall_clock or WallClock(), runs=runs)
    retention.start()
    metrics.registry.register(RetentionCollector(retention.statistics))
    if driver.cluster is not None:
        await driver.cluster.start()  # its heartbeat; last, so a failed start-up leaves no task behind
    return Services(
        settings,
        metrics,
        store,
        provider,
        driver,
        runs,
        runtime,
        tenants,
        quotas,
        ledger,
        knowledge,
        triggers,
        schedules,
        link,
        bus,
        tracing,
        budgets,
        retention,
        users,
    )


def _retention_policies(tenants: TenantRegistry) -> Callable[[], list[tuple[str, int]]]:
    """Every tenant with its effective `retention_s` (its override, else `[tenant_limits]`)."""

    def policies() -> list[tuple[str, int]]:
        every = tenants.tenants(after=None, limit=sys.maxsize)
        return [(t.tenant_id, tenants.limits_of(t.tenant_id).retention_s) for t in every]

    return policies


async def _tenants_and_users(
    settings: Settings, now_ms: Callable[[], int], metrics: Metrics
) -> tuple[TenantRegistry, UserTokens]:
    """The tenant registry, opened, and the verifier of its end users' tokens (on /metrics)."""
    tenants = await open_tenants(settings, now_ms)
    try:
        users = open_users(settings, tenants)
    except ConfigError:
        await tenants.close()
        raise
    metrics.registry.register(IdentityCollector(users.statistics))
    return tenants, users


def cluster_holds(settings: Settings, link: Link, cluster: ClusterPermits) -> dict[str, ClusterHolds]:
    """The caps counted over every node, by kind: tenants' turns and runs, end users' turns;
    renewed by the provider permits' heartbeat."""
    holds: dict[str, ClusterHolds] = {}
    lease_s, hold_s = settings.coordination.permit_lease_s, cluster.hold_s
    for kind in ("turns", "runs", "user-turns"):
        holds[kind] = ClusterHolds(link, node_id(), kind, lease_s=lease_s, hold_s=hold_s)
        cluster.renew_also(holds[kind].refresh)
    return holds


def open_users(settings: Settings, tenants: TenantRegistry) -> UserTokens:
    """The verifier of end users' tokens, of `[identity]`'s issuers and those the tenants are
    given over the admin API (no I/O: the keys are fetched at the first token; nor is pyjwt
    loaded before). Raises: ConfigError (a scope no user may hold)."""
    identity = settings.identity
    networks = OutboundPolicy.from_lists((), settings.security.outbound_allow_networks)
    policy = identity_policy(networks, allow_loopback=identity.allow_loopback)
    return UserTokens(identity, tenants, Fetcher(policy, timeout_s=identity.jwks_timeout_s))


def open_budgets(wall_clock: Clock, tenants: TenantRegistry, link: Link | None) -> Budgets:
    """The budgets: counted in this process, or in Redis for every node with a link. Without
    Redis, several nodes over one PostgreSQL would each count alone: one node only then."""
    return Budgets(wall_clock, tenants) if link is None else ClusterBudgets(wall_clock, tenants, link)


def _tracing(settings: Settings, metrics: Metrics) -> Tracing:
    """The server's tracing ([telemetry]; off: nothing of OpenTelemetry loaded), its exporter's
    counters on /metrics when on."""
    tracing = open_tracing(settings.telemetry, node=node_id())
    if tracing.on:
        metrics.registry.register(TracingCollector(tracing.statistics))
    return tracing


async def _close_bus(bus: Bus | None) -> None:
    if bus is not None:
        await bus.close()


async def _close_link(link: Link | None) -> None:
    if link is not None:
        await link.close()


async def _seeded_quotas(store: Store, wall_clock: Clock, link: Link | None) -> Quotas:
    """The quota counters as the store left them: they survive a restart."""
    quotas = Quotas(wall_clock) if link is None else ClusterQuotas(wall_clock, link)
    quotas.seed(await store.session_counts(), await store.token_usage_since(quotas.day_start_ms()))
    return quotas


async def open_tenants(settings: Settings, now_ms: Callable[[], int] = wall_ms) -> TenantRegistry:
    """The tenant registry: `<data_dir>/tenants.db` (in memory with the store off), or the
    PostgreSQL store's tables with `store.backend = "postgres"`, read into memory.

    Raises:
        ConfigError: the key pepper cannot be read or made, or (PostgreSQL) differs from the
            database's, or the database cannot be reached.
        StoreError: the registry's file cannot be opened.
    """
    data_dir = Path(settings.data_dir) if settings.store.enabled else None
    pepper = load_pepper(settings.security.key_pepper, data_dir)
    storage: RegistryStorage | Path | None = registry_path(data_dir)
    if settings.store.enabled and settings.store.backend == "postgres":
        from agentos.tenancy.pg_tables import PgTenantTables  # loads asyncpg: only for this backend

        storage = PgTenantTables(settings.store, pepper, import_from=registry_path(data_dir))
    registry = TenantRegistry(storage, pepper, defaults=settings.tenant_limits, now_ms=now_ms)
    await registry.open()
    return registry


def _make_store(settings: Settings, metrics: Metrics) -> Store:
    if not settings.store.enabled:
        return MemoryStore()
    if settings.store.backend == "postgres":
        from agentos.store.postgres import PostgresStore  # asyncpg is loaded only for this backend

        return PostgresStore(settings.store, jsonl_dir=settings.jsonl_dir, on_batch=metrics.observe_event_batch)
    return SQLiteStore(
        Path(settings.data_dir), settings.store, jsonl_dir=settings.jsonl_dir, on_batch=metrics.observe_event_batch
    )
