"""Whether a followed turn exists: one look at a store only this node writes, a short wait at a
shared one (`TurnStreams.check_exists`). Real SQLite; the store below only counts its reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentos.config import StoreConfig
from agentos.errors import NotFound
from agentos.ids import new_id
from agentos.runtime.streams import TurnStreams
from agentos.store.records import EventRecord, SessionRecord
from agentos.store.sqlite import SQLiteStore


class LookedStore(SQLiteStore):
    """The real SQLite store, counting the turn lookups it answers."""

    looks = 0

    async def list_turn_events(self, *args: Any, **kwargs: Any) -> list[EventRecord]:
        self.looks += 1
        return await super().list_turn_events(*args, **kwargs)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LookedStore]:
    # A put lingers 5 s in its lane for company (as a put under load does) unless a read takes it along.
    s = LookedStore(tmp_path, StoreConfig(put_linger_ms=5_000))
    await s.start()
    await s.create_session(SessionRecord(tenant_id="t", session_id="s"))
    yield s
    await s.close()


def sole_writer(store: LookedStore) -> TurnStreams:
    return TurnStreams(store, live=lambda _turn_id: False, shared_store=False)


async def test_an_unknown_turn_is_a_404_at_the_first_look(store: LookedStore) -> None:
    with pytest.raises(NotFound) as raised:
        await sole_writer(store).check_exists("t", "s", new_id("turn"))
    assert raised.value.code == "turn_not_found"
    assert store.looks == 1  # nothing to wait for: no other node writes this store


@pytest.mark.parametrize("guess", ["turn_nope", "x" * 300, "turn_" + "0" * 35, "TURN_" + "0" * 36, "turn_" + "g" * 36])
async def test_an_id_no_node_makes_is_a_404_without_a_look_even_at_a_shared_store(
    store: LookedStore, guess: str
) -> None:
    """A scanner's guesses hold no request open for the shared store's 1.5 s look."""
    shared = TurnStreams(store, live=lambda _turn_id: False, shared_store=True)
    with pytest.raises(NotFound):
        await shared.check_exists("t", "s", guess)
    assert store.looks == 0


async def test_a_turn_whose_events_are_only_queued_is_found_at_the_first_look(store: LookedStore) -> None:
    """What makes one look enough: the read is answered after the writes queued before it."""
    turn_id = new_id("turn")
    store.add_event(EventRecord(tenant_id="t", session_id="s", turn_id=turn_id, type="turn.started", data={}, seq=1))
    await sole_writer(store).check_exists("t", "s", turn_id)
    assert store.looks == 1
    with pytest.raises(NotFound):  # the same turn named by another tenant
        await sole_writer(store).check_exists("u", "s", turn_id)
