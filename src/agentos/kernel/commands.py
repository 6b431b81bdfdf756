"""Outputs of the kernel: what the runtime must do, named in the imperative."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RejectTurn:
    """Over the admission limit: answer 429 with Retry-After, start nothing."""

    turn_id: str
    retry_after_s: int


@dataclass(frozen=True, slots=True)
class AcceptTurn:
    turn_id: str


@dataclass(frozen=True, slots=True)
class GrantPermit:
    """The turn may open its provider stream."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class CancelTurn:
    """Stop the turn: abort its upstream, store its partial output as cancelled."""

    turn_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class FailTurn:
    """End the turn as failed before it reached the provider."""

    turn_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class EvictSession:
    """The session was idle past its TTL: drop it from memory (the store keeps it)."""

    session_id: str


Command = RejectTurn | AcceptTurn | GrantPermit | CancelTurn | FailTurn | EvictSession
