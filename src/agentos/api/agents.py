"""Agents: create (or replace) one from an API body, list them, read one (docs/agents.md).

A caller sees the config file's agents and its own tenant's; creating one takes `agents:write`,
and only an admin-scoped key may define what starts host processes (`check_agent`).
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from agentos.api.body import page_limit, query_text, read_body
from agentos.api.keys import RUNS
from agentos.api.routes import (
    BAD_BODY,
    REF_TEMPLATE,
    Schema,
    json,
    listing,
    refines,
    tagged,
)
from agentos.api.sessions import BAD_QUERY, json_response, page_after
from agentos.config.agents import BUILTIN_TOOLS, MAX_KNOWLEDGE_COLLECTIONS, AgentSpec
from agentos.tenancy.principal import Principal, Scope, require

routes = web.RouteTableDef()
operation = tagged("agents")
_NAME = "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


@refines("AgentSpec")
def _spec_checks(schemas: dict[str, Any]) -> None:
    """What `parse_agent_spec` checks beyond the struct's types, where JSON Schema can say it (the
    rest, such as approval_required naming tools of the agent, it answers with a 422)."""
    spec = schemas["AgentSpec"]["properties"]
    spec["name"]["pattern"] = _NAME
    spec["tools"]["items"] = {"enum": list(BUILTIN_TOOLS)}
    spec["knowledge"] |= {
        "items": {"type": "string", "pattern": _NAME},
        "maxItems": MAX_KNOWLEDGE_COLLECTIONS,
        "uniqueItems": True,
    }
    schemas["McpServerSpec"]["properties"]["name"] |= {  # the agent name's pattern, without "__"
        "pattern": "^[A-Za-z0-9]([A-Za-z0-9-]|_[A-Za-z0-9-])*_?$",
        "maxLength": 64,
    }


def _agent() -> Schema:
    """An agent as the API shows it: its spec, and where it came from."""
    _, schemas = msgspec.json.schema_components([AgentSpec], ref_template=REF_TEMPLATE)
    _spec_checks(schemas)
    spec = schemas["AgentSpec"]
    source = {"enum": ["config", "api"], "description": "config agents cannot be replaced over the API"}
    properties = {**spec["properties"], "source": source}
    body = {"title": "Agent", "type": "object", "required": [*spec["required"], "source"], "properties": properties}
    return Schema("Agent", body, uses=(AgentSpec,))


AGENT = _agent()
UNKNOWN_AGENT = {404: "Unknown agent"}


def _is_admin_key(who: Principal) -> bool:
    """An admin-scoped key (or the admin token). The open principal of a server without keys
    holds every scope so that loopback use works as before, but no key vouches for it: it
    may not define agents that start host processes, exactly as before keys existed."""
    return who.is_admin and who.key_id is not None


@routes.post("/v1/agents")
@operation(
    "Create or replace an agent (docs/agents.md)",
    body=AgentSpec,
    answers={201: json("The agent", AGENT)},
    errors=BAD_BODY | {403: "Asks for what an API caller may not have (docs/security.md)", 409: "A config agent"},
)
async def create_agent(request: web.Request) -> web.Response:
    who = require(request, Scope.AGENTS_WRITE)
    body = await read_body(request, dict[str, Any])
    agent = await request.app[RUNS].create_agent(who.tenant_id, body, caller_is_admin=_is_admin_key(who))
    return json_response(agent, status=201)


@routes.get("/v1/agents")
@operation("List agents, by name", **listing("A page of agents", "AgentPage", AGENT, 100), errors=BAD_QUERY)
async def list_agents(request: web.Request) -> web.Response:
    """The agents by name, in the list shape every list shares: `{"data", "next_cursor"}`;
    `?after=` a name, the `next_cursor` of the page before."""
    tenant_id = require(request, Scope.AGENTS_READ).tenant_id
    limit = page_limit(request, 100)
    after = query_text(request, "after")
    await request.app[RUNS].sync_agents(tenant_id)
    return page_after(request.app[RUNS].list_agents(tenant_id), "name", after, limit)


@routes.get("/v1/agents/{name}")
@operation("Read an agent", answers={200: json("The agent", AGENT)}, errors=UNKNOWN_AGENT)
async def get_agent(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.AGENTS_READ).tenant_id
    await request.app[RUNS].sync_agents(tenant_id)
    return json_response(request.app[RUNS].get_agent(tenant_id, request.match_info["name"]))
