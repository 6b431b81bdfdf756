"""A store that goes away while the server runs: 503 `store_unavailable` with Retry-After, within
a bound, `/readyz` not ready naming the store; back to normal with no restart when it returns,
and nothing acknowledged lost.

PostgreSQL: the real server on 127.0.0.1:5432 (a fresh schema per test, tests/postgres.py),
reached through a TCP proxy the test cuts and restores (`agentos.testing.tcp_proxy`); the real
PostgreSQL is never stopped. SQLite: the real store with its writers closed under the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from agentos.config import StoreConfig
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from agentos.testing.tcp_proxy import TcpProxy
from tests.api.helpers import new_session, turn_events

BOUND_S = 15.0  # the store's own bound is 10 s (store.postgres_request_timeout_s); a refusal is at once


async def status_of(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, Any, str | None]:
    async with http.request(method, url, **kw) as r:
        return r.status, await r.json(), r.headers.get("Retry-After")


async def readyz_until(http: aiohttp.ClientSession, url: str, status: int) -> dict[str, Any]:
    """/readyz until it answers `status`: its answer is cached for about 1 s, so the change shows
    within a bound, not at once."""
    async with asyncio.timeout(5):
        while True:
            got, body, _ = await status_of(http, "GET", f"{url}/readyz")
            if got == status:
                return dict(body)
            await asyncio.sleep(0.05)


async def assert_unavailable(
    http: aiohttp.ClientSession, method: str, url: str, *, within_s: float = BOUND_S, **kw: Any
) -> None:
    async with asyncio.timeout(within_s):  # never a hang
        status, body, retry_after = await status_of(http, method, url, **kw)
    assert status == 503, body
    assert body["error"]["code"] == "store_unavailable"
    assert retry_after == "1"


async def test_postgres_going_away_answers_503_and_comes_back_without_a_restart(
    pg: StoreConfig, server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer
) -> None:  # `pg` first: the server stops before its schema is dropped
    target = urlsplit(pg.postgres_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
        server = await server_factory(
            mock.url,
            **{"store.backend": "postgres", "store.postgres_url": proxied, "store.postgres_schema": pg.postgres_schema},
        )
        url = server.url
        async with aiohttp.ClientSession() as http:
            sid = await new_session(http, url)
            for text in ("one", "two"):
                assert (await turn_events(http, url, sid, text))[-1].name == "turn.completed"
            acknowledged = (await status_of(http, "GET", f"{url}/v1/sessions/{sid}/messages"))[1]["data"]
            assert len(acknowledged) == 4
            assert (await readyz_until(http, url, 200))["store"] == "ok"

            await proxy.cut()
            await assert_unavailable(http, "GET", f"{url}/v1/sessions/{sid}/messages")
            await assert_unavailable(http, "POST", f"{url}/v1/sessions", json={})
            await assert_unavailable(http, "GET", f"{url}/v1/sessions/{sid}/events")
            async with asyncio.timeout(BOUND_S):  # a turn starts, then ends failed with the reason
                failed = await turn_events(http, url, sid, "lost?")
            assert failed[-1].name == "turn.failed" and failed[-1].data["reason"] == "store_unavailable"
            assert (await readyz_until(http, url, 503)) == {"status": "not_ready", "store": "unavailable"}
            assert (await status_of(http, "GET", f"{url}/healthz"))[0] == 200  # alive, just not ready

            await proxy.restore()
            assert (await readyz_until(http, url, 200))["store"] == "ok"
            status, body, _ = await status_of(http, "GET", f"{url}/v1/sessions/{sid}/messages")
            assert status == 200 and body["data"] == acknowledged  # every acknowledged message is there
            assert (await turn_events(http, url, sid, "three"))[-1].name == "turn.completed"
            second = await new_session(http, url)
            assert (await status_of(http, "GET", f"{url}/v1/sessions/{second}"))[0] == 200
            body = (await status_of(http, "GET", f"{url}/v1/sessions/{sid}/messages"))[1]
            assert [m["content"] for m in body["data"] if m["role"] == "user"] == ["one", "two", "three"]


async def test_a_sqlite_store_whose_writers_are_closed_answers_503_and_is_not_ready(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    sid = await new_session(http, server.url)
    assert (await readyz_until(http, server.url, 200))["store"] == "ok"
    await server.runtime.store.close()  # the real writers stop: what a dead writer thread leaves
    await assert_unavailable(http, "GET", f"{server.url}/v1/sessions/{sid}/messages")
    await assert_unavailable(http, "POST", f"{server.url}/v1/sessions", json={})
    async with asyncio.timeout(BOUND_S):
        events = await turn_events(http, server.url, sid, "anyone?")
    assert events[-1].name == "turn.failed" and events[-1].data["reason"] == "store_unavailable"
    assert (await readyz_until(http, server.url, 503)) == {"status": "not_ready", "store": "unavailable"}


async def test_a_postgres_that_stops_answering_is_a_503_within_the_bound_not_a_hang(
    pg: StoreConfig, server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer
) -> None:  # `pg` first: the server stops before its schema is dropped
    """Connections open but silent (no reset, no refusal): only our own bounds end the waits."""
    target = urlsplit(pg.postgres_url)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
        server = await server_factory(
            mock.url,
            **{"store.backend": "postgres", "store.postgres_url": proxied, "store.postgres_schema": pg.postgres_schema},
            **{"store.postgres_acquire_timeout_s": 0.5, "store.postgres_request_timeout_s": 1.0},
        )
        url = server.url
        async with aiohttp.ClientSession() as http:
            sid = await new_session(http, url)
            assert (await turn_events(http, url, sid, "before"))[-1].name == "turn.completed"
            await proxy.stall()  # the bounds: 0.5 s for a connection, 1 s for a call; 30 s without them
            await assert_unavailable(http, "GET", f"{url}/v1/sessions/{sid}/messages", within_s=5)
            await assert_unavailable(http, "POST", f"{url}/v1/sessions", within_s=5, json={})
            assert (await readyz_until(http, url, 503))["store"] == "unavailable"
            await proxy.restore()
            assert (await readyz_until(http, url, 200))["store"] == "ok"
            body = (await status_of(http, "GET", f"{url}/v1/sessions/{sid}/messages"))[1]
            assert [m["content"] for m in body["data"] if m["role"] == "user"] == ["before"]
