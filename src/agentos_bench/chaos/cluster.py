"""The campaign's cluster: N `agentos serve` nodes on the campaign's own PostgreSQL and Redis, the
last one reaching both through TCP proxies the campaign can cut, each with a wall clock it can step.

    async with chaos_cluster(setup, work_dir) as cluster:
        await cluster.kill(0); await cluster.restart(0)       # kill -9, then the same port again
        await cluster.cut_off(); await cluster.reconnect()    # the last node loses PostgreSQL and Redis
        cluster.step_clock(1, 3600.0)                         # node 1's wall clock an hour ahead

Every node has its own data dir and log (a restart's log is a new file) and the same profile; the
database is fresh (the campaign's own), so no schema or key prefix needs cleaning afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from agentos.testing.tcp_proxy import TcpProxy
from agentos_bench.chaos.services import Postgres, RedisServer
from agentos_bench.common.processes import Child, ServerPlan, start_server_process, stop_child

_CLOCKSTEP = Path(__file__).with_name("clockstep")


@dataclass(frozen=True, kw_only=True)
class ClusterSetup:
    nodes: int
    profile: Path
    provider_url: str
    postgres: Postgres
    redis: RedisServer


@dataclass(kw_only=True)
class Cluster:
    setup: ClusterSetup
    log_dir: Path
    pg_proxy: TcpProxy
    redis_proxy: TcpProxy
    children: list[Child] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # per node: how many times it was started

    @property
    def urls(self) -> list[str]:
        return [c.url for c in self.children]

    def log_paths(self, node: int) -> list[Path]:
        """Every log of the node, its restarts' included."""
        return sorted(self.log_dir.glob(f"node{node}*.log"))

    async def start(self, node: int, port: int | None = None) -> Child:
        self.starts[node] += 1
        name = f"node{node}" if self.starts[node] == 1 else f"node{node}-start{self.starts[node]}"
        plan = ServerPlan(
            profile_path=self.setup.profile,
            provider_url=self.setup.provider_url,
            data_dir=self.log_dir / f"data-node{node}",
            env=self._env(node),
            log_name=name,
        )
        return await start_server_process(plan, self.log_dir, port=port)

    async def kill(self, node: int) -> None:
        """kill -9 of the node's process, by its pid."""
        process = self.children[node].process
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        await process.wait()

    async def restart(self, node: int) -> None:
        """The node again, on its port (its clients carry on), as a new process (a new node id)."""
        port = int(self.children[node].url.rsplit(":", 1)[1])
        self.children[node] = await self.start(node, port)

    async def cut_off(self) -> None:
        """The last node loses PostgreSQL and Redis: its connections drop, new ones are refused."""
        await self.pg_proxy.cut()
        await self.redis_proxy.cut()

    async def reconnect(self) -> None:
        await self.pg_proxy.restore()
        await self.redis_proxy.restore()

    def step_clock(self, node: int, offset_s: float) -> None:
        """Set the node's wall clock to the real one plus `offset_s` (seen within 50 ms)."""
        self._clock_file(node).write_text(f"{offset_s}\n")

    def _clock_file(self, node: int) -> Path:
        return self.log_dir / f"clock-node{node}"

    def _env(self, node: int) -> dict[str, str]:
        last = node == self.setup.nodes - 1
        pg, redis = self.setup.postgres, self.setup.redis
        pg_url = pg.url.replace(f":{pg.port}/", f":{self.pg_proxy.port}/") if last else pg.url
        redis_url = redis.url.replace(f":{redis.port}/", f":{self.redis_proxy.port}/") if last else redis.url
        self._clock_file(node).touch()
        path = os.pathsep.join(p for p in (str(_CLOCKSTEP), os.environ.get("PYTHONPATH", "")) if p)
        return {
            "AGENTOS_STORE_POSTGRES_URL": pg_url,
            "AGENTOS_COORDINATION_REDIS_URL": redis_url,
            "AGENTOS_COORDINATION_EXPECTED_NODES": str(self.setup.nodes),
            "AGENTOS_SECURITY_KEY_PEPPER": "one-pepper-for-every-node-of-the-chaos-campaign",
            "AGENTOS_BENCH_CLOCK_STEP_FILE": str(self._clock_file(node)),
            "PYTHONPATH": path,
        }


@contextlib.asynccontextmanager
async def chaos_cluster(setup: ClusterSetup, log_dir: Path, notes: list[str]) -> AsyncIterator[Cluster]:
    """The nodes started one after the other (the first applies the migrations); all stopped on exit."""
    pg_proxy, redis_proxy = TcpProxy("127.0.0.1", setup.postgres.port), TcpProxy("127.0.0.1", setup.redis.port)
    await pg_proxy.start()
    await redis_proxy.start()
    cluster = Cluster(
        setup=setup, log_dir=log_dir, pg_proxy=pg_proxy, redis_proxy=redis_proxy, starts=[0] * setup.nodes
    )
    try:
        for node in range(setup.nodes):
            cluster.children.append(await cluster.start(node))
        yield cluster
    finally:
        for child in cluster.children:
            code = await stop_child(child.process)
            if code not in (0, -15, -9, None):
                notes.append(f"{child.log_path.name} exited with {code}")
        await pg_proxy.cut()
        await redis_proxy.cut()
