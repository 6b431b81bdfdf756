"""The HTTP client for MCP servers that callers named: every request checked, every connection pinned.

The `mcp` package's streamable HTTP transport takes an `httpx2.AsyncClient`; this one checks
each request's URL (`agentos.outbound.check_url`: scheme, userinfo, host allow-list), and its
connection pool resolves names itself (`resolve_checked`) and connects only to the addresses
it checked. httpcore's own connect would resolve the name a second time, which a DNS server
that answers differently the second time (rebinding) could point at 127.0.0.1. TLS still
verifies the certificate against the name, as httpcore passes the name as the server name.

Redirects: the `mcp` transport follows only same-origin ones, and each hop is a request that
passes through `handle_async_request` again; this client itself follows none.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from agentos.outbound import OutboundPolicy, Resolver, check_url, resolve_checked

_MCP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)  # as mcp's own client: SSE streams stay open


class PinnedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses `resolve_checked` allowed."""

    def __init__(self, policy: OutboundPolicy, resolver: Resolver | None = None) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            addresses = await resolve_checked(host, port, self._policy, self._resolver)
        except OSError as exc:  # resolution failed: httpx's usual error for it
            raise httpcore2.ConnectError(str(exc)) from exc
        error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                error = exc
        assert error is not None  # resolve_checked returns at least one address
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("unix sockets are not reachable through an outbound URL")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PinnedTransport(httpx2.AsyncHTTPTransport):
    """`httpx2.AsyncHTTPTransport` with the URL check per request and a pinned pool."""

    def __init__(
        self, policy: OutboundPolicy, resolver: Resolver | None = None, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        # One context for both pools below: making one parses the CA bundle (~60 ms of CPU).
        ssl_context = ssl_context or httpx2.create_ssl_context(trust_env=False)
        # No proxy from the environment: it would connect for us.
        super().__init__(verify=ssl_context, trust_env=False)
        self._policy = policy
        # httpx2's transport has no `network_backend` argument: build its pool again with one.
        # tests/agents/test_outbound_http.py proves the pin, so a change in httpx2 shows there.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context,
            network_backend=PinnedBackend(policy, resolver),
            max_connections=100,  # httpx2's DEFAULT_LIMITS
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        check_url(str(request.url), self._policy)
        return await super().handle_async_request(request)


_SYSTEM_CAS: ssl.SSLContext | None = None


async def system_cas() -> ssl.SSLContext:
    """The system's CAs as httpx2 trusts them by default, as one context made once per process
    in a thread and shared by every pinned client: making it parses the CA bundle, ~60-150 ms of
    CPU that on the loop would stall every turn at each new MCP connection."""
    global _SYSTEM_CAS
    if _SYSTEM_CAS is None:
        _SYSTEM_CAS = await asyncio.to_thread(httpx2.create_ssl_context, trust_env=False)
    return _SYSTEM_CAS


def pinned_client(
    policy: OutboundPolicy, resolver: Resolver | None = None, ssl_context: ssl.SSLContext | None = None
) -> httpx2.AsyncClient:
    """A client for one caller-named MCP server; enter it (`async with`) to close its pool.

    Args:
        ssl_context: the CAs to trust (default: the system's, as httpx2's).
    """
    transport = PinnedTransport(policy, resolver, ssl_context)
    return httpx2.AsyncClient(transport=transport, timeout=_MCP_TIMEOUT, follow_redirects=False, trust_env=False)
