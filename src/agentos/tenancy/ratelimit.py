"""Rate limits by GCRA (the generic cell rate algorithm): one float per key, no timers.

Theory of operation. A limit of `q` per minute admits one unit every `T = 60 / q` seconds on
average, with a burst of `q`: the bucket holds a minute's worth, refilled continuously. Each key
keeps only its *theoretical arrival time* (TAT): when the key would be idle again if every unit
it took had been spaced `T` apart. A request at `now` is allowed when taking one more unit does
not push the TAT more than a window (60 s) past `now`:

    tat = max(stored_tat, now);  new_tat = tat + T
    allowed  iff  new_tat - now <= 60            (then stored_tat := new_tat)
    retry_after = new_tat - 60 - now             (when refused: exactly when it would pass)
    remaining   = floor((60 - (new_tat - now)) / T)

Why the burst is the per-minute limit: the policy a client reads (`RateLimit-Policy: q=100;
w=60`) then means what it says for a client that starts idle: 100 requests at once are fine,
and after that one every 0.6 s; a client that follows `RateLimit`'s `r` never gets a 429. A
smaller burst would refuse a well-behaved client's first minute; a larger one would let a
flood through before the limit bites.

Memory is bounded: a TAT in the past means the same as no entry (a full bucket), so entries
with `tat <= now` are dropped by a sweep that runs at most once a window, or sooner when the
table has doubled since the last one (amortised O(1) per call). Every entry expires within a
window of its last use, so the table holds at most the keys seen in about the last two windows,
however many distinct keys come and go over time.

The limiter does no I/O and reads no clock: callers pass `now` (monotonic seconds), so tests
drive it with a FakeClock. It is per process: a deployment of several processes needs a shared
store (Redis) to hold the TATs, or each process admits the full rate.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW_S = 60.0
# Float slack when comparing times: a client that waits exactly `retry_after` must pass.
_EPSILON = 1e-9
_MIN_SWEEP_SIZE = 1024


@dataclass(frozen=True, slots=True)
class Decision:
    """Attributes:
    allowed: the unit was (or, uncommitted, would be) taken.
    limit: the per-minute limit decided against (the burst too).
    remaining: units that could still be taken right now, after this one.
    reset: seconds until one more unit becomes available (0: the bucket is full).
    retry_after: seconds until this request would be allowed (0 when allowed).
    tat: the key's new theoretical arrival time, if the decision is committed.
    """

    allowed: bool
    limit: int
    remaining: int
    reset: float
    retry_after: float
    tat: float


class Gcra:
    """Per-key GCRA limits over a one-minute window. Keys are strings (a key id, a tenant id)."""

    __slots__ = ("_tat", "_next_sweep", "_sweep_size")

    def __init__(self) -> None:
        self._tat: dict[str, float] = {}
        self._next_sweep = float("-inf")
        self._sweep_size = _MIN_SWEEP_SIZE

    def __len__(self) -> int:
        return len(self._tat)

    def decide(self, key: str, per_minute: int, now: float, *, commit: bool = True) -> Decision:
        """Whether `key` may take one unit of a `per_minute` limit at `now` (`per_minute` > 0).

        With `commit=False` nothing changes: `commit(key, decision)` takes the unit later, so a
        request checked against several limits takes from none when one of them refuses it.
        """
        interval = WINDOW_S / per_minute
        stored = self._tat.get(key, now)
        new_tat = (stored if stored > now else now) + interval
        ahead = new_tat - now
        if ahead > WINDOW_S + _EPSILON:
            wait = ahead - WINDOW_S
            return Decision(False, per_minute, 0, wait, wait, stored)
        slack = WINDOW_S - ahead
        remaining = int(slack / interval + _EPSILON)
        decision = Decision(True, per_minute, remaining, (remaining + 1) * interval - slack, 0.0, new_tat)
        if commit:
            self.commit(key, decision, now)
        return decision

    def commit(self, key: str, decision: Decision, now: float) -> None:
        """Take the unit an allowed, uncommitted `decision` stands for."""
        if decision.allowed:
            self._tat[key] = decision.tat
            if now >= self._next_sweep or len(self._tat) >= self._sweep_size:
                self.sweep(now)

    def refund(self, key: str, per_minute: int) -> None:
        """Give back one unit taken from `key` (the work it admitted did not start). The TAT is
        a sum of intervals, so taking one off undoes exactly one unit, whatever came between."""
        tat = self._tat.get(key)
        if tat is not None:
            self._tat[key] = tat - WINDOW_S / per_minute

    def sweep(self, now: float) -> None:
        """Drop every key whose bucket is full again (TAT not after `now`)."""
        expired = [key for key, tat in self._tat.items() if tat <= now]
        for key in expired:
            del self._tat[key]
        self._next_sweep = now + WINDOW_S
        self._sweep_size = max(_MIN_SWEEP_SIZE, 2 * len(self._tat))
