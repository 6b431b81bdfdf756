"""Agents: create (or replace) one from an API body, list them, read one (docs/agents.md).

A caller sees the config file's agents and its own tenant's; creating one takes `agents:write`,
and only an admin-scoped key may define what starts host processes (`check_agent`).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentos.api.body import page_limit, query_text, read_body
from agentos.api.keys import RUNS
from agentos.api.sessions import json_response
from agentos.tenancy.principal import Principal, Scope, require

routes = web.RouteTableDef()


def _is_admin_key(who: Principal) -> bool:
    """An admin-scoped key (or the admin token). The open principal of a server without keys
    holds every scope so that loopback use works as before, but no key vouches for it: it
    may not define agents that start host processes, exactly as before keys existed."""
    return who.is_admin and who.key_id is not None


@routes.post("/v1/agents")
async def create_agent(request: web.Request) -> web.Response:
    who = require(request, Scope.AGENTS_WRITE)
    body = await read_body(request, dict[str, Any])
    agent = await request.app[RUNS].create_agent(who.tenant_id, body, caller_is_admin=_is_admin_key(who))
    return json_response(agent, status=201)


@routes.get("/v1/agents")
async def list_agents(request: web.Request) -> web.Response:
    """The agents by name, in the list shape every list shares: `{"data", "next_cursor"}`;
    `?after=` a name, the `next_cursor` of the page before."""
    tenant_id = require(request, Scope.AGENTS_READ).tenant_id
    limit = page_limit(request, 100)
    after = query_text(request, "after")
    await request.app[RUNS].sync_agents(tenant_id)
    agents = [a for a in request.app[RUNS].list_agents(tenant_id) if after is None or a["name"] > after]
    page = agents[:limit]
    cursor = page[-1]["name"] if len(agents) > limit else None
    return json_response({"data": page, "next_cursor": cursor})


@routes.get("/v1/agents/{name}")
async def get_agent(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.AGENTS_READ).tenant_id
    await request.app[RUNS].sync_agents(tenant_id)
    return json_response(request.app[RUNS].get_agent(tenant_id, request.match_info["name"]))
