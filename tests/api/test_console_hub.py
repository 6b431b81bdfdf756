"""The console hub's parts that need no server: a listener's bounded queue, and who gets what."""

from __future__ import annotations

import asyncio
from typing import Any

from agentos.api.console_stream import MAX_QUEUED, ConsoleHub, Listener
from agentos.metrics import Metrics
from agentos.tenancy.principal import ALL_SCOPES, Principal, Scope

ALICE = Principal("alice", "k1", frozenset({Scope.RUNS_READ}))
ALICE_NO_RUNS = Principal("alice", "k2", frozenset({Scope.SESSIONS_READ}))
BOB = Principal("bob", "k3", frozenset({Scope.RUNS_READ}))
ADMIN = Principal("ops", "k4", ALL_SCOPES)


async def test_a_listener_that_does_not_read_is_emptied_and_told_to_resync() -> None:
    listener = Listener(ALICE)
    for i in range(MAX_QUEUED + 3):
        listener.offer("metrics", {"i": i})
    listener.close()
    items = [item async for item in listener]
    assert items == [("resync", {}), ("metrics", {"i": MAX_QUEUED + 1}), ("metrics", {"i": MAX_QUEUED + 2})]


class _Runs:
    """What the hub needs of a RunService: `watch`."""

    def __init__(self) -> None:
        self.watchers: list[Any] = []

    def watch(self, watcher: Any) -> Any:
        self.watchers.append(watcher)
        return lambda: self.watchers.remove(watcher)


async def test_run_events_go_to_the_runs_tenant_with_runs_read_and_the_watch_lives_with_the_tabs() -> None:
    runs = _Runs()
    hub = ConsoleHub(Metrics(), lambda tenant: {"tenant": tenant}, runs.watch, interval_s=3600)
    tabs = {who: hub.subscribe(who) for who in (ALICE, ALICE_NO_RUNS, BOB, ADMIN)}
    assert len(runs.watchers) == 1  # one watch for every tab
    runs.watchers[0]("alice", "run_1", "human.requested", {"kind": "question"})
    hub.publish_metrics()
    await hub.close()
    got = {who.key_id: [item async for item in tab] for who, tab in tabs.items()}
    assert [name for name, _ in got["k1"]] == ["run", "metrics"]
    assert got["k1"][0][1] == {"run_id": "run_1", "type": "human.requested", "data": {"kind": "question"}}
    assert [name for name, _ in got["k2"]] == ["metrics"]  # no runs:read, no run events
    assert [name for name, _ in got["k3"]] == ["metrics"]  # another tenant's run: nothing
    assert got["k3"][0][1]["tenant"] == {"tenant": "bob"} and "server" not in got["k3"][0][1]
    assert "server" in got["k4"][0][1]  # the admin's has the server's metrics
    assert runs.watchers == []  # closed: the watch is gone


async def test_the_timer_runs_only_while_a_tab_listens() -> None:
    hub = ConsoleHub(Metrics(), lambda tenant: {}, None, interval_s=3600)
    tab = hub.subscribe(ALICE)
    timer = hub._timer
    assert timer is not None and not timer.done()
    hub.unsubscribe(tab)
    assert hub._timer is None
    await asyncio.wait({timer})
    assert timer.cancelled()


async def test_a_tab_that_comes_after_close_gets_a_stream_that_ends() -> None:
    hub = ConsoleHub(Metrics(), lambda tenant: {}, None, interval_s=3600)
    await hub.close()
    tab = hub.subscribe(ALICE)
    assert [item async for item in tab] == [] and hub._timer is None
