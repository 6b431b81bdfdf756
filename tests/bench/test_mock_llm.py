"""The mock provider over real HTTP on loopback: wire format, scenarios, faults, counters."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.errors import ConfigError
from agentos.mock.chat_stream import ChatAnswer, add_chunk
from agentos.mock.check import check_tools_contract, stream_answer
from agentos.mock.server import MockServer, MockSettings, MockStats, decide_fault, start_mock
from agentos.providers.sse_parser import SSEParser

FAST = {"ttft_ms": 5.0, "tps": 1000.0}
USER = [{"role": "user", "content": "hello mock world"}]


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def _mock(**overrides: Any) -> MockServer:
    return await start_mock(MockSettings(**{**FAST, **overrides}))


async def _raw_stream(client: aiohttp.ClientSession, url: str) -> list[str]:
    async with client.post(f"{url}/chat/completions", json={"stream": True, "messages": USER}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        parser = SSEParser()
        return [event.data for event in parser.feed(await response.read())]


async def test_stream_is_openai_chunks_ending_in_done(client: aiohttp.ClientSession) -> None:
    server = await _mock(tokens=4)
    try:
        datas = await _raw_stream(client, server.url)
    finally:
        await server.close()
    assert datas[-1] == "[DONE]"
    chunks = [msgspec.json.decode(d) for d in datas[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert [c["choices"][0]["delta"].get("content") for c in chunks[:4]] == ["tok "] * 4
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["stop"]
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


async def test_whole_completion_when_not_streamed(client: aiohttp.ClientSession) -> None:
    server = await _mock(tokens=3)
    try:
        async with client.post(f"{server.url}/chat/completions", json={"messages": USER}) as response:
            body = await response.json()
    finally:
        await server.close()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "tok tok tok "}
    assert body["usage"]["completion_tokens"] == 3
    assert server.stats.completed == 1


async def test_first_token_waits_for_ttft(client: aiohttp.ClientSession) -> None:
    server = await start_mock(MockSettings(ttft_ms=120.0, tps=1000.0, tokens=1))
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        await _raw_stream(client, server.url)
        elapsed = loop.time() - started
    finally:
        await server.close()
    assert elapsed >= 0.12


async def test_tools_scenario_passes_the_contract_check() -> None:
    server = await _mock(scenario="tools")
    try:
        assert await check_tools_contract(server.url) == []
    finally:
        await server.close()


async def test_contract_check_fails_against_plain_scenario() -> None:
    server = await _mock(scenario="plain")
    try:
        problems = await check_tools_contract(server.url)
    finally:
        await server.close()
    assert problems and "step 1" in problems[0]


async def test_tool_call_streams_split_arguments_with_stable_ids(client: aiohttp.ClientSession) -> None:
    server = await _mock(scenario="tools")
    try:
        first = await stream_answer(client, server.url, USER)
        again = await stream_answer(client, server.url, USER)
    finally:
        await server.close()
    call = first.tool_calls[0]
    assert first.finish_reason == "tool_calls"
    assert first.chunks > 3  # the arguments arrive in pieces
    assert msgspec.json.decode(call.arguments) == {"command": ["sh", "-c", "echo step-1 >> effects.log; echo one"]}
    assert again.tool_calls[0].call_id == call.call_id


async def test_tools_step_counts_tool_messages_after_last_user(client: aiohttp.ClientSession) -> None:
    tool = {"role": "tool", "tool_call_id": "x", "content": "ok"}
    old_turn = [*USER, tool, tool, tool, {"role": "assistant", "content": "done"}]
    server = await _mock(scenario="tools")
    try:
        answer = await stream_answer(client, server.url, [*old_turn, {"role": "user", "content": "again"}, tool, tool])
    finally:
        await server.close()
    assert answer.tool_calls[0].name == "ask_human"
    assert msgspec.json.decode(answer.tool_calls[0].arguments) == {"question": "Proceed with the final answer?"}


async def test_error_rate_one_answers_500(client: aiohttp.ClientSession) -> None:
    server = await _mock(error_rate=1.0)
    try:
        statuses = [await _status(client, server.url) for _ in range(5)]
    finally:
        await server.close()
    assert statuses == [500] * 5
    assert server.stats.errors_injected == 5
    assert server.stats.in_flight == 0


async def test_every_nth_request_gets_429_with_retry_after(client: aiohttp.ClientSession) -> None:
    server = await _mock(fail_every=3, retry_after_s=2.0, tokens=1)
    try:
        results = [await _status_and_retry(client, server.url) for _ in range(7)]
    finally:
        await server.close()
    assert [status for status, _ in results] == [200, 200, 429, 200, 200, 429, 200]
    assert results[2][1] == "2"
    assert server.stats.rate_limited == 2


async def test_hung_request_is_held_until_client_leaves(client: aiohttp.ClientSession) -> None:
    server = await _mock(hang_rate=1.0)
    try:
        with pytest.raises(asyncio.TimeoutError):
            await _status(client, server.url, timeout_s=0.3)
        assert server.stats.hung == 1
        await server.stats.wait_for(lambda s: s.in_flight == 0, 3.0)
    finally:
        await server.close()
    assert server.stats.completed == 0


async def test_max_concurrent_counts_overlapping_streams(client: aiohttp.ClientSession) -> None:
    server = await _mock(ttft_ms=150.0, tokens=2)
    try:
        await asyncio.gather(*(_raw_stream(client, server.url) for _ in range(6)))
    finally:
        await server.close()
    assert server.stats.max_concurrent == 6
    assert server.stats.in_flight == 0
    assert server.stats.completed == 6


async def test_client_leaving_mid_stream_counts_aborted(client: aiohttp.ClientSession) -> None:
    server = await start_mock(MockSettings(ttft_ms=5.0, tps=20.0, tokens=50))
    try:
        async with client.post(f"{server.url}/chat/completions", json={"stream": True, "messages": USER}) as response:
            await response.content.readline()  # the first chunk has arrived
            response.close()
        await server.stats.wait_for(lambda s: s.aborted == 1, 3.0)
        await server.stats.wait_for(lambda s: s.in_flight == 0, 3.0)
    finally:
        await server.close()
    assert server.stats.completed == 0


async def test_client_leaving_before_first_token_counts_aborted(client: aiohttp.ClientSession) -> None:
    server = await start_mock(MockSettings(ttft_ms=5000.0, tokens=1))
    try:
        with pytest.raises(asyncio.TimeoutError):
            await _status(client, server.url, timeout_s=0.2, stream=True, read_body=True)
        await server.stats.wait_for(lambda s: s.aborted == 1, 3.0)
    finally:
        await server.close()
    assert server.stats.in_flight == 0


async def test_stats_wait_for_wakes_on_a_change_and_times_out_with_the_counters() -> None:
    stats = MockStats()
    waiter = asyncio.create_task(stats.wait_for(lambda s: s.aborted == 2, 5.0))
    for _ in range(2):
        await asyncio.sleep(0)  # let the waiter look at the counters before they change
        assert not waiter.done()
        stats.aborted += 1
    async with asyncio.timeout(1.0):  # woken by the change
        await waiter
    await stats.wait_for(lambda s: s.aborted == 2, 0.0)  # already true: no wait at all
    with pytest.raises(TimeoutError, match="'aborted': 2"):
        await stats.wait_for(lambda s: s.completed == 1, 0.01, "a completion")
    assert stats.as_dict() == MockStats(aborted=2).as_dict()  # the waiters are not counters


async def test_stats_reset_and_metrics(client: aiohttp.ClientSession) -> None:
    server = await _mock(tokens=1)
    base = server.url.removesuffix("/v1")
    try:
        await _raw_stream(client, server.url)
        async with client.get(f"{base}/stats") as response:
            before = await response.json()
        async with client.get(f"{base}/metrics") as response:
            metrics = await response.text()
        async with client.post(f"{base}/stats/reset") as response:
            after = await response.json()
    finally:
        await server.close()
    assert before["requests"] == 1 and before["completed"] == 1
    assert "mock_llm_first_token_seconds_count 1.0" in metrics
    assert after == MockStats().as_dict()


async def test_embeddings_are_deterministic_unit_vectors(client: aiohttp.ClientSession) -> None:
    server = await _mock()
    try:
        first = await _embed(client, server.url, ["alpha", "beta"])
        second = await _embed(client, server.url, ["alpha"])
        async with client.get(f"{server.url}/models") as response:
            models = await response.json()
    finally:
        await server.close()
    assert first[0] == second[0] != first[1]
    assert abs(sum(v * v for v in first[0]) - 1.0) < 1e-9
    assert models["data"][0]["id"] == "mock-1"


async def test_bad_json_is_400(client: aiohttp.ClientSession) -> None:
    server = await _mock()
    try:
        async with client.post(f"{server.url}/chat/completions", data=b"{nope") as response:
            status = response.status
    finally:
        await server.close()
    assert status == 400
    assert server.stats.requests == 0


def test_faults_are_reproducible_for_a_seed() -> None:
    settings = MockSettings(error_rate=0.3, hang_rate=0.1, seed=7)
    rngs = [random.Random(7), random.Random(7)]
    runs = [[decide_fault(settings, n, rng) for n in range(1, 200)] for rng in rngs]
    assert runs[0] == runs[1]
    errors = runs[0].count("error") / len(runs[0])
    assert 0.15 < errors < 0.45


def test_fail_every_takes_precedence() -> None:
    settings = MockSettings(error_rate=1.0, fail_every=2)
    rng = random.Random(0)
    assert [decide_fault(settings, n, rng) for n in (1, 2, 3, 4)] == ["error", "rate_limit", "error", "rate_limit"]


def test_answer_folding_ignores_empty_chunks() -> None:
    answer = ChatAnswer()
    assert not add_chunk(answer, '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
    assert not add_chunk(answer, "[DONE]")
    assert answer.finish_reason == "stop" and answer.done


async def _status(
    client: aiohttp.ClientSession, url: str, timeout_s: float = 5.0, stream: bool = False, read_body: bool = False
) -> int:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    body = {"stream": stream, "messages": USER}
    async with client.post(f"{url}/chat/completions", json=body, timeout=timeout) as response:
        if read_body:
            await response.read()
        return response.status


async def _status_and_retry(client: aiohttp.ClientSession, url: str) -> tuple[int, str | None]:
    async with client.post(f"{url}/chat/completions", json={"messages": USER}) as response:
        await response.read()
        return response.status, response.headers.get("Retry-After")


async def _embed(client: aiohttp.ClientSession, url: str, inputs: list[str]) -> list[list[float]]:
    async with client.post(f"{url}/embeddings", json={"input": inputs}) as response:
        body = await response.json()
    return [item["embedding"] for item in body["data"]]


@pytest.mark.parametrize(
    "bad",
    [{"tps": 0.0}, {"ttft_ms": -1.0}, {"tokens": 0}, {"error_rate": 1.5}, {"hang_rate": -0.1}, {"fail_every": -1}],
)
def test_invalid_settings_are_a_config_error(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(bad))):
        MockSettings(**bad)


async def test_completion_hook_sees_the_messages_of_full_answers(client: aiohttp.ClientSession) -> None:
    seen: list[list[dict[str, Any]]] = []
    server = await start_mock(MockSettings(ttft_ms=5.0, tps=1000.0, tokens=2, fail_every=2), on_completed=seen.append)
    try:
        await _raw_stream(client, server.url)
        assert await _status(client, server.url) == 429
        assert await _status(client, server.url) == 200
    finally:
        await server.close()
    assert seen == [USER, USER]
