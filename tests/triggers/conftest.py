"""The trigger storages under one contract: `triggers.db` (a real file) and PostgreSQL (a fresh
schema per test, tests/postgres.py)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentos.triggers.records import DeliveryRow, SecretRow, TriggerRow
from agentos.triggers.sqlite_storage import SqliteTriggerStorage
from agentos.triggers.storage import TriggerStorage
from tests.postgres import fresh_schema


@pytest.fixture(params=["sqlite", "postgres"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TriggerStorage]:
    if request.param == "sqlite":
        s: TriggerStorage = SqliteTriggerStorage(tmp_path / "triggers.db")
        await s.open()
        yield s
        await s.close()
        return
    async for config in fresh_schema():
        from agentos.triggers.pg_storage import PgTriggerStorage

        s = PgTriggerStorage(config)
        await s.open()
        yield s
        await s.close()


@pytest.fixture
async def pg_nodes() -> AsyncIterator[list[TriggerStorage]]:
    """Three PostgreSQL storages (three nodes, each with its own pool) on one fresh schema."""
    async for config in fresh_schema():
        from agentos.triggers.pg_storage import PgTriggerStorage

        nodes: list[TriggerStorage] = [PgTriggerStorage(config) for _ in range(3)]
        for node in nodes:
            await node.open()
        yield nodes
        for node in nodes:
            await node.close()


def trigger(tenant: str = "t1", *, created_ms: int = 1000, agent: str = "ops") -> TriggerRow:
    return TriggerRow(
        trigger_id="trg_" + secrets.token_hex(10),
        tenant_id=tenant,
        agent=agent,
        input_template="event: {payload}",
        description="a test trigger",
        secrets=(SecretRow(secrets.token_hex(32), created_ms),),
        created_ms=created_ms,
    )


def delivery(
    t: TriggerRow, webhook_id: str | None = None, *, received_ms: int = 2000, body: bytes = b"{}"
) -> DeliveryRow:
    return DeliveryRow(
        tenant_id=t.tenant_id,
        trigger_id=t.trigger_id,
        webhook_id=webhook_id or "msg_" + secrets.token_hex(8),
        run_id="run_" + secrets.token_hex(10),
        payload=body,
        received_ms=received_ms,
    )
