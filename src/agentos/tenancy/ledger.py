"""The usage ledger as the router sees it: `StoreLedger` implements `agentos.providers.metering.Ledger`.

The router (below the store's readers) hands over one `Spend` per model call that answered;
this turns it into the store's `UsageRow` and queues it on the store's ledger lane, which
commits it in a batch with the rows of the calls that ended in the same few milliseconds.
`record` never awaits and never raises: a model call that answered is not failed afterwards
because its row could not be queued (the store closing, its writer dead); such a row is logged
and counted in `statistics().lost_total`.

Usage::

    ledger = StoreLedger(store)
    router = Router(..., ledger=ledger)   # calls ledger.record(spend) after each call
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agentos.errors import StoreError
from agentos.providers.metering import Spend
from agentos.store.base import Store
from agentos.store.ledger import UsageRow

log = logging.getLogger("agentos.ledger")


@dataclass(frozen=True, slots=True)
class LedgerStatistics:
    recorded_total: int  # rows handed to the store's writer
    lost_total: int  # rows the store refused (closed or dead writer): logged, not stored


def usage_row(spend: Spend) -> UsageRow:
    """The ledger row of one call: who it was for, what it used, what it cost (None: no price)."""
    who, usage = spend.context, spend.usage
    return UsageRow(
        tenant_id=who.tenant_id,
        key_id=who.key_id,
        agent=who.agent,
        run_id=who.run_id,
        session_id=who.session_id,
        model=spend.model,
        target=spend.target,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost=spend.cost,
        at_ms=spend.at_ms,
    )


class StoreLedger:
    """Each `Spend` as one row of the store's usage ledger (`Store.record_usage`)."""

    __slots__ = ("_store", "_recorded", "_lost")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._recorded = 0
        self._lost = 0

    def record(self, spend: Spend) -> None:
        """Queue the call's row; returns at once, never raises (a refused row is logged and counted)."""
        try:
            self._store.record_usage(usage_row(spend))
        except StoreError as exc:
            self._lost += 1
            log.warning("usage ledger: a row of tenant %r was not stored (%s)", spend.context.tenant_id, exc)
            return
        self._recorded += 1

    def statistics(self) -> LedgerStatistics:
        return LedgerStatistics(self._recorded, self._lost)
