"""Memory given back after TTL evictions: when a trim is due, one trim per batch of evictions,
the interval between trims, and the platform without glibc (one log line, no trim)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentos.runtime.reclaim import Allocator, Reclaimer, heap_figures, trim_due
from agentos.runtime.turn import CollectingSink
from agentos.testing import FakeClock, ScriptedProvider
from tests.runtime.test_runtime import make_runtime


def test_a_trim_is_due_after_enough_evictions_and_not_before_the_interval() -> None:
    assert trim_due(pending=9, after_evictions=10, last_at=float("-inf"), interval_s=30, now=0) is None
    assert trim_due(pending=10, after_evictions=10, last_at=float("-inf"), interval_s=30, now=0) == 0.0
    assert trim_due(pending=10, after_evictions=10, last_at=100, interval_s=30, now=110) == 20.0
    assert trim_due(pending=10, after_evictions=10, last_at=100, interval_s=30, now=140) == 0.0
    assert trim_due(pending=10**6, after_evictions=0, last_at=0, interval_s=30, now=100) is None  # off


def test_the_heap_figures_are_the_allocators() -> None:
    figures = heap_figures(Allocator())
    assert figures["rss_bytes"] > 0 and figures["allocated_blocks"] > 0
    assert figures["tracemalloc"] is None  # not started by the test run
    assert figures["malloc"] is None or figures["malloc"]["in_use_bytes"] > 0  # glibc: mallinfo2
    assert heap_figures(Allocator(use_libc=False))["malloc"] is None


@pytest.mark.skipif(not Allocator().available, reason="malloc_trim is glibc's")
async def test_the_reaper_s_evictions_trim_once_then_wait_for_the_interval() -> None:
    clock = FakeClock()
    runtime = make_runtime(
        ScriptedProvider(),
        clock,
        **{"kernel.session_ttl_secs": 60, "memory.trim_after_evictions": 3, "memory.trim_interval_s": 3600},
    )
    for _ in range(5):
        sid = (await runtime.create_session("default", "default", {})).session_id
        await runtime.run_turn(await runtime.start_turn("default", sid, "hi"), CollectingSink())
    reclaimer = runtime.reclaimer
    clock.advance(60)
    trimmed = asyncio.create_task(reclaimer.trimmed.wait())
    runtime.tick()  # evicts all five: one trim, after the tick
    await asyncio.wait_for(trimmed, 5.0)
    assert runtime.kernel.statistics().evicted_total == 5
    assert reclaimer.statistics.trims == 1 and reclaimer.statistics.evicted_since == 0
    assert b"agentos_memory_trims_total 1.0" in runtime.metrics.render()
    for _ in range(3):
        await runtime.create_session("default", "default", {})
    clock.advance(60)
    runtime.tick()  # three more within the hour: planned, not run
    assert reclaimer.trim_planned and reclaimer.statistics.trims == 1
    reclaimer.close()
    assert not reclaimer.trim_planned


async def test_without_glibc_evictions_say_so_once_and_trim_nothing(caplog: pytest.LogCaptureFixture) -> None:
    reclaimer = Reclaimer(FakeClock(), after_evictions=2, interval_s=1.0, allocator=Allocator(use_libc=False))
    caplog.set_level(logging.INFO, "agentos.memory")
    for _ in range(6):
        reclaimer.evicted()
    assert not reclaimer.trim_planned and reclaimer.statistics.trims == 0
    assert [r.getMessage() for r in caplog.records if "malloc_trim" in r.getMessage()] == [
        "memory: no glibc malloc_trim on this platform; evicted sessions' memory is reused, not returned"
    ]
    assert reclaimer.figures()["available"] is False and reclaimer.figures()["evicted_since_last"] == 0


async def test_trimming_off_never_plans_a_trim() -> None:
    clock = FakeClock()
    runtime = make_runtime(
        ScriptedProvider(), clock, **{"kernel.session_ttl_secs": 60, "memory.trim_after_evictions": 0}
    )
    for _ in range(3):
        await runtime.create_session("default", "default", {})
    clock.advance(60)
    runtime.tick()
    assert runtime.kernel.statistics().evicted_total == 3
    assert not runtime.reclaimer.trim_planned and runtime.reclaimer.figures()["evicted_since_last"] == 3
