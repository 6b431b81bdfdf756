"""The staircase's report: the summary of its steps (base, end, marginal per item, reclaim)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from agentos_bench.memory.plan import MemoryPlan
from agentos_bench.memory.workloads import WORKLOADS
from agentos_bench.report.document import SCHEMA_VERSION
from agentos_bench.report.machine import report_head
from agentos_bench.report.stats import slope

# (summary key, step field): the tree's memory, then the server's figures where the steps have them
COLUMNS = (
    ("rss", "rss_mb"),
    ("private_dirty", "private_dirty_mb"),
    ("heap", "heap_mb"),
    ("malloc_used", "malloc_used_mb"),
    ("malloc_free", "malloc_free_mb"),
    ("blocks", "blocks"),
)


def step_items(step: dict[str, Any]) -> int:
    """The step's item count (reports before the workloads named it `sessions`)."""
    return int(step["items"] if "items" in step else step["sessions"])


def summarize(steps: list[dict[str, Any]], marks: dict[str, dict[str, Any]], start: dict[str, Any]) -> dict[str, Any]:
    """Base, end, marginal cost per item and what was returned, for each column the steps hold."""
    climbing = [s for s in steps if step_items(s) > 0]
    xs = [float(step_items(s)) for s in climbing]
    last_release = marks.get("after_ttl") or marks.get("after_end") or marks.get("after_delete") or {}
    summary: dict[str, Any] = {}
    for key, field_name in COLUMNS:
        if not climbing or any(s.get(field_name) is None for s in (steps[0], *climbing)):
            continue
        per_item = slope(xs, [s[field_name] for s in climbing])
        scale = 1 if field_name == "blocks" else 1024  # blocks per item; else KB per item
        summary.setdefault("start_mb", {})[key] = start.get(field_name)
        summary.setdefault("base_mb", {})[key] = steps[0][field_name]
        summary.setdefault("end_mb", {})[key] = steps[-1][field_name]
        summary.setdefault("marginal_kb_per_session", {})[key] = (
            None if per_item is None else round(per_item * scale, 1)
        )
        for mark in ("after_delete", "after_ttl", "after_end"):
            if mark in marks:
                summary.setdefault(f"{mark}_mb", {})[key] = marks[mark].get(field_name)
        if "after_delete" in marks and "after_ttl" in marks and marks["after_ttl"].get(field_name) is not None:
            reclaimed = marks["after_delete"][field_name] - marks["after_ttl"][field_name]
            summary.setdefault("ttl_returned_mb", {})[key] = round(reclaimed, 2)
        if last_release.get(field_name) is not None:
            summary.setdefault("returned_mb", {})[key] = round(steps[-1][field_name] - last_release[field_name], 2)
    return summary


_TOPOLOGY = (
    "one machine, loopback only: mock-llm (one process); server (one process tree, sampled); "
    "the bench client (one process)"
)


def memory_report(
    plan: MemoryPlan,
    steps: list[dict[str, Any]],
    marks: dict[str, dict[str, Any]],
    start: dict[str, Any],
    *,
    failed: int,
    top: dict[str, float],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        **report_head("memory", _TOPOLOGY, plan.command),
        "profile": plan.profile,
        "profiles": [plan.profile],
        "workload": plan.workload,
        "item": WORKLOADS[plan.workload],
        "step": plan.step,
        "input_bytes": plan.input_bytes,
        "tracemalloc": plan.tracemalloc,
        "server_env": dict(plan.server_env),
        "mock": asdict(plan.mock),
        "sessions": plan.sessions,
        "session_ttl_s": plan.ttl_s,
        "top": top,
        "settle_s": plan.settle_s,
        "failed_turns": failed,
        "start": start,
        "steps": steps,
        "release": marks,
        "summary": summarize(steps, marks, start) if steps else {},
        **(extra or {}),
    }
