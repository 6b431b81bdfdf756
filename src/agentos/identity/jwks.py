"""One issuer's signing keys: fetched, cached for their `Cache-Control`, refreshed sparingly.

Theory of operation:
- The key set is fetched at the first token (from `jwks_url`, or the `jwks_uri` of the issuer's
  discovery document, whose `issuer` must be the configured one) and kept `max-age` seconds,
  bounded by `jwks_min_ttl_s` and `jwks_max_ttl_s`.
- A token whose `kid` is not in the set, or a set past its age, refetches it, but at most once
  per `jwks_refetch_interval_s` whatever the number of requests: a storm of made-up `kid`s
  costs the provider one fetch per interval, and the server a dict lookup per token.
- Concurrent requests that need a fetch share one (`_inflight`).
- A failed refresh keeps the keys it had, until `jwks_stale_s` past their age: a provider that
  is down does not sign everybody out.
- `generation` grows when the set changes; tokens verified with an older set are checked again
  (`agentos.identity.verifier`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentos.config.identity import IdentityConfig, IssuerConfig
from agentos.identity.fetch import Fetched, Fetcher, FetchFailed, json_object

if TYPE_CHECKING:  # imported where keys are parsed: it loads cryptography (~16 MB of RSS)
    import jwt

log = logging.getLogger("agentos.identity")

MAX_KEYS = 100  # a provider publishes a handful (current, next, previous)
_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*(\d+)", re.IGNORECASE)
_KEY_TYPES = ("RSA", "EC", "OKP")  # never "oct": a shared secret has no place in a public key set


class KeySource:
    """Usage::

    source = KeySource(issuer_config, identity_config, fetcher, now_s=time.monotonic)
    key = await source.key("kid-1")    # a PyJWK, or None
    """

    def __init__(
        self, issuer: IssuerConfig, config: IdentityConfig, fetcher: Fetcher, *, now_s: Callable[[], float]
    ) -> None:
        self._issuer = issuer
        self._config = config
        self._fetcher = fetcher
        self._now_s = now_s
        self._jwks_url = issuer.jwks_url
        self._keys: dict[str, jwt.PyJWK] = {}
        self._published: object = None  # the set's `keys` as last fetched
        self._fresh_until = 0.0  # past it, the next token refreshes the set
        self._usable_until = 0.0  # past it (a refresh failing all along), no key is served
        self._next_fetch_at = 0.0
        self._inflight: asyncio.Task[None] | None = None
        self.generation = 0

    async def key(self, kid: str | None) -> jwt.PyJWK | None:
        """The key named `kid` (None: the set's only key), fetching the set when needed."""
        now = self._now_s()
        if now >= self._fresh_until or _pick(self._keys, kid) is None:
            await self._maybe_refresh(now)
            now = self._now_s()
        return _pick(self._keys, kid) if now < self._usable_until else None

    async def close(self) -> None:
        if self._inflight is not None:
            self._inflight.cancel()
            await asyncio.gather(self._inflight, return_exceptions=True)

    async def _maybe_refresh(self, now: float) -> None:
        if self._inflight is None:
            if now < self._next_fetch_at:
                return  # fetched lately: an unknown kid stays unknown until the interval passes
            self._next_fetch_at = now + self._config.jwks_refetch_interval_s
            self._inflight = asyncio.create_task(self._refresh(), name=f"jwks {self._issuer.issuer}")
            self._inflight.add_done_callback(self._done)
        await asyncio.shield(self._inflight)  # a request that goes away leaves the fetch to the others

    def _done(self, task: asyncio.Task[None]) -> None:
        if self._inflight is task:
            self._inflight = None

    async def _refresh(self) -> None:
        try:
            fetched = await self._fetcher.get(await self._url())
            document = json_object(fetched, "key set")
            keys = parse_key_set(document)
        except FetchFailed as exc:
            log.warning(
                "identity: the keys of %s could not be refreshed (%s); keeping %d",
                self._issuer.issuer,
                exc,
                len(self._keys),
            )
            return
        now = self._now_s()
        ttl = max_age(fetched, self._config)
        if document["keys"] != self._published:  # a key added, rotated or withdrawn
            self.generation += 1
            self._published = document["keys"]
        self._keys = keys
        self._fresh_until = now + ttl
        self._usable_until = now + ttl + self._config.jwks_stale_s

    async def _url(self) -> str:
        """`jwks_url`, or the discovery document's `jwks_uri` (found once, then kept)."""
        if not self._jwks_url:
            issuer = self._issuer.issuer.rstrip("/")
            found = json_object(
                await self._fetcher.get(f"{issuer}/.well-known/openid-configuration"), "discovery document"
            )
            if found.get("issuer") != self._issuer.issuer:  # OpenID Connect Discovery 1.0, section 4.3
                raise FetchFailed(f"the discovery document names issuer {found.get('issuer')!r}")
            jwks_uri = found.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri:
                raise FetchFailed("the discovery document has no jwks_uri")
            self._jwks_url = jwks_uri
        return self._jwks_url


def parse_key_set(document: dict[str, Any]) -> dict[str, jwt.PyJWK]:
    """The usable signing keys of a JWKS document, by `kid` ("" for one without). Keys of other
    types or uses, and keys the library cannot read, are skipped. Raises: FetchFailed (none left)."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise FetchFailed("the key set has no keys list")
    import jwt  # here, not at the top: a server without an identity provider never loads it

    keys: dict[str, jwt.PyJWK] = {}
    for entry in entries[:MAX_KEYS]:
        if not isinstance(entry, dict) or entry.get("kty") not in _KEY_TYPES or entry.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        keys[str(entry.get("kid") or "")] = key
    if not keys:
        raise FetchFailed("the key set holds no usable signing key")
    return keys


def max_age(fetched: Fetched, config: IdentityConfig) -> float:
    """How long to keep a fetched set: its `max-age`, bounded (no-store or none: the minimum)."""
    found = _MAX_AGE.search(fetched.cache_control)
    ttl = float(found.group(1)) if found else 0.0
    return min(max(ttl, config.jwks_min_ttl_s), config.jwks_max_ttl_s)


def _pick(keys: dict[str, jwt.PyJWK], kid: str | None) -> jwt.PyJWK | None:
    if kid is None:
        return next(iter(keys.values())) if len(keys) == 1 else None
    return keys.get(kid)
