"""The one retry policy of the provider clients (chat and embeddings)."""

from __future__ import annotations

import pytest

from agentos.errors import ProviderError, ProviderHTTPError
from agentos.providers.transport import RetryPolicy


class Flaky:
    def __init__(self, *errors: ProviderError) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


async def test_retryable_errors_are_retried_up_to_max_retries() -> None:
    flaky = Flaky(ProviderHTTPError(503, "busy"), ProviderHTTPError(429, "slow down", retry_after_s=0.001))
    assert await RetryPolicy(max_retries=2, base_s=0.001).call(flaky) == "ok"
    assert flaky.calls == 3
    gives_up = Flaky(*(ProviderHTTPError(500, "down") for _ in range(3)))
    with pytest.raises(ProviderHTTPError):
        await RetryPolicy(max_retries=2, base_s=0.001).call(gives_up)
    assert gives_up.calls == 3


async def test_a_client_error_is_not_retried() -> None:
    flaky = Flaky(ProviderHTTPError(400, "bad"))
    with pytest.raises(ProviderHTTPError):
        await RetryPolicy(max_retries=5, base_s=0.001).call(flaky)
    assert flaky.calls == 1


async def test_a_wait_past_the_budget_gives_up_at_once() -> None:
    flaky = Flaky(ProviderHTTPError(429, "later", retry_after_s=60.0))
    with pytest.raises(ProviderHTTPError):
        await RetryPolicy(max_retries=5, budget_s=1.0).call(flaky)
    assert flaky.calls == 1


def test_the_wait_honours_retry_after_up_to_its_cap_and_backs_off_otherwise() -> None:
    policy = RetryPolicy(max_retries=3, base_s=0.1, max_backoff_s=2.0, max_wait_s=10.0)
    assert 10.0 <= policy.delay_s(ProviderHTTPError(429, "x", retry_after_s=30.0), 1) <= 11.0
    assert 0.2 <= policy.delay_s(ProviderHTTPError(500, "x"), 1) <= 0.22
    assert 2.0 <= policy.delay_s(ProviderHTTPError(500, "x"), 10) <= 2.2
