"""`StoreLedger`, the router's `Ledger`: a `Spend` becomes one ledger row of the real SQLite
store, `record` never awaits, and a store that refuses the row costs the call nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agentos.config import StoreConfig
from agentos.providers.base import CallContext, Usage
from agentos.providers.metering import Ledger, Spend
from agentos.store.ledger import UsageQuery
from agentos.store.sqlite import SQLiteStore
from agentos.tenancy.ledger import StoreLedger, usage_row

WHO = CallContext(tenant_id="acme", key_id="k1", agent="helper", run_id="r1", session_id="s1", call_id="t1")
SPEND = Spend(
    context=WHO,
    model="m",
    target="openai/gpt",
    usage=Usage(prompt_tokens=100, completion_tokens=20, cache_read_tokens=30, cache_write_tokens=5),
    cost=0.125,
    at_ms=1_700_000_000_000,
)


def test_a_spend_is_one_row() -> None:
    who, usage = ("acme", "k1", "helper", "r1", "s1"), (100, 20, 30, 5)
    assert usage_row(SPEND).params() == (*who, "m", "openai/gpt", *usage, 0.125, 1_700_000_000_000)
    assert usage_row(replace(SPEND, cost=None)).cost is None  # no price: none invented


async def test_recorded_into_the_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path, StoreConfig())
    await store.start()
    ledger: Ledger = StoreLedger(store)  # the protocol the router takes
    for _ in range(3):
        ledger.record(SPEND)
    [total] = await store.usage_totals(UsageQuery(tenant_id="acme", group_by=("run", "target"), from_ms=0, to_ms=2**62))
    assert (total.run, total.target, total.calls) == ("r1", "openai/gpt", 3)
    assert (total.prompt_tokens, total.cache_read_tokens, total.cost) == (300, 90, 0.375)
    await store.close()
    assert (tmp_path / "ledger.db").exists()


async def test_a_closed_store_loses_the_row_without_failing_the_call(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path, StoreConfig())
    await store.start()
    ledger = StoreLedger(store)
    ledger.record(SPEND)
    await store.close()
    ledger.record(SPEND)  # refused by the closed writer: logged and counted, not raised
    stats = ledger.statistics()
    assert (stats.recorded_total, stats.lost_total) == (1, 1)
