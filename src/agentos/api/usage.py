"""`GET /v1/usage`: what the model calls of a tenant used and cost, summed by group (the usage ledger).

A key reads its own tenant's usage (`sessions:read`); `tenant=` naming another tenant is a 403.
An admin key reads every tenant's (no `tenant=`) or one tenant's. The range is `[from, to)`: each
bound is a UTC date (`from`: that day's first millisecond; `to`: the day after it, so the day is
counted) or epoch milliseconds; by default the 30 UTC days up to and including today, and never
more than `MAX_RANGE_DAYS`. Every bad parameter is a 422 `invalid_input` naming it.

A total's `cost` is null when any of its calls had no price (the target has none: none is ever
invented); `unpriced_calls` says how many. docs/providers.md, "The usage ledger".
"""

from __future__ import annotations

import datetime
import re

import msgspec
from aiohttp import web

from agentos.api.body import query_text
from agentos.api.keys import RUNTIME
from agentos.api.owners import require_tenant_wide
from agentos.api.routes import json, operation, query
from agentos.api.sessions import json_response
from agentos.clock import wall_ms
from agentos.errors import Forbidden, InvalidInput
from agentos.store.ledger import DAY_MS, GROUP_NAMES, GroupName, UsageQuery, UsageTotal
from agentos.tenancy.principal import Principal, Scope, require

routes = web.RouteTableDef()

MAX_RANGE_DAYS = 366
DEFAULT_RANGE_DAYS = 30
MAX_GROUPS = 10_000  # totals in one answer; past it `truncated` is true
MAX_MS = 253_402_300_800_000  # 10000-01-01: the first millisecond no date can name
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_MS = re.compile(r"[0-9]{1,15}")


class UsageReport(msgspec.Struct, kw_only=True):
    """The totals of one tenant (or of every tenant: `tenant` null) over `[from_ms, to_ms)`."""

    tenant: str | None  # null: every tenant's (an admin's reading without `tenant=`)
    group_by: list[GroupName]
    from_ms: int
    to_ms: int
    data: list[UsageTotal]  # sorted by the groups, in `group_by` order
    truncated: bool  # more than MAX_GROUPS totals: narrow the range or the grouping


_BOUND = {"anyOf": [{"type": "string", "format": "date"}, {"type": "integer", "minimum": 0, "maximum": MAX_MS - 1}]}
_GROUP_BY = query(
    "group_by",
    "what to sum by, a comma list (`model,day`); none: one total",
    {"type": "array", "items": {"enum": list(GROUP_NAMES)}, "uniqueItems": True},
) | {"style": "form", "explode": False}


@routes.get("/v1/usage")
@operation(
    "Tokens and cost of model calls, summed by tenant, key, agent, run, session, model, target or day",
    tag="usage",
    parameters=(
        _GROUP_BY,
        query("from", "the first day (UTC, YYYY-MM-DD) or millisecond counted; default: 29 days before today", _BOUND),
        query("to", "the last day counted (UTC), or the first millisecond not counted; default: today", _BOUND),
        query("tenant", "an admin key: only this tenant's (default: every tenant's); another key: its own only"),
    ),
    answers={200: json("The totals, with how many calls had no price", UsageReport)},
    errors={
        403: "`insufficient_scope`: the key lacks `sessions:read`, or names another tenant without `admin`",
        422: "A bad group_by, from or to (a range backwards or over 366 days); the message names it",
    },
)
async def usage(request: web.Request) -> web.Response:
    who = require_tenant_wide(require(request, Scope.SESSIONS_READ), "usage")
    query = usage_query(request, who, now_ms=wall_ms())
    found = await request.app[RUNTIME].store.usage_totals(query)
    report = UsageReport(
        tenant=query.tenant_id,
        group_by=list(query.group_by),
        from_ms=query.from_ms,
        to_ms=query.to_ms,
        data=found[:MAX_GROUPS],
        truncated=len(found) > MAX_GROUPS,
    )
    return json_response(report)


def usage_query(request: web.Request, who: Principal, *, now_ms: int) -> UsageQuery:
    """What `request` asks of the ledger, checked.

    Raises:
        InvalidInput: a bad group_by, from or to, or a range backwards or too long.
        Forbidden: a key without `admin` names another tenant.
    """
    to_ms = _bound(request, "to", end=True)
    if to_ms is None:
        to_ms = (now_ms // DAY_MS + 1) * DAY_MS  # the end of today (UTC)
    from_ms = _bound(request, "from", end=False)
    if from_ms is None:
        from_ms = max(0, to_ms - DEFAULT_RANGE_DAYS * DAY_MS)
    if from_ms >= to_ms:
        raise InvalidInput(f"query parameters 'from' and 'to': from ({from_ms}) must be before to ({to_ms})")
    if to_ms - from_ms > MAX_RANGE_DAYS * DAY_MS:
        raise InvalidInput(f"query parameters 'from' and 'to': at most {MAX_RANGE_DAYS} days apart")
    return UsageQuery(
        tenant_id=_tenant(request, who),
        group_by=_groups(request),
        from_ms=from_ms,
        to_ms=to_ms,
        limit=MAX_GROUPS + 1,
    )


def _groups(request: web.Request) -> tuple[GroupName, ...]:
    raw = query_text(request, "group_by") or ""
    names = raw.split(",") if raw else []
    groups: list[GroupName] = []
    for name in names:
        if name not in GROUP_NAMES:
            allowed = ", ".join(GROUP_NAMES)
            raise InvalidInput(f"query parameter 'group_by': {name[:40]!r} is not one of {allowed}")
        if name in groups:
            raise InvalidInput(f"query parameter 'group_by': {name!r} is given twice")
        groups.append(name)
    return tuple(groups)


def _bound(request: web.Request, name: str, *, end: bool) -> int | None:
    """A range bound in epoch ms (a date's first millisecond; with `end`, the next day's)."""
    raw = query_text(request, name)
    if raw is None:
        return None
    if _MS.fullmatch(raw) and int(raw) < MAX_MS:
        return int(raw)
    if _DATE.fullmatch(raw):
        try:
            day = datetime.date.fromisoformat(raw)
        except ValueError:
            day = None
        if day is not None and day.year >= 1970:
            start = datetime.datetime.combine(day, datetime.time(), datetime.UTC)
            ms = int(start.timestamp()) * 1000
            return ms + DAY_MS if end else ms
    raise InvalidInput(
        f"query parameter {name!r} must be a date (YYYY-MM-DD) from 1970 or epoch milliseconds"
        f" below {MAX_MS}, got {raw[:40]!r}"
    )


def _tenant(request: web.Request, who: Principal) -> str | None:
    """Whose rows: an admin's choice (None: everyone's), else always the key's own tenant."""
    named = query_text(request, "tenant") or None  # `tenant=`: none named
    if who.is_admin:
        return named
    if named not in (None, who.tenant_id):
        raise Forbidden("only a key with the 'admin' scope reads another tenant's usage", code="insufficient_scope")
    return who.tenant_id
