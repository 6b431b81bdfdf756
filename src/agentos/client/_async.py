"""`AsyncClient`: every route of the Agent OS HTTP API a client program calls, as a typed coroutine
or async iterator (`AdminClient` has the admin API; tests/client/test_coverage.py names the
routes no client calls, and why: the OpenAI-compatible door, a webhook's sender, the console)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, TypedDict, Unpack

import msgspec

from agentos.client._automation import AutomationCalls
from agentos.client._errors import StreamError, TransportError
from agentos.client._http import DEFAULT_TIMEOUT_S, decode, event_data, query_params, url_path
from agentos.client._knowledge import KnowledgeCalls
from agentos.client._runs import Reconnects, Run, RunEvent, RunRef, RunSteered, resumed_run_events
from agentos.client._types import BrowserToken, Message, Page, Session, SessionEvent, TurnEvent, TurnResult
from agentos.kernel import OnBusy

# The server sends a comment every 15 s on an idle run stream; four missed ones mean it is gone.
DEFAULT_STREAM_IDLE_TIMEOUT_S = 60.0
DEFAULT_MAX_RECONNECTS = 3
DEFAULT_RECONNECT_DELAY_S = 0.5


class _TurnCancel(msgspec.Struct):
    cancelled: bool
    turn_id: str | None = None


def _turn(text: str, on_busy: OnBusy | None) -> dict[str, Any]:
    return {"input": text} | ({} if on_busy is None else {"on_busy": on_busy})


class ClientOptions(TypedDict, total=False):
    """The keyword arguments of `AsyncClient`, which `Client` passes on to it."""

    token: str | None
    timeout_s: float
    stream_idle_timeout_s: float
    max_reconnects: int
    reconnect_delay_s: float


class ForkEdit(TypedDict, total=False):
    """The keyword arguments of `AsyncClient.fork_run` (and `Client.fork_run`): the forked
    step's result, edited."""

    content: str | None  # a tool step's result
    answer: str | None  # a human step's answer
    approve: bool | None  # an approval's decision


class AsyncClient(KnowledgeCalls, AutomationCalls):
    """A client of one Agent OS server: sessions, turns, agents and runs here; knowledge
    (`KnowledgeCalls`), triggers and schedules (`AutomationCalls`) from its bases.

    Usage::

        async with AsyncClient("http://127.0.0.1:8080", token=None) as client:
            session = await client.create_session()
            async for event in client.stream_turn(session.session_id, "hello"):
                if event.name == "token":
                    print(event.data["delta"], end="")

    Args:
        base_url: the server, e.g. `http://127.0.0.1:8080`.
        token: the server's `server.api_token`, sent as a bearer token (None: no auth).
        timeout_s: the whole of a plain request; the connect of a stream.
        stream_idle_timeout_s: `run_events` treats this much silence as a broken stream.
        max_reconnects: `run_events` reconnects this many times in a row without a new event
            before it gives up.
        reconnect_delay_s: the first pause before a reconnect; it doubles with each failure.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S,
        max_reconnects: int = DEFAULT_MAX_RECONNECTS,
        reconnect_delay_s: float = DEFAULT_RECONNECT_DELAY_S,
    ) -> None:
        super().__init__(base_url, token=token, timeout_s=timeout_s)
        self._reconnects = Reconnects(stream_idle_timeout_s, max_reconnects, reconnect_delay_s)

    # --- sessions ---

    async def create_session(
        self, agent: str | None = None, metadata: Mapping[str, Any] | None = None, *, on_busy: OnBusy | None = None
    ) -> Session:
        """Open a session; `agent`: the agent whose runs answer its turns (None: the server's
        default); `on_busy`: what its turns do by default when one is still running
        (docs/conversations.md; None: the agent's, else "replace").

        Raises:
            APIError: 404 `agent_not_found`, 422 `invalid_input`; and every method's ClientErrors.
        """
        body: dict[str, Any] = {} if metadata is None else {"metadata": dict(metadata)}
        body |= {k: v for k, v in (("agent", agent), ("on_busy", on_busy)) if v is not None}
        return await self._http.call("POST", "/v1/sessions", Session, body=body)

    async def get_session(self, session_id: str) -> Session:
        """Raises: APIError: 404 `session_not_found`."""
        return await self._http.call("GET", url_path("/v1/sessions/{}", session_id), Session)

    async def list_sessions(self, limit: int | None = None, after: str | None = None) -> Page[Session]:
        """One page of sessions, oldest first; `after`: the previous page's `next_cursor`."""
        return await self._http.call(
            "GET", "/v1/sessions", Page[Session], params=query_params(limit=limit, after=after)
        )

    async def delete_session(self, session_id: str) -> None:
        """Delete a session (its running turn is cancelled). Raises: APIError: 404 `session_not_found`."""
        await self._http.call("DELETE", url_path("/v1/sessions/{}", session_id), type(None))

    async def messages(self, session_id: str, *, after: int | None = None, limit: int | None = None) -> Page[Message]:
        """The session's transcript, one page. Raises: APIError: 404 `session_not_found`."""
        path = url_path("/v1/sessions/{}/messages", session_id)
        return await self._http.call("GET", path, Page[Message], params=query_params(after=after, limit=limit))

    async def events(
        self, session_id: str, *, after: int | None = None, limit: int | None = None
    ) -> Page[SessionEvent]:
        """The session's stored turn events, one page. Raises: APIError: 404 `session_not_found`."""
        path = url_path("/v1/sessions/{}/events", session_id)
        return await self._http.call("GET", path, Page[SessionEvent], params=query_params(after=after, limit=limit))

    # --- turns ---

    async def send_turn(self, session_id: str, text: str, *, on_busy: OnBusy | None = None) -> TurnResult:
        """Run a turn and return it whole, once it has ended. `on_busy`: what it does if the
        session runs a turn (None: the session's default): "replace" cancels it, "reject" is a
        409, "enqueue" waits its turn, "rollback" replaces it and drops its messages, "steer"
        hands the message to a running agent turn (`TurnResult.steered_into`).

        Raises:
            APIError: 404 `session_not_found`, 409 `turn_in_progress` (reject), 422
                `invalid_input`, 429 `overloaded` or `turn_queue_full` (with `retry_after_s`),
                503 `shutting_down`.
        """
        path = url_path("/v1/sessions/{}/turns", session_id)
        return await self._http.call("POST", path, TurnResult, body=_turn(text, on_busy))

    async def stream_turn(
        self, session_id: str, text: str, *, on_busy: OnBusy | None = None
    ) -> AsyncGenerator[TurnEvent, None]:
        """Run a turn and yield its events as they come, ending with the terminal one
        (`on_busy` as `send_turn`; a queued turn first sends `turn.queued`).

        Leaving the loop early closes the connection, which cancels the turn; wrap the iterator
        in `contextlib.aclosing` to close it at once rather than when it is collected.

        Raises:
            APIError: as `send_turn`, before the first event.
            TransportError: the connection broke mid-turn (a turn stream cannot be resumed; its
                outcome is in `messages` and `events`).
        """
        path = url_path("/v1/sessions/{}/turns", session_id)
        async with self._http.stream("POST", path, body=_turn(text, on_busy)) as events:
            async for sse in events:
                event = TurnEvent(sse.event, sse.id, event_data(sse))
                yield event
                if event.terminal:
                    return
        raise TransportError(f"the stream of a turn in session {session_id!r} ended before the turn did")

    async def follow_turn(
        self, session_id: str, turn_id: str, after: int | None = None
    ) -> AsyncGenerator[TurnEvent, None]:
        """Follow a turn another request started (a second tab, a reconnect, another node): its
        stored events after seq `after` (None: from its start), then the live ones, until the
        terminal one. `event_id` is `<turn_id>:<seq>`; pass the seq of the last one received as
        `after` to resume. Live `token` events have no id and are not replayed.

        Raises:
            APIError: 404 `session_not_found`, `turn_not_found`; 400 a bad `after`.
            StreamError: the server's stream failed (its `error` event): follow again from `after`.
            TransportError: the connection broke.
        """
        path = url_path("/v1/sessions/{}/turns/{}/events", session_id, turn_id)
        resume = None if after is None else {"Last-Event-ID": str(after)}
        async with self._http.stream("GET", path, headers=resume) as events:
            async for sse in events:
                data = event_data(sse)
                if sse.event == "error":
                    raise StreamError(str(data.get("code", "stream_failed")), str(data.get("message", "")))
                event = TurnEvent(sse.event, sse.id, data)
                yield event
                if event.terminal:
                    return
        raise TransportError(f"the events of turn {turn_id!r} ended before the turn did")

    async def cancel_turn_by_id(self, session_id: str, turn_id: str) -> bool:
        """Cancel one turn: a queued one leaves the session's queue, the running one is
        cancelled; whether it was live. Raises: APIError: 404 `session_not_found`."""
        path = url_path("/v1/sessions/{}/turns/{}", session_id, turn_id)
        return (await self._http.call("DELETE", path, _TurnCancel)).cancelled

    async def cancel_turn(self, session_id: str) -> str | None:
        """Cancel the session's running turn; the id of the turn cancelled, None when none ran.

        Raises: APIError: 404 `session_not_found`.
        """
        answer = await self._http.call("DELETE", url_path("/v1/sessions/{}/turn", session_id), _TurnCancel)
        return answer.turn_id if answer.cancelled else None

    # --- agents ---

    async def create_agent(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace an agent from its spec (docs/agents.md); returns the agent as stored.

        Raises: APIError: 422 `invalid_input` (the message names the field), 409 for a config agent.
        """
        return await self._http.call("POST", "/v1/agents", dict[str, Any], body=dict(spec))

    async def list_agents(self) -> list[dict[str, Any]]:
        body = await self._http.call("GET", "/v1/agents", dict[str, Any])
        return decode(msgspec.json.encode(body["data"]), list[dict[str, Any]])

    async def get_agent(self, name: str) -> dict[str, Any]:
        """Raises: APIError: 404 `agent_not_found`."""
        return await self._http.call("GET", url_path("/v1/agents/{}", name), dict[str, Any])

    # --- runs ---

    async def start_run(
        self, agent: str, text: str, session_id: str | None = None, *, max_cost: float | None = None
    ) -> RunRef:
        """Start a run of `agent` on `text`; it works in the background. Follow it with `run_events`.
        `max_cost`: what its model calls may cost together (at most the agent's own; docs/providers.md).

        Raises:
            APIError: 404 `agent_not_found`, 422 `invalid_input`, 429 `overloaded` (with
                `retry_after_s`), 503 `shutting_down`.
        """
        body: dict[str, Any] = {"input": text}
        body |= {k: v for k, v in (("session_id", session_id), ("max_cost", max_cost)) if v is not None}
        return await self._http.call("POST", url_path("/v1/agents/{}/runs", agent), RunRef, body=body)

    async def steer_run(self, run_id: str, text: str) -> RunSteered:
        """Hand a working run a message: it joins the run at its next step, before its next
        model call (docs/agents.md).

        Raises: APIError: 404 `run_not_found`; 409 a run that is not working (ended, or waiting
            for a human: answer it instead); 422 `invalid_input`.
        """
        path = url_path("/v1/runs/{}/steer", run_id)
        return await self._http.call("POST", path, RunSteered, body={"input": text})

    async def get_run(self, run_id: str) -> Run:
        """Raises: APIError: 404 `run_not_found`."""
        return await self._http.call("GET", url_path("/v1/runs/{}", run_id), Run)

    async def list_runs(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        session_id: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> Page[Run]:
        """One page of runs, newest first; `status="waiting_human"`: those waiting for a person,
        each with its `pending` request. Raises: APIError: 422 `invalid_input` (a bad filter)."""
        params = query_params(status=status, agent=agent, session_id=session_id, limit=limit, after=after)
        return await self._http.call("GET", "/v1/runs", Page[Run], params=params)

    async def cancel_run(self, run_id: str) -> Run:
        """Soft cancel: a working run stops before its next step, a waiting one at once."""
        return await self._http.call("POST", url_path("/v1/runs/{}/cancel", run_id), Run)

    async def terminate_run(self, run_id: str) -> Run:
        """Hard stop in any state; returns once the run has ended."""
        return await self._http.call("POST", url_path("/v1/runs/{}/terminate", run_id), Run)

    async def answer(
        self,
        run_id: str,
        operation_id: str,
        answer: str = "",
        *,
        approve: bool | None = None,
        args_hash: str | None = None,
    ) -> Run:
        """Answer a run's human request: a question with `answer`; an approval with `approve` and
        the request's `args_hash` (what exactly is approved); an uncertain step with "retry" or "skip".

        Raises:
            APIError: 404 `run_not_found`; 409 `args_hash_mismatch` or a request no longer open;
                422 `invalid_input` (an approval without `approve` and `args_hash`).
        """
        body: dict[str, Any] = {"operation_id": operation_id, "answer": answer}
        body |= {k: v for k, v in (("approve", approve), ("args_hash", args_hash)) if v is not None}
        return await self._http.call("POST", url_path("/v1/runs/{}/answer", run_id), Run, body=body)

    async def fork_run(self, run_id: str, at_seq: int, **edits: Unpack[ForkEdit]) -> RunRef:
        """Fork the run at step `at_seq`: a new run with its journal up to that step (replayed
        without a model or tool call), then live. Edit that step's result with `content` (a tool
        step) or `answer` and `approve` (a human step); none: an exact copy (docs/agents.md "Forks").

        Raises:
            APIError: 404 `run_not_found`; 422 `fork_seq_out_of_range`, `fork_seq_not_a_boundary`,
                `fork_edit_not_allowed`, `fork_edit_invalid`; 429, 503 as `start_run`.
        """
        edit = {k: v for k, v in edits.items() if v is not None}
        body: dict[str, Any] = {"at_seq": at_seq} | ({"edit": edit} if edit else {})
        return await self._http.call("POST", url_path("/v1/runs/{}/fork", run_id), RunRef, body=body)

    # --- browser tokens ---

    async def create_browser_token(
        self,
        *,
        session_ids: Sequence[str] = (),
        run_ids: Sequence[str] = (),
        scopes: Sequence[str] | None = None,
        subject: str | None = None,
        expires_in_s: int | None = None,
    ) -> BrowserToken:
        """Mint a short-lived token for one end user's page, from your back end with a tenant
        key: it may use only `session_ids` and `run_ids`, with `scopes` (of sessions:read,
        sessions:write, runs:read, runs:write; None: those of the key) (docs/security.md).

        Raises: APIError: 403 `insufficient_scope`; 404 a session or run not the tenant's; 422.
        """
        body: dict[str, Any] = {"session_ids": list(session_ids), "run_ids": list(run_ids)}
        given = (
            ("scopes", None if scopes is None else list(scopes)),
            ("subject", subject),
            ("expires_in_s", expires_in_s),
        )
        body |= {k: v for k, v in given if v is not None}
        return await self._http.call("POST", "/v1/tokens", BrowserToken, body=body)

    def run_events(self, run_id: str, after: int | None = None) -> AsyncGenerator[RunEvent, None]:
        """The run's events after seq `after` (None: from its start), stored then live, until the
        terminal one (`run.completed`, `run.failed`, `run.cancelled`).

        A broken stream is resumed where it stopped (`Last-Event-ID`: the last seq received), up
        to `max_reconnects` times in a row without a new event. Live `token` events are not
        stored: the ones sent while disconnected are not replayed.

        Raises:
            APIError: 404 `run_not_found` (or any refusal of a reconnect).
            StreamError: the stream kept failing (`stream_broken`, or the server's own code).
        """
        return resumed_run_events(self._http, run_id, after, self._reconnects)
