"""The runtime hands each session's tenant to the kernel: its turns draw on that tenant's share
and count against its caps (scripted provider, memory store, fake time)."""

from __future__ import annotations

import asyncio

import pytest

from agentos.config.tenants import TenantLimits
from agentos.errors import AdmissionRejected
from agentos.kernel import TenantUsage
from agentos.runtime.turn import CollectingSink
from agentos.store.records import SessionRecord
from agentos.testing import FakeClock, ScriptedProvider
from tests.runtime.test_runtime import make_runtime


async def test_a_sessions_turn_holds_its_tenants_permit_until_it_ends() -> None:
    provider, clock = ScriptedProvider(hang=True), FakeClock()
    runtime = make_runtime(provider, clock)
    await runtime.store.create_session(SessionRecord(session_id="ses_acme", tenant_id="acme"))
    turn = await runtime.start_turn("acme", "ses_acme", "hi")
    task = asyncio.create_task(runtime.run_turn(turn, CollectingSink()))
    await provider.opened.wait()
    assert runtime.kernel.tenant_usage("acme") == TenantUsage(1, 0, 1, 0)
    assert runtime.kernel.tenant_usage("default") == TenantUsage(0, 0, 0, 0)
    provider.release.set()
    await task
    assert runtime.kernel.tenant_usage("acme") == TenantUsage(0, 0, 0, 0)


async def test_over_its_tenants_cap_a_turn_is_refused_with_the_tenants_code() -> None:
    provider, clock = ScriptedProvider(hang=True), FakeClock()
    runtime = make_runtime(provider, clock)
    runtime.driver.configure_tenant("acme", TenantLimits(max_concurrent_turns=1))
    for sid in ("ses_a1", "ses_a2"):
        await runtime.store.create_session(SessionRecord(session_id=sid, tenant_id="acme"))
    first = asyncio.create_task(runtime.run_turn(await runtime.start_turn("acme", "ses_a1", "one"), CollectingSink()))
    with pytest.raises(AdmissionRejected) as refused:
        await runtime.start_turn("acme", "ses_a2", "two")
    assert (refused.value.status, refused.value.code, refused.value.retry_after_s) == (
        429,
        "tenant_concurrent_turns",
        1,
    )
    other = (await runtime.create_session("default", "default", {})).session_id  # another tenant is not capped
    second = asyncio.create_task(
        runtime.run_turn(await runtime.start_turn("default", other, "three"), CollectingSink())
    )
    provider.release.set()
    await asyncio.gather(first, second)
    assert runtime.kernel.statistics().in_flight_turns == 0
