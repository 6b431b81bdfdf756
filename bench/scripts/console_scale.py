"""Does the web console stay responsive with 1000 sessions and 1000 runs? And what do its tabs cost?

Starts the mock provider and a real server in this process, fills one tenant with `--sessions`
sessions and `--runs` runs (`--waiting` of them parked on an approval, the rest completed), then
drives the console in headless Chromium (tests/browser.py: Debian's chromium through playwright)
and reports the wall time from a click to the view drawn. Last, it opens `--tabs` admin tabs,
each holding its event stream, and reports the server's CPU over `--idle-s` seconds (the
process's CPU: the server, the mock and playwright's client, with the tabs against none).

    PYTHONPATH=src:. .venv/bin/python bench/scripts/console_scale.py --sessions 1000 --runs 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from tests.browser import ARGS, CHROMIUM

from agentos.api.keys import CONSOLE
from agentos.config import settings_from_dict
from agentos.mock.server import MockSettings, start_mock
from agentos.testing import RunningServer, start_server
from agentos.testing.tenants import TenantKey, create_tenant_key

TOKEN = "scale-token"
AGENTS = {
    "quick": {"tools": []},
    "careful": {"tools": ["run_command", "ask_human"], "approval_required": ["run_command"]},
}


async def _fill(url: str, key: TenantKey, sessions: int, runs: int, waiting: int) -> None:
    gate = asyncio.Semaphore(32)
    async with aiohttp.ClientSession(headers=key.headers) as http:

        async def post(path: str, body: dict[str, Any]) -> None:
            async with gate, http.post(url + path, json=body) as r:
                assert r.status in (201, 202), await r.text()

        await asyncio.gather(*(post("/v1/sessions", {"metadata": {"n": i}}) for i in range(sessions)))
        agents = ["careful"] * waiting + ["quick"] * (runs - waiting)
        await asyncio.gather(*(post(f"/v1/agents/{a}/runs", {"input": f"run {i}"}) for i, a in enumerate(agents)))
        # the server over HTTP: no event to wait on from here
        while await _count(http, url, "waiting_human") < waiting or await _count(http, url, "running") > 0:  # noqa: ASYNC110
            await asyncio.sleep(0.5)


async def _count(http: aiohttp.ClientSession, url: str, status: str) -> int:
    n, after = 0, None
    while True:
        params = {"status": status, "limit": "1000", **({"after": after} if after else {})}
        async with http.get(f"{url}/v1/runs", params=params) as r:
            page = await r.json()
        n += len(page["data"])
        if not (after := page["next_cursor"]):
            return n


async def _timed(page: Any, action: Any, selector: str, *, state: str = "visible") -> float:
    start = time.perf_counter()
    await action()
    await page.wait_for_selector(selector, state=state, timeout=30_000)
    return round((time.perf_counter() - start) * 1000, 1)


async def _views(browser: Any, url: str, key: TenantKey, waiting: int) -> dict[str, float]:
    page = await (await browser.new_context(viewport={"width": 1360, "height": 860})).new_page()
    await page.goto(f"{url}/console")
    await page.fill("#signin-key", key.key)
    times = {"sign_in_ms": await _timed(page, lambda: page.click("#signin-button"), "#stream-state.live")}
    nav = lambda name: lambda: page.click(f"#nav button[data-view={name}]")  # noqa: E731
    times["sessions_first_page_ms"] = await _timed(page, nav("sessions"), "#sessions-table tr.row >> nth=49")
    times["sessions_next_page_ms"] = await _timed(
        page, lambda: page.click("#sessions-more"), "#sessions-table tr.row >> nth=99"
    )
    times["session_transcript_ms"] = await _timed(
        page, lambda: page.click("#sessions-table tr.row >> nth=3"), "#session-detail h2"
    )
    times["runs_first_page_ms"] = await _timed(page, nav("runs"), "#runs-table tr.row >> nth=49")
    times["runs_waiting_filter_ms"] = await _timed(
        page, lambda: page.select_option("#runs-status", "waiting_human"), "#runs-table .status.waiting_human"
    )
    times["run_timeline_ms"] = await _timed(
        page, lambda: page.click("#runs-table tr.row >> nth=0"), "#run-timeline li[data-event='human.requested']"
    )
    times[f"inbox_{waiting}_cards_ms"] = await _timed(page, nav("inbox"), f".inbox-item >> nth={waiting - 1}")
    return times


async def _tab_cpu(browser: Any, server: RunningServer, key: TenantKey, tabs: int, idle_s: float) -> dict[str, float]:
    url = server.url
    start = time.process_time()
    await asyncio.sleep(idle_s)
    none = time.process_time() - start
    for _ in range(tabs):  # a context each: one browser's tabs share six connections to the server
        page = await (await browser.new_context()).new_page()
        await page.goto(f"{url}/console")
        await page.fill("#signin-key", key.key)
        await page.click("#signin-button")
        await page.wait_for_selector("#stream-state.live")
    start = time.process_time()
    await asyncio.sleep(idle_s)
    held = time.process_time() - start
    listening = len(server.app[CONSOLE]._listeners)  # the streams the server held meanwhile
    return {
        "cpu_s_no_tab": round(none, 3),
        f"cpu_s_{tabs}_admin_tabs": round(held, 3),
        "streams": listening,
        "over_s": idle_s,
    }


async def main(args: argparse.Namespace) -> None:
    from playwright.async_api import async_playwright

    mock = await start_mock(MockSettings(scenario="tools", ttft_ms=5, tps=2000, tokens=8))
    data = Path(tempfile.mkdtemp(prefix="agentos-console-scale-"))
    settings = settings_from_dict(
        {"data_dir": str(data), "provider": {"url": mock.url}, "server": {"api_token": TOKEN}, "agents": AGENTS}
    )
    server = await start_server(settings)
    try:
        key = await create_tenant_key(server.url, TOKEN, tenant_id="scale", scopes=["admin"])
        started = time.perf_counter()
        await _fill(server.url, key, args.sessions, args.runs, args.waiting)
        report: dict[str, Any] = {"fill_s": round(time.perf_counter() - started, 1)}
        async with async_playwright() as driver:
            browser = await driver.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            report["views"] = await _views(browser, server.url, key, args.waiting)
            report["stream_cost"] = await _tab_cpu(browser, server, key, args.tabs, args.idle_s)
            await browser.close()
        print(json.dumps({"sessions": args.sessions, "runs": args.runs, "waiting": args.waiting, **report}, indent=2))
    finally:
        await server.close()
        await mock.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--waiting", type=int, default=200, help="runs left waiting for an approval")
    parser.add_argument("--tabs", type=int, default=10)
    parser.add_argument("--idle-s", type=float, default=10.0)
    asyncio.run(main(parser.parse_args()))
