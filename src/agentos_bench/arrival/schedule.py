"""The schedule of an open-arrival run, made before anything is sent.

Each phase offers its rate for its duration: request i of a phase is due at
`phase start + i / rate` (evenly spaced, as k6's constant-arrival-rate executor does), whatever
the server does meanwhile. Which load request n is comes from the golden-ratio sequence
`frac((n + 1) / phi)` laid over the loads' cumulative shares: a low-discrepancy sequence, so every
prefix of the run holds each load in its share to within a request or two, and two runs at the
same rates send exactly the same requests (a random draw would send 3% uploads give or take
their own noise, and a difference between two runs would not be the server's).

`scale` shortens every phase and changes nothing else (a shorter run at the same rates);
`rate_multiplier` multiplies every rate (a capacity run).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentos_bench.arrival.scenario import Scenario

INVERSE_PHI = 0.6180339887498949  # 1 / the golden ratio
CANCEL_EVERY = 5  # every fifth chat_stream request is cancelled mid-stream


@dataclass(frozen=True, slots=True)
class Offer:
    index: int  # 0.. over the whole run
    kind: str
    phase: str
    at_s: float  # when it is due, from the run's start
    cancel: bool = False  # a chat_stream request that cancels its turn mid-stream


@dataclass(frozen=True, slots=True)
class PhaseWindow:
    name: str
    start_s: float
    end_s: float
    rate: float  # offered per second (multiplier included)
    offered: int


def plan_phases(scenario: Scenario, scale: float = 1.0, rate_multiplier: float = 1.0) -> list[PhaseWindow]:
    """The phases' windows and how many requests each offers."""
    if scale <= 0 or rate_multiplier <= 0:
        raise ValueError("scale and rate_multiplier must be > 0")
    windows, start = [], 0.0
    for phase in scenario.phases:
        seconds = phase.seconds * scale
        rate = phase.rate * rate_multiplier
        offered = int(seconds * rate + 1e-9)  # whole requests that fit; no partial one at the end
        windows.append(PhaseWindow(phase.name, start, start + seconds, rate, offered))
        start += seconds
    return windows


def build_schedule(scenario: Scenario, scale: float = 1.0, rate_multiplier: float = 1.0) -> list[Offer]:
    """Every request of the run, in the order due."""
    offers: list[Offer] = []
    chats = 0
    for window in plan_phases(scenario, scale, rate_multiplier):
        for i in range(window.offered):
            n = len(offers)
            kind = kind_of(scenario, n)
            cancel = False
            if kind == "chat_stream":
                chats += 1
                cancel = chats % CANCEL_EVERY == 0
            offers.append(Offer(n, kind, window.name, window.start_s + i / window.rate, cancel))
    return offers


def kind_of(scenario: Scenario, n: int) -> str:
    """The load of request `n`: where `frac((n + 1) / phi)` falls among the cumulative shares."""
    u = ((n + 1) * INVERSE_PHI) % 1.0
    edge = 0.0
    for load in scenario.loads:
        edge += load.share
        if u < edge:
            return load.kind
    return scenario.loads[-1].kind  # u within rounding of 1.0
