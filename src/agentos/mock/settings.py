"""What the mock is told (`MockSettings`), what it counts (`MockStats`), and which fault a request gets."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Literal

from agentos.errors import ConfigError
from agentos.mock.scenario import Scenario

_SCENARIOS = ("plain", "tools", "light", "heavy", "parallel")
Fault = Literal["none", "rate_limit", "error", "hang"]


@dataclass(frozen=True, kw_only=True)
class MockSettings:
    """How the mock answers: timing, faults and the answer script."""

    ttft_ms: float = 50.0
    tps: float = 200.0
    tokens: int = 8
    error_rate: float = 0.0  # share answered 500
    fail_every: int = 0  # every N-th request answered 429 with Retry-After (0 = off)
    retry_after_s: float = 1.0
    hang_rate: float = 0.0  # share held open without an answer (until the client goes away)
    # A stream cut by the wire's error event after this many content frames (-1 = never; 0 = before
    # the first token): what a provider failing mid-answer looks like.
    stream_error_after: int = -1
    scenario: Scenario = "plain"
    seed: int = 0  # random faults are reproducible

    def __post_init__(self) -> None:
        """Raises: ConfigError naming every invalid field."""
        checks = (
            (self.ttft_ms >= 0, "ttft_ms must be >= 0"),
            (self.tps > 0, "tps must be > 0"),
            (self.tokens >= 1, "tokens must be >= 1"),
            (0 <= self.error_rate <= 1, "error_rate must be within [0, 1]"),
            (0 <= self.hang_rate <= 1, "hang_rate must be within [0, 1]"),
            (self.fail_every >= 0, "fail_every must be >= 0"),
            (self.retry_after_s >= 0, "retry_after_s must be >= 0"),
            (self.stream_error_after >= -1, "stream_error_after must be >= -1 (-1: never)"),
            (self.scenario in _SCENARIOS, "scenario must be one of " + ", ".join(_SCENARIOS)),
        )
        problems = [message for ok, message in checks if not ok]
        if problems:
            raise ConfigError(f"mock-llm: {'; '.join(problems)} (got {self!r})")


@dataclass(kw_only=True)
class MockStats:
    """Live counters of chat-completion requests, and of embeddings requests apart (mutated by
    the app, read by anyone).

    In the mock's own process, `wait_for` waits for the counters to reach a state: every
    change wakes the waiters (tests wait on this instead of polling)."""

    requests: int = 0
    in_flight: int = 0
    max_concurrent: int = 0
    completed: int = 0
    errors_injected: int = 0
    rate_limited: int = 0
    hung: int = 0
    aborted: int = 0
    embedding_requests: int = 0  # POST /v1/embeddings, faulted ones included
    embedding_inputs: int = 0  # texts embedded
    embedding_faults: int = 0  # 429s and 500s injected into embeddings requests

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        for changed in self.__dict__.get("_waiters", ()):  # not a field: absent from as_dict
            changed.set()

    async def wait_for(
        self, predicate: Callable[[MockStats], bool], timeout_s: float = 5.0, what: str = "the mock's counters"
    ) -> None:
        """Return once `predicate(self)` holds, checked after every change of a counter.

        Raises:
            TimeoutError: it did not hold within `timeout_s` (the message has the counters).
        """
        changed = asyncio.Event()
        waiters: set[asyncio.Event] = self.__dict__.setdefault("_waiters", set())
        waiters.add(changed)
        try:
            async with asyncio.timeout(timeout_s):
                while not predicate(self):
                    changed.clear()
                    await changed.wait()
        except TimeoutError:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}: {self.as_dict()}") from None
        finally:
            waiters.discard(changed)

    def enter(self) -> None:
        self.in_flight += 1
        self.max_concurrent = max(self.max_concurrent, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def reset(self) -> None:
        """Zero every counter except `in_flight`, which is live; `max_concurrent` restarts from it."""
        for f in fields(self):
            if f.name != "in_flight":
                setattr(self, f.name, 0)
        self.max_concurrent = self.in_flight


def decide_fault(settings: MockSettings, request_number: int, rng: random.Random) -> Fault:
    """The fault for the `request_number`-th chat request (1-based)."""
    error_draw, hang_draw = rng.random(), rng.random()
    if settings.fail_every > 0 and request_number % settings.fail_every == 0:
        return "rate_limit"
    if error_draw < settings.error_rate:
        return "error"
    if hang_draw < settings.hang_rate:
        return "hang"
    return "none"
