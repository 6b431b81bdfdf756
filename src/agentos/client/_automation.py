"""Automation: signed webhook triggers (docs/triggers.md) and schedules (docs/schedules.md), as
methods of `AsyncClient` (and `Client`) and the Structs they return."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from agentos.client._http import HttpClient, query_params, url_path
from agentos.client._types import Page

DeliveryStatus = Literal["queued", "started", "failed"]
FireStatus = Literal["pending", "started", "finished", "skipped", "failed"]


class TriggerSecret(msgspec.Struct, frozen=True, kw_only=True):
    """A signing secret still valid, without its value (shown once, by `create_trigger` and
    `rotate_trigger_secret`): `expires_ms` None for the current one, else when a rotated-out one
    stops being accepted."""

    created_ms: int
    expires_ms: int | None = None


class Trigger(msgspec.Struct, frozen=True, kw_only=True):
    """A trigger: a signed webhook at `events_url` that starts a run of `agent` per delivery.
    `secret` (`whsec_...`) is set only in the answers of `create_trigger` and
    `rotate_trigger_secret`, the one time it is shown."""

    trigger_id: str
    agent: str
    input_template: str
    description: str = ""
    enabled: bool = True
    created_ms: int = 0
    events_url: str = ""
    secrets: list[TriggerSecret] = []  # newest first
    secret: str | None = None

    def __repr__(self) -> str:  # the secret stays out of logs and tracebacks
        return f"Trigger(trigger_id={self.trigger_id!r}, agent={self.agent!r}, enabled={self.enabled!r})"


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery of a trigger, by its `webhook-id`; `failed` ones can be retried."""

    webhook_id: str
    run_id: str
    status: DeliveryStatus
    received_ms: int = 0
    attempts: int = 0
    reason: str | None = None


class ScheduleFire(msgspec.Struct, frozen=True, kw_only=True):
    slot_ms: int
    status: FireStatus
    run_id: str | None = None
    reason: str | None = None
    updated_ms: int = 0


class ScheduleOptions(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How a schedule fires, beside its agent, input and timing (`create_schedule`); the
    defaults are the server's."""

    time_zone: str = "UTC"
    max_runs_in_flight: int = 1
    overlap: Literal["skip", "queue"] = "skip"
    misfire: Literal["skip", "run_once"] = "skip"
    paused: bool = False


class Schedule(ScheduleOptions, frozen=True, kw_only=True):
    """A schedule: a run of `agent` on each slot of `cron` (in `time_zone`) or every `every_s`
    seconds, fired as its options say. `last_fires` (newest first) only in the answers of
    `get_schedule` and `create_schedule`."""

    schedule_id: str
    agent: str
    input: str
    cron: str | None = None
    every_s: int | None = None
    created_ms: int = 0
    next_fire_ms: int | None = None
    owner: str | None = None
    last_fires: list[ScheduleFire] = []


class AutomationCalls(HttpClient):
    """What `AsyncClient` adds for triggers (scopes `triggers:read`, `triggers:write`) and
    schedules (`schedules:read`, `schedules:write`)."""

    # --- triggers ---

    async def create_trigger(self, agent: str, input_template: str = "{payload}", description: str = "") -> Trigger:
        """A trigger of `agent`; each delivery's run gets `input_template` with `{payload}` (the
        body) and `{payload.field}` filled in. Keep the answer's `secret`: it is not shown again.

        Raises: APIError: 422 `unknown_agent`, `invalid_input`; 409 `too_many_triggers`.
        """
        body = {"agent": agent, "input_template": input_template, "description": description}
        return await self._http.call("POST", "/v1/triggers", Trigger, body=body)

    async def list_triggers(self, *, limit: int | None = None, after: str | None = None) -> Page[Trigger]:
        return await self._http.call(
            "GET", "/v1/triggers", Page[Trigger], params=query_params(limit=limit, after=after)
        )

    async def get_trigger(self, trigger_id: str) -> Trigger:
        """Raises: APIError: 404 `trigger_not_found`."""
        return await self._http.call("GET", url_path("/v1/triggers/{}", trigger_id), Trigger)

    async def delete_trigger(self, trigger_id: str) -> None:
        """Its deliveries not started yet fail (`trigger_deleted`)."""
        await self._http.call("DELETE", url_path("/v1/triggers/{}", trigger_id), type(None))

    async def rotate_trigger_secret(self, trigger_id: str) -> Trigger:
        """A new secret (in the answer, once); the old one stays valid for `triggers.rotation_overlap_s`."""
        return await self._http.call("POST", url_path("/v1/triggers/{}/rotate", trigger_id), Trigger)

    async def list_deliveries(
        self,
        trigger_id: str,
        *,
        status: DeliveryStatus | None = None,
        limit: int | None = None,
        before: int | None = None,
    ) -> Page[Delivery]:
        """Newest first; `before`: the previous page's `next_cursor`; `status="failed"`: those to retry."""
        params = query_params(status=status, limit=limit, before=before)
        path = url_path("/v1/triggers/{}/deliveries", trigger_id)
        return await self._http.call("GET", path, Page[Delivery], params=params)

    async def get_delivery(self, trigger_id: str, webhook_id: str) -> Delivery:
        """Raises: APIError: 404 `trigger_not_found`, `delivery_not_found`."""
        path = url_path("/v1/triggers/{}/deliveries/{}", trigger_id, webhook_id)
        return await self._http.call("GET", path, Delivery)

    async def retry_delivery(self, trigger_id: str, webhook_id: str) -> Delivery:
        """Queue a failed delivery again, its run id kept (once what failed it is fixed).

        Raises: APIError: 404; 409 `delivery_not_failed` (it is queued or started).
        """
        path = url_path("/v1/triggers/{}/deliveries/{}/retry", trigger_id, webhook_id)
        return await self._http.call("POST", path, Delivery)

    # --- schedules ---

    async def create_schedule(
        self,
        agent: str,
        text: str,
        *,
        cron: str | None = None,
        every_s: int | None = None,
        options: ScheduleOptions | None = None,
    ) -> Schedule:
        """A run of `agent` on `text` at each slot: `cron` (five fields, in `options.time_zone`)
        or `every_s`, one of the two.

        Raises:
            APIError: 422 `invalid_cron`, `unknown_time_zone`, `invalid_every`, `invalid_schedule`
                (both or neither of cron and every_s), `unknown_agent`, `invalid_input`;
                409 `too_many_schedules`.
        """
        body: dict[str, Any] = {"agent": agent, "input": text, "cron": cron, "every_s": every_s}
        body |= msgspec.structs.asdict(options or ScheduleOptions())
        return await self._http.call("POST", "/v1/schedules", Schedule, body=body)

    async def list_schedules(self, *, limit: int | None = None, after: str | None = None) -> Page[Schedule]:
        return await self._http.call(
            "GET", "/v1/schedules", Page[Schedule], params=query_params(limit=limit, after=after)
        )

    async def get_schedule(self, schedule_id: str) -> Schedule:
        """With its `last_fires`. Raises: APIError: 404 `schedule_not_found`."""
        return await self._http.call("GET", url_path("/v1/schedules/{}", schedule_id), Schedule)

    async def pause_schedule(self, schedule_id: str) -> Schedule:
        return await self._http.call("POST", url_path("/v1/schedules/{}/pause", schedule_id), Schedule)

    async def resume_schedule(self, schedule_id: str) -> Schedule:
        """From its next slot after now (the paused slots do not fire)."""
        return await self._http.call("POST", url_path("/v1/schedules/{}/resume", schedule_id), Schedule)

    async def delete_schedule(self, schedule_id: str) -> None:
        """The runs it started stay."""
        await self._http.call("DELETE", url_path("/v1/schedules/{}", schedule_id), type(None))
