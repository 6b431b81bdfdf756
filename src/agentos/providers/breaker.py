"""Circuit breakers, one per router target: a plain state machine on an injected clock.

    closed --(`failures` in a row)--> open --(cool-down passed)--> half-open
    half-open --(a probe succeeds)--> closed;  half-open --(a probe fails)--> open again

While open, the router sends nothing to the target and goes straight to the next one. Half-open
lets at most `probes` requests through at once; the rest still skip the target. A target can
also be *held* without being broken: a 429 with Retry-After holds it back for exactly that long.

Across nodes (`coordination.redis_url`), a `BreakerShare` carries each opening, closing and hold
to the other nodes (`apply`), so one node's discovery spares the others; the state machine here
stays the one place that decides.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Literal, Protocol

from agentos.clock import Clock

State = Literal["closed", "open", "half_open"]
STATE_CODES: dict[State, int] = {"closed": 0, "open": 1, "half_open": 2}  # the metric's value


@dataclass(slots=True)
class _Breaker:
    failures: int = 0  # in a row, while closed
    opened_at: float | None = None  # None: closed
    probing: int = 0  # probes in flight while half-open
    held_until: float = 0.0  # Retry-After
    failed_at: float = -1.0  # when the last failure was counted


class BreakerShare(Protocol):
    """Where a node tells the others what it found (`agentos.coordination.breakers`)."""

    def opened(self, target: str, until_s: float) -> None:
        """The breaker of `target` opened here; it stays open `until_s` seconds from now."""

    def closed(self, target: str) -> None: ...

    def held(self, target: str, for_s: float) -> None: ...


@dataclass(eq=False)
class Breakers:
    """The breakers of every target (made on first use): open after `failures` in a row, for
    `cooldown_s`, then `probes` requests at once; what opens, closes or holds is told to `share`."""

    clock: Clock
    _: KW_ONLY
    failures: int = 5
    cooldown_s: float = 10.0
    probes: int = 1
    share: BreakerShare | None = None
    _by_target: dict[str, _Breaker] = field(init=False, default_factory=dict)

    def state(self, target: str) -> State:
        b = self._by_target.get(target)
        if b is None or b.opened_at is None:
            return "closed"
        return "open" if self.clock.now() < b.opened_at + self.cooldown_s else "half_open"

    def states(self) -> dict[str, State]:
        return {target: self.state(target) for target in self._by_target}

    def try_acquire(self, target: str) -> bool:
        """May a request go to `target` now? A half-open breaker counts the probe it lets
        through; the caller reports its end with `success` or `failure` (or `release` when the
        request ended without saying either, e.g. cancelled)."""
        b = self._by_target.get(target)
        if b is None:
            return True
        now = self.clock.now()
        if now < b.held_until:
            return False
        if b.opened_at is None:
            return True
        if now < b.opened_at + self.cooldown_s:
            return False
        if b.probing >= self.probes:
            return False
        b.probing += 1
        return True

    def success(self, target: str, started_s: float | None = None) -> None:
        """A call to `target` answered. `started_s`: when that call was sent (the breakers'
        clock). A call sent before the last failure says nothing of the target now: a 2-second
        stream that began before an outage and ends after it must not close the breaker that
        the outage opened, nor restart its run of failures."""
        b = self._by_target.get(target)
        if b is None:
            return
        if started_s is not None and started_s < b.failed_at:
            return
        was_open = b.opened_at is not None
        b.failures, b.opened_at, b.probing = 0, None, 0
        if was_open and self.share is not None:
            self.share.closed(target)

    def failure(self, target: str) -> None:
        b = self._by_target.setdefault(target, _Breaker())
        b.failed_at = self.clock.now()
        if b.opened_at is not None:  # a probe failed (or a request let through before it opened)
            b.probing = max(0, b.probing - 1)
            self._open(target, b)
            return
        b.failures += 1
        if b.failures >= self.failures:
            self._open(target, b)

    def release(self, target: str) -> None:
        """A request let through ended with neither a success nor a failure of the target."""
        b = self._by_target.get(target)
        if b is not None and b.opened_at is not None:
            b.probing = max(0, b.probing - 1)

    def hold(self, target: str, for_s: float) -> None:
        """Send nothing to `target` for `for_s` seconds (its Retry-After)."""
        self._hold(target, for_s)
        if self.share is not None:
            self.share.held(target, for_s)

    def _open(self, target: str, b: _Breaker) -> None:
        b.opened_at = self.clock.now()
        b.failures = b.probing = 0  # a new cool-down: its probes are counted afresh
        if self.share is not None:
            self.share.opened(target, self.cooldown_s)

    def _hold(self, target: str, for_s: float) -> None:
        b = self._by_target.setdefault(target, _Breaker())
        b.held_until = max(b.held_until, self.clock.now() + for_s)

    # --- what another node found (BreakerShare's deliveries) ---

    def apply_opened(self, target: str, until_s: float) -> None:
        """Another node opened `target`'s breaker for `until_s` more seconds: open it here too,
        so that its cool-down ends when the other node's does."""
        b = self._by_target.setdefault(target, _Breaker())
        opened_at = self.clock.now() + until_s - self.cooldown_s
        if b.opened_at is None or opened_at > b.opened_at:
            b.opened_at, b.failures, b.probing = opened_at, 0, 0

    def apply_closed(self, target: str) -> None:
        b = self._by_target.get(target)
        if b is not None:
            b.failures, b.opened_at, b.probing = 0, None, 0

    def apply_held(self, target: str, for_s: float) -> None:
        self._hold(target, for_s)
