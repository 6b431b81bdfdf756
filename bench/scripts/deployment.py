"""A deployment to measure from outside: the mock provider and N `agentos serve` nodes of a
profile, held while one command runs against them, then stopped (and their fresh PostgreSQL
schema and Redis prefix removed).

The command after `--` gets `{urls}` (the nodes' URLs, comma-separated), `{mock}` (the mock's
URL) and `{database}` (the profile's `store.postgres_url`) replaced, and the nodes' admin key in
its environment as AGENTOS_API_TOKEN. So the seed's burst against 3 nodes on PostgreSQL is::

    .venv/bin/python bench/scripts/deployment.py --profile postgres-3node --nodes 3 --pool-max 10 -- \\
        .venv/bin/agentos bench load --server-url {urls} --mock-url {mock} --database-url {database} \\
        --out-dir bench/results --name pool-10

The bench itself (`agentos bench load --server-url`) knows nothing of how the nodes started: it
measures them as it would any deployment. Loopback only; the processes started here are stopped
by their PIDs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
from pathlib import Path

from agentos.mock.server import MockSettings
from agentos_bench.common.mock_process import start_mock_process
from agentos_bench.common.processes import ServerPlan, resolve_profile, stop_child
from agentos_bench.load.cluster import nodes_problem, profile_settings, start_nodes


async def hold(args: argparse.Namespace, command: list[str], work: Path) -> int:
    profile = resolve_profile(args.profile)
    settings = profile_settings(profile)
    if problem := nodes_problem(settings, args.nodes):
        raise SystemExit(f"deployment.py: {problem}")
    token = secrets.token_urlsafe(32)
    env = {"AGENTOS_API_TOKEN": token, "AGENTOS_STORE_POSTGRES_POOL_MAX": str(args.pool_max)}
    mock = await start_mock_process(
        MockSettings(ttft_ms=args.mock_ttft_ms, tps=100.0, tokens=16, scenario="tools"), work
    )
    notes: list[str] = []
    try:
        plan = ServerPlan(profile_path=profile, provider_url=mock.url, data_dir=work / "data", env=env)
        async with start_nodes(plan, args.nodes, settings, work, notes) as nodes:
            urls = ",".join(child.url for child in nodes.children)
            filled = [part.format(urls=urls, mock=mock.url, database=settings.store.postgres_url) for part in command]
            print(f"deployment.py: {args.nodes} nodes at {urls}; running: {' '.join(command)}", flush=True)
            child = await asyncio.create_subprocess_exec(*filled, env={**os.environ, "AGENTOS_API_TOKEN": token})
            code = await child.wait()
    finally:
        await stop_child(mock.process)
    for note in notes:
        print(f"deployment.py: {note}", file=sys.stderr)
    return code


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit("usage: deployment.py [--profile P] [--nodes N] [--pool-max M] -- COMMAND ...")
    split = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="postgres-3node", help="a bench profile, by name or path")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--pool-max", type=int, default=10, help="store.postgres_pool_max of every node")
    p.add_argument("--mock-ttft-ms", type=float, default=200.0)
    args = p.parse_args(argv[:split])
    with tempfile.TemporaryDirectory(prefix="agentos-deployment-") as work:
        return asyncio.run(hold(args, argv[split + 1 :], Path(work)))


if __name__ == "__main__":
    sys.exit(main())
