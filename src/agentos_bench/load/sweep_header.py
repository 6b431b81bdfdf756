"""The sweep report's header lines about the run's set-up: tenancy, the server nodes, the topology."""

from __future__ import annotations

from typing import Any

from agentos_bench.load.sweep_plan import SweepPlan


def tenancy(plan: SweepPlan) -> dict[str, Any]:
    """What the report's header says about tenants: how many, and how the users were spread."""
    if not plan.tenants:
        return {"tenants": 0, "text": "single tenant: no admin token, no keys (the default tenant, open on loopback)"}
    if plan.idp_url:
        return {
            "tenants": plan.tenants,
            "idp_url": plan.idp_url,
            "text": (
                f"{plan.tenants} tenants (made through /v1/admin after start), one end user each, signed in with "
                f"a JWT from the bench identity provider at {plan.idp_url} (RS256, keys fetched by the server "
                "from its JWKS); users assigned round-robin, every request with its tenant's user's token"
            ),
        }
    return {
        "tenants": plan.tenants,
        "text": (
            f"{plan.tenants} tenants, one API key each (made through /v1/admin after start, the server "
            "started with an admin token); users assigned round-robin (user i -> tenant i mod "
            f"{plan.tenants}), every request with its tenant's key"
        ),
    }


def cluster(plan: SweepPlan) -> dict[str, Any]:
    """What the report's header says about the server nodes and how the load was spread."""
    if plan.nodes == 1:
        text = "one server process per profile"
        if plan.workers > 1:
            text = (
                f"one `agentos serve --workers {plan.workers}` per profile ({plan.workers} worker processes on"
                " one port, each a node of the cluster path); server CPU and memory summed over the supervisor"
                " and its workers"
            )
        return {"nodes": 1, "workers": plan.workers, "spread": None, "text": text}
    how = {
        "session": "each session on one node, sessions round-robin (session i -> node i mod N)",
        "turn": "sessions created round-robin, each turn of a session on the node after its previous turn's",
    }[plan.spread]
    text = (
        f"{plan.nodes} server nodes per profile (`agentos serve` processes sharing a fresh PostgreSQL "
        f"schema and Redis key prefix); {how}; server CPU and memory summed over the nodes"
    )
    return {"nodes": plan.nodes, "workers": plan.workers, "spread": plan.spread, "text": text}


def topology(plan: SweepPlan) -> str:
    server = f"external server at {plan.server_url}" if plan.server_url else "server (one process per profile)"
    if plan.nodes > 1 and not plan.server_url:
        server = f"{plan.nodes} server nodes per profile"
    if plan.workers > 1 and not plan.server_url:
        server += f", each `agentos serve --workers {plan.workers}`"
    if plan.peers:
        server += f"; then each peer ({', '.join(plan.peers)}), one process, on the same mock"
    mock = f"external mock at {plan.mock_url}" if plan.mock_url else "mock-llm (one process, uvloop)"
    pins = _pins(plan)
    return (
        f"one machine, loopback only: {mock}; {server}; load generator (one process, uvloop, "
        f"aiohttp TCPConnector(limit=0)); {pins}"
    )


def _pins(plan: SweepPlan) -> str:
    """Which cores each part ran on (`--server-cpus`, `--mock-cpus`, `--loadgen-cpus`)."""
    if not (plan.server_cpus or plan.mock_cpus or plan.loadgen_cpus):
        return "all three share the cores"
    return (
        f"pinned: server on CPUs {plan.server_cpus or 'any'}, mock on {plan.mock_cpus or 'any'},"
        f" load generator on {plan.loadgen_cpus or 'any'}"
    )
