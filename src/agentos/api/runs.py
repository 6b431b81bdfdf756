"""Agent runs: start one, read it, follow its events, cancel or terminate it, answer its human.

Routes::

    POST /v1/agents/{name}/runs       {"input", "session_id"?}         202 {"run_id", "status", ...}
    GET  /v1/runs                     ?status=&agent=&session_id=&limit=&after=   200 {data, next_cursor}
    GET  /v1/runs/{run_id}                                             200 run
    GET  /v1/runs/{run_id}/events     SSE, `id:` = seq; resumes after `Last-Event-ID` (or ?after=)
    POST /v1/runs/{run_id}/cancel     soft                             200 run
    POST /v1/runs/{run_id}/terminate  hard, any state                  200 run
    POST /v1/runs/{run_id}/answer     {"operation_id", "answer"?, "approve"?, "args_hash"?}  200 run
    POST /v1/runs/{run_id}/steer      {"input"}                         200 {"run_id", "seq"}
    POST /v1/runs/{run_id}/fork       {"at_seq", "edit"?}               202 {"run_id", "forked_from", ...}

Reads take `runs:read`, the rest `runs:write`; every call acts for the principal's tenant, so
another tenant's run is a 404 `run_not_found`, and a `session_id` must name one of the
tenant's sessions (else 404 `session_not_found`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import msgspec
from aiohttp import web

from agentos.agents.forks import ForkEdit
from agentos.api.admission import ADMISSION
from agentos.api.agents import UNKNOWN_AGENT
from agentos.api.body import (
    AnswerCreate,
    RunCreate,
    RunFork,
    RunSteer,
    page_limit,
    query_text,
    read_body,
    resume_after,
)
from agentos.api.keys import RUNS, RUNTIME, SSE_KEEPALIVE_S
from agentos.api.owners import check_run, check_session, list_owner
from agentos.api.routes import (
    BAD_BODY,
    OWNER,
    SEQ,
    Answer,
    Limits,
    Schema,
    events,
    header,
    json,
    limit_param,
    nullable,
    page,
    query,
    ref,
    retry,
    tagged,
)
from agentos.api.sessions import json_response
from agentos.api.sse import SSEStream, failures_as_events
from agentos.errors import InvalidInput
from agentos.ids import new_run_id
from agentos.journal.run_list import CURSOR_PATTERN, RUN_STATUSES, RunCursor, RunQuery
from agentos.kernel import RUN_TERMINAL_EVENTS
from agentos.runtime.turn import check_input
from agentos.tenancy.principal import Scope, require

routes = web.RouteTableDef()
operation = tagged("runs")


class RunStarted(msgspec.Struct):
    """A run accepted and queued: where to read it and follow its events."""

    run_id: str
    status: Literal["queued"]
    run_url: str
    events_url: str


class ForkOrigin(msgspec.Struct):
    """The run a fork was forked from, and the last step of its journal the fork copied."""

    run_id: str
    at_seq: int


class RunForked(msgspec.Struct):
    """A fork accepted and queued: where to read it and follow its events."""

    run_id: str
    status: Literal["queued"]
    run_url: str
    events_url: str
    forked_from: ForkOrigin


_HUMAN_REQUEST = Schema.object(
    "HumanRequest",
    {
        "operation_id": {"type": "string"},
        "kind": {"enum": ["question", "approval", "uncertain"]},
        "args_hash": {"type": "string", "description": "an approval must quote it"},
        "deadline_ms": {"type": "integer"},
        "question": {"type": "string"},
        "tool": {"type": "string"},
        "arguments": {
            "type": "string",
            "description": "the tool's arguments as the model sent them (JSON text); args_hash is their hash",
        },
        "call_id": {"type": "string"},
        "operation_id_uncertain": {"type": "string", "description": "uncertain: the tool call in doubt"},
    },
    ["operation_id", "kind"],
)
# What `agentos.agents.service` answers for a run (`RunService.get_run` and the lists).
RUN = Schema.object(
    "Run",
    {
        "run_id": {"type": "string"},
        "agent": {"type": "string"},
        "session_id": nullable("string"),
        "parent_run_id": nullable("string"),
        "input": {"type": "string", "description": "the run's input; in GET /v1/runs cut at 500 characters"},
        "input_truncated": {"type": "boolean", "description": "true: `input` is cut (only in GET /v1/runs)"},
        "status": {"enum": list(RUN_STATUSES)},
        "result": nullable("string"),
        "reason": nullable("string"),
        "created_ms": {"type": "integer"},
        "updated_ms": {"type": "integer"},
        "owner": OWNER,
        "pending": {**ref("HumanRequest"), "description": "only while status is waiting_human"},
        "forked_from": {
            "description": "a fork (POST /v1/runs/{run_id}/fork): the run it was forked from and the last"
            " step it copied; null: not a fork",
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "properties": {"run_id": {"type": "string"}, "at_seq": {"type": "integer"}},
                    "required": ["run_id", "at_seq"],
                },
            ],
        },
        "trace_id": {
            "type": "string",
            "description": "the run's own trace (docs/observability.md); only when tracing is on,"
            " and not in GET /v1/runs",
        },
        "trace_url": {
            "type": "string",
            "description": "`[telemetry] trace_url_template` with the run's trace id: the trace in the"
            " operator's backend; only when the template is set and the run's trace is sampled",
        },
    },
    ["run_id", "agent", "input", "input_truncated", "status", "created_ms", "updated_ms", "owner"],
    uses=(_HUMAN_REQUEST,),
)
_THE_RUN = {200: json("The run", RUN)}
_UNKNOWN = {404: "Unknown run"}
_AFTER = {
    "type": "string",
    "pattern": CURSOR_PATTERN,
    "description": "the next_cursor of the page before: `<created_ms>:<run_id>` of its last run",
}


# What refuses a new run, a start or a fork alike (the admission's order: docs/behaviour.md).
_RUN_LIMITS = Limits(
    more_429="`run_rate_limited` (runs per minute), `overloaded` (over `kernel.max_active_runs`), `tenant_active_runs`",
    quota="`quota_tokens_per_day`: the tenant's provider tokens for the UTC day are spent"
    " (Retry-After: until 00:00 UTC)",
    budgets=True,
)


@routes.post("/v1/agents/{name}/runs")
@operation(
    "Start a background run of the agent",
    body=RunCreate,
    answers={202: json("Queued", RunStarted)},
    errors=BAD_BODY | UNKNOWN_AGENT | {503: retry("Draining: the server starts no new runs")},
    limits=_RUN_LIMITS,
)
async def start_run(request: web.Request) -> web.Response:
    who = require(request, Scope.RUNS_WRITE)
    tenant_id, runtime, admission = who.tenant_id, request.app[RUNTIME], request.app[ADMISSION]
    admission.offer(who, "run")  # draining or full: refused before the body, like a turn
    body = await read_body(request, RunCreate)
    check_input(body.input, runtime.settings.kernel.max_input_chars)  # 422 before any budget is held, as a turn's
    runs, agent, run_id = request.app[RUNS], request.match_info["name"], new_run_id()
    # The agent's own budget per run joins the admission's hold (an unknown agent: 404 inside)
    spec = runs.get_agent(tenant_id, agent) if await runs.sees_agent(tenant_id, agent) else None
    max_cost, model = (0.0, None) if spec is None else (spec["max_cost"], spec["model"])  # unknown: 404 inside
    if spec is not None and body.max_cost is not None and not (max_cost and body.max_cost > max_cost):
        max_cost = body.max_cost  # past the agent's: 422 inside
    async with admission.starting(who, "run", body.input, run=(run_id, max_cost), model=model) as started:
        if body.session_id is not None:
            await runtime.get_session(tenant_id, body.session_id)  # 404 unless it is the tenant's
            await check_session(runtime, who, body.session_id)  # and the user's
        await runs.start_run(
            tenant_id, agent, body.input, body.session_id, run_id=run_id, max_cost=body.max_cost, owner=who.subject
        )
        started.bind(run_id)  # its steps' calls carry the run id
    links = {"run_url": f"/v1/runs/{run_id}", "events_url": f"/v1/runs/{run_id}/events"}
    return json_response(RunStarted(run_id, "queued", **links), status=202)


@routes.get("/v1/runs")
@operation(
    "List the tenant's runs, newest first; status=waiting_human is the inbox",
    parameters=(
        query("status", "only runs in this status", {"type": "string", "enum": list(RUN_STATUSES)}),
        query("agent", "only runs of this agent"),
        query("session_id", "only runs of this session"),
        limit_param(50),
        query("after", _AFTER["description"], _AFTER),
    ),
    answers={
        200: json(
            "A page of runs, newest first (by created_ms, then run_id); a waiting run carries its"
            " `pending` request, what POST /v1/runs/{run_id}/answer needs",
            page("RunPage", RUN),
        )
    },
    errors={422: "A bad limit, status or after (not a next_cursor); the message names the parameter"},
)
async def list_runs(request: web.Request) -> web.Response:
    """The tenant's runs, newest first; `status=waiting_human` is the inbox (each with its `pending`)."""
    who = require(request, Scope.RUNS_READ)
    query = dataclasses.replace(_run_query(request), owner=list_owner(who))
    return json_response(await request.app[RUNS].list_runs(who.tenant_id, query))


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
@operation("A run's status, result and pending human request", answers=_THE_RUN, errors=_UNKNOWN)
async def get_run(request: web.Request) -> web.Response:
    who, run_id = require(request, Scope.RUNS_READ), request.match_info["run_id"]
    await check_run(request.app[RUNS], who, run_id)
    return json_response(await request.app[RUNS].get_run(who.tenant_id, run_id))


@routes.post("/v1/runs/{run_id}/cancel")
@operation("Soft cancel: the loop stops at its next step", answers=_THE_RUN, errors=_UNKNOWN)
async def cancel_run(request: web.Request) -> web.Response:
    who, run_id = require(request, Scope.RUNS_WRITE), request.match_info["run_id"]
    await check_run(request.app[RUNS], who, run_id)
    return json_response(await request.app[RUNS].cancel(who.tenant_id, run_id))


@routes.post("/v1/runs/{run_id}/terminate")
@operation("Hard stop in every state; records run.cancelled", answers=_THE_RUN, errors=_UNKNOWN)
async def terminate_run(request: web.Request) -> web.Response:
    who, run_id = require(request, Scope.RUNS_WRITE), request.match_info["run_id"]
    await check_run(request.app[RUNS], who, run_id)
    return json_response(await request.app[RUNS].terminate(who.tenant_id, run_id))


_STEERED = Schema.object(
    "RunSteered",
    {
        "run_id": {"type": "string"},
        "seq": {
            "type": ["integer", "null"],
            "description": "the journal step that holds the message; null: the run works on another node,"
            " which has not taken it in within 30 s (it stays queued for the run's next step)",
        },
    },
)


@routes.post("/v1/runs/{run_id}/steer")
@operation(
    "Steer a working run: the message joins it at its next step, before its next model call",
    body=RunSteer,
    answers={200: json("Journaled at step `seq` (the run's events show run.steered)", _STEERED)},
    errors=BAD_BODY
    | _UNKNOWN
    | {409: "`run_not_working`: finished, waiting for a human, or ended before its next step"},
)
async def steer_run(request: web.Request) -> web.Response:
    who, run_id = require(request, Scope.RUNS_WRITE), request.match_info["run_id"]
    body = await read_body(request, RunSteer)
    await check_run(request.app[RUNS], who, run_id)
    return json_response(await request.app[RUNS].steer_run(who.tenant_id, run_id, body.input))


_FORK_ERRORS: dict[int, str | Answer] = {
    422: "Wrong types or values (the message names the field); `fork_seq_out_of_range`: at_seq past the"
    " run's last step; `fork_seq_not_a_boundary`: that step is not finished; `fork_edit_not_allowed`:"
    " an edit of a step that is not a tool result or a human answer; `fork_edit_invalid`: an edit that"
    " does not fit its step",
}


@routes.post("/v1/runs/{run_id}/fork")
@operation(
    "Fork the run at a step: a new run with its journal up to `at_seq`, optionally with that step's"
    " result edited, then live",
    body=RunFork,
    answers={202: json("Queued; the fork replays the copied steps without a model or tool call", RunForked)},
    errors=BAD_BODY | _UNKNOWN | _FORK_ERRORS | {503: retry("Draining: the server starts no new runs")},
    limits=_RUN_LIMITS,
)
async def fork_run(request: web.Request) -> web.Response:
    who = require(request, Scope.RUNS_WRITE)
    tenant_id, admission = who.tenant_id, request.app[ADMISSION]
    admission.offer(who, "run")  # draining or full: refused before the body, like a start
    body = await read_body(request, RunFork)
    runs, run_id, fork_id = request.app[RUNS], request.match_info["run_id"], new_run_id()
    await check_run(runs, who, run_id)  # another user's run: the same 404 (the fork keeps its owner)
    original = await runs.get_run(tenant_id, run_id)  # a 404 before any budget is held
    edit = ForkEdit(body.edit.content, body.edit.answer, body.edit.approve) if body.edit is not None else None
    async with admission.starting(who, "run", original["input"], run=(fork_id, 0.0)) as started:
        await runs.fork_run(tenant_id, run_id, body.at_seq, edit, fork_id=fork_id)
        started.bind(fork_id)
    links = {"run_url": f"/v1/runs/{fork_id}", "events_url": f"/v1/runs/{fork_id}/events"}
    return json_response(RunForked(fork_id, "queued", **links, forked_from=ForkOrigin(run_id, body.at_seq)), status=202)


@routes.post("/v1/runs/{run_id}/answer")
@operation(
    "Answer the run's human request",
    body=AnswerCreate,
    answers=_THE_RUN,
    errors=BAD_BODY | _UNKNOWN | {409: "Not waiting, or the hash does not match"},
)
async def answer_run(request: web.Request) -> web.Response:
    who, run_id = require(request, Scope.RUNS_WRITE), request.match_info["run_id"]
    body = await read_body(request, AnswerCreate)
    runs = request.app[RUNS]
    await check_run(runs, who, run_id)
    info = await runs.answer(
        who.tenant_id,
        run_id,
        body.operation_id,
        body.answer,
        approve=body.approve,
        args_hash=body.args_hash,
    )
    return json_response(info)


@routes.get("/v1/runs/{run_id}/events")
@operation(
    "The run's events as SSE (`id:` = seq), resumable after Last-Event-ID (or ?after=)",
    parameters=(
        header("Last-Event-ID", "the seq to resume after", SEQ),
        query("after", "the seq to resume after", SEQ),
    ),
    answers={
        200: events(
            "run.started, model.started, token, model.completed, tool.call, tool.result,"
            " human.requested, human.answered, then run.completed | run.failed | run.cancelled"
            " (docs/agents.md, the event table). Every event but token is journaled and its data"
            " carries `at_ms`, when it was (ms since the epoch); ignore event types you do not"
            " know. If the stream itself fails, its last event is `error` {code, message,"
            " error_id}, without an id: reconnect to resume."
        )
    },
    errors={400: "Bad Last-Event-ID or after: not an integer from 0 to 2**62", 404: "Unknown run"},
)
async def run_events(request: web.Request) -> web.StreamResponse:
    who = require(request, Scope.RUNS_READ)
    tenant_id = who.tenant_id
    runs = request.app[RUNS]
    run_id = request.match_info["run_id"]
    after = resume_after(request)
    await runs.get_run(tenant_id, run_id)  # a 404 before the stream starts
    await check_run(runs, who, run_id)
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
