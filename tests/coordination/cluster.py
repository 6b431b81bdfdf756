"""Real `agentos serve` processes sharing one PostgreSQL schema (and, if given, one Redis).

Each node has its own data dir (tenants, runs) and its own port; what they share is the
database and the Redis key prefix, exactly as nodes behind a load balancer would.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agentos.config import StoreConfig
from tests.conftest import child_env


class Endpoint(Protocol):
    """A node as its clients see it (`Node`, or a `tests.agents.run_server` process)."""

    url: str


@dataclass
class Node:
    proc: asyncio.subprocess.Process
    url: str

    async def kill(self) -> None:
        """kill -9 of this node's process (by its pid), then reap it."""
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()


def node_env(pg: StoreConfig, redis_url: str = "", prefix: str = "") -> dict[str, str]:
    env = {
        "AGENTOS_STORE_BACKEND": "postgres",
        "AGENTOS_STORE_POSTGRES_URL": pg.postgres_url,
        "AGENTOS_STORE_POSTGRES_SCHEMA": pg.postgres_schema,
        "AGENTOS_SECURITY_KEY_PEPPER": "one-pepper-for-every-node-of-this-test",  # they share the keys table
        # Small pools: CI runs two of these clusters at once against one PostgreSQL, whose 100
        # connections three nodes with the default pools (about 20 each) nearly use up alone.
        "AGENTOS_STORE_POSTGRES_POOL_MAX": "4",
    }
    if redis_url:
        env |= {"AGENTOS_COORDINATION_REDIS_URL": redis_url, "AGENTOS_COORDINATION_KEY_PREFIX": prefix}
    return env


@asynccontextmanager
async def serve_nodes(
    count: int, data: Path, mock_url: str, env: dict[str, str], args: Sequence[str] = ()
) -> AsyncIterator[list[Node]]:
    """`count` nodes, started one after the other (the first migrates the schema); `args` go to
    each `agentos serve` (`--config`, for what only a config file can say)."""
    nodes: list[Node] = []
    try:
        for i in range(count):
            nodes.append(await _serve(data / f"node{i}", mock_url, env, args))
        yield nodes
    finally:
        for node in nodes:
            if node.proc.returncode is None:
                node.proc.kill()
                await node.proc.wait()


async def _serve(data_dir: Path, mock_url: str, env: dict[str, str], args: Sequence[str] = ()) -> Node:
    log_path = data_dir.with_name(data_dir.name + ".stderr")  # a file: a pipe nobody reads fills up
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentos",
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(data_dir),
            "--provider-url",
            mock_url,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=child_env(**env),
        )
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    if not line.startswith("agentos listening on "):
        proc.kill()
        await proc.wait()
        raise AssertionError(line + log_path.read_text()[-2000:])
    return Node(proc, line.split()[-1])


async def pg_rows(pg: StoreConfig, sql: str, *args: Any) -> list[Any]:
    """Rows of a query on the nodes' schema, read straight from PostgreSQL."""
    import asyncpg

    conn = await asyncpg.connect(pg.postgres_url, server_settings={"search_path": pg.postgres_schema})
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()
