"""Tenants in a sweep: N tenants with one API key each, the users spread over them round-robin.

Usage::

    keys = await make_tenant_keys(http, server_url, admin, 100)   # admin: AdminKeys, its env on the server
    targets = [ServerTarget(server_url, api_key=key, name=tenant_name(j)) for j, key in enumerate(keys)]
    row = await tenant_point_row(targets, http, PointPlan(concurrency=1000), probes)

Theory of operation. The sweep starts the server with an admin token (`AdminKeys.env`); once it
is ready, `make_tenant_keys` creates the tenants `bench-t001` … and one key each through the
admin API (`/v1/admin/tenants`, `/v1/admin/keys`), the way an operator would. Every request of
the point then carries a tenant key, so key lookup, tenant filtering, the limiters (when
`[tenant_limits]` sets any) and the kernel's fair share across tenants are on the measured path.

At a point with c users, user i belongs to tenant i mod N: tenant j has ⌈(c − j) / N⌉ users, and a
tenant with none sits out (c=1 drives one tenant). The tenants are the groups of `run_groups`,
which shares one window among them and interleaves their workers' starts, so the first users of
every tenant start before the second user of any. The point's row merges every tenant's turns
into one (the same columns as a single-tenant row, so the overhead table compares it with the
direct row unchanged) and adds `tenancy`: how many tenants had users and the spread over them of
turns/s and TTFT p95 (min / median / max), so a tenant left behind would show.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import aiohttp

from agentos_bench.load.loadgen import Group, PointPlan, PointResult, Probes, run_groups
from agentos_bench.load.targets import Target
from agentos_bench.load.tenant_keys import AdminKeys


def tenant_name(index: int) -> str:
    """The bench's name for tenant `index` (0-based): `t001` …; `AdminKeys` makes it `bench-t001`."""
    return f"t{index + 1:03d}"


async def make_tenant_keys(http: aiohttp.ClientSession, base_url: str, admin: AdminKeys, tenants: int) -> list[str]:
    """Create `tenants` tenants with one key each on the server at `base_url`; their keys, in order.

    Raises:
        RuntimeError: the server refused a tenant or a key (the message has its answer).
    """
    return [await admin(http, base_url, tenant_name(i)) for i in range(tenants)]


def users_per_tenant(users: int, tenants: int) -> list[int]:
    """Round-robin: user i goes to tenant i mod `tenants`; the count of each tenant's users."""
    return [len(range(j, users, tenants)) for j in range(tenants)]


async def tenant_point_row(
    targets: Sequence[Target], http: aiohttp.ClientSession, plan: PointPlan, probes: Probes
) -> dict[str, Any]:
    """Run one point with `plan.concurrency` users spread over the tenants (one target each, with
    that tenant's key: `ServerTarget`, or `agentos_bench.load.nodes.NodesTarget` over nodes); its row."""
    counts = users_per_tenant(plan.concurrency, len(targets))
    groups = [Group(target, count) for target, count in zip(targets, counts, strict=True) if count]
    results = await run_groups(groups, http, plan, probes)
    row = merge_results(results, plan.concurrency).as_row()
    row["tenancy"] = tenant_spread(results, len(targets))
    return row


def merge_results(results: Sequence[PointResult], concurrency: int) -> PointResult:
    """One server result of every tenant's turns (the probes are shared: taken from the first)."""
    first = results[0]
    return PointResult(
        target="server",
        concurrency=concurrency,
        duration_s=first.duration_s,
        samples=[s for r in results for s in r.samples],
        server=first.server,
        mock_stats=first.mock_stats,
        mock_cpu_cores=first.mock_cpu_cores,
        loadgen_cpu_cores=first.loadgen_cpu_cores,
        services_cpu_s=first.services_cpu_s,
        setup_failures=sum(r.setup_failures for r in results),
    )


def tenant_spread(results: Sequence[PointResult], tenants: int) -> dict[str, Any]:
    """How the tenants with users fared: their count, users each, turns/s and TTFT p95 min/median/max."""
    rows = [r.as_row() for r in results]
    p95s = [r["ttft_ms"]["p95"] for r in rows if r["ttft_ms"].get("p95") is not None]
    return {
        "tenants": tenants,
        "tenants_with_users": len(rows),
        "users_per_tenant": _spread([float(r["concurrency"]) for r in rows]),
        "turns_per_s": _spread([r["turns_per_s"] for r in rows]),
        "ttft_p95_ms": _spread(p95s),  # tenants with too few turns for a p95 are left out
        "ttft_p95_tenants": len(p95s),
    }


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    return {"min": min(values), "median": round(statistics.median(values), 2), "max": max(values)}
