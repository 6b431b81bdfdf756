"""How the client copes with a stream that breaks, a server that fails mid-stream, an answer
that is not the server's, and no server at all.

Not against the real Agent OS server: a real one does not drop a healthy stream on cue. A small
aiohttp app on loopback plays the server's wire format (the same `encode_event` framing) and
misbehaves on purpose; it records the `Last-Event-ID` of every connection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from agentos.api.sse import SSE_HEADERS, encode_event
from agentos.client import APIError, AsyncClient, ProtocolError, StreamError, TransportError
from agentos.client._http import parse_retry_after

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Sent = list[tuple[int | None, str, dict[str, Any]]]


class FakeRunServer:
    def __init__(self) -> None:
        self.last_event_ids: list[str | None] = []

    async def events(self, request: web.Request, sent: Sent) -> web.StreamResponse:
        self.last_event_ids.append(request.headers.get("Last-Event-ID"))
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(b": keep-alive\n\n")
        for seq, name, data in sent:
            await response.write(encode_event(seq, name, data))
        await response.write_eof()
        return response


@pytest.fixture
async def fake() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def serve(handler: Handler) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield serve
    for runner in runners:
        await runner.cleanup()


async def test_a_dropped_run_stream_resumes_after_the_last_seq(fake: Callable[[Handler], Awaitable[str]]) -> None:
    server = FakeRunServer()

    async def handler(request: web.Request) -> web.StreamResponse:
        if not server.last_event_ids:  # first connection: two events and a token, then it drops
            sent = [(1, "run.started", {}), (2, "tool.call", {"name": "x"}), (None, "token", {"delta": "t"})]
            return await server.events(request, sent)
        return await server.events(request, [(3, "run.completed", {"result": "ok"})])

    async with AsyncClient(await fake(handler), reconnect_delay_s=0) as client:
        events = [e async for e in client.run_events("run_1")]
    expected = [(1, "run.started"), (2, "tool.call"), (None, "token"), (3, "run.completed")]
    assert [(e.seq, e.name) for e in events] == expected
    assert server.last_event_ids == [None, "2"]  # the token moved nothing: resumed after seq 2


async def test_run_events_start_after_the_seq_given(fake: Callable[[Handler], Awaitable[str]]) -> None:
    server = FakeRunServer()

    async def handler(request: web.Request) -> web.StreamResponse:
        return await server.events(request, [(8, "run.completed", {})])

    async with AsyncClient(await fake(handler)) as client:
        assert [e.seq async for e in client.run_events("run_1", after=7)] == [8]
    assert server.last_event_ids == ["7"]


async def test_a_stream_that_keeps_failing_ends_in_a_stream_error(fake: Callable[[Handler], Awaitable[str]]) -> None:
    server = FakeRunServer()

    async def handler(request: web.Request) -> web.StreamResponse:
        failed = (None, "error", {"code": "internal_error", "message": "boom", "error_id": "err_1"})
        first: Sent = [(1, "run.started", {})] if not server.last_event_ids else []
        return await server.events(request, [*first, failed])

    async with AsyncClient(await fake(handler), max_reconnects=2, reconnect_delay_s=0) as client:
        seen: list[str] = []
        with pytest.raises(StreamError) as caught:
            async for event in client.run_events("run_1"):
                seen.append(event.name)
    assert seen == ["run.started"]
    assert (caught.value.code, caught.value.error_id) == ("internal_error", "err_1")
    # one connection that got an event, then 1 + max_reconnects that got none, all after seq 1
    assert server.last_event_ids == [None, "1", "1", "1"]


async def test_a_refused_reconnect_is_an_api_error(fake: Callable[[Handler], Awaitable[str]]) -> None:
    server = FakeRunServer()

    async def handler(request: web.Request) -> web.StreamResponse:
        if server.last_event_ids:
            body = b'{"error": {"code": "shutting_down", "message": "draining"}}'
            return web.Response(status=503, body=body, content_type="application/json", headers={"Retry-After": "1"})
        return await server.events(request, [(1, "run.started", {})])

    async with AsyncClient(await fake(handler), reconnect_delay_s=0) as client:
        with pytest.raises(APIError) as caught:
            async for _ in client.run_events("run_1"):
                pass
    assert (caught.value.status, caught.value.code, caught.value.retry_after_s) == (503, "shutting_down", 1.0)


async def test_a_turn_stream_cut_before_its_end_is_a_transport_error(fake: Callable[[Handler], Awaitable[str]]) -> None:
    server = FakeRunServer()

    async def handler(request: web.Request) -> web.StreamResponse:
        return await server.events(request, [(1, "turn.started", {}), (2, "token", {"delta": "a"})])

    async with AsyncClient(await fake(handler)) as client:
        names: list[str] = []
        with pytest.raises(TransportError):
            async for event in client.stream_turn("s1", "hi"):
                names.append(event.name)
    assert names == ["turn.started", "token"]


async def test_an_answer_that_is_not_the_servers_json(fake: Callable[[Handler], Awaitable[str]]) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/v1/runs"):
            return web.Response(status=502, text="<html>Bad Gateway</html>", content_type="text/html")
        return web.Response(status=200, text='{"unexpected": true}', content_type="application/json")

    async with AsyncClient(await fake(handler)) as client:
        with pytest.raises(APIError) as caught:
            await client.get_run("run_1")
        assert (caught.value.status, caught.value.code) == (502, "http_error")
        assert "Bad Gateway" in caught.value.message
        with pytest.raises(ProtocolError):
            await client.get_session("s1")


async def test_no_server_is_a_transport_error(fake: Callable[[Handler], Awaitable[str]]) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=204)

    url = await fake(handler)
    async with AsyncClient(url) as client:
        await client.delete_session("s1")  # 204: no body, no error
    runner_gone = url.replace(url.rsplit(":", 1)[1], "1")  # port 1: nothing listens there
    async with AsyncClient(runner_gone, timeout_s=5, reconnect_delay_s=0) as client:
        with pytest.raises(TransportError):
            await client.list_sessions()
        with pytest.raises(StreamError) as caught:
            async for _ in client.run_events("run_1"):
                pass
        assert caught.value.code == "stream_broken" and isinstance(caught.value.__cause__, TransportError)


@pytest.mark.parametrize(("header", "seconds"), [("1", 1.0), ("2.5", 2.5), ("soon", None), ("-1", None), (None, None)])
def test_retry_after_is_read_in_seconds(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds
