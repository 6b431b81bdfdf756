"""Send the schedule on time, whatever the server does, and keep one sample per offer.

One dispatcher sleeps until each request is due and starts it as a task of its own; it never
waits for a response, so a slow server makes requests pile up (the open model), not the
offered rate fall (the closed one). Latency is measured from the time a request was *due*, not
from when it left: time a request spent waiting for the generator is the server's load showing
up in the client, and counts. A dispatch that woke more than `LATE_S` after its due time is
counted as late: the generator's own admission that it fell behind.

Every offer leaves exactly one sample: ok, failed (named), or `abandoned` when the run's drain
time ran out while it was in flight. The report checks offered == recorded before it prints any
percentile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from agentos.waiting import wait_tasks
from agentos_bench.arrival.schedule import Offer

LATE_S = 0.010  # a dispatch this far behind its due time is late
START_DELAY_S = 0.05  # the first request is due this long after the dispatcher starts


class Failed(Exception):
    """A request that did not succeed; `str()` names how (`http_503`, `stream_break`, ...)."""


@dataclass(slots=True)
class Sample:
    index: int
    kind: str
    phase: str
    due_s: float  # from the run's start
    sent_s: float  # when its task began (due_s + the generator's lag)
    done_s: float
    first_s: float | None = None  # first token (chat_stream), from the run's start
    error: str | None = None  # None: ok

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency_s(self) -> float:
        return self.done_s - self.due_s

    @property
    def first_token_s(self) -> float | None:
        return None if self.first_s is None else self.first_s - self.due_s


class Attempt:
    """What a request's sender reports while it runs: when the first token came."""

    __slots__ = ("_clock", "first_s", "_t0")

    def __init__(self, clock: Callable[[], float], t0: float) -> None:
        self._clock, self._t0 = clock, t0
        self.first_s: float | None = None

    def first_token(self) -> None:
        if self.first_s is None:
            self.first_s = self._clock() - self._t0


Send = Callable[[Offer, Attempt], Awaitable[None]]  # raises Failed (or anything: named by its type)


@dataclass(slots=True)
class DispatchStats:
    late: int = 0  # dispatches more than LATE_S behind
    max_lag_s: float = 0.0
    capped: int = 0  # dispatched while `connection_limit` requests were in flight: it waited for a socket
    peak_in_flight: int = 0
    in_flight: int = 0
    lags_s: list[float] = field(default_factory=list)


async def dispatch(
    offers: Sequence[Offer],
    send: Send,
    *,
    timeouts: dict[str, float],
    connection_limit: int,
    drain_s: float,
    start_at: float | None = None,
) -> tuple[list[Sample], DispatchStats]:
    """Send every offer when due (`at_s` after `start_at`, a loop time; default: `START_DELAY_S`
    from now); wait at most `drain_s` after the last one for those in flight."""
    loop = asyncio.get_running_loop()
    t0 = loop.time() + START_DELAY_S if start_at is None else start_at
    samples: list[Sample] = []
    stats = DispatchStats()
    tasks: set[asyncio.Task[None]] = set()
    for offer in offers:
        due = t0 + offer.at_s
        if (delay := due - loop.time()) > 0:
            await asyncio.sleep(delay)
        lag = loop.time() - due
        stats.lags_s.append(lag)
        stats.max_lag_s = max(stats.max_lag_s, lag)
        stats.late += lag > LATE_S
        stats.capped += stats.in_flight >= connection_limit
        stats.in_flight += 1  # counted from dispatch: a task not yet started holds its place too
        stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
        task = loop.create_task(_one(offer, send, t0, timeouts[offer.kind], samples, stats))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await wait_tasks(set(tasks), drain_s)  # a task cancelled here records its sample as abandoned
    _abandon_unstarted(offers, samples, stats, loop.time() - t0)
    samples.sort(key=lambda s: s.index)
    return samples, stats


def _abandon_unstarted(offers: Sequence[Offer], samples: list[Sample], stats: DispatchStats, now_s: float) -> None:
    """A task cancelled before its first step never runs its body: its offer still gets a sample."""
    recorded = {s.index for s in samples}
    for offer in offers:
        if offer.index not in recorded:
            stats.in_flight -= 1
            samples.append(Sample(offer.index, offer.kind, offer.phase, offer.at_s, now_s, now_s, None, "abandoned"))


async def _one(
    offer: Offer, send: Send, t0: float, timeout_s: float, samples: list[Sample], stats: DispatchStats
) -> None:
    loop = asyncio.get_running_loop()
    sent = loop.time() - t0
    attempt = Attempt(loop.time, t0)
    error: str | None = "abandoned"  # unless the request ends before the drain deadline
    try:
        async with asyncio.timeout(timeout_s):
            await send(offer, attempt)
        error = None
    except TimeoutError:
        error = "timeout"
    except Failed as exc:
        error = str(exc) or "failed"
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a sender's bug or a transport error: named, never lost
        error = type(exc).__name__
    finally:
        stats.in_flight -= 1
        done = loop.time() - t0
        samples.append(Sample(offer.index, offer.kind, offer.phase, offer.at_s, sent, done, attempt.first_s, error))
