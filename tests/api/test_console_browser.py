"""The console in a real browser (headless Chromium, tests/browser.py) against the real server,
the real mock provider and keys made through the admin API: sign in, watch a chart update, see a
turn's tokens stream in the playground, approve a pending tool call in the inbox and see the run
complete, and see that another tenant's key does not see the first tenant's sessions.

`CONSOLE_SCREENSHOTS=docs/console` makes the tests save a screenshot of each view there (the
ones docs/console.md shows).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from agentos.mock.server import MockServer
from agentos.testing import sse_events
from agentos.testing.tenants import TenantKey
from tests.api.console import ConsoleServer, start_console_server
from tests.browser import chromium

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

pytestmark = pytest.mark.slow
SCREENSHOTS = os.environ.get("CONSOLE_SCREENSHOTS")
WAIT_MS = 15_000


@pytest.fixture
async def console(tmp_path: Path, mock_factory: Callable[..., Awaitable[MockServer]]) -> AsyncIterator[ConsoleServer]:
    started = await start_console_server(tmp_path / "data", mock_factory)
    yield started
    await started.server.close()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as launched:
        yield launched


class Tab:
    """A page of the console, and what went wrong in it: uncaught errors and CSP violations."""

    def __init__(self, page: Page, url: str) -> None:
        self.page = page
        self.url = url
        self.problems: list[str] = []
        page.on("pageerror", lambda error: self.problems.append(f"uncaught: {error}"))
        page.on("console", self._console)

    def _console(self, message: Any) -> None:
        csp = "Content Security Policy" in message.text
        if csp or (message.type == "error" and "Failed to load" not in message.text):
            self.problems.append(f"console {message.type}: {message.text}")

    async def sign_in(self, key: TenantKey) -> None:
        await self.page.goto(f"{self.url}/console")
        await self.page.fill("#signin-key", key.key)
        await self.page.click("#signin-button")
        await self.page.wait_for_selector("#shell:not([hidden])", timeout=WAIT_MS)
        await self.page.wait_for_selector("#stream-state.live", timeout=WAIT_MS)  # the tab's stream is open

    async def view(self, name: str) -> None:
        await self.page.click(f"#nav button[data-view={name}]")
        await self.page.wait_for_selector(f"#view-{name}:not([hidden])")

    async def shoot(self, name: str) -> None:
        if SCREENSHOTS:  # playwright makes the folder
            await self.page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"))


@pytest.fixture
async def open_tab(browser: Browser, console: ConsoleServer) -> AsyncIterator[Callable[[], Awaitable[Tab]]]:
    tabs: list[Tab] = []

    async def make() -> Tab:
        context = await browser.new_context(viewport={"width": 1360, "height": 860})
        tabs.append(Tab(await context.new_page(), console.url))
        return tabs[-1]

    yield make
    for tab in tabs:
        await tab.page.context.close()
        assert tab.problems == []


async def test_sign_in_keeps_the_key_out_of_the_url_and_a_chart_updates(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    tab = await open_tab()
    await tab.sign_in(console.admin)
    page = tab.page
    assert console.admin.key not in page.url
    assert await page.evaluate("() => sessionStorage.getItem('agentos.console.key')") == console.admin.key
    assert await page.text_content("#who") == f"ops · {console.admin.key_id} · admin"
    # The charts get a point a second from the tab's one stream; turns give the TTFT chart values.
    await page.wait_for_function("() => Number(document.querySelector('#chart-turns').dataset.points) >= 2")
    assert await page.get_attribute("#chart-ttft", "data-values") == "0"
    await _turns(http, console, count=8)
    await page.wait_for_function(
        "() => Number(document.querySelector('#chart-ttft').dataset.values) >= 1", timeout=WAIT_MS
    )
    if SCREENSHOTS:  # a few more seconds of turns, for a picture with lines in it
        for _ in range(3):
            await _turns(http, console, count=16)
        await page.wait_for_function("() => Number(document.querySelector('#chart-turns').dataset.points) >= 8")
    # The router's targets as a table (docs/providers.md, "Metrics"): the one target answered them all.
    await page.wait_for_selector("#live-providers span.mono", timeout=WAIT_MS)
    row = await page.text_content("#live-providers tr:nth-child(2)")
    assert row is not None and row.startswith("default/") and "closed" in row
    await tab.shoot("live")
    await page.reload()  # the key is kept for the tab: still signed in
    await page.wait_for_selector("#shell:not([hidden])", timeout=WAIT_MS)


async def _turns(http: aiohttp.ClientSession, console: ConsoleServer, count: int) -> None:
    """`count` turns of the admin's tenant, two sessions at a time."""
    sessions = []
    for _ in range(2):
        async with http.post(f"{console.url}/v1/sessions", json={}, headers=console.admin.headers) as r:
            sessions.append((await r.json())["id"])

    async def turns_of(session_id: str) -> None:
        for i in range(count // 2):
            url = f"{console.url}/v1/sessions/{session_id}/turns"
            async with http.post(url, json={"input": f"turn {i}"}, headers=console.admin.headers) as r:
                assert r.status == 200

    await asyncio.gather(*map(turns_of, sessions))


async def test_a_wrong_key_is_refused_at_sign_in(open_tab) -> None:
    tab = await open_tab()
    await tab.page.goto(f"{tab.url}/console")
    await tab.page.fill("#signin-key", "aos_not_a_key")
    await tab.page.click("#signin-button")
    await tab.page.wait_for_selector("#signin-error:has-text('refused')", timeout=WAIT_MS)
    await tab.shoot("signin")
    assert await tab.page.evaluate("() => sessionStorage.getItem('agentos.console.key')") is None


async def test_the_playground_streams_a_turns_tokens(open_tab, console: ConsoleServer) -> None:
    tab = await open_tab()
    await tab.sign_in(console.alice)
    await tab.view("playground")
    page = tab.page
    # The answer's lengths as the page showed them: a stream shows it partly, more than once.
    await page.evaluate(
        """() => {
            window.shown = [];
            new MutationObserver(() => {
                const answer = document.querySelector('#play-log .assistant');
                if (answer) window.shown.push(answer.textContent.length);
            }).observe(document.getElementById('play-log'), {subtree: true, characterData: true, childList: true});
        }"""
    )
    await page.fill("#play-input", "<b>hello</b>")
    await page.click("#play-send")
    await page.wait_for_selector("#play-log .event:has-text('turn.completed')", timeout=WAIT_MS)
    answer = await page.text_content("#play-log .assistant")
    assert answer is not None and answer.strip() == " ".join(["tok"] * 12)
    partial = {n for n in await page.evaluate("() => window.shown") if 0 < n < len(answer.strip())}
    assert len(partial) >= 2, partial  # 12 tokens 20 ms apart (the mock's 50 tokens/s)
    assert await page.locator("#play-log b").count() == 0  # the input is shown as text, never HTML
    await tab.shoot("playground")


async def test_the_playground_shows_an_agents_tool_calls_as_they_happen_and_stops_its_turn(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    tab = await open_tab()
    await tab.sign_in(console.alice)
    await tab.view("playground")
    page = tab.page
    await page.wait_for_selector("#play-agent option[value='careful']", state="attached", timeout=WAIT_MS)
    await page.select_option("#play-agent", "careful")
    await page.wait_for_function("() => document.getElementById('play-session').textContent.startsWith('ses_')")
    session_id = await page.text_content("#play-session")
    await page.fill("#play-input", "go")
    await page.click("#play-send")
    await page.wait_for_selector("#play-log .event:has-text('waiting for a human (approval)')", timeout=WAIT_MS)
    # Approved elsewhere (the API here), the call and its result appear in the playground's turn.
    async with http.get(
        f"{console.url}/v1/runs", params={"session_id": session_id}, headers=console.alice.headers
    ) as r:
        (run,) = (await r.json())["data"]
    body = {"operation_id": run["pending"]["operation_id"], "approve": True, "args_hash": run["pending"]["args_hash"]}
    async with http.post(
        f"{console.url}/v1/runs/{run['run_id']}/answer", json=body, headers=console.alice.headers
    ) as r:
        assert r.status == 200
    await page.wait_for_selector("#play-log .tool:has-text('← run_command')", timeout=WAIT_MS)
    assert "echo step-1" in (await page.text_content("#play-log .tool >> nth=0") or "")
    await page.locator("#play-log .event", has_text="waiting for a human").nth(1).wait_for(timeout=WAIT_MS)
    await page.click("#play-stop")  # the turn is cancelled on the server, and its run with it
    await page.wait_for_selector("#play-log .event:has-text('turn.cancelled')", timeout=WAIT_MS)
    async with http.get(f"{console.url}/v1/runs/{run['run_id']}", headers=console.alice.headers) as r:
        assert (await r.json())["status"] == "cancelled"


async def test_approving_a_tool_call_in_the_inbox_completes_the_run(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    tab = await open_tab()
    await tab.sign_in(console.alice)
    await tab.view("inbox")
    page = tab.page
    start = f"{console.url}/v1/agents/careful/runs"
    async with http.post(start, json={"input": "go"}, headers=console.alice.headers) as r:
        run_id = (await r.json())["run_id"]
    # `careful` asks before each of its two commands, then asks a question (the `tools` script).
    for step in (1, 2):
        card = page.locator(f".inbox-item[data-run='{run_id}']")
        await card.locator("pre.arguments").filter(has_text=f"step-{step}").wait_for(timeout=WAIT_MS)
        pending = await _pending(http, console, run_id)
        assert await card.locator(".hash").text_content() == pending["args_hash"]
        assert await card.locator("b").text_content() == "run_command"
        if step == 1:
            await tab.shoot("inbox")
        await card.locator("button.approve").click()
    card = page.locator(f".inbox-item[data-run='{run_id}']")
    await card.locator(".question").wait_for(timeout=WAIT_MS)
    await card.locator("input.answer").fill("yes")
    await card.locator("button.primary").click()
    await page.wait_for_selector("#inbox-list:has-text('Nothing waits')", timeout=WAIT_MS)
    # The runs view lists it (GET /v1/runs) as completed; its timeline ends with the completion.
    await tab.view("runs")
    row = page.locator(f"#runs-table tr[data-id='{run_id}']")
    await row.locator(".status.completed").wait_for(timeout=WAIT_MS)
    await row.click()
    await page.wait_for_selector("#run-timeline li[data-event='run.completed']", timeout=WAIT_MS)
    assert await page.locator("#run-timeline li[data-event='human.answered']").count() == 3
    await tab.shoot("runs")


async def test_a_run_that_waited_before_the_tab_opened_is_in_the_inbox(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    """The inbox starts from the runs list (`status=waiting_human`), not only from live events."""
    start = f"{console.url}/v1/agents/careful/runs"
    async with http.post(start, json={"input": "go"}, headers=console.alice.headers) as r:
        run_id = (await r.json())["run_id"]
    async with http.get(f"{console.url}/v1/runs/{run_id}/events", headers=console.alice.headers) as r:
        async for event in sse_events(r):
            if event.name == "human.requested":
                break
    tab = await open_tab()
    await tab.sign_in(console.alice)
    await tab.page.wait_for_selector("#inbox-count:has-text('1')", timeout=WAIT_MS)  # the badge, from any view
    await tab.view("inbox")
    card = tab.page.locator(f".inbox-item[data-run='{run_id}']")
    assert await card.locator(".hash").text_content() == (await _pending(http, console, run_id))["args_hash"]
    await tab.view("runs")
    await tab.page.select_option("#runs-status", "waiting_human")
    await tab.page.wait_for_selector(f"#runs-table tr[data-id='{run_id}'] .status.waiting_human", timeout=WAIT_MS)
    async with http.post(f"{console.url}/v1/runs/{run_id}/cancel", headers=console.alice.headers) as r:
        assert r.status == 200
    # The listed row follows the run's events on the tab's stream, with no reload.
    await tab.page.wait_for_selector(f"#runs-table tr[data-id='{run_id}'] .status.cancelled", timeout=WAIT_MS)
    assert await tab.page.locator("#inbox-count").text_content() == ""


async def test_sessions_are_paged_by_the_server(open_tab, console: ConsoleServer, http: aiohttp.ClientSession) -> None:
    made = set()
    for _ in range(60):
        async with http.post(f"{console.url}/v1/sessions", json={}, headers=console.bob.headers) as r:
            made.add((await r.json())["id"])
    async with http.post(f"{console.url}/v1/sessions", json={"agent": "careful"}, headers=console.bob.headers) as r:
        careful = (await r.json())["id"]
    tab = await open_tab()
    await tab.sign_in(console.bob)
    await tab.view("sessions")
    rows = tab.page.locator("#sessions-table tr.row")
    await tab.page.wait_for_selector("#sessions-more:not([hidden])", timeout=WAIT_MS)
    assert await rows.count() == 50  # one page of 61
    await tab.page.click("#sessions-more")
    await tab.page.wait_for_selector("#sessions-more", state="hidden", timeout=WAIT_MS)
    assert {await row.get_attribute("data-id") for row in await rows.all()} == made | {careful}
    await tab.page.fill("#sessions-agent", "careful")  # the server filters: one page of one
    await tab.page.press("#sessions-agent", "Enter")
    await tab.page.wait_for_function("() => document.querySelectorAll('#sessions-table tr.row').length === 1")
    assert await rows.get_attribute("data-id") == careful


async def _pending(http: aiohttp.ClientSession, console: ConsoleServer, run_id: str) -> dict[str, Any]:
    async with http.get(f"{console.url}/v1/runs/{run_id}", headers=console.alice.headers) as r:
        pending: dict[str, Any] = (await r.json())["pending"]
        return pending


async def test_another_tenants_key_does_not_see_the_first_tenants_sessions(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    async with http.post(f"{console.url}/v1/sessions", json={}, headers=console.alice.headers) as r:
        session_id = (await r.json())["id"]
    async with http.post(
        f"{console.url}/v1/sessions/{session_id}/turns", json={"input": "remember me"}, headers=console.alice.headers
    ) as r:
        assert r.status == 200
    alice = await open_tab()
    await alice.sign_in(console.alice)
    await alice.view("sessions")
    await alice.page.click(f"#sessions-table td:has-text('{session_id}')")
    await alice.page.wait_for_selector("#session-detail .msg:has-text('remember me')", timeout=WAIT_MS)
    await alice.shoot("sessions")
    bob = await open_tab()
    await bob.sign_in(console.bob)
    await bob.view("sessions")
    await bob.page.wait_for_selector("#sessions-table th", timeout=WAIT_MS)
    assert session_id not in (await bob.page.text_content("#sessions-table") or "")
    await bob.page.fill("#sessions-open-id", session_id)
    await bob.page.click("#sessions-open")
    await bob.page.wait_for_selector(f"#session-detail:has-text('No session {session_id}')", timeout=WAIT_MS)


async def test_an_admin_sees_keys_and_tenants_and_a_tenant_key_does_not(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    admin = await open_tab()
    await admin.sign_in(console.admin)
    await admin.view("tenants")
    await admin.page.wait_for_selector("#tenants-table td:has-text('alice')", timeout=WAIT_MS)
    await admin.shoot("tenants")
    bob_row = admin.page.locator("#tenants-table tr[data-id='bob']")
    await bob_row.locator("button:has-text('Disable')").click()
    await bob_row.locator(".status.disabled").wait_for(timeout=WAIT_MS)
    async with http.get(f"{console.url}/v1/sessions", headers=console.bob.headers) as r:
        assert r.status == 401  # a disabled tenant's keys are refused
    await bob_row.locator("button:has-text('Enable')").click()
    await bob_row.locator(".status.active").wait_for(timeout=WAIT_MS)
    await admin.view("keys")
    await admin.page.fill("#key-tenant", "bob")
    await admin.page.fill("#key-name", "made in the console")
    await admin.page.click("#key-form button")
    await admin.page.wait_for_selector("#key-made:not([hidden])", timeout=WAIT_MS)
    made = admin.page.locator("#keys-table tr", has_text="made in the console")
    await made.wait_for(timeout=WAIT_MS)
    shown = await admin.page.text_content("#key-made .mono")
    assert shown is not None and shown.startswith("aos_")
    async with http.get(f"{console.url}/v1/console/me", headers={"Authorization": f"Bearer {shown}"}) as r:
        assert (await r.json())["tenant_id"] == "bob"  # the key shown once works
    await admin.shoot("keys")
    await made.locator("button:has-text('Revoke')").click()
    await made.locator(".status.revoked").wait_for(timeout=WAIT_MS)
    async with http.get(f"{console.url}/v1/console/me", headers={"Authorization": f"Bearer {shown}"}) as r:
        assert r.status == 401
    tenant = await open_tab()
    await tenant.sign_in(console.alice)
    assert not await tenant.page.is_visible("#nav button[data-view=keys]")


async def _start_careful(http: aiohttp.ClientSession, console: ConsoleServer, key: TenantKey) -> str:
    async with http.post(f"{console.url}/v1/agents/careful/runs", json={"input": "go"}, headers=key.headers) as r:
        run_id: str = (await r.json())["run_id"]
    async with http.get(f"{console.url}/v1/runs/{run_id}/events", headers=key.headers) as r:
        async for event in sse_events(r):
            if event.name == "human.requested":
                return run_id
    raise AssertionError(f"run {run_id} never asked")


async def _answer(http: aiohttp.ClientSession, console: ConsoleServer, run_id: str) -> None:
    """Answer the run's pending request: approve an approval, say "yes" to a question."""
    pending = await _pending(http, console, run_id)
    body = {"operation_id": pending["operation_id"], "approve": True, "args_hash": pending.get("args_hash")}
    if pending["kind"] == "question":
        body = {"operation_id": pending["operation_id"], "answer": "yes"}
    async with http.post(f"{console.url}/v1/runs/{run_id}/answer", json=body, headers=console.alice.headers) as r:
        assert r.status == 200, await r.text()


WATERFALL = """() => [...document.querySelectorAll('#run-waterfall .wf-row')].map((row) => {
    const bar = row.querySelector('.wf-bar').getBoundingClientRect();
    return {kind: row.dataset.kind, status: row.dataset.status, open: row.dataset.open === 'true',
            start: Number(row.dataset.startMs), label: row.querySelector('.wf-label').textContent,
            left: bar.left, right: bar.right};
})"""


async def _waiting_run_opened(
    open_tab: Callable[[], Awaitable[Tab]], console: ConsoleServer, http: aiohttp.ClientSession, *, by_id: bool
) -> tuple[str, Tab]:
    """A run of `careful` waiting for its first approval, opened in the runs view (by its id in
    the Open box, or from the list), its waterfall drawn up to the open human wait."""
    run_id = await _start_careful(http, console, console.alice)
    tab = await open_tab()
    await tab.sign_in(console.alice)
    await tab.view("runs")
    if by_id:
        await tab.page.fill("#runs-open-id", run_id)
        await tab.page.click("#runs-open")
    else:
        await tab.page.locator(f"#runs-table tr[data-id='{run_id}']").click()
    await tab.page.wait_for_selector("#run-waterfall .wf-row.human[data-open='true']", timeout=WAIT_MS)
    return run_id, tab


async def test_a_step_of_the_run_view_forks_the_run_and_opens_the_fork(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    # Waiting for its first approval: step 1 (the model's call) is finished, its Fork button on.
    run_id, tab = await _waiting_run_opened(open_tab, console, http, by_id=True)
    page = tab.page
    button = page.locator("#run-timeline li[data-event='model.completed'] button.fork[data-seq='1']")
    await button.click(timeout=WAIT_MS)
    # The fork opens: it links back to the original and replays step 1, so it asks again at once.
    origin = page.locator("#run-origin")
    await origin.wait_for(timeout=WAIT_MS)
    assert await origin.text_content() == f"forked from {run_id} at step 1"
    await page.wait_for_selector("#run-timeline li[data-event='run.forked']", timeout=WAIT_MS)
    await page.wait_for_selector("#run-timeline li[data-event='human.requested']", timeout=WAIT_MS)
    fork_id = await page.locator("#run-detail h2 .mono").text_content()
    assert fork_id and fork_id != run_id
    async with http.get(f"{console.url}/v1/runs/{fork_id}", headers=console.alice.headers) as r:
        fork = await r.json()
    assert fork["forked_from"] == {"run_id": run_id, "at_seq": 1} and fork["status"] == "waiting_human"
    # The step's model call came from the journal: the fork's timeline has no model call before it asks.
    assert await page.locator("#run-timeline li[data-event='model.started']").count() == 0
    await origin.click()  # and back to the original, still waiting
    await page.wait_for_selector(f"#run-detail h2 .mono:text-is('{run_id}')", timeout=WAIT_MS)


async def test_a_runs_waterfall_shows_its_steps_with_the_waiting_one_open(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    # Waiting for its first approval: the model call is done, the human wait runs on to now.
    run_id, tab = await _waiting_run_opened(open_tab, console, http, by_id=True)
    page = tab.page
    rows = await page.evaluate(WATERFALL)
    assert [(r["kind"], r["status"], r["open"]) for r in rows] == [
        ("run", "running", True),
        ("model", "completed", False),
        ("human", "waiting", True),
    ]
    run_bar, model, human = rows
    assert human["label"] == "human approval run_command"
    assert abs(run_bar["right"] - human["right"]) < 0.5  # both open-ended: to now, the right edge
    assert model["right"] <= human["left"] + 1
    assert await page.is_enabled("#run-cancel") and await page.is_enabled("#run-terminate")
    assert await page.locator("#run-trace").count() == 0  # tracing is off: no link
    for asked in (2, 3):  # two approvals (each then runs its command), then a question
        await _answer(http, console, run_id)
        await page.wait_for_function(
            f"""() => document.querySelectorAll('#run-waterfall .wf-row.human').length === {asked}
                && document.querySelector('#run-waterfall .wf-row.human:last-child').dataset.open === 'true'""",
            timeout=WAIT_MS,
        )
    await _answer(http, console, run_id)
    await page.wait_for_selector("#run-waterfall .wf-row.run[data-status='completed']", timeout=WAIT_MS)
    rows = await page.evaluate(WATERFALL)
    steps = rows[1:]
    assert {r["kind"] for r in steps} == {"model", "human", "sandbox"}
    commands = [r["label"] for r in steps if r["kind"] == "sandbox"]
    assert len(commands) == 2 and all(c.startswith("sandbox: sh -c echo step-") for c in commands), commands
    assert all(c.endswith(" · exit 0") for c in commands), commands
    assert sum(r["kind"] == "human" for r in steps) == 3
    assert all(r["status"] == "completed" and not r["open"] for r in rows)
    # Bars by time: each step starts where or after the one before it, inside the run's bar.
    assert [r["start"] for r in steps] == sorted(r["start"] for r in steps)
    assert all(a["left"] <= b["left"] + 0.5 for a, b in zip(steps, steps[1:], strict=False))
    assert all(rows[0]["left"] - 0.5 <= r["left"] and r["right"] <= rows[0]["right"] + 0.5 for r in steps)
    # A finished run can be neither cancelled nor terminated.
    assert not await page.is_enabled("#run-cancel") and not await page.is_enabled("#run-terminate")
    await tab.shoot("waterfall")


# The page's own waterfall (waterfall.js) fed a run's events that the mock's scripts never make:
# a delegation, a model call cut off by a restart and made again, and a failing command.
DELEGATION = """async () => {
    const { waterfall } = await import('./console/waterfall.js');  // the module the page runs
    const node = document.createElement('div');
    node.id = 'run-waterfall';
    document.getElementById('run-detail').replaceChildren(node);
    window.opened = [];
    const run = {run_id: 'run_p', agent: 'boss', created_ms: 1000};
    const chart = waterfall(node, run, (id) => window.opened.push(id));
    const events = [
        ['run.started', {agent: 'boss', at_ms: 1000}],
        ['model.started', {operation_id: 'run_p:1', attempt: 1, at_ms: 1010}],
        ['run.resumed', {agent: 'boss', at_ms: 1500}],
        ['model.started', {operation_id: 'run_p:1', attempt: 2, at_ms: 1510}],
        ['model.completed', {operation_id: 'run_p:1', duration_ms: 90, tool_calls: [{name: 'delegate'}], at_ms: 1600}],
        ['tool.call', {operation_id: 'run_p:2', name: 'delegate', arguments: '{}', at_ms: 1610}],
        ['run.child_started', {child_run_id: 'run_p.2', agent: 'helper', at_ms: 1620}],
        ['tool.result', {operation_id: 'run_p:2', name: 'delegate', content: 'done', at_ms: 2600}],
        ['tool.call', {operation_id: 'run_p:3', name: 'run_command', arguments: '{"command": ["false"]}', at_ms: 2610}],
        ['tool.result', {operation_id: 'run_p:3', name: 'run_command', content: '{"exit_code": 1}', at_ms: 2700}],
        ['model.started', {operation_id: 'run_p:4', attempt: 1, at_ms: 2710}],
        ['run.failed', {status: 'failed', reason: 'provider: down', at_ms: 3000}],
    ];
    for (const [name, data] of events) chart.add(name, data);
    await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
    return [...node.querySelectorAll('.wf-row')].map((row) => [row.dataset.kind, row.dataset.status,
        row.querySelector('.wf-label').textContent, row.querySelector('.wf-took').textContent]);
}"""


async def test_a_waterfall_shows_a_child_run_a_resumed_call_and_failures(open_tab, console: ConsoleServer) -> None:
    tab = await open_tab()
    await tab.sign_in(console.alice)
    await tab.view("runs")
    rows = await tab.page.evaluate(DELEGATION)
    assert rows == [
        ["run", "failed", "run (boss)", "2.00 s"],
        ["model", "interrupted", "model call", "490 ms"],  # died with its node at the restart
        ["model", "completed", "model call (attempt 2) → delegate", "90 ms"],
        ["tool", "completed", "delegate", "990 ms"],
        ["child", "completed", "child run run_p.2 (helper)", "980 ms"],  # until the delegate step's result
        ["sandbox", "failed", "sandbox: false · exit 1", "90 ms"],
        ["model", "failed", "model call", "290 ms"],  # open when the run failed
    ]
    await tab.page.click("#run-waterfall .wf-row.child")
    assert await tab.page.evaluate("() => window.opened") == ["run_p.2"]


async def test_terminating_a_waiting_run_closes_its_open_step_and_turns_the_buttons_off(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    _, tab = await _waiting_run_opened(open_tab, console, http, by_id=False)
    page = tab.page
    await page.click("#run-terminate")
    await page.wait_for_selector("#run-waterfall .wf-row.human[data-status='cancelled']", timeout=WAIT_MS)
    await page.wait_for_selector("#run-cancel:disabled", timeout=WAIT_MS)
    assert not await page.is_enabled("#run-terminate")
    assert await page.locator("#run-waterfall .wf-row[data-open='true']").count() == 0


async def test_the_run_view_links_to_the_run_trace_in_the_operators_backend(
    tmp_path: Path,
    mock_factory: Callable[..., Awaitable[MockServer]],
    browser: Browser,
    http: aiohttp.ClientSession,
) -> None:
    from agentos.telemetry import derived_ids
    from tests.api.helpers import assert_documented
    from tests.telemetry.otlp_sink import otlp_sink

    template = "http://127.0.0.1:9/trace/{trace_id}?from=agentos"
    async with otlp_sink() as sink:
        telemetry = {"enabled": True, "endpoint": sink.url, "trace_url_template": template}
        console = await start_console_server(tmp_path / "data", mock_factory, telemetry=telemetry)
        try:
            run_id = await _start_careful(http, console, console.alice)
            async with http.get(f"{console.url}/v1/runs/{run_id}", headers=console.alice.headers) as r:
                view = await r.json()
            assert_documented(view, "Run")
            trace_id = derived_ids(run_id)[0]
            assert view["trace_id"] == trace_id
            assert view["trace_url"] == template.replace("{trace_id}", trace_id)
            context = await browser.new_context(viewport={"width": 1360, "height": 860})
            tab = Tab(await context.new_page(), console.url)
            await tab.sign_in(console.alice)
            await tab.view("runs")
            await tab.page.locator(f"#runs-table tr[data-id='{run_id}']").click()
            link = tab.page.locator("#run-trace")
            await link.wait_for(timeout=WAIT_MS)
            assert await link.text_content() == "Open trace"
            assert await link.get_attribute("href") == view["trace_url"]
            assert await link.get_attribute("rel") == "noopener noreferrer"
            await context.close()
            assert tab.problems == []
        finally:
            await console.server.close()


async def test_a_run_without_tracing_has_no_trace_in_its_view(
    console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    run_id = await _start_careful(http, console, console.alice)
    async with http.get(f"{console.url}/v1/runs/{run_id}", headers=console.alice.headers) as r:
        view = await r.json()
    assert "trace_id" not in view and "trace_url" not in view


# The canvas pixels of a chart in its first series' color (#2f6fdf), and whether its axes'
# labels fit: x labels apart from each other, y labels inside the axis, the plot inside its box.
CHART = """(id) => {
    const box = document.getElementById(id), u = box.uplot, canvas = box.querySelector('canvas');
    const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let blue = 0;
    for (let i = 0; i < pixels.length; i += 4) {
        const [r, g, b] = pixels.slice(i, i + 3);
        if (Math.abs(r - 47) < 40 && Math.abs(g - 111) < 40 && Math.abs(b - 223) < 40) blue++;
    }
    const ctx = document.createElement('canvas').getContext('2d');
    const width = (axis, text) => { ctx.font = axis.font[0]; return ctx.measureText(text).width; };
    const x = u.axes[0], y = u.axes[1];
    const xs = (x._values || []).map((text, i) => ({text, at: u.valToPos(x._splits[i], 'x'), w: width(x, text)}))
        .filter((l) => l.text);
    let overlap = 0;
    for (let i = 1; i < xs.length; i++) if (xs[i].at - xs[i - 1].at < (xs[i].w + xs[i - 1].w) / 2 + 4) overlap++;
    const widest = Math.max(0, ...(y._values || []).map((text) => width(y, text)));
    const outer = box.getBoundingClientRect(), root = u.root.getBoundingClientRect();
    return {blue, overlap, xLabels: xs.length, yFits: widest + y.gap + y.ticks.size <= y._size,
            inside: root.right <= outer.right + 0.5};
}"""


async def test_sparse_chart_samples_are_drawn_and_axis_labels_fit(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    tab = await open_tab()
    await tab.sign_in(console.admin)
    page = tab.page
    await page.wait_for_function("() => Number(document.querySelector('#chart-turns').dataset.points) >= 2")
    await _turns(http, console, count=2)  # one second's sample, with nothing either side
    await page.wait_for_function(
        "() => Number(document.querySelector('#chart-ttft').dataset.values) >= 1", timeout=WAIT_MS
    )
    for chart in ("chart-ttft", "chart-duration"):
        await page.wait_for_function(f"() => ({CHART})('{chart}').blue > 0", timeout=WAIT_MS)
    await page.wait_for_function("() => Number(document.querySelector('#chart-turns').dataset.points) >= 5")
    for chart in await page.eval_on_selector_all(".chart", "(boxes) => boxes.map((b) => b.id)"):
        shown = await page.evaluate(f"({CHART})('{chart}')")
        assert shown["overlap"] == 0 and shown["xLabels"] >= 2, (chart, shown)
        assert shown["yFits"] and shown["inside"], (chart, shown)


# The page's own chart (live.js `lineChart`) with the samples a quiet or a slow server gives.
PROBE = """async ([id, columns]) => {
    const { lineChart } = await import('./console/live.js');  // the module the page runs
    const box = document.createElement('div');
    box.className = 'chart';
    box.id = id;
    document.getElementById('live-charts').append(box);
    const now = Date.now() / 1000;
    const u = lineChart(box, ['p50', 'p95'], [columns[0].map((ago) => now - ago), ...columns.slice(1)]);
    await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
    return {...(CHART)(id), window: u.scales.x.max - u.scales.x.min};
}""".replace("CHART", CHART)


@pytest.mark.parametrize(
    "columns",
    [
        [[0], [5], [None]],  # the first sample: one point
        [[1, 0], [None, 12_345.6], [None, 23_456.7]],  # two points, one value, large
        [[3, 2, 1, 0], [None, 1_234_567, None, 7], [2_500_000, None, None, 9]],  # lone values, huge
    ],
)
async def test_a_chart_draws_one_or_two_samples_with_labels_that_fit(
    open_tab, console: ConsoleServer, columns: list[list[float | None]]
) -> None:
    tab = await open_tab()
    await tab.sign_in(console.admin)
    shown = await tab.page.evaluate(PROBE, ["chart-probe", columns])
    assert shown["blue"] >= 30, shown  # a visible dot, at least
    assert 119 <= shown["window"] <= 125, shown  # the last two minutes, not a year or a second
    assert shown["overlap"] == 0 and shown["xLabels"] >= 2, shown
    assert shown["yFits"] and shown["inside"], shown


async def test_inbox_cards_keep_their_order_and_agent_after_an_answer(
    open_tab, console: ConsoleServer, http: aiohttp.ClientSession
) -> None:
    first = await _start_careful(http, console, console.alice)
    second = await _start_careful(http, console, console.alice)
    tab = await open_tab()
    await tab.sign_in(console.alice)
    await tab.view("inbox")
    page = tab.page
    order = "() => [...document.querySelectorAll('.inbox-item')].map((c) => c.dataset.run)"
    await page.wait_for_function(f"() => ({order})().length === 2", timeout=WAIT_MS)
    assert await page.evaluate(order) == [first, second]  # oldest run first
    await page.locator(f".inbox-item[data-run='{second}'] input.answer").fill("typed, not sent")
    card = page.locator(f".inbox-item[data-run='{first}']")
    await card.locator("button.approve").click()
    await card.locator("pre.arguments").filter(has_text="step-2").wait_for(timeout=WAIT_MS)  # asked again
    assert await page.evaluate(order) == [first, second]
    assert "· careful" in (await card.locator(".hint").first.text_content() or "")
    assert await page.locator(f".inbox-item[data-run='{second}'] input.answer").input_value() == "typed, not sent"
    # A run that starts asking after the tab opened shows its agent too, last (the newest).
    third = await _start_careful(http, console, console.alice)
    late = page.locator(f".inbox-item[data-run='{third}'] .hint").first
    await late.filter(has_text="· careful").wait_for(timeout=WAIT_MS)
    assert await page.evaluate(order) == [first, second, third]


async def test_empty_tables_say_so(open_tab, console: ConsoleServer) -> None:
    tab = await open_tab()
    await tab.sign_in(console.bob)  # a tenant with nothing yet
    for view, table, text in (
        ("runs", "#runs-table", "No runs match."),
        ("sessions", "#sessions-table", "No sessions yet."),
        ("usage", "#usage-table", "No model calls in this range."),
    ):
        await tab.view(view)
        await tab.page.wait_for_selector(f"{table} tr.empty:has-text('{text}')", timeout=WAIT_MS)
        assert await tab.page.locator(f"{table} tr.row").count() == 0
