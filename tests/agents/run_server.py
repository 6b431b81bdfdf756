"""The real application (its RunService behind the API), as a process the durability test can kill -9.

    python -m tests.agents.run_server --data-dir D --provider-url URL --port-file F \
        [--postgres-url URL --postgres-schema S --run-lease-s SECONDS [--redis-url URL --redis-prefix P]]

With --postgres-url the journal (and the store) is that PostgreSQL schema: several such
processes are the nodes of one cluster (tests/agents/test_takeover.py); with --redis-url too,
they share the provider limit, tenant caps and streams as `agentos serve` nodes do
(tests/coordination/test_mixed_node_loss.py).

Writes the bound port to F (atomically) once it accepts connections, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from pathlib import Path

import msgspec

from agentos.config import CoordinationConfig, ProviderConfig, Settings, StoreConfig
from agentos.services import open_services
from agentos.testing import serve_services

AGENTS = {"ops": {"tools": ["run_command", "ask_human"], "command": {"timeout_s": 10}}}


async def serve(data_dir: Path, provider_url: str, port_file: Path, cluster: argparse.Namespace) -> None:
    provider = ProviderConfig(url=provider_url, model="mock-1", max_retries=0)
    settings = Settings(data_dir=str(data_dir), provider=provider, agents=AGENTS)
    if cluster.postgres_url:
        store = StoreConfig(  # small pools, as tests/coordination/cluster.py's nodes: CI runs two clusters at once
            backend="postgres",
            postgres_url=cluster.postgres_url,
            postgres_schema=cluster.postgres_schema,
            postgres_pool_max=4,
        )
        coordination = CoordinationConfig(
            run_lease_s=cluster.run_lease_s, redis_url=cluster.redis_url, key_prefix=cluster.redis_prefix
        )
        settings = msgspec.structs.replace(settings, store=store, coordination=coordination)
    services = await open_services(settings)
    server = await serve_services(services)
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(server.url.rsplit(":", 1)[1])
    os.replace(tmp, port_file)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--provider-url", required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--postgres-url", default="")
    parser.add_argument("--postgres-schema", default="")
    parser.add_argument("--run-lease-s", type=float, default=15.0)
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--redis-prefix", default="agentos:")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(args.data_dir, args.provider_url, args.port_file, args))


if __name__ == "__main__":
    main()
