"""Conversations through the client against the real server on loopback: `on_busy` (a session's
default and a turn's own), a queued turn cancelled by its id, a turn followed from a second
client (and resumed after a seq), a working run steered, a budget for a run, a browser token
narrowed to one session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing

import pytest

from agentos.client import APIError, AsyncClient, Client, TurnEvent
from agentos.mock.server import MockServer
from agentos.testing import RunningServer
from agentos.testing.tenants import create_tenant_key

ADMIN = "admin-token"


async def _slow_server(
    server_factory: Callable[..., Awaitable[RunningServer]], mock_factory: Callable[..., Awaitable[MockServer]]
) -> RunningServer:
    """Turns of 100 tokens at 200 a second (half a second): long enough to send a second message into."""
    mock = await mock_factory(ttft_ms=5, tps=200, tokens=100)
    return await server_factory(mock.url, **{"server.api_token": ADMIN})


async def _until_token(events: AsyncGenerator[TurnEvent, None]) -> tuple[asyncio.Task[list[TurnEvent]], str]:
    """Read `events` in a task; return it once the turn streams tokens, and the turn's id."""
    seen: list[TurnEvent] = []
    streaming = asyncio.Event()

    async def read() -> list[TurnEvent]:
        async for event in events:
            seen.append(event)
            if event.name == "token":
                streaming.set()
        return seen

    task = asyncio.create_task(read())
    async with asyncio.timeout(10):
        await streaming.wait()
    return task, seen[0].data["turn_id"]


async def test_on_busy_reject_enqueue_and_a_queued_turn_cancelled_by_its_id(
    server_factory: Callable[..., Awaitable[RunningServer]], mock_factory: Callable[..., Awaitable[MockServer]]
) -> None:
    server = await _slow_server(server_factory, mock_factory)
    async with AsyncClient(server.url, token=ADMIN) as client:
        session = await client.create_session(on_busy="reject")
        assert session.on_busy == "reject" and (await client.get_session(session.session_id)).on_busy == "reject"
        first, first_id = await _until_token(client.stream_turn(session.session_id, "one"))
        with pytest.raises(APIError) as refused:
            await client.send_turn(session.session_id, "two")  # the session's default: reject
        assert refused.value.status == 409 and refused.value.code == "turn_in_progress"

        queued = client.stream_turn(session.session_id, "three", on_busy="enqueue")  # the turn's own wins
        head = await anext(queued)
        assert head.name == "turn.queued"
        assert await client.cancel_turn_by_id(session.session_id, head.data["turn_id"])
        assert [e.name async for e in queued] == ["turn.cancelled"]
        assert (await first)[-1].name == "turn.completed" and first_id  # untouched by either

        later = await client.send_turn(session.session_id, "four", on_busy="enqueue")  # nothing runs: it runs
        assert later.status == "completed" and later.output
        assert not await client.cancel_turn_by_id(session.session_id, later.turn_id)  # over: not live


async def test_a_turn_followed_from_a_second_client_and_resumed_after_a_seq(
    server_factory: Callable[..., Awaitable[RunningServer]], mock_factory: Callable[..., Awaitable[MockServer]]
) -> None:
    server = await _slow_server(server_factory, mock_factory)
    async with AsyncClient(server.url, token=ADMIN) as sender, AsyncClient(server.url, token=ADMIN) as follower:
        session = await sender.create_session()
        sent, turn_id = await _until_token(sender.stream_turn(session.session_id, "hello"))
        followed = [e async for e in follower.follow_turn(session.session_id, turn_id)]
        assert followed[0].name == "turn.started" and followed[-1].name == "turn.completed"
        assert (await sent)[-1].name == "turn.completed"
        stored = [e for e in followed if e.event_id is not None]
        assert all(e.event_id.startswith(f"{turn_id}:") for e in stored if e.event_id)
        started_seq = int(str(stored[0].event_id).rpartition(":")[2])
        tail = [e.name async for e in follower.follow_turn(session.session_id, turn_id, after=started_seq)]
        assert tail == ["turn.completed"]  # the stored events after turn.started (tokens are live only)
        with pytest.raises(APIError) as unknown:
            await anext(follower.follow_turn(session.session_id, "turn_nope"))
        assert unknown.value.status == 404


async def test_a_working_run_steered_and_a_runs_budget(tools_server: RunningServer) -> None:
    async with AsyncClient(tools_server.url) as client:
        await client.create_agent({"name": "ops", "tools": ["run_command", "ask_human"]})
        ref = await client.start_run("ops", "tidy up")
        names: list[str] = []
        async with aclosing(client.run_events(ref.run_id)) as events:
            async for event in events:
                names.append(event.name)
                if event.name == "tool.call" and "run.steered" not in names:
                    steered = await client.steer_run(ref.run_id, "use blue")
                    assert steered.run_id == ref.run_id and isinstance(steered.seq, int)
                if event.name == "human.requested":
                    await client.answer(ref.run_id, event.human_request().operation_id, "yes")
        assert names[-1] == "run.completed" and names.count("run.steered") == 1
        with pytest.raises(APIError) as over:
            await client.steer_run(ref.run_id, "too late")
        assert over.value.status == 409 and over.value.code == "run_not_working"
        with pytest.raises(APIError) as bad:
            await client.start_run("ops", "x", max_cost=-1.0)
        assert bad.value.status == 422
        # The budget reaches the server: the mock's model has no price, so no call could be held
        # within one (402 at the start; the same run without `max_cost` ran above).
        with pytest.raises(APIError) as unpriced:
            await client.start_run("ops", "x", max_cost=5.0)
        assert unpriced.value.status == 402 and unpriced.value.code == "budget_exceeded"


def _browser_flow(url: str, key: str) -> tuple[str, str, int, int]:
    """A back end mints a token for one session; the page, with it, reaches that session only."""
    with Client(url, token=key) as backend:
        mine, other = backend.create_session(), backend.create_session()
        minted = backend.create_browser_token(session_ids=[mine.session_id], scopes=["sessions:read"])
        assert minted.session_ids == [mine.session_id] and minted.key_id and minted.token not in repr(minted)
    with Client(url, token=minted.token) as page:
        seen = page.get_session(mine.session_id).session_id
        with pytest.raises(APIError) as hidden:
            page.get_session(other.session_id)
        with pytest.raises(APIError) as read_only:
            page.send_turn(mine.session_id, "hi")
    return seen, mine.session_id, hidden.value.status, read_only.value.status


async def test_a_browser_token_reaches_its_session_only(
    server_factory: Callable[..., Awaitable[RunningServer]], mock: MockServer
) -> None:
    server = await server_factory(mock.url, **{"server.api_token": ADMIN})
    key = await create_tenant_key(server.url, ADMIN, tenant_id="acme")
    seen, mine, hidden, read_only = await asyncio.to_thread(_browser_flow, server.url, key.key)
    assert seen == mine and hidden == 404 and read_only == 403
