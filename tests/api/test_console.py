"""The console's server side: its page and assets under the strict CSP, and its one event stream
per tab (hello, metrics every tick, the tenant's run events only, reconnect when its time is up).
Real server, real mock provider, real keys made through the admin API."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiohttp
import pytest

from agentos.api.console import ASSETS
from agentos.api.console_stream import CONSOLE
from agentos.mock.server import MockServer
from agentos.providers.base import CallContext, Usage
from agentos.providers.metering import Spend
from agentos.testing import Event, sse_events
from agentos.testing.tenants import TenantKey
from tests.api.console import ConsoleServer, start_console_server
from tests.api.helpers import expect_error
from tests.api.test_docs import TYPES, _Page

MockFactory = Callable[..., Awaitable[MockServer]]


@pytest.fixture
async def console(tmp_path: Path, mock_factory: MockFactory) -> AsyncIterator[ConsoleServer]:
    started = await start_console_server(tmp_path / "data", mock_factory)
    yield started
    await started.server.close()


async def test_the_page_loads_only_same_origin_assets_without_a_key(console: ConsoleServer, http) -> None:
    page_url = f"{console.url}/console"
    async with http.get(page_url) as r:
        assert r.status == 200 and r.content_type == "text/html"
        csp = r.headers["Content-Security-Policy"]
        html = await r.text()
    directives = dict(d.strip().partition(" ")[::2] for d in csp.split(";"))
    assert directives["default-src"] == "'none'" and directives["script-src"] == "'self'"
    assert directives["connect-src"] == "'self'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in csp and "http" not in csp
    parser = _Page()
    parser.feed(html)
    assert parser.inline == []
    assert len(parser.urls) == 4  # two stylesheets, uPlot, and our app module
    origin = urlsplit(console.url)[:2]
    for url in [urljoin(page_url, u) for u in parser.urls] + [f"{console.url}/console/{name}" for name in ASSETS]:
        assert urlsplit(url)[:2] == origin, url
        async with http.get(url) as r:
            assert r.status == 200, url
            assert r.content_type == TYPES[url[url.rindex(".") :]], (url, r.content_type)
            assert "Content-Security-Policy" in r.headers and r.headers["X-Content-Type-Options"] == "nosniff"
            assert len(await r.read()) > 100


async def test_no_script_of_the_console_parses_html(http, console: ConsoleServer) -> None:
    """Transcripts and model output are untrusted: the scripts build text nodes only."""
    for name in ASSETS:
        if name.endswith(".js") and not name.startswith("uPlot"):
            async with http.get(f"{console.url}/console/{name}") as r:
                script = re.sub(r"(^|\s)//[^\n]*", "", await r.text())  # the code, not its comments
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
                assert sink not in script, (name, sink)
            # the key lives in sessionStorage only
            assert "localStorage" not in script and "document.cookie" not in script


@pytest.mark.parametrize("asset", ["nothing.js", "README.md", "console.html", "..%2Fconsole.py", "uPlot.LICENSE"])
async def test_only_the_listed_assets_are_served(console: ConsoleServer, http, asset: str) -> None:
    assert asset not in ASSETS
    async with http.get(f"{console.url}/console/{asset}") as r:
        await expect_error(r, 404, "not_found")


async def test_me_names_the_keys_tenant_and_needs_a_key(console: ConsoleServer, http) -> None:
    async with http.get(f"{console.url}/v1/console/me") as r:
        await expect_error(r, 401, "unauthorized")
    async with http.get(f"{console.url}/v1/console/me", headers=console.alice.headers) as r:
        me = await r.json()
    assert me == {"tenant_id": "alice", "key_id": console.alice.key_id, "admin": False, "scopes": me["scopes"]}
    assert "admin" not in me["scopes"]
    async with http.get(f"{console.url}/v1/console/me", headers=console.admin.headers) as r:
        assert (await r.json())["admin"] is True


async def test_metrics_are_the_servers_only_for_an_admin(console: ConsoleServer, http) -> None:
    async with http.get(f"{console.url}/v1/console/metrics", headers=console.alice.headers) as r:
        tenant_view = await r.json()
    assert set(tenant_view) == {"t_ms", "tenant"}
    assert set(tenant_view["tenant"]) == {"permits_held", "waiting_for_permit", "turns_in_flight", "active_runs"}
    async with http.get(f"{console.url}/v1/console/metrics", headers=console.admin.headers) as r:
        server = (await r.json())["server"]
    for name in ("in_flight_turns", "admission_rejected", "provider_permits_in_use", "event_db_queue"):
        assert name in server["values"], name
    ttft = server["histograms"]["ttft_ms"]
    assert len(ttft["le"]) == len(ttft["counts"]) and ttft["le"] == sorted(ttft["le"])


async def test_the_stream_refuses_another_origin_and_a_missing_key(console: ConsoleServer, http) -> None:
    url = f"{console.url}/v1/console/stream"
    async with http.get(url, headers={**console.alice.headers, "Origin": "http://evil.example"}) as r:
        await expect_error(r, 403, "cross_origin")
    async with http.get(url) as r:
        await expect_error(r, 401, "unauthorized")


@asynccontextmanager
async def follow(http: aiohttp.ClientSession, url: str, key: TenantKey) -> AsyncIterator[AsyncIterator[Event]]:
    async with http.get(f"{url}/v1/console/stream", headers=key.headers) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        yield sse_events(r)


async def next_named(events: AsyncIterator[Event], name: str, seen: list[Event] | None = None) -> Event:
    async for event in events:
        if seen is not None:
            seen.append(event)
        if event.name == name:
            return event
    raise AssertionError(f"the stream ended before {name}")


@pytest.mark.slow
async def test_a_tab_sees_its_tenants_run_events_and_no_other_tenants(console: ConsoleServer, http) -> None:
    """Alice's run asks for an approval: her stream carries it (with the exact arguments and their
    hash), Bob's carries only his own metrics, before and after."""
    async with follow(http, console.url, console.alice) as alice, follow(http, console.url, console.bob) as bob:
        hello = await anext(alice)
        assert hello.name == "hello" and hello.data["tenant_id"] == "alice"
        first = await next_named(alice, "metrics")
        assert "server" not in first.data
        await next_named(bob, "metrics")
        async with http.post(
            f"{console.url}/v1/agents/careful/runs", json={"input": "go"}, headers=console.alice.headers
        ) as r:
            run_id = (await r.json())["run_id"]
        seen: list[Event] = []
        asked = await next_named(alice, "run", seen)
        while asked.data["type"] != "human.requested":
            asked = await next_named(alice, "run", seen)
        assert asked.data["run_id"] == run_id
        request = asked.data["data"]
        assert request["kind"] == "approval" and request["tool"] == "run_command" and len(request["args_hash"]) == 64
        assert "run.started" in [e.data["type"] for e in seen if e.name == "run"]
        # Bob's queue is in the order events were offered: two ticks after Alice's request, any
        # run event meant for him would have come before.
        bob_seen: list[Event] = []
        for _ in range(2):
            await next_named(bob, "metrics", bob_seen)
        assert [e.name for e in bob_seen] == ["metrics", "metrics"]
        async with http.get(f"{console.url}/v1/runs/{run_id}", headers=console.bob.headers) as r:
            await expect_error(r, 404, "run_not_found")  # and the run itself is not Bob's to read


@pytest.mark.slow
async def test_an_admin_tab_gets_the_servers_metrics(console: ConsoleServer, http) -> None:
    async with follow(http, console.url, console.admin) as events:
        assert (await anext(events)).data["admin"] is True
        metrics = await next_named(events, "metrics")
    assert metrics.data["tenant"]["turns_in_flight"] == 0 and "in_flight_turns" in metrics.data["server"]["values"]


@pytest.mark.slow
async def test_the_stream_ends_with_reconnect_and_its_timer_stops(
    tmp_path: Path, mock_factory: MockFactory, http
) -> None:
    console = await start_console_server(tmp_path / "data", mock_factory, server={"console_stream_s": 0.1})
    try:
        async with follow(http, console.url, console.alice) as events:
            names = [e.name async for e in events]
    finally:
        await console.server.close()
    # It ends at its time, not at the next tick (a second away): the first point, then reconnect.
    assert names == ["hello", "metrics", "reconnect"]
    # The handler left the hub before it closed the stream: the last tab is gone, nothing ticks.
    assert console.server.app[CONSOLE]._timer is None


async def test_another_tenants_session_is_a_404(console: ConsoleServer, http) -> None:
    async with http.post(f"{console.url}/v1/sessions", json={}, headers=console.alice.headers) as r:
        session_id = (await r.json())["id"]
    async with http.get(f"{console.url}/v1/sessions/{session_id}", headers=console.bob.headers) as r:
        await expect_error(r, 404, "session_not_found")
    async with http.get(f"{console.url}/v1/sessions", headers=console.bob.headers) as r:
        assert session_id not in [s["id"] for s in (await r.json())["data"]]


async def test_a_closing_server_ends_every_tab_with_reconnect(console: ConsoleServer, http) -> None:
    async with follow(http, console.url, console.alice) as events:
        assert (await anext(events)).name == "hello"
        closing = asyncio.ensure_future(console.server.close())  # on_shutdown closes the hub
        names = [e.name async for e in events]
        await asyncio.wait_for(closing, timeout=10)
    assert names[-1] == "reconnect" and set(names[:-1]) <= {"metrics"}


async def test_the_cost_views_data_is_the_tenants_own(console: ConsoleServer, http) -> None:
    """The Cost tab (usage.js) asks GET /v1/usage with each grouping its menu offers (chromium
    is not needed to check that the server answers them, and only with the tab's tenant's rows)."""
    async with http.get(f"{console.url}/console") as r:
        html = await r.text()
    assert 'data-view="usage"' in html and 'id="view-usage"' in html
    menu = re.search(r'<select id="usage-group">(.*?)</select>', html, re.S)
    assert menu is not None
    groupings = re.findall(r'<option value="([a-z,]+)">', menu.group(1))
    assert groupings == ["model", "target", "day", "model,target,day"]
    ledger = console.server.services.ledger
    for n, key in enumerate((console.alice, console.bob)):
        who = CallContext(tenant_id=key.tenant_id, key_id=key.key_id, session_id="s")
        ledger.record(Spend(who, "m", "p/x", Usage(prompt_tokens=10, completion_tokens=n + 1), 0.5 * (n + 1), 1))
    for grouping in [*groupings, "tenant,model"]:  # the last one only an admin's menu offers
        async with http.get(
            f"{console.url}/v1/usage",
            params={"group_by": grouping, "from": "0", "to": "2"},
            headers=console.alice.headers,
        ) as r:
            assert r.status == 200, await r.text()
            report = await r.json()
        assert [(t["calls"], t["completion_tokens"], t["cost"]) for t in report["data"]] == [(1, 1, 0.5)]
        assert report["tenant"] == "alice"
    async with http.get(
        f"{console.url}/v1/usage",
        params={"group_by": "tenant,model", "from": "0", "to": "2"},
        headers=console.admin.headers,
    ) as r:
        assert [t["tenant"] for t in (await r.json())["data"]] == ["alice", "bob"]
