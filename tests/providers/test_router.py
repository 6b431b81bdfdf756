"""The router against real mock providers over HTTP: fallback before the first token (500, 429,
connect error, timeout), never after it, breakers and Retry-After holds, prices, and the
meter's reserve/settle around each attempt."""

from __future__ import annotations

import socket
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import pytest

from agentos.config import settings_from_dict
from agentos.errors import BudgetExceeded, ProviderHTTPError, ProviderProtocolError
from agentos.mock.server import MockServer, MockSettings, start_mock
from agentos.providers.base import CallContext, ChatRequest, Completion, StreamItem, TextDelta
from agentos.providers.metering import Estimate, Spend
from agentos.providers.router import ModelNotFound, Router, open_router
from agentos.testing import FakeClock

HELLO = [{"role": "user", "content": "hello"}]
FAILING = MockSettings(error_rate=1.0, ttft_ms=1)
HEALTHY = MockSettings(ttft_ms=1, tps=5000, tokens=2)
WHO = CallContext(tenant_id="t1", key_id="k1", session_id="s1", call_id="turn-1")


@asynccontextmanager
async def mocks(*settings: MockSettings) -> AsyncIterator[list[MockServer]]:
    servers = [await start_mock(s) for s in settings]
    try:
        yield servers
    finally:
        for server in servers:
            await server.close()


def config(urls: list[str], *, failures: int = 2, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    providers = {f"p{i}": {"url": url, "max_retries": 0, "first_token_timeout_s": 2.0} for i, url in enumerate(urls)}
    targets = [
        {"provider": f"p{i}", "model": f"m{i}", "price": {"input": 1.0, "output": 2.0}} for i in range(len(urls))
    ]
    tree: dict[str, Any] = {
        "providers": providers,
        "models": {"smart": {"targets": targets}},
        "routing": {"breaker_failures": failures, "breaker_cooldown_s": 10.0},
    }
    for key, value in (extra or {}).items():
        tree[key] = value
    return tree


async def ask(router: Router, model: str | None = "smart", context: CallContext | None = WHO) -> tuple[str, Completion]:
    text: list[str] = []
    async with aclosing(router.stream(ChatRequest(HELLO, model=model, context=context))) as stream:
        async for item in stream:
            if isinstance(item, TextDelta):
                text.append(item.text)
            else:
                return "".join(text), item
    raise AssertionError("no completion")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_target_that_fails_before_its_first_token_passes_the_call_on() -> None:
    async with mocks(MockSettings(error_rate=1.0, ttft_ms=1), MockSettings(ttft_ms=1, tps=5000, tokens=4)) as (
        bad,
        good,
    ):
        router = open_router(settings_from_dict(config([bad.url, good.url])), FakeClock())
        try:
            text, completion = await ask(router)
        finally:
            await router.aclose()
    assert completion.target == "p1/m1"
    assert text == completion.text and completion.finish_reason == "stop"
    assert bad.stats.errors_injected == 1 and good.stats.completed == 1
    stats = router.statistics()
    assert stats["p0/m0"].failures == {"provider_http_error": 1} and stats["p0/m0"].fallbacks == 1
    assert stats["p1/m1"].requests == 1 and stats["p1/m1"].ttft_count == 1


async def test_a_connect_error_and_a_first_token_timeout_fall_back_too() -> None:
    async with mocks(MockSettings(hang_rate=1.0), MockSettings(ttft_ms=1, tps=5000, tokens=2)) as (hung, good):
        tree = config([f"http://127.0.0.1:{closed_port()}/v1", hung.url, good.url], failures=5)
        tree["providers"]["p1"]["first_token_timeout_s"] = 0.3
        router = open_router(settings_from_dict(tree), FakeClock())
        try:
            _, completion = await ask(router)
        finally:
            await router.aclose()
    assert completion.target == "p2/m2"
    stats = router.statistics()
    assert stats["p0/m0"].failures == {"provider_unavailable": 1}
    assert stats["p1/m1"].failures == {"provider_timeout": 1}


async def test_a_429_holds_the_target_back_for_its_retry_after() -> None:
    limited = MockSettings(fail_every=1, retry_after_s=30, ttft_ms=1)
    async with mocks(limited, MockSettings(ttft_ms=1, tps=5000, tokens=2)) as (first, second):
        clock = FakeClock()
        router = open_router(settings_from_dict(config([first.url, second.url], failures=100)), clock)
        try:
            assert (await ask(router))[1].target == "p1/m1"
            assert (await ask(router))[1].target == "p1/m1"
            assert first.stats.requests == 1  # held: the second call went straight to p1
            clock.advance(31)
            await ask(router)
            assert first.stats.requests == 2  # the hold is over: asked again
        finally:
            await router.aclose()


async def test_the_breaker_opens_half_opens_and_closes() -> None:
    async with mocks(MockSettings(error_rate=1.0, ttft_ms=1), MockSettings(ttft_ms=1, tps=5000, tokens=2)) as (
        bad,
        good,
    ):
        clock = FakeClock()
        router = open_router(settings_from_dict(config([bad.url, good.url], failures=2)), clock)
        try:
            for _ in range(2):
                await ask(router)
            assert router.breakers.state("p0/m0") == "open"
            await ask(router)
            assert bad.stats.requests == 2  # open: not asked
            clock.advance(10)
            assert router.breakers.state("p0/m0") == "half_open"
            await ask(router)  # the probe fails: open again
            assert bad.stats.requests == 3 and router.breakers.state("p0/m0") == "open"
            bad.set_faults(error_rate=0.0)  # the provider recovers
            clock.advance(10)
            assert (await ask(router))[1].target == "p0/m0"  # the probe succeeds: closed
            assert router.breakers.state("p0/m0") == "closed"
        finally:
            await router.aclose()


class _BreaksAfterFirstToken:
    """An upstream that sends one token, then its stream breaks."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamItem, None]:
        self.calls += 1
        yield TextDelta("partial ")
        raise ProviderProtocolError("provider stream broke: ServerDisconnectedError")

    async def aclose(self) -> None:
        return None


async def test_after_the_first_token_a_failure_ends_the_call_and_nothing_is_repeated() -> None:
    async with mocks(MockSettings(ttft_ms=1, tps=5000, tokens=2)) as (good,):
        broken = _BreaksAfterFirstToken()
        settings = settings_from_dict(config(["http://127.0.0.1:9/v1", good.url]))
        router = open_router(settings, FakeClock())
        router._clients["p0/m0"] = broken  # the primary's wire, replaced by the breaking upstream
        seen: list[str] = []
        with pytest.raises(ProviderProtocolError):
            async with aclosing(router.stream(ChatRequest(HELLO, model="smart"))) as stream:
                async for item in stream:
                    assert isinstance(item, TextDelta)
                    seen.append(item.text)
        await router.aclose()
    assert seen == ["partial "] and broken.calls == 1
    assert good.stats.requests == 0  # no silent restart on the next target


async def test_the_last_target_is_asked_even_with_its_breaker_open() -> None:
    async with mocks(MockSettings(error_rate=1.0, ttft_ms=1)) as (bad,):
        router = open_router(settings_from_dict(config([bad.url], failures=1)), FakeClock())
        try:
            for _ in range(3):
                with pytest.raises(ProviderHTTPError):
                    await ask(router)
        finally:
            await router.aclose()
    assert bad.stats.requests == 3  # one target: the breaker never fails a call faster than the provider


async def test_the_simple_provider_form_passes_any_model_through() -> None:
    async with mocks(MockSettings(ttft_ms=1, tps=5000, tokens=2)) as (mock,):
        router = open_router(settings_from_dict({"provider": {"url": mock.url, "model": "base"}}), FakeClock())
        try:
            assert (await ask(router, model=None))[1].target == "default/base"
            assert (await ask(router, model="other-model"))[1].target == "default/other-model"
        finally:
            await router.aclose()
        named = open_router(settings_from_dict(config([mock.url])), FakeClock())
        with pytest.raises(ModelNotFound, match="no model named 'other'"):
            await ask(named, model="other")
        await named.aclose()


async def test_prices_give_each_completion_its_cost() -> None:
    async with mocks(MockSettings(ttft_ms=1, tps=5000, tokens=4)) as (mock,):
        router = open_router(settings_from_dict(config([mock.url])), FakeClock())
        try:
            _, completion = await ask(router)
        finally:
            await router.aclose()
    usage = completion.usage
    assert usage.completion_tokens == 4 and usage.prompt_tokens > 0
    assert completion.cost == pytest.approx((usage.prompt_tokens * 1.0 + usage.completion_tokens * 2.0) / 1e6)


class _Recorder:
    """A Meter and a Ledger that write down what the router tells them."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.events: list[tuple[str, Any]] = []

    def idle(self, context: CallContext) -> bool:
        return False  # hears of every call

    async def reserve(self, estimate: Estimate) -> object:
        if self.refuse:
            raise BudgetExceeded("no money", budget="tenant:t1:day")
        self.events.append(("reserve", estimate))
        return estimate.target

    async def settle(self, reservation: object, spend: Spend | None) -> None:
        self.events.append(("settle", (reservation, spend)))

    def record(self, spend: Spend) -> None:
        self.events.append(("record", spend))


async def test_each_attempt_is_reserved_then_settled_or_given_back() -> None:
    async with mocks(MockSettings(error_rate=1.0, ttft_ms=1), MockSettings(ttft_ms=1, tps=5000, tokens=2)) as (
        bad,
        good,
    ):
        router = open_router(settings_from_dict(config([bad.url, good.url])), FakeClock())
        recorder = _Recorder()
        router.set_meter(recorder, recorder)
        try:
            await ask(router)
        finally:
            await router.aclose()
    kinds = [(kind, value if kind == "reserve" else None) for kind, value in recorder.events]
    assert [k for k, _ in kinds] == ["reserve", "settle", "reserve", "settle", "record"]
    first, second = recorder.events[0][1], recorder.events[2][1]
    assert first.target == "p0/m0" and second.target == "p1/m1" and first.worst_cost > 0
    assert recorder.events[1][1] == ("p0/m0", None)  # the failed attempt gives its hold back
    reservation, spend = recorder.events[3][1]
    assert reservation == "p1/m1" and spend.target == "p1/m1" and spend.context == WHO and spend.model == "smart"
    assert recorder.events[4][1] == spend


async def test_a_budget_refusal_is_not_a_fallback() -> None:
    async with mocks(MockSettings(ttft_ms=1, tps=5000, tokens=2)) as (mock,):
        router = open_router(settings_from_dict(config([mock.url, mock.url])), FakeClock())
        router.set_meter(_Recorder(refuse=True), None)
        try:
            with pytest.raises(BudgetExceeded):
                await ask(router)
        finally:
            await router.aclose()
    assert mock.stats.requests == 0
    assert router.breakers.state("p0/m0") == "closed"


def test_a_model_naming_an_unknown_provider_is_a_config_error() -> None:
    from agentos.errors import ConfigError

    tree = {
        "providers": {"a": {"url": "http://127.0.0.1:1/v1"}},
        "models": {"m": {"targets": [{"provider": "b", "model": "x"}]}},
    }
    with pytest.raises(ConfigError, match=r"models\.m\.targets\[0\]\.provider"):
        settings_from_dict(tree)


def test_a_key_from_a_missing_variable_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentos.errors import ConfigError

    monkeypatch.delenv("AGENTOS_TEST_NO_SUCH_KEY", raising=False)
    tree = config(["http://127.0.0.1:1/v1"])
    tree["providers"]["p0"]["api_key_env"] = "AGENTOS_TEST_NO_SUCH_KEY"
    with pytest.raises(ConfigError, match="providers.p0.api_key_env"):
        settings_from_dict(tree)


async def test_the_targets_counters_reach_prometheus() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from agentos.metrics import RouterCollector

    async with mocks(MockSettings(error_rate=1.0, ttft_ms=1), MockSettings(ttft_ms=1, tps=5000, tokens=2)) as (
        bad,
        good,
    ):
        router = open_router(settings_from_dict(config([bad.url, good.url], failures=1)), FakeClock())
        try:
            await ask(router)
        finally:
            await router.aclose()
    registry = CollectorRegistry()
    registry.register(RouterCollector(router))
    text = generate_latest(registry).decode()
    assert 'agentos_provider_requests_total{target="p0/m0"} 1.0' in text
    assert 'agentos_provider_failures_total{reason="provider_http_error",target="p0/m0"} 1.0' in text
    assert 'agentos_provider_fallbacks_total{target="p0/m0"} 1.0' in text
    assert 'agentos_provider_breaker_state{target="p0/m0"} 1.0' in text
    assert 'agentos_provider_ttft_seconds_count{target="p1/m1"} 1.0' in text


async def test_the_consoles_snapshot_has_each_targets_counters() -> None:
    from agentos.metrics import Metrics, RouterCollector

    async with mocks(FAILING, HEALTHY) as (bad, good):
        router = open_router(settings_from_dict(config([bad.url, good.url], failures=1)), FakeClock())
        try:
            await ask(router)
        finally:
            await router.aclose()
    metrics = Metrics()
    metrics.registry.register(RouterCollector(router))
    targets = metrics.snapshot()["targets"]
    assert targets["p0/m0"]["requests"] == 1 and targets["p0/m0"]["fallbacks"] == 1
    assert targets["p0/m0"]["failures"] == 1 and targets["p0/m0"]["breaker_state"] == 1
    assert targets["p1/m1"] == {"requests": 1, "fallbacks": 0, "breaker_state": 0}


def test_an_answer_to_a_call_sent_before_the_failures_does_not_close_the_breaker() -> None:
    from agentos.providers.breaker import Breakers

    clock = FakeClock()
    breakers = Breakers(clock, failures=2, cooldown_s=5.0)
    long_call_started = clock.now()  # a 2-second stream sent before the outage
    clock.advance(0.5)
    breakers.failure("t")
    breakers.failure("t")
    assert breakers.state("t") == "open"
    clock.advance(1.5)
    breakers.success("t", started_s=long_call_started)  # it ends well, after the outage began
    assert breakers.state("t") == "open"  # says nothing of the target now
    clock.advance(5)
    assert breakers.try_acquire("t")  # half-open: one probe
    probe_started = clock.now()
    clock.advance(0.1)
    breakers.success("t", started_s=probe_started)
    assert breakers.state("t") == "closed"


def test_a_stale_answer_does_not_restart_a_run_of_failures() -> None:
    from agentos.providers.breaker import Breakers

    clock = FakeClock()
    breakers = Breakers(clock, failures=3, cooldown_s=5.0)
    old = clock.now()
    clock.advance(0.1)
    breakers.failure("t")
    breakers.failure("t")
    breakers.success("t", started_s=old)  # sent before those failures: ignored
    breakers.failure("t")
    assert breakers.state("t") == "open"
