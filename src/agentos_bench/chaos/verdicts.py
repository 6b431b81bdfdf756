"""Each fault's verdicts: met or not, with the number each was judged on.

The bounds are the documented ones (docs/deployment.md):
- the provider limit is exact while Redis answers; with Redis down each node grants from its share
  `ceil(limit / nodes)`, so the cluster may reach `nodes * ceil(limit / nodes)`, plus what a node
  held above its share as Redis went away (it keeps those streams; read from each node's
  `agentos_cluster_permits_held` just before the stop); a node cut from Redis while the others
  answer (or whose Redis call timed out under load: it logs `Redis unreachable`) grants from its
  share on its own, not counted in Redis, so the provider may see the limit plus that share.
- a node is ready again within 2 s of the database answering;
- back to cluster-wide rate limits and quotas within 2 s of Redis answering (a node tries Redis
  again a second after a failure, each call bounded by `coordination.timeout_s`, 0.5 s).
"""

from __future__ import annotations

import math
from typing import Any

READY_BOUND_S = 2.0
CLUSTER_WIDE_BOUND_S = 2.0


def provider_bound(
    fault: str, limit: int, nodes: int, held: list[int | None] | None = None, alone: bool = False
) -> int:
    """Streams over `limit` the documented rules allow during `fault`; `held`: each node's streams
    holding a slot as Redis stopped (a node above its share keeps them, the others grant up to
    theirs, until those streams end); `alone`: a node logged `Redis unreachable` during another
    fault (a call timed out under load while Redis was fine): the partial bound, its share."""
    share = math.ceil(limit / nodes)
    above = sum(max(0, h - share) for h in held or [] if h is not None)
    return {"redis-stop": nodes * share - limit + above, "node-cut": share}.get(fault, share if alone else 0)


def _decided_alone(f: dict[str, Any]) -> bool:
    """Whether a node logged a Redis outage of its own during the phase."""
    return any(
        line.endswith("Redis unreachable") and n > 0 for line, n in f.get("outage_lines_over_the_phase", {}).items()
    )


def fault_verdicts(faults: dict[str, dict[str, Any]], limit: int, nodes: int) -> dict[str, dict[str, dict[str, Any]]]:
    return {fault: _common(f, fault, limit, nodes) | _own(fault, f) for fault, f in faults.items()}


def _met(ok: bool, value: Any) -> dict[str, Any]:
    return {"met": bool(ok), "value": value}


def _common(f: dict[str, Any], fault: str, limit: int, nodes: int) -> dict[str, dict[str, Any]]:
    c = f.get("clients", {})
    lost, dup = c.get("lost_turns", 0), c.get("duplicated_turns", 0)
    steps = {k: c.get(k, 0) for k in ("lost_steps", "repeated_steps", "repeated_effects")}
    peak = f.get("provider_peak_streams")
    bound = provider_bound(fault, limit, nodes, f.get("permits_held_at_the_stop"), _decided_alone(f))
    errors = {k: c.get(k, 0) for k in ("hangs", "responses_5xx_not_503", "turns_failed_internal_error")}
    errors["503_without_retry_after"] = c.get("responses_503", 0) - c.get("responses_503_with_retry_after", 0)
    acked = c.get("turns_completed", 0)
    return {
        "acknowledged turns: 0 lost, 0 duplicated": _met(
            lost + dup == 0 and acked > 0, f"{lost} lost, {dup} duplicated of {acked}"
        ),
        "no stale write after a successor turn started": _met(c.get("stale_writes", 0) == 0, c.get("stale_writes", 0)),
        "no journaled run step repeated (or lost)": _met(
            sum(steps.values()) == 0 and c.get("runs", 0) > 0, steps | {"runs": c.get("runs", 0)}
        ),
        "every run open in the fault finishes": _met(
            c.get("unfinished_runs", 0) == 0, f"{c.get('unfinished_runs', 0)} unfinished of {c.get('runs', 0)}"
        ),
        f"provider peak <= limit + {bound}": _met(
            peak is not None and peak <= limit + bound, f"{peak} (limit {limit})"
        ),
        "clear errors (503 + Retry-After, store_unavailable), no hangs": _met(sum(errors.values()) == 0, errors),
    }


def _own(fault: str, f: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if fault == "postgres-restart":
        lines = f.get("log_lines", {})
        both = all(
            v.get("database unreachable since", 0) >= 1 and v.get("database reachable again", 0) >= 1
            for v in lines.values()
        )
        return {
            f"every node ready within {READY_BOUND_S} s of the database": _ready(f.get("all_nodes_ready_after_s")),
            "every node logged the outage's start and end": _met(bool(lines) and both, lines),
        }
    if fault == "redis-stop":
        times = f.get("cluster_wide_again_after_s", [])
        ok = bool(times) and all(t is not None and t <= CLUSTER_WIDE_BOUND_S for t in times)
        return {f"rate limits and quotas cluster-wide again within {CLUSTER_WIDE_BOUND_S} s": _met(ok, times)}
    if fault == "node-cut":
        others = f.get("turns_completed_on_the_others_during_the_cut", 0)
        return {
            "the other nodes go on during the cut": _met(others > 0, others),
            f"every node ready within {READY_BOUND_S} s of the reconnection": _ready(f.get("all_nodes_ready_after_s")),
        }
    return {}


def _ready(seconds: float | None) -> dict[str, Any]:
    return _met(seconds is not None and seconds <= READY_BOUND_S, seconds)
