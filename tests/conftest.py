from __future__ import annotations

import asyncio
import os
import secrets
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.clock import Clock
from agentos.config import Settings, StoreConfig, load_settings
from agentos.mock.server import MockServer, MockSettings, start_mock
from agentos.testing import RunningServer, start_server

REDIS_URL = "redis://127.0.0.1:6379/0"  # started before each session and CI run

# Files whose tests start clusters of nodes on the one PostgreSQL: a three-node cluster holds up
# to 46 connections at its peak (measured), so two or three at once (one per xdist worker) reach
# the server's 100 and a node's store calls fail as unavailable. They run as one unit of work, one
# after another on one worker, beside the other files (~460 of the suite's ~2100 test-seconds).
_CLUSTER_FILES = (
    "tests/coordination/",
    "tests/schedules/test_nodes.py",
    "tests/schedules/test_crash.py",
    "tests/agents/test_takeover.py",
    "tests/e2e/test_pg_tenants.py",
    "tests/e2e/test_knowledge_process.py",
    "tests/bench/test_faults_cluster.py",
    "tests/bench/test_sweep_nodes.py",
    "tests/bench/test_arrival_deployment.py",
)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook (absent without it)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadfile, but the cluster files (`_CLUSTER_FILES`) are one unit of work.

    (xdist's own `--dist loadgroup` cannot do it here: it renames items by `_nodeid`, which
    pytest 9 no longer reads.)"""
    from xdist.scheduler import LoadFileScheduling

    class ClustersApart(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no types
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(_CLUSTER_FILES):
                return "postgres-clusters"
            scope: str = super()._split_scope(nodeid)
            return scope

    return ClustersApart(config, log)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's AGENTOS_* settings or real provider keys."""
    for name in list(os.environ):
        if name.startswith(("AGENTOS_", "MOCK_", "OPENAI_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])  # children that inherit it run this tree too


@pytest.fixture(autouse=True)
def tasks_shown_before_a_timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test about to hit pytest-timeout prints where each of its asyncio tasks waits.

    pytest-timeout shows the main thread, which in a hung async test is the event loop's idle
    `select`: it says nothing about which await never returned. Five seconds before the
    test's timeout, every unfinished task's stack goes to stderr (shown with the failure only)."""
    marker = request.node.get_closest_marker("timeout")
    timeout_s = float(marker.args[0]) if marker and marker.args else float(request.config.getini("timeout") or 0)
    if timeout_s <= 5:
        yield
        return
    timer = threading.Timer(timeout_s - 5, _print_unfinished_tasks, args=(timeout_s,))
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()


def _print_unfinished_tasks(timeout_s: float) -> None:
    print(f"--- unfinished asyncio tasks, 5 s before the {timeout_s:g} s timeout ---", file=sys.stderr)
    for _ in range(3):  # the loop may add a task while this thread copies the set
        try:
            tasks = list(asyncio.tasks._all_tasks)  # type: ignore[attr-defined]  # every loop's, not one
            break
        except RuntimeError:
            continue
    else:
        return
    for task in tasks:
        if not task.done():
            task.print_stack(file=sys.stderr)


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A Redis key prefix of this test's own (`agentos:test:<random>:`), its keys deleted after."""
    from redis.asyncio import Redis

    name = f"agentos:test:{secrets.token_hex(6)}:"
    yield name
    redis = Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in redis.scan_iter(match=f"{name}*", count=1000)]
        if keys:
            await redis.delete(*keys)
    finally:
        await redis.aclose()


@pytest.fixture
async def mock_factory() -> AsyncIterator[Callable[..., Awaitable[MockServer]]]:
    started: list[MockServer] = []

    async def make(**kwargs: Any) -> MockServer:
        kwargs.setdefault("ttft_ms", 5)
        kwargs.setdefault("tps", 2000)
        kwargs.setdefault("tokens", 4)
        server = await start_mock(MockSettings(**kwargs))
        started.append(server)
        return server

    yield make
    for server in started:
        await server.close()


@pytest.fixture
async def mock(mock_factory: Callable[..., Awaitable[MockServer]]) -> MockServer:
    return await mock_factory()


SRC = Path(__file__).resolve().parents[1] / "src"  # the tree under test, wherever it is checked out


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python process that must run THIS tree's code: its `src` (and
    the repository, for `tests.*` modules) come before any installed `agentos`."""
    return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([str(SRC), str(SRC.parent)]), **extra}


def make_settings(data_dir: Path, provider_url: str, **overrides: Any) -> Settings:
    """Settings from dotted keys: make_settings(d, url, **{"kernel.concurrency_limit": 2})."""
    base = {"data_dir": str(data_dir), "provider.url": provider_url, "provider.retry_budget_s": 2.0}
    return load_settings(None, environ={}, overrides=base | overrides)


# Set on a test once its `server_factory` is up: `pg` then comes too late (see `pg`).
SERVERS_UP = pytest.StashKey[bool]()


@pytest.fixture
async def server_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[RunningServer]]]:
    request.node.stash[SERVERS_UP] = True
    started: list[RunningServer] = []

    async def make(
        provider_url: str, clock: Clock | None = None, wall_clock: Clock | None = None, **overrides: Any
    ) -> RunningServer:
        settings = make_settings(tmp_path / "data", provider_url, **overrides)
        server = await start_server(settings, clock=clock, wall_clock=wall_clock)
        started.append(server)
        return server

    yield make
    for server in started:
        await server.close()


@pytest.fixture
async def server(server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer) -> RunningServer:
    return await server_factory(mock.url)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


@pytest.fixture
async def pg(request: pytest.FixtureRequest) -> AsyncIterator[StoreConfig]:
    """A fresh PostgreSQL schema, dropped after the test (`tests.postgres.fresh_schema`; skips
    without PostgreSQL or asyncpg unless TEST_POSTGRES_REQUIRED=1).

    Fixtures are torn down in reverse: a `server_factory` set up before this one would close its
    servers after the schema is gone (their run journal then fails to hand its runs over,
    `relation "run_nodes" does not exist`, and the drop can deadlock with their last statements).
    """
    if request.node.stash.get(SERVERS_UP, False):
        pytest.fail("request the pg fixture before server_factory (and before fixtures that use it)")
    from tests.postgres import fresh_schema

    async for config in fresh_schema():
        yield config
