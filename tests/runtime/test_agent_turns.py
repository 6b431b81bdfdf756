"""Agent turns and chat turns share one kernel: permits, with the real run service on fakes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from agentos.config import load_settings
from agentos.runtime.turn import CollectingSink
from agentos.services import Services, open_services
from agentos.testing import FakeClock, ScriptedProvider


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    settings = load_settings(
        None,
        environ={},
        overrides={
            "store.enabled": False,
            "kernel.concurrency_limit": 1,
            "kernel.permit_wait_timeout_s": 10,
        },
    )
    settings = msgspec.structs.replace(settings, agents={"helper": {}})
    built = await open_services(settings, provider=ScriptedProvider(hang=True), clock=FakeClock())
    yield built
    await built.close(1.0)


async def plain_then_agent(services: Services) -> tuple[asyncio.Task[None], asyncio.Task[None], CollectingSink]:
    """A plain turn holding the only permit (its provider hangs), then an agent turn."""
    runtime, provider = services.runtime, services.provider
    assert isinstance(provider, ScriptedProvider)
    plain = (await runtime.create_session("default", "default", {})).session_id
    agent = (await runtime.create_session("default", "helper", {})).session_id
    plain_task = asyncio.create_task(
        runtime.run_turn(await runtime.start_turn("default", plain, "hold"), CollectingSink())
    )
    await provider.opened.wait()
    agent_sink = CollectingSink()
    agent_task = asyncio.create_task(runtime.run_turn(await runtime.start_turn("default", agent, "go"), agent_sink))
    return plain_task, agent_task, agent_sink


async def test_an_agent_turn_gets_the_permit_a_plain_turn_releases(services: Services) -> None:
    """Defect 1 of issue 7: the agent turn queued for a permit of its own, kept it, and its run's
    model call then waited behind it until provider_limit_timeout."""
    runtime, provider = services.runtime, services.provider
    assert isinstance(provider, ScriptedProvider)
    plain_task, agent_task, agent_sink = await plain_then_agent(services)
    stats = runtime.kernel.statistics()
    assert stats.permits_in_use == 1 and stats.in_flight_turns == 2
    provider.release.set()  # the plain turn ends and gives its permit back
    async with asyncio.timeout(10):
        await plain_task
        await agent_task
    assert agent_sink.events[-1][1] == "turn.completed", agent_sink.events[-1]
    assert len(provider.requests) == 2  # the run's model call got the permit, no timeout needed
    final = runtime.kernel.statistics()
    assert final.permits_in_use == 0 and final.in_flight_turns == 0 and final.permit_timeouts_total == 0


async def test_a_run_waiting_for_its_permit_fails_cleanly_at_the_permit_deadline(services: Services) -> None:
    runtime, provider = services.runtime, services.provider
    assert isinstance(provider, ScriptedProvider)
    plain_task, agent_task, agent_sink = await plain_then_agent(services)
    async with asyncio.timeout(10):
        # Yields (no time passes) until the run's model call queues: the kernel has no event for
        # that, and a hook on the hot path only for this test would cost every turn.
        while runtime.kernel.statistics().waiting_for_permit == 0:  # noqa: ASYNC110
            await asyncio.sleep(0)
    assert isinstance(services.driver.clock, FakeClock)
    services.driver.clock.advance(10)
    runtime.tick()
    async with asyncio.timeout(10):
        await agent_task
    last = agent_sink.events[-1]
    assert last[1] == "turn.failed" and "provider_limit_timeout" in last[2]["reason"]
    assert runtime.kernel.statistics().in_flight_turns == 1  # only the plain turn: the count stayed right
    provider.release.set()
    async with asyncio.timeout(10):
        await plain_task
    assert runtime.kernel.statistics().in_flight_turns == 0
