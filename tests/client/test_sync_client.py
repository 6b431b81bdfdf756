"""The blocking `Client` against the real server on loopback.

The server runs on the test's event loop, so each blocking flow runs in a worker thread
(`asyncio.to_thread`), as a user's script would run beside a server in another process."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentos.client import APIError, Client, ClientError
from agentos.testing import RunningServer
from tests.client.conftest import CAREFUL


def _agent_flow(url: str) -> tuple[list[str], str, str | None]:
    """The docs' first agent run, blocking: approve each command, answer the question."""
    with Client(url) as client:
        client.create_agent({"name": "careful", **CAREFUL})
        ref = client.start_run("careful", "tidy up")
        names = []
        for event in client.run_events(ref.run_id):
            names.append(event.name)
            if event.name == "human.requested":
                request = event.human_request()
                if request.kind == "approval":
                    client.answer(ref.run_id, request.operation_id, approve=True, args_hash=request.args_hash)
                else:
                    client.answer(ref.run_id, request.operation_id, "yes")
        run = client.get_run(ref.run_id)
        assert client.list_runs(agent="careful", limit=1).data == [run]
        return [n for n in names if n != "token"], run.status, run.result


async def test_a_blocking_agent_run_to_completion(tools_server: RunningServer) -> None:
    names, status, result = await asyncio.to_thread(_agent_flow, tools_server.url)
    assert names.count("human.requested") == 3 and names.count("tool.result") == 2
    assert names[-1] == "run.completed" and status == "completed" and result


def _session_flow(url: str) -> tuple[list[str], str, str]:
    with Client(url) as client:
        session = client.create_session()
        names = [e.name for e in client.stream_turn(session.session_id, "hello")]
        whole = client.send_turn(session.session_id, "again")
        with pytest.raises(APIError) as caught:
            client.get_session("nope")
        return names, whole.output, caught.value.code


async def test_a_blocking_session_turn(server: RunningServer) -> None:
    names, output, code = await asyncio.to_thread(_session_flow, server.url)
    assert names == ["turn.started", "token", "token", "token", "token", "turn.completed"]
    assert output == "tok tok tok tok " and code == "session_not_found"


def _close_mid_stream(url: str) -> None:
    client = Client(url)
    session = client.create_session()
    stream = client.stream_turn(session.session_id, "hello")
    assert next(stream).name == "turn.started"
    client.close()  # with the stream still open: it is closed too, and the thread stops
    with pytest.raises(ClientError):
        client.create_session()
    stream.close()  # the generator's clean-up finds the client closed and does nothing


async def test_close_ends_open_streams_and_the_thread(server: RunningServer) -> None:
    await asyncio.to_thread(_close_mid_stream, server.url)
    assert not [t for t in threading.enumerate() if t.name == "agentos-client"]
    assert await server.runtime.wait_idle(5.0), "the turn of the closed stream did not end"
