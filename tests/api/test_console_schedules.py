"""The console's Schedules view in a real browser (headless Chromium, tests/browser.py): a
tenant's schedules with their next fire and how their last fire went; another tenant's key
sees none of them. Its own file: tests/api/test_console_browser.py holds the shared fixtures."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from agentos.testing import eventually
from tests.api import test_console_browser as shared
from tests.api.console import ConsoleServer

pytestmark = pytest.mark.slow
WAIT_MS = shared.WAIT_MS
browser, console, open_tab = shared.browser, shared.console, shared.open_tab  # the fixtures, as pytest finds them


async def test_the_schedules_view_shows_next_and_last_fires(
    open_tab: Any, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    body = {"agent": "careful", "input": "tick", "every_s": 1}
    async with http.post(f"{console.url}/v1/schedules", json=body, headers=console.alice.headers) as r:
        assert r.status == 201, await r.text()
        schedule_id = (await r.json())["schedule_id"]
    body = {"agent": "careful", "input": "nightly", "cron": "0 3 * * *", "time_zone": "Europe/Paris", "paused": True}
    async with http.post(f"{console.url}/v1/schedules", json=body, headers=console.alice.headers) as r:
        assert r.status == 201, await r.text()
    alice = await open_tab()
    await alice.sign_in(console.alice)
    await alice.view("schedules")
    await alice.page.wait_for_selector(f"#schedules-table td:has-text('{schedule_id}')", timeout=WAIT_MS)
    assert "0 3 * * * (Europe/Paris)" in (await alice.page.text_content("#schedules-table") or "")
    assert await alice.page.locator("#schedules-table .status.paused").count() == 1

    async def skipped_behind_a_run() -> bool:
        """The first fire's run waits for an approval, so the fires after it are skipped (overlap)."""
        async with http.get(f"{console.url}/v1/schedules/{schedule_id}", headers=console.alice.headers) as r:
            done = [f for f in (await r.json())["last_fires"] if f["status"] != "pending"]  # newest first
        return bool(done) and done[0]["status"] == "skipped" and any(f["run_id"] for f in done)

    await eventually(skipped_behind_a_run, timeout_s=30, what="a fire skipped behind the first fire's run")
    await alice.page.click("#schedules-reload")
    # Waits for what the reload shows, not for what the table showed before it (a run id was
    # there already: the count below once read the old table, at three workers).
    await alice.page.wait_for_selector("#schedules-table .status:text-is('overlap')", timeout=WAIT_MS)
    assert await alice.page.locator("#schedules-table .status:text-is('overlap')").count() == 1
    # Found flaky: the last run was read from the last fire, "-" once a fire had been skipped.
    await alice.page.wait_for_selector("#schedules-table td .mono:text-matches('^run_')", timeout=WAIT_MS)
    await alice.shoot("schedules")
    bob = await open_tab()
    await bob.sign_in(console.bob)
    await bob.view("schedules")
    await bob.page.wait_for_selector("#schedules-note:has-text('No schedules')", timeout=WAIT_MS)
