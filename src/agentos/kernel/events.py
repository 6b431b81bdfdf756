"""Inputs to the kernel: things that happened, named in the past tense."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TurnSubmitted:
    session_id: str
    turn_id: str
    wants_permit: bool = True  # False: an agent's turn, whose run's model calls take permits


@dataclass(frozen=True, slots=True)
class StreamRequested:
    """A provider stream outside any session turn (an agent run's model call) wants a permit.

    It shares the permit queue with turns but not the admission count; it ends with
    `TurnEnded(stream_id)`."""

    stream_id: str
    owner: str | None = None  # the run whose model call this is


@dataclass(frozen=True, slots=True)
class ProviderReleased:
    """The turn's provider stream is closed: its permit can go to the next waiter."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The turn's task is over, whatever the outcome."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class CancelRequested:
    session_id: str
    reason: str = "cancelled"


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """The session is in memory (created, or loaded back from the store)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class SessionClosed:
    """The session was deleted."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: fire the deadlines that are due."""


Event = (
    TurnSubmitted
    | StreamRequested
    | ProviderReleased
    | TurnEnded
    | CancelRequested
    | SessionOpened
    | SessionClosed
    | Tick
)
