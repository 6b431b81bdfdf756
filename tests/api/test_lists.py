"""Every list answers in one shape, `{"data": [...], "next_cursor"}`, and every paginated route
refuses a bad `limit` (or `after`) with the same error: 422 `invalid_input` naming it."""

from __future__ import annotations

import aiohttp
import pytest

from agentos.api.body import MAX_PAGE_LIMIT
from agentos.testing import RunningServer
from tests.api.helpers import assert_documented, expect_error, new_session, turn_events

# Each paginated route (`{sid}` filled in) and the schema of its page.
LISTS = {
    "/v1/runs": "RunPage",
    "/v1/sessions": "SessionPage",
    "/v1/agents": "AgentPage",
    "/v1/sessions/{sid}/messages": "MessagePage",
    "/v1/sessions/{sid}/events": "EventPage",
}
BAD_LIMITS = ["0", "-1", "abc", "", "1.5", str(MAX_PAGE_LIMIT + 1), "100000"]


@pytest.fixture
async def sid(server: RunningServer, http: aiohttp.ClientSession) -> str:
    sid = await new_session(http, server.url)
    await turn_events(http, server.url, sid)  # a message and events to list
    return sid


@pytest.mark.parametrize("path", sorted(LISTS))
async def test_every_list_has_the_one_shape(server: RunningServer, http, sid: str, path: str) -> None:
    async with http.get(server.url + path.format(sid=sid)) as r:
        assert r.status == 200, await r.text()
        page = await r.json()
    assert set(page) == {"data", "next_cursor"}
    assert_documented(page, LISTS[path])


@pytest.mark.parametrize("limit", BAD_LIMITS)
@pytest.mark.parametrize("path", sorted(LISTS))
async def test_a_bad_limit_is_the_same_error_everywhere(
    server: RunningServer, http, sid: str, path: str, limit
) -> None:
    async with http.get(server.url + path.format(sid=sid), params={"limit": limit}) as r:
        body = await expect_error(r, 422, "invalid_input")
    assert "'limit'" in body["error"]["message"] and f"1 to {MAX_PAGE_LIMIT}" in body["error"]["message"]


@pytest.mark.parametrize("after", ["-1", "abc", "1.5"])
@pytest.mark.parametrize("path", ["/v1/sessions/{sid}/messages", "/v1/sessions/{sid}/events"])
async def test_a_bad_numeric_cursor_is_the_same_error(server: RunningServer, http, sid: str, path: str, after) -> None:
    async with http.get(server.url + path.format(sid=sid), params={"after": after}) as r:
        body = await expect_error(r, 422, "invalid_input")
    assert "'after'" in body["error"]["message"]


@pytest.mark.parametrize("name", ["limit", "after"])
@pytest.mark.parametrize("path", sorted(LISTS))
async def test_a_parameter_given_twice_is_refused_not_one_of_them_taken(
    server: RunningServer, http, sid: str, path: str, name: str
) -> None:
    """`?limit=1&limit=2`: neither is the client's meaning (it was the first, silently)."""
    async with http.get(server.url + path.format(sid=sid), params=[(name, "1"), (name, "2")]) as r:
        body = await expect_error(r, 422, "invalid_input")
    assert f"'{name}'" in body["error"]["message"] and "give it once" in body["error"]["message"]


@pytest.mark.parametrize("path", sorted(LISTS))
async def test_the_largest_limit_is_accepted(server: RunningServer, http, sid: str, path: str) -> None:
    async with http.get(server.url + path.format(sid=sid), params={"limit": str(MAX_PAGE_LIMIT)}) as r:
        assert r.status == 200, await r.text()


async def test_agents_page_by_name(server: RunningServer, http: aiohttp.ClientSession) -> None:
    names = ["c", "a", "d", "b", "e"]
    for name in names:
        async with http.post(f"{server.url}/v1/agents", json={"name": name}) as r:
            assert r.status == 201, await r.text()
    seen: list[str] = []
    params = {"limit": "2"}
    while True:
        async with http.get(f"{server.url}/v1/agents", params=params) as r:
            page = await r.json()
        assert len(page["data"]) <= 2
        seen += [a["name"] for a in page["data"]]
        if page["next_cursor"] is None:
            break
        params = {"limit": "2", "after": page["next_cursor"]}
    assert seen == sorted(names)
    async with http.get(f"{server.url}/v1/agents", params={"limit": "5"}) as r:
        assert (await r.json())["next_cursor"] is None  # exactly one full page: no empty page after it


async def test_sessions_are_filtered_by_agent_on_the_server(server: RunningServer, http) -> None:
    plain = [await new_session(http, server.url) for _ in range(3)]
    async with http.post(f"{server.url}/v1/agents", json={"name": "helper", "tools": []}) as r:
        assert r.status in (200, 201), await r.text()
    helped = [await new_session(http, server.url, agent="helper") for _ in range(3)]
    pages: list[list[str]] = []
    after = None
    while True:
        query = {"agent": "helper", "limit": "2", **({"after": after} if after else {})}
        async with http.get(f"{server.url}/v1/sessions", params=query) as r:
            page = await r.json()
        pages.append([s["id"] for s in page["data"]])
        assert all(s["agent"] == "helper" for s in page["data"])
        if (after := page["next_cursor"]) is None:
            break
    assert sorted(sum(pages, [])) == sorted(helped) and [len(p) for p in pages][:2] == [2, 1]
    async with http.get(f"{server.url}/v1/sessions", params={"agent": "default"}) as r:
        assert sorted(s["id"] for s in (await r.json())["data"]) == sorted(plain)
