"""Turns end to end: the real server on a loopback port, the real mock over HTTP, real SQLite."""

from __future__ import annotations

import asyncio

import aiohttp

from agentos.mock.server import MockServer
from agentos.testing import Event, RunningServer, sse_events
from tests.api.helpers import SSE, new_session, turn_events


async def test_a_streamed_turn_has_named_events_with_ids(server: RunningServer, http: aiohttp.ClientSession) -> None:
    sid = await new_session(http, server.url)
    events = await turn_events(http, server.url, sid, "hello world")
    names = [e.name for e in events]
    assert names == ["turn.started", "token", "token", "token", "token", "turn.completed"]
    assert len({e.id for e in events}) == len(events) and all(e.id for e in events)
    assert events[1].data == {"delta": "tok "}
    assert events[-1].data["usage"]["completion_tokens"] == 4
    assert events[-1].data["usage"]["prompt_tokens"] > 0


async def test_the_transcript_and_events_are_stored(server: RunningServer, http: aiohttp.ClientSession) -> None:
    sid = await new_session(http, server.url)
    await turn_events(http, server.url, sid, "first")
    await turn_events(http, server.url, sid, "second")
    async with http.get(f"{server.url}/v1/sessions/{sid}/messages") as r:
        page = await r.json()
    assert [(m["role"], m["content"], m["status"]) for m in page["data"]] == [
        ("user", "first", "completed"),
        ("assistant", "tok tok tok tok ", "completed"),
        ("user", "second", "completed"),
        ("assistant", "tok tok tok tok ", "completed"),
    ]
    async with http.get(f"{server.url}/v1/sessions/{sid}/messages", params={"limit": "3"}) as r:
        first = await r.json()
    async with http.get(f"{server.url}/v1/sessions/{sid}/messages", params={"after": str(first["next_cursor"])}) as r:
        rest = await r.json()
    assert len(first["data"]) == 3 and len(rest["data"]) == 1 and rest["next_cursor"] is None

    async def events_stored() -> list[str]:
        async with http.get(f"{server.url}/v1/sessions/{sid}/events") as r:
            return [e["type"] for e in (await r.json())["data"]]

    assert await events_stored() == ["turn.started", "turn.completed"] * 2


async def test_the_history_goes_to_the_provider(server_factory, mock_factory, http: aiohttp.ClientSession) -> None:
    mock: MockServer = await mock_factory()
    server: RunningServer = await server_factory(mock.url)
    sid = await new_session(http, server.url)
    one = await turn_events(http, server.url, sid, "a b c")
    two = await turn_events(http, server.url, sid, "d e f")
    # the mock counts prompt words: the second prompt carries the first exchange too
    assert two[-1].data["usage"]["prompt_tokens"] > one[-1].data["usage"]["prompt_tokens"] + 3


async def test_a_json_turn_returns_the_whole_answer(server: RunningServer, http: aiohttp.ClientSession) -> None:
    sid = await new_session(http, server.url)
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "hi"}) as r:
        assert r.status == 200
        body = await r.json()
    assert body["status"] == "completed" and body["output"] == "tok tok tok tok "
    assert body["session_id"] == sid and body["usage"]["completion_tokens"] == 4


async def test_last_wins_cancels_the_running_turn_and_aborts_its_upstream(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=400, tokens=200)  # turns of half a second
    server: RunningServer = await server_factory(mock.url)
    sid = await new_session(http, server.url)
    url = f"{server.url}/v1/sessions/{sid}/turns"
    first_events = []
    async with http.post(url, json={"input": "one"}, headers=SSE) as r:
        async for event in sse_events(r):
            first_events.append(event)
            if event.name == "token" and len(first_events) == 3:
                second = asyncio.create_task(_collect(http, url, "two"))
    assert first_events[-1].name == "turn.cancelled"
    assert first_events[-1].data["reason"] == "superseded"
    second_events = await second
    assert second_events[-1].name == "turn.completed"
    await mock.stats.wait_for(lambda s: s.aborted == 1, what="the mock to see the first upstream aborted")
    assert mock.stats.completed == 1  # only the second turn's upstream ran to its end
    # the partial output of the cancelled turn is kept, marked cancelled
    async with http.get(f"{server.url}/v1/sessions/{sid}/messages") as r:
        messages = (await r.json())["data"]
    cancelled = [m for m in messages if m["role"] == "assistant" and m["status"] == "cancelled"]
    assert len(cancelled) == 1 and cancelled[0]["content"].startswith("tok tok")


async def _collect(http: aiohttp.ClientSession, url: str, text: str) -> list[Event]:
    async with http.post(url, json={"input": text}, headers=SSE) as r:
        return [e async for e in sse_events(r)]


async def test_delete_turn_cancels_it(server_factory, mock_factory, http: aiohttp.ClientSession) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=20, tokens=200)
    server: RunningServer = await server_factory(mock.url)
    sid = await new_session(http, server.url)
    events = []
    async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}, headers=SSE) as r:
        async for event in sse_events(r):
            events.append(event)
            if event.name == "token" and len(events) == 2:
                async with http.delete(f"{server.url}/v1/sessions/{sid}/turn") as d:
                    assert (await d.json())["cancelled"] is True
    assert events[-1].name == "turn.cancelled" and events[-1].data["reason"] == "cancelled"
    async with http.delete(f"{server.url}/v1/sessions/{sid}/turn") as d:
        assert await d.json() == {"cancelled": False, "turn_id": None}


async def test_a_client_that_drops_mid_stream_does_not_leak_its_turn(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=20, tokens=200)
    server: RunningServer = await server_factory(mock.url)
    sid = await new_session(http, server.url)
    r = await http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}, headers=SSE)
    async for event in sse_events(r):
        if event.name == "token":
            break
    r.close()  # drop the socket mid-stream
    assert await server.runtime.wait_idle(5.0), "the dropped turn did not end"
    assert not list(server.runtime.live_turns)
    assert server.runtime.kernel.statistics().permits_in_use == 0
    await mock.stats.wait_for(lambda s: s.aborted == 1, what="the upstream to be aborted")


async def test_admission_rejects_with_429_and_leaves_the_running_turn_alone(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=50, tokens=30)
    server: RunningServer = await server_factory(mock.url, **{"kernel.max_in_flight_turns": 1})
    busy, other = await new_session(http, server.url), await new_session(http, server.url)
    events = []
    async with http.post(f"{server.url}/v1/sessions/{busy}/turns", json={"input": "x"}, headers=SSE) as r:
        async for event in sse_events(r):
            events.append(event)
            if event.name == "token" and len(events) == 2:
                for target in (other, busy):  # the busy session's own new turn is refused too
                    turns_url = f"{server.url}/v1/sessions/{target}/turns"
                    async with http.post(turns_url, json={"input": "y"}, headers=SSE) as rej:
                        assert rej.status == 429
                        assert rej.headers["Retry-After"] == "1"
                        assert (await rej.json())["error"]["code"] == "overloaded"
    assert events[-1].name == "turn.completed"
    assert len([e for e in events if e.name == "token"]) == 30
    async with http.get(f"{server.url}/metrics") as m:
        text = await m.text()
    assert "agentos_admission_rejected_total 2.0" in text
    assert "agentos_admission_limit 1.0" in text


async def test_the_provider_limit_is_never_exceeded(server_factory, mock_factory, http: aiohttp.ClientSession) -> None:
    mock: MockServer = await mock_factory(ttft_ms=20, tps=500, tokens=5)
    server: RunningServer = await server_factory(mock.url, **{"kernel.concurrency_limit": 3})
    sessions = [await new_session(http, server.url) for _ in range(12)]
    results = await asyncio.gather(*(turn_events(http, server.url, s) for s in sessions))
    assert all(events[-1].name == "turn.completed" for events in results)
    assert mock.stats.max_concurrent == 3
    assert mock.stats.completed == 12


async def test_a_turn_waiting_too_long_for_a_permit_fails_clearly(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=5, tps=20, tokens=100)
    server: RunningServer = await server_factory(
        mock.url, **{"kernel.concurrency_limit": 1, "kernel.permit_wait_timeout_s": 0.2}
    )
    a, b = await new_session(http, server.url), await new_session(http, server.url)
    long_turn = asyncio.create_task(turn_events(http, server.url, a))
    await mock.stats.wait_for(lambda s: s.in_flight == 1, what="the first turn to hold the permit")
    events = await turn_events(http, server.url, b)
    assert events[-1].name == "turn.failed" and events[-1].data["reason"] == "provider_limit_timeout"
    server.runtime.cancel_turn("default", a)
    assert (await long_turn)[-1].name == "turn.cancelled"


async def test_overload_gets_fast_429s_and_accepted_turns_finish_cleanly(
    server_factory, mock_factory, http: aiohttp.ClientSession
) -> None:
    mock: MockServer = await mock_factory(ttft_ms=50, tps=200, tokens=5)
    server: RunningServer = await server_factory(
        mock.url, **{"kernel.max_in_flight_turns": 8, "kernel.concurrency_limit": 3}
    )
    sessions = [await new_session(http, server.url) for _ in range(40)]

    async def attempt(sid: str) -> tuple[int, list[Event]]:
        async with http.post(f"{server.url}/v1/sessions/{sid}/turns", json={"input": "x"}, headers=SSE) as r:
            if r.status != 200:
                return r.status, []
            return 200, [e async for e in sse_events(r)]

    results = await asyncio.gather(*(attempt(s) for s in sessions))
    statuses = [status for status, _ in results]
    assert set(statuses) == {200, 429}
    assert statuses.count(200) >= 8
    for status, events in results:
        if status == 200:
            assert events[-1].name == "turn.completed"  # no broken streams, no failures
    assert mock.stats.max_concurrent <= 3
    # recovery: once the burst is over, a turn goes straight through
    assert (await turn_events(http, server.url, sessions[0]))[-1].name == "turn.completed"


async def test_the_terminal_event_and_the_streams_end_arrive_together_and_the_connection_is_reused(
    server: RunningServer, http: aiohttp.ClientSession
) -> None:
    """The terminal event is written with the chunked body's end (`write_eof`): the body still
    ends with that event's frame and the last chunk, and the keep-alive connection then serves
    the next turn (two turns on one raw connection)."""
    sid = await new_session(http, server.url)
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for text in ("first", "second"):
            body = f'{{"input": "{text}"}}'.encode()
            writer.write(
                f"POST /v1/sessions/{sid}/turns HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
                raw = await reader.readuntil(b"\r\n0\r\n\r\n")  # the body, up to the last chunk
            assert raw.count(b"event: turn.completed") == 1
            assert raw.endswith(b"\n\n\r\n0\r\n\r\n")  # the terminal event's frame, then the last chunk
            assert raw.rfind(b"event: ") == raw.find(b"event: turn.completed")
    finally:
        writer.close()
