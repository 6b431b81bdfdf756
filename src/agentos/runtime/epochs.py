"""Turn epochs: which node's turn of a session may still write (PostgreSQL only).

Before its first write a turn takes its session's turn epoch (`Store.begin_turn`, one round
trip: it bumps the session's epoch) and, if the bump fenced out a turn still running (on any
node), announces it to the other nodes (`CancelRelay`); the usual turn, whose session's last
turn has ended, publishes nothing. A node that hears of a newer epoch than its own turn's
fences that turn out: it cancels it as a local last-wins would (`CancelRequested` with the
message's reason). The store refuses every
write of an older epoch anyway (`StaleTurn`); the announcement only makes the stop prompt.

A message can arrive while this node's own bump is still under way (the turn has no epoch
yet): it is kept as the newest epoch heard for the session, and the turn compares its epoch
with it once the bump returns, ending as superseded if it lost. A cancel for a session whose
turn runs on another node (`cancel`) bumps the epoch too, and announces it "cancelled".

With a store of one node (`OneNodeTurns`: SQLite, memory) `begin_turn` returns no epoch and
nothing is announced or fenced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from agentos.errors import StaleTurn
from agentos.kernel import CancelRequested
from agentos.runtime.cluster import CancelMessage, CancelRelay
from agentos.runtime.driver import Driver
from agentos.runtime.turn import Turn
from agentos.store.base import OneNodeTurns, Store

if TYPE_CHECKING:
    from agentos.coordination.bus import Bus


class TurnEpochs:
    """Takes, announces and compares the turn epochs of this node's live turns (`live`: by id)."""

    def __init__(self, driver: Driver, store: Store, bus: Bus | None, live: Callable[[str], Turn | None]) -> None:
        self._driver = driver
        self._store = store
        self._live = live
        self.relay = CancelRelay(bus, self.fence_out)
        self.fencing = not isinstance(store, OneNodeTurns)  # PostgreSQL: turn epochs
        # Sessions whose turn here awaits its epoch, and the newest epoch another node announced.
        self._newer: dict[str, int] = {}

    async def start(self) -> None:
        """Hear the other nodes' epoch bumps (with a bus; nothing otherwise)."""
        await self.relay.start()

    async def begin(self, turn: Turn) -> None:
        """Take the session's turn epoch (PostgreSQL) and tell the other nodes.

        Raises: StaleTurn (another node's turn started meanwhile), SessionNotFound, StoreUnavailable.
        """
        self._newer.setdefault(turn.session_id, 0)
        try:
            bumped = await self._store.begin_turn(turn.tenant_id, turn.session_id, turn.turn_id)
        finally:
            newer = self._newer.pop(turn.session_id, 0)
        if bumped is None:
            return
        turn.epoch = bumped.epoch
        if bumped.previous_turn is not None:  # else no node runs a turn of the session to stop
            self.relay.announce(turn.tenant_id, turn.session_id, turn.epoch, "superseded")
        if newer > turn.epoch:
            raise StaleTurn(f"turn {turn.turn_id!r} was superseded while it started")

    async def cancel(self, tenant_id: str, session_id: str) -> str | None:
        """Fence out the session's turn on whichever node runs it; its id, or None if none ran."""
        bumped = await self._store.cancel_turn(tenant_id, session_id)  # fences it out at once
        if bumped is None:
            return None
        self.relay.announce(tenant_id, session_id, bumped.epoch, "cancelled")  # stops it at once
        return bumped.previous_turn

    def fence_out(self, message: CancelMessage) -> None:
        """Another node bumped a session's epoch: cancel this node's older turn of it, if any."""
        turn_id = self._driver.kernel.active_turn(message.session_id)
        turn = self._live(turn_id) if turn_id is not None else None
        if turn is None or turn.tenant_id != message.tenant_id:
            return
        if turn.epoch is None:  # its own bump is under way: it compares when that returns
            if message.session_id in self._newer:
                self._newer[message.session_id] = max(self._newer[message.session_id], message.epoch)
            return
        if turn.epoch < message.epoch:
            turn.fenced_out = True
            self._driver.handle(CancelRequested(message.session_id, message.reason))
