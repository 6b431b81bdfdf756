"""One issuer's key set against the real test identity provider over HTTP, with time as an input:
`Cache-Control` honoured within its bounds, an unknown `kid` refetching at most once per
interval, concurrent requests sharing one fetch, an outage survived for the cache's lifetime,
and the outbound rules (no loopback unless allowed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentos.config.identity import IdentityConfig, IssuerConfig
from agentos.identity import Fetcher, identity_policy
from agentos.identity.jwks import KeySource
from agentos.outbound import OutboundPolicy
from tests.identity.idp import IdentityProvider, idp_fixture  # noqa: F401  (the fixture `idp`)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def config(**changes: float) -> IdentityConfig:
    values: dict[str, Any] = {
        "jwks_min_ttl_s": 60.0,
        "jwks_max_ttl_s": 3600.0,
        "jwks_stale_s": 600.0,
        "jwks_refetch_interval_s": 30.0,
    }
    return IdentityConfig(**(values | changes))


@pytest.fixture
async def fetcher() -> AsyncIterator[Fetcher]:
    made = Fetcher(identity_policy(OutboundPolicy(), allow_loopback=True), timeout_s=5.0)
    yield made
    await made.close()


def source(idp: IdentityProvider, fetcher: Fetcher, clock: Clock, **changes: float) -> KeySource:
    issuer = IssuerConfig(tenant="acme", issuer=idp.issuer, audience=idp.audience)  # discovery finds /jwks
    return KeySource(issuer, config(**changes), fetcher, now_s=clock)


async def test_the_key_set_is_kept_for_its_max_age(idp: IdentityProvider, fetcher: Fetcher) -> None:
    clock = Clock()
    keys = source(idp, fetcher, clock)
    for kid in ("rsa-1", "ec-1", "ed-1", "rsa-1"):
        assert (await keys.key(kid)) is not None
    assert idp.jwks_fetches == 1
    clock.now += 299
    assert (await keys.key("rsa-1")) is not None and idp.jwks_fetches == 1
    clock.now += 2  # past max-age=300
    assert (await keys.key("rsa-1")) is not None and idp.jwks_fetches == 2


async def test_max_age_is_bounded(idp: IdentityProvider, fetcher: Fetcher) -> None:
    clock = Clock()
    idp.max_age_s = 10**9
    keys = source(idp, fetcher, clock, jwks_max_ttl_s=100.0)
    await keys.key("rsa-1")
    clock.now += 101
    await keys.key("rsa-1")
    assert idp.jwks_fetches == 2


async def test_an_unknown_kid_refetches_at_most_once_per_interval(idp: IdentityProvider, fetcher: Fetcher) -> None:
    clock = Clock()
    keys = source(idp, fetcher, clock)
    await keys.key("rsa-1")
    for i in range(100):  # just fetched: no unknown kid refetches within the interval
        assert (await keys.key(f"storm-{i}")) is None
    assert idp.jwks_fetches == 1
    clock.now += 31
    for i in range(100):  # the first unknown kid after the interval refetches; the other 99 do not
        assert (await keys.key(f"storm-{i}")) is None
    assert idp.jwks_fetches == 2
    idp.rotate("RS256")  # the provider publishes a new key: found after the interval
    assert (await keys.key("rsa-1-next")) is None
    clock.now += 31
    assert (await keys.key("rsa-1-next")) is not None
    assert idp.jwks_fetches == 3
    assert keys.generation == 2


async def test_concurrent_first_requests_share_one_fetch(idp: IdentityProvider, fetcher: Fetcher) -> None:
    keys = source(idp, fetcher, Clock())
    found = await asyncio.gather(*(keys.key("ec-1") for _ in range(20)))
    assert all(k is not None for k in found)
    assert idp.jwks_fetches == 1


async def test_cached_keys_outlive_an_outage_for_the_caches_lifetime(idp: IdentityProvider, fetcher: Fetcher) -> None:
    clock = Clock()
    keys = source(idp, fetcher, clock)
    await keys.key("rsa-1")
    idp.down = True
    clock.now += 301  # stale: a refresh is tried, fails, the old keys serve
    assert (await keys.key("rsa-1")) is not None
    clock.now += 290  # 591 s in: within max-age + jwks_stale_s (900)
    assert (await keys.key("rsa-1")) is not None
    clock.now += 310  # 901 s in: past it
    assert (await keys.key("rsa-1")) is None
    idp.down = False
    clock.now += 31
    assert (await keys.key("rsa-1")) is not None  # back


async def test_loopback_is_refused_unless_allowed(idp: IdentityProvider) -> None:
    strict = Fetcher(identity_policy(OutboundPolicy(), allow_loopback=False), timeout_s=5.0)
    try:
        assert (await source(idp, strict, Clock()).key("rsa-1")) is None
    finally:
        await strict.close()
    assert idp.jwks_fetches == 0  # never even asked


async def test_a_discovery_document_naming_another_issuer_is_refused(idp: IdentityProvider, fetcher: Fetcher) -> None:
    issuer = IssuerConfig(tenant="acme", issuer=f"{idp.issuer}/", audience=idp.audience)
    keys = KeySource(issuer, config(), fetcher, now_s=Clock())
    assert (await keys.key("rsa-1")) is None
    assert idp.jwks_fetches == 0
