"""The one outbound request of identity: an identity provider's discovery document or key set,
under the SSRF rules of every other outbound URL (`agentos.outbound`).

- The URL is checked before each request (`check_url`: scheme, no userinfo, an IP literal's
  address), and the connector resolves names through `resolve_checked`, so it connects only to
  addresses it checked (a name that re-resolves to 127.0.0.1 between check and connect gains
  nothing). aiohttp does not call the resolver for an IP literal; `check_url` covers those.
- No redirects, no proxy from the environment, a bounded body and a bounded time.
- The URLs are the operator's (config), not a caller's, so `[security].outbound_allow` (the hosts
  API agents may name) does not apply; its networks do, and loopback only where
  `identity.allow_loopback` is on.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
from aiohttp.abc import AbstractResolver, ResolveResult

from agentos.outbound import OutboundPolicy, check_url, resolve_checked

MAX_BODY_BYTES = 1 << 20  # a key set is a few KiB; a provider that sends more is refused
_LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class FetchFailed(Exception):
    """The provider could not be reached, or answered something unusable (the message says which)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    body: bytes
    cache_control: str  # the response's Cache-Control header ("" when absent)


def identity_policy(networks: OutboundPolicy, *, allow_loopback: bool) -> OutboundPolicy:
    """The address rules of `[security]`, any host name, and loopback where allowed."""
    extra = _LOOPBACK_NETWORKS if allow_loopback else ()
    return OutboundPolicy((), (*networks.allow_networks, *extra))


class _CheckedResolver(AbstractResolver):
    """Resolves a name and refuses it unless every address it gives is allowed."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await resolve_checked(host, port, self._policy)  # Forbidden: the caller maps it
        return [
            ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None


class Fetcher:
    """Usage::

    fetcher = Fetcher(policy, timeout_s=5.0)
    fetched = await fetcher.get("https://login.example.com/.well-known/jwks.json")
    await fetcher.close()
    """

    def __init__(self, policy: OutboundPolicy, *, timeout_s: float) -> None:
        self._policy = policy
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self.fetches = 0  # requests sent (statistics; tests count them)

    @property
    def policy(self) -> OutboundPolicy:
        return self._policy

    async def get(self, url: str) -> Fetched:
        """Raises: FetchFailed (refused by the policy, unreachable, not 200, too large)."""
        try:
            check_url(url, self._policy)
            self.fetches += 1
            async with self._client().get(url, allow_redirects=False) as response:
                if response.status != 200:
                    raise FetchFailed(f"{url} answered {response.status}")
                body = await _bounded(response)
                return Fetched(body, response.headers.get("Cache-Control", ""))
        except FetchFailed:
            raise
        except Exception as exc:  # refused (Forbidden), DNS, connection, timeout: one answer to the caller
            raise FetchFailed(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on the loop that uses it, at the first fetch
            connector = aiohttp.TCPConnector(resolver=_CheckedResolver(self._policy), limit=16)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, trust_env=False)
        return self._session


async def _bounded(response: aiohttp.ClientResponse) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(65536):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise FetchFailed(f"{response.url} sent more than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def json_object(fetched: Fetched, what: str) -> dict[str, Any]:
    """The body as a JSON object. Raises: FetchFailed."""
    try:
        value = msgspec.json.decode(fetched.body)
    except msgspec.DecodeError:
        raise FetchFailed(f"the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise FetchFailed(f"the {what} is not a JSON object")
    return value
