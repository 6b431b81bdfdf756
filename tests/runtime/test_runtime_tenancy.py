"""Sessions and turns of two tenants in one runtime: another tenant's session is a
SessionNotFound for every call, whether it is in memory or only in the store."""

from __future__ import annotations

import pytest

from agentos.errors import SessionNotFound
from agentos.runtime.turn import CollectingSink
from agentos.testing import FakeClock, ScriptedProvider
from tests.runtime.test_runtime import make_runtime

A, B = "acme", "bravo"


async def test_another_tenants_session_is_not_found_for_every_call() -> None:
    runtime = make_runtime(ScriptedProvider(["ok"]), FakeClock())
    session = await runtime.create_session(A, None, {})
    assert session.tenant_id == A
    sid = session.session_id
    for other_sid in (sid, "ses_missing"):
        with pytest.raises(SessionNotFound):
            await runtime.get_session(B, other_sid)
        with pytest.raises(SessionNotFound):
            await runtime.ensure_loaded(B, other_sid)
        with pytest.raises(SessionNotFound):
            await runtime.start_turn(B, other_sid, "hijack")
        with pytest.raises(SessionNotFound):
            runtime.cancel_turn(B, other_sid)
        with pytest.raises(SessionNotFound):
            await runtime.delete_session(B, other_sid)
    # A's session is whole, and its turns work
    sink = CollectingSink()
    await runtime.run_turn(await runtime.start_turn(A, sid, "hi"), sink)
    assert sink.events[-1][1] == "turn.completed"
    history = await runtime.store.history(A, sid, limit=10)
    assert [(m.role, m.tenant_id) for m in history] == [("user", A), ("assistant", A)]  # stamped with the tenant
    assert await runtime.store.history(B, sid, limit=10) == []
    await runtime.delete_session(A, sid)
    with pytest.raises(SessionNotFound):
        await runtime.get_session(A, sid)
