"""`wait_event` never swallows a cancel, even one that meets the event or the timeout;
`wait_tasks` cancels what is still running when its time is up; a `Mailbox` reader wakes for
each item and ends once it is closed and empty.

Each race is staged step by step on the loop (`sleep(0)` only yields), so the outcome is
deterministic; `asyncio.wait_for` loses the cancel in the first race on Python 3.11.
"""

from __future__ import annotations

import asyncio

import pytest

from agentos.waiting import IdlePoll, Mailbox, wait_event, wait_tasks


class _Waiter:
    """Waits once, as our background loops do between rounds; a swallowed cancel shows as a round."""

    def __init__(self, event: asyncio.Event, timeout_s: float) -> None:
        self.event, self.timeout_s = event, timeout_s
        self.rounds = 0

    async def run(self) -> None:
        await wait_event(self.event, self.timeout_s)
        self.rounds += 1


async def _started(waiter: _Waiter) -> asyncio.Task[None]:
    task = asyncio.create_task(waiter.run())
    await asyncio.sleep(0)  # yields once: the task is now inside the wait
    assert not task.done() and waiter.rounds == 0
    return task


async def test_a_cancel_in_the_step_the_event_is_set_propagates() -> None:
    waiter = _Waiter(asyncio.Event(), timeout_s=60.0)
    task = await _started(waiter)
    waiter.event.set()
    task.cancel()  # the same loop step: where wait_for returns the result instead
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waiter.rounds == 0


async def test_a_cancel_in_the_step_the_time_runs_out_propagates() -> None:
    waiter = _Waiter(asyncio.Event(), timeout_s=0.0)  # the expiry is due in the next loop step
    task = await _started(waiter)
    task.cancel()  # meets the expiry: the timeout must not turn it into a TimeoutError, or a round
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waiter.rounds == 0


async def test_a_cancel_before_the_event_propagates() -> None:
    waiter = _Waiter(asyncio.Event(), timeout_s=60.0)
    task = await _started(waiter)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_it_tells_a_set_event_from_a_timeout() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.0) is False
    event.set()
    assert await wait_event(event, 0.0) is True
    assert await wait_event(event, None) is True  # set: no wait at all


async def test_a_set_event_ends_the_wait_long_before_the_timeout() -> None:
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_event(event, 60.0))
    await asyncio.sleep(0)
    event.set()
    async with asyncio.timeout(5.0):  # the wait itself must end at the set, not at 60 s
        assert await waiting is True


def test_an_idle_poll_doubles_while_nothing_is_found_and_resets_on_work() -> None:
    poll = IdlePoll(1.0, 16.0)
    waits = []
    for _ in range(6):
        poll.found(False)
        waits.append(poll.wait_s(0))
    assert waits == [2.0, 4.0, 8.0, 16.0, 16.0, 16.0]
    poll.found(True)
    assert poll.wait_s(0) == 1.0
    poll.found(False)
    poll.reset()  # work added on this node
    assert poll.wait_s(0) == 1.0


def test_an_idle_poll_never_waits_past_a_due_time_it_knows() -> None:
    poll = IdlePoll(1.0, 16.0)
    for _ in range(5):
        poll.found(False)
    poll.due_at(3_500)
    poll.due_at(9_000)
    assert poll.wait_s(1_000) == 2.5
    assert poll.wait_s(3_500) == 0.0  # due now: forgotten once said
    assert poll.wait_s(3_500) == 5.5
    assert poll.wait_s(20_000) == 0.0
    assert poll.wait_s(20_000) == 16.0


def test_an_idle_poll_waits_no_longer_than_the_store_said_but_at_least_its_base() -> None:
    poll = IdlePoll(1.0, 16.0)
    for _ in range(5):
        poll.found(False)
    poll.seen_due(10_000)  # another node's lease ends then
    assert poll.wait_s(1_000) == 9.0
    assert poll.wait_s(9_800) == 1.0  # due in 0.2 s, or already: not sooner than base_s
    assert poll.wait_s(12_000) == 1.0
    poll.seen_due(None)  # the next look found nothing queued
    assert poll.wait_s(12_000) == 16.0


async def test_wait_tasks_cancels_only_what_outlives_the_timeout() -> None:
    stuck = asyncio.create_task(asyncio.Event().wait())
    quick = asyncio.create_task(asyncio.sleep(0))

    async def failing() -> None:
        raise ValueError("its own failure stays in the task")

    failed = asyncio.create_task(failing())
    cancelled = await wait_tasks([stuck, quick, failed], timeout_s=0.05)
    assert cancelled == {stuck} and stuck.cancelled()
    assert quick.done() and not quick.cancelled() and isinstance(failed.exception(), ValueError)
    assert await wait_tasks([], timeout_s=0.05) == set()


async def test_a_mailbox_reader_waits_for_each_item_and_ends_once_closed_and_empty() -> None:
    box: Mailbox[int] = Mailbox()
    reader = asyncio.create_task(box.get())
    await asyncio.sleep(0)  # yields once: the reader now waits
    assert not reader.done()
    box.put(1)
    assert await reader == 1
    box.put(2)
    box.put(3)
    box.close()
    assert len(box) == 2
    assert [await box.get(), await box.get(), await box.get()] == [2, 3, None]  # the items first, then the end


async def test_a_cleared_and_closed_mailbox_wakes_its_reader_with_none() -> None:
    box: Mailbox[int] = Mailbox()
    reader = asyncio.create_task(box.get())
    await asyncio.sleep(0)
    box.put(1)
    box.clear()
    box.close()
    assert await reader is None
