"""`TriggerService`: triggers, their deliveries, and the dispatcher that turns deliveries into runs.

A delivery is answered 2xx only once it is committed (`TriggerStorage.accept`): from then on
the run is ours to start (the dispatcher), even across a crash. Its run id is chosen when it is
accepted and answered, so a redelivery of the same `webhook-id` (a sender that did not see our
answer retries, with a new timestamp) gets the same run id back and starts nothing, for as long
as `triggers.dedup_horizon_s`. Nothing is stored for a refused delivery.

Tenancy: every call but `find`/`deliver` names the tenant, and another tenant's trigger answers
exactly like a missing one. A delivery carries no key: its signature is its authentication.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry, Gauge

from agentos.agents.service import RunService
from agentos.clock import wall_ms
from agentos.config import Settings
from agentos.errors import BadRequest, Conflict, NotFound
from agentos.ids import new_run_id
from agentos.json_limits import check_json, too_deep
from agentos.triggers.dispatcher import Dispatcher, TriggerMetrics
from agentos.triggers.records import DeliveryQuery, DeliveryRow, SecretRow, TriggerRow
from agentos.triggers.signatures import derive_secret, encode_secret, verify
from agentos.triggers.storage import TriggerStorage

MAX_SECRETS = 4  # the current one and up to three rotated out but still valid
MAX_WEBHOOK_ID = 256


def trigger_not_found(trigger_id: str) -> NotFound:
    return NotFound(f"trigger {trigger_id!r} not found", code="trigger_not_found")


def _valid_webhook_id(webhook_id: str) -> bool:
    return 1 <= len(webhook_id) <= MAX_WEBHOOK_ID and all("!" <= c <= "~" for c in webhook_id)


class TriggerService:
    """Usage::

    service = TriggerService(settings, open_trigger_storage(settings, data_dir), runs, pepper)
    await service.start()          # opens the storage; the dispatcher starts queued deliveries
    created = await service.create("acme", "ops", "{payload.text}", "")   # created["secret"]: once
    answer, first = await service.deliver(await service.find(trigger_id), headers, body)
    await service.close()
    """

    def __init__(
        self,
        settings: Settings,
        storage: TriggerStorage,
        runs: RunService,
        pepper: bytes,
        *,
        now_ms: Callable[[], int] = wall_ms,
        tenant_enabled: Callable[[str], bool] = lambda _: True,
    ) -> None:
        """`tenant_enabled`: False for a disabled (or removed) tenant: its triggers answer 404
        and its queued deliveries fail (`tenant_disabled`) instead of starting runs."""
        self.config = settings.triggers
        self._tenant_enabled = tenant_enabled
        self.storage = storage
        self._runs = runs
        self._pepper = pepper
        self._now_ms = now_ms
        self.metrics = TriggerMetrics()
        self.dispatcher = Dispatcher.on_this_node(
            settings, storage, runs, self.config, now_ms, self.metrics, tenant_enabled=tenant_enabled
        )

    async def start(self) -> None:
        await self.storage.open()
        self.dispatcher.start()

    async def close(self) -> None:
        await self.dispatcher.close()
        await self.storage.close()

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """The trigger gauges and counters (backlog, deliveries by outcome)."""
        backlog = Gauge("agentos_trigger_backlog", "Trigger deliveries queued (not yet a run)", registry=registry)
        backlog.set_function(lambda: self.dispatcher.backlog)
        for metric in (self.metrics.deliveries, self.metrics.started, self.metrics.postponed, self.metrics.failed):
            registry.register(metric)

    # --- triggers ---

    async def create(self, tenant_id: str, agent: str, input_template: str, description: str) -> dict[str, Any]:
        """A new trigger of `agent`; the answer holds its secret, which nothing shows again.

        Raises: NotFound (`agent_not_found`: not an agent the tenant can run), Conflict
        (`too_many_triggers`)."""
        await self._runs.sync_agents(tenant_id)
        self._runs.get_agent(tenant_id, agent)  # 404 agent_not_found, another tenant's included
        now = self._now_ms()
        secret = SecretRow(secrets.token_hex(32), now)
        trigger = TriggerRow(
            f"trg_{secrets.token_hex(10)}", tenant_id, agent, input_template, description, (secret,), now
        )
        await self.storage.create_trigger(trigger, max_per_tenant=self.config.max_triggers)
        return {**trigger.to_dict(), "secret": self._secret_text(trigger.trigger_id, secret)}

    async def list_triggers(self, tenant_id: str) -> list[dict[str, Any]]:
        return [t.to_dict() for t in await self.storage.list_triggers(tenant_id)]

    async def get(self, tenant_id: str, trigger_id: str) -> dict[str, Any]:
        """Raises: NotFound (also for another tenant's)."""
        return (await self._trigger(tenant_id, trigger_id)).to_dict()

    async def delete(self, tenant_id: str, trigger_id: str) -> None:
        """Deliveries already accepted that have not started fail (`trigger_deleted`). Raises: NotFound."""
        if not await self.storage.delete_trigger(tenant_id, trigger_id):
            raise trigger_not_found(trigger_id)

    async def rotate(self, tenant_id: str, trigger_id: str) -> dict[str, Any]:
        """A new secret (in the answer, once); the one it replaces stays valid for
        `triggers.rotation_overlap_s`, so senders can switch without a refused delivery.
        Raises: NotFound."""
        trigger = await self._trigger(tenant_id, trigger_id)
        now = self._now_ms()
        fresh = SecretRow(secrets.token_hex(32), now)
        until = now + self.config.rotation_overlap_s * 1000
        kept = [fresh]
        for secret in trigger.secrets:  # the current one expires after the overlap; expired ones go
            expires = until if secret.expires_ms is None else secret.expires_ms
            if expires > now:
                kept.append(replace(secret, expires_ms=expires))
        rotated = replace(trigger, secrets=tuple(kept[:MAX_SECRETS]))
        if not await self.storage.set_secrets(tenant_id, trigger_id, rotated.secrets):
            raise trigger_not_found(trigger_id)
        return {**rotated.to_dict(), "secret": self._secret_text(trigger_id, fresh)}

    async def _trigger(self, tenant_id: str, trigger_id: str) -> TriggerRow:
        trigger = await self.storage.get_trigger(tenant_id, trigger_id)
        if trigger is None:
            raise trigger_not_found(trigger_id)
        return trigger

    def _secret_text(self, trigger_id: str, secret: SecretRow) -> str:
        return encode_secret(derive_secret(self._pepper, trigger_id, secret.nonce))

    # --- deliveries ---

    async def find(self, trigger_id: str) -> TriggerRow:
        """The trigger a delivery names. Raises: NotFound (a deleted or disabled one too, or one
        of a disabled tenant)."""
        trigger = await self.storage.find_trigger(trigger_id)
        if trigger is None or not trigger.enabled or not self._tenant_enabled(trigger.tenant_id):
            raise trigger_not_found(trigger_id)
        return trigger

    async def deliver(
        self, trigger: TriggerRow, headers: Mapping[str, str], body: bytes
    ) -> tuple[dict[str, Any], bool]:
        """Verify and commit one delivery; the answer and whether it is new (False: a redelivery,
        answered with the first one's run id).

        Raises:
            Unauthorized: a missing or wrong signature, or a timestamp out of tolerance.
            BadRequest: the body is not JSON, or nests deeper than
                `agentos.json_limits.MAX_JSON_DEPTH` (`malformed_json`); the webhook-id is not
                1 to 256 printable ASCII characters (`invalid_webhook_id`).
            InvalidInput: a string of the body holds NUL.
        """
        now = self._now_ms()
        valid = [s for s in trigger.secrets if s.expires_ms is None or s.expires_ms > now]
        keys = [derive_secret(self._pepper, trigger.trigger_id, s.nonce) for s in valid]
        verify(keys, headers, body, now / 1000, self.config.tolerance_s)
        try:
            payload = msgspec.json.decode(body)
        except msgspec.DecodeError:
            raise BadRequest("the body of a delivery must be JSON", code="malformed_json") from None
        except RecursionError:  # nested deeper than msgspec goes
            raise too_deep() from None
        check_json(body, payload)  # a run's input is rendered from it: bounded depth, no NUL
        webhook_id = headers["webhook-id"]
        if not _valid_webhook_id(webhook_id):
            raise BadRequest(
                f"webhook-id must be 1 to {MAX_WEBHOOK_ID} printable ASCII characters", code="invalid_webhook_id"
            )
        row = DeliveryRow(
            trigger.tenant_id, trigger.trigger_id, webhook_id, new_run_id(), body, now, next_attempt_ms=now
        )
        stored, created = await self.storage.accept(row)
        self.metrics.deliveries.labels(outcome="accepted" if created else "duplicate").inc()
        if created:
            self.dispatcher.wake()
        answer = {"webhook_id": webhook_id, "run_id": stored.run_id, "status": stored.status, "duplicate": not created}
        return answer, created

    def rejected(self) -> None:
        """Count a delivery refused (4xx)."""
        self.metrics.deliveries.labels(outcome="rejected").inc()

    async def deliveries(self, tenant_id: str, trigger_id: str, query: DeliveryQuery) -> list[dict[str, Any]]:
        """The trigger's deliveries, newest first (`DeliveryQuery`). Raises: NotFound."""
        await self._trigger(tenant_id, trigger_id)
        rows = await self.storage.list_deliveries(tenant_id, trigger_id, query)
        return [r.to_dict() for r in rows]

    async def delivery(self, tenant_id: str, trigger_id: str, webhook_id: str) -> dict[str, Any]:
        """Raises: NotFound (`delivery_not_found`, or `trigger_not_found`)."""
        await self._trigger(tenant_id, trigger_id)
        row = await self.storage.get_delivery(tenant_id, trigger_id, webhook_id)
        if row is None:
            raise _delivery_not_found(webhook_id)
        return row.to_dict()

    async def retry(self, tenant_id: str, trigger_id: str, webhook_id: str) -> dict[str, Any]:
        """Queue a failed delivery again (what failed it is fixed: the agent is back, the tenant
        enabled again): the dispatcher starts its run under the run id it was answered with. A
        sender's own redelivery cannot do this: it answers the first delivery, failed.

        Raises: NotFound (`delivery_not_found`, or `trigger_not_found`), Conflict
        (`delivery_not_failed`: it is queued or started)."""
        await self._trigger(tenant_id, trigger_id)
        queued = await self.storage.requeue_failed(tenant_id, trigger_id, webhook_id, self._now_ms())
        if queued is None:
            row = await self.storage.get_delivery(tenant_id, trigger_id, webhook_id)
            if row is None:
                raise _delivery_not_found(webhook_id)
            raise Conflict(
                f"delivery {webhook_id!r} is {row.status}: only a failed one is retried", code="delivery_not_failed"
            )
        self.metrics.deliveries.labels(outcome="retried").inc()
        self.dispatcher.wake()
        return queued.to_dict()


def _delivery_not_found(webhook_id: str) -> NotFound:
    return NotFound(f"delivery {webhook_id!r} not found", code="delivery_not_found")


def open_trigger_storage(settings: Settings, data_dir: Path | None) -> TriggerStorage:
    """`triggers.db` in `data_dir` (in memory without one), or PostgreSQL with
    `store.backend = "postgres"`."""
    from agentos.triggers.storage_factory import open_storage

    return open_storage(settings, data_dir)
