"""The bench's HTTP client: one session for a whole run, with no client-side limits."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp


@contextlib.asynccontextmanager
async def bench_http_session(headers: dict[str, str] | None = None) -> AsyncIterator[aiohttp.ClientSession]:
    """One client for the whole run: no connection cap, no client-side queueing; `headers` on
    every request (a key)."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=None, enable_cleanup_closed=False)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as http:
        yield http
