"""The kernel: pure logic, stdlib only. The runtime feeds it events and carries out its commands."""

from agentos.kernel.commands import AcceptTurn, CancelTurn, Command, EvictSession, FailTurn, GrantPermit, RejectTurn
from agentos.kernel.events import (
    CancelRequested,
    Event,
    ProviderReleased,
    SessionClosed,
    SessionOpened,
    StreamRequested,
    Tick,
    TurnEnded,
    TurnSubmitted,
)
from agentos.kernel.kernel import Kernel, KernelLimits, KernelStatistics, TurnState

__all__ = [
    "AcceptTurn",
    "CancelRequested",
    "CancelTurn",
    "Command",
    "Event",
    "EvictSession",
    "FailTurn",
    "GrantPermit",
    "Kernel",
    "KernelLimits",
    "KernelStatistics",
    "ProviderReleased",
    "RejectTurn",
    "SessionClosed",
    "SessionOpened",
    "StreamRequested",
    "Tick",
    "TurnEnded",
    "TurnState",
    "TurnSubmitted",
]
