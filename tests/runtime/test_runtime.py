"""The runtime around the kernel, with fakes: a scripted provider, the memory store, fake time.

Deadlines fire because the test advances the FakeClock and ticks, never because time passed."""

from __future__ import annotations

import asyncio

import pytest

from agentos.config import load_settings
from agentos.errors import AdmissionRejected
from agentos.kernel import Kernel
from agentos.metrics import Metrics
from agentos.runtime.driver import Driver
from agentos.runtime.runtime import Runtime, kernel_limits
from agentos.runtime.turn import CollectingSink
from agentos.store.memory import MemoryStore
from agentos.testing import FakeClock, ScriptedProvider


def make_runtime(provider: ScriptedProvider, clock: FakeClock, **overrides: object) -> Runtime:
    settings = load_settings(None, environ={}, overrides={"store.enabled": False, **overrides})
    driver = Driver(Kernel(kernel_limits(settings)), clock)
    return Runtime(settings, MemoryStore(), provider, Metrics(), driver=driver)


def names(sink: CollectingSink) -> list[str]:
    return [name for _, name, _ in sink.events]


async def test_a_turn_streams_and_stores_its_answer() -> None:
    provider, clock = ScriptedProvider(["x ", "y"]), FakeClock()
    runtime = make_runtime(provider, clock)
    session = await runtime.create_session("default", "default", {})
    sink = CollectingSink()
    await runtime.run_turn(await runtime.start_turn("default", session.session_id, "hi"), sink)
    assert names(sink) == ["turn.started", "token", "token", "turn.completed"]
    history = await runtime.store.history("default", session.session_id, limit=10)
    assert [(m.role, m.content) for m in history] == [("user", "hi"), ("assistant", "x y")]
    assert provider.requests[0].messages == [{"role": "user", "content": "hi"}]


async def test_last_wins_aborts_the_first_upstream() -> None:
    provider, clock = ScriptedProvider(hang=True), FakeClock()
    runtime = make_runtime(provider, clock)
    sid = (await runtime.create_session("default", "default", {})).session_id
    first_sink = CollectingSink()
    first = asyncio.create_task(runtime.run_turn(await runtime.start_turn("default", sid, "one"), first_sink))
    await provider.opened.wait()
    second_turn = await runtime.start_turn("default", sid, "two")
    await first
    assert names(first_sink)[-1] == "turn.cancelled"
    assert first_sink.events[-1][2]["reason"] == "superseded"
    assert provider.aborted == 1
    provider.release.set()
    second_sink = CollectingSink()
    await runtime.run_turn(second_turn, second_sink)
    assert names(second_sink)[-1] == "turn.completed"
    assert runtime.kernel.statistics().permits_in_use == 0


async def test_a_permit_wait_times_out_on_fake_time() -> None:
    provider, clock = ScriptedProvider(hang=True), FakeClock()
    runtime = make_runtime(provider, clock, **{"kernel.concurrency_limit": 1, "kernel.permit_wait_timeout_s": 10})
    a = (await runtime.create_session("default", "default", {})).session_id
    b = (await runtime.create_session("default", "default", {})).session_id
    holder = asyncio.create_task(runtime.run_turn(await runtime.start_turn("default", a, "hold"), CollectingSink()))
    await provider.opened.wait()
    waiter_sink = CollectingSink()
    waiter = asyncio.create_task(runtime.run_turn(await runtime.start_turn("default", b, "wait"), waiter_sink))
    clock.advance(9.9)
    runtime.tick()
    stats = runtime.kernel.statistics()
    assert stats.waiting_for_permit == 1 and stats.permit_timeouts_total == 0  # not yet timed out
    clock.advance(0.1)
    runtime.tick()
    await waiter
    assert names(waiter_sink)[-1] == "turn.failed"
    assert waiter_sink.events[-1][2]["reason"] == "provider_limit_timeout"
    provider.release.set()
    await holder
    assert runtime.kernel.statistics().in_flight_turns == 0


async def test_idle_sessions_are_evicted_on_fake_time() -> None:
    provider, clock = ScriptedProvider(), FakeClock()
    runtime = make_runtime(provider, clock, **{"kernel.session_ttl_secs": 60})
    sid = (await runtime.create_session("default", "default", {})).session_id
    await runtime.run_turn(await runtime.start_turn("default", sid, "hi"), CollectingSink())
    clock.advance(59)
    runtime.tick()
    assert runtime.kernel.has_session(sid)
    clock.advance(1)
    runtime.tick()
    assert not runtime.kernel.has_session(sid)
    assert await runtime.store.get_session("default", sid) is None  # no store: nothing to come back from


async def test_admission_is_decided_before_any_work() -> None:
    provider, clock = ScriptedProvider(hang=True), FakeClock()
    runtime = make_runtime(provider, clock, **{"kernel.max_in_flight_turns": 1})
    a = (await runtime.create_session("default", "default", {})).session_id
    b = (await runtime.create_session("default", "default", {})).session_id
    held = asyncio.create_task(runtime.run_turn(await runtime.start_turn("default", a, "x"), CollectingSink()))
    await provider.opened.wait()
    with pytest.raises(AdmissionRejected) as rejected:
        await runtime.start_turn("default", b, "y")
    assert rejected.value.retry_after_s == 1
    assert len(provider.requests) == 1
    runtime.cancel_turn("default", a)
    await held
    assert runtime.kernel.statistics().in_flight_turns == 0


async def hanging_turn(**overrides: object) -> tuple[Runtime, str, CollectingSink, asyncio.Task[None]]:
    """A runtime on fakes with one turn streaming from a provider that hangs until released."""
    provider = ScriptedProvider(hang=True)
    runtime = make_runtime(provider, FakeClock(), **overrides)
    sid = (await runtime.create_session("default", "default", {})).session_id
    sink = CollectingSink()
    task = asyncio.create_task(runtime.run_turn(await runtime.start_turn("default", sid, "x"), sink))
    await provider.opened.wait()
    return runtime, sid, sink, task


async def test_drain_cancels_what_does_not_finish() -> None:
    runtime, _, sink, task = await hanging_turn()
    await runtime.drain(0.01)
    await task
    assert sink.events[-1][2]["reason"] == "shutdown"
    assert not runtime.accepting


async def test_an_outside_cancel_is_never_swallowed_by_a_first_party_one() -> None:
    """Defect 4 of issue 7: a shutdown cancel arriving with a last-wins cancel was swallowed."""
    runtime, sid, sink, task = await hanging_turn()
    runtime.cancel_turn("default", sid)  # first party: cancels the task with a reason
    task.cancel()  # and the server cancels it too, in the same loop iteration
    with pytest.raises(asyncio.CancelledError):
        await task
    assert names(sink)[-1] == "turn.cancelled"
    assert runtime.kernel.statistics().in_flight_turns == 0


async def test_a_first_party_cancel_alone_ends_the_turn_and_returns() -> None:
    runtime, sid, sink, task = await hanging_turn()
    runtime.cancel_turn("default", sid)
    await task  # returns: our own cancel is not the caller's
    assert sink.events[-1][2]["reason"] == "cancelled"


class StallingSink(CollectingSink):
    """Delivers every event but the terminal one, which waits until the test cancels the task."""

    def __init__(self) -> None:
        super().__init__()
        self.sending_terminal = asyncio.Event()

    async def send(self, event_id: str, name: str, data: dict[str, object]) -> None:
        if name == "turn.completed":
            self.sending_terminal.set()
            await asyncio.Event().wait()  # a slow client: the write of the last event never drains
        await super().send(event_id, name, data)


async def test_a_cancel_while_turn_completed_is_sent_keeps_the_committed_answer() -> None:
    """The handler's task cancelled after the answer committed (its client read `turn.completed`
    and left while the write drained): the stored answer stays completed, never rewritten as a
    cancelled partial one (CI lost 15 acknowledged answers to this on a loaded machine)."""
    provider, clock = ScriptedProvider(["x ", "y"]), FakeClock()
    runtime = make_runtime(provider, clock)
    sid = (await runtime.create_session("default", "default", {})).session_id
    sink = StallingSink()
    task = asyncio.create_task(runtime.run_turn(await runtime.start_turn("default", sid, "hi"), sink))
    await asyncio.wait_for(sink.sending_terminal.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    history = await runtime.store.history("default", sid, limit=10)
    assert [(m.role, m.content, m.status) for m in history] == [
        ("user", "hi", "completed"),
        ("assistant", "x y", "completed"),
    ]
    assert "turn.cancelled" not in names(sink)
    assert runtime.kernel.statistics().in_flight_turns == 0
