"""The router's breakers shared over the bus (real Redis): one node's discovery spares the
others, and the recovery it finds closes the others' breakers too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentos.config import settings_from_dict
from agentos.coordination.breakers import BusBreakerShare
from agentos.coordination.bus import Bus
from agentos.mock.server import MockSettings
from agentos.providers.router import Router, open_router
from agentos.testing import FakeClock, eventually
from tests.coordination.test_bus import bus_factory  # noqa: F401  (the fixture)
from tests.providers.test_router import FAILING, HEALTHY, ask, config, mocks


async def _router(bus: Bus, node: str, urls: list[str], clock: FakeClock) -> tuple[Router, BusBreakerShare]:
    share = BusBreakerShare(bus, node)
    router = open_router(settings_from_dict(config(urls, failures=2)), clock, share=share)
    await share.start(router.breakers)
    return router, share


async def test_a_breaker_opened_on_one_node_is_open_on_the_other(bus_factory: Callable[[], Awaitable[Bus]]) -> None:  # noqa: F811
    async with mocks(FAILING, HEALTHY) as (bad, good):
        clock_a, clock_b = FakeClock(), FakeClock()
        a, _ = await _router(await bus_factory(), "node-a", [bad.url, good.url], clock_a)
        b, share_b = await _router(await bus_factory(), "node-b", [bad.url, good.url], clock_b)
        try:
            await ask(a)
            await ask(a)
            assert a.breakers.state("p0/m0") == "open"
            await eventually(lambda: b.breakers.state("p0/m0") == "open", timeout_s=5)
            before = bad.stats.requests
            assert (await ask(b))[1].target == "p1/m1"
            assert bad.stats.requests == before  # node b never tried the failing target
            bad.set_faults(error_rate=0.0)
            clock_a.advance(10)
            assert (await ask(a))[1].target == "p0/m0"  # a's probe finds it well: closed
            await eventually(lambda: b.breakers.state("p0/m0") == "closed", timeout_s=5)
            assert share_b.received == 2
        finally:
            await a.aclose()
            await b.aclose()


async def test_a_retry_after_on_one_node_holds_the_target_on_the_other(
    bus_factory: Callable[[], Awaitable[Bus]],  # noqa: F811
) -> None:
    limited = MockSettings(fail_every=1, retry_after_s=30, ttft_ms=1)
    async with mocks(limited, HEALTHY) as (first, second):
        a, _ = await _router(await bus_factory(), "node-a", [first.url, second.url], FakeClock())
        b, share_b = await _router(await bus_factory(), "node-b", [first.url, second.url], FakeClock())
        try:
            await ask(a)
            await eventually(lambda: share_b.received == 1, timeout_s=5)
            assert (await ask(b))[1].target == "p1/m1"
            assert first.stats.requests == 1
        finally:
            await a.aclose()
            await b.aclose()
