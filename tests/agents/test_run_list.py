"""The run list on each journal (`runs.db`, PostgreSQL) with more runs than a page: order,
filters, paging and tenancy over 1500 journaled runs, and the plan of its statement (an index
range scan in the list's order: no scan of every run, no sort)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentos.agents.service import RunService
from agentos.config import Settings
from agentos.journal.journal import RunRow
from agentos.journal.run_list import RUN_STATUSES, RunCursor, RunQuery, list_runs_sql
from tests.agents.conftest import ServiceFactory, journal_sql

A, B = "acme", "bravo"
RUNS_OF_A, RUNS_OF_B = 1200, 300
AGENTS = ("ops", "deploy", "review")


def row(tenant: str, n: int) -> RunRow:
    """Run `n` of `tenant`: created at ms 1000 + n // 2 (two runs share each ms: the id breaks ties)."""
    status = RUN_STATUSES[n % len(RUN_STATUSES)]
    return RunRow(
        run_id=f"run_{tenant}_{n:05d}",
        tenant_id=tenant,
        agent=AGENTS[n % 3],
        session_id=f"ses_{n % 7}",
        parent_run_id=None,
        depth=0,
        spec_ref="spec",
        input="x",
        status=status,
        result=None,
        reason=None,
        created_ms=1000 + n // 2,
        updated_ms=1000 + n // 2,
    )


def steps(service: RunService, r: RunRow) -> list[Any]:
    """A model step for every run (a payload each), and for a waiting one its human request."""
    journal, tenant = service.journal, r.tenant_id
    ops = journal.begin_step(tenant, r.run_id, 1, "model", "started", None, r.created_ms)
    ops += journal.finish_step(tenant, r.run_id, 1, "done", {"text": f"reply {r.run_id}"}, r.created_ms)
    if r.status == "waiting_human":
        request = {"operation_id": f"{r.run_id}:2", "kind": "question", "question": f"ok {r.run_id}?"}
        ops += journal.begin_step(tenant, r.run_id, 2, "human", "waiting", request, r.created_ms)
    return ops


async def journaled(make_service: ServiceFactory) -> RunService:
    """A service whose journal holds the runs of `row` and their steps, written through its store
    (no engine: these runs are rows to list, none is driven)."""
    service: RunService = await make_service(agents={})
    rows = [row(A, n) for n in range(RUNS_OF_A)] + [row(B, n) for n in range(RUNS_OF_B)]
    await service.store.write([service.journal.insert_run(r) for r in rows])
    await service.store.write([op for r in rows for op in steps(service, r)])
    return service


async def every_page(service: RunService, tenant: str, limit: int, **filters: Any) -> list[str]:
    ids: list[str] = []
    after = None
    while True:
        page = await service.list_runs(tenant, RunQuery(limit=limit, after=after, **filters))
        assert len(page["data"]) <= limit
        ids += [run["run_id"] for run in page["data"]]
        if page["next_cursor"] is None:
            return ids
        after = RunCursor.parse(page["next_cursor"])


def expected(tenant: str, count: int, keep: Any = lambda r: True) -> list[str]:
    rows = [r for r in (row(tenant, n) for n in range(count)) if keep(r)]
    return [r.run_id for r in sorted(rows, key=lambda r: (r.created_ms, r.run_id), reverse=True)]


async def test_pages_cover_the_tenants_runs_newest_first(make_service: ServiceFactory) -> None:
    service = await journaled(make_service)
    assert await every_page(service, A, 1000) == expected(A, RUNS_OF_A)
    assert await every_page(service, B, 7) == expected(B, RUNS_OF_B)  # ties within a ms split across pages
    waiting = await every_page(service, A, 100, status="waiting_human")
    assert waiting == expected(A, RUNS_OF_A, lambda r: r.status == "waiting_human") and len(waiting) == 200
    of_agent = await every_page(service, A, 333, agent="deploy", session_id="ses_3")
    assert of_agent == expected(A, RUNS_OF_A, lambda r: r.agent == "deploy" and r.session_id == "ses_3")
    assert await every_page(service, B, 50, agent="nobody") == []
    page = await service.list_runs(A, RunQuery(limit=1000))
    for run in page["data"]:  # a waiting run carries its request, the others nothing
        if run["status"] == "waiting_human":
            assert run["pending"]["question"] == f"ok {run['run_id']}?", run
        else:
            assert "pending" not in run, run


async def test_a_page_is_an_index_range_scan(
    make_service: ServiceFactory, journal_settings: Settings, tmp_path: Path
) -> None:
    service = await journaled(make_service)
    await service.close(drain_s=0)
    postgres = journal_settings.store.backend == "postgres"
    if postgres:
        await journal_sql(journal_settings, tmp_path / "data", "ANALYZE")
    queries = {
        "runs_by_tenant": RunQuery(limit=50),
        "runs_by_status": RunQuery(limit=50, status="waiting_human", after=RunCursor(1300, "run_z")),
        "runs_by_agent": RunQuery(limit=50, agent="ops"),
    }
    for index, query in queries.items():
        sql, params = list_runs_sql(A, query)
        explain = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
        rows = await journal_sql(journal_settings, tmp_path / "data", explain + sql, *params)
        plan = " ".join(str(r[-1]) for r in rows)
        assert index in plan, plan
        assert "Sort" not in plan and "TEMP B-TREE" not in plan and "Seq Scan" not in plan, plan  # no scan
        assert "Join Filter" not in plan and "Recheck" not in plan, plan  # the payload by its key
