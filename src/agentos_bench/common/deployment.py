"""Measuring a deployment the bench did not start: `agentos bench load|runs --server-url URL[,URL...]`.

One node, or several (the generator sends each request to the next URL in turn, as a
round-robin balancer would; or give the one URL of your balancer). What /proc tells about
processes the bench started comes from each node's `GET /metrics` instead, scraped once a second
with the admin key: `process_cpu_seconds_total` (the CPU groups of the report, one per node),
`process_resident_memory_bytes`, and on PostgreSQL the pool figures
(`agentos_store_pool_in_use`, `_waiting`, `_acquire_timeouts_total`). With `--database-url`, the
database's side too, from `pg_stat_activity` on a connection of the bench's own: connections of
the database by state, and those waiting on a lock, against `max_connections`.

A node whose scrape fails in a second leaves a gap (None) in its figures; its CPU keeps its last
value. The admin key comes from an environment variable (`--admin-token-env`), never from the
command line (which the report prints).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from agentos_bench.common.cpu import CpuSamples
from agentos_bench.common.procfs import self_cpu_s

# a figure of the report <- the sample of GET /metrics it is read from
NODE_FIGURES = {
    "cpu_s": "process_cpu_seconds_total",
    "rss_bytes": "process_resident_memory_bytes",
    "in_flight_turns": "agentos_in_flight_turns",
    "pool_connections": "agentos_store_pool_connections",
    "pool_in_use": "agentos_store_pool_in_use",
    "pool_waiting": "agentos_store_pool_waiting",
    "pool_timeouts": "agentos_store_pool_acquire_timeouts_total",
}
_ACTIVITY = """
SELECT count(*) AS connections,
       count(*) FILTER (WHERE state = 'active') AS active,
       count(*) FILTER (WHERE state LIKE 'idle in transaction%') AS idle_in_transaction,
       count(*) FILTER (WHERE wait_event_type = 'Lock') AS waiting_on_locks,
       current_setting('max_connections')::int AS max_connections
FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
"""
_SCRAPE_TIMEOUT_S = 0.8  # inside the 1 s sampling interval


class Window(Protocol):
    """A span of the run the figures are summed over (`arrival.schedule.PhaseWindow`)."""

    @property
    def name(self) -> str: ...
    @property
    def start_s(self) -> float: ...
    @property
    def end_s(self) -> float: ...


class DeploymentError(RuntimeError):
    """The deployment cannot be measured: what is wrong, in one line."""


@dataclass(frozen=True, kw_only=True)
class Deployment:
    urls: tuple[str, ...]
    admin_token: str
    database_url: str | None = None
    mock_url: str | None = None  # checked by the preflight when given

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"node {i + 1}" for i in range(len(self.urls)))

    def topology(self) -> str:
        nodes = ", ".join(f"{name} {url}" for name, url in zip(self.node_names, self.urls, strict=True))
        balancing = "the generator sends each request to the next node in turn" if len(self.urls) > 1 else ""
        database = f"; the database observed at {_host_of(self.database_url)}" if self.database_url else ""
        return f"a deployment the bench did not start: {nodes}{'; ' + balancing if balancing else ''}{database}"


def parse_urls(text: str) -> tuple[str, ...]:
    """`URL[,URL...]` -> the node URLs, each http(s) with a host and no path.

    Raises: DeploymentError naming the URL at fault."""
    urls = tuple(u.strip().rstrip("/") for u in text.split(",") if u.strip())
    if not urls:
        raise DeploymentError("--server-url: give at least one URL")
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise DeploymentError(f"--server-url: {url!r} is not http(s)://host[:port]")
    if len(set(urls)) != len(urls):
        raise DeploymentError("--server-url: a URL is given twice")
    return urls


@dataclass(slots=True)
class DeploymentSamples:
    """Every second: each node's figures (None: the scrape failed) and the database's."""

    nodes: tuple[str, ...]
    times_s: list[float] = field(default_factory=list)
    figures: dict[str, list[dict[str, float] | None]] = field(default_factory=dict)
    database: list[dict[str, int] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.figures = {node: [] for node in self.nodes}

    def by_phase(self, windows: Sequence[Window]) -> dict[str, Any]:
        """Per phase: each node's peak RSS, pool in use and waiting, and waits past the acquire
        timeout in the phase; the database's peak connections, active and lock waits."""
        return {w.name: self._window(w.start_s, w.end_s) for w in windows}

    def _window(self, start_s: float, end_s: float) -> dict[str, Any]:
        inside = [i for i, t in enumerate(self.times_s) if start_s <= t <= end_s]
        nodes = {node: _node_window([self.figures[node][i] for i in inside]) for node in self.nodes}
        rows = [row for i in inside if (row := self.database[i]) is not None]
        database = {k: max(r[k] for r in rows) for k in rows[0]} if rows else None
        return {"nodes": nodes, "database_peak": database}

    def timeline(self) -> dict[str, Any]:
        """The series for the JSON report (and a later plot): seconds, per node, database."""
        return {"t_s": [round(t, 2) for t in self.times_s], "nodes": self.figures, "database": self.database}


def _node_window(rows: list[dict[str, float] | None]) -> dict[str, Any]:
    seen = [r for r in rows if r is not None]
    if not seen:
        return {"scrapes": 0, "scrape_failures": len(rows)}

    def peak(key: str) -> float | None:
        values = [r[key] for r in seen if key in r]
        return max(values) if values else None

    timeouts = [r["pool_timeouts"] for r in seen if "pool_timeouts" in r]
    rss = peak("rss_bytes")
    return {
        "scrapes": len(seen),
        "scrape_failures": len(rows) - len(seen),
        "peak_rss_mb": None if rss is None else round(rss / 2**20, 1),
        "peak_in_flight_turns": peak("in_flight_turns"),
        "peak_pool_in_use": peak("pool_in_use"),
        "peak_pool_waiting": peak("pool_waiting"),
        "pool_timeouts": timeouts[-1] - timeouts[0] if timeouts else None,
    }


def node_figures(text: str) -> dict[str, float]:
    """The figures of `NODE_FIGURES` in one /metrics answer (a sample's labels summed)."""
    wanted = {sample: figure for figure, sample in NODE_FIGURES.items()}
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (figure := wanted.get(sample.name)) is not None:
                found[figure] = found.get(figure, 0.0) + sample.value
    return found


class DeploymentReader:
    """Reads one second's figures: every node's /metrics at once, the database's activity."""

    def __init__(self, deployment: Deployment, http: aiohttp.ClientSession, samples: DeploymentSamples) -> None:
        self._deployment = deployment
        self._http = http
        self.samples = samples
        self._db: Any = None

    async def __call__(self, t_s: float) -> dict[str, float]:
        """Record one sample at `t_s`; the CPU seconds per group (nodes, this generator)."""
        d = self._deployment
        scraped = await asyncio.gather(*(self._scrape(url) for url in d.urls))
        self.samples.times_s.append(t_s)
        for node, figures in zip(d.node_names, scraped, strict=True):
            self.samples.figures[node].append(figures)
        self.samples.database.append(await self._activity())
        cpu = {node: f["cpu_s"] for node, f in zip(d.node_names, scraped, strict=True) if f and "cpu_s" in f}
        return {**cpu, "generator": self_cpu_s()}

    async def _scrape(self, url: str) -> dict[str, float] | None:
        headers = {"Authorization": f"Bearer {self._deployment.admin_token}"}
        timeout = aiohttp.ClientTimeout(total=_SCRAPE_TIMEOUT_S)
        try:
            async with self._http.get(f"{url}/metrics", headers=headers, timeout=timeout) as response:
                if response.status != 200:
                    return None
                return node_figures(await response.text())
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def _activity(self) -> dict[str, int] | None:
        if self._db is None:
            return None
        try:
            row = await self._db.fetchrow(_ACTIVITY, timeout=_SCRAPE_TIMEOUT_S)
        except Exception:  # a second without the database's figures is a gap, not an end
            return None
        return {key: int(value) for key, value in row.items()}

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[DeploymentReader]:
        """With `--database-url`, the bench's one connection to it for the run.

        Raises: DeploymentError when asyncpg is missing or the database refuses."""
        url = self._deployment.database_url
        if url is not None:
            self._db = await _connect(url)
        try:
            yield self
        finally:
            if self._db is not None:
                await self._db.close()


def cpu_samples_for(deployment: Deployment) -> CpuSamples:
    return CpuSamples(groups=(*deployment.node_names, "generator"))


async def _connect(url: str) -> Any:
    try:
        import asyncpg
    except ImportError:
        raise DeploymentError("--database-url needs asyncpg: pip install 'agentos[postgres]'") from None
    try:
        return await asyncpg.connect(url, timeout=5)
    except Exception as exc:  # any refusal is one line for the operator
        raise DeploymentError(f"--database-url: cannot connect to {_host_of(url)} ({type(exc).__name__})") from None


def _host_of(url: str | None) -> str:
    """The URL without its credentials, for the report."""
    parts = urlsplit(url or "")
    return f"{parts.hostname or '?'}:{parts.port or 5432}{parts.path}"
