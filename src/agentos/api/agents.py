"""Agents: create (or replace) one from an API body, list them, read one (docs/agents.md)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentos.api.body import page_limit, read_body
from agentos.api.keys import RUNS
from agentos.api.sessions import json_response

routes = web.RouteTableDef()


@routes.post("/v1/agents")
async def create_agent(request: web.Request) -> web.Response:
    body = await read_body(request, dict[str, Any])
    return json_response(await request.app[RUNS].create_agent(body), status=201)


@routes.get("/v1/agents")
async def list_agents(request: web.Request) -> web.Response:
    """The agents by name, in the list shape every list shares: `{"data", "next_cursor"}`;
    `?after=` a name, the `next_cursor` of the page before."""
    limit = page_limit(request, 100)
    after = request.query.get("after")
    agents = [a for a in request.app[RUNS].list_agents() if after is None or a["name"] > after]
    page = agents[:limit]
    cursor = page[-1]["name"] if len(agents) > limit else None
    return json_response({"data": page, "next_cursor": cursor})


@routes.get("/v1/agents/{name}")
async def get_agent(request: web.Request) -> web.Response:
    return json_response(request.app[RUNS].get_agent(request.match_info["name"]))
