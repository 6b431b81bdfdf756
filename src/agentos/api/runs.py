"""Agent runs: start one, read it, follow its events, cancel or terminate it, answer its human.

Routes::

    POST /v1/agents/{name}/runs       {"input", "session_id"?}         202 {"run_id", "status", ...}
    GET  /v1/runs                     ?status=&agent=&session_id=&limit=&after=   200 {data, next_cursor}
    GET  /v1/runs/{run_id}                                             200 run
    GET  /v1/runs/{run_id}/events     SSE, `id:` = seq; resumes after `Last-Event-ID` (or ?after=)
    POST /v1/runs/{run_id}/cancel     soft                             200 run
    POST /v1/runs/{run_id}/terminate  hard, any state                  200 run
    POST /v1/runs/{run_id}/answer     {"operation_id", "answer"?, "approve"?, "args_hash"?}  200 run

Reads take `runs:read`, the rest `runs:write`; every call acts for the principal's tenant, so
another tenant's run is a 404 `run_not_found`, and a `session_id` must name one of the
tenant's sessions (else 404 `session_not_found`).
"""

from __future__ import annotations

from aiohttp import web

from agentos.api.admission import starting_run
from agentos.api.body import MAX_AFTER, AnswerCreate, RunCreate, decimal, page_limit, query_text, read_body
from agentos.api.keys import RUNS, RUNTIME, SSE_KEEPALIVE_S
from agentos.api.sessions import json_response
from agentos.api.sse import SSEStream, failures_as_events
from agentos.errors import BadRequest, InvalidInput
from agentos.journal.run_list import RUN_STATUSES, RunCursor, RunQuery
from agentos.kernel import RUN_TERMINAL_EVENTS
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()


@routes.post("/v1/agents/{name}/runs")
async def start_run(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.RUNS_WRITE).tenant_id
    runtime = request.app[RUNTIME]
    runtime.offer_run(tenant_id)  # draining or full: refused before the body, like a turn
    body = await read_body(request, RunCreate)
    async with starting_run(request):
        if body.session_id is not None:
            await runtime.get_session(tenant_id, body.session_id)  # 404 unless it is the tenant's
        run_id = await request.app[RUNS].start_run(tenant_id, request.match_info["name"], body.input, body.session_id)
    links = {"run_url": f"/v1/runs/{run_id}", "events_url": f"/v1/runs/{run_id}/events"}
    return json_response({"run_id": run_id, "status": "queued", **links}, status=202)


@routes.get("/v1/runs")
async def list_runs(request: web.Request) -> web.Response:
    """The tenant's runs, newest first; `status=waiting_human` is the inbox (each with its `pending`)."""
    tenant_id = require(request, Scope.RUNS_READ).tenant_id
    return json_response(await request.app[RUNS].list_runs(tenant_id, _run_query(request)))


def _run_query(request: web.Request) -> RunQuery:
    """Raises: InvalidInput (422): a bad limit, status or cursor, or NUL in a filter."""
    status = query_text(request, "status")
    if status is not None and status not in RUN_STATUSES:
        raise InvalidInput(f"query parameter 'status' must be one of {', '.join(RUN_STATUSES)}, got {status[:40]!r}")
    after = query_text(request, "after")
    return RunQuery(
        limit=page_limit(request, 50),
        status=status,
        agent=query_text(request, "agent"),
        session_id=query_text(request, "session_id"),
        after=RunCursor.parse(after) if after is not None else None,
    )


@routes.get("/v1/runs/{run_id}")
async def get_run(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.RUNS_READ).tenant_id
    return json_response(await request.app[RUNS].get_run(tenant_id, request.match_info["run_id"]))


@routes.post("/v1/runs/{run_id}/cancel")
async def cancel_run(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.RUNS_WRITE).tenant_id
    return json_response(await request.app[RUNS].cancel(tenant_id, request.match_info["run_id"]))


@routes.post("/v1/runs/{run_id}/terminate")
async def terminate_run(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.RUNS_WRITE).tenant_id
    return json_response(await request.app[RUNS].terminate(tenant_id, request.match_info["run_id"]))


@routes.post("/v1/runs/{run_id}/answer")
async def answer_run(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.RUNS_WRITE).tenant_id
    body = await read_body(request, AnswerCreate)
    runs = request.app[RUNS]
    info = await runs.answer(
        tenant_id,
        request.match_info["run_id"],
        body.operation_id,
        body.answer,
        approve=body.approve,
        args_hash=body.args_hash,
    )
    return json_response(info)


@routes.get("/v1/runs/{run_id}/events")
async def run_events(request: web.Request) -> web.StreamResponse:
    tenant_id = require(request, Scope.RUNS_READ).tenant_id
    runs = request.app[RUNS]
    run_id = request.match_info["run_id"]
    after = _after_seq(request)
    await runs.get_run(tenant_id, run_id)  # a 404 before the stream starts
    stream = await SSEStream.open(request, RUN_TERMINAL_EVENTS)
    keepalive_s = request.app[SSE_KEEPALIVE_S]
    events = runs.events(tenant_id, run_id, after)
    # The run did not fail, its stream did: `error`, without an id, so a client that reconnects
    # with Last-Event-ID resumes after the last event it got.
    async with failures_as_events(stream, "error", {"code": "internal_error"}, "events of run %s failed", run_id):
        try:
            while (event := await stream.next_or_keepalive(events, keepalive_s)) is not None:
                # Tokens are live only: no `id:`, so Last-Event-ID stays on the last journaled event.
                await stream.send(None if event.type == "token" else event.seq, event.type, event.data)
        finally:
            await events.aclose()
    return stream.response


def _after_seq(request: web.Request) -> int:
    """The seq to resume after: `Last-Event-ID`, else `?after=`, else 0.

    Raises:
        BadRequest: either, when given, is not one integer from 0 to `MAX_AFTER` (an empty one,
            or `after` given twice, is not one either).
    """
    after = request.query.getall("after", [])
    if len(after) > 1:
        raise BadRequest(f"after: give it once, got {len(after)}")
    given = [("Last-Event-ID", request.headers.get("Last-Event-ID")), ("after", after[0] if after else None)]
    seqs = [_seq(name, raw) for name, raw in given if raw is not None]
    return seqs[0] if seqs else 0


def _seq(name: str, raw: str) -> int:
    value = decimal(raw)  # ASCII digits only: int() also takes "+5", "1_0", "٣" and 4300 digits
    # checked before the stream starts: a larger one overflowed SQLite's integer mid-stream
    if value is None or value > MAX_AFTER:
        raise BadRequest(f"{name} must be an event seq from 0 to {MAX_AFTER}, got {raw[:40]!r}")
    return value
