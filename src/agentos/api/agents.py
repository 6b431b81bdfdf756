"""Agents: create (or replace) one from an API body, list them, read one (docs/agents.md)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentos.api.body import read_body
from agentos.api.keys import RUNS
from agentos.api.sessions import json_response

routes = web.RouteTableDef()


@routes.post("/v1/agents")
async def create_agent(request: web.Request) -> web.Response:
    body = await read_body(request, dict[str, Any])
    return json_response(await request.app[RUNS].create_agent(body), status=201)


@routes.get("/v1/agents")
async def list_agents(request: web.Request) -> web.Response:
    return json_response({"agents": request.app[RUNS].list_agents()})


@routes.get("/v1/agents/{name}")
async def get_agent(request: web.Request) -> web.Response:
    return json_response(request.app[RUNS].get_agent(request.match_info["name"]))
