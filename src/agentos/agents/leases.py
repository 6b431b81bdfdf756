"""Run leases on PostgreSQL: renewing this node's, taking over expired ones, and the requests
other nodes leave for this node's runs.

Theory of operation. Two tasks:
1. every `coordination.run_lease_s / 3`, renewals (a task of their own, so that resuming many
   runs never delays them): every lease this node holds and that has not expired gets
   `expires_at = now() + run_lease_s` (the database's clock); a run whose lease was not renewed
   is lost (`on_lost`): another node took it over, or may at any moment, while this one was
   paused or cut off (its writes are fenced already or will be);
2. every third of the lease, takeover of expired leases (`FOR UPDATE SKIP LOCKED`, so nodes
   never claim the same run; the epoch goes up by one, which fences the old owner): a root run
   with its child runs, so a parent and the children it waits for stay on one node. Each node
   claims at most its share, ceil(expired roots / live nodes) (`run_nodes`, renewed with the
   leases), then comes back after a short random pause while some are left: the runs of a
   node that died are spread over the survivors instead of all going to whichever asks first.
   `on_claimed` resumes them from the journal exactly as a restart does. Then, and whenever a
   NOTIFY on the schema's `agentos_run_requests_<schema>` (`PgJournalStore.channel`: two
   installations in one database never wake each other), heard on a connection of its own, not
   the pool's, wakes it (or the cluster does, `wake`: a run that kept an answer until it waits
   asked its next question), the requests (answers, cancels, terminates) other nodes wrote
   into `run_requests` for this node's runs (`on_requests`). A request is read, applied, and
   only then deleted (through the journal's writer, so after the writes that applied it): one
   the run cannot take yet (not resumed here, still working towards the wait an answer is for,
   the node closing, the database away) stays in the table for the next round or the next
   owner; one the run refuses for good keeps its row with the error in `outcome`, which the
   sender reads (and deletes) to answer its client as the owner would have. The run's end
   deletes what is left for it.

A failure of the database is logged and retried on the next tick. If it lasts longer than the
lease, other nodes take the runs over; this node learns at its next renewal, and meanwhile its
writes to those runs fail their fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from agentos.errors import ConfigError, StoreUnavailable
from agentos.journal.postgres import DB_NOW_MS
from agentos.store import pg_pool
from agentos.store.pg_health import outage_of
from agentos.store.pg_pool import pooled
from agentos.waiting import wait_event, wait_tasks

if TYPE_CHECKING:
    import asyncpg

    from agentos.journal.postgres import PgJournalStore

log = logging.getLogger("agentos.agents")

CLOSE_WAIT_S = 10.0  # for the step under way when closing
CLAIM_MAX = 200  # runs taken over per tick: a node that inherits many resumes them in waves
AGAIN_S = (0.05, 0.25)  # the pause before claiming again while expired runs are left (random: nodes interleave)
_SECS = "make_interval(secs => $2)"
# Only a lease still valid is renewed (one that expired may be claimed at this very moment), and
# none that a batch of this node's journal writer holds FOR SHARE (waiting for it could deadlock
# with a batch that ends a run): those are only checked, and renewed at the next round.
# The node's own row is renewed in the same statement: it counts among the live nodes.
_RENEW = f"""WITH alive AS (INSERT INTO run_nodes (node, expires_at) VALUES ($1, now() + {_SECS})
  ON CONFLICT (node) DO UPDATE SET expires_at = excluded.expires_at)
UPDATE run_leases SET expires_at = now() + {_SECS} WHERE run_id IN (
  SELECT run_id FROM run_leases WHERE owner = $1 AND run_id = any($3::text[]) AND expires_at > now()
  FOR UPDATE SKIP LOCKED) RETURNING run_id, epoch"""
_HELD = "SELECT run_id, epoch FROM run_leases WHERE owner = $1 AND run_id = any($2::text[]) AND expires_at > now()"
_CLAIM = f"""UPDATE run_leases l SET owner = $1, epoch = l.epoch + 1, expires_at = now() + {_SECS}
FROM (SELECT run_id FROM run_leases WHERE expires_at < now() AND strpos(run_id, '.') = 0
      ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED) roots
WHERE l.expires_at < now() AND (l.run_id = roots.run_id OR starts_with(l.run_id, roots.run_id || '.'))
RETURNING l.run_id, l.epoch"""
# Expired roots and live nodes; and the rows of nodes long gone go (SKIP LOCKED: nodes never wait on each other).
_ORPHANS = f"""WITH gone AS (DELETE FROM run_nodes WHERE node IN (SELECT node FROM run_nodes
  WHERE expires_at < now() - interval '1 hour' FOR UPDATE SKIP LOCKED))
SELECT (SELECT count(*) FROM run_leases WHERE expires_at < now() AND strpos(run_id, '.') = 0),
       (SELECT count(*) FROM run_nodes WHERE expires_at > now()), {DB_NOW_MS}"""
_REQUESTS = """SELECT id, tenant_id, run_id, body FROM run_requests
WHERE run_id = any($1::text[]) AND outcome IS NULL ORDER BY id"""
_SEND = """INSERT INTO run_requests (tenant_id, run_id, body, created_ms) VALUES ($1, $2, $3::jsonb, $4)
RETURNING id"""
_DONE = "DELETE FROM run_requests WHERE id = any($1::bigint[])"
_REFUSED = "UPDATE run_requests SET outcome = $2::jsonb WHERE id = $1"


class Request(NamedTuple):
    id: int
    tenant_id: str
    run_id: str
    body: dict[str, Any]


Claimed = Callable[[dict[str, int]], Awaitable[None]]  # run id -> epoch
# -> the requests done with, by id: None if applied, else why refused ({"status", "code", "message"})
Requests = Callable[[list[Request]], Awaitable[dict[int, dict[str, Any] | None]]]


class LeaseKeeper:
    def __init__(
        self, store: PgJournalStore, *, on_claimed: Claimed, on_lost: Callable[[list[str]], None], on_requests: Requests
    ) -> None:
        self._store = store
        self._on_claimed = on_claimed
        self._on_lost = on_lost
        self._on_requests = on_requests
        self._period_s = store.lease_s / 3
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()  # set when closing: ends the renewals' wait
        self._listener: asyncpg.Connection | None = None
        self._listener_broken = False  # told by asyncpg, perhaps before `is_closed()` says so
        self._closing = False
        self.more = False  # the last claim took its share and left expired runs for the next round

    async def start(self) -> None:
        """Listen for requests, take over what has expired (before returning, as a restart
        resumes its runs), then keep at it in the background."""
        await self._listen()
        await self._guarded(self.tick)
        self._tasks = [
            asyncio.create_task(self._renewing(), name="agentos-run-lease-renewals"),
            asyncio.create_task(self._serve(), name="agentos-run-leases"),
        ]

    async def close(self) -> None:
        if self._tasks:
            # A flag, not cancel(): Python 3.11's wait_for can swallow a cancel that meets a wake-up.
            self._closing = True
            self._wake.set()
            self._stopped.set()
            await wait_tasks(self._tasks, CLOSE_WAIT_S)  # cancels a database call stuck past its own bounds
            self._tasks = []
        if self._listener is not None:
            with contextlib.suppress(Exception):  # a connection already gone has nothing to close
                await self._listener.close()
            self._listener = None

    def wake(self) -> None:
        """Take the requests again at once: a run kept some until it waits, and now does."""
        self._wake.set()

    def _heard(self, *_: Any) -> None:
        self._wake.set()

    def _terminated(self, *_: Any) -> None:
        self._listener_broken = True
        self._wake.set()

    async def _listen(self) -> None:
        """(Re)open the connection NOTIFY wakes this node on. One that broke (the database
        restarted, a proxy dropped it) tells `_heard` so: the serving loop opens a new one at
        once instead of leaving other nodes' requests to the next round."""
        if self._listener is not None and not self._listener.is_closed() and not self._listener_broken:
            return
        if self._listener is not None:
            self._listener.terminate()
        self._listener, self._listener_broken = None, False
        listener = await pg_pool.connect(self._store.config)
        listener.add_termination_listener(self._terminated)
        await listener.add_listener(self._store.channel, self._heard)
        self._listener = listener
        self._wake.set()  # requests may have come while nobody listened

    async def _renewing(self) -> None:
        """Renewals in a task of their own: taking over many runs must not delay them."""
        while not self._closing:
            await wait_event(self._stopped, self._period_s)
            if not self._closing:
                await self._guarded(self.renew)

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + self._period_s
        while not self._closing:
            # Cleared before the work, not after: a wake-up (a NOTIFY, a broken listener) that
            # comes while the work awaits the database brings another round at once.
            self._wake.clear()
            await self._guarded(self._listen)
            if loop.time() >= due:
                await self._guarded(self.claim)
                due = loop.time() + (random.uniform(*AGAIN_S) if self.more else self._period_s)
            await self._guarded(self.take_requests)
            await wait_event(self._wake, max(0.0, due - loop.time()))

    async def _guarded(self, step: Callable[[], Awaitable[None]]) -> None:
        begun = time.monotonic()
        try:
            await step()
        except Exception as exc:  # the database is away, perhaps: the next tick tries again
            what = f"run leases: {getattr(step, '__name__', 'a step')}"
            if isinstance(exc, (StoreUnavailable, ConfigError, *self._store.unavailable)):  # ConfigError: connect
                outage_of(self._store.config.postgres_url).failed(what, exc, begun)
            else:
                log.exception("%s failed", what)

    async def tick(self) -> None:
        await self.renew()
        await self.claim()
        await self.take_requests()

    async def renew(self) -> None:
        before = dict(self._store.epochs)  # runs adopted later were committed after this query starts
        rows = await self._store.query(_RENEW, self._store.node, self._store.lease_s, list(before))
        held = {r[0]: r[1] for r in rows}
        if skipped := [run for run in before if run not in held]:
            held |= {r[0]: r[1] for r in await self._store.query(_HELD, self._store.node, skipped)}
        lost = sorted(run for run, epoch in before.items() if held.get(run) != epoch and run in self._store.epochs)
        if lost:  # or ended here while the renewal ran (its lease went with it): `on_lost` tells them apart
            self._on_lost(lost)

    async def claim(self) -> None:
        """Take over this node's share of the expired runs (`more`: some are left for another round)."""
        self.more = False
        sent = time.monotonic_ns()
        [(orphans, live, db_ms)] = await self._store.query(_ORPHANS)
        # Before any run is resumed: its human deadline is judged by the database's clock.
        self._store.clock.rebase(db_ms, sent, time.monotonic_ns())
        if not orphans:
            return
        share = min(CLAIM_MAX, math.ceil(orphans / max(1, live)))
        rows = await self._store.query(_CLAIM, self._store.node, self._store.lease_s, share)
        self.more = orphans > share and sum("." not in r[0] for r in rows) == share
        if rows:
            log.info("run leases: taking over %d runs whose lease expired", len(rows))
            await self._on_claimed({r[0]: r[1] for r in rows})

    async def take_requests(self) -> None:
        owned = list(self._store.epochs)
        if not owned:
            return
        rows = await self._store.fetch(_REQUESTS, owned)
        if not rows:
            return
        settled = await self._on_requests([Request(r[0], r[1], r[2], msgspec.json.decode(r[3])) for r in rows])
        writes: list[tuple[str, tuple[Any, ...]]] = []
        if done := [request_id for request_id, refusal in settled.items() if refusal is None]:
            writes.append((_DONE, (done,)))
        for request_id, refusal in settled.items():
            if refusal is not None:  # kept for the sender to read
                writes.append((_REFUSED, (request_id, msgspec.json.encode(refusal).decode())))
        if writes:  # queued after the writes that applied them: a request is never gone before its effect
            await self._store.write(writes)


async def send_request(store: PgJournalStore, tenant_id: str, run_id: str, body: str, now_ms: int) -> int:
    """Leave a request (JSON `body`) for the run's owner and wake it: the row and the NOTIFY on
    this schema's channel in one transaction, so the owner is woken exactly for committed rows.
    Returns the request's id. Raises what asyncpg raises (the caller classifies it)."""
    async with pooled(store.pool, store.config.postgres_acquire_timeout_s) as conn, conn.transaction():
        request_id: int = await conn.fetchval(_SEND, tenant_id, run_id, body, now_ms)
        await conn.execute("SELECT pg_notify($1, $2)", store.channel, run_id)
    return request_id
