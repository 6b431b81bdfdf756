"""The config groups of work that arrives without a user watching: `[knowledge]` (collections,
document ingest, retrieval), `[triggers]` (signed webhooks that start runs) and `[schedules]`
(runs started on a cron or an interval).
`agentos.config.Settings` holds them."""

from __future__ import annotations

from typing import Annotated

import msgspec

PosInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]


class KnowledgeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    max_document_bytes: PosInt = 10 << 20  # one upload (PDF included), checked before it is read
    max_collections: PosInt = 100  # per tenant
    max_documents: PosInt = 100_000  # per collection
    max_top_k: PosInt = 100
    max_dimensions: PosInt = 4096
    chunk_tokens: PosInt = 400  # a collection's default; pinned at creation
    chunk_overlap: NonNegInt = 50
    embed_batch: PosInt = 64  # texts per /v1/embeddings request
    embed_retries: NonNegInt = 3  # per batch, with backoff, on 429 / 5xx / connection errors
    indexers: PosInt = 2  # documents indexed at once (per node)
    lease_s: PosFloat = 60.0  # a document being indexed is this node's for this long (renewed)
    # the in-memory indexes (vectors, full text) of collections not queried for this long are dropped (loaded
    # again from the store at the next query)
    index_idle_s: PosFloat = 600.0


class TriggersConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    max_body_bytes: PosInt = 1 << 20  # one delivery; over it 413 before it is read
    tolerance_s: PosInt = 300  # webhook-timestamp this far from now (either way) is refused
    # a webhook-id seen within this horizon answers its first 2xx again and starts nothing: at
    # least as long as senders retry (Standard Webhooks' example schedule spans about 3 days)
    dedup_horizon_s: PosInt = 7 * 24 * 3600
    rotation_overlap_s: NonNegInt = 24 * 3600  # the old secret stays valid this long after a rotation
    max_triggers: PosInt = 100  # per tenant
    dispatch_batch: PosInt = 64  # deliveries claimed per round by the dispatcher
    retry_s: PosFloat = 1.0  # a delivery whose run was refused (quota, overload) is tried again after this


class SchedulesConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    max_schedules: PosInt = 100  # per tenant
    min_every_s: PosInt = 1  # the shortest `every` a schedule may have
    max_every_s: PosInt = 366 * 24 * 3600  # the longest (a year and a day)
    # a slot the scheduler reaches later than this after its time is missed (downtime, a
    # paused loop): its schedule's `misfire` decides (skip it, or one run for all missed)
    misfire_grace_s: PosFloat = 30.0
    max_queued: PosInt = 10  # `overlap = "queue"`: fires waiting for a run to end, per schedule; past it skipped
    # A slot fires at most this late; the poll while fires wait to start (doubling to 2 s while none can).
    poll_s: PosFloat = 0.25
    fire_history: PosInt = 1000  # fires kept per schedule (the oldest beyond are pruned)
