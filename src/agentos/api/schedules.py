"""Schedule routes: runs of an agent started on a cron or every N seconds. docs/schedules.md

Routes::

    POST   /v1/schedules                        {"agent", "input", "cron"+"time_zone" | "every_s", ...}  201
    GET    /v1/schedules                                            200 {"data", "next_cursor"}
    GET    /v1/schedules/{schedule_id}                              200 schedule, next and last fires
    POST   /v1/schedules/{schedule_id}/pause                        200 schedule
    POST   /v1/schedules/{schedule_id}/resume                       200 schedule (from the next slot)
    DELETE /v1/schedules/{schedule_id}                              204

Reads take `schedules:read`, the rest `schedules:write`, and act for the key's tenant; another
tenant's schedule is a 404 like a missing one. Bad values (a cron croniter refuses, an unknown
time zone, `every_s` out of bounds, an agent the tenant cannot run) are a 422.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from aiohttp import web

from agentos.api.body import read_body
from agentos.api.keys import SCHEDULES
from agentos.api.owners import check_schedule, list_owner
from agentos.api.routes import BAD_BODY, OWNER, Answer, Schema, json, nullable, operation, page, page_params
from agentos.api.sessions import json_response, page_by_id
from agentos.schedules.service import ScheduleService, ScheduleSpec
from agentos.schedules.slots import MAX_ZONE_CHARS
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()


class ScheduleCreate(msgspec.Struct, forbid_unknown_fields=True):
    """Either `cron` (five fields, in `time_zone`) or `every_s`; see docs/schedules.md."""

    agent: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    input: Annotated[str, msgspec.Meta(min_length=1)]
    cron: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    time_zone: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ZONE_CHARS)] = "UTC"
    every_s: Annotated[int, msgspec.Meta(ge=1, le=1 << 40)] | None = None
    max_runs_in_flight: Annotated[int, msgspec.Meta(ge=1, le=100)] = 1
    overlap: Literal["skip", "queue"] = "skip"
    misfire: Literal["skip", "run_once"] = "skip"
    paused: bool = False


_NULLABLE_MS = nullable("integer")
_FIRE = Schema.object(
    "ScheduleFire",
    {
        "slot_ms": {"type": "integer", "description": "the slot's time (epoch ms), not when it ran"},
        "run_id": {**nullable("string"), "description": "the run it started (null: skipped or failed)"},
        "status": {"enum": ["pending", "started", "finished", "skipped", "failed"]},
        "reason": {**nullable("string"), "description": "why skipped or failed: overlap, queue_full, agent_not_found"},
        "updated_ms": {"type": "integer"},
    },
)
_SCHEDULE_PROPERTIES: dict[str, Any] = {
    "schedule_id": {"type": "string"},
    "agent": {"type": "string"},
    "input": {"type": "string"},
    "cron": nullable("string"),
    "time_zone": {"type": "string"},
    "every_s": _NULLABLE_MS,
    "max_runs_in_flight": {"type": "integer"},
    "overlap": {"enum": ["skip", "queue"]},
    "misfire": {"enum": ["skip", "run_once"]},
    "paused": {"type": "boolean"},
    "created_ms": {"type": "integer"},
    "next_fire_ms": {**_NULLABLE_MS, "description": "the next slot (epoch ms); null while paused"},
    "owner": OWNER,
}
_SCHEDULE = Schema.object("Schedule", _SCHEDULE_PROPERTIES)
_DETAIL = Schema.object(
    "ScheduleDetail",
    {**_SCHEDULE_PROPERTIES, "last_fires": {"type": "array", "items": _FIRE.ref}},
    uses=(_FIRE,),
)
_NOT_FOUND: dict[int, str | Answer] = {404: "Unknown schedule (another tenant's too): schedule_not_found"}


async def _schedule(request: web.Request, scope: Scope) -> tuple[ScheduleService, str, str]:
    """The schedules, the caller's tenant and the path's schedule, checked once for every route
    of one schedule.

    Raises: NotFound `schedule_not_found`: unknown, another tenant's, or not the caller's to see."""
    who, schedule_id = require(request, scope), request.match_info["schedule_id"]
    schedules = request.app[SCHEDULES]
    await check_schedule(schedules, who, schedule_id)
    return schedules, who.tenant_id, schedule_id


@routes.post("/v1/schedules")
@operation(
    "Create a schedule: a run of the agent on each slot of a cron (in a time zone) or every N seconds",
    tag="schedules",
    body=ScheduleCreate,
    answers={201: json("The schedule, with its next fire", _DETAIL)},
    errors=BAD_BODY
    | {
        409: "The tenant has schedules.max_schedules schedules: too_many_schedules",
        422: "invalid_cron, unknown_time_zone, invalid_every, invalid_schedule (both or neither of cron and"
        " every_s), unknown_agent, invalid_input",
    },
)
async def create_schedule(request: web.Request) -> web.Response:
    who = require(request, Scope.SCHEDULES_WRITE)
    body = await read_body(request, ScheduleCreate)
    spec = ScheduleSpec(**msgspec.structs.asdict(body))
    return json_response(await request.app[SCHEDULES].create(who.tenant_id, spec, owner=who.subject), status=201)


@routes.get("/v1/schedules")
@operation(
    "List the tenant's schedules, by id",
    tag="schedules",
    parameters=page_params(100),
    answers={200: json("A page of schedules", page("SchedulePage", _SCHEDULE))},
    errors={422: "A bad limit"},
)
async def list_schedules(request: web.Request) -> web.Response:
    """By id; `?after=` the `next_cursor` of the page before."""
    who = require(request, Scope.SCHEDULES_READ)
    schedules = await request.app[SCHEDULES].list_schedules(who.tenant_id, owner=list_owner(who))
    return page_by_id(request, schedules, "schedule_id", 100)


@routes.get("/v1/schedules/{schedule_id}")
@operation(
    "Read a schedule: its next fire and its last fires (newest first)",
    tag="schedules",
    answers={200: json("The schedule", _DETAIL)},
    errors=_NOT_FOUND,
)
async def get_schedule(request: web.Request) -> web.Response:
    schedules, tenant_id, schedule_id = await _schedule(request, Scope.SCHEDULES_READ)
    return json_response(await schedules.get(tenant_id, schedule_id))


@routes.post("/v1/schedules/{schedule_id}/pause")
@operation(
    "Pause a schedule: no slot fires until it is resumed",
    tag="schedules",
    answers={200: json("The schedule", _SCHEDULE)},
    errors=_NOT_FOUND,
)
async def pause_schedule(request: web.Request) -> web.Response:
    schedules, tenant_id, schedule_id = await _schedule(request, Scope.SCHEDULES_WRITE)
    return json_response(await schedules.set_paused(tenant_id, schedule_id, True))


@routes.post("/v1/schedules/{schedule_id}/resume")
@operation(
    "Resume a schedule from its next slot after now (the paused slots do not fire)",
    tag="schedules",
    answers={200: json("The schedule", _SCHEDULE)},
    errors=_NOT_FOUND,
)
async def resume_schedule(request: web.Request) -> web.Response:
    schedules, tenant_id, schedule_id = await _schedule(request, Scope.SCHEDULES_WRITE)
    return json_response(await schedules.set_paused(tenant_id, schedule_id, False))


@routes.delete("/v1/schedules/{schedule_id}")
@operation(
    "Delete a schedule and its fires; runs it started stay",
    tag="schedules",
    answers={204: Answer(description="Deleted")},
    errors=_NOT_FOUND,
)
async def delete_schedule(request: web.Request) -> web.Response:
    schedules, tenant_id, schedule_id = await _schedule(request, Scope.SCHEDULES_WRITE)
    await schedules.delete(tenant_id, schedule_id)
    return web.Response(status=204)
