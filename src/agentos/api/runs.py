"""Agent runs: start one, read it, follow its events, cancel or terminate it, answer its human.

Routes::

    POST /v1/agents/{name}/runs       {"input", "session_id"?}         202 {"run_id", "status", ...}
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
from agentos.api.body import MAX_AFTER, AnswerCreate, RunCreate, read_body
from agentos.api.keys import RUNS, RUNTIME, SSE_KEEPALIVE_S
from agentos.api.sessions import json_response
from agentos.api.sse import SSEStream, failures_as_events
from agentos.api.turns import check_accepting
from agentos.errors import BadRequest
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()

_RUN_TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})


@routes.post("/v1/agents/{name}/runs")
async def start_run(request: web.Request) -> web.Response:
    tenant_id = require(request, Scope.RUNS_WRITE).tenant_id
    body = await read_body(request, RunCreate)
    runtime = request.app[RUNTIME]
    check_accepting(runtime)
    async with starting_run(request):
        if body.session_id is not None:
            await runtime.get_session(tenant_id, body.session_id)  # 404 unless it is the tenant's
        run_id = await request.app[RUNS].start_run(tenant_id, request.match_info["name"], body.input, body.session_id)
    links = {"run_url": f"/v1/runs/{run_id}", "events_url": f"/v1/runs/{run_id}/events"}
    return json_response({"run_id": run_id, "status": "queued", **links}, status=202)


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
    stream = await SSEStream.open(request, _RUN_TERMINAL)
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
    """Raises: BadRequest: `Last-Event-ID` (or `?after=`) is not a non-negative integer."""
    raw = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"Last-Event-ID must be an event seq (an integer), got {raw!r}") from None
    if not 0 <= value <= MAX_AFTER:  # a larger one overflows SQLite's integer mid-stream
        raise BadRequest(f"Last-Event-ID must be an event seq from 0 to {MAX_AFTER}, got {value}")
    return value
