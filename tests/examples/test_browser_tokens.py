"""examples/browser_tokens in a real browser (headless Chromium, tests/browser.py): a user signs in
at the example's identity provider, the example's back end mints a browser token with the tenant
key it alone holds, and the page streams a turn straight from Agent OS over a WebSocket.

The real Agent OS on a loopback port with the real mock provider over HTTP, the example's own
identity provider and back end on their own ports, as its README runs them. Not at the unit level
on purpose: the example is documentation, and this test keeps it true.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import aiohttp
import pytest
from aiohttp import web

from agentos.mock.server import MockServer
from agentos.testing import RunningServer, start_server
from agentos.testing.tenants import TenantKey, create_tenant_key
from tests.browser import chromium
from tests.conftest import make_settings

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "browser_tokens"
ADMIN_TOKEN = "admin-token-for-the-example"
WAIT_MS = 15_000


def load(monkeypatch: pytest.MonkeyPatch, name: str, path: Path) -> ModuleType:
    """`path` imported as module `name`, in sys.modules until the test ends (dataclasses look
    their module up there; app.py imports `idp` by that name, as it does run from its folder)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def example_modules(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """The example's idp.py and app.py (`app` is too common a name to import it under)."""
    return load(monkeypatch, "idp", EXAMPLE / "idp.py"), load(monkeypatch, "browser_tokens_app", EXAMPLE / "app.py")


def listening() -> socket.socket:
    """A bound, listening socket: its port is known before the app that serves it is built."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@dataclass
class Deployment:
    agentos: RunningServer
    key: TenantKey
    app_url: str
    closed: bool = False

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.agentos.close()


@pytest.fixture
async def deployment(tmp_path: Path, mock: MockServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Deployment]:
    idp, app = example_modules(monkeypatch)
    app_sock, idp_sock = listening(), listening()
    app_url = f"http://127.0.0.1:{app_sock.getsockname()[1]}"
    issuer = f"http://127.0.0.1:{idp_sock.getsockname()[1]}"
    overrides = {"server.api_token": ADMIN_TOKEN, "server.allowed_origins": [app_url], "server.access_log": True}
    agentos = await start_server(make_settings(tmp_path / "data", mock.url, **overrides))
    runners: list[web.AppRunner] = []
    deployed: Deployment | None = None
    try:
        key = await create_tenant_key(agentos.url, ADMIN_TOKEN, scopes=["sessions:read", "sessions:write"])
        client = idp.Client("example", "example-secret", f"{app_url}/callback")
        provider = idp.Provider(issuer, {"example": client}, {"alice": "wonderland"})
        config = app.Config(app_url, agentos.url, key.key, issuer, client)
        for served, sock in ((idp.identity_provider(provider), idp_sock), (app.back_end(config), app_sock)):
            runner = web.AppRunner(served)
            await runner.setup()
            runners.append(runner)
            await web.SockSite(runner, sock).start()
        deployed = Deployment(agentos, key, app_url)
        yield deployed
    finally:
        for runner in runners:
            await runner.cleanup()
        await (deployed.close() if deployed is not None else agentos.close())


async def test_a_signed_in_user_streams_a_turn_from_the_page(deployment: Deployment, tmp_path: Path) -> None:
    async with chromium() as browser:
        page = await browser.new_page()
        urls: list[str] = []
        page.on("request", lambda request: urls.append(request.url))
        page.on("websocket", lambda socket: urls.append(socket.url))
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        await page.goto(deployment.app_url)  # not signed in: off to the identity provider
        await page.fill("#username", "alice")
        await page.fill("#password", "wonderland")
        await page.click("#sign-in")
        await page.wait_for_url(f"{deployment.app_url}/", timeout=WAIT_MS)
        async with page.expect_response("**/api/browser-token") as minted:
            await page.click("#send")
        token = (await (await minted.value).json())["token"]
        await page.wait_for_function(
            "() => document.getElementById('status').textContent === 'completed'", timeout=WAIT_MS
        )
        output = await page.text_content("#output")
        who = await page.text_content("#who")
    assert problems == []
    assert output and who == "Signed in as alice."

    async with aiohttp.ClientSession() as http:  # Agent OS holds the turn, in alice's session
        sessions_url = f"{deployment.agentos.url}/v1/sessions"
        async with http.get(sessions_url, headers=deployment.key.headers) as r:
            (session,) = (await r.json())["data"]
        assert session["metadata"] == {"user": "alice"}
        async with http.get(f"{sessions_url}/{session['id']}/messages", headers=deployment.key.headers) as r:
            messages = (await r.json())["data"]
    assert [m["role"] for m in messages] == ["user", "assistant"] and messages[1]["content"] == output

    # The token never travelled in a URL: not in the page's requests, not in Agent OS's access log.
    assert f"{deployment.agentos.url.replace('http', 'ws')}/v1/sessions/{session['id']}/ws" in urls
    assert all(token not in url for url in urls), urls
    await deployment.close()  # flushes the access log
    signature = token.rsplit(".", 1)[1].encode()
    for path in (tmp_path / "data").iterdir():
        if path.is_file():
            assert signature not in path.read_bytes(), path
