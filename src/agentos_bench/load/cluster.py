"""The server side of a sweep profile: one `agentos serve` process, or N nodes sharing one store.

Usage::

    settings = profile_settings(path)
    if problem := nodes_problem(settings, 3): ...   # refuse before measuring anything
    async with start_nodes(ServerPlan(...), 3, settings, work_dir, notes) as nodes:
        probes = Probes(server_pids=nodes.pids, ...)   # CPU and memory summed over the nodes

Theory of operation. Each profile run gets its own corner of the shared services, made here and
removed afterwards, so runs (and tests running at the same time) never see each other's rows or
keys: with `store.backend = "postgres"` a fresh schema (`<store.postgres_schema or
agentos_bench>_<random>`, created by the first node's migrations, dropped with CASCADE after the
nodes stopped), with `coordination.redis_url` a fresh key prefix (`<coordination.key_prefix>bench:
<random>:`, its keys deleted afterwards). Every node gets them through its environment
(`AGENTOS_STORE_POSTGRES_SCHEMA`, `AGENTOS_COORDINATION_KEY_PREFIX`), and, with Redis,
`AGENTOS_COORDINATION_EXPECTED_NODES` = N (each node's share of a limit while Redis is down).

Where PostgreSQL and Redis run on this machine (loopback URLs), their process trees are found by
name (`postgres`, `redis-server`; `local_service_pids`) so the sweep can report their CPU per turn
beside the nodes': with the PostgreSQL store part of a turn's cost is spent there, not in a node.
On a shared machine that CPU includes everyone else's use of those services.

More than one node needs state that every node sees: the PostgreSQL store and Redis. A profile
without them is refused before anything starts (`nodes_problem`). The nodes start one after the
other (the first applies the migrations); any that fails to start stops those already running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from agentos.config import Settings, load_settings
from agentos_bench.common.processes import Child, ServerPlan, start_server_process, stop_child
from agentos_bench.common.procfs import roots_named

DEFAULT_SCHEMA = "agentos_bench"


def profile_settings(profile_path: Path) -> Settings:
    """The settings a node started with this profile will have: the file, then this environment.

    Raises:
        ConfigError: the profile is not valid (the message names the key).
    """
    return load_settings(profile_path, environ=os.environ)


def nodes_problem(settings: Settings, nodes: int) -> str | None:
    """Why this profile cannot run on `nodes` nodes (None: it can)."""
    if nodes < 1:
        return "--nodes must be 1 or more"
    if nodes == 1:
        return None
    store, redis_url = settings.store, settings.coordination.redis_url
    if not store.enabled or store.backend != "postgres":
        found = "store.enabled = false" if not store.enabled else f'store.backend = "{store.backend}"'
        return f'needs store.backend = "postgres" (every node shares the store), the profile has {found}'
    if not redis_url:
        return "needs coordination.redis_url (the nodes coordinate through Redis), the profile has none"
    return None


@dataclass(frozen=True, kw_only=True)
class Namespace:
    """This run's own schema and key prefix ("" where the profile uses no such service)."""

    postgres_url: str = ""
    schema: str = ""
    redis_url: str = ""
    key_prefix: str = ""
    pepper: str = ""  # one key pepper for every node of the run: they share the tenants table

    def env(self, nodes: int) -> dict[str, str]:
        env = {"AGENTOS_STORE_POSTGRES_SCHEMA": self.schema} if self.schema else {}
        if self.pepper:
            env |= {"AGENTOS_SECURITY_KEY_PEPPER": self.pepper}
        if self.key_prefix:
            env |= {"AGENTOS_COORDINATION_KEY_PREFIX": self.key_prefix}
            env |= {"AGENTOS_COORDINATION_EXPECTED_NODES": str(nodes)}
        return env


def new_namespace(settings: Settings) -> Namespace:
    """A fresh schema (postgres backend) and key prefix (Redis) for one profile run."""
    tag = secrets.token_hex(5)
    store, coordination = settings.store, settings.coordination
    schema = ""
    if store.enabled and store.backend == "postgres":
        schema = f"{(store.postgres_schema or DEFAULT_SCHEMA)[:40]}_{tag}"  # the config allows [A-Za-z0-9_]
    prefix = f"{coordination.key_prefix}bench:{tag}:" if coordination.redis_url else ""
    return Namespace(
        postgres_url=store.postgres_url if schema else "",
        schema=schema,
        redis_url=coordination.redis_url,
        key_prefix=prefix,
        pepper=secrets.token_urlsafe(32) if schema else "",
    )


async def drop_namespace(namespace: Namespace) -> list[str]:
    """Drop the schema and delete the prefix's keys; a note for each that could not be removed."""
    notes = []
    if namespace.schema:
        try:
            await _drop_schema(namespace.postgres_url, namespace.schema)
        except Exception as exc:  # a leftover schema is a note, not a lost report
            notes.append(f"schema {namespace.schema!r} not dropped ({type(exc).__name__}: {exc}); drop it by hand")
    if namespace.key_prefix:
        try:
            await _delete_keys(namespace.redis_url, namespace.key_prefix)
        except Exception as exc:  # as above
            notes.append(f"Redis keys {namespace.key_prefix}* not deleted ({type(exc).__name__}: {exc})")
    return notes


async def _drop_schema(url: str, schema: str) -> None:
    import asyncpg  # the postgres extra, which the nodes needed too

    conn = await asyncpg.connect(url, timeout=10)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', timeout=30)
    finally:
        await conn.close()


async def _delete_keys(url: str, prefix: str) -> None:
    from redis.asyncio import Redis  # the redis extra, which the nodes needed too

    redis = Redis.from_url(url, socket_timeout=5)
    try:
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"
        batch: list[bytes] = []
        async for key in redis.scan_iter(match=pattern, count=1000):  # ends when the scan has covered the keys
            batch.append(key)
            if len(batch) >= 1000:
                await redis.delete(*batch)
                batch = []
        if batch:
            await redis.delete(*batch)
    finally:
        await redis.aclose()


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def local_service_pids(settings: Settings) -> tuple[int, ...]:
    """The process trees of the PostgreSQL and Redis this profile uses, where they run on this
    machine (a loopback URL): their CPU is part of what a turn costs, apart from the nodes'."""
    return tuple(pid for roots in local_services(settings).values() for pid in roots)


def local_services(settings: Settings) -> dict[str, tuple[int, ...]]:
    """`local_service_pids` by service: {"postgres": roots, "redis": roots}, those used only."""
    found = {}
    store, redis_url = settings.store, settings.coordination.redis_url
    if store.enabled and store.backend == "postgres" and urlsplit(store.postgres_url).hostname in _LOOPBACK:
        found["postgres"] = tuple(roots_named({"postgres"}))
    if redis_url.startswith("unix://") or (redis_url and urlsplit(redis_url).hostname in _LOOPBACK):
        found["redis"] = tuple(roots_named({"redis-server"}))
    return found


@dataclass(kw_only=True)
class Nodes:
    children: list[Child]
    settings: Settings
    namespace: Namespace

    @property
    def urls(self) -> list[str]:
        return [c.url for c in self.children]

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(c.pid for c in self.children)


@contextlib.asynccontextmanager
async def start_nodes(
    plan: ServerPlan, nodes: int, settings: Settings, log_dir: Path, notes: list[str], *, keep: bool = False
) -> AsyncIterator[Nodes]:
    """Start `nodes` servers of `plan` in a fresh namespace; stop them and drop it on exit
    (`keep`: leave it, for a look at the rows; its names go to `notes`).

    An unclean exit of a node, or a namespace left behind, is added to `notes`.

    Raises:
        BenchSetupError: a node did not start or become ready (those started are stopped).
    """
    namespace = new_namespace(settings)
    env = {**plan.env, **namespace.env(nodes)}
    started: list[Child] = []
    try:
        for i in range(nodes):
            node_plan = replace(plan, env=env) if nodes == 1 else _node_plan(plan, env, i)
            started.append(await start_server_process(node_plan, log_dir))
        yield Nodes(children=started, settings=settings, namespace=namespace)
    finally:
        codes = await asyncio.gather(*(stop_child(c.process) for c in started))
        for child, code in zip(started, codes, strict=True):
            if code not in (0, -15, None):
                notes.append(f"{child.log_path.stem} exited with {code}; log kept at {child.log_path}")
        if not keep:
            notes.extend(await drop_namespace(namespace))
        elif namespace.schema or namespace.key_prefix:
            notes.append(
                f"kept (--keep-data): schema {namespace.schema or '-'}, Redis prefix {namespace.key_prefix or '-'}"
            )


def _node_plan(plan: ServerPlan, env: dict[str, str], index: int) -> ServerPlan:
    """Node `index`: its own data directory (what stays per node) and log."""
    return replace(plan, env=env, data_dir=plan.data_dir / f"node{index}", log_name=f"{plan.log_name}-node{index}")
